//! Reports checked against their origin (the rule is in `super::super::origin`): a node changes
//! only the instances placed on it, a CNCI only itself; each refusal is counted.

use super::*;
use ssntp::payload::{DeleteFailure, DeleteFailureReason, NodeState};
use ssntp_net::client::ClientEvent;

/// A node that holds none of the world's instances.
const OTHER: Uuid = Uuid::from_bytes([0xdd; 16]);

/// The client's event: a session with `scheduler` opened.
pub(super) fn connected(scheduler: Uuid) -> ClientEvent {
    ClientEvent::Connected {
        server_uuid: scheduler,
        server_role: ssntp::Role::SCHEDULER,
        cluster: ssntp::payload::ClusterConfig::default(),
    }
}

/// The client's event: `payloads` arrived, each in a frame made by `origin`.
pub(super) fn frames(origin: Uuid, payloads: Vec<Payload>) -> ClientEvent {
    ClientEvent::Frames {
        messages: payloads
            .into_iter()
            .map(|payload| ssntp::session::Message {
                frame: ssntp::Frame::new(origin, &payload),
                payload,
            })
            .collect(),
        read_at: std::time::Instant::now(),
    }
}

impl World {
    /// Applies `payload` as a frame made by `origin`.
    fn report(&self, origin: Uuid, payload: Payload) {
        self.engine
            .handle_from(origin, &payload, SystemTime::now())
            .unwrap();
    }

    /// How many `frame`s the engine refused.
    fn refused(&self, frame: &str) -> u64 {
        let counts = self.engine.reports_refused();
        counts
            .iter()
            .find(|(name, _)| *name == frame)
            .map(|(_, n)| *n)
            .unwrap_or_else(|| panic!("{frame} is not counted: {counts:?}"))
    }
}

fn stats_of(node: Uuid, instances: &[(Uuid, Reported)]) -> Payload {
    stats_payload(node, NodeState::Ready, instances, vec![])
}

fn node_start_failure(id: Uuid, node: Option<Uuid>) -> Payload {
    Payload::StartFailure(StartFailure {
        instance_uuid: id,
        node_uuid: node,
        reason: StartFailureReason::ImageFailure,
        restart: false,
        message: None,
    })
}

#[test]
fn a_stats_of_another_node_or_about_its_instances_changes_nothing() {
    let w = world();
    let id = w.active();
    w.node_connected(OTHER, NodeType::ComputeNode);

    // OTHER sends NODE's STATS, without the instance: it would be missing.
    w.report(OTHER, stats_of(NODE, &[]));
    assert_eq!(w.placed(id), (InstanceState::Active, Some(NODE)));
    assert_eq!(w.engine.node(NODE).unwrap().load, 12);
    assert_eq!(w.refused("STATS"), 1);

    // Its own STATS claiming NODE's instance: left alone.
    w.report(OTHER, stats_of(OTHER, &[(id, Reported::Exited)]));
    assert_eq!(w.placed(id), (InstanceState::Active, Some(NODE)));
    assert_eq!(w.refused("STATS"), 2);

    // A deleted instance of NODE that OTHER lists: not moved to OTHER, no DELETE to OTHER.
    w.engine.delete(Scope::All, id, &Caller::default()).unwrap();
    w.out.take();
    w.report(OTHER, stats_of(OTHER, &[(id, Reported::Active)]));
    assert_eq!(w.placed(id), (InstanceState::Deleted, Some(NODE)));
    assert!(deletes(&w.out.take()).is_empty());
    assert_eq!(w.refused("STATS"), 3);

    // NODE's own STATS still counts: without the instance, the delete is done.
    w.report(NODE, stats_of(NODE, &[]));
    assert!(w.gone(id));
    assert_eq!(w.refused("STATS"), 3);
}

#[test]
fn an_unplaced_instance_is_placed_by_the_first_node_that_reports_it() {
    let w = world();
    w.node_connected(OTHER, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    w.report(OTHER, stats_of(OTHER, &[(id, Reported::Active)]));
    assert_eq!(w.placed(id), (InstanceState::Active, Some(OTHER)));
    assert_eq!(w.refused("STATS"), 0);

    // A stopped instance on no node is no node's to report.
    w.engine.stop(Scope::All, id, &Caller::default()).unwrap();
    w.report(OTHER, deleted_event(id));
    assert_eq!(w.placed(id), (InstanceState::Exited, None));
    w.report(OTHER, stopped_event(id));
    assert_eq!(w.refused("INSTANCE_STOPPED"), 1);
    w.report(OTHER, node_start_failure(id, Some(OTHER)));
    assert_eq!(w.placed(id), (InstanceState::Exited, None));
    assert_eq!(w.refused("START_FAILURE"), 1);
}

/// A node that made an instance and died before booting it keeps it, powered off, and after its
/// restart may say INSTANCE_STOPPED before any STATS lists it: the instance is that node's from
/// then on (exited there, its STATS applied); a node that forgot it says INSTANCE_DELETED instead
/// and leaves it on no node, for a start to place anew.
#[test]
fn an_unplaced_instance_reported_stopped_is_placed_on_the_node_that_keeps_it() {
    let w = world();
    w.node_connected(OTHER, NodeType::ComputeNode);
    let [kept, forgotten] = [w.launch(1)[0].id, w.launch(1)[0].id];
    w.report(OTHER, stopped_event(kept));
    assert_eq!(w.placed(kept), (InstanceState::Exited, Some(OTHER)));
    w.report(OTHER, stats_of(OTHER, &[(kept, Reported::Exited)]));
    assert_eq!(w.placed(kept), (InstanceState::Exited, Some(OTHER)));
    assert_eq!(w.refused("STATS"), 0);
    // NODE may no longer claim it.
    w.report(NODE, stopped_event(kept));
    assert_eq!(w.refused("INSTANCE_STOPPED"), 1);

    w.report(OTHER, deleted_event(forgotten));
    assert_eq!(w.placed(forgotten), (InstanceState::Exited, None));
}

#[test]
fn a_start_failure_from_the_wrong_node_is_refused() {
    let w = world();
    let id = w.active();
    w.node_connected(OTHER, NodeType::ComputeNode);
    w.engine.scheduler_connected(SCHEDULER);

    // In its own name, as the scheduler (no node), or in NODE's name.
    w.report(OTHER, node_start_failure(id, Some(OTHER)));
    w.report(OTHER, node_start_failure(id, None));
    w.report(OTHER, node_start_failure(id, Some(NODE)));
    assert_eq!(w.placed(id), (InstanceState::Active, Some(NODE)));
    assert_eq!(w.instance(id).fault, None);
    assert_eq!(w.refused("START_FAILURE"), 3);

    // An unplaced instance's START failed on the node it went to: applied.
    let pending = w.launch(1)[0].id;
    w.report(OTHER, node_start_failure(pending, Some(OTHER)));
    assert_eq!(
        w.state(pending),
        InstanceState::Error("image_failure".into())
    );
    // The scheduler's own (no node): applied.
    let refused = w.launch(1)[0].id;
    w.report(
        SCHEDULER,
        start_failure(refused, StartFailureReason::FullCloud),
    );
    assert_eq!(w.state(refused), InstanceState::Error("full_cloud".into()));
    // NODE's, about its own instance: applied.
    w.report(NODE, node_start_failure(id, Some(NODE)));
    assert_eq!(w.placed(id).0, InstanceState::Error("image_failure".into()));
    assert_eq!(w.refused("START_FAILURE"), 3);
}

#[test]
fn a_scheduler_never_connected_has_no_start_failure_of_its_own() {
    let w = world();
    let id = w.launch(1)[0].id;
    w.report(SCHEDULER, start_failure(id, StartFailureReason::FullCloud));
    assert_eq!(w.placed(id), (InstanceState::Pending, None));
    assert_eq!(w.refused("START_FAILURE"), 1);
}

#[test]
fn stopped_deleted_and_delete_failures_from_the_wrong_node_are_refused() {
    let w = world();
    let id = w.active();
    w.node_connected(OTHER, NodeType::ComputeNode);
    w.report(OTHER, stopped_event(id));
    w.report(OTHER, deleted_event(id));
    assert_eq!(w.placed(id), (InstanceState::Active, Some(NODE)));
    assert_eq!(w.refused("INSTANCE_STOPPED"), 1);
    assert_eq!(w.refused("INSTANCE_DELETED"), 1);

    // A stop under way: OTHER's DELETE_FAILURE no_instance, in its name or in NODE's.
    w.engine.stop(Scope::All, id, &Caller::default()).unwrap();
    for named in [Some(OTHER), Some(NODE), None] {
        w.report(
            OTHER,
            Payload::DeleteFailure(DeleteFailure {
                instance_uuid: id,
                node_uuid: named,
                reason: DeleteFailureReason::NoInstance,
            }),
        );
    }
    assert_eq!(w.placed(id), (InstanceState::Stopping, Some(NODE)));
    assert_eq!(w.refused("DELETE_FAILURE"), 3);
    // NODE's own confirmation: applied.
    w.report(NODE, stopped_event(id));
    assert_eq!(w.placed(id), (InstanceState::Exited, Some(NODE)));
}

/// A world with an active CNCI, placed on NET_NODE.
fn cnci_world() -> (World, store::Cnci) {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.report(cnci.id, added(&cnci));
    w.node_connected(NET_NODE, NodeType::NetworkNode);
    w.report(NET_NODE, stats_of(NET_NODE, &[(cnci.id, Reported::Active)]));
    let cnci = w.engine.store().cnci(Scope::All, cnci.id).unwrap();
    assert_eq!((cnci.state, cnci.node), (CnciState::Active, Some(NET_NODE)));
    assert!(w.engine.reports_refused().iter().all(|(_, n)| *n == 0));
    (w, cnci)
}

#[test]
fn a_cnci_announces_itself_only() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1)[0].id;
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.out.take();
    let another = Uuid::from_bytes([0xcc; 16]);

    // Another CNCI (or a node) announcing it, or the CNCI itself under another tenant.
    w.report(another, added(&cnci));
    w.report(NET_NODE, added(&cnci));
    let mut elsewhere = cnci.clone();
    elsewhere.tenant = Uuid::from_bytes([0xee; 16]);
    w.report(cnci.id, added(&elsewhere));
    let now = w.engine.store().cnci(Scope::All, cnci.id).unwrap();
    assert_eq!((now.state, now.ip), (CnciState::Pending, None));
    assert!(starts(&w.out.take()).is_empty(), "no instance released");
    assert_eq!(w.refused("CONCENTRATOR_INSTANCE_ADDED"), 3);

    // The CNCI itself: up, and its subnet's instance starts.
    w.report(cnci.id, added(&cnci));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Active
    );
    assert_eq!(starts_of(&w.out.take(), made), 1);
    assert_eq!(w.refused("CONCENTRATOR_INSTANCE_ADDED"), 3);
}

#[test]
fn a_node_touches_only_the_cncis_placed_on_it() {
    let (w, cnci) = cnci_world();
    w.node_connected(OTHER, NodeType::NetworkNode);
    w.report(OTHER, stats_of(OTHER, &[(cnci.id, Reported::Exited)]));
    w.report(OTHER, stats_of(OTHER, &[(cnci.id, Reported::Active)]));
    w.report(OTHER, stopped_event(cnci.id));
    w.report(OTHER, deleted_event(cnci.id));
    w.report(OTHER, node_start_failure(cnci.id, Some(OTHER)));
    let now = w.engine.store().cnci(Scope::All, cnci.id).unwrap();
    assert_eq!((now.state, now.node), (CnciState::Active, Some(NET_NODE)));
    assert_eq!(w.refused("STATS"), 2);
    assert_eq!(w.refused("INSTANCE_STOPPED"), 1);
    assert_eq!(w.refused("INSTANCE_DELETED"), 1);
    assert_eq!(w.refused("START_FAILURE"), 1);

    // Its own node's: applied.
    w.report(NET_NODE, stopped_event(cnci.id));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Exited
    );
}

#[test]
fn frames_applied_in_process_are_trusted_as_before() {
    let w = world();
    let id = w.active();
    w.event(node_start_failure(id, None));
    assert_eq!(w.placed(id).0, InstanceState::Error("image_failure".into()));
    assert!(w.engine.reports_refused().iter().all(|(_, n)| *n == 0));
}

/// Through the driver: the scheduler's UUID comes with the session; a node's forged
/// START_FAILURE is refused, the scheduler's own applied, and `Cluster::reports_refused`
/// counts.
#[tokio::test]
async fn the_driver_knows_the_scheduler_of_its_session() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let [forged, refused] = [w.launch(1)[0].id, w.launch(1)[0].id];
    let World { engine, _dir, .. } = w;
    let engine = Arc::new(engine);
    let (tx, stop, driver) = drive(&engine);
    tx.send(connected(SCHEDULER)).await.unwrap();
    tx.send(frames(
        NODE,
        vec![start_failure(forged, StartFailureReason::FullCloud)],
    ))
    .await
    .unwrap();
    tx.send(frames(
        SCHEDULER,
        vec![start_failure(refused, StartFailureReason::FullCloud)],
    ))
    .await
    .unwrap();
    let state = |id| engine.store().instance(Scope::All, id).unwrap().state;
    testkit::wait_for(Duration::from_secs(30), || async {
        match state(refused) {
            InstanceState::Error(reason) if reason == "full_cloud" => Ok(()),
            other => Err(format!(
                "the scheduler's START_FAILURE not applied: {other:?}"
            )),
        }
    })
    .await;
    assert_eq!(state(forged), InstanceState::Pending);
    let cluster: &dyn Cluster = engine.as_ref();
    assert!(cluster.reports_refused().contains(&("START_FAILURE", 1)));
    stop.cancel();
    driver.await.unwrap();
}
