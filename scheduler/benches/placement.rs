//! Placement decisions at 10,000 nodes (run: `cargo bench -p scheduler --bench placement`):
//! each decision timed alone, p50/p99 reported, and decisions per second over the whole run.
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use scheduler::placement::Placement;
use ssntp::Uuid;
use ssntp::payload::{NodeState, NodeStatus, Requirements};
use std::hint::black_box;
use std::time::Instant;

const NODES: u128 = 10_000;
const DECISIONS: usize = 1_000_000;

fn status(uuid: Uuid, mem: u32) -> NodeStatus {
    NodeStatus {
        node_uuid: uuid,
        hostname: format!("node-{uuid}"),
        mem_total_mb: mem,
        mem_available_mb: mem,
        disk_total_mb: u32::MAX,
        disk_available_mb: u32::MAX,
        vcpus_total: u32::MAX,
        vcpus_available: u32::MAX,
        load: 0,
        networks: vec![],
        zone: None,
    }
}

fn cluster(full_every: u128) -> Placement {
    let mut p = Placement::new();
    for i in 0..NODES {
        let uuid = Uuid::from_u128(i + 1);
        p.add(uuid, true, i % 10 == 0);
        // Nodes that are "full" have 64 MiB left: the requests below need 128.
        let mem = if full_every > 1 && i % full_every != 0 {
            64
        } else {
            u32::MAX
        };
        p.update(uuid, NodeState::Ready, Some(&status(uuid, mem)));
    }
    p
}

fn run(name: &str, p: &mut Placement, req: &Requirements) {
    let mut samples = Vec::with_capacity(DECISIONS);
    let start = Instant::now();
    for _ in 0..DECISIONS {
        let t = Instant::now();
        black_box(p.place(black_box(req)).unwrap());
        samples.push(t.elapsed());
    }
    let total = start.elapsed();
    samples.sort_unstable();
    let q = |f: f64| samples[((samples.len() as f64) * f) as usize];
    println!(
        "{name}: p50 {:?}  p99 {:?}  max {:?}  {:.0} decisions/s",
        q(0.50),
        q(0.99),
        samples[samples.len() - 1],
        DECISIONS as f64 / total.as_secs_f64()
    );
}

fn main() {
    let req = Requirements {
        vcpus: 1,
        mem_mb: 128,
        disk_mb: 1,
        network_node: false,
        node_id: None,
        hostname: None,
        avoid_nodes: Vec::new(),
        group: None,
        zone: None,
    };
    run(
        "10,000 nodes, all with room (rotation)",
        &mut cluster(1),
        &req,
    );
    run("10,000 nodes, 1 in 10 with room", &mut cluster(10), &req);
    run(
        "10,000 nodes, 1 in 1,000 with room",
        &mut cluster(1000),
        &req,
    );
    let mut net = req.clone();
    net.network_node = true;
    run("1,000 network nodes among 10,000", &mut cluster(1), &net);
    let mut pinned = req.clone();
    pinned.node_id = Some(Uuid::from_u128(NODES - 5));
    run(
        "pinned by node_id, near the end of 10,000",
        &mut cluster(1),
        &pinned,
    );
}
