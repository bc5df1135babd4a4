//! The scheduler's cluster state, as a pure state machine: session events and messages in,
//! actions (frames to send or forward, sessions to drop) out. The driver in `lib.rs` feeds it
//! from the SSNTP server and carries out what it returns; tests drive it directly.
//!
//! A node is lost when nothing at all came from it for [`DEAD_AFTER_INTERVALS`] STATS intervals:
//! every frame shows it alive, a HEARTBEAT included (PROTOCOL.md §5 rule 5). HEARTBEATs never
//! reach the cluster as messages; [`Cluster::tick`] asks the driver's [`Liveness`] about a node
//! before it judges it silent.
//!
//! By concern, one file each: `driver` (what the driver tells the cluster, [`Liveness`], and what
//! the cluster asks of it, [`Action`]), `state` (the [`Cluster`] and what it keeps of each node),
//! `nodes` (sessions coming and going, silent nodes dropped, controllers told), `messages` (status,
//! STATS, START placement, frames addressed to a node, CONFIGURE), `groups` (where members of
//! server groups were placed, for a while). Imports go one way: `driver`, `groups` ← `state` ←
//! `nodes`, `messages`; this file only re-exports.

mod driver;
mod groups;
mod messages;
mod nodes;
mod state;
#[cfg(test)]
mod tests;

pub use driver::{Action, Liveness};
pub use state::{Cluster, DEAD_AFTER_INTERVALS};
