//! What is lost on the way and found again: DELETEs and STARTs lost with a scheduler or an agent
//! that died, forgotten instances a node runs after all, deletes of unplaced instances, fatal
//! START_FAILUREs and their faults.

use super::*;

impl World {
    /// Whether `id` is in `error` because no node reported its START in time.
    fn start_was_lost(&self, id: Uuid) -> bool {
        matches!(self.state(id), InstanceState::Error(ref r) if r.starts_with(START_LOST))
    }
}

/// A DELETE lost with a scheduler that was down (or died) is sent again when the node's STATS
/// still shows the instance (found by the kill -9 fault test: the instance stayed deleted,
/// then hung, and ran on).
#[test]
fn a_lost_delete_is_sent_again_while_the_node_reports_the_instance() {
    let w = world();
    let id = w.active();
    w.out.down.store(true, Ordering::SeqCst);
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Deleted);
    w.out.down.store(false, Ordering::SeqCst);
    assert!(w.out.take().is_empty());
    w.stats(NODE, &[(id, Reported::Active)]);
    let sent = w.out.take();
    assert_eq!(deletes(&sent).len(), 1, "{sent:?}");
    assert_eq!(deletes(&sent)[0].instance_uuid, id);
    // Not again at every STATS.
    w.stats(NODE, &[(id, Reported::Active)]);
    assert!(deletes(&w.out.take()).is_empty());
    // A hung one too, and a restarted engine (which sent nothing yet) sends it at once.
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Hung);
    let again = Engine::new(
        w.engine.store().clone(),
        w.out.clone(),
        EngineConfig::new(Uuid::nil()),
    )
    .unwrap();
    again
        .handle(&stats_payload(
            NODE,
            ssntp::payload::NodeState::Ready,
            &[(id, Reported::Active)],
            vec![],
        ))
        .unwrap();
    assert_eq!(deletes(&w.out.take()).len(), 1);
    again
        .handle(&Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: id,
        }))
        .unwrap();
    assert!(w.gone(id));
}

/// A START lost with a scheduler or an agent that died (found by the kill -9 fault test: the
/// instance stayed pending for ever, and once deleted, hung for ever).
#[test]
fn a_start_no_node_reports_is_lost_and_its_delete_forgotten() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let lost = w.launch(2);
    let (a, b) = (lost[0].id, lost[1].id);
    w.out.take();
    w.engine.sweep(SystemTime::now()).unwrap();
    assert_eq!(w.state(a), InstanceState::Pending);
    w.engine.delete(Scope::All, b, &Caller::default()).unwrap();
    let later = SystemTime::now() + Duration::from_secs(61);
    w.engine.sweep(later).unwrap();
    assert!(w.start_was_lost(a), "{:?}", w.state(a));
    assert!(
        w.gone(b),
        "a deleted instance no node ever had is forgotten"
    );
    let fault = w.instance(a).fault.unwrap();
    assert_eq!(fault.reason, START_LOST);
    assert!(
        fault.message.starts_with("no node reported it within"),
        "{fault:?}"
    );
    // It shows up after all: active, and its fault goes.
    w.stats(NODE, &[(a, Reported::Active)]);
    assert_eq!(w.state(a), InstanceState::Active);
    assert_eq!(w.instance(a).fault, None);
    // A restarted engine times out the pending instances of the last run too.
    let c = w.launch(1)[0].id;
    let again = Engine::new(
        w.engine.store().clone(),
        w.out.clone(),
        EngineConfig::new(Uuid::nil()),
    )
    .unwrap();
    again
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert!(matches!(w.state(c), InstanceState::Error(_)));
}

/// Found by the libvirt kill -9 fault test (cli/tests/faults.rs): an instance deleted while
/// pending, before any node reported it, was forgotten after the confirmation timeout; its
/// START had reached a slow agent, which booted it afterwards, and the VM ran on with no record
/// ("left alone"). A node that reports an instance this engine removed now gets its DELETE.
#[test]
fn a_forgotten_instance_that_a_node_runs_after_all_is_deleted_there() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let ids = w.launch(2);
    let (late, errored) = (ids[0].id, ids[1].id);
    w.engine
        .delete(Scope::All, late, &Caller::default())
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(61);
    w.engine.sweep(later).unwrap();
    assert!(w.gone(late), "deleted and never reported: forgotten");
    // The other's START is given up for lost; the user deletes the `error` instance.
    assert!(matches!(w.state(errored), InstanceState::Error(_)));
    w.engine
        .delete(Scope::All, errored, &Caller::default())
        .unwrap();
    assert!(w.gone(errored));
    w.out.take();
    // Both STARTs got to NODE after all: it runs them.
    w.stats(
        NODE,
        &[(late, Reported::Active), (errored, Reported::Active)],
    );
    let sent = w.out.take();
    let mut deleted: Vec<Uuid> = deletes(&sent).iter().map(|d| d.instance_uuid).collect();
    deleted.sort();
    let mut want = vec![late, errored];
    want.sort();
    assert_eq!(deleted, want);
    assert!(
        deletes(&sent)
            .iter()
            .all(|d| d.workload_agent_uuid == NODE && !d.stop)
    );
    assert!(w.events().iter().any(|e| e.contains("DELETE sent")));
    assert!(!w.events().iter().any(|e| e.contains("does not know")));
    // Not again at once while the node still reports it (again after DELETE_RESEND).
    w.stats(NODE, &[(late, Reported::Active)]);
    assert!(deletes(&w.out.take()).is_empty());
    // Gone from the node: nothing more, and neither is adopted.
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: late,
    }));
    w.stats(NODE, &[]);
    assert!(w.gone(late) && w.gone(errored));
}

#[test]
fn deleting_an_unplaced_instance_waits_to_learn_its_node() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    w.out.take();
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert!(w.out.take().is_empty());
    // It lands on NODE after all: the DELETE goes there.
    w.stats(NODE, &[(id, Reported::Active)]);
    let sent = w.out.take();
    assert_eq!(deletes(&sent)[0].workload_agent_uuid, NODE);
    assert_eq!(w.state(id), InstanceState::Deleted);
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: id,
    }));
    assert!(w.gone(id));
}

#[test]
fn deleting_while_pending_and_then_failing_to_start_removes_the_record() {
    let w = world();
    let id = w.launch(1)[0].id;
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: id,
        node_uuid: None,
        reason: StartFailureReason::FullCloud,
        restart: false,
        message: None,
    }));
    assert!(w.gone(id));
}

#[test]
fn fatal_start_failures_are_errors_with_the_reason() {
    let w = world();
    let made = w.launch(2);
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: made[0].id,
        node_uuid: Some(NODE),
        reason: StartFailureReason::ImageFailure,
        restart: false,
        message: None,
    }));
    assert_eq!(
        w.state(made[0].id),
        InstanceState::Error("image_failure".into())
    );
    // Not fatal: nothing changes.
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: made[1].id,
        node_uuid: Some(NODE),
        reason: StartFailureReason::AlreadyRunning,
        restart: false,
        message: None,
    }));
    assert_eq!(w.state(made[1].id), InstanceState::Pending);
    // An errored instance is deleted at once, and may be started again.
    w.engine
        .start(Scope::All, made[0].id, &Caller::default())
        .unwrap();
    assert_eq!(w.state(made[0].id), InstanceState::Pending);
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: made[0].id,
        node_uuid: None,
        reason: StartFailureReason::NoCn,
        restart: true,
        message: None,
    }));
    w.engine
        .delete(Scope::All, made[0].id, &Caller::default())
        .unwrap();
    assert!(w.gone(made[0].id));
}

#[test]
fn a_fatal_start_failure_leaves_a_fault_with_its_cause_until_started_again() {
    let w = world();
    let made = w.launch(2);
    let (id, other) = (made[0].id, made[1].id);
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_602_611_908);
    let cause = "QEMU could not open /x/seed.iso: Permission denied";
    let failure =
        ssntp::payload::StartFailure::new(id, Some(NODE), StartFailureReason::LaunchFailure, false)
            .with_message(cause);
    w.engine
        .handle_at(&Payload::StartFailure(failure), at)
        .unwrap();
    let failed = w.instance(id);
    assert_eq!(failed.state, InstanceState::Error("launch_failure".into()));
    assert_eq!(
        failed.fault,
        Some(store::Fault {
            reason: "launch_failure".into(),
            message: cause.into(),
            created: at,
        })
    );
    // The event log says it with the cause.
    assert!(
        w.events().contains(&format!(
            "instance {id} failed to start: launch_failure: {cause}"
        )),
        "{:?}",
        w.events()
    );
    // The scheduler's own failure has no message: the controller says what it means.
    w.event(start_failure(other, StartFailureReason::FullCloud));
    let full = w.instance(other).fault.unwrap();
    assert_eq!(
        (full.reason.as_str(), full.message.as_str()),
        ("full_cloud", "no compute node has room for the instance")
    );
    assert!(w.events().contains(&format!(
        "instance {other} failed to start: full_cloud: no compute node has room for the instance"
    )));
    // Started again: pending, no fault; a second failure has its own.
    w.engine.start(Scope::All, id, &Caller::default()).unwrap();
    assert_eq!(w.state(id), InstanceState::Pending);
    assert_eq!(w.instance(id).fault, None);
    w.event(start_failure(id, StartFailureReason::NoCn));
    let again = w.instance(id).fault.unwrap();
    assert_eq!(
        (again.reason.as_str(), again.message.as_str()),
        ("no_cn", "there is no compute node in the cluster")
    );
}

/// A START its node reports is confirmed: it leaves the STARTs the sweep reads (each sweep read
/// the record of every START older than the timeout, successful ones included); the others are
/// still declared lost in time.
#[test]
fn a_reported_start_is_no_longer_awaited() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let made = w.launch(3);
    let (a, b) = (made[0].id, made[1].id);
    assert_eq!(w.engine.dispatched_count(), 3);
    w.stats(NODE, &[(a, Reported::Active)]);
    assert_eq!(w.state(a), InstanceState::Active);
    assert_eq!(w.engine.dispatched_count(), 2);
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.engine.dispatched_count(), 0);
    assert_eq!(w.state(a), InstanceState::Active);
    assert!(w.start_was_lost(b), "{:?}", w.state(b));
}

/// A controller behind on its frames declares nothing lost that may wait among them: a START or
/// a DELETE is overdue only when the controller has heard the cluster (applied what its
/// schedulers sent) as far as the timeout past it. Found at full size over etcd: a controller
/// minutes behind declared the STARTs of 39,979 instances that ran lost.
#[test]
fn a_controller_behind_its_frames_declares_nothing_lost_that_may_wait_among_them() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let deleted = w.active();
    let made = w.launch(2);
    let (reported, lost) = (made[0].id, made[1].id);
    w.engine
        .delete(Scope::All, deleted, &Caller::default())
        .unwrap();
    let sent = SystemTime::now();
    let later = sent + Duration::from_secs(600);
    // Ten minutes on, frames read 30 s after the STARTs and the DELETE still wait.
    w.engine
        .sweep_heard(later, sent + Duration::from_secs(30))
        .unwrap();
    assert_eq!(w.state(reported), InstanceState::Pending);
    assert_eq!(w.state(lost), InstanceState::Pending);
    assert_eq!(w.state(deleted), InstanceState::Deleted);
    assert_eq!(w.engine.dispatched_count(), 2);
    assert_eq!(w.engine.frames_behind(), Duration::from_secs(570));
    // Caught up: one START's report was among them; the other START's and the DELETE's were
    // not (the node still runs the deleted instance).
    w.stats(
        NODE,
        &[(reported, Reported::Active), (deleted, Reported::Active)],
    );
    w.engine.sweep_heard(later, later).unwrap();
    assert_eq!(w.engine.frames_behind(), Duration::ZERO);
    assert_eq!(w.state(reported), InstanceState::Active);
    assert!(w.start_was_lost(lost), "{:?}", w.state(lost));
    assert_eq!(w.state(deleted), InstanceState::Hung);
    assert_eq!(w.engine.dispatched_count(), 0);
}

/// Each sweep checks overdue STARTs for a bounded time (at least one), many records a read, the
/// oldest first: with no time at all, one a sweep, more than a read's worth, in the order of
/// their STARTs, none forgotten on the way.
#[test]
fn lost_starts_are_declared_oldest_first_over_bounded_sweeps() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let older: Vec<Uuid> = w.launch(300).iter().map(|i| i.id).collect();
    let newer: Vec<Uuid> = w.launch(2).iter().map(|i| i.id).collect();
    let later = SystemTime::now() + Duration::from_secs(61);
    for left in (0..302).rev() {
        w.engine.sweep_within(later, later, Duration::ZERO).unwrap();
        assert_eq!(w.engine.dispatched_count(), left);
        if left == 2 {
            assert!(older.iter().all(|&id| w.start_was_lost(id)));
            assert!(
                newer
                    .iter()
                    .all(|&id| w.state(id) == InstanceState::Pending)
            );
        }
    }
    assert!(newer.iter().all(|&id| w.start_was_lost(id)));
}
