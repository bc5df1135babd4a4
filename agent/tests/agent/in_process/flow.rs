//! How work flows: one instance in order and many in parallel, parallel boots, STATS on time (also
//! with a slow backend), a full queue, bad configuration.

use super::*;

#[tokio::test(start_paused = true)]
async fn one_instance_in_order_many_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    backend.hold_starts();
    core.start(spec(1, "debian")).unwrap();
    core.start(spec(2, "debian")).unwrap();
    core.delete(id(1), false).unwrap();
    core.delete(id(1), false).unwrap(); // a repeat is answered by the first
    wait_stats(&reporter, id(2), InstanceState::Pending).await;
    wait_until("both created", || {
        backend.ops(id(1)) == [Op::Create] && backend.ops(id(2)) == [Op::Create]
    })
    .await;
    // Held in its start, 1 has not seen its delete yet; 2 is not held up by 1.
    let snap = core.snapshot().await.unwrap();
    assert_eq!(snap.state(id(1)), Some(InstanceState::Pending));
    assert_eq!(snap.state(id(2)), Some(InstanceState::Pending));
    backend.release_starts();
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(1) }).await;
    wait_event(&reporter, active(2)).await;
    assert_eq!(
        backend.ops(id(1)),
        vec![Op::Create, Op::Start, Op::Stop, Op::Delete]
    );
    let of_1: Vec<_> = reporter
        .events()
        .into_iter()
        .filter(|e| e.instance() == id(1))
        .collect();
    assert_eq!(
        of_1,
        vec![
            InstanceEvent::State {
                instance: id(1),
                state: InstanceState::Pending
            },
            active(1),
            InstanceEvent::State {
                instance: id(1),
                state: InstanceState::Stopping
            },
            InstanceEvent::Deleted { instance: id(1) },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn boots_run_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim(Duration::from_secs(10));
    let (core, reporter) = spawn(dir.path(), &backend).await;
    let t0 = tokio::time::Instant::now();
    for n in 1..=100 {
        core.start(spec(n, "debian")).unwrap();
    }
    reporter
        .wait_for(WAIT, |rs| {
            let actives = rs
                .iter()
                .filter(|r| {
                    matches!(
                        r,
                        Report::Event(InstanceEvent::State {
                            state: InstanceState::Active,
                            ..
                        })
                    )
                })
                .count();
            (actives == 100).then_some(())
        })
        .await
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(11), "{:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn stats_every_interval_with_usage_and_on_announce() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    backend.set_usage(Usage {
        mem_mb: 100,
        disk_mb: 10,
        cpu_percent: Some(3),
    });
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.announce().unwrap();
    reporter
        .wait_for(WAIT, |rs| {
            matches!(rs, [Report::Status(_), Report::Stats(_, i)] if i.is_empty()).then_some(())
        })
        .await
        .unwrap();
    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    reporter.clear();
    let t0 = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let reports = reporter.reports();
    let stats = reports
        .iter()
        .filter(|r| matches!(r, Report::Stats(..)))
        .count();
    assert!(
        (11..=13).contains(&stats),
        "{stats} stats in {:?}",
        t0.elapsed()
    );
    let Some(Report::Stats(node, instances)) = reports
        .iter()
        .rev()
        .find(|r| matches!(r, Report::Stats(..)))
    else {
        panic!()
    };
    assert_eq!(instances[0].usage.mem_mb, 100);
    assert_eq!(instances[0].usage.cpu_percent, Some(3));
    // 1,000,000 + min(100, 256) − 256.
    assert_eq!(node.mem_available_mb, 1_000_000 - 156);
    assert_eq!(
        (node.hostname.as_str(), node.load, node.node),
        ("cn-test", 17, NODE)
    );
}

/// A backend slow to measure (libvirtd busy re-probing QEMU for a minute, as it did on a host
/// where /dev/kvm was root's alone) must not silence the node: the scheduler drops a node that
/// sends no STATS for three intervals. The reports go on with the last figures, and commands
/// are still carried out.
#[tokio::test(start_paused = true)]
async fn a_backend_slow_to_measure_does_not_silence_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    backend.set_usage(Usage {
        mem_mb: 100,
        disk_mb: 10,
        cpu_percent: Some(3),
    });
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    // One interval with the figures measured.
    tokio::time::sleep(Duration::from_secs(6)).await;
    backend.hold_stats();
    reporter.clear();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let stats: Vec<_> = reporter
        .reports()
        .into_iter()
        .filter_map(|r| match r {
            Report::Stats(_, instances) => Some(instances),
            _ => None,
        })
        .collect();
    assert!(stats.len() >= 10, "{} stats in 60 s", stats.len());
    assert!(
        stats.iter().all(|i| i[0].usage.mem_mb == 100),
        "the last figures are reported"
    );
    core.start(spec(2, "debian")).unwrap();
    wait_event(&reporter, active(2)).await;
    backend.release_stats();
}

#[tokio::test(start_paused = true)]
async fn a_full_command_queue_is_busy_not_growth() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let mut cfg = config(dir.path());
    cfg.command_queue = 3;
    let (core, _reporter) = spawn_with(cfg, &backend).await;
    // The owner runs only when this test yields: the queue fills.
    let results: Vec<_> = (1..=5).map(|n| core.start(spec(n, "debian"))).collect();
    assert!(results[..3].iter().all(Result::is_ok));
    assert!(matches!(results[3], Err(CoreError::Busy)));
    core.shutdown().await.unwrap();
    assert!(matches!(core.announce(), Err(CoreError::Stopped)));
}

#[tokio::test(start_paused = true)]
async fn bad_configuration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.command_queue = 0;
    let r = Core::spawn(cfg, Arc::new(FakeBackend::new()), RecordingReporter::new()).await;
    assert!(matches!(r, Err(CoreError::Config(_))));
}
