//! The load bench's simulated agents: a child process of SSNTP clients that READY with room for
//! everything, hold what they are sent, and report it in STATS.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ssntp::payload::{InstanceStat, InstanceState, NodeState, NodeStatus, Stats};
use ssntp::{Payload, Role, Uuid};
use ssntp_net::{Client, ClientConfig, ClientEvent, TlsIdentity};

/// Agents started at once (each batch connects before the next starts).
const BATCH: usize = 100;

/// The least time between two reports of a change: the agent's default `--change-report-gap`.
const CHANGE_REPORT_GAP: Duration = Duration::from_millis(50);

pub(crate) fn identity(dir: &Path, name: &str) -> TlsIdentity {
    TlsIdentity::load(
        &dir.join("ca.pem"),
        &dir.join(format!("{name}.pem")),
        &dir.join(format!("{name}.key")),
    )
    .unwrap()
}

fn node_status(uuid: Uuid, i: usize) -> NodeStatus {
    NodeStatus {
        node_uuid: uuid,
        hostname: format!("load-{i}"),
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

/// Child process: `n` simulated agents. Prints `ready` once all are connected, then
/// `instances <total> connected <n> drops <sessions lost>` every second.
pub(crate) async fn agents(dir: PathBuf, port: u16, n: usize, interval: u64) {
    let tls = identity(&dir, "agent");
    let connected = Arc::new(AtomicU64::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let drops = Arc::new(AtomicU64::new(0));
    for i in 0..n {
        let uuid = Uuid::from_u128(0xa9e0_0000_0000 + i as u128);
        let status = node_status(uuid, i);
        let mut config = ClientConfig::new(
            tls.clone(),
            uuid,
            Role::AGENT,
            vec![format!("localhost:{port}")],
        );
        config.conn.read_buffer = 4096;
        config.announce = Some(Arc::new(move || vec![Payload::Ready(status.clone())]));
        let (handle, mut events) = Client::start(config).unwrap();
        let (up, total, drops) = (connected.clone(), total.clone(), drops.clone());
        tokio::spawn(async move {
            let connected = up;
            let mut running: Vec<Uuid> = Vec::new();
            // STATS every `interval` from the first connection (spread over the agents), and
            // after a change (below).
            loop {
                match events.recv().await {
                    Some(ClientEvent::Connected { .. }) => break,
                    Some(_) => {}
                    None => return,
                }
            }
            connected.fetch_add(1, Ordering::Relaxed);
            // The full STATS spread over the interval; a change reported as a real agent
            // reports it (`cumulo-agent --change-report-gap`): at once, or the gap after the
            // last report, whatever the agent's place in that spread.
            let now = tokio::time::Instant::now();
            let spread = (i as u64 * 7919) % (interval * 1000);
            let first = now + Duration::from_millis(spread);
            let mut tick = tokio::time::interval_at(first, Duration::from_secs(interval));
            let mut last: Option<tokio::time::Instant> = None;
            // When the change seen is reported.
            let mut due: Option<tokio::time::Instant> = None;
            let report_due = |last: Option<tokio::time::Instant>| {
                let now = tokio::time::Instant::now();
                last.map_or(now, |l| (l + CHANGE_REPORT_GAP).max(now))
            };
            loop {
                let send = tokio::select! {
                    e = events.recv() => match e {
                        Some(ClientEvent::Connected { .. }) => {
                            connected.fetch_add(1, Ordering::Relaxed);
                            false
                        }
                        Some(ClientEvent::Disconnected { .. }) => {
                            connected.fetch_sub(1, Ordering::Relaxed);
                            drops.fetch_add(1, Ordering::Relaxed);
                            false
                        }
                        Some(ClientEvent::Frames { messages: frames, .. }) => {
                            for f in frames {
                                match f.payload {
                                    Payload::Start(s) if !running.contains(&s.instance_uuid) => {
                                        running.push(s.instance_uuid);
                                        total.fetch_add(1, Ordering::Relaxed);
                                        due.get_or_insert_with(|| report_due(last));
                                    }
                                    Payload::Delete(d) => {
                                        if let Some(at) = running.iter().position(|u| *u == d.instance_uuid) {
                                            running.swap_remove(at);
                                            total.fetch_sub(1, Ordering::Relaxed);
                                            due.get_or_insert_with(|| report_due(last));
                                        }
                                    }
                                    _ => {}
                                }
                            }
                            false
                        }
                        Some(_) => false,
                        None => return,
                    },
                    _ = tick.tick() => true,
                    // (Without a report due the branch is off: the sleep is never polled.)
                    _ = tokio::time::sleep_until(due.unwrap_or(first)), if due.is_some() => true,
                };
                if send {
                    due = None;
                    last = Some(tokio::time::Instant::now());
                    let stats = Payload::Stats(Box::new(Stats {
                        node: node_status(handle.uuid(), i),
                        status: NodeState::Ready,
                        instances: running
                            .iter()
                            .map(|u| InstanceStat {
                                instance_uuid: *u,
                                state: InstanceState::Active,
                                ssh_ip: None,
                                ssh_port: None,
                                memory_usage_mb: 1,
                                disk_usage_mb: 0,
                                cpu_usage: Some(1),
                                volumes: Vec::new(),
                            })
                            .collect(),
                    }));
                    let _ = handle.send_payload(&stats);
                }
            }
        });
        // Paced: a batch at a time, each connected before the next starts (an unpaced storm of
        // 10,000 TLS handshakes in the debug build starves the STATS of the connected agents,
        // which are then dropped as silent and reconnect: see docs/reliability.md).
        if i % BATCH == BATCH - 1 || i == n - 1 {
            while connected.load(Ordering::Relaxed) < i as u64 + 1 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    println!("ready");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        println!(
            "instances {} connected {} drops {}",
            total.load(Ordering::Relaxed),
            connected.load(Ordering::Relaxed),
            drops.load(Ordering::Relaxed)
        );
    }
}
