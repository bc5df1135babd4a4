//! Console log fetches through the controller's engine, with a real scheduler and a sim agent
//! in this process: each fetch is `Cluster::console` as the API calls it (the instance's record
//! from the store, then TCP + mutual TLS 1.3 + HTTP/1.1 to the agent's console endpoint on
//! loopback, the agent's role and UUID checks, the sim backend's log, the answer back). Prints
//! p50/p99 over `FETCHES` fetches of 100 lines, one at a time.
//!
//! `cargo bench -p systest --bench console` (figures in docs/benchmarks.md).
// A bench binary prints its figures and fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

#[allow(dead_code)]
#[path = "../tests/system/support.rs"]
mod support;

use std::time::{Duration, Instant};

use controller::cluster::Cluster;
use controller::daemon::Controller;
use store::{InstanceState, Quota, Scope};
use testkit::TestPki;

const FETCHES: usize = 1000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = support::start_scheduler(&pki).await;
    let agent = support::start_agent(&pki, &sched.addr, dir.path());
    let mut config = support::controller_config(&pki, &sched.addr, dir.path());
    config.engine.console_port = agent.console_port;
    let controller = Controller::start(config).await.unwrap();
    testkit::wait_until(support::T, "a compute node", || async {
        !controller.engine.nodes().is_empty()
    })
    .await;
    let (tenant, workload) = support::seed(&controller, Quota::default());
    let ids = support::launch(&controller, tenant, workload, 1);
    support::wait_states(&controller, &ids, Some(InstanceState::Active), "active").await;
    let id = ids[0];
    let engine = controller.engine.clone();
    let latencies = tokio::task::spawn_blocking(move || {
        let mut latencies = Vec::with_capacity(FETCHES);
        for _ in 0..FETCHES {
            let t = Instant::now();
            let log = engine.console(Scope::Tenant(tenant), id, 100).unwrap();
            latencies.push(t.elapsed());
            assert!(log.contains("CUMULO-GUEST-UP"), "{log}");
        }
        latencies
    })
    .await
    .unwrap();
    let mut sorted = latencies;
    sorted.sort();
    let total: Duration = sorted.iter().sum();
    println!(
        "console fetch through the engine, {FETCHES} one at a time: p50 {:?}, p99 {:?}, max {:?}, {:.0}/s",
        percentile(&sorted, 0.5),
        percentile(&sorted, 0.99),
        sorted[sorted.len() - 1],
        FETCHES as f64 / total.as_secs_f64()
    );
    agent.stop().await;
}
