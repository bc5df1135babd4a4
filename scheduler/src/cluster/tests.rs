//! The cluster state machine driven directly: sessions, messages and virtual time in, actions
//! out.

use super::{Action, Cluster, Liveness};
use ssntp::frame::Frame;
use ssntp::payload::{
    ClusterConfig, FwType, NodeEvent, NodeState, NodeStatus, NodeType, Requirements,
    SchedulerConfig, Start, StartFailure, StartFailureReason, VmType,
};
use ssntp::session::Message;
use ssntp::{Payload, Role, Uuid};
use ssntp_net::{Directory, Target};
use std::collections::HashMap;
use std::time::{Duration, Instant};

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
        zone: None,
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
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        },
        networking: None,
        storage: None,
        user_data: None,
        meta_data: None,
        restart: false,
        kernel: None,
    }))
}

/// A START with `restart` of `instance`, kept on `node`.
fn restart(instance: u8, node: Uuid) -> Payload {
    let Payload::Start(mut s) = start(instance, false) else {
        unreachable!()
    };
    s.restart = true;
    s.requirements.node_id = Some(node);
    Payload::Start(s)
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
                restart: false,
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

#[test]
fn a_restart_goes_to_the_node_that_keeps_it_even_full_and_nowhere_else() {
    let now = Instant::now();
    let mut c = Cluster::new(SCHED, 5);
    c.connected(u(0xc1), Role::CONTROLLER, 0, now);
    let from_controller =
        |c: &mut Cluster, p: Payload| msg_in(c, u(0xc1), Role::CONTROLLER, msg(u(0xc1), p), now);
    let refused = |actions: &[Action]| match &sent_payloads(actions)[..] {
        [(to, Payload::StartFailure(f))] if *to == u(0xc1) && f.restart => {
            (f.reason, f.message.clone().unwrap_or_default())
        }
        other => panic!("not one START_FAILURE with restart: {other:?}"),
    };
    // Not connected: refused, in words.
    let (reason, why) = refused(&from_controller(&mut c, restart(9, u(1))));
    assert_eq!(reason, StartFailureReason::FullCloud);
    assert!(why.contains("not connected"), "{why}");
    // No node named: invalid.
    let Payload::Start(mut unpinned) = restart(9, u(1)) else {
        unreachable!()
    };
    unpinned.requirements.node_id = None;
    let (reason, _) = refused(&from_controller(&mut c, Payload::Start(unpinned)));
    assert_eq!(reason, StartFailureReason::InvalidData);
    // Node 1 keeps it and has no room left for a new instance (its figures count the stopped
    // one's resources already), node 2 has plenty: the restart goes to node 1 all the same.
    c.connected(u(1), Role::AGENT, 0, now);
    c.connected(u(2), Role::AGENT, 0, now);
    msg_in(&mut c, u(1), Role::AGENT, msg(u(1), ready(u(1), 0)), now);
    msg_in(&mut c, u(2), Role::AGENT, msg(u(2), ready(u(2), 1000)), now);
    let forward_to = |actions: &[Action]| match actions {
        [
            Action::Forward {
                to: Target::Session(n),
                ..
            },
        ] => *n,
        other => panic!("not forwarded: {other:?}"),
    };
    let placed = from_controller(&mut c, restart(9, u(1)));
    assert_eq!(forward_to(&placed), u(1));
    // Full: still its node.
    msg_in(
        &mut c,
        u(1),
        Role::AGENT,
        msg(u(1), Payload::Full(None)),
        now,
    );
    let placed = from_controller(&mut c, restart(9, u(1)));
    assert_eq!(forward_to(&placed), u(1));
    // Its node could not take it: refused, never sent to node 2.
    let Action::Forward { frame, .. } = placed.into_iter().next().unwrap() else {
        unreachable!()
    };
    let (reason, why) = refused(&c.start_undelivered(u(0xc1), u(1), frame));
    assert_eq!(reason, StartFailureReason::FullCloud);
    assert!(why.contains("could not take"), "{why}");
    // In maintenance: refused as such.
    msg_in(
        &mut c,
        u(1),
        Role::AGENT,
        msg(u(1), Payload::Maintenance(None)),
        now,
    );
    let (reason, why) = refused(&from_controller(&mut c, restart(9, u(1))));
    assert_eq!(reason, StartFailureReason::NodeMaintenance);
    assert!(why.contains("maintenance"), "{why}");
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

#[test]
fn siblings_of_one_launch_keep_apart_by_the_schedulers_memory() {
    let now = Instant::now();
    let mut c = with_agents(&[1, 2, 3], now);
    // Three siblings sent one after the other, each naming those before it (no node known yet):
    // three nodes; a fourth has none left.
    let mut placed = Vec::new();
    for instance in 0x41..=0x44u8 {
        let Payload::Start(s) = member(instance, (0x41..instance).map(u).collect()) else {
            unreachable!()
        };
        let actions = msg_in(
            &mut c,
            u(0xc1),
            Role::CONTROLLER,
            msg(u(0xc1), Payload::Start(s)),
            now,
        );
        match actions.as_slice() {
            [
                Action::Forward {
                    to: Target::Session(node),
                    ..
                },
            ] => placed.push(*node),
            [Action::Send { frame, .. }] => {
                let Ok(Payload::StartFailure(f)) = frame.decode_payload() else {
                    panic!("not a START_FAILURE")
                };
                assert_eq!(f.reason, StartFailureReason::FullCloud);
                assert_eq!(f.instance_uuid, u(0x44));
                let message = f.message.unwrap_or_default();
                assert!(
                    message.contains("anti-affinity policy of server group"),
                    "{message}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    placed.sort();
    assert_eq!(placed, vec![u(1), u(2), u(3)]);
    // A sibling deleted since (the controller no longer names it) frees its node; an unknown
    // policy is refused as invalid data.
    let Payload::Start(mut s) = member(0x45, vec![u(0x41), u(0x42)]) else {
        unreachable!()
    };
    let actions = msg_in(
        &mut c,
        u(0xc1),
        Role::CONTROLLER,
        msg(u(0xc1), Payload::Start(s.clone())),
        now,
    );
    assert!(matches!(actions.as_slice(), [Action::Forward { .. }]));
    s.requirements.group.as_mut().unwrap().policy = "closest".into();
    let refused = sent_payloads(&msg_in(
        &mut c,
        u(0xc1),
        Role::CONTROLLER,
        msg(u(0xc1), Payload::Start(s)),
        now,
    ));
    assert!(
        matches!(&refused[..], [(_, Payload::StartFailure(f))] if f.reason == StartFailureReason::InvalidData)
    );
}

#[test]
fn a_member_placed_again_elsewhere_is_remembered_where_it_went() {
    let now = Instant::now();
    let mut c = with_agents(&[1, 2], now);
    let first = msg(u(0xc1), member(0x41, Vec::new()));
    let frame = first.frame.clone();
    let placed = msg_in(&mut c, u(0xc1), Role::CONTROLLER, first, now);
    let [
        Action::Forward {
            to: Target::Session(went),
            ..
        },
    ] = placed.as_slice()
    else {
        panic!("{placed:?}")
    };
    // Its node could not take it: placed on the other, and remembered there.
    let again = c.start_undelivered(u(0xc1), *went, frame);
    let [
        Action::Forward {
            to: Target::Session(moved),
            ..
        },
    ] = again.as_slice()
    else {
        panic!("{again:?}")
    };
    assert_ne!(moved, went);
    let second = msg(u(0xc1), member(0x42, vec![u(0x41)]));
    let placed = msg_in(&mut c, u(0xc1), Role::CONTROLLER, second, now);
    let [
        Action::Forward {
            to: Target::Session(to),
            ..
        },
    ] = placed.as_slice()
    else {
        panic!("{placed:?}")
    };
    assert_eq!(
        to, went,
        "the second member keeps off the node the first moved to"
    );
}

/// A cluster with controller `0xc1` and the agents `nodes`, each READY with 1,000 MiB.
fn with_agents(nodes: &[u8], now: Instant) -> Cluster {
    let mut c = Cluster::new(SCHED, 5);
    c.connected(u(0xc1), Role::CONTROLLER, 0, now);
    for &node in nodes {
        c.connected(u(node), Role::AGENT, 0, now);
        msg_in(
            &mut c,
            u(node),
            Role::AGENT,
            msg(u(node), ready(u(node), 1000)),
            now,
        );
    }
    c
}

/// The START of a new member of anti-affinity group `0x60`, naming `others` as its members not
/// placed yet.
fn member(instance: u8, others: Vec<Uuid>) -> Payload {
    let Payload::Start(mut s) = start(instance, false) else {
        unreachable!()
    };
    s.requirements.group = Some(ssntp::payload::GroupRequirement {
        id: u(0x60),
        policy: "anti-affinity".into(),
        nodes: Vec::new(),
        members: others,
    });
    Payload::Start(s)
}
