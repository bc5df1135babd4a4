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
mod firewall;
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
pub use firewall::{
    Firewall, FirewallDirection, FirewallError, FirewallRule, MAX_FIREWALL_PREFIXES,
    MAX_FIREWALL_RULES,
};
pub use handshake::{
    ClusterConfig, Connect, Connected, ControllerConfig, LauncherConfig, SchedulerConfig,
};
pub use instance::{
    Action, AttachVolume, CNCI_CERT_KEY, CNCI_KEY_KEY, CNCI_ROLE, Delete, FwType, GroupPolicy,
    GroupRequirement, InstanceAction, InstanceEvent, KernelBoot, Networking, ROLE_KEY,
    Requirements, Start, Storage, VmType, VolumeCommand, is_cnci_meta_data,
};
pub use network::{
    CnciPeer, ConcentratorAdded, PublicIpCommand, PublicIpEvent, RefreshCnci, TenantEvent,
};
pub use node::{
    DEFAULT_ZONE, InstanceStat, InstanceState, MAX_ZONE, NodeCommand, NodeEvent, NodeNetwork,
    NodeState, NodeStatus, NodeType, Stats, valid_zone,
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

/// Whom an addressed frame is for (PROTOCOL.md §8): a node, or a CNCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressee {
    /// The node (agent or netagent session) with this UUID.
    Node(Uuid),
    /// The CNCI (cnciagent session) with this UUID.
    Cnci(Uuid),
}

impl Payload {
    /// The node or CNCI this frame is addressed to, for the frames routed by a UUID in their
    /// payload (DELETE, EVACUATE, RESTORE, ATTACH/DETACH_VOLUME, INSTANCE_ACTION to
    /// `workload_agent_uuid`; ASSIGN/RELEASE_PUBLIC_IP, TENANT_ADDED/REMOVED to
    /// `concentrator_uuid`; REFRESH_CNCI to `cnci_uuid`); `None` for the others.
    pub fn addressee(&self) -> Option<Addressee> {
        Some(match self {
            Payload::Delete(d) => Addressee::Node(d.workload_agent_uuid),
            Payload::Evacuate(n) | Payload::Restore(n) => Addressee::Node(n.workload_agent_uuid),
            Payload::AttachVolume(a) | Payload::DetachVolume(a) => {
                Addressee::Node(a.workload_agent_uuid)
            }
            Payload::InstanceAction(a) => Addressee::Node(a.workload_agent_uuid),
            Payload::AssignPublicIp(p) | Payload::ReleasePublicIp(p) => {
                Addressee::Cnci(p.concentrator_uuid)
            }
            Payload::TenantAdded(t) | Payload::TenantRemoved(t) => {
                Addressee::Cnci(t.concentrator_uuid)
            }
            Payload::RefreshCnci(r) => Addressee::Cnci(r.cnci_uuid),
            _ => return None,
        })
    }

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
    /// Reads what it can of `bytes`; nothing when they are not exactly one CBOR map. The map's
    /// other entries are skipped whatever they hold (tags included, nesting within the decoder's
    /// depth limit), and a listed key whose value is not a 16-byte byte string counts as absent:
    /// PROTOCOL.md's rule for the failure reply's `instance_uuid`.
    pub fn read(bytes: &[u8]) -> Salvage {
        let Ok(keys) = cbor::decode_one::<SalvageKeys>(bytes) else {
            return Salvage::default();
        };
        Salvage {
            instance_uuid: keys.instance_uuid.0,
            volume_uuid: keys.volume_uuid.0,
            concentrator_uuid: keys.concentrator_uuid.0,
            tenant_uuid: keys.tenant_uuid.0,
        }
    }
}

/// The keys [`Salvage`] looks for, read from a map whose other entries (whatever their keys and
/// values) are skipped.
#[derive(Default)]
struct SalvageKeys {
    instance_uuid: AnyUuid,
    volume_uuid: AnyUuid,
    concentrator_uuid: AnyUuid,
    tenant_uuid: AnyUuid,
}

impl<'de> Deserialize<'de> for SalvageKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SalvageKeys, D::Error> {
        d.deserialize_map(SalvageKeysVisitor)
    }
}

struct SalvageKeysVisitor;

impl<'de> serde::de::Visitor<'de> for SalvageKeysVisitor {
    type Value = SalvageKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a CBOR map")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<SalvageKeys, A::Error> {
        let mut keys = SalvageKeys::default();
        while let Some(key) = map.next_key::<AnyKey>()? {
            let slot = match key.0.as_deref() {
                Some("instance_uuid") => &mut keys.instance_uuid,
                Some("volume_uuid") => &mut keys.volume_uuid,
                Some("concentrator_uuid") => &mut keys.concentrator_uuid,
                Some("tenant_uuid") => &mut keys.tenant_uuid,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value::<AnyUuid>()?;
        }
        Ok(keys)
    }
}

/// Any CBOR value as a map key: its text when it is text, else nothing (never an error).
struct AnyKey(Option<String>);

impl<'de> Deserialize<'de> for AnyKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AnyKey, D::Error> {
        let mut text = None;
        d.deserialize_any(AnyValue(&mut text, None))?;
        Ok(AnyKey(text))
    }
}

/// Any CBOR value: a UUID when it is a 16-byte byte string, else nothing (never an error).
#[derive(Default)]
struct AnyUuid(Option<Uuid>);

impl<'de> Deserialize<'de> for AnyUuid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AnyUuid, D::Error> {
        let mut uuid = None;
        d.deserialize_any(AnyValue(&mut None, Some(&mut uuid)))?;
        Ok(AnyUuid(uuid))
    }
}

/// Reads and skips any CBOR value, keeping its text (in `.0`) or its UUID (in `.1`, when asked
/// for and it is a 16-byte byte string).
struct AnyValue<'a>(&'a mut Option<String>, Option<&'a mut Option<Uuid>>);

impl<'de> serde::de::Visitor<'de> for AnyValue<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any CBOR value")
    }

    fn visit_bytes<E: serde::de::Error>(self, b: &[u8]) -> Result<(), E> {
        if let Some(uuid) = self.1 {
            *uuid = Uuid::from_slice(b).ok();
        }
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        *self.0 = Some(s.to_string());
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<(), E> {
        Ok(())
    }

    fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| ())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(())
    }

    fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

#[cfg(test)]
mod salvage_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// CBOR text of `s` (shorter than 24 bytes).
    fn text(s: &str) -> Vec<u8> {
        let mut out = vec![0x60 | u8::try_from(s.len()).unwrap()];
        out.extend_from_slice(s.as_bytes());
        out
    }

    /// CBOR bytes of a UUID.
    fn uuid(id: Uuid) -> Vec<u8> {
        let mut out = vec![0x50];
        out.extend_from_slice(id.as_bytes());
        out
    }

    /// A map of `entries` (fewer than 24).
    fn map(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut out = vec![0xa0 | u8::try_from(entries.len()).unwrap()];
        for (k, v) in entries {
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        }
        out
    }

    #[test]
    fn the_uuids_are_read_whatever_else_the_map_holds() {
        let id = Uuid::from_u128(7);
        let tenant = Uuid::from_u128(8);
        // A tag (1: epoch time) on another entry, and an array nested 40 deep in a third.
        let mut deep = vec![0x81; 40];
        deep.push(0x00);
        let bytes = map(&[
            (text("when"), vec![0xc1, 0x00]),
            (vec![0x01], vec![0x02]),
            (vec![0x41, 0x6b], vec![0x00]),
            (text("deep"), deep),
            (text("instance_uuid"), uuid(id)),
            (text("tenant_uuid"), uuid(tenant)),
        ]);
        let s = Salvage::read(&bytes);
        assert_eq!(s.instance_uuid, Some(id));
        assert_eq!(s.tenant_uuid, Some(tenant));
        assert_eq!(s.volume_uuid, None);
    }

    #[test]
    fn a_key_that_holds_no_16_byte_string_is_absent_and_the_others_stay() {
        let tenant = Uuid::from_u128(8);
        let bytes = map(&[
            (text("instance_uuid"), text("not-a-uuid")),
            (text("volume_uuid"), vec![0x43, 1, 2, 3]),
            (text("tenant_uuid"), uuid(tenant)),
        ]);
        let s = Salvage::read(&bytes);
        assert_eq!((s.instance_uuid, s.volume_uuid), (None, None));
        assert_eq!(s.tenant_uuid, Some(tenant));
    }

    #[test]
    fn anything_but_exactly_one_map_salvages_nothing() {
        let id = Uuid::from_u128(7);
        let one = map(&[(text("instance_uuid"), uuid(id))]);
        assert_eq!(Salvage::read(&one).instance_uuid, Some(id));
        let mut two = one.clone();
        two.extend_from_slice(&one);
        for bytes in [two, vec![0x80], vec![], vec![0xff], one[..5].to_vec()] {
            assert_eq!(Salvage::read(&bytes), Salvage::default(), "{bytes:02x?}");
        }
    }
}
