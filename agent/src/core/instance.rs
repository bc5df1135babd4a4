//! One task per instance: it runs that instance's commands in order (launch, remove), keeps
//! its record on disk in step, watches it for an exit of its own, and tells the owner what
//! happened through [`Update`]s. It never touches the node's accounting.

use std::sync::Arc;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::backend::{Backend, BackendError};
use crate::model::{
    DeleteRefusal, InstanceEvent, InstanceSpec, InstanceState, StartRefusal, StopCause,
};
use crate::store::{Desired, Record, Store};

/// A command for one instance, queued in its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InstanceCommand {
    /// Stop it and remove it: deleted (`stop: None`) or stopped for `cause`.
    Remove {
        /// Why it is stopped, when it is not a plain delete.
        stop: Option<StopCause>,
    },
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
}

/// The first thing a new instance task does.
#[derive(Debug)]
pub(crate) enum Job {
    /// Create and boot it.
    Launch,
    /// It runs already (re-attached after a restart): watch it.
    Watch,
    /// Its leftovers stay until a remove succeeds.
    Leftovers,
    /// Remove it (found being removed, or lost, after a restart).
    Remove(Option<StopCause>),
}

/// Where an instance task stands between commands.
enum Phase {
    Running,
    Leftovers,
    Gone,
}

/// What an instance task works with.
pub(crate) struct Task<B> {
    pub instance: Uuid,
    /// Its spec; `None` when its record could not be read (leftovers of unknown shape).
    pub spec: Option<InstanceSpec>,
    pub backend: Arc<B>,
    pub store: Store,
    pub updates: mpsc::Sender<Update>,
}

impl<B: Backend> Task<B> {
    /// Runs the instance's task until nothing of it is left or the owner goes away.
    pub(crate) async fn run(self, job: Job, mut commands: mpsc::Receiver<InstanceCommand>) {
        let mut phase = match job {
            Job::Launch => self.launch().await,
            Job::Watch => Phase::Running,
            Job::Leftovers => Phase::Leftovers,
            Job::Remove(stop) => self.remove(stop).await,
        };
        loop {
            let command = match phase {
                Phase::Gone => break,
                Phase::Running => {
                    tokio::select! {
                        command = commands.recv() => command,
                        () = self.backend.wait_exit(self.instance) => {
                            phase = self.exited().await;
                            continue;
                        }
                    }
                }
                Phase::Leftovers => commands.recv().await,
            };
            // No command: the owner is shutting down; the instance stays as it is.
            let Some(InstanceCommand::Remove { stop }) = command else {
                return;
            };
            phase = self.remove(stop).await;
        }
        // Gone: commands queued behind the one that removed it find no instance.
        commands.close();
        while let Ok(InstanceCommand::Remove { stop }) = commands.try_recv() {
            if stop.is_none_or(|cause| cause == StopCause::Requested) {
                self.event(InstanceEvent::DeleteFailed {
                    instance: self.instance,
                    reason: DeleteRefusal::NoInstance,
                })
                .await;
            }
        }
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
    async fn launch(&self) -> Phase {
        let Some(spec) = &self.spec else {
            return Phase::Leftovers;
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
            return Phase::Gone;
        }
        let result = match self.backend.create(spec).await {
            Ok(()) => self.backend.start(self.instance).await,
            Err(e) => Err(e),
        };
        let error = match result {
            Ok(()) => {
                self.state(InstanceState::Active).await;
                return Phase::Running;
            }
            Err(e) => e,
        };
        tracing::warn!(instance = %self.instance, error = %error, "start failed");
        let message = error.message();
        let reason = match error {
            BackendError::Image(_) => StartRefusal::ImageFailure,
            BackendError::Network(_) => StartRefusal::NetworkFailure,
            BackendError::Exists => StartRefusal::InstanceExists,
            BackendError::Launch(_) | BackendError::NotFound | BackendError::Other(_) => {
                StartRefusal::LaunchFailure
            }
        };
        self.event(failed(reason, message)).await;
        // Leftovers that were there before this START are not ours to remove.
        let cleaned = reason == StartRefusal::InstanceExists || self.clean().await;
        if cleaned {
            self.remove_record().await;
            self.send(Update::Forget(self.instance)).await;
            Phase::Gone
        } else {
            self.state(InstanceState::ExitFailed).await;
            self.write_record(Desired::Removing { stop: None }).await;
            Phase::Leftovers
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

    /// It stopped on its own: report it stopped, and remove what is left of it.
    async fn exited(&self) -> Phase {
        tracing::info!(instance = %self.instance, "exited on its own");
        self.state(InstanceState::Exited).await;
        self.event(InstanceEvent::Stopped {
            instance: self.instance,
            cause: StopCause::Exited,
        })
        .await;
        self.write_record(Desired::Removing {
            stop: Some(StopCause::Exited),
        })
        .await;
        if self.clean().await {
            self.remove_record().await;
            self.send(Update::Forget(self.instance)).await;
            Phase::Gone
        } else {
            self.state(InstanceState::ExitFailed).await;
            Phase::Leftovers
        }
    }

    /// Stop and delete it, then report it deleted or stopped.
    async fn remove(&self, stop: Option<StopCause>) -> Phase {
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
            return Phase::Leftovers;
        }
        self.remove_record().await;
        let instance = self.instance;
        self.event(match stop {
            None => InstanceEvent::Deleted { instance },
            Some(cause) => InstanceEvent::Stopped { instance, cause },
        })
        .await;
        self.send(Update::Forget(instance)).await;
        Phase::Gone
    }
}
