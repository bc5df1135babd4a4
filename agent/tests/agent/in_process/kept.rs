//! Instances kept in place: actions, a resize on restart, and a crash while instances are stopped,
//! paused or suspended.

use super::*;

/// Reboots, pause, suspend and their reverses act on the instance in place: its disk (what the
/// guest wrote) is there after each, the states follow, and an action its state does not allow
/// is refused without touching the backend.
#[tokio::test(start_paused = true)]
async fn actions_keep_the_instance_and_its_disk() {
    let dir = tempfile::tempdir().unwrap();
    let sim_dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(
        SimBackend::new(SimConfig {
            dir: Some(sim_dir.path().to_owned()),
            ..SimConfig::default()
        })
        .unwrap(),
    );
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    backend.write_disk(id(1), "marker").unwrap();
    let state = |s| move |snap: &Snapshot| snap.state(id(1)) == Some(s);
    let steps = [
        (Action::Reboot, InstanceState::Active),
        (Action::RebootHard, InstanceState::Active),
        (Action::Pause, InstanceState::Paused),
        (Action::Unpause, InstanceState::Active),
        (Action::Pause, InstanceState::Paused),
        (Action::Suspend, InstanceState::Suspended),
        (Action::Resume, InstanceState::Active),
    ];
    for (action, after) in steps {
        core.action(id(1), action).unwrap();
        wait_stats(&reporter, id(1), after).await;
        wait_snapshot(&core, state(after)).await;
        assert_eq!(backend.disk(id(1)).as_deref(), Some("marker"), "{action:?}");
    }
    assert_eq!(backend.boots(id(1)), Some(3), "a boot and two reboots");

    // Refused in the wrong state, and for an unknown instance.
    for (action, reason) in [
        (Action::Unpause, ActionRefusal::InvalidState),
        (Action::Resume, ActionRefusal::InvalidState),
    ] {
        core.action(id(1), action).unwrap();
        reporter
            .wait_for(WAIT, |_| {
                reporter
                    .events()
                    .iter()
                    .any(|e| {
                        matches!(e, InstanceEvent::ActionFailed { action: a, reason: r, .. }
                            if *a == action && *r == reason)
                    })
                    .then_some(())
            })
            .await
            .unwrap();
    }
    core.action(id(9), Action::Pause).unwrap();
    let unknown = InstanceEvent::ActionFailed {
        instance: id(9),
        action: Action::Pause,
        reason: ActionRefusal::NoInstance,
        message: None,
    };
    wait_event(&reporter, unknown).await;

    // Stopped: no pause; the disk is kept; a restart brings back the same disk.
    core.delete(id(1), true).unwrap();
    wait_snapshot(&core, state(InstanceState::Exited)).await;
    core.action(id(1), Action::Pause).unwrap();
    reporter
        .wait_for(WAIT, |_| {
            reporter
                .events()
                .iter()
                .any(|e| {
                    matches!(e, InstanceEvent::ActionFailed { action: Action::Pause, reason: ActionRefusal::InvalidState, instance, .. } if *instance == id(1))
                })
                .then_some(())
        })
        .await
        .unwrap();
    let mut again = spec(1, "debian");
    again.restart = true;
    core.start(again).unwrap();
    wait_snapshot(&core, state(InstanceState::Active)).await;
    assert_eq!(backend.disk(id(1)).as_deref(), Some("marker"));
}

/// A START with `restart` that asks for other resources than the kept instance has resizes it
/// before it boots (the backend's resize, the record, the reservation); one that the node cannot
/// hold is refused `full_cn` and changes nothing.
#[tokio::test(start_paused = true)]
async fn a_restart_with_other_resources_resizes_the_kept_instance() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    core.delete(id(1), true).unwrap();
    wait_snapshot(&core, |s| s.state(id(1)) == Some(InstanceState::Exited)).await;

    let mut too_big = spec(1, "debian");
    too_big.restart = true;
    too_big.resources.vcpus = 1_000_000;
    core.start(too_big).unwrap();
    let refused = InstanceEvent::StartFailed {
        instance: id(1),
        reason: StartRefusal::FullCn,
        restart: true,
        message: None,
    };
    wait_event(&reporter, refused).await;
    assert_eq!(backend.ops(id(1)), vec![Op::Create, Op::Start, Op::Stop]);

    let bigger = Resources {
        vcpus: 4,
        mem_mb: 1_024,
        disk_mb: 2_000,
    };
    let mut again = spec(1, "debian");
    again.restart = true;
    again.resources = bigger;
    core.start(again).unwrap();
    wait_snapshot(&core, |s| s.state(id(1)) == Some(InstanceState::Active)).await;
    assert_eq!(
        backend.ops(id(1)),
        vec![
            Op::Create,
            Op::Start,
            Op::Stop,
            Op::Resize(bigger),
            Op::Start
        ]
    );
    let snap = core.snapshot().await.unwrap();
    assert_eq!(
        snap.node.vcpus_available,
        4_096 - 4,
        "it reserves what it has now"
    );
    let records = Store::open(dir.path()).unwrap().load().unwrap().records;
    assert_eq!(records[0].spec.resources, bigger);
}

/// A crash of the agent (a new core over the same state directory and backend) while one
/// instance is stopped, one paused and one suspended changes nothing about them.
#[tokio::test(start_paused = true)]
async fn a_restart_keeps_stopped_paused_and_suspended_instances_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let sim_dir = tempfile::tempdir().unwrap();
    let sim_config = SimConfig {
        dir: Some(sim_dir.path().to_owned()),
        ..SimConfig::default()
    };
    let backend = Arc::new(SimBackend::new(sim_config.clone()).unwrap());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    for n in 1..=3 {
        core.start(spec(n, "debian")).unwrap();
        wait_event(&reporter, active(n)).await;
        backend.write_disk(id(n), &format!("disk {n}")).unwrap();
    }
    core.delete(id(1), true).unwrap();
    core.action(id(2), Action::Pause).unwrap();
    core.action(id(3), Action::Suspend).unwrap();
    let wanted = [
        (id(1), InstanceState::Exited),
        (id(2), InstanceState::Paused),
        (id(3), InstanceState::Suspended),
    ];
    let as_wanted = |s: &Snapshot| wanted.iter().all(|(i, st)| s.state(*i) == Some(*st));
    wait_snapshot(&core, as_wanted).await;
    // As after a kill -9: no shutdown, a new backend over the same files, a new core.
    drop(core);
    let backend = Arc::new(SimBackend::new(sim_config).unwrap());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    let snap = core.snapshot().await.unwrap();
    assert!(as_wanted(&snap), "{:?}", snap.instances);
    assert_eq!(backend.status(id(1)), Some(Power::Off));
    assert_eq!(backend.status(id(2)), Some(Power::Paused));
    assert_eq!(backend.status(id(3)), Some(Power::Saved));
    assert!(
        !reporter
            .events()
            .iter()
            .any(|e| matches!(e, InstanceEvent::Stopped { .. })),
        "nothing was lost"
    );
    for n in 1..=3 {
        assert_eq!(backend.disk(id(n)), Some(format!("disk {n}")));
    }
    core.action(id(2), Action::Unpause).unwrap();
    core.action(id(3), Action::Resume).unwrap();
    let mut again = spec(1, "debian");
    again.restart = true;
    core.start(again).unwrap();
    wait_snapshot(&core, |s| {
        s.instances.iter().all(|i| i.state == InstanceState::Active)
    })
    .await;
}
