//! What the store benchmarks (`store.rs` for SQLite, `store_etcd.rs` for etcd) measure the same
//! way on either store: a tenant with a workload to create instances from, 1,000 creates one
//! transaction each, and the latency of `servers/detail` pages with 10,000 instances.
// Shared by several bench binaries: each uses all of it, but the compiler checks each alone.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use store::*;

/// The `p` quantile of `sorted`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

/// `STORE_BENCH_PAGE` (page size), 100 by default.
pub fn page_size() -> u32 {
    std::env::var("STORE_BENCH_PAGE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// What instances are created from.
pub struct Seed {
    /// The tenant.
    pub tenant: uuid::Uuid,
    /// The workload.
    pub workload: uuid::Uuid,
}

/// A tenant, a flavor, an image and a workload.
pub fn seed(store: &impl Store) -> Seed {
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
            is_public: true,
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
            ephemeral: false,
        })
        .unwrap();
    Seed {
        tenant: tenant.id,
        workload: workload.id,
    }
}

/// Creates instance `vm<n>`.
pub fn create(store: &impl Store, seed: &Seed, n: usize) {
    store
        .create_instance(NewInstance {
            tenant: seed.tenant,
            workload: seed.workload,
            name: format!("vm{n}"),
            key: None,
            metadata: Default::default(),
            user: None,
            reservation: None,
            zone: None,
        })
        .unwrap();
}

/// Creates `vm0`..`vm999` one after the other; prints the rate and latencies.
pub fn thousand_creates(store: &impl Store, seed: &Seed) {
    let started = Instant::now();
    let mut per_create = Vec::with_capacity(1000);
    for n in 0..1000 {
        let t = Instant::now();
        create(store, seed, n);
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
}

/// With the tenant's 10,000 instances in the store: prints the latency of pages of
/// `page_size` from everywhere in the list, and of the largest page.
pub fn listing(store: &impl Store, seed: &Seed, page_size: u32) {
    let scope = Scope::Tenant(seed.tenant);
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
            let page = Page {
                marker: *marker,
                limit: page_size,
            };
            let got = store.instances(scope, all, page).unwrap();
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
    let largest = |scope| {
        let mut times = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            let page = Page::first(Page::MAX_LIMIT);
            std::hint::black_box(store.instances(scope, all, page).unwrap());
            times.push(t.elapsed());
        }
        times.sort();
        times
    };
    let full = largest(scope);
    println!(
        "page of {} (the largest): p50 {:.3?}, p99 {:.3?}",
        Page::MAX_LIMIT,
        percentile(&full, 0.50),
        percentile(&full, 0.99)
    );
}
