//! The agent core end to end, in process: commands in, reports out, over the recording fake
//! backend or the sim backend, on tokio's paused clock (no sleeps, no network).
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use agent::backend::Power;
use agent::backend::fake::{FakeBackend, Op};
use agent::model::{
    Action, ActionRefusal, Availability, DeleteRefusal, Firmware, InstanceEvent, InstanceSpec,
    InstanceState, Resources, StartRefusal, StopCause, Usage, VmKind,
};
use agent::reporter::{RecordingReporter, Report};
use agent::sim::{self, SimBackend, SimConfig};
use agent::store::{Desired, Record, Store};
use agent::{Backend, BackendError, Config, Core, CoreError, HostFigures, HostSource, Snapshot};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const NODE: Uuid = Uuid::from_u128(0xC0FFEE);
const WAIT: Duration = Duration::from_secs(120);

fn id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn host(mem_mb: u64) -> HostFigures {
    HostFigures {
        mem_total_mb: mem_mb,
        mem_available_mb: mem_mb,
        disk_total_mb: 10_000_000,
        disk_available_mb: 10_000_000,
        vcpus: 4_096,
        load: 17,
    }
}

fn config(dir: &Path) -> Config {
    Config::new(
        NODE,
        "cn-test",
        HostSource::Fixed(host(1_000_000)),
        dir.to_owned(),
    )
}

fn spec(n: u128, image: &str) -> InstanceSpec {
    InstanceSpec {
        instance: id(n),
        tenant: id(1_000),
        workload: id(2_000),
        kind: VmKind::Sim,
        firmware: Firmware::Efi,
        image: image.into(),
        resources: Resources {
            vcpus: 1,
            mem_mb: 256,
            disk_mb: 1_000,
        },
        nic: None,
        disks: Vec::new(),
        user_data: None,
        meta_data: Default::default(),
        restart: false,
    }
}

fn sized(n: u128, mem_mb: u32) -> InstanceSpec {
    let mut s = spec(n, "debian");
    s.resources.mem_mb = mem_mb;
    s
}

fn sim(boot: Duration) -> Arc<SimBackend> {
    Arc::new(
        SimBackend::new(SimConfig {
            boot_delay: boot,
            ..SimConfig::default()
        })
        .unwrap(),
    )
}

async fn spawn<B: Backend>(dir: &Path, backend: &Arc<B>) -> (Core, RecordingReporter) {
    spawn_with(config(dir), backend).await
}

async fn spawn_with<B: Backend>(config: Config, backend: &Arc<B>) -> (Core, RecordingReporter) {
    let reporter = RecordingReporter::new();
    let core = Core::spawn(config, Arc::clone(backend), reporter.clone())
        .await
        .unwrap();
    (core, reporter)
}

/// The state of `instance` in a STATS report, if it is there.
fn stats_state(report: &Report, instance: Uuid) -> Option<InstanceState> {
    match report {
        Report::Stats(_, instances) => instances
            .iter()
            .find(|i| i.instance == instance)
            .map(|i| i.state),
        _ => None,
    }
}

async fn wait_stats(reporter: &RecordingReporter, instance: Uuid, state: InstanceState) {
    reporter
        .wait_for(WAIT, |rs| {
            rs.iter()
                .any(|r| stats_state(r, instance) == Some(state))
                .then_some(())
        })
        .await
        .unwrap();
}

async fn wait_event(reporter: &RecordingReporter, event: InstanceEvent) {
    reporter.wait_event(WAIT, event).await.unwrap();
}

/// Polls `check` until it holds, for at most [`WAIT`] of (virtual) time.
async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    testkit::wait_until(WAIT, what, || std::future::ready(check())).await;
}

/// Polls the core's snapshot until `check` holds, for at most [`WAIT`] of (virtual) time.
async fn wait_snapshot(core: &Core, check: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let snap = core.snapshot().await.unwrap();
        if check(&snap) {
            return snap;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out: {snap:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for START_FAILED of instance `n` with `reason` (and `restart` false); returns its
/// message.
async fn start_failed(
    reporter: &RecordingReporter,
    n: u128,
    reason: StartRefusal,
) -> Option<String> {
    let wanted = (id(n), reason);
    reporter
        .wait_for(WAIT, |reports| {
            reports.iter().find_map(|r| match r {
                Report::Event(InstanceEvent::StartFailed {
                    instance,
                    reason,
                    restart: false,
                    message,
                }) if (*instance, *reason) == wanted => Some(message.clone()),
                _ => None,
            })
        })
        .await
        .unwrap()
}

fn active(n: u128) -> InstanceEvent {
    InstanceEvent::State {
        instance: id(n),
        state: InstanceState::Active,
    }
}

fn last_status(reporter: &RecordingReporter) -> Option<Availability> {
    last_status_in(&reporter.reports())
}

fn last_status_in(reports: &[Report]) -> Option<Availability> {
    reports.iter().rev().find_map(|r| match r {
        Report::Status(n) => Some(n.availability),
        _ => None,
    })
}

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

#[tokio::test(start_paused = true)]
async fn delete_stop_and_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.delete(id(9), false).unwrap();
    let unknown = InstanceEvent::DeleteFailed {
        instance: id(9),
        reason: DeleteRefusal::NoInstance,
    };
    wait_event(&reporter, unknown).await;

    core.start(spec(1, "debian")).unwrap();
    core.start(spec(2, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    wait_event(&reporter, active(2)).await;
    core.delete(id(1), false).unwrap();
    core.delete(id(2), true).unwrap();
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(1) }).await;
    let stopped = InstanceEvent::Stopped {
        instance: id(2),
        cause: StopCause::Requested,
    };
    wait_event(&reporter, stopped.clone()).await;
    assert_eq!(
        backend.ops(id(1)),
        vec![Op::Create, Op::Start, Op::Stop, Op::Delete]
    );
    assert_eq!(backend.status(id(1)), None);
    // A stop powers off and keeps: no delete, the instance and its record stay, reserved.
    assert_eq!(backend.ops(id(2)), vec![Op::Create, Op::Start, Op::Stop]);
    assert_eq!(backend.status(id(2)), Some(Power::Off));
    let snap = wait_snapshot(&core, |s| s.instances.len() == 1).await;
    assert_eq!(snap.state(id(2)), Some(InstanceState::Exited));
    assert_eq!(
        snap.node.vcpus_available, 4_095,
        "a stopped instance stays reserved"
    );
    let records = Store::open(dir.path()).unwrap().load().unwrap().records;
    assert_eq!(
        records.iter().map(|r| r.desired).collect::<Vec<_>>(),
        vec![Desired::Stopped {
            cause: StopCause::Requested
        }]
    );
    // Stopping was reported on the way, and the event was not doubled.
    let events = reporter.events();
    assert!(events.contains(&InstanceEvent::State {
        instance: id(2),
        state: InstanceState::Stopping
    }));
    assert_eq!(events.iter().filter(|e| **e == stopped).count(), 1);
    // A second stop of a stopped instance says stopped again; a plain START is refused; a
    // START with `restart` boots the kept instance.
    core.delete(id(2), true).unwrap();
    reporter
        .wait_for(WAIT, |_| {
            (reporter.events().iter().filter(|e| **e == stopped).count() == 2).then_some(())
        })
        .await
        .unwrap();
    core.start(spec(2, "debian")).unwrap();
    start_failed(&reporter, 2, StartRefusal::InstanceExists).await;
    let mut again = spec(2, "debian");
    again.restart = true;
    core.start(again).unwrap();
    wait_until("booted again", || {
        backend.ops(id(2)) == vec![Op::Create, Op::Start, Op::Stop, Op::Start]
    })
    .await;
    wait_snapshot(&core, |s| s.state(id(2)) == Some(InstanceState::Active)).await;
    core.delete(id(2), false).unwrap();
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(2) }).await;
    wait_snapshot(&core, |s| s.instances.is_empty()).await;
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
async fn a_failed_stop_leaves_exit_failed_leftovers_until_a_delete_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    backend.fail_next(Op::Delete, BackendError::Other("disk busy".into()));
    core.delete(id(1), false).unwrap();
    let failed = InstanceEvent::DeleteFailed {
        instance: id(1),
        reason: DeleteRefusal::BackendFailure,
    };
    wait_event(&reporter, failed).await;
    let snap = core.snapshot().await.unwrap();
    assert_eq!(snap.state(id(1)), Some(InstanceState::ExitFailed));
    assert_eq!(snap.node.vcpus_available, 4_095, "leftovers stay reserved");
    core.start(spec(1, "debian")).unwrap();
    start_failed(&reporter, 1, StartRefusal::InstanceExists).await;
    core.delete(id(1), false).unwrap();
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(1) }).await;
    wait_snapshot(&core, |s| s.instances.is_empty()).await;
}

#[tokio::test(start_paused = true)]
async fn an_instance_that_exits_on_its_own_is_reported_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim(Duration::from_secs(1));
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.start(spec(1, "debian")).unwrap();
    core.start(spec(2, sim::IMAGE_EXIT_AFTER_BOOT)).unwrap();
    wait_event(&reporter, active(1)).await;
    backend.kill(id(1));
    for n in [1, 2] {
        let stopped = InstanceEvent::Stopped {
            instance: id(n),
            cause: StopCause::Exited,
        };
        wait_event(&reporter, stopped.clone()).await;
    }
    // Both are kept, powered off, with their disks, and boot again on a restart.
    let snap = wait_snapshot(&core, |s| {
        s.instances.iter().all(|i| i.state == InstanceState::Exited)
    })
    .await;
    assert_eq!(snap.instances.len(), 2);
    assert_eq!(backend.counts(), (2, 0), "kept, not removed");
    let mut again = spec(1, "debian");
    again.restart = true;
    core.start(again).unwrap();
    wait_snapshot(&core, |s| s.state(id(1)) == Some(InstanceState::Active)).await;
    assert_eq!(backend.boots(id(1)), Some(2));
}

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
    for n in [2, 3] {
        let lost = InstanceEvent::Stopped {
            instance: id(n),
            cause: StopCause::Lost,
        };
        wait_event(&reporter, lost).await;
    }
    // 2 is kept powered off; 3, of which nothing is left, is forgotten.
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
    std::fs::write(store.record_path(id(4)), b"{\"vers").unwrap();
    backend.insert(id(4), Power::Running);

    let (core, reporter) = spawn(dir.path(), &backend).await;
    let lost = InstanceEvent::Stopped {
        instance: id(1),
        cause: StopCause::Lost,
    };
    wait_event(&reporter, lost).await;
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(2) }).await;
    let stopped = InstanceEvent::Stopped {
        instance: id(3),
        cause: StopCause::Requested,
    };
    wait_event(&reporter, stopped.clone()).await;
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
