//! The cluster's interface to its driver: what the driver tells it of sessions beyond their
//! messages ([`Liveness`]), and what it asks the driver to do ([`Action`]).

use ssntp::Uuid;
use ssntp::frame::Frame;
use ssntp::payload::ClusterConfig;
use ssntp_net::{ServerHandle, Target};
use std::time::Instant;

/// What the SSNTP driver saw of a node's session that the cluster's messages do not show: when it
/// last received any frame from it, HEARTBEATs included (consumed by the driver) and frames not
/// handed over yet.
pub trait Liveness {
    /// When the session `generation` of `node` last received a frame; `None` when that session
    /// is not the node's current one.
    fn last_received(&self, node: Uuid, generation: u64) -> Option<Instant>;
}

impl Liveness for ServerHandle {
    fn last_received(&self, node: Uuid, generation: u64) -> Option<Instant> {
        ServerHandle::last_received(self, node, generation)
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send a frame the scheduler made.
    Send {
        /// The recipient.
        to: Uuid,
        /// The frame.
        frame: Frame,
    },
    /// Forward a received frame as it is (with the scheduler's trace hop).
    Forward {
        /// Who sent it.
        from: Uuid,
        /// The frame.
        frame: Frame,
        /// Where it goes.
        to: Target,
    },
    /// Tell `to` that `frame` could not be delivered.
    Fail {
        /// The sender of the undeliverable frame.
        to: Uuid,
        /// The frame.
        frame: Frame,
        /// Why.
        reason: ssntp::payload::DeliveryFailureReason,
        /// The intended recipient.
        target: Option<Uuid>,
    },
    /// Close a session (a dead node), if it is still that session.
    Disconnect {
        /// The node.
        uuid: Uuid,
        /// The session judged dead.
        generation: u64,
    },
    /// Send this cluster configuration in CONNECTED from now on (CONFIGURE).
    Configure(Box<ClusterConfig>),
    /// Forward a frame a node sent earlier (its latest STATS) to one controller, as it was
    /// received (with the scheduler's trace hop); if the controller does not take it, the next
    /// one does the job.
    Replay {
        /// The node that sent it.
        from: Uuid,
        /// The frame.
        frame: Frame,
        /// The controller.
        to: Uuid,
    },
}
