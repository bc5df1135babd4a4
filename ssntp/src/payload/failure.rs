//! ERROR payloads: the operation failures with their reasons, DELIVERY_FAILURE, and `{reason}`.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use uuid::Uuid;

use super::cbor;
use super::types::MacAddr;

/// `{ "reason": text }`: the body of every ERROR without a schema of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// What went wrong, for people.
    pub reason: String,
}

impl Reason {
    /// A reason from text.
    pub fn new(reason: impl Into<String>) -> Reason {
        Reason {
            reason: reason.into(),
        }
    }
}

/// Why an instance did not start. Unknown reasons read as `Other` (forward compatibility).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFailureReason {
    /// No node in the cluster has room.
    FullCloud,
    /// The chosen compute node has no room.
    FullCn,
    /// The node is in maintenance.
    NodeMaintenance,
    /// There is no compute node.
    NoCn,
    /// There is no network node.
    NoNetCn,
    /// The START could not be decoded.
    InvalidPayload,
    /// The START's data is not valid.
    InvalidData,
    /// The instance already runs.
    AlreadyRunning,
    /// Leftovers of the instance exist.
    InstanceExists,
    /// The image is missing or broken.
    ImageFailure,
    /// The instance failed to launch.
    LaunchFailure,
    /// Its network could not be set up.
    NetworkFailure,
    /// A reason this version does not know.
    #[serde(other)]
    Other,
}

impl StartFailureReason {
    /// Whether the controller should give up on the instance (all but the duplicate reasons).
    pub fn is_fatal(self) -> bool {
        !matches!(
            self,
            StartFailureReason::AlreadyRunning | StartFailureReason::InstanceExists
        )
    }
}

/// START_FAILURE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartFailure {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The node that refused it (absent when the scheduler answers).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_uuid_bytes"
    )]
    pub node_uuid: Option<Uuid>,
    /// Why.
    pub reason: StartFailureReason,
    /// The START's `restart` flag.
    pub restart: bool,
}

/// Why an instance could not be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteFailureReason {
    /// The node has no such instance.
    NoInstance,
    /// The DELETE could not be decoded.
    InvalidPayload,
    /// The DELETE's data is not valid.
    InvalidData,
    /// A reason this version does not know.
    #[serde(other)]
    Other,
}

/// DELETE_FAILURE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteFailure {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The node (absent when the scheduler answers).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_uuid_bytes"
    )]
    pub node_uuid: Option<Uuid>,
    /// Why.
    pub reason: DeleteFailureReason,
}

/// Why a volume could not be attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachVolumeFailureReason {
    /// The node has no such instance.
    NoInstance,
    /// The ATTACH_VOLUME could not be decoded.
    InvalidPayload,
    /// Its data is not valid.
    InvalidData,
    /// The attach itself failed.
    AttachFailure,
    /// The volume is attached already.
    AlreadyAttached,
    /// The instance is in a state that cannot take it.
    StateFailure,
    /// The instance failed.
    InstanceFailure,
    /// The instance's backend cannot attach volumes.
    NotSupported,
    /// A reason this version does not know.
    #[serde(other)]
    Other,
}

/// ATTACH_VOLUME_FAILURE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachVolumeFailure {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The volume.
    #[serde(with = "cbor::uuid_bytes")]
    pub volume_uuid: Uuid,
    /// The node (absent when the scheduler answers).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_uuid_bytes"
    )]
    pub node_uuid: Option<Uuid>,
    /// Why.
    pub reason: AttachVolumeFailureReason,
}

/// Why a public IP could not be assigned or released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicIpFailureReason {
    /// The CNCI has no such instance.
    NoInstance,
    /// The command could not be decoded.
    InvalidPayload,
    /// Its data is not valid.
    InvalidData,
    /// The mapping failed.
    AssignFailure,
    /// The unmapping failed.
    ReleaseFailure,
    /// A reason this version does not know.
    #[serde(other)]
    Other,
}

/// ASSIGN_PUBLIC_IP_FAILURE, UNASSIGN_PUBLIC_IP_FAILURE: the command's fields and why.
///
/// Fields the command did not carry in a usable form (an undecodable command) are absent; the
/// instance is then the nil UUID unless the command held a readable one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicIpFailure {
    /// The CNCI.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_uuid_bytes"
    )]
    pub concentrator_uuid: Option<Uuid>,
    /// The tenant.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_uuid_bytes"
    )]
    pub tenant_uuid: Option<Uuid>,
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The public address.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_text"
    )]
    pub public_ip: Option<IpAddr>,
    /// The private address.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_text"
    )]
    pub private_ip: Option<IpAddr>,
    /// The instance's MAC address.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_text"
    )]
    pub vnic_mac: Option<MacAddr>,
    /// Why.
    pub reason: PublicIpFailureReason,
}

/// Why the scheduler could not deliver a routed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryFailureReason {
    /// The target node is not connected (or not under a role that takes the frame).
    NodeUnavailable,
    /// The target CNCI is not connected.
    CnciUnavailable,
    /// The frame's new trace hop would push it over the maximum frame size.
    TooLarge,
    /// A reason this version does not know.
    #[serde(other)]
    Other,
}

/// DELIVERY_FAILURE: which frame could not be delivered, to whom, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryFailure {
    /// The undelivered frame's type byte.
    pub operand_type: u8,
    /// The undelivered frame's operand byte.
    pub operand: u8,
    /// The intended recipient, when there was one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_uuid_bytes"
    )]
    pub target_uuid: Option<Uuid>,
    /// Why.
    pub reason: DeliveryFailureReason,
}
