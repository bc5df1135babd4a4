//! The controller's API under load, over loopback HTTP, with a real scheduler and a sim agent:
//!
//! 1. 1,000 servers created through `POST /compute/v2.1/servers` (4 clients in parallel): the
//!    time for the POSTs, and until every instance is ACTIVE (reported by the agent's STATS).
//! 2. `GET /compute/v2.1/servers/detail` with 10,000 instances in the store: p50/p99 of a page
//!    of 1,000 (the default and largest) and of 100.
//!
//! `cargo bench -p systest --bench api` (figures in docs/benchmarks.md).
// A bench binary prints its figures and fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use clap::Parser;
use controller::api::{self, ApiConfig, TokenSigner};
use controller::cluster::Cluster;
use controller::daemon::{Controller, DaemonConfig};
use scheduler::SchedulerConfig;
use scheduler::testing::InProcess;
use serde_json::{Value, json};
use ssntp::{Role as SsntpRole, Uuid};
use ssntp_net::client::Backoff;
use store::{
    ImageKind, InstanceChange, InstanceFilter, InstanceState, NewFlavor, NewImage, NewInstance,
    NewTenant, NewUser, NewWorkload, Page, Quota, Role, Scope,
};
use testkit::TestPki;
use tokio_util::sync::CancellationToken;

const CREATES: usize = 1000;
const CLIENTS: usize = 4;
const STORED: usize = 10_000;
const GETS: usize = 200;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn agent_client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn login(url: &str) -> String {
    let body = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": "bench", "domain": {"name": "Default"}, "password": "bench-pass"}}},
        "scope": {"project": {"name": "bench", "domain": {"name": "Default"}}}}});
    let response = agent_client()
        .post(&format!("{url}/v3/auth/tokens"))
        .send_json(&body)
        .unwrap();
    assert_eq!(response.status().as_u16(), 201);
    response.headers()["x-subject-token"]
        .to_str()
        .unwrap()
        .to_string()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let (controller, url, agent_stop, sched_stop) = runtime.block_on(async {
        let sched_uuid = Uuid::new_v4();
        let InProcess {
            addr: sched_addr,
            stop: sched_stop,
            ..
        } = InProcess::start(
            SchedulerConfig::for_tests(
                pki.identity(SsntpRole::SCHEDULER, Some(sched_uuid)),
                sched_uuid,
            ),
            None,
        )
        .await;
        let (ca, cert, key) = pki
            .leaf(SsntpRole::AGENT | SsntpRole::NETAGENT, None)
            .write(dir.path(), "agent");
        let state = dir.path().join("agent");
        let args = [
            "cumulo-agent",
            "--ca-cert",
            ca.to_str().unwrap(),
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--scheduler",
            &sched_addr,
            "--network",
            "dual",
            "--backend",
            "sim",
            "--state-dir",
            state.to_str().unwrap(),
            "--no-disk-limit",
            "--no-mem-limit",
            "--vcpus",
            "100000",
            "--console-listen",
            "off",
        ];
        let agent_config = agent::daemon::cli::Args::try_parse_from(args)
            .unwrap()
            .into_config()
            .unwrap();
        let agent_stop = CancellationToken::new();
        tokio::spawn(agent::daemon::run(agent_config, agent_stop.clone()));
        let mut config = DaemonConfig::new(
            pki.identity(SsntpRole::CONTROLLER, None),
            vec![sched_addr],
            dir.path().join("controller"),
        );
        config.backoff = Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(300),
        };
        let mut controller = Controller::start(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        controller.serve_api(
            listener,
            None,
            TokenSigner::random(Duration::from_secs(3600)).unwrap(),
            ApiConfig::new(url.clone()),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while controller.engine.nodes().is_empty() {
            assert!(Instant::now() < deadline, "no node joined");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (controller, url, agent_stop, sched_stop)
    });
    let store = controller.store.clone();
    let tenant = store
        .create_tenant(NewTenant {
            name: "bench".into(),
            quota: Quota::default(),
            subnet_prefix: 16,
        })
        .unwrap();
    let user = store
        .create_user(NewUser {
            name: "bench".into(),
            password_hash: api::password::hash("bench-pass", 10_000).unwrap(),
        })
        .unwrap();
    store.grant_role(user.id, tenant.id, Role::Member).unwrap();
    let flavor = store
        .create_flavor(NewFlavor {
            name: "nano".into(),
            vcpus: 1,
            memory_mb: 16,
            disk_gb: 0,
            is_public: true,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "tiny".into(),
            kind: ImageKind::Raw,
            reference: "tiny".into(),
        })
        .unwrap();
    let token = login(&url);

    // 1. 1,000 creates through the API, until all are active.
    let start = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (url, token) = (url.clone(), token.clone());
            let (flavor, image) = (flavor.id.to_string(), image.id.to_string());
            std::thread::spawn(move || {
                let http = agent_client();
                let mut latencies = Vec::new();
                for i in 0..CREATES / CLIENTS {
                    let body = json!({"server": {"name": format!("vm-{c}-{i}"),
                        "flavorRef": flavor, "imageRef": image}});
                    let t = Instant::now();
                    let response = http
                        .post(&format!("{url}/compute/v2.1/servers"))
                        .header("X-Auth-Token", &token)
                        .send_json(&body)
                        .unwrap();
                    assert_eq!(response.status().as_u16(), 202);
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut posts: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let posted = start.elapsed();
    let active = || {
        let mut n = 0;
        let mut page = Page::first(Page::MAX_LIMIT);
        loop {
            let p = store
                .instances(Scope::All, InstanceFilter::default(), page)
                .unwrap();
            n += p
                .items
                .iter()
                .filter(|i| i.state == InstanceState::Active)
                .count();
            match p.next {
                Some(m) => page.marker = Some(m),
                None => return n,
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while active() < CREATES {
        assert!(Instant::now() < deadline, "not all active");
        std::thread::sleep(Duration::from_millis(5));
    }
    let all_active = start.elapsed();
    posts.sort();
    println!(
        "create {CREATES} servers ({CLIENTS} clients): POSTs done in {:.2} s ({:.0}/s; p50 {:.1} ms, p99 {:.1} ms); all ACTIVE after {:.2} s",
        posted.as_secs_f64(),
        CREATES as f64 / posted.as_secs_f64(),
        percentile(&posts, 0.5).as_secs_f64() * 1e3,
        percentile(&posts, 0.99).as_secs_f64() * 1e3,
        all_active.as_secs_f64()
    );

    // 2. 10,000 instances in the store (the rest written directly, active), then GETs.
    let workload = store
        .create_workload(NewWorkload {
            owner: Some(tenant.id),
            name: "filler".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: String::new(),
            ephemeral: false,
        })
        .unwrap();
    for i in CREATES..STORED {
        let made = store
            .create_instance(NewInstance {
                tenant: tenant.id,
                workload: workload.id,
                name: format!("filler-{i}"),
                key: None,
                metadata: Default::default(),
                user: None,
                reservation: None,
                zone: None,
            })
            .unwrap();
        store
            .update_instance(
                Scope::All,
                made.id,
                made.version,
                InstanceChange {
                    state: Some(InstanceState::Active),
                    ..InstanceChange::default()
                },
            )
            .unwrap();
    }
    let http = agent_client();
    for limit in [None, Some(100)] {
        let path = match limit {
            None => format!("{url}/compute/v2.1/servers/detail"),
            Some(l) => format!("{url}/compute/v2.1/servers/detail?limit={l}"),
        };
        let mut times = Vec::with_capacity(GETS);
        let mut count = 0;
        for _ in 0..GETS {
            let t = Instant::now();
            let mut response = http
                .get(&path)
                .header("X-Auth-Token", &token)
                .call()
                .unwrap();
            let body: Value = response.body_mut().read_json().unwrap();
            times.push(t.elapsed());
            count = body["servers"].as_array().unwrap().len();
        }
        times.sort();
        println!(
            "GET servers/detail ({} of {STORED} per page): p50 {:.1} ms, p99 {:.1} ms",
            count,
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3
        );
    }
    runtime.block_on(async {
        controller.stop().await;
        agent_stop.cancel();
        sched_stop.cancel();
    });
}
