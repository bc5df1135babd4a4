//! The instance actions the engine records (the rule is in `crate::actions`).

use super::*;
use store::{ActionResult, InstanceAction};

fn actions_of(w: &World, id: Uuid) -> Vec<InstanceAction> {
    w.engine.store().instance_actions(Scope::All, id).unwrap()
}

/// The names and results of an action's events.
fn events_of(action: &InstanceAction) -> Vec<(&str, Option<ActionResult>)> {
    action
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.result))
        .collect()
}

const OK: Option<ActionResult> = Some(ActionResult::Success);
const FAILED: Option<ActionResult> = Some(ActionResult::Error);

#[test]
fn a_launch_records_a_create_per_instance_and_how_each_start_went() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let by = Caller {
        user: Some(Uuid::from_u128(1)),
        project: Some(w.tenant),
        request: None,
        trace: None,
    };
    let made = w
        .engine
        .launch(
            Scope::Tenant(w.tenant),
            Launch {
                tenant: w.tenant,
                workload: w.workload,
                name: "web".into(),
                count: 2,
                key: None,
                groups: Vec::new(),
                metadata: store::Metadata::new(),
                user: None,
                server_group: None,
                reservation: store::Instance::new_reservation(),
                zone: None,
            },
            &by,
        )
        .unwrap();
    let first = &actions_of(&w, made[0].id)[0];
    let second = &actions_of(&w, made[1].id)[0];
    assert_eq!(first.action, "create");
    assert_eq!((first.user, first.project), (by.user, by.project));
    assert!(first.request_id.starts_with("req-"));
    assert_eq!(first.request_id, second.request_id, "one request");
    assert_eq!(
        events_of(first),
        [("controller_create", OK), ("node_start", None)]
    );

    // Running on its node; a fatal START_FAILURE for the other.
    w.stats(NODE, &[(made[0].id, Reported::Active)]);
    let first = &actions_of(&w, made[0].id)[0];
    assert_eq!(
        events_of(first),
        [("controller_create", OK), ("node_start", OK)]
    );
    assert_eq!(first.message, None);
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: made[1].id,
        node_uuid: Some(NODE),
        reason: StartFailureReason::LaunchFailure,
        restart: false,
        message: Some("QEMU could not open the disk".into()),
    }));
    let second = &actions_of(&w, made[1].id)[0];
    assert_eq!(
        events_of(second),
        [("controller_create", OK), ("node_start", FAILED)]
    );
    assert_eq!(second.message.as_deref(), Some("Error"));
    assert_eq!(
        second.events[1].detail.as_deref(),
        Some("launch_failure: QEMU could not open the disk")
    );
}

/// A START its node lost to an agent's restart ends in the actions too: the instance kept
/// stopped (INSTANCE_STOPPED before any STATS) or forgotten (INSTANCE_DELETED) while pending.
#[test]
fn a_start_lost_to_an_agents_restart_ends_with_an_error() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let [kept, forgotten] = [w.launch(1)[0].id, w.launch(1)[0].id];
    w.engine
        .handle_from(NODE, &stopped_event(kept), SystemTime::now())
        .unwrap();
    w.engine
        .handle_from(NODE, &deleted_event(forgotten), SystemTime::now())
        .unwrap();
    for (id, why) in [
        (kept, "its node lost it as it booted"),
        (forgotten, "its node lost it before it was made"),
    ] {
        let action = &actions_of(&w, id)[0];
        assert_eq!(
            events_of(action),
            [("controller_create", OK), ("node_start", FAILED)]
        );
        let detail = action.events[1].detail.as_deref().unwrap_or_default();
        assert!(detail.starts_with(why), "{detail}");
    }
}

/// A launch waiting for its subnet's CNCI sends no START yet: its actions have no `node_start`
/// until the CNCI is up and the STARTs go.
#[test]
fn a_launch_that_waits_for_its_cnci_starts_node_start_when_its_starts_go() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(2);
    assert_eq!(starts(&w.out.take()).len(), 1, "the CNCI's alone");
    for i in &made {
        assert_eq!(
            events_of(&actions_of(&w, i.id)[0]),
            [("controller_create", OK)]
        );
    }
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.event(added(&cnci));
    assert_eq!(starts(&w.out.take()).len(), 2);
    for i in &made {
        assert_eq!(
            events_of(&actions_of(&w, i.id)[0]),
            [("controller_create", OK), ("node_start", None)]
        );
    }
}

#[test]
fn stop_start_reboot_and_delete_are_recorded_and_refusals_are_not() {
    let w = world();
    let id = w.active();
    let by = Caller::default();
    w.engine.stop(Scope::Tenant(w.tenant), id, &by).unwrap();
    assert!(w.engine.stop(Scope::Tenant(w.tenant), id, &by).is_err());
    w.event(Payload::InstanceStopped(InstanceEvent {
        instance_uuid: id,
    }));
    w.engine.start(Scope::Tenant(w.tenant), id, &by).unwrap();
    w.stats(NODE, &[(id, Reported::Active)]);
    // A reboot is an INSTANCE_ACTION to the node: one controller event, no START.
    w.engine.reboot(Scope::Tenant(w.tenant), id, &by).unwrap();
    let rebooting = &actions_of(&w, id)[0];
    assert_eq!(events_of(rebooting), [("controller_reboot", OK)]);
    w.engine
        .act(
            Scope::Tenant(w.tenant),
            id,
            crate::cluster::InstanceAction::Pause,
            &by,
        )
        .unwrap();
    w.stats(NODE, &[(id, Reported::Paused)]);
    // Refused in a state that does not allow it: nothing recorded.
    assert!(
        w.engine
            .act(
                Scope::Tenant(w.tenant),
                id,
                crate::cluster::InstanceAction::Pause,
                &by
            )
            .is_err()
    );

    let all = actions_of(&w, id);
    let names: Vec<&str> = all.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(
        names,
        ["pause", "reboot", "start", "stop", "create"],
        "newest first"
    );
    assert_eq!(events_of(&all[0]), [("controller_pause", OK)]);
    assert_eq!(events_of(&all[1]), [("controller_reboot", OK)]);
    assert_eq!(
        events_of(&all[2]),
        [("controller_start", OK), ("node_start", OK)]
    );
    assert_eq!(events_of(&all[3]), [("controller_stop", OK)]);

    // The delete is recorded, and the actions outlive the record.
    w.engine.delete(Scope::Tenant(w.tenant), id, &by).unwrap();
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: id,
    }));
    assert!(w.gone(id));
    let all = actions_of(&w, id);
    assert_eq!(all.len(), 6);
    assert_eq!(events_of(&all[0]), [("controller_delete", OK)]);
}

#[test]
fn a_lost_start_is_an_error() {
    let w = world();
    let id = w.launch(1)[0].id;
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    let create = &actions_of(&w, id)[0];
    assert_eq!(
        events_of(create),
        [("controller_create", OK), ("node_start", FAILED)]
    );
    assert!(
        create.events[1]
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("start_lost")),
        "{create:?}"
    );
}

/// A launch whose STARTs go at once records its controller's part done with its actions: what
/// is left to record after the dispatches is the ones that failed, and the instances after a
/// failed one, which were not dispatched. A launch that waits records every outcome.
#[test]
fn a_launch_records_again_only_the_controller_parts_that_did_not_go() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let sent = w.launch(1).remove(0);
    let ticket = |n: u128| {
        crate::actions::ticket::<()>("req-1", Uuid::from_u128(n), ActionKind::Create, Ok(()))
    };
    let tickets = [ticket(1), ticket(2), ticket(3)];
    let dispatched = [
        (&tickets[0], Ok(sent)),
        (&tickets[1], Err(ClusterError::Invalid("no".into()))),
    ];
    let outcomes = |at_once| -> Vec<(Uuid, ActionResult, Option<String>)> {
        crate::engine::launch::controller_ends(at_once, &tickets, &dispatched)
            .into_iter()
            .map(|(t, o)| (t.instance, o.result, o.detail))
            .collect()
    };
    let failed = (
        Uuid::from_u128(2),
        ActionResult::Error,
        Some(ClusterError::Invalid("no".into()).to_string()),
    );
    let left = (
        Uuid::from_u128(3),
        ActionResult::Error,
        Some(format!(
            "the launch stopped before this START was sent: {}",
            ClusterError::Invalid("no".into())
        )),
    );
    assert_eq!(outcomes(true), [failed.clone(), left.clone()]);
    assert_eq!(
        outcomes(false),
        [
            (Uuid::from_u128(1), ActionResult::Success, None),
            failed,
            left
        ]
    );
    // All sent: nothing to record again.
    assert_eq!(
        crate::engine::launch::controller_ends(true, &tickets[..1], &dispatched[..1]),
        []
    );
}
