//! Restarts of the core: evacuate and restore, re-attaching what runs, finishing what a crash cut
//! short.

use super::*;

#[tokio::test(start_paused = true)]
async fn evacuate_and_restore_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim(Duration::ZERO);
    let (core, reporter) = spawn(dir.path(), &backend).await;
    for n in 1..=3 {
        core.start(spec(n, "debian")).unwrap();
        wait_event(&reporter, active(n)).await;
    }
    core.evacuate().unwrap();
    for n in 1..=3 {
        let stopped = InstanceEvent::Stopped {
            instance: id(n),
            cause: StopCause::Evacuated,
        };
        wait_event(&reporter, stopped.clone()).await;
    }
    assert_eq!(backend.counts(), (3, 0), "stopped and kept");
    assert_eq!(last_status(&reporter), Some(Availability::Maintenance));
    core.shutdown().await.unwrap();

    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.announce().unwrap();
    let snap = core.snapshot().await.unwrap();
    assert_eq!(snap.node.availability, Availability::Maintenance);
    assert_eq!(snap.instances.len(), 3);
    core.start(spec(4, "debian")).unwrap();
    start_failed(&reporter, 4, StartRefusal::NodeMaintenance).await;
    // Restore boots what the evacuation stopped, and only that.
    core.restore().unwrap();
    wait_snapshot(&core, |s| {
        s.instances.iter().all(|i| i.state == InstanceState::Active)
    })
    .await;
    assert_eq!(backend.counts(), (3, 3));
    core.shutdown().await.unwrap();

    let (core, reporter) = spawn(dir.path(), &backend).await;
    assert_eq!(
        core.snapshot().await.unwrap().node.availability,
        Availability::Ready
    );
    core.start(spec(4, "debian")).unwrap();
    wait_event(&reporter, active(4)).await;
}

#[tokio::test(start_paused = true)]
async fn a_restart_reattaches_what_runs_and_reports_what_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim(Duration::ZERO);
    let (core, reporter) = spawn(dir.path(), &backend).await;
    for n in 1..=3 {
        core.start(spec(n, "debian")).unwrap();
        wait_event(&reporter, active(n)).await;
    }
    core.shutdown().await.unwrap();
    assert_eq!(backend.counts(), (3, 3), "instances outlive the core");
    // While the agent is away: 2 dies, 3 vanishes altogether.
    backend.kill(id(2));
    backend.delete(id(3)).await.unwrap();

    let (core, reporter) = spawn(dir.path(), &backend).await;
    let lost = InstanceEvent::Stopped {
        instance: id(2),
        cause: StopCause::Lost,
    };
    wait_event(&reporter, lost).await;
    // 3, of which nothing is left, is reported gone from the node: not stopped (INSTANCE_STOPPED
    // would say the node keeps it).
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(3) }).await;
    // 2 is kept powered off; 3 is forgotten.
    let snap = wait_snapshot(&core, |s| s.instances.len() == 2).await;
    assert_eq!(snap.state(id(1)), Some(InstanceState::Active));
    assert_eq!(snap.state(id(2)), Some(InstanceState::Exited));
    assert_eq!(snap.node.vcpus_available, 4_094);
    let records = Store::open(dir.path()).unwrap().load().unwrap().records;
    assert_eq!(records.len(), 2);
    // The re-attached instance is watched and commanded as before.
    backend.kill(id(1));
    let exited = InstanceEvent::Stopped {
        instance: id(1),
        cause: StopCause::Exited,
    };
    wait_event(&reporter, exited).await;
    wait_snapshot(&core, |s| s.state(id(1)) == Some(InstanceState::Exited)).await;
    assert_eq!(backend.counts(), (2, 0), "kept, powered off");
}

/// What a kill -9 at each step of an instance's life leaves behind, and how the next core
/// finishes it: launching (record written, backend not yet running), removing (record says
/// so, backend may or may not have removed it), and a record damaged outside the agent.
#[tokio::test(start_paused = true)]
async fn a_restart_finishes_what_a_crash_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let backend = Arc::new(FakeBackend::new());
    // Killed after the record, before the boot finished: created, not running.
    store
        .write(&Record::new(spec(1, "debian"), Desired::Running))
        .unwrap();
    backend.insert(id(1), Power::Off);
    // Killed while deleting: the backend still has it.
    store
        .write(&Record::new(
            spec(2, "debian"),
            Desired::Removing { stop: None },
        ))
        .unwrap();
    backend.insert(id(2), Power::Running);
    // Killed while stopping for a restart elsewhere: the backend already removed it.
    let stop = Desired::Removing {
        stop: Some(StopCause::Requested),
    };
    store.write(&Record::new(spec(3, "debian"), stop)).unwrap();
    // Damaged outside the agent.
    std::fs::write(store.record_path(id(4)).unwrap(), b"{\"vers").unwrap();
    backend.insert(id(4), Power::Running);

    let (core, reporter) = spawn(dir.path(), &backend).await;
    let lost = InstanceEvent::Stopped {
        instance: id(1),
        cause: StopCause::Lost,
    };
    wait_event(&reporter, lost).await;
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(2) }).await;
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(3) }).await;
    // 1 is kept powered off (a restart boots it); 2 and 3 are removed as their records said.
    assert_eq!(backend.status(id(1)), Some(Power::Off));
    for n in 2..=3 {
        assert_eq!(backend.status(id(n)), None, "instance {n} removed");
    }
    // The unreadable one is kept as leftovers: visible, not startable, deletable.
    let snap = wait_snapshot(&core, |s| s.instances.len() == 2).await;
    assert_eq!(snap.state(id(1)), Some(InstanceState::Exited));
    assert_eq!(snap.state(id(4)), Some(InstanceState::ExitFailed));
    core.start(spec(4, "debian")).unwrap();
    start_failed(&reporter, 4, StartRefusal::InstanceExists).await;
    core.delete(id(4), false).unwrap();
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(4) }).await;
    assert_eq!(backend.status(id(4)), None);
    let loaded = store.load().unwrap();
    assert_eq!(loaded.records.len(), 1);
    assert!(loaded.unreadable.is_empty());
}
