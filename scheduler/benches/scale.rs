//! Scheduler scale runs, with the real `cumulo-scheduler` binary in its own process:
//!
//! - `c1m [starts] [agents]`: one controller sends STARTs (default 1,000,000) over TLS; the
//!   scheduler places and forwards them to simulated agents (default 5,000, in a child process)
//!   that READY with room for everything, count what arrives and time it (START sent → agent).
//! - `fanin [agents] [seconds]`: that many agents send READY then STATS every 5 s (with
//!   jitter); the scheduler's CPU (share of one core) and RSS are sampled.
//!
//! Run: `cargo bench -p scheduler --bench scale -- c1m` (or `-- fanin`).
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use ssntp::payload::*;
use ssntp::{Payload, Role, Uuid};
use ssntp_net::{Client, ClientConfig, ClientEvent, TlsIdentity};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use testkit::TestPki;
use testkit::procfs::{cpu_ticks, free_port, rss_mib};

const SCHED: Uuid = Uuid::from_bytes([0x5c; 16]);

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

struct Files {
    dir: PathBuf,
}

impl Files {
    fn new() -> Files {
        let dir = std::env::temp_dir().join(format!("cumulo-scale-{}", std::process::id()));
        let pki = TestPki::new();
        pki.leaf(Role::SCHEDULER, Some(SCHED))
            .write(&dir, "scheduler");
        pki.leaf(Role::CONTROLLER, None).write(&dir, "controller");
        pki.leaf(Role::AGENT, None).write(&dir, "agent");
        Files { dir }
    }

    fn identity(dir: &Path, name: &str) -> TlsIdentity {
        TlsIdentity::load(
            &dir.join("ca.pem"),
            &dir.join(format!("{name}.pem")),
            &dir.join(format!("{name}.key")),
        )
        .unwrap()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn scheduler(files: &Files, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cumulo-scheduler"))
        .args(["--ca-cert", &files.dir.join("ca.pem").to_string_lossy()])
        .args(["--cert", &files.dir.join("scheduler.pem").to_string_lossy()])
        .args(["--key", &files.dir.join("scheduler.key").to_string_lossy()])
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--stats-interval",
            "5s",
        ])
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap()
}

fn spawn_self(args: &[String]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn line(child: &mut Child) -> String {
    let mut l = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut l)
        .unwrap();
    l.trim().to_string()
}

fn ready(uuid: Uuid, i: usize) -> NodeStatus {
    NodeStatus {
        node_uuid: uuid,
        hostname: format!("sim-{i}"),
        mem_total_mb: u32::MAX,
        mem_available_mb: u32::MAX,
        disk_total_mb: u32::MAX,
        disk_available_mb: u32::MAX,
        vcpus_total: u32::MAX,
        vcpus_available: u32::MAX,
        load: 0,
        networks: vec![],
        zone: None,
    }
}

/// Child process: `agents` simulated agents; prints "ready" when all are connected, then one
/// line with counts and latencies once `expect` STARTs arrived (or every 5 s for fan-in).
async fn agents(dir: PathBuf, port: u16, n: usize, expect: u64, stats: bool) {
    let tls = Files::identity(&dir, "agent");
    let received = Arc::new(AtomicU64::new(0));
    let connected = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::<u64>::with_capacity(
        expect as usize,
    )));
    for i in 0..n {
        let uuid = Uuid::from_u128(0xa9e0_0000 + i as u128);
        let status = ready(uuid, i);
        let mut config = ClientConfig::new(
            tls.clone(),
            uuid,
            Role::AGENT,
            vec![format!("localhost:{port}")],
        );
        config.conn.read_buffer = 4096;
        config.announce = Some(Arc::new(move || vec![Payload::Ready(status.clone())]));
        let (handle, mut events) = Client::start(config).unwrap();
        let (received, connected, latencies) =
            (received.clone(), connected.clone(), latencies.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::now() + Duration::from_millis(fastrand::u64(0..5000)),
                Duration::from_secs(5),
            );
            loop {
                tokio::select! {
                    e = events.recv() => match e {
                        Some(ClientEvent::Connected { .. }) => { connected.fetch_add(1, Ordering::Relaxed); }
                        Some(ClientEvent::Frames { messages: ms, .. }) => {
                            let now = unix_ns();
                            let mut lat = Vec::new();
                            for m in ms {
                                if let Payload::Start(s) = m.payload
                                    && let Ok(sent) = s.image.parse::<u64>()
                                {
                                    lat.push(now.saturating_sub(sent));
                                }
                            }
                            received.fetch_add(lat.len() as u64, Ordering::Relaxed);
                            latencies.lock().unwrap().extend(lat);
                        }
                        Some(_) => {}
                        None => return,
                    },
                    _ = tick.tick(), if stats => {
                        let node = ready(handle.uuid(), i);
                        let s = Payload::Stats(Box::new(Stats { node, status: NodeState::Ready, instances: vec![] }));
                        let _ = handle.send_payload(&s);
                    }
                }
            }
        });
        if i % 50 == 49 {
            tokio::task::yield_now().await;
        }
    }
    while connected.load(Ordering::Relaxed) < n as u64 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("ready");
    if expect == 0 {
        std::future::pending::<()>().await;
    }
    while received.load(Ordering::Relaxed) < expect {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut l = latencies.lock().unwrap();
    l.sort_unstable();
    let q = |f: f64| l[((l.len() as f64 * f) as usize).min(l.len() - 1)] as f64 / 1e6;
    println!(
        "received {} p50 {:.1} ms p99 {:.1} ms max {:.1} ms",
        l.len(),
        q(0.5),
        q(0.99),
        *l.last().unwrap() as f64 / 1e6
    );
}

fn start(i: u64) -> Payload {
    Payload::Start(Box::new(Start {
        instance_uuid: Uuid::from_u128(u128::from(i) + 1),
        tenant_uuid: Uuid::from_u128(7),
        workload_uuid: Uuid::from_u128(8),
        vm_type: VmType::Sim,
        fw_type: FwType::Legacy,
        image: unix_ns().to_string(),
        requirements: Requirements {
            vcpus: 1,
            mem_mb: 1,
            disk_mb: 1,
            network_node: false,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        },
        networking: None,
        storage: None,
        user_data: None,
        meta_data: None,
        restart: false,
        kernel: None,
    }))
}

async fn c1m(starts: u64, n: usize) {
    let files = Files::new();
    let port = free_port();
    let mut sched = scheduler(&files, port);
    let dir = files.dir.to_string_lossy().to_string();
    let mut agents = spawn_self(&[
        "agents".into(),
        dir.clone(),
        port.to_string(),
        n.to_string(),
        starts.to_string(),
    ]);
    let t = Instant::now();
    assert_eq!(line(&mut agents), "ready");
    println!("c1m: {n} agents connected and READY in {:?}", t.elapsed());
    let tls = Files::identity(&files.dir, "controller");
    let mut config = ClientConfig::new(
        tls,
        Uuid::from_u128(0xc0),
        Role::CONTROLLER,
        vec![format!("localhost:{port}")],
    );
    config.conn.queue_frames = 65_536;
    let (controller, mut events) = Client::start(config).unwrap();
    loop {
        if let Some(ClientEvent::Connected { .. }) = events.recv().await {
            break;
        }
    }
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let cpu0 = cpu_ticks(sched.id());
    let t = Instant::now();
    for i in 0..starts {
        controller
            .send_wait(&ssntp::frame::Frame::new(controller.uuid(), &start(i)))
            .await
            .unwrap();
    }
    let sent = t.elapsed();
    let result = line(&mut agents);
    let all = t.elapsed();
    let cpu = (cpu_ticks(sched.id()) - cpu0) as f64 / 100.0;
    println!(
        "c1m: {starts} STARTs sent in {sent:?}; all placed and delivered to {n} agents in {all:?}: {:.0} placements/s",
        starts as f64 / all.as_secs_f64()
    );
    println!("c1m: START → agent latency: {result}");
    println!(
        "c1m: scheduler CPU {cpu:.1} s over {:.1} s, RSS {:.0} MiB",
        all.as_secs_f64(),
        rss_mib(sched.id())
    );
    let _ = agents.kill();
    let _ = sched.kill();
    let _ = agents.wait();
    let _ = sched.wait();
}

async fn fanin(n: usize, seconds: u64) {
    let files = Files::new();
    let port = free_port();
    let mut sched = scheduler(&files, port);
    let dir = files.dir.to_string_lossy().to_string();
    let mut agents = spawn_self(&[
        "agents".into(),
        dir,
        port.to_string(),
        n.to_string(),
        "0".into(),
        "stats".into(),
    ]);
    assert_eq!(line(&mut agents), "ready");
    // Let the connection storm settle, then measure a steady window.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu0 = cpu_ticks(sched.id());
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let cpu = (cpu_ticks(sched.id()) - cpu0) as f64 / 100.0;
    let share = 100.0 * cpu / t.elapsed().as_secs_f64();
    println!(
        "fanin: {n} agents, READY + STATS every 5 s: scheduler CPU {share:.1} % of one core over {:?}, RSS {:.0} MiB",
        t.elapsed(),
        rss_mib(sched.id())
    );
    let _ = agents.kill();
    let _ = sched.kill();
    let _ = agents.wait();
    let _ = sched.wait();
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let num = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match args.first().map(String::as_str) {
        Some("agents") => rt.block_on(agents(
            PathBuf::from(&args[1]),
            num(2, 0) as u16,
            num(3, 5000) as usize,
            num(4, 0),
            args.get(5).is_some_and(|s| s == "stats"),
        )),
        Some("fanin") => rt.block_on(fanin(num(1, 10_000) as usize, num(2, 30))),
        Some("c1m") | None => rt.block_on(c1m(num(1, 1_000_000), num(2, 5_000) as usize)),
        Some(other) => panic!("unknown case {other}"),
    }
}
