//! Typed payloads (PROTOCOL.md §7): one type per payload family, decoded once per frame.
//!
//! [`Payload`] has one variant per known operand; [`Payload::decode`] reads the CBOR body of a
//! frame with a given operand, [`Payload::encode`] writes it back. Unknown keys are ignored;
//! missing required keys, wrong types, more than one CBOR item, or a non-map are errors.
//!
//! The trace block's CBOR map (PROTOCOL.md §6, `trace`) is here too, beside the CBOR shapes it
//! shares with the payloads and the TRACE_REPORT payload that lists its hops; frames carry it as
//! [`frame::Trace`](crate::frame::Trace). Payloads know operands ([`Operand`]) but not frames:
//! the arrow goes from [`frame`](crate::frame) to here only.

pub mod cbor;
mod failure;
mod handshake;
mod instance;
mod network;
mod node;
pub(crate) mod trace;
mod trace_report;
mod types;

pub use failure::{
    AttachVolumeFailure, AttachVolumeFailureReason, DeleteFailure, DeleteFailureReason,
    DeliveryFailure, DeliveryFailureReason, DetachVolumeFailure, InstanceActionFailure,
    InstanceActionFailureReason, MAX_FAILURE_MESSAGE, PublicIpFailure, PublicIpFailureReason,
    Reason, StartFailure, StartFailureReason, truncate_text,
};
pub use handshake::{
    ClusterConfig, Connect, Connected, ControllerConfig, LauncherConfig, SchedulerConfig,
};
pub use instance::{
    Action, AttachVolume, Delete, FwType, InstanceAction, InstanceEvent, Networking, Requirements,
    Start, Storage, VmType, VolumeCommand,
};
pub use network::{
    CnciPeer, ConcentratorAdded, PublicIpCommand, PublicIpEvent, RefreshCnci, TenantEvent,
};
pub use node::{
    InstanceStat, InstanceState, NodeCommand, NodeEvent, NodeNetwork, NodeState, NodeStatus,
    NodeType, Stats,
};
pub use trace_report::{FrameTrace, TraceReport};
pub use types::{AddrParseError, Cidr, MacAddr};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::operand::Operand;

/// A payload that does not decode for its operand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The operand has no payload type (unknown operand).
    #[error("operand {0} has no payload")]
    UnknownOperand(Operand),
    /// The operand needs a payload and the body is empty.
    #[error("a payload is required")]
    Missing,
    /// Bytes follow the one CBOR data item.
    #[error("{0} bytes after the CBOR payload")]
    TrailingBytes(usize),
    /// Malformed CBOR, not a map, or a map that is not the operand's schema.
    #[error("{0}")]
    Cbor(String),
}

/// A map whose keys are all ignored: the body of operands without a payload of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct AnyMap {}

macro_rules! payloads {
    (
        map { $( $mop:ident($mty:ty) ),* $(,)? }
        optional_map { $( $oop:ident($oty:ty) ),* $(,)? }
        empty { $( $eop:ident ),* $(,)? }
    ) => {
        /// The typed payload of a frame: one variant per known operand.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Payload {
            $(
                #[doc = concat!("The payload of `", stringify!($mop), "`.")]
                $mop($mty),
            )*
            $(
                #[doc = concat!("The payload of `", stringify!($oop), "`: none, or a READY-shaped map.")]
                $oop(Option<$oty>),
            )*
            $(
                #[doc = concat!("`", stringify!($eop), "`: no payload.")]
                $eop,
            )*
        }

        impl Payload {
            /// The operand this payload belongs to.
            pub fn operand(&self) -> Operand {
                match self {
                    $( Payload::$mop(_) => Operand::$mop, )*
                    $( Payload::$oop(_) => Operand::$oop, )*
                    $( Payload::$eop => Operand::$eop, )*
                }
            }

            /// Decodes the payload bytes of a frame with this operand.
            pub fn decode(operand: Operand, bytes: &[u8]) -> Result<Payload, PayloadError> {
                match operand {
                    $( Operand::$mop => {
                        if bytes.is_empty() {
                            return Err(PayloadError::Missing);
                        }
                        cbor::decode_one(bytes).map(Payload::$mop)
                    } )*
                    $( Operand::$oop => {
                        if bytes.is_empty() {
                            return Ok(Payload::$oop(None));
                        }
                        cbor::decode_one(bytes).map(|p| Payload::$oop(Some(p)))
                    } )*
                    $( Operand::$eop => {
                        if !bytes.is_empty() {
                            cbor::decode_one::<AnyMap>(bytes)?;
                        }
                        Ok(Payload::$eop)
                    } )*
                    Operand::Unknown { .. } => Err(PayloadError::UnknownOperand(operand)),
                }
            }

            /// Appends the CBOR encoding of this payload (nothing for an empty payload).
            pub fn encode_into(&self, out: &mut Vec<u8>) {
                match self {
                    $( Payload::$mop(p) => cbor::encode_into(p, out), )*
                    $( Payload::$oop(Some(p)) => cbor::encode_into(p, out), )*
                    $( Payload::$oop(None) => {}, )*
                    $( Payload::$eop => {}, )*
                }
            }
        }
    };
}

payloads! {
    map {
        Connect(Connect),
        Start(Box<Start>),
        Stats(Box<Stats>),
        Evacuate(NodeCommand),
        Delete(Delete),
        AssignPublicIp(PublicIpCommand),
        ReleasePublicIp(PublicIpCommand),
        Configure(Box<ClusterConfig>),
        AttachVolume(AttachVolume),
        Restore(NodeCommand),
        RefreshCnci(RefreshCnci),
        InstanceAction(InstanceAction),
        DetachVolume(VolumeCommand),
        Connected(Box<Connected>),
        Ready(NodeStatus),
        TenantAdded(TenantEvent),
        TenantRemoved(TenantEvent),
        InstanceDeleted(InstanceEvent),
        ConcentratorInstanceAdded(ConcentratorAdded),
        PublicIpAssigned(PublicIpEvent),
        PublicIpUnassigned(PublicIpEvent),
        TraceReport(TraceReport),
        NodeConnected(NodeEvent),
        NodeDisconnected(NodeEvent),
        InstanceStopped(InstanceEvent),
        InvalidFrameType(Reason),
        StartFailure(StartFailure),
        ConnectionFailure(Reason),
        DeleteFailure(DeleteFailure),
        ConnectionAborted(Reason),
        InvalidConfiguration(Reason),
        AttachVolumeFailure(AttachVolumeFailure),
        AssignPublicIpFailure(PublicIpFailure),
        UnassignPublicIpFailure(PublicIpFailure),
        ProtocolViolation(Reason),
        DeliveryFailure(DeliveryFailure),
        InstanceActionFailure(InstanceActionFailure),
        DetachVolumeFailure(DetachVolumeFailure),
    }
    optional_map {
        Full(NodeStatus),
        Offline(NodeStatus),
        Maintenance(NodeStatus),
    }
    empty {
        Heartbeat,
    }
}

impl Payload {
    /// The CBOR encoding of this payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// The node UUID a node-status payload names (READY, STATS, READY-shaped FULL/...), if any.
    pub fn node_uuid(&self) -> Option<Uuid> {
        match self {
            Payload::Ready(n) => Some(n.node_uuid),
            Payload::Stats(s) => Some(s.node.node_uuid),
            Payload::Full(n) | Payload::Offline(n) | Payload::Maintenance(n) => {
                n.as_ref().map(|n| n.node_uuid)
            }
            _ => None,
        }
    }
}

/// What can be read of a payload that does not decode: used to fill in the failure reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Salvage {
    /// `instance_uuid`, when the payload is one CBOR map holding a 16-byte one.
    pub instance_uuid: Option<Uuid>,
    /// `volume_uuid`, likewise.
    pub volume_uuid: Option<Uuid>,
    /// `concentrator_uuid`, likewise.
    pub concentrator_uuid: Option<Uuid>,
    /// `tenant_uuid`, likewise.
    pub tenant_uuid: Option<Uuid>,
}

impl Salvage {
    /// Reads what it can of `bytes`; nothing when they are not exactly one CBOR map.
    pub fn read(bytes: &[u8]) -> Salvage {
        let Ok(ciborium::Value::Map(entries)) = cbor::decode_one::<ciborium::Value>(bytes) else {
            return Salvage::default();
        };
        let uuid = |key: &str| {
            entries.iter().find_map(|(k, v)| match (k, v) {
                (ciborium::Value::Text(k), ciborium::Value::Bytes(b)) if k == key => {
                    Uuid::from_slice(b).ok()
                }
                _ => None,
            })
        };
        Salvage {
            instance_uuid: uuid("instance_uuid"),
            volume_uuid: uuid("volume_uuid"),
            concentrator_uuid: uuid("concentrator_uuid"),
            tenant_uuid: uuid("tenant_uuid"),
        }
    }
}
