//! The etcd store's benchmarks (plain timing, no harness), the same figures as `store.rs` gives for
//! SQLite: creating 1,000 instances one transaction each, then the latency of listing one page of
//! `servers/detail` with 10,000 instances in the store.
//!
//! Run: `cargo bench -p controller --bench store_etcd`. It starts its own etcd from `PATH` (on
//! loopback, data in the system temp directory), or uses the one at `ETCD_BENCH_ENDPOINT`
//! (`host:port`, under a fresh key prefix). Knob: `STORE_BENCH_PAGE` (page size, 100).
// A benchmark binary reports on stdout and may stop at the first failure.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use controller::store::*;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn main() {
    let page_size: u32 = std::env::var("STORE_BENCH_PAGE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let (_server, endpoint) = match std::env::var("ETCD_BENCH_ENDPOINT") {
        Ok(e) => (None, e),
        Err(_) => {
            let server = testkit::etcd::EtcdServer::start().expect("start etcd (etcd-server)");
            let endpoint = server.endpoint();
            (Some(server), endpoint)
        }
    };
    let prefix = format!("/cumulo-bench/{}/", uuid::Uuid::new_v4());
    let store = EtcdStore::connect(std::slice::from_ref(&endpoint), &prefix).unwrap();
    println!("etcd at {endpoint}, prefix {prefix}");
    let tenant = store
        .create_tenant(NewTenant {
            name: "bench".into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        })
        .unwrap();
    let flavor = store
        .create_flavor(NewFlavor {
            name: "small".into(),
            vcpus: 1,
            memory_mb: 512,
            disk_gb: 10,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "debian".into(),
            kind: ImageKind::Qcow2,
            reference: "debian.qcow2".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: None,
            name: "web".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: String::new(),
        })
        .unwrap();
    let create = |n: usize| {
        store
            .create_instance(NewInstance {
                tenant: tenant.id,
                workload: workload.id,
                name: format!("vm{n}"),
            })
            .unwrap()
    };

    let started = Instant::now();
    let mut per_create = Vec::with_capacity(1000);
    for n in 0..1000 {
        let t = Instant::now();
        create(n);
        per_create.push(t.elapsed());
    }
    let total = started.elapsed();
    per_create.sort();
    println!(
        "create 1,000 instances: {total:.2?} total ({:.0}/s), p50 {:.2?}, p99 {:.2?}",
        1000.0 / total.as_secs_f64(),
        percentile(&per_create, 0.50),
        percentile(&per_create, 0.99)
    );

    // Four threads creating at once into the same tenant (they contend on its usage record).
    let started = Instant::now();
    std::thread::scope(|s| {
        for k in 0..4 {
            let create = &create;
            s.spawn(move || {
                for n in 0..250 {
                    create(1000 + k * 250 + n);
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
        create(n);
    }
    let scope = Scope::Tenant(tenant.id);
    let all = InstanceFilter::default();
    // Markers spread over the whole list, so pages come from everywhere in it.
    let mut markers = vec![None];
    let mut page = Page::first(Page::MAX_LIMIT);
    loop {
        let got = store.instances(scope, all, page).unwrap();
        for chunk in got.items.chunks(page_size as usize) {
            markers.push(chunk.last().map(|i| i.id));
        }
        match got.next {
            Some(m) => page.marker = Some(m),
            None => break,
        }
    }
    let mut lat = Vec::new();
    for round in 0..5 {
        for marker in &markers {
            let t = Instant::now();
            let got = store
                .instances(
                    scope,
                    all,
                    Page {
                        marker: *marker,
                        limit: page_size,
                    },
                )
                .unwrap();
            if round > 0 {
                lat.push(t.elapsed());
            }
            std::hint::black_box(got);
        }
    }
    lat.sort();
    println!(
        "servers/detail page of {page_size} with 10,000 instances ({} requests): p50 {:.3?}, p99 {:.3?}, max {:.3?}",
        lat.len(),
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        lat[lat.len() - 1]
    );
    let mut full = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        std::hint::black_box(
            store
                .instances(scope, all, Page::first(Page::MAX_LIMIT))
                .unwrap(),
        );
        full.push(t.elapsed());
    }
    full.sort();
    println!(
        "page of {} (the largest): p50 {:.3?}, p99 {:.3?}",
        Page::MAX_LIMIT,
        percentile(&full, 0.50),
        percentile(&full, 0.99)
    );
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
