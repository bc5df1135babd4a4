//! Nodes and controllers coming and going: sessions established and ended, nodes announced to
//! the controllers (NODE_CONNECTED, NODE_DISCONNECTED, a late controller's catch-up), and silent
//! nodes dropped ([`Cluster::tick`]).

use ssntp::frame::Frame;
use ssntp::payload::{NodeEvent, NodeType};
use ssntp::{Payload, Role, Uuid};
use std::time::Instant;

use super::driver::{Action, Liveness};
use super::state::{Cluster, DEAD_AFTER_INTERVALS, Session};

/// The NODE_* event types a node of `role` yields: compute, network, or both.
fn node_types(role: Role) -> impl Iterator<Item = NodeType> {
    let compute = role.contains(Role::AGENT).then_some(NodeType::ComputeNode);
    let network = role
        .contains(Role::NETAGENT)
        .then_some(NodeType::NetworkNode);
    compute.into_iter().chain(network)
}

impl Cluster {
    pub(super) fn to_controllers(&self, payload: &Payload) -> Vec<Action> {
        let frame = Frame::new(self.uuid, payload);
        self.controllers
            .iter()
            .map(|(c, _)| Action::Send {
                to: *c,
                frame: frame.clone(),
            })
            .collect()
    }

    pub(super) fn node_events(&self, uuid: Uuid, role: Role, connected: bool) -> Vec<Action> {
        node_types(role)
            .flat_map(|node_type| {
                let event = NodeEvent {
                    node_uuid: uuid,
                    node_type,
                };
                let payload = if connected {
                    Payload::NodeConnected(event)
                } else {
                    Payload::NodeDisconnected(event)
                };
                self.to_controllers(&payload)
            })
            .collect()
    }

    /// A session was established (`generation` tells it from older sessions of the UUID).
    pub fn connected(
        &mut self,
        uuid: Uuid,
        role: Role,
        generation: u64,
        now: Instant,
    ) -> Vec<Action> {
        if role.contains(Role::CONTROLLER) {
            self.controllers.retain(|(c, _)| *c != uuid);
            self.controllers.push((uuid, generation));
            // Catch up: one NODE_CONNECTED per node that has announced itself (two for a
            // dual-role node), each node's followed by its latest STATS.
            let mut nodes: Vec<(Uuid, &Session)> = self
                .nodes
                .iter()
                .filter(|(_, s)| s.announced)
                .map(|(u, s)| (*u, s))
                .collect();
            nodes.sort_by_key(|(u, _)| *u);
            let me = self.uuid;
            let mut actions = Vec::new();
            for (node, session) in nodes {
                actions.extend(node_types(session.role).map(|node_type| Action::Send {
                    to: uuid,
                    frame: Frame::new(
                        me,
                        &Payload::NodeConnected(NodeEvent {
                            node_uuid: node,
                            node_type,
                        }),
                    ),
                }));
                actions.extend(session.stats.clone().map(|frame| Action::Replay {
                    from: node,
                    frame,
                    to: uuid,
                }));
            }
            return actions;
        }
        if !role.intersects(Role::AGENT | Role::NETAGENT) {
            return Vec::new(); // CNCI agents are instances, not nodes.
        }
        self.nodes.insert(
            uuid,
            Session {
                role,
                last_seen: now,
                generation,
                announced: false,
                stats: None,
            },
        );
        self.placement.add(
            uuid,
            role.contains(Role::AGENT),
            role.contains(Role::NETAGENT),
        );
        // Controllers hear of it with its first status (see `message`).
        Vec::new()
    }

    /// A session ended. An older session of a UUID that has a newer one changes nothing.
    pub fn disconnected(&mut self, uuid: Uuid, role: Role, generation: u64) -> Vec<Action> {
        if role.contains(Role::CONTROLLER) {
            self.controllers
                .retain(|(c, g)| (*c, *g) != (uuid, generation));
            return Vec::new();
        }
        match self.nodes.get(&uuid) {
            Some(session) if session.generation == generation => {
                let (role, announced) = (session.role, session.announced);
                self.nodes.remove(&uuid);
                self.placement.remove(uuid);
                if announced {
                    self.node_events(uuid, role, false)
                } else {
                    Vec::new()
                }
            }
            // Already dropped as dead, a newer session took its place, or never a node.
            _ => Vec::new(),
        }
    }

    /// Drops nodes that sent nothing at all for [`DEAD_AFTER_INTERVALS`] STATS intervals. A node
    /// whose messages are that old is first looked up in `liveness`: a HEARTBEAT (or any frame
    /// the driver has not handed over yet) keeps it. Only such nodes are looked up, so a cluster
    /// whose nodes send STATS costs no look-up at all.
    pub fn tick(&mut self, now: Instant, liveness: &dyn Liveness) -> Vec<Action> {
        let mut dead: Vec<(Uuid, Role, u64)> = Vec::new();
        for (uuid, session) in &mut self.nodes {
            if now.saturating_duration_since(session.last_seen) < self.dead_after {
                continue;
            }
            if let Some(at) = liveness.last_received(*uuid, session.generation) {
                session.last_seen = session.last_seen.max(at);
            }
            if now.saturating_duration_since(session.last_seen) >= self.dead_after {
                dead.push((*uuid, session.role, session.generation));
            }
        }
        let mut actions = Vec::new();
        for (uuid, role, generation) in dead {
            tracing::warn!(
                %uuid,
                "node sent nothing, not even a HEARTBEAT, for {:?} ({DEAD_AFTER_INTERVALS} STATS intervals): dropped",
                self.dead_after
            );
            self.metrics.node_dropped();
            actions.push(Action::Disconnect { uuid, generation });
            actions.extend(self.disconnected(uuid, role, generation));
        }
        actions
    }
}
