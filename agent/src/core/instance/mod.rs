//! One task per instance: it runs that instance's commands in order (launch, stop, boot,
//! actions, remove), keeps its record on disk in step, watches it for an exit of its own while
//! it runs, and tells the owner what happened through [`Update`]s. It never touches the node's
//! accounting.
//!
//! A stop powers the instance off and keeps it (disks, definition, record): it stays `exited`
//! until a START with `restart` boots it again, or a DELETE removes it. Only a delete (or a
//! launch that failed) removes an instance's files.

use ssntp::payload::Firewall;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::backend::{Backend, BackendError};
use crate::model::{
    Action, ActionRefusal, DeleteRefusal, InstanceEvent, InstanceSpec, InstanceState, Resources,
    StartRefusal, StopCause, VolumeRefusal, VolumeSpec,
};
use crate::store::{Desired, Record, Store};

mod volumes;

/// A command for one instance, queued in its task.
#[derive(Debug)]
pub(crate) enum InstanceCommand {
    /// Power it off and keep it, for `cause`.
    Stop(StopCause),
    /// Boot it from its kept disks (a START with `restart`), with new resources first when
    /// the START asks for others than it has (a resize).
    Boot(Option<Resources>),
    /// Boot it if an evacuation stopped it (RESTORE).
    Restore,
    /// Carry out an action.
    Act(Action),
    /// Stop it and remove everything of it, then report it deleted: a delete (`stop: None`),
    /// an instance a restart found nothing of, or a record of an older agent (stopped for
    /// `cause`).
    Remove {
        /// Why it is stopped, when it is not a plain delete.
        stop: Option<StopCause>,
    },
    /// Filter its NIC with a newer firewall and keep that in its record; the outcome goes to
    /// the reply (dropped unanswered if the instance is gone: not found).
    Firewall(Box<Firewall>, oneshot::Sender<Result<(), FirewallRefusal>>),
    /// Attach a volume (ATTACH_VOLUME).
    Attach(Box<VolumeSpec>),
    /// Detach a volume (DETACH_VOLUME).
    Detach {
        /// The volume.
        volume: Uuid,
        /// Even if the guest does not release it.
        force: bool,
    },
}

/// Why a firewall update was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FirewallRefusal {
    /// The node has no such instance.
    #[error("no such instance on this node")]
    NotFound,
    /// The instance has no tenant NIC.
    #[error("the instance has no tenant NIC")]
    NoNic,
    /// The instance's queue is full.
    #[error("the instance is busy: try again")]
    Busy,
    /// Filtering failed (nft refused, the VNIC is not plugged in).
    #[error("{0}")]
    Apply(String),
}

/// What an instance task tells the owner, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Update {
    /// The instance's state changed.
    State(Uuid, InstanceState),
    /// An event to report as it is.
    Event(InstanceEvent),
    /// Nothing of the instance is left: forget it (and its reservation).
    Forget(Uuid),
    /// It was resized: it reserves this now.
    Reserved(Uuid, Resources),
    /// The volumes its guest has now.
    Volumes(Uuid, Vec<Uuid>),
}

/// The first thing a new instance task does.
#[derive(Debug)]
pub(crate) enum Job {
    /// Create and boot it.
    Launch,
    /// It is there already (re-attached after a restart) in this state: watch it if it runs.
    Attach(InstanceState),
    /// It was found powered off although it should run: keep it stopped, and say so.
    Lost,
    /// Its leftovers stay until a remove succeeds.
    Leftovers,
    /// Remove it (found being removed, or gone, after a restart).
    Remove(Option<StopCause>),
}

/// What an instance task works with.
pub(crate) struct Task<B> {
    pub instance: Uuid,
    /// Its spec; `None` when its record could not be read (leftovers of unknown shape).
    pub spec: Option<InstanceSpec>,
    pub backend: Arc<B>,
    pub store: Store,
    pub updates: mpsc::Sender<Update>,
    /// Why it was last powered off (`None` while it runs, or when unknown).
    pub stopped_by: Option<StopCause>,
}

/// Where an instance stands between commands: its state, or gone.
type Now = Option<InstanceState>;

impl<B: Backend> Task<B> {
    /// Runs the instance's task until nothing of it is left or the owner goes away.
    pub(crate) async fn run(mut self, job: Job, mut commands: mpsc::Receiver<InstanceCommand>) {
        if matches!(job, Job::Attach(_) | Job::Lost) {
            self.refilter().await;
            self.settle_volumes().await;
        }
        let mut now: Now = match job {
            Job::Launch => self.launch().await,
            Job::Attach(state) => Some(state),
            Job::Lost => self.lost().await,
            Job::Leftovers => Some(InstanceState::ExitFailed),
            Job::Remove(stop) => self.remove(stop).await,
        };
        while let Some(state) = now {
            let watch = matches!(state, InstanceState::Active | InstanceState::Paused);
            let command = if watch {
                tokio::select! {
                    command = commands.recv() => command,
                    () = self.backend.wait_exit(self.instance) => {
                        now = self.exited().await;
                        continue;
                    }
                }
            } else {
                commands.recv().await
            };
            // No command: the owner is shutting down; the instance stays as it is.
            let Some(command) = command else { return };
            now = self.command(state, command).await;
        }
        // Gone: commands queued behind the one that removed it find no instance.
        commands.close();
        while let Ok(command) = commands.try_recv() {
            self.refuse_gone(command).await;
        }
    }

    async fn command(&mut self, state: InstanceState, command: InstanceCommand) -> Now {
        match command {
            InstanceCommand::Remove { stop } => self.remove(stop).await,
            InstanceCommand::Stop(cause) => self.stop(state, cause).await,
            InstanceCommand::Boot(resize) => self.boot(state, resize).await,
            InstanceCommand::Restore => {
                if state == InstanceState::Exited && self.stopped_by == Some(StopCause::Evacuated) {
                    self.boot(state, None).await
                } else {
                    Some(state)
                }
            }
            InstanceCommand::Act(action) => self.act(state, action).await,
            InstanceCommand::Firewall(firewall, reply) => {
                let _ = reply.send(self.firewall(*firewall).await);
                Some(state)
            }
            InstanceCommand::Attach(volume) => {
                self.attach(state, *volume).await;
                Some(state)
            }
            InstanceCommand::Detach { volume, force } => {
                self.detach(state, volume, force).await;
                Some(state)
            }
        }
    }

    /// Found again after a restart: its NIC is served by the metadata service and filtered
    /// again as its record says (the agent makes both afresh when it starts).
    async fn refilter(&self) {
        let Some(spec) = self.spec.as_ref() else {
            return;
        };
        let Some(nic) = spec.nic.as_ref() else {
            return;
        };
        if let Err(e) = self.backend.serve_metadata(spec).await {
            tracing::error!(instance = %self.instance, error = %e, "serving the metadata again");
        }
        if let Err(e) = self.backend.filter_port(self.instance, nic).await {
            tracing::error!(instance = %self.instance, error = %e, "filtering the NIC again");
        }
    }

    /// A newer firewall: filter the NIC with it, then keep it in the record (so that a restart
    /// applies the newest). One not newer than the one in force changes nothing.
    async fn firewall(&mut self, firewall: Firewall) -> Result<(), FirewallRefusal> {
        let spec = self.spec.as_ref().ok_or(FirewallRefusal::NotFound)?;
        let nic = spec.nic.as_ref().ok_or(FirewallRefusal::NoNic)?;
        if nic
            .firewall
            .as_ref()
            .is_some_and(|f| f.revision >= firewall.revision)
        {
            return Ok(());
        }
        let mut nic = nic.clone();
        nic.firewall = Some(firewall);
        self.backend
            .filter_port(self.instance, &nic)
            .await
            .map_err(|e| FirewallRefusal::Apply(e.to_string()))?;
        let mut spec = spec.clone();
        spec.nic = Some(nic);
        self.spec = Some(spec.clone());
        // The record keeps what it wants (running, stopped, ...): only its spec changes.
        let persisted = self
            .persist("writing the instance record", move |s| s.update_spec(spec))
            .await;
        if !persisted {
            return Err(FirewallRefusal::Apply(
                "applied, but the node could not record it (see the agent's log)".into(),
            ));
        }
        Ok(())
    }

    /// The answer to a command that found the instance gone.
    async fn refuse_gone(&self, command: InstanceCommand) {
        let instance = self.instance;
        let event = match command {
            InstanceCommand::Remove {
                stop: None | Some(StopCause::Requested),
            }
            | InstanceCommand::Stop(StopCause::Requested) => InstanceEvent::DeleteFailed {
                instance,
                reason: DeleteRefusal::NoInstance,
            },
            InstanceCommand::Boot(_) => InstanceEvent::StartFailed {
                instance,
                reason: StartRefusal::InstanceMissing,
                restart: true,
                message: Some("the instance was removed from its node".into()),
            },
            InstanceCommand::Act(action) => InstanceEvent::ActionFailed {
                instance,
                action,
                reason: ActionRefusal::NoInstance,
                message: None,
            },
            InstanceCommand::Attach(volume) => InstanceEvent::VolumeFailed {
                instance,
                volume: volume.id,
                detach: false,
                reason: VolumeRefusal::NoInstance,
                message: None,
            },
            InstanceCommand::Detach { volume, .. } => InstanceEvent::VolumeFailed {
                instance,
                volume,
                detach: true,
                reason: VolumeRefusal::NoInstance,
                message: None,
            },
            _ => return,
        };
        self.event(event).await;
    }

    async fn send(&self, update: Update) {
        // The owner outlives its tasks' senders unless it panicked: nothing to tell then.
        let _ = self.updates.send(update).await;
    }

    async fn state(&self, state: InstanceState) {
        self.send(Update::State(self.instance, state)).await;
    }

    async fn event(&self, event: InstanceEvent) {
        self.send(Update::Event(event)).await;
    }

    /// Runs a store call on the blocking pool; logs and returns false when it fails.
    async fn persist(
        &self,
        what: &'static str,
        f: impl FnOnce(&Store) -> Result<(), crate::store::StoreError> + Send + 'static,
    ) -> bool {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::error!(instance = %self.instance, error = %e, "{what}");
                false
            }
            Err(e) => {
                tracing::error!(instance = %self.instance, error = %e, "{what}: task failed");
                false
            }
        }
    }

    async fn write_record(&self, desired: Desired) -> bool {
        let Some(spec) = self.spec.clone() else {
            return true;
        };
        self.persist("writing the instance record", move |s| {
            s.write(&Record::new(spec, desired))
        })
        .await
    }

    async fn remove_record(&self) -> bool {
        let instance = self.instance;
        self.persist("removing the instance record", move |s| s.remove(instance))
            .await
    }

    /// Record first (so a restart knows of it), then create and boot.
    async fn launch(&self) -> Now {
        let Some(spec) = &self.spec else {
            return Some(InstanceState::ExitFailed);
        };
        let restart = spec.restart;
        let failed = |reason, message: String| InstanceEvent::StartFailed {
            instance: self.instance,
            reason,
            restart,
            message: Some(message),
        };
        if !self.write_record(Desired::Running).await {
            let why = "the node could not record the instance (see the agent's log)";
            self.event(failed(StartRefusal::LaunchFailure, why.into()))
                .await;
            self.send(Update::Forget(self.instance)).await;
            return None;
        }
        let began = std::time::Instant::now();
        let result = match self.backend.create(spec).await {
            Ok(()) => self.backend.start(self.instance).await,
            Err(e) => Err(e),
        };
        let error = match result {
            Ok(()) => {
                // (Made and booted: from the image, fetched first if the node had not got it.)
                tracing::info!(instance = %self.instance, took = ?began.elapsed(), "launched");
                self.state(InstanceState::Active).await;
                return Some(InstanceState::Active);
            }
            Err(e) => e,
        };
        tracing::warn!(instance = %self.instance, error = %error, "start failed");
        let message = error.message();
        let reason = start_refusal(&error);
        self.event(failed(reason, message)).await;
        // Leftovers that were there before this START are not ours to remove.
        let cleaned = reason == StartRefusal::InstanceExists || self.clean().await;
        if cleaned {
            self.remove_record().await;
            self.send(Update::Forget(self.instance)).await;
            None
        } else {
            self.state(InstanceState::ExitFailed).await;
            self.write_record(Desired::Removing { stop: None }).await;
            Some(InstanceState::ExitFailed)
        }
    }

    /// Stop and delete in the backend; false (logged) when either fails.
    async fn clean(&self) -> bool {
        let result = match self.backend.stop(self.instance).await {
            Ok(()) => self.backend.delete(self.instance).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) | Err(BackendError::NotFound) => true,
            Err(e) => {
                tracing::warn!(instance = %self.instance, error = %e, "removing failed");
                false
            }
        }
    }

    /// Marks it powered off and kept, for `cause`, and says so.
    async fn stopped(&mut self, cause: StopCause) -> Now {
        self.stopped_by = Some(cause);
        self.write_record(Desired::Stopped { cause }).await;
        self.state(InstanceState::Exited).await;
        self.event(InstanceEvent::Stopped {
            instance: self.instance,
            cause,
        })
        .await;
        Some(InstanceState::Exited)
    }

    /// It stopped on its own: it is kept, powered off.
    async fn exited(&mut self) -> Now {
        tracing::info!(instance = %self.instance, "exited on its own: kept, powered off");
        self.stopped(StopCause::Exited).await
    }

    /// Found powered off after a restart although it should run: kept, powered off.
    async fn lost(&mut self) -> Now {
        tracing::warn!(instance = %self.instance, "found powered off after a restart: kept");
        self.stopped(StopCause::Lost).await
    }

    /// Power it off and keep it.
    async fn stop(&mut self, state: InstanceState, cause: StopCause) -> Now {
        match state {
            InstanceState::ExitFailed => {
                if cause == StopCause::Requested {
                    self.event(InstanceEvent::DeleteFailed {
                        instance: self.instance,
                        reason: DeleteRefusal::BackendFailure,
                    })
                    .await;
                }
                return Some(state);
            }
            // Already off: say so again (the controller may be waiting for it).
            InstanceState::Exited => {
                if cause == StopCause::Requested {
                    self.event(InstanceEvent::Stopped {
                        instance: self.instance,
                        cause,
                    })
                    .await;
                }
                return Some(state);
            }
            _ => {}
        }
        self.state(InstanceState::Stopping).await;
        match self.backend.stop(self.instance).await {
            Ok(()) => self.stopped(cause).await,
            Err(e) => {
                tracing::warn!(instance = %self.instance, error = %e, "stop failed");
                self.state(state).await;
                if cause == StopCause::Requested {
                    self.event(InstanceEvent::DeleteFailed {
                        instance: self.instance,
                        reason: DeleteRefusal::BackendFailure,
                    })
                    .await;
                }
                Some(state)
            }
        }
    }

    /// New resources for the powered-off instance: the backend's, then its record's and the
    /// owner's reservation.
    async fn resize(&mut self, resources: Resources) -> Result<(), BackendError> {
        self.backend.resize(self.instance, resources).await?;
        if let Some(spec) = &mut self.spec {
            spec.resources = resources;
        }
        let _ = self
            .updates
            .send(Update::Reserved(self.instance, resources))
            .await;
        tracing::info!(instance = %self.instance, ?resources, "resized");
        Ok(())
    }

    /// Boot it from its kept disks.
    async fn boot(&mut self, state: InstanceState, resize: Option<Resources>) -> Now {
        let instance = self.instance;
        let failed = move |reason, message: Option<String>| InstanceEvent::StartFailed {
            instance,
            reason,
            restart: true,
            message,
        };
        match state {
            InstanceState::Exited => {}
            s if s.is_live() => {
                self.event(failed(StartRefusal::AlreadyRunning, None)).await;
                return Some(state);
            }
            _ => {
                let why = "the instance's leftovers are being removed from its node";
                self.event(failed(StartRefusal::InstanceExists, Some(why.into())))
                    .await;
                return Some(state);
            }
        }
        if let Some(resources) = resize
            && let Err(e) = self.resize(resources).await
        {
            tracing::warn!(instance = %self.instance, error = %e, "resize failed");
            self.event(failed(
                start_refusal(&e),
                Some(format!("resize: {}", e.message())),
            ))
            .await;
            return Some(state);
        }
        self.write_record(Desired::Running).await;
        self.state(InstanceState::Pending).await;
        match self.backend.start(self.instance).await {
            Ok(()) => {
                self.stopped_by = None;
                self.state(InstanceState::Active).await;
                Some(InstanceState::Active)
            }
            Err(e) => {
                tracing::warn!(instance = %self.instance, error = %e, "restart failed");
                let reason = match e {
                    BackendError::NotFound => StartRefusal::InstanceMissing,
                    ref other => start_refusal(other),
                };
                self.event(failed(reason, Some(e.message()))).await;
                let cause = self.stopped_by.unwrap_or(StopCause::Requested);
                self.write_record(Desired::Stopped { cause }).await;
                self.state(InstanceState::Exited).await;
                Some(InstanceState::Exited)
            }
        }
    }

    /// Carry out an action the instance's state allows.
    async fn act(&mut self, state: InstanceState, action: Action) -> Now {
        let refused = |reason, message: Option<String>| InstanceEvent::ActionFailed {
            instance: self.instance,
            action,
            reason,
            message,
        };
        let Some(after) = action.outcome(state) else {
            let why = format!("cannot {} an instance that is {state:?}", action.name());
            self.event(refused(
                ActionRefusal::InvalidState,
                Some(why.to_lowercase()),
            ))
            .await;
            return Some(state);
        };
        let result = if action == Action::Resume {
            self.backend.start(self.instance).await
        } else {
            self.backend.action(self.instance, action).await
        };
        if let Err(e) = result {
            tracing::warn!(instance = %self.instance, action = action.name(), error = %e, "action failed");
            self.event(refused(ActionRefusal::BackendFailure, Some(e.message())))
                .await;
            return Some(state);
        }
        tracing::info!(instance = %self.instance, action = action.name(), "done");
        if after != state {
            self.write_record(match after {
                InstanceState::Paused => Desired::Paused,
                InstanceState::Suspended => Desired::Suspended,
                _ => Desired::Running,
            })
            .await;
            self.state(after).await;
        }
        Some(after)
    }

    /// Stop and delete it, then report it deleted: INSTANCE_DELETED, whatever the removal was
    /// for (a DELETE; an instance of which a restart found nothing; a record of an older agent
    /// that stopped by removing), as nothing of it is left on the node. INSTANCE_STOPPED would
    /// tell the controller that the node keeps it, powered off.
    async fn remove(&self, stop: Option<StopCause>) -> Now {
        let quiet = matches!(stop, Some(StopCause::Exited | StopCause::Lost));
        self.state(if quiet {
            InstanceState::Exited
        } else {
            InstanceState::Stopping
        })
        .await;
        self.write_record(Desired::Removing { stop }).await;
        if !self.clean().await {
            self.state(InstanceState::ExitFailed).await;
            if stop.is_none_or(|cause| cause == StopCause::Requested) {
                self.event(InstanceEvent::DeleteFailed {
                    instance: self.instance,
                    reason: DeleteRefusal::BackendFailure,
                })
                .await;
            }
            return Some(InstanceState::ExitFailed);
        }
        self.remove_record().await;
        let instance = self.instance;
        self.event(InstanceEvent::Deleted { instance }).await;
        self.send(Update::Forget(instance)).await;
        None
    }
}

/// The START_FAILURE reason of a backend error.
fn start_refusal(error: &BackendError) -> StartRefusal {
    match error {
        BackendError::Image(_) => StartRefusal::ImageFailure,
        BackendError::Network(_) => StartRefusal::NetworkFailure,
        BackendError::Exists => StartRefusal::InstanceExists,
        BackendError::Launch(_)
        | BackendError::NotFound
        | BackendError::Unsupported(_)
        | BackendError::Other(_) => StartRefusal::LaunchFailure,
    }
}
