//! The core: an owner task that holds the node's accounting, and one task per instance.
//!
//! [`Core::spawn`] reads the state directory, lists what the backend has with its power state,
//! re-attaches to every instance as its record and its backend say (running, paused, suspended,
//! or stopped and kept), keeps those found off that should run as stopped (reported stopped),
//! finishes removing those that were being removed, and starts the owner. A kill -9 of the
//! agent changes nothing about a stopped, paused or suspended instance. The [`Core`] handle then takes commands: they are
//! queued without waiting (a full queue is [`CoreError::Busy`]) and their outcome goes out
//! through the [`Reporter`]. Commands for one instance run in order in its task; different
//! instances run in parallel.

mod accounting;
mod instance;
mod owner;

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

pub use instance::FirewallRefusal;
pub use owner::Command;

use crate::backend::{Backend, BackendError, Power};
use crate::config::{Config, ConfigError};
use crate::host::HostError;
use crate::model::{InstanceReport, InstanceSpec, InstanceState, NodeReport, StopCause};
use crate::reporter::Reporter;
use crate::store::{Desired, Store, StoreError};
use instance::Job;
use owner::{Owner, Request};

/// The core failed to start, or refused a command.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The command queue is full: the command was not taken.
    #[error("the agent is busy: its command queue is full")]
    Busy,
    /// The core has stopped.
    #[error("the agent core has stopped")]
    Stopped,
    /// The configuration is not valid.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// The state directory could not be read.
    #[error("state directory: {0}")]
    Store(#[from] StoreError),
    /// The host's figures could not be read.
    #[error("host figures: {0}")]
    Host(#[from] HostError),
    /// The backend could not list its instances.
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
    /// A start-up task panicked or was cancelled.
    #[error("a start-up task failed: {0}")]
    Task(String),
}

/// The node's report and every instance, as the core sees them now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The node's status and figures.
    pub node: NodeReport,
    /// Every instance, ordered by UUID.
    pub instances: Vec<InstanceReport>,
}

impl Snapshot {
    /// The state of one instance, if the core has it.
    pub fn state(&self, instance: Uuid) -> Option<InstanceState> {
        self.instances
            .iter()
            .find(|i| i.instance == instance)
            .map(|i| i.state)
    }
}

/// What becomes of an instance after a restart, from what its record wants and what its backend
/// has: its state, its task's first job, and why it is off (when it is).
fn recover(desired: Desired, power: Option<&Power>) -> (InstanceState, Job, Option<StopCause>) {
    use InstanceState as S;
    let attach = |state| (state, Job::Attach(state), None);
    match (desired, power) {
        (Desired::Removing { stop }, _) => (S::Stopping, Job::Remove(stop), None),
        // Nothing of it is left: say it is gone (INSTANCE_DELETED), and forget it.
        (_, None) => (S::Exited, Job::Remove(Some(StopCause::Lost)), None),
        (Desired::Running | Desired::Paused | Desired::Suspended, Some(Power::Running)) => {
            attach(S::Active)
        }
        // Paused without being asked (a boot cut short by the agent's death, which libvirt
        // finishes): running, as far as the agent is concerned.
        (Desired::Running | Desired::Suspended, Some(Power::Paused)) => attach(S::Active),
        (Desired::Paused, Some(Power::Paused)) => attach(S::Paused),
        (Desired::Suspended, Some(Power::Saved)) => attach(S::Suspended),
        (Desired::Running | Desired::Paused | Desired::Suspended, Some(_)) => {
            (S::Exited, Job::Lost, Some(StopCause::Lost))
        }
        (Desired::Stopped { .. }, Some(Power::Running)) => attach(S::Active),
        (Desired::Stopped { .. }, Some(Power::Paused)) => attach(S::Paused),
        (Desired::Stopped { cause }, Some(Power::Off | Power::Saved)) => {
            (S::Exited, Job::Attach(S::Exited), Some(cause))
        }
    }
}

/// A handle on a running core. Clones share the core; it shuts down on
/// [`Core::shutdown`] or once every handle is dropped.
#[derive(Clone, Debug)]
pub struct Core {
    requests: mpsc::Sender<Request>,
}

impl Core {
    /// Validates the configuration, recovers the state directory against what the backend
    /// has, and starts the core. Must be called within a tokio runtime.
    pub async fn spawn<B: Backend, R: Reporter>(
        config: Config,
        backend: Arc<B>,
        reporter: R,
    ) -> Result<Core, CoreError> {
        config.validate()?;
        let dir = config.state_dir.clone();
        let store = tokio::task::spawn_blocking(move || Store::open(&dir))
            .await
            .map_err(|e| CoreError::Task(e.to_string()))??;
        Core::spawn_with_store(config, store, backend, reporter).await
    }

    /// As [`Core::spawn`], over `store` rather than the configuration's state directory (an
    /// off-host operation's core keeps its records in memory: [`Store::memory`]).
    pub async fn spawn_with_store<B: Backend, R: Reporter>(
        config: Config,
        store: Store,
        backend: Arc<B>,
        reporter: R,
    ) -> Result<Core, CoreError> {
        config.validate()?;
        let (store, loaded) = tokio::task::spawn_blocking(move || {
            let loaded = store.load()?;
            Ok::<_, StoreError>((store, loaded))
        })
        .await
        .map_err(|e| CoreError::Task(e.to_string()))??;
        let host = config.host.sample()?;
        let existing: HashMap<Uuid, Power> = backend
            .list()
            .await?
            .into_iter()
            .map(|e| (e.instance, e.power))
            .collect();
        let requests_bound = config.command_queue;
        let mut owner = Owner::new(config, backend, reporter, store, host);
        owner.maintenance = loaded.maintenance;
        for record in loaded.records {
            let instance = record.spec.instance;
            let spec = Some(record.spec);
            let (state, job, stopped_by) = recover(record.desired, existing.get(&instance));
            tracing::info!(%instance, ?state, ?job, "found after a restart");
            owner.add(instance, spec, state, job, stopped_by);
        }
        for instance in loaded.unreadable {
            owner.add(
                instance,
                None,
                InstanceState::ExitFailed,
                Job::Leftovers,
                None,
            );
        }
        for instance in existing.keys() {
            if !owner.entries.contains_key(instance) {
                tracing::warn!(%instance, "the backend has an instance the agent has no record of");
            }
        }
        if owner.maintenance {
            // An evacuation cut short by a restart: finish it.
            owner.stop_live(StopCause::Evacuated);
        }
        let (requests, rx) = mpsc::channel(requests_bound);
        tokio::spawn(owner.run(rx));
        Ok(Core { requests })
    }

    /// Queues a command without waiting. `Busy` when the queue is full.
    pub fn submit(&self, command: Command) -> Result<(), CoreError> {
        self.requests
            .try_send(Request::Command(command))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => CoreError::Busy,
                mpsc::error::TrySendError::Closed(_) => CoreError::Stopped,
            })
    }

    /// START.
    pub fn start(&self, spec: InstanceSpec) -> Result<(), CoreError> {
        self.submit(Command::Start(Box::new(spec)))
    }

    /// DELETE (`stop`: power off and keep rather than delete).
    pub fn delete(&self, instance: Uuid, stop: bool) -> Result<(), CoreError> {
        self.submit(Command::Delete { instance, stop })
    }

    /// INSTANCE_ACTION.
    pub fn action(&self, instance: Uuid, action: crate::model::Action) -> Result<(), CoreError> {
        self.submit(Command::Action { instance, action })
    }

    /// EVACUATE.
    pub fn evacuate(&self) -> Result<(), CoreError> {
        self.submit(Command::Evacuate)
    }

    /// RESTORE.
    pub fn restore(&self) -> Result<(), CoreError> {
        self.submit(Command::Restore)
    }

    /// The wiring (re)connected: report the status and stats now.
    pub fn announce(&self) -> Result<(), CoreError> {
        self.submit(Command::Announce)
    }

    /// The node and its instances now (waits for room in the queue).
    pub async fn snapshot(&self) -> Result<Snapshot, CoreError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Snapshot(tx))
            .await
            .map_err(|_| CoreError::Stopped)?;
        rx.await.map_err(|_| CoreError::Stopped)
    }

    /// Filters an instance's NIC with a newer firewall and keeps it in its record (one not
    /// newer than the one in force changes nothing); waits for the outcome.
    pub async fn set_firewall(
        &self,
        instance: Uuid,
        firewall: ssntp::payload::Firewall,
    ) -> Result<(), FirewallRefusal> {
        let (tx, rx) = oneshot::channel();
        let command = instance::InstanceCommand::Firewall(Box::new(firewall), tx);
        self.requests
            .send(Request::Firewall(instance, command))
            .await
            .map_err(|_| FirewallRefusal::Apply("the agent is shutting down".into()))?;
        // Dropped unanswered: the instance went away meanwhile.
        rx.await.unwrap_or(Err(FirewallRefusal::NotFound))
    }

    /// Stops the core: every instance task finishes its current command, then the core ends.
    /// Instances keep running in the backend; a new core over the same state directory
    /// re-attaches to them.
    pub async fn shutdown(&self) -> Result<(), CoreError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send(Request::Shutdown(tx))
            .await
            .map_err(|_| CoreError::Stopped)?;
        rx.await.map_err(|_| CoreError::Stopped)
    }
}
