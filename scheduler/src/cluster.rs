//! The scheduler's cluster state, as a pure state machine: session events and messages in,
//! actions (frames to send or forward, sessions to drop) out. The driver in `lib.rs` feeds it
//! from the SSNTP server and carries out what it returns; tests drive it directly.
//!
//! A node is lost when nothing at all came from it for [`DEAD_AFTER_INTERVALS`] STATS intervals:
//! every frame shows it alive, a HEARTBEAT included (PROTOCOL.md §5 rule 5). HEARTBEATs never
//! reach the cluster as messages; [`Cluster::tick`] asks the driver's [`Liveness`] about a node
//! before it judges it silent.

use ssntp::frame::Frame;
use ssntp::payload::{
    ClusterConfig, NodeEvent, NodeState, NodeType, SchedulerConfig, Start, StartFailure,
};
use ssntp::session::Message;
use ssntp::{Payload, Role, Uuid};
use ssntp_net::{Directory, Route, ServerHandle, Target};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::placement::Placement;

/// How many STATS intervals of silence (no frame at all, HEARTBEAT included) make a node lost.
pub const DEAD_AFTER_INTERVALS: u32 = 3;

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

/// What the scheduler knows of a node's session.
#[derive(Debug, Clone)]
struct Session {
    role: Role,
    last_seen: Instant,
    generation: u64,
    /// Whether its first status (READY, FULL, MAINTENANCE or OFFLINE) came: only then is it
    /// placeable, and only then are controllers told of it (NODE_CONNECTED).
    announced: bool,
    /// Its latest STATS, as received: a controller that connects late gets it after the node's
    /// NODE_CONNECTED, and has its figures without waiting a STATS interval.
    stats: Option<Frame>,
}

/// The cluster as the scheduler sees it: soft state, rebuilt from the agents after a restart.
#[derive(Debug)]
pub struct Cluster {
    uuid: Uuid,
    placement: Placement,
    /// Connected controllers, in connection order, with their session generation.
    controllers: Vec<(Uuid, u64)>,
    nodes: HashMap<Uuid, Session>,
    /// The agents' STATS interval, in whole seconds: what CONNECTED tells them.
    stats_interval_s: u32,
    /// [`DEAD_AFTER_INTERVALS`] STATS intervals.
    dead_after: Duration,
    config: ClusterConfig,
    /// Counters for the metrics endpoint and the heartbeat line.
    pub metrics: Metrics,
}

/// `frame` with a payload of its own: a received payload may share a larger read buffer, which
/// a frame kept for long must not hold on to.
fn kept(mut frame: Frame) -> Frame {
    frame.payload = frame.payload.to_vec().into();
    frame
}

fn node_types(role: Role) -> impl Iterator<Item = NodeType> {
    let compute = role.contains(Role::AGENT).then_some(NodeType::ComputeNode);
    let network = role
        .contains(Role::NETAGENT)
        .then_some(NodeType::NetworkNode);
    compute.into_iter().chain(network)
}

impl Cluster {
    /// An empty cluster for the scheduler `uuid`, whose agents send STATS every
    /// `stats_interval_s` seconds: a node that sends nothing for [`DEAD_AFTER_INTERVALS`] of them
    /// is dropped.
    pub fn new(uuid: Uuid, stats_interval_s: u32) -> Cluster {
        Cluster {
            uuid,
            placement: Placement::new(),
            controllers: Vec::new(),
            nodes: HashMap::new(),
            stats_interval_s,
            dead_after: Duration::from_secs(u64::from(stats_interval_s)) * DEAD_AFTER_INTERVALS,
            config: ClusterConfig::default(),
            metrics: Metrics::default(),
        }
    }

    /// The placement state (for inspection).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Connected controllers, in connection order.
    pub fn controllers(&self) -> Vec<Uuid> {
        self.controllers.iter().map(|(c, _)| *c).collect()
    }

    /// The last cluster configuration a controller sent (CONFIGURE), its `scheduler` section the
    /// scheduler's own.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// How long a node may send nothing at all before it is dropped.
    pub fn dead_after(&self) -> Duration {
        self.dead_after
    }

    /// `config` with the scheduler's own STATS interval: what the scheduler enforces is what
    /// CONNECTED tells the agents, whatever a configuration asked.
    pub fn told(&self, mut config: ClusterConfig) -> ClusterConfig {
        let own = self.stats_interval_s;
        let section = config
            .scheduler
            .get_or_insert_with(SchedulerConfig::default);
        if let Some(asked) = section.stats_interval_s
            && asked != own
        {
            tracing::warn!(
                "a configuration asked for STATS every {asked} s; the scheduler keeps {own} s (fixed at its start)"
            );
        }
        section.stats_interval_s = Some(own);
        config
    }

    fn to_controllers(&self, payload: &Payload) -> Vec<Action> {
        let frame = Frame::new(self.uuid, payload);
        self.controllers
            .iter()
            .map(|(c, _)| Action::Send {
                to: *c,
                frame: frame.clone(),
            })
            .collect()
    }

    fn node_events(&self, uuid: Uuid, role: Role, connected: bool) -> Vec<Action> {
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

    /// A message routed to the scheduler (the rest is forwarded by the SSNTP server's rules);
    /// `directory` says who is connected, for frames addressed to a node or a CNCI.
    pub fn message(
        &mut self,
        from: Uuid,
        role: Role,
        message: Message,
        now: Instant,
        directory: &dyn Directory,
    ) -> Vec<Action> {
        let mut first_status = None;
        if let Some(node) = self.nodes.get_mut(&from) {
            node.last_seen = now;
            if !node.announced
                && matches!(
                    message.payload,
                    Payload::Ready(_)
                        | Payload::Full(_)
                        | Payload::Maintenance(_)
                        | Payload::Offline(_)
                )
            {
                node.announced = true;
                first_status = Some(node.role);
            }
        }
        let update = match &message.payload {
            Payload::Ready(n) => Some((NodeState::Ready, Some(n))),
            Payload::Full(n) => Some((NodeState::Full, n.as_ref())),
            Payload::Maintenance(n) => Some((NodeState::Maintenance, n.as_ref())),
            Payload::Offline(n) => Some((NodeState::Offline, n.as_ref())),
            _ => None,
        };
        if let Some((state, figures)) = update {
            self.placement.update(from, state, figures);
            // A node is announced to the controllers once it can be placed on (or is known
            // not to take work): a controller that hears of it can send it work at once.
            return first_status.map_or_else(Vec::new, |role| self.node_events(from, role, true));
        }
        if role.contains(Role::CONTROLLER) && crate::routes::addressee(&message.payload).is_some() {
            return match crate::routes::to_addressee(&message.payload, directory) {
                Route::To(target) => {
                    vec![Action::Forward {
                        from,
                        frame: message.frame,
                        to: Target::Session(target),
                    }]
                }
                Route::Fail { reason, target } => {
                    vec![Action::Fail {
                        to: from,
                        frame: message.frame,
                        reason,
                        target,
                    }]
                }
                _ => Vec::new(),
            };
        }
        match message.payload {
            // Forwarded to controllers by the readers already; here it shows life, and is kept
            // for controllers that connect later.
            Payload::Stats(_) => {
                if let Some(node) = self.nodes.get_mut(&from) {
                    node.stats = Some(kept(message.frame));
                }
                Vec::new()
            }
            Payload::Start(start) if role.contains(Role::CONTROLLER) => {
                self.start(from, *start, message.frame)
            }
            Payload::Configure(config) if role.contains(Role::CONTROLLER) => {
                self.config = self.told(*config);
                vec![Action::Configure(Box::new(self.config.clone()))]
            }
            other => {
                tracing::debug!(%from, operand = %other.operand(), "consumed");
                Vec::new()
            }
        }
    }

    fn start(&mut self, from: Uuid, start: Start, frame: Frame) -> Vec<Action> {
        let timer = Instant::now();
        let placed = self.placement.place(&start.requirements);
        self.metrics.placed(&placed, timer.elapsed());
        match placed {
            Ok(node) => vec![Action::Forward {
                from,
                frame,
                to: Target::Session(node),
            }],
            Err(reason) => {
                vec![self.refuse(from, &start, reason)]
            }
        }
    }

    /// The scheduler's own START_FAILURE for `start`, to the controller that sent it.
    fn refuse(
        &self,
        from: Uuid,
        start: &Start,
        reason: ssntp::payload::StartFailureReason,
    ) -> Action {
        let failure = StartFailure {
            instance_uuid: start.instance_uuid,
            node_uuid: None,
            reason,
            restart: start.restart,
            message: None,
        };
        Action::Send {
            to: from,
            frame: Frame::new(self.uuid, &Payload::StartFailure(failure)),
        }
    }

    /// A placed START its node could not take (its queue was full, or it just left): give the
    /// reservation back and place it on another node, or answer `full_cloud`.
    pub fn start_undelivered(&mut self, from: Uuid, node: Uuid, frame: Frame) -> Vec<Action> {
        let Ok(Payload::Start(start)) = frame.decode_payload() else {
            return Vec::new();
        };
        self.placement.release(node, &start.requirements);
        match self
            .placement
            .place_excluding(&start.requirements, Some(node))
        {
            Ok(other) => vec![Action::Forward {
                from,
                frame,
                to: Target::Session(other),
            }],
            Err(reason) => {
                self.metrics.placed(&Err::<(), _>(reason), Duration::ZERO);
                vec![self.refuse(from, &start, reason)]
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::payload::{FwType, NodeStatus, Requirements, StartFailureReason, VmType};
    use ssntp::session::Message;

    const SCHED: Uuid = Uuid::from_bytes([0x5c; 16]);

    fn msg_in(c: &mut Cluster, from: Uuid, role: Role, m: Message, now: Instant) -> Vec<Action> {
        c.message(from, role, m, now, &NoOne)
    }

    /// Nobody is connected (for frames that need no directory).
    struct NoOne;

    impl Directory for NoOne {
        fn role_of(&self, _: Uuid) -> Option<Role> {
            None
        }
    }

    impl Liveness for NoOne {
        fn last_received(&self, _: Uuid, _: u64) -> Option<Instant> {
            None
        }
    }

    fn u(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn msg(from: Uuid, payload: Payload) -> Message {
        Message {
            frame: Frame::new(from, &payload),
            payload,
        }
    }

    fn ready(node: Uuid, mem: u32) -> Payload {
        Payload::Ready(NodeStatus {
            node_uuid: node,
            hostname: format!("h{}", node.as_bytes()[0]),
            mem_total_mb: mem,
            mem_available_mb: mem,
            disk_total_mb: 1000,
            disk_available_mb: 1000,
            vcpus_total: 8,
            vcpus_available: 8,
            load: 0,
            networks: vec![],
        })
    }

    fn start(instance: u8, network_node: bool) -> Payload {
        Payload::Start(Box::new(Start {
            instance_uuid: u(instance),
            tenant_uuid: u(0x7e),
            workload_uuid: u(0x3a),
            vm_type: VmType::Sim,
            fw_type: FwType::Legacy,
            image: "tiny".into(),
            requirements: Requirements {
                vcpus: 1,
                mem_mb: 100,
                disk_mb: 1,
                network_node,
                node_id: None,
                hostname: None,
            },
            networking: None,
            storage: None,
            user_data: None,
            meta_data: None,
            restart: true,
        }))
    }

    fn sent_payloads(actions: &[Action]) -> Vec<(Uuid, Payload)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send { to, frame } => Some((*to, frame.decode_payload().unwrap())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn controllers_hear_of_nodes_and_late_ones_catch_up() {
        let now = Instant::now();
        let mut c = Cluster::new(SCHED, 5);
        assert!(c.connected(u(0xc1), Role::CONTROLLER, 0, now).is_empty());
        // A node is announced with its first status, not when it connects: from then on it can
        // be placed on.
        assert!(c.connected(u(1), Role::DUAL, 0, now).is_empty());
        let ready1 = msg(u(1), ready(u(1), 1000));
        let events = sent_payloads(&msg_in(&mut c, u(1), Role::DUAL, ready1, now));
        assert_eq!(
            events,
            vec![
                (
                    u(0xc1),
                    Payload::NodeConnected(NodeEvent {
                        node_uuid: u(1),
                        node_type: NodeType::ComputeNode
                    })
                ),
                (
                    u(0xc1),
                    Payload::NodeConnected(NodeEvent {
                        node_uuid: u(1),
                        node_type: NodeType::NetworkNode
                    })
                ),
            ]
        );
        let again = msg(u(1), ready(u(1), 900));
        assert!(
            msg_in(&mut c, u(1), Role::DUAL, again, now).is_empty(),
            "announced once per session"
        );
        c.connected(u(2), Role::AGENT, 0, now);
        let full = msg(u(2), Payload::Full(None));
        assert_eq!(msg_in(&mut c, u(2), Role::AGENT, full, now).len(), 1);
        assert!(
            c.connected(u(0x20), Role::CNCIAGENT, 0, now).is_empty(),
            "CNCIs are not nodes"
        );
        // Connected, never announced: not told, and its end is not told either.
        c.connected(u(3), Role::AGENT, 0, now);
        // A late controller gets one NODE_CONNECTED per list membership of announced nodes.
        let catch_up = sent_payloads(&c.connected(u(0xc2), Role::CONTROLLER, 0, now));
        assert_eq!(catch_up.len(), 3);
        assert!(catch_up.iter().all(|(to, _)| *to == u(0xc2)));
        // A node leaving is reported to both controllers, every frame from the scheduler.
        let gone = c.disconnected(u(2), Role::AGENT, 0);
        let gone = sent_payloads(&gone);
        assert_eq!(gone.len(), 2);
        assert!(
            gone.iter()
                .all(|(_, p)| matches!(p, Payload::NodeDisconnected(e) if e.node_uuid == u(2)))
        );
        assert!(c.disconnected(u(3), Role::AGENT, 0).is_empty());
    }

    #[test]
    fn a_late_controller_gets_each_nodes_latest_stats_after_its_node_connected() {
        let now = Instant::now();
        let mut c = Cluster::new(SCHED, 5);
        let stats = |node: Uuid, mem: u32| {
            let Payload::Ready(n) = ready(node, mem) else {
                unreachable!()
            };
            msg(
                node,
                Payload::Stats(Box::new(ssntp::payload::Stats {
                    node: n,
                    status: NodeState::Ready,
                    instances: vec![],
                })),
            )
        };
        c.connected(u(1), Role::DUAL, 0, now);
        msg_in(&mut c, u(1), Role::DUAL, msg(u(1), ready(u(1), 1000)), now);
        msg_in(&mut c, u(1), Role::DUAL, stats(u(1), 1000), now);
        let latest = stats(u(1), 900);
        msg_in(&mut c, u(1), Role::DUAL, latest.clone(), now);
        // Announced, no STATS yet: NODE_CONNECTED only.
        c.connected(u(2), Role::AGENT, 0, now);
        msg_in(&mut c, u(2), Role::AGENT, msg(u(2), ready(u(2), 1000)), now);
        // Never announced: nothing, not even its STATS.
        c.connected(u(3), Role::AGENT, 0, now);
        msg_in(&mut c, u(3), Role::AGENT, stats(u(3), 1000), now);
        let catch_up = c.connected(u(0xc1), Role::CONTROLLER, 0, now);
        let connected = |node, node_type| Action::Send {
            to: u(0xc1),
            frame: Frame::new(
                SCHED,
                &Payload::NodeConnected(NodeEvent {
                    node_uuid: node,
                    node_type,
                }),
            ),
        };
        assert_eq!(
            catch_up,
            vec![
                connected(u(1), NodeType::ComputeNode),
                connected(u(1), NodeType::NetworkNode),
                Action::Replay {
                    from: u(1),
                    frame: latest.frame,
                    to: u(0xc1)
                },
                connected(u(2), NodeType::ComputeNode),
            ]
        );
        // A new session of the node starts without STATS.
        c.disconnected(u(1), Role::DUAL, 0);
        c.connected(u(1), Role::AGENT, 1, now);
        msg_in(&mut c, u(1), Role::AGENT, msg(u(1), ready(u(1), 1000)), now);
        let catch_up = c.connected(u(0xc2), Role::CONTROLLER, 0, now);
        assert!(!catch_up.iter().any(|a| matches!(a, Action::Replay { .. })));
    }

    #[test]
    fn start_is_forwarded_to_the_placed_node_or_refused_with_its_restart_flag() {
        let now = Instant::now();
        let mut c = Cluster::new(SCHED, 5);
        c.connected(u(0xc1), Role::CONTROLLER, 0, now);
        let refused = sent_payloads(&msg_in(
            &mut c,
            u(0xc1),
            Role::CONTROLLER,
            msg(u(0xc1), start(9, false)),
            now,
        ));
        assert_eq!(
            refused,
            vec![(
                u(0xc1),
                Payload::StartFailure(StartFailure {
                    instance_uuid: u(9),
                    node_uuid: None,
                    reason: StartFailureReason::NoCn,
                    restart: true,
                    message: None,
                })
            )]
        );
        c.connected(u(1), Role::AGENT, 0, now);
        let no_ready = sent_payloads(&msg_in(
            &mut c,
            u(0xc1),
            Role::CONTROLLER,
            msg(u(0xc1), start(9, false)),
            now,
        ));
        assert!(
            matches!(&no_ready[0].1, Payload::StartFailure(f) if f.reason == StartFailureReason::FullCloud)
        );
        let net = sent_payloads(&msg_in(
            &mut c,
            u(0xc1),
            Role::CONTROLLER,
            msg(u(0xc1), start(9, true)),
            now,
        ));
        assert!(
            matches!(&net[0].1, Payload::StartFailure(f) if f.reason == StartFailureReason::NoNetCn)
        );
        msg_in(&mut c, u(1), Role::AGENT, msg(u(1), ready(u(1), 1000)), now);
        let placed = msg_in(
            &mut c,
            u(0xc1),
            Role::CONTROLLER,
            msg(u(0xc1), start(9, false)),
            now,
        );
        assert!(
            matches!(&placed[..], [Action::Forward { from, to: Target::Session(n), .. }] if *from == u(0xc1) && *n == u(1))
        );
        // An agent may not place work.
        assert!(msg_in(&mut c, u(1), Role::AGENT, msg(u(1), start(9, false)), now).is_empty());
    }

    /// The driver's view of the sessions: when each last received a frame.
    #[derive(Default)]
    struct Heard(HashMap<(Uuid, u64), Instant>);

    impl Liveness for Heard {
        fn last_received(&self, node: Uuid, generation: u64) -> Option<Instant> {
            self.0.get(&(node, generation)).copied()
        }
    }

    #[test]
    fn heartbeats_alone_keep_a_node_and_three_silent_intervals_drop_one() {
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        let mut c = Cluster::new(SCHED, 5);
        assert_eq!(c.dead_after(), secs(15));
        c.connected(u(0xc1), Role::CONTROLLER, 0, t0);
        // Both announce themselves; then node 1's session receives only HEARTBEATs (one every
        // 10 s: a third of the 30 s idle timeout), node 2's nothing at all.
        c.connected(u(1), Role::AGENT, 1, t0);
        c.connected(u(2), Role::AGENT, 2, t0);
        for node in [u(1), u(2)] {
            msg_in(&mut c, node, Role::AGENT, msg(node, ready(node, 1000)), t0);
        }
        let mut heard = Heard::default();
        // A HEARTBEAT of an older session of node 1 would not count.
        heard.0.insert((u(1), 0), t0 + secs(1000));
        let mut dropped = Vec::new();
        for second in 1..=60 {
            let now = t0 + secs(second);
            if second % 10 == 0 {
                heard.0.insert((u(1), 1), now);
            }
            for action in c.tick(now, &heard) {
                dropped.push((second, action));
            }
        }
        // Node 2 goes at the first check three intervals after its READY, and controllers hear
        // of it; node 1 stays through four times the dead time.
        let gone = Payload::NodeDisconnected(NodeEvent {
            node_uuid: u(2),
            node_type: NodeType::ComputeNode,
        });
        assert_eq!(
            dropped,
            vec![
                (
                    15,
                    Action::Disconnect {
                        uuid: u(2),
                        generation: 2
                    }
                ),
                (
                    15,
                    Action::Send {
                        to: u(0xc1),
                        frame: Frame::new(SCHED, &gone)
                    }
                ),
            ]
        );
        assert!(c.placement().node(u(1)).is_some());
        assert!(c.placement().node(u(2)).is_none());
        assert_eq!(c.metrics.dead_nodes(), 1);
        // Node 1's HEARTBEATs stop after the one at 60 s: it goes three intervals later.
        assert!(c.tick(t0 + secs(74), &heard).is_empty());
        let late = c.tick(t0 + secs(75), &heard);
        assert_eq!(
            late[0],
            Action::Disconnect {
                uuid: u(1),
                generation: 1
            }
        );
        assert!(
            matches!(&sent_payloads(&late)[..], [(c1, Payload::NodeDisconnected(e))] if *c1 == u(0xc1) && e.node_uuid == u(1))
        );
    }

    #[test]
    fn silent_nodes_are_dropped_on_virtual_time() {
        let t0 = Instant::now();
        let mut c = Cluster::new(SCHED, 5);
        c.connected(u(0xc1), Role::CONTROLLER, 0, t0);
        c.connected(u(1), Role::AGENT, 0, t0);
        c.connected(u(2), Role::AGENT, 0, t0);
        msg_in(&mut c, u(1), Role::AGENT, msg(u(1), ready(u(1), 1000)), t0);
        // Node 2 keeps talking; node 1 falls silent.
        msg_in(
            &mut c,
            u(2),
            Role::AGENT,
            msg(u(2), ready(u(2), 1000)),
            t0 + Duration::from_secs(10),
        );
        assert!(c.tick(t0 + Duration::from_secs(14), &NoOne).is_empty());
        let actions = c.tick(t0 + Duration::from_secs(15), &NoOne);
        assert_eq!(
            actions[0],
            Action::Disconnect {
                uuid: u(1),
                generation: 0
            }
        );
        assert!(
            matches!(&sent_payloads(&actions)[..], [(_, Payload::NodeDisconnected(e))] if e.node_uuid == u(1))
        );
        assert!(c.placement().node(u(1)).is_none());
        // The session's own end, reported later, says nothing twice.
        assert!(c.disconnected(u(1), Role::AGENT, 0).is_empty());
        assert!(c.tick(t0 + Duration::from_secs(24), &NoOne).is_empty());
        assert_eq!(
            c.tick(t0 + Duration::from_secs(25), &NoOne)[0],
            Action::Disconnect {
                uuid: u(2),
                generation: 0
            }
        );
    }

    #[test]
    fn stats_show_life_deletes_need_a_node_and_configure_is_kept() {
        let now = Instant::now();
        let mut c = Cluster::new(SCHED, 5);
        let Payload::Ready(n) = ready(u(1), 5) else {
            unreachable!()
        };
        let stats = Payload::Stats(Box::new(ssntp::payload::Stats {
            node: n,
            status: NodeState::Ready,
            instances: vec![],
        }));
        // The readers forward STATS; the owner counts it as a sign of life, and keeps it.
        assert!(msg_in(&mut c, u(1), Role::AGENT, msg(u(1), stats), now).is_empty());
        // A DELETE for a node nobody knows: DELIVERY_FAILURE to the controller.
        let delete = Payload::Delete(ssntp::payload::Delete {
            instance_uuid: u(9),
            workload_agent_uuid: u(3),
            stop: false,
        });
        let out = msg_in(&mut c, u(0xc1), Role::CONTROLLER, msg(u(0xc1), delete), now);
        assert!(
            matches!(&out[..], [Action::Fail { to, target: Some(t), .. }] if *to == u(0xc1) && *t == u(3))
        );
        // CONFIGURE is kept, but the STATS interval stays the one the scheduler enforces.
        let asked = ClusterConfig {
            scheduler: Some(SchedulerConfig {
                stats_interval_s: Some(7),
            }),
            controller: Some(ssntp::payload::ControllerConfig {
                api_port: Some(8443),
                ..Default::default()
            }),
            ..ClusterConfig::default()
        };
        let out = msg_in(
            &mut c,
            u(0xc1),
            Role::CONTROLLER,
            msg(u(0xc1), Payload::Configure(Box::new(asked.clone()))),
            now,
        );
        let kept = ClusterConfig {
            scheduler: Some(SchedulerConfig {
                stats_interval_s: Some(5),
            }),
            ..asked
        };
        assert_eq!(out, vec![Action::Configure(Box::new(kept.clone()))]);
        assert_eq!(c.config(), &kept);
        // A configuration without a scheduler section is told the interval too.
        assert_eq!(
            c.told(ClusterConfig::default()).scheduler,
            Some(SchedulerConfig {
                stats_interval_s: Some(5)
            })
        );
    }

    #[test]
    fn events_of_an_older_session_do_not_touch_the_newer_one() {
        let now = Instant::now();
        let mut c = Cluster::new(SCHED, 5);
        c.connected(u(0xc1), Role::CONTROLLER, 1, now);
        c.connected(u(1), Role::AGENT, 2, now);
        // The node reconnects (generation 3) before its first session's end is reported.
        c.connected(u(1), Role::AGENT, 3, now);
        assert!(c.disconnected(u(1), Role::AGENT, 2).is_empty());
        assert!(
            c.placement().node(u(1)).is_some(),
            "the live session's node stays"
        );
        // Dropping it as dead names the session it judged dead.
        let t = now + Duration::from_secs(15);
        assert_eq!(
            c.tick(t, &NoOne)[0],
            Action::Disconnect {
                uuid: u(1),
                generation: 3
            }
        );
        // A controller's old session ending does not remove its new one.
        c.connected(u(0xc1), Role::CONTROLLER, 4, t);
        assert!(c.disconnected(u(0xc1), Role::CONTROLLER, 1).is_empty());
        assert_eq!(c.controllers(), vec![u(0xc1)]);
    }
}
