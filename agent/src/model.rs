//! The agent's domain types: what an instance is made from, what the node and its instances
//! report, and the events and refusals of the instance lifecycle.
//!
//! Nothing here is an SSNTP type: the [`Reporter`](crate::Reporter) speaks these, so that a
//! store-writing reporter (off-host launching) needs no protocol. [`crate::wire`] maps them to
//! SSNTP payloads.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

/// What runs an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmKind {
    /// A virtual machine.
    Qemu,
    /// A container.
    Container,
    /// A simulated instance.
    Sim,
}

/// The firmware a VM boots with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Firmware {
    /// UEFI.
    Efi,
    /// Legacy BIOS.
    Legacy,
}

/// What an instance is to the cluster: a tenant's workload, or a tenant subnet's CNCI (which the
/// node's CNCI launcher runs, not its backend).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceRole {
    /// A tenant's instance.
    #[default]
    Workload,
    /// A tenant subnet's CNCI.
    Cnci,
}

/// What an instance reserves on the node: the figures admission and accounting use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, MiB.
    pub mem_mb: u32,
    /// Disk, MiB.
    pub disk_mb: u32,
}

/// An instance's virtual NIC on its tenant subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicSpec {
    /// The NIC's MAC address.
    #[serde(with = "mac_text")]
    pub mac: [u8; 6],
    /// The NIC's UUID.
    pub vnic_uuid: Uuid,
    /// The tenant subnet's CNCI.
    pub concentrator_uuid: Uuid,
    /// The CNCI's tunnel end point.
    pub concentrator_ip: IpAddr,
    /// The tenant subnet's address.
    pub subnet_addr: IpAddr,
    /// The tenant subnet's prefix length.
    pub subnet_prefix: u8,
    /// The subnet's tunnel key.
    pub subnet_key: u32,
    /// The instance's private address.
    pub private_ip: IpAddr,
    /// Whether it wants a public IP.
    pub public_ip: bool,
    /// The port firewall (the NIC's security groups, compiled; the newest the node was given:
    /// START's, then each newer `PUT /v1/instances/{uuid}/firewall`); `None`: the node filters
    /// nothing but spoofing. Absent in records of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<ssntp::payload::Firewall>,
}

/// One disk of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskSpec {
    /// The volume.
    pub id: Uuid,
    /// Whether it is the boot disk.
    pub boot: bool,
    /// Its size, MiB.
    pub size_mb: u32,
    /// Whether it goes away with the instance.
    pub ephemeral: bool,
}

/// Where a volume's attachment to an instance stands, as the instance's record keeps it: the
/// record is written before the backend is asked, so that an agent killed in between finishes
/// the attach or the detach when it starts again (the backend's calls are idempotent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumePhase {
    /// Being attached.
    Attaching,
    /// Attached.
    Attached,
    /// Being detached (`force`: even if the guest does not release it).
    Detaching {
        /// Take it away even if the guest does not release it.
        force: bool,
    },
}

/// A volume attached (or being attached, or detached) to an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSpec {
    /// The volume.
    pub id: Uuid,
    /// The device the guest sees it as (`vdb`).
    pub device: String,
    /// Its size, MiB, for a node that makes its file on first use (0: the node must hold it).
    pub size_mb: u32,
    /// The image a new volume is filled from (`sha512/<hash>`); `None`: blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Where its attachment stands.
    pub phase: VolumePhase,
}

impl VolumeSpec {
    /// Whether the guest has it (attached, or not yet detached): what STATS lists.
    pub fn is_attached(&self) -> bool {
        !matches!(self.phase, VolumePhase::Attaching)
    }
}

/// The most volumes one instance may have attached (devices `vdb` to `vdz`).
pub const MAX_VOLUMES: usize = 25;

/// A device name a volume may take: `vdb` to `vdz` (`vda` is the instance's own disk).
pub fn volume_device_ok(device: &str) -> bool {
    let b = device.as_bytes();
    b.len() == 3 && b.starts_with(b"vd") && (b'b'..=b'z').contains(&b[2])
}

/// Everything a backend needs to make and run one instance; kept on disk while the instance
/// lives on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceSpec {
    /// The instance.
    pub instance: Uuid,
    /// Its tenant.
    pub tenant: Uuid,
    /// The workload it is made from.
    pub workload: Uuid,
    /// What runs it.
    pub kind: VmKind,
    /// What it is to the cluster. Records written before this field existed have none: the
    /// agent's store reads their meta data's CNCI marker instead ([`InstanceSpec::settle_role`]).
    #[serde(default)]
    pub role: InstanceRole,
    /// Its firmware.
    pub firmware: Firmware,
    /// The image name.
    pub image: String,
    /// What it reserves on the node.
    pub resources: Resources,
    /// Its NIC, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<NicSpec>,
    /// Its disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskSpec>,
    /// The volumes attached to it (ATTACH_VOLUME), in the order they were attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpec>,
    /// cloud-init user data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// cloud-init meta data.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta_data: BTreeMap<String, String>,
    /// Whether this re-creates an exited instance (echoed in a start failure).
    pub restart: bool,
    /// A kernel (and initrd) to boot directly, with `image` as the root disk (empty: none):
    /// START's `kernel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<ssntp::payload::KernelBoot>,
}

impl InstanceSpec {
    /// The volumes the guest has: its boot volume, if it boots from one, and those attached
    /// ([`VolumeSpec::is_attached`]): what STATS lists.
    pub fn attached_volumes(&self) -> Vec<Uuid> {
        let boot = self.disks.iter().filter(|d| d.boot && !d.ephemeral);
        boot.map(|d| d.id)
            .chain(
                self.volumes
                    .iter()
                    .filter(|v| v.is_attached())
                    .map(|v| v.id),
            )
            .collect()
    }

    /// Fills [`InstanceSpec::role`] for a record written before it existed: a CNCI's meta data
    /// carries the CNCI marker that the START did (`ssntp::payload::CNCI_ROLE`).
    pub fn settle_role(&mut self) {
        if ssntp::payload::is_cnci_meta_data(&self.meta_data) {
            self.role = InstanceRole::Cnci;
        }
    }
}

/// An instance's lifecycle state, as the agent sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceState {
    /// Admitted; being created or booting (or being re-attached after a restart).
    Pending,
    /// Running.
    Active,
    /// Being powered off (a stop) or removed (a delete).
    Stopping,
    /// Powered off and kept on the node, disks and all (stopped, exited on its own, or found
    /// off after an agent restart): a START with `restart` boots it again.
    Exited,
    /// Removing it failed: leftovers remain until a DELETE succeeds.
    ExitFailed,
    /// Frozen in memory (an INSTANCE_ACTION `pause`).
    Paused,
    /// Its memory saved to the node's disk and powered off (`suspend`); `resume` goes on.
    Suspended,
}

impl InstanceState {
    /// Whether the instance is (or is about to be) running, paused or suspended: a START for
    /// it is a duplicate, and an evacuation stops it.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            InstanceState::Pending
                | InstanceState::Active
                | InstanceState::Paused
                | InstanceState::Suspended
        )
    }
}

/// An action on an instance that exists (INSTANCE_ACTION).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// An orderly reboot, a power cycle if the guest does not go down in time.
    Reboot,
    /// A power cycle (power off, boot).
    RebootHard,
    /// Freeze it in memory.
    Pause,
    /// Go on after a pause.
    Unpause,
    /// Save its memory to disk and power it off.
    Suspend,
    /// Go on from a suspend.
    Resume,
}

impl Action {
    /// The action's name (`reboot_hard`).
    pub fn name(self) -> &'static str {
        match self {
            Action::Reboot => "reboot",
            Action::RebootHard => "reboot_hard",
            Action::Pause => "pause",
            Action::Unpause => "unpause",
            Action::Suspend => "suspend",
            Action::Resume => "resume",
        }
    }

    /// Whether an instance in `state` can take the action, and the state it is in after.
    pub fn outcome(self, state: InstanceState) -> Option<InstanceState> {
        use InstanceState as S;
        match (self, state) {
            (Action::Reboot | Action::RebootHard, S::Active) => Some(S::Active),
            (Action::Pause, S::Active) => Some(S::Paused),
            (Action::Unpause, S::Paused) => Some(S::Active),
            (Action::Suspend, S::Active | S::Paused) => Some(S::Suspended),
            (Action::Resume, S::Suspended) => Some(S::Active),
            _ => None,
        }
    }
}

/// What an instance uses now, as its backend measures it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Memory in use, MiB.
    pub mem_mb: u32,
    /// Disk in use, MiB.
    pub disk_mb: u32,
    /// CPU use, 0–100 over its vCPUs, when known.
    pub cpu_percent: Option<u32>,
}

/// The node's overall status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Availability {
    /// Taking work.
    Ready,
    /// Below a high watermark (or at the instance limit): the scheduler should place elsewhere.
    Full,
    /// Evacuated: takes no work until restored.
    Maintenance,
}

/// One network interface of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeAddress {
    /// Its IP address.
    pub ip: IpAddr,
    /// Its MAC address.
    pub mac: [u8; 6],
}

/// The node's identity, status and figures: what READY/FULL/MAINTENANCE and STATS carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReport {
    /// The node's UUID.
    pub node: Uuid,
    /// The node's host name.
    pub hostname: String,
    /// Its status.
    pub availability: Availability,
    /// Memory in all, MiB.
    pub mem_total_mb: u32,
    /// Memory free for new instances, MiB.
    pub mem_available_mb: u32,
    /// Disk in all, MiB.
    pub disk_total_mb: u32,
    /// Disk free for new instances, MiB.
    pub disk_available_mb: u32,
    /// vCPUs in all.
    pub vcpus_total: u32,
    /// vCPUs not reserved by instances.
    pub vcpus_available: u32,
    /// One-minute load average × 100.
    pub load: u32,
    /// The node's network interfaces.
    pub networks: Vec<NodeAddress>,
    /// Its availability zone (`None`: the default one).
    pub zone: Option<String>,
}

/// One instance in a stats report.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InstanceReport {
    /// The instance.
    pub instance: Uuid,
    /// Its state.
    pub state: InstanceState,
    /// What it uses (zero until the backend first measures it).
    pub usage: Usage,
    /// The volumes attached to it now ([`VolumeSpec::is_attached`]).
    pub volumes: Vec<Uuid>,
}

/// Why a START was refused or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StartRefusal {
    /// The node is in maintenance.
    NodeMaintenance,
    /// The node has no room (a low watermark, or the instance limit).
    FullCn,
    /// The instance already runs here.
    AlreadyRunning,
    /// Leftovers of an instance with this UUID exist here.
    InstanceExists,
    /// The image is missing or broken.
    ImageFailure,
    /// The instance failed to launch.
    LaunchFailure,
    /// Its network could not be set up.
    NetworkFailure,
    /// The START asks for something impossible (no vCPU, no memory).
    InvalidData,
    /// A restart of an instance this node does not hold.
    InstanceMissing,
}

/// Why a DELETE failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeleteRefusal {
    /// The node has no such instance.
    NoInstance,
    /// The backend could not stop or remove it; its leftovers remain (state `exit_failed`).
    BackendFailure,
    /// The instance's command queue is full.
    Busy,
}

/// Why an INSTANCE_ACTION failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionRefusal {
    /// The node has no such instance.
    NoInstance,
    /// The instance's state does not allow the action.
    InvalidState,
    /// The backend failed to carry it out.
    BackendFailure,
    /// The instance's command queue is full.
    Busy,
}

/// Why an ATTACH_VOLUME or DETACH_VOLUME failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VolumeRefusal {
    /// The node has no such instance.
    NoInstance,
    /// The instance's state does not allow it (it is being made, removed or is suspended).
    InvalidState,
    /// What was asked is not valid (a device name, too many volumes, a volume attached
    /// elsewhere, ...).
    InvalidData,
    /// The backend failed to carry it out (the guest did not release the volume, ...).
    BackendFailure,
    /// The instance's backend cannot attach volumes.
    Unsupported,
    /// The instance's command queue is full.
    Busy,
}

/// Why an instance was powered off (and kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// A DELETE with `stop: true`.
    Requested,
    /// EVACUATE.
    Evacuated,
    /// It exited on its own.
    Exited,
    /// It was not running any more when the agent restarted (or was gone altogether).
    Lost,
}

/// Something that happened to one instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceEvent {
    /// Its state changed.
    State {
        /// The instance.
        instance: Uuid,
        /// Its new state.
        state: InstanceState,
    },
    /// A START was refused or failed; nothing of the instance is left.
    StartFailed {
        /// The instance.
        instance: Uuid,
        /// Why.
        reason: StartRefusal,
        /// The START's `restart` flag.
        restart: bool,
        /// The cause in words, for the user (the backend's error, made short and readable).
        message: Option<String>,
    },
    /// A DELETE failed.
    DeleteFailed {
        /// The instance.
        instance: Uuid,
        /// Why.
        reason: DeleteRefusal,
    },
    /// Deleted: gone from this node.
    Deleted {
        /// The instance.
        instance: Uuid,
    },
    /// An INSTANCE_ACTION failed; the instance is as it was.
    ActionFailed {
        /// The instance.
        instance: Uuid,
        /// What was asked.
        action: Action,
        /// Why.
        reason: ActionRefusal,
        /// The cause in words, for the user.
        message: Option<String>,
    },
    /// An ATTACH_VOLUME (`detach` false) or DETACH_VOLUME failed: the volume is as it was.
    VolumeFailed {
        /// The instance.
        instance: Uuid,
        /// The volume.
        volume: Uuid,
        /// Whether it was a detach.
        detach: bool,
        /// Why.
        reason: VolumeRefusal,
        /// The cause in words, for the user.
        message: Option<String>,
    },
    /// Powered off and kept on this node (for a START with `restart`), or, cause `lost`, gone.
    Stopped {
        /// The instance.
        instance: Uuid,
        /// Why.
        cause: StopCause,
    },
}

impl InstanceEvent {
    /// The instance the event is about.
    pub fn instance(&self) -> Uuid {
        match *self {
            InstanceEvent::State { instance, .. }
            | InstanceEvent::StartFailed { instance, .. }
            | InstanceEvent::DeleteFailed { instance, .. }
            | InstanceEvent::ActionFailed { instance, .. }
            | InstanceEvent::VolumeFailed { instance, .. }
            | InstanceEvent::Deleted { instance }
            | InstanceEvent::Stopped { instance, .. } => instance,
        }
    }
}

/// A MAC address as `02:00:ac:10:00:05` text in the state files.
mod mac_text {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(mac: &[u8; 6], s: S) -> Result<S::Ok, S::Error> {
        let [a, b, c, d, e, f] = *mac;
        s.collect_str(&format_args!(
            "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}"
        ))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 6], D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let mut out = [0u8; 6];
        let mut parts = text.split(':');
        for byte in &mut out {
            let part = parts
                .next()
                .filter(|p| p.len() == 2)
                .ok_or_else(|| D::Error::custom("not a MAC address"))?;
            *byte = u8::from_str_radix(part, 16).map_err(D::Error::custom)?;
        }
        if parts.next().is_some() {
            return Err(D::Error::custom("not a MAC address"));
        }
        Ok(out)
    }
}
