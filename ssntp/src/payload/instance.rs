//! Instance payloads: START, DELETE, INSTANCE_ACTION, ATTACH_VOLUME / DETACH_VOLUME,
//! INSTANCE_DELETED / INSTANCE_STOPPED.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

use super::cbor;
use super::firewall::Firewall;
use super::types::{Cidr, MacAddr};

/// What runs the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmType {
    /// A virtual machine (libvirt + qemu).
    Qemu,
    /// A container.
    Container,
    /// A simulated instance (tests and scale runs).
    Sim,
}

/// The firmware a VM boots with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FwType {
    /// UEFI.
    Efi,
    /// Legacy BIOS.
    Legacy,
}

/// The meta-data key that names an instance's role in the cluster (`docs/protocol.md`, START).
pub const ROLE_KEY: &str = "cumulo-role";

/// The [`ROLE_KEY`] value of a CNCI: a START whose meta data holds `cumulo-role: cnci` launches
/// a tenant's CNCI, not a workload. The wire contract has no other field for it; each side turns
/// it into a type of its own at its boundary ([`Start::is_cnci`], [`is_cnci_meta_data`]).
pub const CNCI_ROLE: &str = "cnci";

/// The meta-data key of a CNCI's own certificate (PEM) in its START: the controller issues each
/// CNCI a short-lived certificate with the CNCIAGENT role and the CNCI's UUID bound
/// (`docs/protocol.md`, START), so that no certificate shared by CNCIs exists. The network node
/// takes it (and [`CNCI_KEY_KEY`]) out of the meta data before anything is kept or logged.
pub const CNCI_CERT_KEY: &str = "cumulo-cnci-cert";

/// The meta-data key of the private key (PEM) of [`CNCI_CERT_KEY`]'s certificate.
pub const CNCI_KEY_KEY: &str = "cumulo-cnci-key";

/// Whether START meta data marks a CNCI ([`CNCI_ROLE`]).
pub fn is_cnci_meta_data(meta_data: &BTreeMap<String, String>) -> bool {
    meta_data.get(ROLE_KEY).map(String::as_str) == Some(CNCI_ROLE)
}

/// START: create and boot an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The new instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// Its tenant.
    #[serde(with = "cbor::uuid_bytes")]
    pub tenant_uuid: Uuid,
    /// The workload it is made from.
    #[serde(with = "cbor::uuid_bytes")]
    pub workload_uuid: Uuid,
    /// What runs it.
    pub vm_type: VmType,
    /// Its firmware.
    pub fw_type: FwType,
    /// The image name.
    pub image: String,
    /// What it needs of a node.
    pub requirements: Requirements,
    /// Its network attachment, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networking: Option<Networking>,
    /// Its disks, if any are named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Vec<Storage>>,
    /// cloud-init user data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// cloud-init meta data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_data: Option<BTreeMap<String, String>>,
    /// Whether this re-creates an exited instance (possibly elsewhere).
    pub restart: bool,
    /// A kernel to boot directly, with `image` as its root disk (empty: none). A compatible
    /// addition of 2026-12-03; absent: the VM boots `image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelBoot>,
}

/// START's `kernel`: a kernel (and initrd) that the node boots directly, named as `image`
/// names data (`sha512/<hash>`: fetched like a disk image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelBoot {
    /// The kernel (an x86 bzImage).
    pub kernel: String,
    /// Its initrd, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initrd: Option<String>,
    /// Kernel arguments after the node's own (at most [`KernelBoot::MAX_CMDLINE`] bytes, no
    /// control characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
}

impl KernelBoot {
    /// The longest `cmdline` a node accepts (x86's command line holds 2,048 bytes, the node's
    /// own arguments included).
    pub const MAX_CMDLINE: usize = 1024;

    /// Whether `cmdline` is one a node accepts; the cause otherwise.
    pub fn check(&self) -> Result<(), String> {
        match &self.cmdline {
            Some(line) if line.len() > Self::MAX_CMDLINE => Err(format!(
                "the kernel command line is {} bytes, more than {}",
                line.len(),
                Self::MAX_CMDLINE
            )),
            Some(line) if line.chars().any(char::is_control) => {
                Err("the kernel command line holds a control character".into())
            }
            _ => Ok(()),
        }
    }
}

impl Start {
    /// Whether this START launches a CNCI (its meta data holds [`ROLE_KEY`]: [`CNCI_ROLE`]).
    pub fn is_cnci(&self) -> bool {
        self.meta_data.as_ref().is_some_and(is_cnci_meta_data)
    }
}

/// What an instance needs of the node it is placed on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Requirements {
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, MiB.
    pub mem_mb: u32,
    /// Disk, MiB.
    pub disk_mb: u32,
    /// Must run on a network node (a CNCI).
    pub network_node: bool,
    /// Pin to the node with this session UUID.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_uuid_bytes"
    )]
    pub node_id: Option<Uuid>,
    /// Pin to the node with this host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Nodes it must not be placed on (nodes an admin disabled): at most
    /// [`Requirements::MAX_AVOID`]. A compatible addition of 2026-12-03; absent: none.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "cbor::uuid_list"
    )]
    pub avoid_nodes: Vec<Uuid>,
    /// The server group the instance belongs to, and where its other members are (Compute's
    /// `os-server-groups`). A compatible addition of 2026-12-03; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupRequirement>,
    /// The availability zone it must be placed in: only nodes whose zone
    /// ([`NodeStatus::zone_name`](super::NodeStatus::zone_name)) is this one. A compatible
    /// addition of 2026-12-03; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

impl Requirements {
    /// The most nodes `avoid_nodes` names, and the most entries in a group's `nodes` and
    /// `members` together.
    pub const MAX_AVOID: usize = 4096;

    /// Whether a node may take these requirements as to their bounds; the cause otherwise.
    pub fn check(&self) -> Result<(), String> {
        if self.avoid_nodes.len() > Self::MAX_AVOID {
            return Err(format!(
                "avoid_nodes names {} nodes, more than {}",
                self.avoid_nodes.len(),
                Self::MAX_AVOID
            ));
        }
        if let Some(zone) = &self.zone
            && !super::node::valid_zone(zone)
        {
            return Err(format!(
                "zone {zone:?} is not 1 to {} letters, digits, '-', '_' or '.'",
                super::node::MAX_ZONE
            ));
        }
        if let Some(group) = &self.group {
            group.policy()?;
            let named = group.nodes.len().saturating_add(group.members.len());
            if named > Self::MAX_AVOID {
                return Err(format!(
                    "group names {named} nodes and members, more than {}",
                    Self::MAX_AVOID
                ));
            }
        }
        Ok(())
    }
}

/// A server group's placement rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupPolicy {
    /// Every member on one node; none placed if that node has no room.
    Affinity,
    /// No two members on one node; none placed if every node with room holds a member.
    AntiAffinity,
    /// Members on one node where it has room, elsewhere otherwise.
    SoftAffinity,
    /// Members on different nodes where there are enough, on the nodes holding the fewest
    /// members otherwise.
    SoftAntiAffinity,
}

impl GroupPolicy {
    /// Every policy, as named on the wire (and by Compute's API).
    pub const ALL: [GroupPolicy; 4] = [
        GroupPolicy::Affinity,
        GroupPolicy::AntiAffinity,
        GroupPolicy::SoftAffinity,
        GroupPolicy::SoftAntiAffinity,
    ];

    /// Its name on the wire: `affinity`, `anti-affinity`, `soft-affinity`,
    /// `soft-anti-affinity`.
    pub fn name(self) -> &'static str {
        match self {
            GroupPolicy::Affinity => "affinity",
            GroupPolicy::AntiAffinity => "anti-affinity",
            GroupPolicy::SoftAffinity => "soft-affinity",
            GroupPolicy::SoftAntiAffinity => "soft-anti-affinity",
        }
    }

    /// The policy named `name`, if it is one.
    pub fn from_name(name: &str) -> Option<GroupPolicy> {
        GroupPolicy::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for GroupPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a START says of its instance's server group: the group, its policy, and where the
/// sender knows its other members to be. The scheduler adds the nodes it placed `members` on
/// itself (siblings of one launch, placed before the sender heard where).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRequirement {
    /// The group's UUID.
    #[serde(with = "cbor::uuid_bytes")]
    pub id: Uuid,
    /// Its policy's name ([`GroupPolicy::name`]); another is `invalid_data`.
    pub policy: String,
    /// The nodes its other members run on, one entry per member (a node may repeat).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "cbor::uuid_list"
    )]
    pub nodes: Vec<Uuid>,
    /// Its other members whose node the sender does not know yet.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "cbor::uuid_list"
    )]
    pub members: Vec<Uuid>,
}

impl GroupRequirement {
    /// Its policy, or why it is none.
    pub fn policy(&self) -> Result<GroupPolicy, String> {
        GroupPolicy::from_name(&self.policy)
            .ok_or_else(|| format!("unknown server group policy {:?}", self.policy))
    }
}

/// An instance's virtual NIC on its tenant subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Networking {
    /// The NIC's MAC address.
    #[serde(with = "cbor::text")]
    pub vnic_mac: MacAddr,
    /// The NIC's UUID.
    #[serde(with = "cbor::uuid_bytes")]
    pub vnic_uuid: Uuid,
    /// The tenant subnet's CNCI.
    #[serde(with = "cbor::uuid_bytes")]
    pub concentrator_uuid: Uuid,
    /// The CNCI's address (tunnel end point).
    #[serde(with = "cbor::text")]
    pub concentrator_ip: IpAddr,
    /// The tenant subnet.
    #[serde(with = "cbor::text")]
    pub subnet: Cidr,
    /// The tunnel key of the subnet.
    pub subnet_key: u32,
    /// The instance's private address.
    #[serde(with = "cbor::text")]
    pub private_ip: IpAddr,
    /// Whether it wants a public IP.
    pub public_ip: bool,
    /// The NIC's firewall (its security groups, compiled); absent: the node filters nothing but
    /// spoofed sources. (An optional key added on 2026-12-02 within version 1.0.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firewall: Option<Firewall>,
}

/// One disk of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Storage {
    /// The volume.
    #[serde(with = "cbor::uuid_bytes")]
    pub id: Uuid,
    /// Whether it is the boot disk.
    pub boot: bool,
    /// Its size, MiB.
    pub size_mb: u32,
    /// Whether it goes away with the instance.
    pub ephemeral: bool,
}

/// DELETE: delete an instance, or (`stop`) power it off and keep it on its node (its disks, its
/// definition, its record) for a later START with `restart`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delete {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The node it runs on.
    #[serde(with = "cbor::uuid_bytes")]
    pub workload_agent_uuid: Uuid,
    /// Power off and keep rather than delete: the agent reports INSTANCE_STOPPED.
    pub stop: bool,
}

/// What an INSTANCE_ACTION asks of a running instance. An action this version does not know
/// reads as `Other` (the node answers INSTANCE_ACTION_FAILURE `invalid_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// An orderly reboot (ACPI), a reset if the guest does not react in time.
    Reboot,
    /// A reset.
    RebootHard,
    /// Freeze the instance in memory.
    Pause,
    /// Go on after a pause.
    Unpause,
    /// Save the instance's memory to its node's disk and stop it.
    Suspend,
    /// Go on from a suspend.
    Resume,
    /// An action this version does not know.
    #[serde(other)]
    Other,
}

impl Action {
    /// The action's wire name (`reboot_hard`).
    pub fn name(self) -> &'static str {
        match self {
            Action::Reboot => "reboot",
            Action::RebootHard => "reboot_hard",
            Action::Pause => "pause",
            Action::Unpause => "unpause",
            Action::Suspend => "suspend",
            Action::Resume => "resume",
            Action::Other => "other",
        }
    }
}

/// INSTANCE_ACTION: an action on a running instance, to its node. Its new state shows in STATS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceAction {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The node it runs on.
    #[serde(with = "cbor::uuid_bytes")]
    pub workload_agent_uuid: Uuid,
    /// What to do.
    pub action: Action,
}

/// ATTACH_VOLUME and DETACH_VOLUME: attach a volume to an instance, or detach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeCommand {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The volume.
    #[serde(with = "cbor::uuid_bytes")]
    pub volume_uuid: Uuid,
    /// The node the instance runs on.
    #[serde(with = "cbor::uuid_bytes")]
    pub workload_agent_uuid: Uuid,
    /// ATTACH_VOLUME: the volume's size, MiB, for a node that makes the volume's file on first
    /// use (a project addition, optional: absent, the node attaches only a volume it holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_mb: Option<u32>,
    /// ATTACH_VOLUME: the image a new volume is filled from (`sha512/<hash>`, fetched like a
    /// START's image); absent: a new volume is blank. A project addition, optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// ATTACH_VOLUME: the device the guest sees the volume as (`vdb`), as the controller chose
    /// it (a project addition, optional: absent, the node picks the next free one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// DETACH_VOLUME: take the volume away even when the guest does not release it (a project
    /// addition, optional: absent is false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

impl VolumeCommand {
    /// The command with only the three keys PROTOCOL.md names.
    pub fn new(instance_uuid: Uuid, volume_uuid: Uuid, workload_agent_uuid: Uuid) -> VolumeCommand {
        VolumeCommand {
            instance_uuid,
            volume_uuid,
            workload_agent_uuid,
            size_mb: None,
            image: None,
            device: None,
            force: false,
        }
    }
}

/// ATTACH_VOLUME (the name it had before DETACH_VOLUME shared its fields).
pub type AttachVolume = VolumeCommand;

/// INSTANCE_DELETED, INSTANCE_STOPPED.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceEvent {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_command_line_is_bounded_and_has_no_control_characters() {
        let boot = |cmdline: Option<String>| KernelBoot {
            kernel: "sha512/00".into(),
            initrd: None,
            cmdline,
        };
        assert!(boot(None).check().is_ok());
        assert!(boot(Some("root=/dev/vda quiet".into())).check().is_ok());
        assert!(
            boot(Some("x".repeat(KernelBoot::MAX_CMDLINE)))
                .check()
                .is_ok()
        );
        let long = boot(Some("x".repeat(KernelBoot::MAX_CMDLINE + 1))).check();
        assert!(long.unwrap_err().contains("1025 bytes"));
        for bad in ["a\nb", "a\u{0}b", "\u{1b}[2J"] {
            assert!(boot(Some(bad.into())).check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_group_names_a_known_policy_and_a_bounded_number_of_nodes() {
        let req = |policy: &str, n: usize| Requirements {
            vcpus: 1,
            mem_mb: 1,
            disk_mb: 1,
            network_node: false,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: Some(GroupRequirement {
                id: Uuid::from_u128(1),
                policy: policy.into(),
                nodes: vec![Uuid::from_u128(2); n / 2],
                members: vec![Uuid::from_u128(3); n - n / 2],
            }),
            zone: None,
        };
        for policy in GroupPolicy::ALL {
            assert_eq!(GroupPolicy::from_name(policy.name()), Some(policy));
            assert!(req(policy.name(), Requirements::MAX_AVOID).check().is_ok());
        }
        let over = req("affinity", Requirements::MAX_AVOID + 1).check();
        assert!(over.unwrap_err().contains("more than 4096"));
        let unknown = req("Affinity", 0).check().unwrap_err();
        assert!(unknown.contains("unknown server group policy"), "{unknown}");
    }

    #[test]
    fn a_zone_is_a_short_plain_name() {
        let mut req = Requirements {
            vcpus: 1,
            mem_mb: 1,
            disk_mb: 1,
            network_node: false,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: Some("edge-1.a_b".into()),
        };
        assert!(req.check().is_ok());
        for bad in [
            "",
            "two words",
            "z/1",
            &"z".repeat(super::super::node::MAX_ZONE + 1),
        ] {
            req.zone = Some(bad.to_string());
            assert!(req.check().is_err(), "{bad:?}");
        }
    }
}
