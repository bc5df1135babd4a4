//! Ephemeral workloads: evacuate and a lost node start their instances again elsewhere (the rule
//! is in `super::super::relocate`); the others stay on their node.

use super::*;
use ssntp::payload::{DeleteFailure, DeleteFailureReason, NodeState};

const OTHER: Uuid = Uuid::from_bytes([0xdd; 16]);

impl World {
    /// An ephemeral workload like the world's own.
    fn ephemeral_workload(&self) -> Uuid {
        let base = self
            .engine
            .store()
            .workload(Scope::All, self.workload)
            .unwrap();
        self.engine
            .store()
            .create_workload(NewWorkload {
                owner: Some(self.tenant),
                name: "batch".into(),
                flavor: base.flavor,
                image: base.image,
                user_data: String::new(),
                ephemeral: true,
            })
            .unwrap()
            .id
    }

    fn launch_of(&self, workload: Uuid) -> Uuid {
        self.engine
            .launch(
                Scope::Tenant(self.tenant),
                Launch {
                    tenant: self.tenant,
                    workload,
                    name: "vm".into(),
                    count: 1,
                    key: None,
                    groups: Vec::new(),
                    metadata: store::Metadata::new(),
                    user: None,
                    server_group: None,
                    reservation: store::Instance::new_reservation(),
                    zone: None,
                },
                &Caller::default(),
            )
            .unwrap()[0]
            .id
    }

    fn from(&self, node: Uuid, payload: Payload) {
        self.engine
            .handle_from(node, &payload, SystemTime::now())
            .unwrap();
    }

    /// On NODE: a kept instance and an ephemeral one running, an ephemeral one stopped.
    fn three_on_node(&self) -> [Uuid; 3] {
        self.node_connected(NODE, NodeType::ComputeNode);
        self.node_connected(OTHER, NodeType::ComputeNode);
        let ephemeral = self.ephemeral_workload();
        let kept = self.launch_of(self.workload);
        let moving = self.launch_of(ephemeral);
        let stopped = self.launch_of(ephemeral);
        self.stats(
            NODE,
            &[
                (kept, Reported::Active),
                (moving, Reported::Active),
                (stopped, Reported::Active),
            ],
        );
        self.engine
            .stop(Scope::All, stopped, &Caller::default())
            .unwrap();
        self.from(
            NODE,
            Payload::InstanceStopped(InstanceEvent {
                instance_uuid: stopped,
            }),
        );
        assert_eq!(self.placed(stopped), (InstanceState::Exited, Some(NODE)));
        self.out.take();
        [kept, moving, stopped]
    }
}

/// (instance, stop) of each DELETE, and whether each went to NODE.
fn removals(sent: &[Payload]) -> Vec<(Uuid, bool)> {
    deletes(sent)
        .iter()
        .inspect(|d| assert_eq!(d.workload_agent_uuid, NODE))
        .map(|d| (d.instance_uuid, d.stop))
        .collect()
}

#[test]
fn evacuate_restarts_ephemeral_instances_elsewhere_and_keeps_the_others() {
    let w = world();
    let [kept, moving, stopped] = w.three_on_node();
    w.engine.evacuate(NODE).unwrap();
    let sent = w.out.take();
    assert!(matches!(&sent[0], Payload::Evacuate(c) if c.workload_agent_uuid == NODE));
    // The ephemeral ones' copies go at once; no START until the node shows maintenance.
    assert_eq!(removals(&sent), [(moving, false), (stopped, false)]);
    assert!(starts(&sent).is_empty());
    assert_eq!(w.placed(moving), (InstanceState::Pending, None));
    assert_eq!(w.placed(stopped), (InstanceState::Exited, None));
    assert_eq!(w.placed(kept), (InstanceState::Active, Some(NODE)));

    // The evacuation's own reports of the moved one, from the old node, change nothing.
    w.from(NODE, stopped_event(moving));
    w.from(
        NODE,
        Payload::StartFailure(StartFailure::new(
            moving,
            Some(NODE),
            StartFailureReason::NodeMaintenance,
            true,
        )),
    );
    w.stats(
        NODE,
        &[(kept, Reported::Exited), (moving, Reported::Exited)],
    );
    assert_eq!(w.placed(moving), (InstanceState::Pending, None));
    assert!(
        w.out.take().is_empty(),
        "DELETE not due again yet, no START"
    );

    // In maintenance now: the START goes, fresh and unpinned; the kept one stays, stopped.
    w.from(OTHER, stopped_event(kept));
    w.stats_in(
        NODE,
        NodeState::Maintenance,
        &[(kept, Reported::Exited), (moving, Reported::Exited)],
    );
    let sent = w.out.take();
    let fresh = starts(&sent);
    assert_eq!(fresh.len(), 1);
    assert_eq!(fresh[0].instance_uuid, moving);
    assert!(!fresh[0].restart);
    assert_eq!(fresh[0].requirements.node_id, None);
    assert_eq!(w.placed(kept), (InstanceState::Exited, Some(NODE)));

    // It lands elsewhere; the old node's confirmation and a late STATS change nothing.
    w.stats(OTHER, &[(moving, Reported::Active)]);
    assert_eq!(w.placed(moving), (InstanceState::Active, Some(OTHER)));
    w.from(NODE, deleted_event(moving));
    w.from(NODE, deleted_event(stopped));
    w.stats(
        NODE,
        &[(kept, Reported::Exited), (moving, Reported::Exited)],
    );
    assert_eq!(w.placed(moving), (InstanceState::Active, Some(OTHER)));
    assert_eq!(w.placed(stopped), (InstanceState::Exited, None));

    // What happened shows: an `evacuate` action (its START's outcome) and an event.
    let actions = w
        .engine
        .store()
        .instance_actions(Scope::All, moving)
        .unwrap();
    assert_eq!(actions[0].action, "evacuate");
    assert!(
        actions[0]
            .events
            .iter()
            .any(|e| e.name == crate::actions::NODE_START
                && e.result == Some(store::ActionResult::Success))
    );
    let events = w.events();
    assert!(events.iter().any(|e| e.contains(&format!(
        "instance {moving} (ephemeral) starts again elsewhere from its image: its node {NODE} was evacuated"
    ))));
    assert!(
        events
            .iter()
            .any(|e| e.contains(&format!("instance {stopped} (ephemeral, stopped)")))
    );
    // The stopped one starts wherever the scheduler places it, from its image.
    w.engine
        .start(Scope::All, stopped, &Caller::default())
        .unwrap();
    let sent = w.out.take();
    assert!(!starts(&sent)[0].restart);
    assert_eq!(starts(&sent)[0].requirements.node_id, None);
}

#[test]
fn an_evacuated_node_that_never_shows_maintenance_gets_its_starts_after_the_timeout() {
    let w = world();
    let [_, moving, _] = w.three_on_node();
    w.engine.evacuate(NODE).unwrap();
    w.out.take();
    w.engine.sweep(SystemTime::now()).unwrap();
    assert!(starts(&w.out.take()).is_empty());
    w.engine
        .sweep(SystemTime::now() + w.engine.config.confirm_timeout)
        .unwrap();
    let sent = w.out.take();
    assert_eq!(starts(&sent)[0].instance_uuid, moving);
}

#[test]
fn a_lost_node_restarts_ephemeral_instances_elsewhere_and_removes_their_copies_when_back() {
    let w = world();
    let [kept, moving, stopped] = w.three_on_node();
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    // The START goes at once (the scheduler places nothing on a lost node); nothing to delete.
    let sent = w.out.take();
    assert!(deletes(&sent).is_empty());
    let starts = starts(&sent);
    assert_eq!(starts.len(), 1);
    assert_eq!(
        (
            starts[0].instance_uuid,
            starts[0].restart,
            starts[0].requirements.node_id
        ),
        (moving, false, None)
    );
    assert_eq!(w.placed(moving), (InstanceState::Pending, None));
    assert_eq!(w.placed(stopped), (InstanceState::Exited, None));
    assert_eq!(w.placed(kept), (InstanceState::Missing, Some(NODE)));
    w.stats(OTHER, &[(moving, Reported::Active)]);
    assert_eq!(w.placed(moving), (InstanceState::Active, Some(OTHER)));

    // Back, still holding both ephemeral copies: they go; the kept one is reconciled.
    w.node_connected(NODE, NodeType::ComputeNode);
    let back = [
        (kept, Reported::Active),
        (moving, Reported::Active),
        (stopped, Reported::Exited),
    ];
    w.stats(NODE, &back);
    assert_eq!(removals(&w.out.take()), [(moving, false), (stopped, false)]);
    assert_eq!(w.placed(kept), (InstanceState::Active, Some(NODE)));
    assert_eq!(w.placed(moving), (InstanceState::Active, Some(OTHER)));
    assert_eq!(w.placed(stopped), (InstanceState::Exited, None));
    // The stale copies' reports change nothing; a removal the node did not find ends it too.
    w.from(NODE, stopped_event(moving));
    w.from(NODE, deleted_event(moving));
    w.event(Payload::DeleteFailure(DeleteFailure {
        instance_uuid: stopped,
        node_uuid: Some(NODE),
        reason: DeleteFailureReason::NoInstance,
    }));
    w.stats(
        NODE,
        &[(kept, Reported::Active), (moving, Reported::Exited)],
    );
    assert_eq!(w.placed(moving), (InstanceState::Active, Some(OTHER)));
    assert_eq!(w.placed(stopped), (InstanceState::Exited, None));
    assert!(w.out.take().is_empty());
    let actions = w
        .engine
        .store()
        .instance_actions(Scope::All, stopped)
        .unwrap();
    assert_eq!(actions[0].action, "evacuate");
    assert!(w.events().iter().any(|e| e.contains(&format!(
        "instance {moving} (ephemeral) starts again elsewhere from its image: its node {NODE} was lost"
    ))));
}
