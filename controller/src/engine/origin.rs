//! Who may report what: a node changes only what the store places on it, a CNCI only itself.
//!
//! A frame's origin is the endpoint that made it (PROTOCOL.md §3); the scheduler's server drops
//! any frame whose origin is not its sender's session UUID, and forwards the rest unchanged
//! (§8), so what the controller sees as the origin of a forwarded STATS, INSTANCE_STOPPED, ... is
//! the UUID of the node (or CNCI) whose session sent it, and the origin of a frame the scheduler
//! makes itself (its own START_FAILURE `no_cn`, `full_cloud`, ...; NODE_CONNECTED) is the
//! scheduler's UUID, learnt when the session opens ([`Engine::scheduler_connected`]).
//!
//! What is checked, for frames applied with their origin ([`Engine::handle_from`]):
//! - STATS: the node it describes is its origin; each instance it lists that is not the node's
//!   own (below) is left alone (the stale copy of a moved instance is deleted there, see
//!   [`super::relocate`]); a CNCI it lists that the store places on another node too;
//! - INSTANCE_STOPPED, INSTANCE_DELETED, DELETE_FAILURE: about an instance that is the node's
//!   own, or a CNCI placed on it or on no node; a DELETE_FAILURE names its origin as its node;
//! - START_FAILURE: the scheduler's own is trusted; a node's names its origin as its node, and
//!   is about an instance that is the node's own, or a CNCI placed on it or on no node;
//! - CONCENTRATOR_INSTANCE_ADDED: the CNCI it announces is its origin, of the tenant the store
//!   gives that CNCI;
//! - ATTACH_VOLUME_FAILURE, DETACH_VOLUME_FAILURE: a node's names its origin as its node, and
//!   is about a volume of an instance the store places on it (module `volumes`).
//!
//! An instance is a node's own when the store places it on that node, or on no node while a
//! START of it may be on its way (`pending`, `deleted` or `hung` before any node reported it, an
//! `error` `start_lost`): the scheduler places a START without telling the controller where, so
//! the first node that reports such an instance is where it runs. A hostile node can claim one of
//! those in that window; it cannot touch an instance once a node has reported it.
//!
//! Each refusal is logged (a warning naming the origin and what it claimed) and counted by frame
//! ([`Engine::reports_refused`]: `cumulo_controller_reports_refused_total` on `/metrics`). Frames
//! applied without an origin ([`Engine::handle`], in process) are trusted as before.

use ssntp::Operand;
use store::{Cnci, Instance, InstanceState};
use uuid::Uuid;

use super::{Engine, START_LOST};

/// At most this many scheduler UUIDs are remembered (then the set starts again with the next
/// session).
const MAX_SCHEDULERS: usize = 1024;

/// The frames whose claims are checked, in the order `/metrics` lists them.
const CHECKED: [Operand; 12] = [
    Operand::Stats,
    Operand::InstanceStopped,
    Operand::InstanceDeleted,
    Operand::StartFailure,
    Operand::DeleteFailure,
    Operand::ConcentratorInstanceAdded,
    Operand::PublicIpAssigned,
    Operand::PublicIpUnassigned,
    Operand::AssignPublicIpFailure,
    Operand::UnassignPublicIpFailure,
    Operand::AttachVolumeFailure,
    Operand::DetachVolumeFailure,
];

/// Whether a START of an instance on no node in `state` may be on its way to a node.
fn start_in_flight(state: &InstanceState) -> bool {
    match state {
        InstanceState::Pending | InstanceState::Deleted | InstanceState::Hung => true,
        InstanceState::Error(reason) => reason.starts_with(START_LOST),
        _ => false,
    }
}

/// Whether instance `record` is node `from`'s own (see the module docs).
fn owns(from: Uuid, record: &Instance) -> bool {
    match record.node {
        Some(node) => node == from,
        None => start_in_flight(&record.state),
    }
}

/// `node N`, or `no node`.
pub(super) fn placement(node: Option<Uuid>) -> String {
    node.map_or_else(|| "no node".to_string(), |n| format!("node {n}"))
}

impl Engine {
    /// The session with the scheduler `uuid` opened: frames whose origin is `uuid` are the
    /// scheduler's own from now on.
    pub fn scheduler_connected(&self, uuid: Uuid) {
        let mut state = self.state();
        if state.schedulers.len() >= MAX_SCHEDULERS {
            state.schedulers.clear();
        }
        state.schedulers.insert(uuid);
    }

    /// How many reports were refused since the engine started, for each frame it checks (STATS,
    /// INSTANCE_STOPPED, INSTANCE_DELETED, START_FAILURE, DELETE_FAILURE,
    /// CONCENTRATOR_INSTANCE_ADDED, PUBLIC_IP_ASSIGNED, PUBLIC_IP_UNASSIGNED,
    /// ASSIGN_PUBLIC_IP_FAILURE, UNASSIGN_PUBLIC_IP_FAILURE, ATTACH_VOLUME_FAILURE,
    /// DETACH_VOLUME_FAILURE: by wire name, 0 for those never refused).
    pub fn reports_refused(&self) -> Vec<(&'static str, u64)> {
        let state = self.state();
        CHECKED
            .iter()
            .map(|frame| {
                let name = frame.name();
                (name, state.refused.get(name).copied().unwrap_or(0))
            })
            .collect()
    }

    /// The node a START_FAILURE with this origin is from: `None` for the scheduler's own (and
    /// for one applied in process).
    pub(super) fn failing_node(&self, origin: Option<Uuid>) -> Option<Uuid> {
        let state = self.state();
        origin.filter(|o| !state.schedulers.contains(o))
    }

    /// Refuses a report: `origin` claimed `claim` (logged and counted).
    pub(super) fn refuse(&self, frame: Operand, origin: Uuid, claim: std::fmt::Arguments<'_>) {
        tracing::warn!(%origin, frame = frame.name(), "report refused: it claims {claim}");
        *self.state().refused.entry(frame.name()).or_insert(0) += 1;
    }

    /// Whether node `from` reporting on `record` in a `frame` claims what is not its own, and
    /// is not the stale copy a move left on `from` either: refused (logged and counted).
    pub(super) fn foreign(&self, frame: Operand, from: Uuid, record: &Instance) -> bool {
        if owns(from, record) || self.state().relocated.get(&record.id) == Some(&from) {
            return false;
        }
        let placed = placement(record.node);
        self.refuse(
            frame,
            from,
            format_args!(
                "instance {} ({}), which the store places on {placed}",
                record.id,
                record.state.name()
            ),
        );
        true
    }

    /// Whether node `from` reporting on CNCI `cnci` in a `frame` claims a CNCI the store places
    /// on another node: refused (logged and counted). A CNCI on no node yet is anyone's to
    /// report: its node is learnt from the first STATS that lists it.
    pub(super) fn foreign_cnci(&self, frame: Operand, from: Uuid, cnci: &Cnci) -> bool {
        match cnci.node {
            Some(node) if node != from => {
                self.refuse(
                    frame,
                    from,
                    format_args!("CNCI {}, which the store places on node {node}", cnci.id),
                );
                true
            }
            _ => false,
        }
    }
}
