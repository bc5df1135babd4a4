//! A recording fake [`Backend`] for tests: it records every call, keeps instances in memory,
//! fails the calls a test scripts, can hold starts until released, and lets a test make an
//! instance exit on its own.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use uuid::Uuid;

pub use super::Op;
use super::console::last_lines;
use super::{Backend, BackendError, ConsoleError, Existing, Power};
use crate::model::{Action, InstanceSpec, NicSpec, Resources, Usage, VolumeSpec};

/// One recorded call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Call {
    /// What was called.
    pub op: Op,
    /// For which instance.
    pub instance: Uuid,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    lists: usize,
    instances: HashMap<Uuid, watch::Sender<Power>>,
    failures: HashMap<Op, VecDeque<BackendError>>,
    usage: Usage,
    filtered: Vec<(Uuid, NicSpec)>,
    /// Each attached volume's instance and device.
    volumes: HashMap<Uuid, (Uuid, String)>,
    /// The volumes removed, in order.
    removed_volumes: Vec<Uuid>,
}

/// The recording fake. Clones share one state.
#[derive(Clone)]
pub struct FakeBackend {
    state: Arc<Mutex<State>>,
    start_gate: watch::Sender<bool>,
    stats_gate: watch::Sender<bool>,
}

impl Default for FakeBackend {
    fn default() -> FakeBackend {
        FakeBackend::new()
    }
}

impl FakeBackend {
    /// An empty fake whose calls all succeed.
    pub fn new() -> FakeBackend {
        FakeBackend {
            state: Arc::new(Mutex::new(State::default())),
            start_gate: watch::Sender::new(true),
            stats_gate: watch::Sender::new(true),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Every [`Backend::filter_port`] so far (instance, NIC), in order.
    pub fn filtered(&self) -> Vec<(Uuid, NicSpec)> {
        self.lock().filtered.clone()
    }

    /// The calls so far for one instance, in order.
    pub fn ops(&self, instance: Uuid) -> Vec<Op> {
        let state = self.lock();
        state
            .calls
            .iter()
            .filter(|c| c.instance == instance)
            .map(|c| c.op)
            .collect()
    }

    /// How many times [`Backend::list`] was called.
    pub fn lists(&self) -> usize {
        self.lock().lists
    }

    /// Makes the next call of `op` (for any instance) fail with `error`. Several queue up.
    pub fn fail_next(&self, op: Op, error: BackendError) {
        self.lock().failures.entry(op).or_default().push_back(error);
    }

    /// Makes starts wait until [`FakeBackend::release_starts`].
    pub fn hold_starts(&self) {
        self.start_gate.send_replace(false);
    }

    /// Lets held starts (and later ones) go on.
    pub fn release_starts(&self) {
        self.start_gate.send_replace(true);
    }

    /// Makes [`Backend::stats`] wait until [`FakeBackend::release_stats`] (a backend whose
    /// daemon is slow to answer).
    pub fn hold_stats(&self) {
        self.stats_gate.send_replace(false);
    }

    /// Lets held stats calls (and later ones) go on.
    pub fn release_stats(&self) {
        self.stats_gate.send_replace(true);
    }

    /// Puts an instance there as if it had been made before, in `power`.
    pub fn insert(&self, instance: Uuid, power: Power) {
        self.lock()
            .instances
            .insert(instance, watch::Sender::new(power));
    }

    /// Makes a running instance exit on its own.
    pub fn exit(&self, instance: Uuid) {
        self.set_power(instance, Power::Off);
    }

    fn set_power(&self, instance: Uuid, power: Power) {
        if let Some(tx) = self.lock().instances.get(&instance) {
            tx.send_replace(power);
        }
    }

    /// Whether the instance exists, and its power state.
    pub fn status(&self, instance: Uuid) -> Option<Power> {
        self.lock().instances.get(&instance).map(|tx| *tx.borrow())
    }

    /// What [`Backend::stats`] reports for each running instance.
    pub fn set_usage(&self, usage: Usage) {
        self.lock().usage = usage;
    }

    fn record(&self, op: Op, instance: Uuid) -> Result<(), BackendError> {
        let mut state = self.lock();
        state.calls.push(Call { op, instance });
        match state.failures.get_mut(&op).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl FakeBackend {
    /// The instance and device each attached volume has, as attach and detach left them.
    pub fn volumes(&self) -> HashMap<Uuid, (Uuid, String)> {
        self.lock().volumes.clone()
    }

    /// The volumes [`Backend::delete_volume`] removed, in order.
    pub fn removed_volumes(&self) -> Vec<Uuid> {
        self.lock().removed_volumes.clone()
    }

    /// The data [`Backend::export_disk`] writes for `instance`.
    pub fn disk_of(instance: Uuid) -> Vec<u8> {
        format!("the disk of {instance}\n")
            .repeat(1000)
            .into_bytes()
    }
}

impl Backend for FakeBackend {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        self.record(Op::Create, spec.instance)?;
        let mut state = self.lock();
        if state.instances.contains_key(&spec.instance) {
            return Err(BackendError::Exists);
        }
        state
            .instances
            .insert(spec.instance, watch::Sender::new(Power::Off));
        Ok(())
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        let mut gate = self.start_gate.subscribe();
        // The sender lives in `self`: waiting cannot fail.
        let _ = gate.wait_for(|open| *open).await;
        self.record(Op::Start, instance)?;
        match self.lock().instances.get(&instance) {
            Some(tx) => {
                tx.send_replace(Power::Running);
                Ok(())
            }
            None => Err(BackendError::NotFound),
        }
    }

    async fn wait_exit(&self, instance: Uuid) {
        let rx = self
            .lock()
            .instances
            .get(&instance)
            .map(watch::Sender::subscribe);
        if let Some(mut rx) = rx {
            // An error means the instance was removed: it does not run either way.
            let _ = rx.wait_for(|power| !power.is_active()).await;
        }
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        self.record(Op::Stop, instance)?;
        self.set_power(instance, Power::Off);
        Ok(())
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        self.record(Op::Resize(resources), instance)?;
        if self.lock().instances.contains_key(&instance) {
            Ok(())
        } else {
            Err(BackendError::NotFound)
        }
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        self.record(Op::Act(action), instance)?;
        let power = match action {
            Action::Reboot | Action::RebootHard | Action::Unpause | Action::Resume => {
                Power::Running
            }
            Action::Pause => Power::Paused,
            Action::Suspend => Power::Saved,
        };
        match self.lock().instances.get(&instance) {
            Some(tx) => {
                tx.send_replace(power);
                Ok(())
            }
            None => Err(BackendError::NotFound),
        }
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        self.record(Op::Delete, instance)?;
        if let Some(tx) = self.lock().instances.remove(&instance) {
            tx.send_replace(Power::Off);
        }
        Ok(())
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        let mut gate = self.stats_gate.subscribe();
        // The sender lives in `self`: waiting cannot fail.
        let _ = gate.wait_for(|open| *open).await;
        let state = self.lock();
        state
            .instances
            .iter()
            .filter(|(_, tx)| tx.borrow().is_active())
            .map(|(id, _)| (*id, state.usage))
            .collect()
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        let mut state = self.lock();
        state.lists += 1;
        Ok(state
            .instances
            .iter()
            .map(|(id, tx)| Existing {
                instance: *id,
                power: *tx.borrow(),
            })
            .collect())
    }

    /// A log of one line per recorded call on the instance (`Create`, `Start`, ...).
    async fn console(&self, instance: Uuid, lines: usize) -> Result<String, ConsoleError> {
        let state = self.lock();
        if !state.instances.contains_key(&instance) {
            return Err(ConsoleError::NotFound);
        }
        let log: String = state
            .calls
            .iter()
            .filter(|c| c.instance == instance)
            .map(|c| format!("{:?}\n", c.op))
            .collect();
        Ok(last_lines(log.as_bytes(), lines))
    }

    /// Writes [`FakeBackend::disk_of`] the instance; `NotFound` for one it does not have.
    async fn export_disk(
        &self,
        instance: Uuid,
        to: &std::path::Path,
    ) -> Result<(), crate::backend::ExportError> {
        if !self.lock().instances.contains_key(&instance) {
            return Err(crate::backend::ExportError::NotFound);
        }
        std::fs::write(to, FakeBackend::disk_of(instance))
            .map_err(|e| crate::backend::ExportError::Failed(e.to_string()))
    }

    /// Records the attachment ([`FakeBackend::volumes`]); `NotFound` for an instance it does not
    /// have; another instance's volume is an error.
    async fn attach_volume(&self, instance: Uuid, volume: &VolumeSpec) -> Result<(), BackendError> {
        self.record(Op::Attach, instance)?;
        let mut state = self.lock();
        if !state.instances.contains_key(&instance) {
            return Err(BackendError::NotFound);
        }
        match state.volumes.get(&volume.id) {
            Some((other, _)) if *other != instance => Err(BackendError::Other(format!(
                "volume {} is attached to {other}",
                volume.id
            ))),
            _ => {
                state
                    .volumes
                    .insert(volume.id, (instance, volume.device.clone()));
                Ok(())
            }
        }
    }

    /// Forgets the attachment.
    async fn detach_volume(
        &self,
        instance: Uuid,
        volume: &VolumeSpec,
        _force: bool,
    ) -> Result<(), BackendError> {
        self.record(Op::Detach, instance)?;
        let mut state = self.lock();
        if state
            .volumes
            .get(&volume.id)
            .is_some_and(|(i, _)| *i == instance)
        {
            state.volumes.remove(&volume.id);
        }
        Ok(())
    }

    /// Records the removal ([`FakeBackend::removed_volumes`]); an attached volume is an error.
    async fn delete_volume(&self, volume: Uuid) -> Result<(), BackendError> {
        let mut state = self.lock();
        if let Some((instance, _)) = state.volumes.get(&volume) {
            return Err(BackendError::Other(format!(
                "volume {volume} is attached to {instance}"
            )));
        }
        state.removed_volumes.push(volume);
        Ok(())
    }

    /// Records the NIC ([`FakeBackend::filtered`]); `NotFound` for an instance it does not have.
    async fn filter_port(&self, instance: Uuid, nic: &NicSpec) -> Result<(), BackendError> {
        let mut state = self.lock();
        if !state.instances.contains_key(&instance) {
            return Err(BackendError::NotFound);
        }
        state.filtered.push((instance, nic.clone()));
        Ok(())
    }
}
