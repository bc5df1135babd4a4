//! The trace block (PROTOCOL.md §6): a label, a start time, and one hop per sender. Frames
//! carry it ([`crate::frame::Trace`]); TRACE_REPORT payloads list its hops.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::cbor;
use crate::role::Role;

/// The trace block of a traced frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// A label that names what is being traced.
    #[serde(default)]
    pub label: String,
    /// When the trace started, ns since the Unix epoch.
    #[serde(default)]
    pub start_ns: u64,
    /// One hop per sender, the creator first.
    pub hops: Vec<Hop>,
}

/// One sender of a traced frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// The sender's UUID.
    #[serde(with = "cbor::uuid_bytes")]
    pub uuid: Uuid,
    /// The sender's role on the session it sent on.
    #[serde(with = "cbor::role_bits")]
    pub role: Role,
    /// When the sender wrote the frame, ns since the Unix epoch.
    pub tx_ns: u64,
    /// When the next endpoint received it (0 until then).
    pub rx_ns: u64,
}

impl Trace {
    /// A new trace whose first hop is its creator.
    pub fn new(label: impl Into<String>, creator: Uuid, role: Role, now_ns: u64) -> Trace {
        Trace {
            label: label.into(),
            start_ns: now_ns,
            hops: vec![Hop {
                uuid: creator,
                role,
                tx_ns: now_ns,
                rx_ns: 0,
            }],
        }
    }

    /// Stamps the receive time on the last hop (the receiver's duty).
    pub fn stamp_rx(&mut self, now_ns: u64) {
        if let Some(last) = self.hops.last_mut() {
            last.rx_ns = now_ns;
        }
    }

    /// Appends a hop for a forwarder.
    pub fn push_hop(&mut self, uuid: Uuid, role: Role, now_ns: u64) {
        self.hops.push(Hop {
            uuid,
            role,
            tx_ns: now_ns,
            rx_ns: 0,
        });
    }

    /// The time from the first send to the last receive, in ns (0 while not received).
    pub fn duration_ns(&self) -> u64 {
        match (self.hops.first(), self.hops.last()) {
            (Some(first), Some(last)) if last.rx_ns >= first.tx_ns => last.rx_ns - first.tx_ns,
            _ => 0,
        }
    }
}
