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

mod admission;
mod firewall;
mod flow;
mod kept;
mod restarts;
mod volumes;

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
        role: agent::model::InstanceRole::Workload,
        firmware: Firmware::Efi,
        image: image.into(),
        resources: Resources {
            vcpus: 1,
            mem_mb: 256,
            disk_mb: 1_000,
        },
        nic: None,
        disks: Vec::new(),
        volumes: Vec::new(),
        user_data: None,
        meta_data: Default::default(),
        restart: false,
        kernel: None,
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
