//! An instance task's volumes: attach, detach, and finishing either after a restart.

use uuid::Uuid;

use super::{Task, Update};
use crate::backend::{Backend, BackendError};
use crate::model::{
    InstanceEvent, InstanceSpec, InstanceState, MAX_VOLUMES, VolumePhase, VolumeRefusal,
    VolumeSpec, volume_device_ok,
};

/// Volumes: attach, detach, and finishing either after a restart.
impl<B: Backend> Task<B> {
    fn volume_failed(
        &self,
        volume: Uuid,
        detach: bool,
        reason: VolumeRefusal,
        message: impl Into<String>,
    ) -> InstanceEvent {
        InstanceEvent::VolumeFailed {
            instance: self.instance,
            volume,
            detach,
            reason,
            message: Some(message.into()),
        }
    }

    /// Writes the spec's volumes to the record and tells the owner which the guest has; false
    /// (logged) when the record could not be written.
    async fn volumes_changed(&self) -> bool {
        let Some(spec) = self.spec.clone() else {
            return false;
        };
        let volumes = spec.attached_volumes();
        let persisted = self
            .persist("writing the instance record", move |s| s.update_spec(spec))
            .await;
        self.send(Update::Volumes(self.instance, volumes)).await;
        persisted
    }

    /// Why the instance's state does not take a volume change, if it does not: only a running,
    /// paused or stopped (kept) instance does.
    fn volume_state(state: InstanceState) -> Option<String> {
        match state {
            InstanceState::Active | InstanceState::Paused | InstanceState::Exited => None,
            other => Some(format!(
                "the instance is {}: volumes change only while it runs, is paused or is stopped",
                format!("{other:?}").to_lowercase()
            )),
        }
    }

    /// The device a new volume takes: the one asked (if free and valid), else the first free.
    fn device_for(spec: &InstanceSpec, asked: &str) -> Result<String, String> {
        let taken = |d: &str| spec.volumes.iter().any(|v| v.device == d);
        if !asked.is_empty() {
            if !volume_device_ok(asked) {
                return Err(format!("device {asked:?} is not one of vdb to vdz"));
            }
            if taken(asked) {
                return Err(format!("device {asked} is taken by another volume"));
            }
            return Ok(asked.to_string());
        }
        (b'b'..=b'z')
            .map(|c| format!("vd{}", c as char))
            .find(|d| !taken(d))
            .ok_or_else(|| format!("the instance has {MAX_VOLUMES} volumes: no device is free"))
    }

    /// ATTACH_VOLUME: recorded as attaching, attached by the backend, recorded as attached
    /// (STATS lists it from then on); a failure removes it from the record and is reported.
    pub(super) async fn attach(&mut self, state: InstanceState, mut volume: VolumeSpec) {
        let id = volume.id;
        if let Some(why) = Self::volume_state(state) {
            self.event(self.volume_failed(id, false, VolumeRefusal::InvalidState, why))
                .await;
            return;
        }
        let Some(spec) = self.spec.as_mut() else {
            let why = "the instance's record cannot be read";
            self.event(self.volume_failed(id, false, VolumeRefusal::InvalidState, why))
                .await;
            return;
        };
        if let Some(had) = spec.volumes.iter().find(|v| v.id == id) {
            // A repeat of an attach that was done: STATS says so already.
            if had.phase != VolumePhase::Attached {
                let why = "the volume is being detached from this instance";
                self.event(self.volume_failed(id, false, VolumeRefusal::InvalidState, why))
                    .await;
            }
            return;
        }
        let device = match spec.volumes.len() {
            n if n >= MAX_VOLUMES => Err(format!("the instance has {n} volumes already")),
            _ => Self::device_for(spec, &volume.device),
        };
        volume.device = match device {
            Ok(device) => device,
            Err(why) => {
                self.event(self.volume_failed(id, false, VolumeRefusal::InvalidData, why))
                    .await;
                return;
            }
        };
        volume.phase = VolumePhase::Attaching;
        spec.volumes.push(volume.clone());
        if !self.volumes_changed().await {
            self.forget_volume(id).await;
            let why = "the node could not record the attachment (see the agent's log)";
            self.event(self.volume_failed(id, false, VolumeRefusal::BackendFailure, why))
                .await;
            return;
        }
        let began = std::time::Instant::now();
        match self.backend.attach_volume(self.instance, &volume).await {
            Ok(()) => {
                tracing::info!(instance = %self.instance, volume = %id, device = %volume.device, took = ?began.elapsed(), "volume attached");
                self.set_phase(id, VolumePhase::Attached).await;
            }
            Err(e) => {
                tracing::warn!(instance = %self.instance, volume = %id, error = %e, "attach failed");
                self.forget_volume(id).await;
                let reason = volume_refusal(&e);
                self.event(self.volume_failed(id, false, reason, e.message()))
                    .await;
            }
        }
    }

    /// DETACH_VOLUME: recorded as detaching, detached by the backend, removed from the record
    /// (STATS no longer lists it); a failure leaves it attached and is reported. A volume the
    /// instance does not have is nothing to do (STATS does not list it).
    pub(super) async fn detach(&mut self, state: InstanceState, volume: Uuid, force: bool) {
        let Some(had) = self
            .spec
            .as_ref()
            .and_then(|s| s.volumes.iter().find(|v| v.id == volume))
            .cloned()
        else {
            tracing::info!(instance = %self.instance, %volume, "detach of a volume not attached: nothing to do");
            return;
        };
        if let Some(why) = Self::volume_state(state) {
            self.event(self.volume_failed(volume, true, VolumeRefusal::InvalidState, why))
                .await;
            return;
        }
        if had.phase == VolumePhase::Attaching {
            let why = "the volume is still being attached";
            self.event(self.volume_failed(volume, true, VolumeRefusal::InvalidState, why))
                .await;
            return;
        }
        self.set_phase(volume, VolumePhase::Detaching { force })
            .await;
        let began = std::time::Instant::now();
        match self.backend.detach_volume(self.instance, &had, force).await {
            Ok(()) => {
                tracing::info!(instance = %self.instance, %volume, force, took = ?began.elapsed(), "volume detached");
                self.forget_volume(volume).await;
            }
            Err(e) => {
                tracing::warn!(instance = %self.instance, %volume, error = %e, "detach failed");
                self.set_phase(volume, VolumePhase::Attached).await;
                let reason = volume_refusal(&e);
                self.event(self.volume_failed(volume, true, reason, e.message()))
                    .await;
            }
        }
    }

    async fn set_phase(&mut self, volume: Uuid, phase: VolumePhase) {
        if let Some(v) = self
            .spec
            .as_mut()
            .and_then(|s| s.volumes.iter_mut().find(|v| v.id == volume))
        {
            v.phase = phase;
        }
        self.volumes_changed().await;
    }

    async fn forget_volume(&mut self, volume: Uuid) {
        if let Some(spec) = self.spec.as_mut() {
            spec.volumes.retain(|v| v.id != volume);
        }
        self.volumes_changed().await;
    }

    /// Found again after a restart: an attach or a detach that the agent's death cut short is
    /// finished (the backend's calls are idempotent), so that the attachment is on both sides
    /// (record and guest) or on neither; a failure is reported as the command's would have been.
    pub(super) async fn settle_volumes(&mut self) {
        let Some(spec) = self.spec.as_ref() else {
            return;
        };
        let unsettled: Vec<VolumeSpec> = spec
            .volumes
            .iter()
            .filter(|v| v.phase != VolumePhase::Attached)
            .cloned()
            .collect();
        for volume in unsettled {
            let id = volume.id;
            match volume.phase {
                VolumePhase::Attaching => {
                    match self.backend.attach_volume(self.instance, &volume).await {
                        Ok(()) => {
                            tracing::info!(instance = %self.instance, volume = %id, "an attach cut short: finished");
                            self.set_phase(id, VolumePhase::Attached).await;
                        }
                        Err(e) => {
                            tracing::warn!(instance = %self.instance, volume = %id, error = %e, "an attach cut short failed");
                            // Nothing of it may stay in the guest's definition.
                            let _ = self
                                .backend
                                .detach_volume(self.instance, &volume, true)
                                .await;
                            self.forget_volume(id).await;
                            let reason = volume_refusal(&e);
                            self.event(self.volume_failed(id, false, reason, e.message()))
                                .await;
                        }
                    }
                }
                VolumePhase::Detaching { force } => {
                    match self
                        .backend
                        .detach_volume(self.instance, &volume, force)
                        .await
                    {
                        Ok(()) => {
                            tracing::info!(instance = %self.instance, volume = %id, "a detach cut short: finished");
                            self.forget_volume(id).await;
                        }
                        Err(e) => {
                            self.set_phase(id, VolumePhase::Attached).await;
                            let reason = volume_refusal(&e);
                            self.event(self.volume_failed(id, true, reason, e.message()))
                                .await;
                        }
                    }
                }
                VolumePhase::Attached => {}
            }
        }
    }
}

/// The refusal a backend error makes of an attach or a detach.
fn volume_refusal(error: &BackendError) -> VolumeRefusal {
    match error {
        BackendError::NotFound => VolumeRefusal::NoInstance,
        BackendError::Unsupported(_) => VolumeRefusal::Unsupported,
        _ => VolumeRefusal::BackendFailure,
    }
}
