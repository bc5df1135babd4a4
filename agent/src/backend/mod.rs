//! The [`Backend`] trait: what runs instances (the `sim` backend, [`libvirt`] for real VMs), and
//! `fake`, a recording fake for tests (`cfg(test)` and the `testing` feature).
//!
//! The trait is narrow on purpose: make, start, stop and delete one instance, act on a running
//! one (reboot, pause, suspend, ...), wait for one to exit on its own, measure all of them, and
//! list what exists with its power state (for re-attaching after a restart), attach and detach
//! volumes (idempotent, so that the core can finish either after a crash). A stop keeps
//! everything of the instance: only delete removes its disks. The core calls each instance's operations from that instance's own task, in
//! order; different instances' operations run concurrently.

pub mod console;
pub mod container;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod fence_token;
pub mod libvirt;
pub mod mixed;

use std::future::Future;
use uuid::Uuid;

use crate::model::{Action, InstanceSpec, NicSpec, Resources, Usage, VolumeSpec};
pub use console::ConsoleError;

/// A backend operation: what the fake records and what the sim can be told to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`Backend::create`].
    Create,
    /// [`Backend::start`].
    Start,
    /// [`Backend::stop`].
    Stop,
    /// [`Backend::delete`].
    Delete,
    /// [`Backend::action`].
    Act(Action),
    /// [`Backend::resize`].
    Resize(Resources),
    /// [`Backend::attach_volume`].
    Attach,
    /// [`Backend::detach_volume`].
    Detach,
}

/// A backend operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The image is missing or broken (START_FAILURE `image_failure`).
    #[error("image: {0}")]
    Image(String),
    /// The instance could not be launched (`launch_failure`).
    #[error("launch: {0}")]
    Launch(String),
    /// The instance's network could not be set up (`network_failure`).
    #[error("network: {0}")]
    Network(String),
    /// Something with this instance's UUID exists already (`instance_exists`).
    #[error("leftovers of this instance exist")]
    Exists,
    /// The backend has no such instance.
    #[error("no such instance")]
    NotFound,
    /// The backend cannot do this (attach volumes, say).
    #[error("{0}")]
    Unsupported(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl BackendError {
    /// The error in words for the user, without the kind (which the reason code gives): what a
    /// START_FAILURE's `message` says.
    pub fn message(&self) -> String {
        match self {
            BackendError::Image(m)
            | BackendError::Launch(m)
            | BackendError::Network(m)
            | BackendError::Unsupported(m)
            | BackendError::Other(m) => m.clone(),
            BackendError::Exists => "leftovers of this instance exist on the node".into(),
            BackendError::NotFound => "the instance vanished from the node while starting".into(),
        }
    }
}

/// Why an instance's disk could not be exported ([`Backend::export_disk`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// The backend has no such instance.
    #[error("no such instance on this node")]
    NotFound,
    /// The backend keeps no disk it can export for this instance (the sim's, a CNCI's, an
    /// off-host one's).
    #[error("{0}")]
    Unsupported(String),
    /// The copy failed.
    #[error("exporting the disk: {0}")]
    Failed(String),
}

/// Whether an instance runs, as its backend sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Power {
    /// It runs.
    Running,
    /// It is frozen in memory.
    Paused,
    /// It is powered off.
    Off,
    /// It is powered off with its memory saved (a suspend): a start resumes it.
    Saved,
}

impl Power {
    /// Whether it holds memory on the node (runs or is paused): not an exit.
    pub fn is_active(self) -> bool {
        matches!(self, Power::Running | Power::Paused)
    }
}

/// One instance a backend has, as listed for re-attaching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Existing {
    /// The instance.
    pub instance: Uuid,
    /// Whether it runs now.
    pub power: Power,
}

/// What runs instances. Every method may be called concurrently for different instances.
pub trait Backend: Send + Sync + 'static {
    /// Makes what the instance needs (disk from its image, NIC, config) without running it.
    /// `Exists` when anything with this UUID is already there.
    fn create(&self, spec: &InstanceSpec) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Boots a created (or stopped) instance from its disks, or resumes a saved one; resolves
    /// once it runs.
    fn start(&self, instance: Uuid) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Resolves once the instance neither runs nor is paused: at once if so now. The core waits
    /// on this while an instance is active or paused to learn that it died on its own.
    fn wait_exit(&self, instance: Uuid) -> impl Future<Output = ()> + Send;

    /// Powers the instance off, keeping its disks and definition (nothing to do if it does not
    /// run); a saved memory image (a suspend) is discarded.
    fn stop(&self, instance: Uuid) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Carries out an action on the instance. The core calls it only in a state that allows it
    /// ([`Action::outcome`]); `resume` of a saved instance is a [`Backend::start`].
    fn action(
        &self,
        instance: Uuid,
        action: Action,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Gives a stopped instance new resources before it boots again (a resize): vCPUs and
    /// memory, and its disk grown to `resources.disk_mb` where that is larger (a disk is never
    /// shrunk). Called only while the instance is powered off.
    fn resize(
        &self,
        instance: Uuid,
        resources: Resources,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Removes everything of the instance (nothing to do if there is nothing).
    fn delete(&self, instance: Uuid) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// What each instance uses now, for those the backend can measure.
    fn stats(&self) -> impl Future<Output = Vec<(Uuid, Usage)>> + Send;

    /// Every instance the backend has, running or not.
    fn list(&self) -> impl Future<Output = Result<Vec<Existing>, BackendError>> + Send;

    /// The last `lines` lines of the instance's serial console log, bounded as
    /// [`console::tail_file`] says; `NotFound` for an instance the backend does not have.
    fn console(
        &self,
        instance: Uuid,
        lines: usize,
    ) -> impl Future<Output = Result<String, ConsoleError>> + Send;

    /// Filters the instance's tenant NIC as `nic` says (anti-spoofing, and `nic.firewall` if
    /// there is one), replacing its filter: for a newer firewall (the node endpoint's `PUT`),
    /// and for an instance found again after an agent restart. A backend without tenant
    /// networking has nothing to do.
    fn filter_port(
        &self,
        instance: Uuid,
        nic: &NicSpec,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Writes the instance's root disk as it is now to `to`, one standalone qcow2 file (no
    /// backing file): a snapshot's data. A running instance is paused for the copy and runs on
    /// after it. `NotFound` for an instance the backend does not have; a backend without disks
    /// it can export says so (`Unsupported`).
    fn export_disk(
        &self,
        instance: Uuid,
        to: &std::path::Path,
    ) -> impl Future<Output = Result<(), ExportError>> + Send {
        let _ = (instance, to);
        async {
            Err(ExportError::Unsupported(
                "this node keeps no disks to export".into(),
            ))
        }
    }

    /// Attaches a volume to the instance as `volume.device`: to its definition, and to the
    /// running guest when it runs or is paused (a hot plug). The node makes the volume's data
    /// first if it has none (blank, of `volume.size_mb`, or from `volume.image`). Idempotent: a
    /// volume attached already is success. A backend without volumes says so (`Unsupported`).
    fn attach_volume(
        &self,
        instance: Uuid,
        volume: &VolumeSpec,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        let _ = (instance, volume);
        async {
            Err(BackendError::Unsupported(
                "this node's backend cannot attach volumes".into(),
            ))
        }
    }

    /// Detaches a volume from the instance: from the running guest first (which must release
    /// the device; `force` takes it from the definition even when the guest does not), then
    /// from its definition. The volume's data stays on the node. Idempotent: a volume not
    /// attached is success.
    fn detach_volume(
        &self,
        instance: Uuid,
        volume: &VolumeSpec,
        force: bool,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        let _ = (instance, volume, force);
        async {
            Err(BackendError::Unsupported(
                "this node's backend cannot detach volumes".into(),
            ))
        }
    }

    /// Removes a volume's data from the node (it is attached to nothing here). Idempotent.
    fn delete_volume(&self, volume: Uuid) -> impl Future<Output = Result<(), BackendError>> + Send {
        let _ = volume;
        async {
            Err(BackendError::Unsupported(
                "this node's backend keeps no volumes".into(),
            ))
        }
    }

    /// Serves the instance's data on its tenant network's metadata service (169.254.169.254),
    /// for an instance found again after an agent restart (a create does it itself). A backend
    /// without the service has nothing to do.
    fn serve_metadata(
        &self,
        spec: &InstanceSpec,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        let _ = spec;
        async { Ok(()) }
    }
}
