//! A whole cluster in this process: scheduler, sim agents, controller.

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use controller::cluster::{Caller, Cluster, Launch};
use controller::daemon::{Controller, DaemonConfig};
use scheduler::SchedulerConfig;
use scheduler::testing::InProcess;
use ssntp::{Role, Uuid};
use ssntp_net::client::Backoff;
use store::{ImageKind, InstanceState, NewFlavor, NewImage, NewTenant, NewWorkload, Quota, Scope};
use testkit::TestPki;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The deadline of every wait (generous: two cores shared with builds).
pub(crate) const T: Duration = Duration::from_secs(60);

const SCHED: Uuid = Uuid::from_bytes([0x5c; 16]);

pub(crate) struct Sched {
    pub(crate) addr: String,
    stop: CancellationToken,
}

impl Drop for Sched {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub(crate) async fn start_scheduler(pki: &TestPki) -> Sched {
    let config = SchedulerConfig::for_tests(pki.identity(Role::SCHEDULER, Some(SCHED)), SCHED);
    let s = InProcess::start(config, None).await;
    Sched {
        addr: s.addr,
        stop: s.stop,
    }
}

/// A sim agent (dual role: compute and network) running in this process.
pub(crate) struct Agent {
    stop: CancellationToken,
    done: JoinHandle<()>,
    /// The port of its console endpoint (on 127.0.0.1), for the controller's
    /// `engine.console_port`.
    pub(crate) console_port: u16,
}

impl Agent {
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(T, self.done).await.unwrap().unwrap();
    }
}

pub(crate) fn start_agent(pki: &TestPki, scheduler: &str, dir: &Path) -> Agent {
    start_agent_with(pki, scheduler, dir, &[])
}

/// [`start_agent`] with `extra` flags.
pub(crate) fn start_agent_with(
    pki: &TestPki,
    scheduler: &str,
    dir: &Path,
    extra: &[&str],
) -> Agent {
    let (ca, cert, key) = pki
        .leaf(Role::AGENT | Role::NETAGENT, None)
        .write(dir, "agent");
    let state = dir.join("agent-state");
    let console_port = testkit::procfs::free_port();
    let console = format!("127.0.0.1:{console_port}");
    let mut args = vec![
        "cumulo-agent",
        "--ca-cert",
        ca.to_str().unwrap(),
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--scheduler",
        scheduler,
        "--network",
        "dual",
        "--backend",
        "sim",
        "--state-dir",
        state.to_str().unwrap(),
        "--no-disk-limit",
        "--no-mem-limit",
        "--vcpus",
        "4096",
        "--stats-interval",
        "1s",
        "--console-listen",
        &console,
    ];
    args.extend_from_slice(extra);
    let mut config = agent::daemon::cli::Args::try_parse_from(args)
        .unwrap()
        .into_config()
        .unwrap();
    config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(300),
    };
    let stop = CancellationToken::new();
    let token = stop.clone();
    let done = tokio::spawn(async move {
        if let Err(e) = agent::daemon::run(config, token).await {
            eprintln!("the agent stopped: {e}");
        }
    });
    Agent {
        stop,
        done,
        console_port,
    }
}

pub(crate) fn controller_config(pki: &TestPki, scheduler: &str, dir: &Path) -> DaemonConfig {
    let mut config = DaemonConfig::new(
        pki.identity(Role::CONTROLLER, None),
        vec![scheduler.to_string()],
        dir.join("controller"),
    );
    config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(300),
    };
    config.sweep_every = Duration::from_millis(100);
    config
}

/// Runs store work from an async test: the etcd store blocks on its own runtime, which may not
/// happen on a runtime worker.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A tenant with a workload; returns (tenant, workload).
pub(crate) fn seed(controller: &Controller, quota: Quota) -> (Uuid, Uuid) {
    blocking(|| seed_now(controller, quota))
}

fn seed_now(controller: &Controller, quota: Quota) -> (Uuid, Uuid) {
    let store = &controller.store;
    let tenant = store
        .create_tenant(NewTenant {
            name: format!("t-{}", Uuid::new_v4()),
            quota,
            subnet_prefix: 20,
        })
        .unwrap();
    let flavor = match store
        .flavors(Scope::All)
        .unwrap()
        .into_iter()
        .find(|f| f.name == "tiny")
    {
        Some(f) => f,
        None => store
            .create_flavor(NewFlavor {
                name: "tiny".into(),
                vcpus: 1,
                memory_mb: 64,
                disk_gb: 0,
                is_public: true,
            })
            .unwrap(),
    };
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "tiny".into(),
            kind: ImageKind::Raw,
            reference: "tiny".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: Some(tenant.id),
            name: "w".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: String::new(),
            ephemeral: false,
        })
        .unwrap();
    (tenant.id, workload.id)
}

pub(crate) fn launch(
    controller: &Controller,
    tenant: Uuid,
    workload: Uuid,
    count: u32,
) -> Vec<Uuid> {
    launch_with(controller, tenant, workload, count, |_| {})
}

/// [`launch`] with the launch changed by `adjust` first (a zone, a server group, ...).
pub(crate) fn launch_with(
    controller: &Controller,
    tenant: Uuid,
    workload: Uuid,
    count: u32,
    adjust: impl FnOnce(&mut Launch),
) -> Vec<Uuid> {
    let mut launch = Launch {
        tenant,
        workload,
        name: "vm".into(),
        count,
        key: None,
        groups: Vec::new(),
        metadata: store::Metadata::new(),
        user: None,
        server_group: None,
        reservation: store::Instance::new_reservation(),
        zone: None,
    };
    adjust(&mut launch);
    controller
        .engine
        .launch(Scope::Tenant(tenant), launch, &Caller::default())
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

/// The states of these instances (`None`: no record).
pub(crate) fn states(controller: &Controller, ids: &[Uuid]) -> Vec<Option<InstanceState>> {
    ids.iter()
        .map(|id| {
            controller
                .store
                .instance(Scope::All, *id)
                .ok()
                .map(|i| i.state)
        })
        .collect()
}

/// Waits until every instance is in `state` (`None`: gone).
pub(crate) async fn wait_states(
    controller: &Controller,
    ids: &[Uuid],
    state: Option<InstanceState>,
    what: &str,
) {
    testkit::wait_until(T, what, || async {
        states(controller, ids).iter().all(|s| *s == state)
    })
    .await;
}
