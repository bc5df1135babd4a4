//! The store suite against a real etcd (started by the test binary, one key prefix per test), and
//! what only a shared store has: several clients on one etcd.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::etcd::EtcdServer;
use uuid::Uuid;

use super::*;

struct Fixture {
    server: Arc<EtcdServer>,
    prefix: String,
}

impl Fixture {
    fn store_with(&self, options: EtcdOptions) -> EtcdStore {
        EtcdStore::connect_with(&[self.server.endpoint()], &self.prefix, options).unwrap()
    }
}

impl crate::store::suite::Fixture for Fixture {
    type S = EtcdStore;
    fn new() -> Fixture {
        Fixture {
            server: testkit::etcd::shared().expect("etcd is available"),
            prefix: format!("/cumulo-test/{}/", Uuid::new_v4()),
        }
    }
    fn open(&self) -> EtcdStore {
        EtcdStore::connect(&[self.server.endpoint()], &self.prefix).unwrap()
    }
    fn available() -> bool {
        testkit::etcd::shared().is_some()
    }
}

crate::store_suite!(Fixture);

/// A fixture, or `None` when etcd is missing (and not required).
fn fixture() -> Option<Fixture> {
    <Fixture as crate::store::suite::Fixture>::available()
        .then(<Fixture as crate::store::suite::Fixture>::new)
}

/// A tenant with `quota` and a public workload of `vcpus` vCPUs.
fn tenant_and_workload(store: &EtcdStore, quota: Quota, vcpus: u32) -> (Tenant, Workload) {
    let tenant = store
        .create_tenant(NewTenant {
            name: "t".into(),
            quota,
            subnet_prefix: 24,
        })
        .unwrap();
    let flavor = store
        .create_flavor(NewFlavor {
            name: format!("f{vcpus}"),
            vcpus,
            memory_mb: 64,
            disk_gb: 1,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "i".into(),
            kind: ImageKind::Raw,
            reference: "i.raw".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: None,
            name: "w".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: String::new(),
        })
        .unwrap();
    (tenant, workload)
}

#[test]
fn two_clients_on_one_etcd_share_the_quota() {
    let Some(fx) = fixture() else { return };
    // Two stores are two etcd clients (two connections), as two controllers would have: only
    // etcd's transactions stand between them.
    let first = fx.store_with(EtcdOptions::default());
    let second = fx.store_with(EtcdOptions::default());
    let quota = Quota {
        instances: Some(9),
        vcpus: Some(14),
        memory_mb: None,
    };
    let (tenant, workload) = tenant_and_workload(&first, quota, 2);
    let new = |n: usize| NewInstance {
        tenant: tenant.id,
        workload: workload.id,
        name: format!("vm{n}"),
    };
    let made: Vec<Instance> = std::thread::scope(|s| {
        let handles: Vec<_> = [&first, &second, &first, &second, &first, &second]
            .into_iter()
            .enumerate()
            .map(|(n, store)| {
                s.spawn(move || {
                    (0..4)
                        .filter_map(|k| match store.create_instance(new(n * 10 + k)) {
                            Ok(i) => Some(i),
                            Err(StoreError::QuotaExceeded { .. }) => None,
                            Err(e) => panic!("unexpected: {e}"),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(made.len(), 7, "14 vCPUs hold seven 2-vCPU instances");
    let ips: std::collections::HashSet<_> = made.iter().map(|i| i.ip).collect();
    assert_eq!(ips.len(), 7, "no address given twice");
    assert_eq!(
        second.usage(tenant.id).unwrap(),
        Usage {
            instances: 7,
            vcpus: 14,
            memory_mb: 7 * 64
        }
    );
    let listed = first
        .instances(
            Scope::Tenant(tenant.id),
            InstanceFilter::default(),
            Page::first(100),
        )
        .unwrap();
    assert_eq!(listed.items.len(), 7);
}

#[test]
fn a_stale_version_from_one_client_is_refused_after_another_updated() {
    let Some(fx) = fixture() else { return };
    let a = fx.store_with(EtcdOptions::default());
    let b = fx.store_with(EtcdOptions::default());
    let (tenant, workload) = tenant_and_workload(&a, Quota::default(), 1);
    let i = a
        .create_instance(NewInstance {
            tenant: tenant.id,
            workload: workload.id,
            name: "vm".into(),
        })
        .unwrap();
    let seen_by_a = a.instance(Scope::All, i.id).unwrap();
    let active = InstanceChange {
        state: Some(InstanceState::Active),
        ..InstanceChange::default()
    };
    b.update_instance(Scope::All, i.id, seen_by_a.version, active)
        .unwrap();
    let exited = InstanceChange {
        state: Some(InstanceState::Exited),
        ..InstanceChange::default()
    };
    let stale = a.update_instance(Scope::All, i.id, seen_by_a.version, exited);
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    let now = a.instance(Scope::All, i.id).unwrap();
    assert_eq!((now.state, now.version), (InstanceState::Active, 2));
    // The same for a tenant renamed by b.
    b.update_tenant(
        tenant.id,
        1,
        TenantChange {
            name: Some("renamed".into()),
            quota: None,
        },
    )
    .unwrap();
    assert!(matches!(
        a.update_tenant(tenant.id, 1, TenantChange::default()),
        Err(StoreError::Conflict(_))
    ));
    // The old name is free again; the new one is taken.
    a.create_tenant(NewTenant {
        name: "t".into(),
        quota: Quota::default(),
        subnet_prefix: 24,
    })
    .unwrap();
    assert!(matches!(
        a.create_tenant(NewTenant {
            name: "renamed".into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        }),
        Err(StoreError::Conflict(_))
    ));
}

#[test]
fn prefixes_do_not_see_each_other() {
    let Some(fx) = fixture() else { return };
    let a = fx.store_with(EtcdOptions::default());
    let other =
        EtcdStore::connect(&[fx.server.endpoint()], &format!("{}other", fx.prefix)).unwrap();
    tenant_and_workload(&a, Quota::default(), 1);
    assert_eq!(a.tenants().unwrap().len(), 1);
    assert!(other.tenants().unwrap().is_empty());
    assert_eq!(
        a.schema_version().unwrap(),
        EtcdStore::known_schema_version()
    );
}

#[test]
fn a_newer_schema_is_refused() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    store
        .atomically("test", |tx| {
            let key = tx.keys().schema();
            tx.put(
                &key,
                &records::SchemaRec {
                    version: SCHEMA_VERSION + 1,
                },
            )
        })
        .unwrap();
    let err = EtcdStore::connect(&[fx.server.endpoint()], &fx.prefix).unwrap_err();
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            found: SCHEMA_VERSION + 1,
            known: SCHEMA_VERSION
        }
    );
}

#[test]
fn the_event_log_is_bounded() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions {
        event_capacity: 5,
        ..EtcdOptions::default()
    });
    for n in 0..12 {
        store
            .append_event(NewEvent {
                tenant: None,
                kind: EventKind::Info,
                message: format!("e{n}"),
            })
            .unwrap();
    }
    let kept: Vec<String> = store
        .events(Scope::All, None, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(kept, ["e7", "e8", "e9", "e10", "e11"]);
}

#[test]
fn an_unreachable_etcd_is_a_backend_error_in_time() {
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let started = Instant::now();
    let err = EtcdStore::connect_with(
        &[port.to_string()],
        "/cumulo/",
        EtcdOptions {
            connect_timeout: Duration::from_millis(500),
            ..EtcdOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err, StoreError::Backend(m) if m.contains(&port.to_string())),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        EtcdStore::connect(&[], "/cumulo/"),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn a_store_works_from_spawn_blocking() {
    let Some(fx) = fixture() else { return };
    let store = Arc::new(fx.store_with(EtcdOptions::default()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tenants = rt.block_on(async move {
        let inner = Arc::clone(&store);
        let n = tokio::task::spawn_blocking(move || inner.tenants().unwrap().len())
            .await
            .unwrap();
        // Dropping the last handle inside an async context must not panic.
        drop(store);
        n
    });
    assert_eq!(tenants, 0);
}

#[test]
fn admin_pages_follow_creation_order_across_tenants() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let (a, wa) = tenant_and_workload(&store, Quota::default(), 1);
    let b = store
        .create_tenant(NewTenant {
            name: "b".into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        })
        .unwrap();
    let mut made = Vec::new();
    for n in 0..7 {
        let tenant = if n % 2 == 0 { a.id } else { b.id };
        made.push(
            store
                .create_instance(NewInstance {
                    tenant,
                    workload: wa.id,
                    name: format!("vm{n}"),
                })
                .unwrap()
                .id,
        );
    }
    let mut seen = Vec::new();
    let mut page = Page::first(3);
    loop {
        let got = store
            .instances(Scope::All, InstanceFilter::default(), page)
            .unwrap();
        seen.extend(got.items.iter().map(|i| i.id));
        match got.next {
            Some(m) => page.marker = Some(m),
            None => break,
        }
    }
    assert_eq!(seen, made);
    // A deleted marker is unknown.
    store.delete_instance(Scope::All, made[2]).unwrap();
    let gone = Page {
        marker: Some(made[2]),
        limit: 3,
    };
    assert!(matches!(
        store.instances(Scope::All, InstanceFilter::default(), gone),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn calls_fail_with_backend_in_time_once_etcd_is_gone() {
    if fixture().is_none() {
        return;
    }
    // Its own etcd, to stop it under a connected store.
    let server = EtcdServer::start().unwrap();
    let store = EtcdStore::connect_with(
        &[server.endpoint()],
        "/cumulo/",
        EtcdOptions {
            call_timeout: Duration::from_secs(1),
            ..EtcdOptions::default()
        },
    )
    .unwrap();
    assert!(store.tenants().unwrap().is_empty());
    drop(server);
    let started = Instant::now();
    let err = store.tenants().unwrap_err();
    assert!(
        matches!(&err, StoreError::Backend(m) if m.contains("etcd at")),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
