//! Starts and what is admitted: the reports of a start, backend failures as START_FAILURE reasons,
//! refusals, watermarks and limits.

use super::*;

#[tokio::test(start_paused = true)]
async fn start_is_reported_pending_then_active_in_stats() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim(Duration::from_secs(3));
    let (core, reporter) = spawn(dir.path(), &backend).await;
    let t0 = tokio::time::Instant::now();
    core.start(spec(1, "debian")).unwrap();
    wait_stats(&reporter, id(1), InstanceState::Pending).await;
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "pending while booting"
    );
    assert!(
        reporter
            .reports()
            .iter()
            .any(|r| matches!(r, Report::Status(n) if n.availability == Availability::Ready)),
        "a status report follows the START"
    );
    wait_stats(&reporter, id(1), InstanceState::Active).await;
    assert!(
        t0.elapsed() >= Duration::from_secs(3),
        "active after the boot delay"
    );
    let reports = reporter.reports();
    let pending_at = reports
        .iter()
        .position(|r| stats_state(r, id(1)) == Some(InstanceState::Pending));
    let active_at = reports
        .iter()
        .position(|r| stats_state(r, id(1)) == Some(InstanceState::Active));
    assert!(pending_at < active_at);
    // The record is on disk while the instance lives.
    let records = Store::open(dir.path()).unwrap().load().unwrap().records;
    assert_eq!(
        records,
        vec![Record::new(spec(1, "debian"), Desired::Running)]
    );
    let snap = core.snapshot().await.unwrap();
    assert_eq!(snap.state(id(1)), Some(InstanceState::Active));
    assert_eq!(snap.node.vcpus_available, 4_095);
    assert_eq!(snap.node.mem_available_mb, 1_000_000 - 256);
}

#[tokio::test(start_paused = true)]
async fn backend_failures_map_to_their_start_failure_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim(Duration::ZERO);
    let (core, reporter) = spawn(dir.path(), &backend).await;
    let cases = [
        (1, sim::IMAGE_FAIL_IMAGE, StartRefusal::ImageFailure),
        (2, sim::IMAGE_FAIL_LAUNCH, StartRefusal::LaunchFailure),
        (3, sim::IMAGE_FAIL_NETWORK, StartRefusal::NetworkFailure),
    ];
    for (n, image, reason) in cases {
        core.start(spec(n, image)).unwrap();
        // The backend's error is the failure's message, without its kind.
        let message = start_failed(&reporter, n, reason).await.unwrap();
        assert!(message.starts_with("simulated: "), "{message}");
    }
    // Injected per call, too.
    backend.fail_next(Op::Start, BackendError::Network("injected".into()));
    core.start(spec(4, "debian")).unwrap();
    assert_eq!(
        start_failed(&reporter, 4, StartRefusal::NetworkFailure)
            .await
            .as_deref(),
        Some("injected")
    );
    // Nothing is left of any of them: no instance, no record, no reservation.
    let snap = wait_snapshot(&core, |s| s.instances.is_empty()).await;
    assert_eq!(snap.node.vcpus_available, 4_096);
    assert_eq!(backend.counts(), (0, 0));
    assert!(
        Store::open(dir.path())
            .unwrap()
            .load()
            .unwrap()
            .records
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn admission_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;

    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    core.start(spec(1, "debian")).unwrap();
    start_failed(&reporter, 1, StartRefusal::AlreadyRunning).await;

    // Leftovers the agent does not know of: the backend says they exist; they stay.
    backend.insert(id(2), Power::Off);
    core.start(spec(2, "debian")).unwrap();
    start_failed(&reporter, 2, StartRefusal::InstanceExists).await;
    assert_eq!(backend.ops(id(2)), vec![Op::Create]);
    assert_eq!(backend.status(id(2)), Some(Power::Off));

    let mut zero = spec(3, "debian");
    zero.resources.vcpus = 0;
    core.start(zero).unwrap();
    start_failed(&reporter, 3, StartRefusal::InvalidData).await;

    let mut huge = spec(4, "debian");
    huge.resources.mem_mb = 2_000_000;
    core.start(huge.clone()).unwrap();
    start_failed(&reporter, 4, StartRefusal::FullCn).await;
    // A restart of an instance the node does not hold.
    huge.restart = true;
    core.start(huge).unwrap();
    let missing = InstanceEvent::StartFailed {
        instance: id(4),
        reason: StartRefusal::InstanceMissing,
        restart: true,
        message: Some("the node does not hold this instance".into()),
    };
    wait_event(&reporter, missing).await;

    core.evacuate().unwrap();
    core.start(spec(5, "debian")).unwrap();
    start_failed(&reporter, 5, StartRefusal::NodeMaintenance).await;
    assert!(backend.ops(id(4)).is_empty() && backend.ops(id(5)).is_empty());
}

#[tokio::test(start_paused = true)]
async fn watermarks_report_full_and_refuse_below_the_low_one() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let mut cfg = config(dir.path());
    cfg.host = HostSource::Fixed(host(3_000));
    // Memory: FULL below 1,000 MiB available, refuse below 512 (the defaults).
    let (core, reporter) = spawn_with(cfg, &backend).await;
    core.announce().unwrap();
    reporter
        .wait_for(WAIT, |rs| {
            (last_status_in(rs) == Some(Availability::Ready)).then_some(())
        })
        .await
        .unwrap();

    core.start(sized(1, 1_500)).unwrap(); // 1,500 left: READY
    wait_event(&reporter, active(1)).await;
    assert_eq!(last_status(&reporter), Some(Availability::Ready));
    core.start(sized(2, 1_000)).unwrap(); // would leave 500 < 512: refused
    start_failed(&reporter, 2, StartRefusal::FullCn).await;
    core.start(sized(3, 800)).unwrap(); // 700 left: admitted, FULL
    wait_event(&reporter, active(3)).await;
    assert_eq!(last_status(&reporter), Some(Availability::Full));
    core.start(sized(4, 100)).unwrap(); // 600 left: still admitted (hysteresis)
    wait_event(&reporter, active(4)).await;
    core.start(sized(5, 100)).unwrap(); // would leave 500: refused
    start_failed(&reporter, 5, StartRefusal::FullCn).await;
    let snap = core.snapshot().await.unwrap();
    assert_eq!(snap.node.availability, Availability::Full);
    assert_eq!(snap.node.mem_available_mb, 600);
    // Freeing memory makes it READY again.
    core.delete(id(1), false).unwrap();
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(1) }).await;
    assert_eq!(last_status(&reporter), Some(Availability::Ready));
}

#[tokio::test(start_paused = true)]
async fn limits_can_be_turned_off_and_the_instance_limit_holds() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let mut cfg = config(dir.path());
    cfg.host = HostSource::Fixed(host(100));
    cfg.limits.mem.enabled = false;
    cfg.max_instances = 2;
    let (core, reporter) = spawn_with(cfg, &backend).await;
    core.start(sized(1, 4_000)).unwrap();
    wait_event(&reporter, active(1)).await;
    assert_eq!(last_status(&reporter), Some(Availability::Ready));
    core.start(sized(2, 4_000)).unwrap();
    wait_event(&reporter, active(2)).await;
    assert_eq!(last_status(&reporter), Some(Availability::Full));
    core.start(sized(3, 1)).unwrap();
    start_failed(&reporter, 3, StartRefusal::FullCn).await;
}
