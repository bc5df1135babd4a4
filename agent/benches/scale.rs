//! Scale bench of the agent core with the sim backend, in process (no SSNTP):
//!
//! 1. START → active latency, one START at a time (sim, zero boot delay), until the core holds
//!    `AGENT_BENCH_INSTANCES` (default 1,000) instances: p50/p90/p99/max.
//! 2. The core holding them with stats every 5 s for `AGENT_BENCH_SECS` (default 60) seconds of
//!    real time: process CPU time as a share of one core, and the STATS sent.
//! 3. A burst: the same number of STARTs submitted at once on a fresh core, time until all are
//!    active.
//!
//! Every report goes through a reporter that turns it into SSNTP payloads and encodes them, as
//! the SSNTP wiring will. Instance records go to a temporary state directory under
//! `AGENT_BENCH_STATE_DIR` (default: the system's temporary directory), fsync and all.
//!
//! Run: `cargo bench -p agent --bench scale`.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use agent::model::{
    Firmware, InstanceEvent, InstanceReport, InstanceSpec, InstanceState, NodeReport, Resources,
    VmKind,
};
use agent::sim::{SimBackend, SimConfig};
use agent::{Config, Core, HostFigures, HostSource, Reporter, wire};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use uuid::Uuid;

/// Encodes every report as the SSNTP wiring would, counts STATS, and tells the bench when an
/// instance becomes active.
struct EncodingReporter {
    node: Uuid,
    active: mpsc::UnboundedSender<Uuid>,
    stats: Arc<AtomicU64>,
    stats_bytes: Arc<AtomicU64>,
}

impl Reporter for EncodingReporter {
    async fn status(&mut self, node: &NodeReport) {
        std::hint::black_box(wire::status_payload(node).encode());
    }

    async fn stats(&mut self, node: &NodeReport, instances: &[InstanceReport]) {
        let bytes = wire::stats_payload(node, instances).encode();
        self.stats.fetch_add(1, Ordering::Relaxed);
        self.stats_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }

    async fn event(&mut self, event: &InstanceEvent) {
        if let InstanceEvent::State {
            instance,
            state: InstanceState::Active,
        } = *event
        {
            let _ = self.active.send(instance);
        }
        if let Some(p) = wire::event_payload(event, self.node) {
            std::hint::black_box(p.encode());
        }
    }
}

fn spec(n: u128) -> InstanceSpec {
    InstanceSpec {
        instance: Uuid::from_u128(0xBE7C_0000_0000 + n),
        tenant: Uuid::from_u128(1),
        workload: Uuid::from_u128(2),
        kind: VmKind::Sim,
        role: agent::model::InstanceRole::Workload,
        firmware: Firmware::Efi,
        image: "sim-image".into(),
        resources: Resources {
            vcpus: 1,
            mem_mb: 512,
            disk_mb: 10_000,
        },
        nic: None,
        disks: Vec::new(),
        volumes: Vec::new(),
        user_data: Some("#cloud-config\n".into()),
        meta_data: Default::default(),
        restart: false,
        kernel: None,
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

struct Bench {
    core: Core,
    active: mpsc::UnboundedReceiver<Uuid>,
    stats: Arc<AtomicU64>,
    stats_bytes: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

async fn new_core(instances: u64) -> Bench {
    let dir = match std::env::var_os("AGENT_BENCH_STATE_DIR") {
        Some(base) => tempfile::tempdir_in(base).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let node = Uuid::from_u128(0xA6E7);
    let host = HostSource::Fixed(HostFigures {
        mem_total_mb: 4_000_000,
        mem_available_mb: 4_000_000,
        disk_total_mb: 100_000_000,
        disk_available_mb: 100_000_000,
        vcpus: 64,
        load: 0,
    });
    let mut config = Config::new(node, "bench-node", host, dir.path().to_owned());
    config.vcpus = Some(u32::try_from(instances).unwrap() + 64);
    let backend = Arc::new(SimBackend::new(SimConfig::default()).unwrap());
    let (tx, active) = mpsc::unbounded_channel();
    let stats = Arc::new(AtomicU64::new(0));
    let stats_bytes = Arc::new(AtomicU64::new(0));
    let reporter = EncodingReporter {
        node,
        active: tx,
        stats: Arc::clone(&stats),
        stats_bytes: Arc::clone(&stats_bytes),
    };
    let core = Core::spawn(config, backend, reporter).await.unwrap();
    Bench {
        core,
        active,
        stats,
        stats_bytes,
        _dir: dir,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

async fn run() {
    let n = env_or("AGENT_BENCH_INSTANCES", 1_000);
    let secs = env_or("AGENT_BENCH_SECS", 60);
    println!("agent core + sim backend: {n} instances, stats every 5 s, hold {secs} s");

    // 1. START → active, one at a time.
    let mut b = new_core(n).await;
    let mut latencies = Vec::with_capacity(n as usize);
    for i in 0..n {
        let s = spec(u128::from(i));
        let id = s.instance;
        let t0 = Instant::now();
        b.core.start(s).unwrap();
        while b.active.recv().await.unwrap() != id {}
        latencies.push(t0.elapsed());
    }
    latencies.sort();
    println!(
        "START -> active (sequential, {n}): p50 {}  p90 {}  p99 {}  max {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.9)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap()),
    );
    let snap = b.core.snapshot().await.unwrap();
    assert_eq!(snap.instances.len() as u64, n);

    // 2. Hold them, stats every 5 s.
    let stats0 = b.stats.load(Ordering::Relaxed);
    let bytes0 = b.stats_bytes.load(Ordering::Relaxed);
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (cpu, wall) = (cpu_time() - cpu0, wall0.elapsed());
    let stats = b.stats.load(Ordering::Relaxed) - stats0;
    let bytes = b.stats_bytes.load(Ordering::Relaxed) - bytes0;
    println!(
        "holding {n} instances for {:.1} s: CPU {:.3} s = {:.3} % of one core; {stats} STATS of {} bytes each; RSS {:.1} MiB",
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
        bytes / stats.max(1),
        rss_mib(),
    );
    b.core.shutdown().await.unwrap();
    drop(b);

    // 3. A burst of STARTs at once.
    let mut b = new_core(n).await;
    let t0 = Instant::now();
    let mut pending: HashMap<Uuid, ()> = HashMap::new();
    for i in 0..n {
        let s = spec(u128::from(i));
        pending.insert(s.instance, ());
        b.core.start(s).unwrap();
    }
    while !pending.is_empty() {
        let id = b.active.recv().await.unwrap();
        pending.remove(&id);
    }
    let burst = t0.elapsed();
    println!(
        "burst: {n} STARTs submitted at once, all active in {} ({:.0} starts/s)",
        ms(burst),
        n as f64 / burst.as_secs_f64()
    );
    b.core.shutdown().await.unwrap();
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}
