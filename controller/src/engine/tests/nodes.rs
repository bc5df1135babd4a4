//! Nodes leaving and coming back: missing instances and their reconciliation, dual nodes, instances
//! vanishing from their node, unconfirmed deletes and stops, unknown instances.

use super::*;

#[test]
fn a_node_that_leaves_makes_its_instances_missing_until_it_reports_them() {
    let w = world();
    let id = w.active();
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    assert_eq!(w.state(id), InstanceState::Missing);
    assert_eq!(
        w.engine.node(NODE).unwrap().status,
        NodeStatus::Disconnected
    );
    // Starting a missing instance elsewhere could run it twice: refused.
    assert!(matches!(
        w.engine.start(Scope::All, id, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(NODE, &[(id, Reported::Active)]);
    assert_eq!(w.state(id), InstanceState::Active);
    assert!(w.events().iter().any(|e| e.contains("is back")));
}

/// A node that comes back without a missing instance (its agent died before it kept a record
/// of it): the instance is exited, not missing for ever (found by the kill -9 fault test).
#[test]
fn a_node_back_without_a_missing_instance_makes_it_exited() {
    let w = world();
    let id = w.active();
    let other = w.active();
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    assert_eq!(w.state(id), InstanceState::Missing);
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(NODE, &[(other, Reported::Active)]);
    assert_eq!(w.state(other), InstanceState::Active);
    assert_eq!(w.state(id), InstanceState::Exited);
    assert_eq!(w.instance(id).node, None);
    assert!(w.events().iter().any(|e| e.contains("not on node")));
}

/// Issue 20: a lost node (the scheduler's dead-node timeout) leaves every instance it holds
/// `missing`; its first STATS once it is back reconciles them.
#[test]
fn a_lost_node_leaves_its_instances_missing_and_its_first_stats_back_reconciles_them() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let ids: Vec<Uuid> = w.launch(5).iter().map(|i| i.id).collect();
    let [running, stopped, exited, booting, vanished] = ids[..] else {
        panic!("five instances")
    };
    let all_active: Vec<(Uuid, Reported)> = ids.iter().map(|id| (*id, Reported::Active)).collect();
    w.stats(NODE, &all_active);
    // One exits on its own before the node is lost: exited, kept on its node.
    let mut before = all_active.clone();
    before[2].1 = Reported::Exited;
    w.stats(NODE, &before);
    assert_eq!(w.state(exited), InstanceState::Exited);
    assert_eq!(w.instance(exited).node, Some(NODE));

    // Lost: every instance it holds is missing, the exited one too (its disks are there).
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    for id in &ids {
        assert_eq!(w.state(*id), InstanceState::Missing);
        assert_eq!(w.instance(*id).node, Some(NODE), "still placed there");
    }
    assert!(matches!(
        w.engine.start(Scope::All, exited, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    // A STATS of the lost session that trails its NODE_DISCONNECTED changes nothing.
    w.stats(NODE, &all_active);
    for id in &ids {
        assert_eq!(w.state(*id), InstanceState::Missing);
    }

    // Back (NODE_CONNECTED first, as the scheduler sends it): its first STATS settles them.
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(
        NODE,
        &[
            (running, Reported::Active),
            (stopped, Reported::Exited),
            (exited, Reported::Exited),
            (booting, Reported::Pending),
        ],
    );
    let now = |id: Uuid| (w.state(id), w.instance(id).node);
    assert_eq!(now(running), (InstanceState::Active, Some(NODE)));
    assert_eq!(now(stopped), (InstanceState::Exited, Some(NODE)));
    assert_eq!(now(exited), (InstanceState::Exited, Some(NODE)));
    assert_eq!(
        now(booting),
        (InstanceState::Missing, Some(NODE)),
        "not settled"
    );
    assert_eq!(now(vanished), (InstanceState::Exited, None), "runs nowhere");
    // A later STATS settles the one that was still booting.
    w.stats(
        NODE,
        &[
            (running, Reported::Active),
            (stopped, Reported::Exited),
            (exited, Reported::Exited),
            (booting, Reported::Active),
        ],
    );
    assert_eq!(now(booting), (InstanceState::Active, Some(NODE)));
    let events = w.events();
    assert!(
        events
            .iter()
            .any(|e| e.contains(&format!("{running} is back")))
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains(&format!("{stopped} is back on node {NODE}, exited")))
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains(&format!("{vanished} is not on node")))
    );
}

#[test]
fn a_dual_node_is_gone_only_when_both_kinds_left() {
    let w = world();
    let id = w.active();
    w.node_connected(NODE, NodeType::NetworkNode);
    let node = w.engine.node(NODE).unwrap();
    assert!(node.kinds.compute && node.kinds.network);
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::NetworkNode,
    }));
    assert_eq!(w.state(id), InstanceState::Active);
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    assert_eq!(w.state(id), InstanceState::Missing);
}

#[test]
fn an_active_instance_that_vanishes_from_its_node_is_missing() {
    let w = world();
    let id = w.active();
    w.stats(NODE, &[]);
    assert_eq!(w.state(id), InstanceState::Missing);
}

#[test]
fn unconfirmed_deletes_become_hung_and_can_be_removed() {
    let w = world();
    let id = w.active();
    w.engine.delete(Scope::All, id, &Caller::default()).unwrap();
    w.engine.sweep(SystemTime::now()).unwrap();
    assert_eq!(w.state(id), InstanceState::Deleted);
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Hung);
    w.engine.delete(Scope::All, id, &Caller::default()).unwrap();
    assert!(w.gone(id));
    assert!(w.events().iter().any(|e| e.contains("hung")));
}

#[test]
fn unconfirmed_stops_become_missing() {
    let w = world();
    let id = w.active();
    w.engine.stop(Scope::All, id, &Caller::default()).unwrap();
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Missing);
}

#[test]
fn unknown_instances_are_reported_once_and_left_alone() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let stranger = Uuid::from_bytes([0x55; 16]);
    w.stats(NODE, &[(stranger, Reported::Active)]);
    w.stats(NODE, &[(stranger, Reported::Active)]);
    let reports = w
        .events()
        .into_iter()
        .filter(|e| e.contains("does not know"))
        .count();
    assert_eq!(reports, 1);
    assert!(w.out.take().is_empty());
    assert!(w.gone(stranger));
}

/// A node's STATS are kept as its history (for the dashboard's plots): one sample per step at
/// most; none for a node never seen.
#[test]
fn a_nodes_stats_are_kept_as_its_history() {
    let w = world();
    let id = w.active();
    w.stats(NODE, &[(id, Reported::Active)]);
    w.stats(NODE, &[(id, Reported::Active)]);
    let samples = w.engine.node_history(NODE).unwrap();
    assert_eq!(samples.len(), 1, "two STATS within a step: one sample");
    assert_eq!(samples[0].instances, 1);
    assert!(samples[0].vcpus_total >= samples[0].vcpus_used);
    assert!(matches!(
        w.engine.node_history(Uuid::new_v4()),
        Err(ClusterError::NoNode(_))
    ));
}
