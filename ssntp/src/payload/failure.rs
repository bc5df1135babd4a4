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
    /// The CONNECTION_ABORTED reason of a session that a new session of the same bound UUID
    /// replaced (PROTOCOL.md §4 step 5): its client stops, since another process now holds its
    /// identity.
    pub const REPLACED: &'static str = "replaced";

    /// The CONNECTION_ABORTED reason of a CONNECT, from a certificate that binds no UUID, for a
    /// UUID that a live session holds (PROTOCOL.md §4 step 5): its client tries again later, as
    /// that session may be a dead connection the server has not noticed yet.
    pub const UUID_IN_USE: &'static str = "uuid in use";

    /// The CONNECTION_ABORTED reason of a CONNECT that claims the server's own UUID: a
    /// misconfigured or hostile client, which retrying cannot help.
    pub const SERVER_UUID: &'static str = "server uuid";

    /// The CONNECTION_ABORTED reason of a CONNECT whose origin is the nil UUID, which names no
    /// endpoint.
    pub const NIL_UUID: &'static str = "nil uuid";

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
    /// A restart asked for an instance that the node does not hold.
    InstanceMissing,
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
    /// What the reason means, in words for the user (when the failure says nothing more).
    pub fn meaning(self) -> &'static str {
        use StartFailureReason as R;
        match self {
            R::FullCloud => "no compute node has room for the instance",
            R::FullCn => "the compute node has no room for the instance",
            R::NodeMaintenance => "the compute node is in maintenance",
            R::NoCn => "there is no compute node in the cluster",
            R::NoNetCn => "there is no network node in the cluster",
            R::InvalidPayload => "the node could not read the start request",
            R::InvalidData => "the start request asks for something the node cannot give",
            R::AlreadyRunning => "the instance already runs",
            R::InstanceExists => "leftovers of the instance exist on the node",
            R::InstanceMissing => "the node does not hold the instance (its disks are gone)",
            R::ImageFailure => "the image is missing or broken",
            R::LaunchFailure => "the instance failed to launch",
            R::NetworkFailure => "the instance's network could not be set up",
            R::Other => "the instance failed to start",
        }
    }

    /// Whether the controller should give up on the instance (all but the duplicate reasons).
    pub fn is_fatal(self) -> bool {
        !matches!(
            self,
            StartFailureReason::AlreadyRunning | StartFailureReason::InstanceExists
        )
    }
}

/// Most bytes of a START_FAILURE's `message` (PROTOCOL.md §7: at most 1 KiB).
pub const MAX_FAILURE_MESSAGE: usize = 1024;

/// `text` cut at a character boundary to at most `max` bytes.
pub fn truncate_text(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// START_FAILURE.
///
/// `message` is bounded: a longer one is cut (at a character boundary) to
/// [`MAX_FAILURE_MESSAGE`] bytes when it is encoded, and when it is decoded (a receiver never
/// refuses a longer one).
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
    /// The cause in words, for the user (an agent's; absent when the scheduler answers).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "bounded_message"
    )]
    pub message: Option<String>,
}

impl StartFailure {
    /// A START_FAILURE without a message.
    pub fn new(
        instance_uuid: Uuid,
        node_uuid: Option<Uuid>,
        reason: StartFailureReason,
        restart: bool,
    ) -> StartFailure {
        StartFailure {
            instance_uuid,
            node_uuid,
            reason,
            restart,
            message: None,
        }
    }

    /// The same failure with `message`, cut to [`MAX_FAILURE_MESSAGE`] bytes.
    pub fn with_message(mut self, message: impl Into<String>) -> StartFailure {
        self.message = Some(truncate_text(message.into(), MAX_FAILURE_MESSAGE));
        self
    }
}

/// The optional `message` text, cut to [`MAX_FAILURE_MESSAGE`] bytes both ways.
mod bounded_message {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::{MAX_FAILURE_MESSAGE, truncate_text};

    pub(super) fn serialize<S: Serializer>(m: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        match m {
            Some(m) if m.len() > MAX_FAILURE_MESSAGE => {
                s.serialize_str(&truncate_text(m.clone(), MAX_FAILURE_MESSAGE))
            }
            Some(m) => s.serialize_str(m),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        String::deserialize(d).map(|m| Some(truncate_text(m, MAX_FAILURE_MESSAGE)))
    }
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

/// Why a volume could not be attached (or detached).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachVolumeFailureReason {
    /// The node has no such instance.
    NoInstance,
    /// The ATTACH_VOLUME (DETACH_VOLUME) could not be decoded.
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

/// ATTACH_VOLUME_FAILURE and DETACH_VOLUME_FAILURE.
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
    /// The cause in words, for the user (a project addition, optional, bounded like
    /// START_FAILURE's).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "bounded_message"
    )]
    pub message: Option<String>,
}

impl AttachVolumeFailure {
    /// A failure without a message.
    pub fn new(
        instance_uuid: Uuid,
        volume_uuid: Uuid,
        node_uuid: Option<Uuid>,
        reason: AttachVolumeFailureReason,
    ) -> AttachVolumeFailure {
        AttachVolumeFailure {
            instance_uuid,
            volume_uuid,
            node_uuid,
            reason,
            message: None,
        }
    }

    /// The same failure with `message`, cut to [`MAX_FAILURE_MESSAGE`] bytes.
    pub fn with_message(mut self, message: impl Into<String>) -> AttachVolumeFailure {
        self.message = Some(truncate_text(message.into(), MAX_FAILURE_MESSAGE));
        self
    }
}

/// DETACH_VOLUME_FAILURE: the fields of ATTACH_VOLUME_FAILURE.
pub type DetachVolumeFailure = AttachVolumeFailure;

/// Why an INSTANCE_ACTION failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceActionFailureReason {
    /// The node has no such instance.
    NoInstance,
    /// The instance's state does not allow the action (pause a stopped instance).
    InvalidState,
    /// The INSTANCE_ACTION could not be decoded.
    InvalidPayload,
    /// Its data is not valid (an action the node does not know).
    InvalidData,
    /// The backend failed to carry it out.
    BackendFailure,
    /// A reason this version does not know.
    #[serde(other)]
    Other,
}

/// INSTANCE_ACTION_FAILURE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceActionFailure {
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
    /// The action asked, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<super::instance::Action>,
    /// Why.
    pub reason: InstanceActionFailureReason,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operand::Operand;
    use crate::payload::{Payload, cbor};

    fn failure() -> StartFailure {
        StartFailure::new(
            Uuid::from_u128(1),
            Some(Uuid::from_u128(2)),
            StartFailureReason::LaunchFailure,
            false,
        )
    }

    fn decode(bytes: &[u8]) -> StartFailure {
        match Payload::decode(Operand::StartFailure, bytes) {
            Ok(Payload::StartFailure(f)) => f,
            other => panic!("not a START_FAILURE: {other:?}"),
        }
    }

    #[test]
    fn the_message_is_optional_and_absent_when_not_set() {
        let bare = Payload::StartFailure(failure()).encode();
        assert!(!bare.windows(7).any(|w| w == b"message"));
        assert_eq!(decode(&bare).message, None);
        let with = failure().with_message("QEMU could not open /x: Permission denied");
        assert_eq!(decode(&Payload::StartFailure(with.clone()).encode()), with);
    }

    #[test]
    fn a_sender_cuts_a_long_message_at_a_char_boundary() {
        // 'é' is two bytes: 1023 ASCII bytes then 'é' would end at byte 1025.
        let long = format!("{}é and more", "a".repeat(1023));
        let cut = failure().with_message(long.clone());
        assert_eq!(cut.message.as_deref(), Some("a".repeat(1023).as_str()));
        // Set directly, it is still cut when encoded.
        let mut direct = failure();
        direct.message = Some(long);
        let decoded = decode(&Payload::StartFailure(direct).encode());
        assert_eq!(decoded.message, cut.message);
    }

    #[test]
    fn a_receiver_takes_a_long_message_and_cuts_it() {
        #[derive(Serialize)]
        struct Raw {
            #[serde(with = "cbor::uuid_bytes")]
            instance_uuid: Uuid,
            reason: &'static str,
            restart: bool,
            message: String,
        }
        let mut bytes = Vec::new();
        cbor::encode_into(
            &Raw {
                instance_uuid: Uuid::from_u128(1),
                reason: "instance_missing",
                restart: true,
                message: "ü".repeat(1000),
            },
            &mut bytes,
        );
        let f = decode(&bytes);
        assert_eq!(f.reason, StartFailureReason::InstanceMissing);
        let message = f.message.unwrap();
        assert_eq!(message, "ü".repeat(512));
        assert!(message.len() <= MAX_FAILURE_MESSAGE);
    }

    #[test]
    fn instance_missing_is_fatal() {
        assert!(StartFailureReason::InstanceMissing.is_fatal());
        assert!(!StartFailureReason::InstanceExists.is_fatal());
    }
}
