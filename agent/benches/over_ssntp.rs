//! cumulo-agent over SSNTP on loopback TLS, end to end: the `cumulo-agent` binary (its own
//! process, sim backend, zero boot delay), the real scheduler (in this process) and a fake
//! controller (an SSNTP client in this process).
//!
//! 1. START → active, one START at a time until the agent holds `AGENT_BENCH_INSTANCES`
//!    (default 1,000): from the controller sending START (through the scheduler's placement)
//!    to the controller receiving the first STATS (forwarded by the scheduler) that lists the
//!    instance active. Measured twice: with the agent's default `--change-report-gap 50ms`
//!    (STATS made because instances changed are at most one per 50 ms) and with `0s`.
//! 2. The agent holding them, STATS every 5 s, for `AGENT_BENCH_SECS` (default 60) seconds:
//!    the agent process's CPU time (`/proc/<pid>/stat`) as a share of one core, its RSS, and
//!    the STATS the controller received.
//!
//! Run: `cargo bench -p agent --bench over_ssntp`.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use scheduler::SchedulerConfig;
use scheduler::testing::InProcess;
use ssntp::payload::{FwType, InstanceState, Requirements, Start, Stats, VmType};
use ssntp::{Payload, Role, Uuid};
use ssntp_net::{Client, ClientConfig, ClientEvent, ClientHandle};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::TestPki;
use tokio::sync::mpsc;

const SCHED: Uuid = Uuid::from_u128(0x5c4ed);
const CONTROLLER: Uuid = Uuid::from_u128(0xc0417);
const NODE: Uuid = Uuid::from_u128(0xa6e7);
const WAIT: Duration = Duration::from_secs(60);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn start(n: u64) -> Payload {
    Payload::Start(Box::new(Start {
        instance_uuid: Uuid::from_u128(0xBE7C_0000_0000 + u128::from(n)),
        tenant_uuid: Uuid::from_u128(1),
        workload_uuid: Uuid::from_u128(2),
        vm_type: VmType::Sim,
        fw_type: FwType::Efi,
        image: "sim-image".into(),
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
        user_data: Some("#cloud-config\n".into()),
        meta_data: None,
        restart: false,
        kernel: None,
    }))
}

fn instance_of(start: &Payload) -> Uuid {
    match start {
        Payload::Start(s) => s.instance_uuid,
        _ => unreachable!(),
    }
}

/// The agent process's CPU time (user + system) and RSS, from `/proc`.
fn process_usage(pid: u32) -> (Duration, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at field 3.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second = rustix::param::clock_ticks_per_second();
    let cpu = Duration::from_secs_f64(ticks as f64 / per_second as f64);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    (cpu, kb / 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The fake controller.
struct Controller {
    handle: ClientHandle,
    events: mpsc::Receiver<ClientEvent>,
    /// STATS from the node received so far, and their total size on the wire.
    stats: u64,
    stats_bytes: u64,
}

impl Controller {
    /// The next STATS from the node (other frames are skipped).
    async fn next_stats(&mut self) -> Stats {
        loop {
            let event = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .expect("a frame in time")
                .expect("the controller's client runs");
            let ClientEvent::Frames { messages, .. } = event else {
                continue;
            };
            // Only the last STATS of a batch matters: it is the newest.
            let mut last = None;
            for m in messages {
                if let Payload::Stats(s) = m.payload
                    && s.node.node_uuid == NODE
                {
                    self.stats += 1;
                    self.stats_bytes += m.frame.payload.len() as u64;
                    last = Some(s);
                }
            }
            if let Some(s) = last {
                return *s;
            }
        }
    }

    async fn until_active(&mut self, instance: Uuid) {
        loop {
            let s = self.next_stats().await;
            let active = s
                .instances
                .iter()
                .any(|i| i.instance_uuid == instance && i.state == InstanceState::Active);
            if active {
                return;
            }
        }
    }
}

fn agent(pki: &TestPki, dir: &Path, scheduler: &str, extra: &[&str]) -> Child {
    let (ca, cert, key) = pki.leaf(Role::AGENT, Some(NODE)).write(dir, "agent");
    let state = dir.join("state");
    let log = std::fs::File::create(dir.join("agent.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_cumulo-agent"))
        .args([
            "--ca-cert",
            ca.to_str().unwrap(),
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--scheduler",
            scheduler,
            "--network",
            "cn",
            "--backend",
            "sim",
            "--state-dir",
            state.to_str().unwrap(),
            "--no-disk-limit",
            "--no-mem-limit",
            "--vcpus",
            "100000",
            // Consoles are not measured here; the default port may be another agent's.
            "--console-listen",
            "off",
        ])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// One agent process against a fresh scheduler: STARTs one at a time; with `hold`, then holds
/// them that long.
async fn run(pki: &TestPki, n: u64, gap: &str, hold: Option<Duration>) {
    let config = SchedulerConfig::for_tests(pki.identity(Role::SCHEDULER, Some(SCHED)), SCHED);
    let InProcess { addr, stop, .. } = InProcess::start(config, None).await;
    let (handle, events) = Client::start(ClientConfig::new(
        pki.identity(Role::CONTROLLER, Some(CONTROLLER)),
        CONTROLLER,
        Role::CONTROLLER,
        vec![addr.clone()],
    ))
    .unwrap();
    let mut c = Controller {
        handle,
        events,
        stats: 0,
        stats_bytes: 0,
    };
    let dir = tempfile::tempdir().unwrap();
    let mut child = agent(pki, dir.path(), &addr, &["--change-report-gap", gap]);
    // Its first STATS follows its READY: the scheduler can place on it.
    c.next_stats().await;

    let mut latencies = Vec::with_capacity(n as usize);
    for i in 0..n {
        let s = start(i);
        let id = instance_of(&s);
        let t0 = Instant::now();
        c.handle.send_payload(&s).unwrap();
        c.until_active(id).await;
        latencies.push(t0.elapsed());
    }
    latencies.sort();
    println!(
        "--change-report-gap {gap}: START -> active seen in STATS (sequential, {n}): p50 {}  p90 {}  p99 {}  max {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.9)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap()),
    );

    if let Some(hold) = hold {
        let pid = child.id();
        let (stats0, bytes0) = (c.stats, c.stats_bytes);
        let (cpu0, wall0) = (process_usage(pid).0, Instant::now());
        let deadline = tokio::time::Instant::now() + hold;
        while tokio::time::timeout_at(deadline, c.next_stats())
            .await
            .is_ok()
        {}
        let (cpu1, rss) = process_usage(pid);
        let (cpu, wall) = (cpu1 - cpu0, wall0.elapsed());
        let stats = c.stats - stats0;
        println!(
            "agent process holding {n} instances for {:.1} s: CPU {:.2} s = {:.3} % of one core; {stats} STATS received, {} bytes each; RSS {:.1} MiB",
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
            (c.stats_bytes - bytes0) / stats.max(1),
            rss,
        );
    }

    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the agent exits cleanly on SIGTERM");
    c.handle.close();
    stop.cancel();
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let n = env_or("AGENT_BENCH_INSTANCES", 1_000);
    let secs = env_or("AGENT_BENCH_SECS", 60);
    println!(
        "cumulo-agent (sim, zero boot delay) <- real scheduler <- fake controller, loopback TLS: {n} instances, stats every 5 s, hold {secs} s"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let pki = TestPki::new();
    runtime.block_on(async {
        run(&pki, n, "50ms", Some(Duration::from_secs(secs))).await;
        run(&pki, n, "0s", None).await;
    });
}
