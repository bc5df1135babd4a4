//! The etcd store's benchmarks (plain timing, no harness), the same figures as `store.rs` gives for
//! SQLite: creating 1,000 instances one transaction each, then the latency of listing one page of
//! `servers/detail` with 10,000 instances in the store.
//!
//! Run: `cargo bench -p store --bench store_etcd`. It starts its own etcd from `PATH` (on
//! loopback, data in the system temp directory), or uses the one at `ETCD_BENCH_ENDPOINT`
//! (`host:port`, under a fresh key prefix). Knob: `STORE_BENCH_PAGE` (page size, 100).
// A benchmark binary reports on stdout and may stop at the first failure.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::Instant;

mod common;

use common::percentile;
use store::*;

fn main() {
    let page_size = common::page_size();
    // An etcd of one's own (ETCD_BENCH_ENDPOINT) is spoken to in plain text; the one started
    // here serves TLS, as a cluster's does.
    let (_server, endpoint, transport) = match std::env::var("ETCD_BENCH_ENDPOINT") {
        Ok(e) => (None, e, EtcdTransport::Plaintext),
        Err(_) => {
            let server = testkit::etcd::EtcdServer::start().expect("start etcd (etcd-server)");
            let endpoint = server.endpoint();
            let tls = EtcdTransport::Tls(server.identity(testkit::etcd::ROOT));
            (Some(server), endpoint, tls)
        }
    };
    let prefix = format!("/cumulo-bench/{}/", uuid::Uuid::new_v4());
    let store = EtcdStore::connect(std::slice::from_ref(&endpoint), &prefix, &transport).unwrap();
    println!("etcd at {endpoint}, prefix {prefix}");
    let seed = common::seed(&store);
    common::thousand_creates(&store, &seed);

    // Four threads creating at once into the same tenant (they contend on its usage record).
    let started = Instant::now();
    std::thread::scope(|s| {
        for k in 0..4 {
            let (store, seed) = (&store, &seed);
            s.spawn(move || {
                for n in 0..250 {
                    common::create(store, seed, 1000 + k * 250 + n);
                }
            });
        }
    });
    let total = started.elapsed();
    println!(
        "create 1,000 instances from 4 threads at once: {total:.2?} total ({:.0}/s)",
        1000.0 / total.as_secs_f64()
    );

    for n in 2000..10_000 {
        common::create(&store, &seed, n);
    }
    common::listing(&store, &seed, page_size);
    let all = InstanceFilter::default();
    // Admin listing across tenants (creation-revision order, sorted by etcd).
    let mut admin = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        std::hint::black_box(
            store
                .instances(Scope::All, all, Page::first(page_size))
                .unwrap(),
        );
        admin.push(t.elapsed());
    }
    admin.sort();
    println!(
        "admin (all tenants) first page of {page_size} with 10,000 instances: p50 {:.3?}, p99 {:.3?}",
        percentile(&admin, 0.50),
        percentile(&admin, 0.99)
    );
}
