//! The behaviour every [`Store`] must have, as test functions generic over a [`Fixture`]; an
//! implementation runs them all with `crate::store_suite!(MyFixture);` in its test module.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use uuid::Uuid;

use super::*;

/// Makes stores over one fresh backing storage (a temp file, an etcd key prefix).
pub(crate) trait Fixture {
    /// The store under test.
    type S: Store + 'static;
    /// Fresh, empty storage.
    fn new() -> Self;
    /// A store over this storage; opening again after dropping sees the same data.
    fn open(&self) -> Self::S;
    /// Whether the backend can run here (a test returns early, passing, when it cannot; the
    /// fixture says why).
    fn available() -> bool {
        true
    }
}

/// Runs every test of the suite against `$fixture`, one `#[test]` each.
#[macro_export]
#[doc(hidden)]
macro_rules! store_suite {
    ($fixture:ty) => {
        $crate::store_suite!(@tests $fixture;
            tenant_crud, user_and_role_crud, catalog_crud, instance_crud,
            stale_versions_conflict, tenants_are_isolated, parallel_creates_respect_the_quota,
            vcpu_and_memory_quotas, addresses_are_allocated_and_reused, subnets_run_out,
            cnci_lifecycle, events_are_scoped, nothing_is_lost_on_reopen,
            ten_thousand_instances_page_quickly, remote_host_crud,
            operations_are_claimed_in_fifo_order, parallel_claims_take_each_operation_once,
            an_expired_claim_is_taken_over_and_the_old_token_fenced,
            a_renewed_claim_is_kept, one_operation_per_instance_at_a_time,
            fenced_writes_apply_masked_fields_and_refuse_stale_tokens,
            a_fault_is_kept_while_in_error);
    };
    (@tests $fixture:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                if !<$fixture as $crate::suite::Fixture>::available() {
                    return;
                }
                $crate::suite::$name::<$fixture>();
            }
        )*
    };
}

fn tenant_with(store: &dyn Store, name: &str, quota: Quota, prefix: u8) -> Tenant {
    store
        .create_tenant(NewTenant {
            name: name.into(),
            quota,
            subnet_prefix: prefix,
        })
        .unwrap()
}

/// A tenant with a private workload of 1 vCPU and 512 MiB; returns both.
fn tenant_and_workload(
    store: &dyn Store,
    name: &str,
    quota: Quota,
    prefix: u8,
) -> (Tenant, Workload) {
    let tenant = tenant_with(store, name, quota, prefix);
    let flavor = match store
        .flavors()
        .unwrap()
        .into_iter()
        .find(|f| f.name == "small")
    {
        Some(f) => f,
        None => store
            .create_flavor(NewFlavor {
                name: "small".into(),
                vcpus: 1,
                memory_mb: 512,
                disk_gb: 10,
            })
            .unwrap(),
    };
    let image = store
        .create_image(NewImage {
            owner: Some(tenant.id),
            name: "debian".into(),
            kind: ImageKind::Qcow2,
            reference: "images/debian.qcow2".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: Some(tenant.id),
            name: "web".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: "#cloud-config\n".into(),
        })
        .unwrap();
    (tenant, workload)
}

fn new_instance(tenant: &Tenant, workload: &Workload, name: &str) -> NewInstance {
    NewInstance {
        tenant: tenant.id,
        workload: workload.id,
        name: name.into(),
    }
}

fn is_not_found<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::NotFound { .. }))
}

pub(crate) fn tenant_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let quota = Quota {
        instances: Some(10),
        vcpus: None,
        memory_mb: Some(4096),
    };
    let t = tenant_with(&store, "acme", quota, 24);
    assert_eq!(t.version, 1);
    assert_eq!(store.tenant(t.id).unwrap(), t);
    assert!(matches!(
        store.create_tenant(NewTenant {
            name: "acme".into(),
            quota,
            subnet_prefix: 24
        }),
        Err(StoreError::Conflict(_))
    ));
    for bad in [15, 31] {
        let r = store.create_tenant(NewTenant {
            name: "x".into(),
            quota,
            subnet_prefix: bad,
        });
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{bad}: {r:?}");
    }
    let changed = store
        .update_tenant(
            t.id,
            1,
            TenantChange {
                name: Some("acme2".into()),
                quota: Some(Quota::default()),
            },
        )
        .unwrap();
    assert_eq!((changed.name.as_str(), changed.version), ("acme2", 2));
    assert_eq!(changed.quota, Quota::default());
    assert_eq!(store.tenants().unwrap(), vec![changed.clone()]);
    assert_eq!(store.usage(t.id).unwrap(), Usage::default());
    store.delete_tenant(t.id).unwrap();
    assert!(is_not_found(store.tenant(t.id)));
    assert!(is_not_found(store.delete_tenant(t.id)));
}

pub(crate) fn user_and_role_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    let u = store
        .create_user(NewUser {
            name: "alice".into(),
            password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        })
        .unwrap();
    assert_eq!(store.user(u.id).unwrap(), u);
    assert_eq!(store.user_by_name("alice").unwrap(), u);
    assert!(is_not_found(store.user_by_name("bob")));
    assert!(matches!(
        store.create_user(NewUser {
            name: "alice".into(),
            password_hash: "h".into()
        }),
        Err(StoreError::Conflict(_))
    ));
    let u2 = store
        .update_user(
            u.id,
            1,
            UserChange {
                password_hash: Some("new".into()),
            },
        )
        .unwrap();
    assert_eq!((u2.password_hash.as_str(), u2.version), ("new", 2));
    store.grant_role(u.id, t.id, Role::Member).unwrap();
    store.grant_role(u.id, t.id, Role::Member).unwrap();
    store.grant_role(u.id, t.id, Role::Admin).unwrap();
    let roles = store.roles_of_user(u.id).unwrap();
    assert_eq!(roles.len(), 2);
    assert_eq!(store.roles_in_tenant(t.id).unwrap(), roles);
    store.revoke_role(u.id, t.id, Role::Admin).unwrap();
    assert!(is_not_found(store.revoke_role(u.id, t.id, Role::Admin)));
    assert_eq!(
        store.roles_of_user(u.id).unwrap(),
        vec![RoleAssignment {
            user: u.id,
            tenant: t.id,
            role: Role::Member
        }]
    );
    assert!(is_not_found(store.grant_role(
        Uuid::new_v4(),
        t.id,
        Role::Member
    )));
    assert_eq!(store.users().unwrap().len(), 1);
    store.delete_user(u.id).unwrap();
    assert!(store.roles_in_tenant(t.id).unwrap().is_empty());
    assert!(is_not_found(store.delete_user(u.id)));
}

pub(crate) fn catalog_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let flavor = store.flavor(w.flavor).unwrap();
    assert_eq!(
        (flavor.vcpus, flavor.memory_mb, flavor.disk_gb),
        (1, 512, 10)
    );
    assert!(matches!(
        store.create_flavor(NewFlavor {
            name: "zero".into(),
            vcpus: 0,
            memory_mb: 1,
            disk_gb: 0
        }),
        Err(StoreError::Invalid(_))
    ));
    let public = store
        .create_image(NewImage {
            owner: None,
            name: "alpine".into(),
            kind: ImageKind::Raw,
            reference: "images/alpine.raw".into(),
        })
        .unwrap();
    let scope = Scope::Tenant(t.id);
    let names: Vec<String> = store
        .images(scope)
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(names, ["alpine", "debian"]);
    assert_eq!(store.image(scope, public.id).unwrap(), public);
    // A tenant sees a public image but may not delete it.
    assert!(is_not_found(store.delete_image(scope, public.id)));
    assert_eq!(store.workload(scope, w.id).unwrap(), w);
    let w2 = store
        .update_workload(
            scope,
            w.id,
            1,
            WorkloadChange {
                name: None,
                user_data: Some("#cloud-config\nhostname: x\n".into()),
            },
        )
        .unwrap();
    assert_eq!(w2.version, 2);
    assert_eq!(store.workloads(scope).unwrap(), vec![w2.clone()]);
    // In use: the flavor and the image cannot go while the workload refers to them.
    assert!(matches!(
        store.delete_flavor(w.flavor),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.delete_image(scope, w.image),
        Err(StoreError::Conflict(_))
    ));
    // Unknown flavor or image for a workload.
    let bad = store.create_workload(NewWorkload {
        owner: Some(t.id),
        name: "bad".into(),
        flavor: Uuid::new_v4(),
        image: public.id,
        user_data: String::new(),
    });
    assert!(is_not_found(bad));
    store.delete_workload(scope, w.id).unwrap();
    store.delete_image(scope, w.image).unwrap();
    store.delete_image(Scope::All, public.id).unwrap();
    store.delete_flavor(w.flavor).unwrap();
    assert!(store.flavors().unwrap().is_empty());
    assert!(store.images(Scope::All).unwrap().is_empty());
}

pub(crate) fn instance_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let scope = Scope::Tenant(t.id);
    let i = store.create_instance(new_instance(&t, &w, "vm-1")).unwrap();
    assert_eq!(i.state, InstanceState::Pending);
    assert_eq!((i.vcpus, i.memory_mb, i.version), (1, 512, 1));
    assert_eq!(i.subnet.to_string(), "172.16.0.0/24");
    assert_eq!(i.ip, Ipv4Addr::new(172, 16, 0, 2));
    assert_eq!(i.mac, net::mac_for(i.ip));
    assert_eq!(store.instance(scope, i.id).unwrap(), i);
    assert_eq!(store.instance(Scope::All, i.id).unwrap(), i);
    let node = Uuid::new_v4();
    let active = store
        .update_instance(
            Scope::All,
            i.id,
            1,
            InstanceChange {
                state: Some(InstanceState::Active),
                node: Some(Some(node)),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!(
        (active.state.clone(), active.node, active.version),
        (InstanceState::Active, Some(node), 2)
    );
    let failed = store
        .update_instance(
            scope,
            i.id,
            2,
            InstanceChange {
                state: Some(InstanceState::Error("no such image".into())),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!(store.instance(scope, i.id).unwrap(), failed);
    assert_eq!(failed.state, InstanceState::Error("no such image".into()));
    let on_node = store
        .instances(
            Scope::All,
            InstanceFilter { node: Some(node) },
            Page::first(10),
        )
        .unwrap();
    assert_eq!(on_node.items, vec![failed.clone()]);
    let elsewhere = InstanceFilter {
        node: Some(Uuid::new_v4()),
    };
    assert!(
        store
            .instances(Scope::All, elsewhere, Page::first(10))
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        store.usage(t.id).unwrap(),
        Usage {
            instances: 1,
            vcpus: 1,
            memory_mb: 512
        }
    );
    assert!(matches!(
        store.delete_tenant(t.id),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.delete_workload(scope, w.id),
        Err(StoreError::Conflict(_))
    ));
    store.delete_instance(scope, i.id).unwrap();
    assert!(is_not_found(store.instance(scope, i.id)));
    assert!(is_not_found(store.delete_instance(scope, i.id)));
    assert_eq!(store.usage(t.id).unwrap(), Usage::default());
    assert!(
        store.subnets(Scope::All).unwrap().is_empty(),
        "empty subnet freed"
    );
}

pub(crate) fn stale_versions_conflict<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    let to = |state| InstanceChange {
        state: Some(state),
        ..InstanceChange::default()
    };
    store
        .update_instance(Scope::All, i.id, 1, to(InstanceState::Active))
        .unwrap();
    let stale = store.update_instance(Scope::All, i.id, 1, to(InstanceState::Exited));
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    assert_eq!(
        store.instance(Scope::All, i.id).unwrap().state,
        InstanceState::Active
    );
    // Racing threads from one version: exactly one wins.
    let store = Arc::new(store);
    let winners: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let store = Arc::clone(&store);
                s.spawn(move || {
                    store
                        .update_instance(Scope::All, i.id, 2, to(InstanceState::Stopping))
                        .is_ok()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum()
    });
    assert_eq!(winners, 1);
    assert_eq!(store.instance(Scope::All, i.id).unwrap().version, 3);
    let tenant = store.tenant(t.id).unwrap();
    assert!(matches!(
        store.update_tenant(t.id, tenant.version + 1, TenantChange::default()),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.update_workload(Scope::All, w.id, 7, WorkloadChange::default()),
        Err(StoreError::Conflict(_))
    ));
}

pub(crate) fn tenants_are_isolated<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (a, wa) = tenant_and_workload(&store, "a", Quota::default(), 24);
    let (b, wb) = tenant_and_workload(&store, "b", Quota::default(), 24);
    let ia = store
        .create_instance(new_instance(&a, &wa, "a-vm"))
        .unwrap();
    let ib = store
        .create_instance(new_instance(&b, &wb, "b-vm"))
        .unwrap();
    let sa = Scope::Tenant(a.id);
    assert_ne!(ia.subnet, ib.subnet, "each tenant has its own subnet");
    // b's instance, workload and image are invisible to a.
    assert!(is_not_found(store.instance(sa, ib.id)));
    assert!(is_not_found(store.update_instance(
        sa,
        ib.id,
        1,
        InstanceChange::default()
    )));
    assert!(is_not_found(store.delete_instance(sa, ib.id)));
    assert!(is_not_found(store.workload(sa, wb.id)));
    assert!(is_not_found(store.update_workload(
        sa,
        wb.id,
        1,
        WorkloadChange::default()
    )));
    assert!(is_not_found(store.delete_workload(sa, wb.id)));
    assert!(is_not_found(store.image(sa, wb.image)));
    assert!(is_not_found(store.delete_image(sa, wb.image)));
    // a cannot start an instance of b's workload.
    assert!(is_not_found(
        store.create_instance(new_instance(&a, &wb, "x"))
    ));
    // a workload of a cannot use b's image.
    let steal = store.create_workload(NewWorkload {
        owner: Some(a.id),
        name: "steal".into(),
        flavor: wb.flavor,
        image: wb.image,
        user_data: String::new(),
    });
    assert!(is_not_found(steal));
    let listed = store
        .instances(sa, InstanceFilter::default(), Page::first(100))
        .unwrap();
    assert_eq!(listed.items, vec![ia.clone()]);
    // b's instance as a page marker for a is unknown.
    let marker = Page {
        marker: Some(ib.id),
        limit: 10,
    };
    assert!(matches!(
        store.instances(sa, InstanceFilter::default(), marker),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.images(sa).unwrap().len(), 1);
    assert_eq!(store.workloads(sa).unwrap().len(), 1);
    assert_eq!(store.subnets(sa).unwrap().len(), 1);
    assert_eq!(store.subnets(Scope::All).unwrap().len(), 2);
    let all = store
        .instances(Scope::All, InstanceFilter::default(), Page::first(100))
        .unwrap();
    assert_eq!(all.items.len(), 2);
    // b's instance is untouched.
    assert_eq!(store.instance(Scope::Tenant(b.id), ib.id).unwrap(), ib);
}

pub(crate) fn parallel_creates_respect_the_quota<F: Fixture>() {
    let fx = F::new();
    let store = Arc::new(fx.open());
    let quota = Quota {
        instances: Some(10),
        ..Quota::default()
    };
    let (t, w) = tenant_and_workload(store.as_ref(), "acme", quota, 24);
    let results: Vec<Result<Instance>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|n| {
                let store = Arc::clone(&store);
                let (t, w) = (t.clone(), w.clone());
                s.spawn(move || {
                    (0..5)
                        .map(|k| {
                            store.create_instance(new_instance(&t, &w, &format!("vm-{n}-{k}")))
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
    let ok: Vec<&Instance> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(ok.len(), 10);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(
                *e,
                StoreError::QuotaExceeded {
                    what: QuotaKind::Instances,
                    limit: 10
                }
            );
        }
    }
    let ips: HashSet<Ipv4Addr> = ok.iter().map(|i| i.ip).collect();
    assert_eq!(ips.len(), 10, "no address given twice");
    assert_eq!(store.usage(t.id).unwrap().instances, 10);
}

pub(crate) fn vcpu_and_memory_quotas<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let vcpus = Quota {
        vcpus: Some(2),
        ..Quota::default()
    };
    let (t, w) = tenant_and_workload(&store, "cpu", vcpus, 24);
    store.create_instance(new_instance(&t, &w, "1")).unwrap();
    store.create_instance(new_instance(&t, &w, "2")).unwrap();
    assert_eq!(
        store.create_instance(new_instance(&t, &w, "3")),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::Vcpus,
            limit: 2
        })
    );
    let memory = Quota {
        memory_mb: Some(1000),
        ..Quota::default()
    };
    let (t, w) = tenant_and_workload(&store, "mem", memory, 24);
    store.create_instance(new_instance(&t, &w, "1")).unwrap();
    assert_eq!(
        store.create_instance(new_instance(&t, &w, "2")),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::MemoryMb,
            limit: 1000
        })
    );
    // Raising the quota lets the next one in.
    let tenant = store.tenant(t.id).unwrap();
    store
        .update_tenant(
            t.id,
            tenant.version,
            TenantChange {
                quota: Some(Quota::default()),
                ..TenantChange::default()
            },
        )
        .unwrap();
    store.create_instance(new_instance(&t, &w, "2")).unwrap();
}

pub(crate) fn addresses_are_allocated_and_reused<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    // A /29 holds 8 addresses: network, gateway, 5 instances, broadcast.
    let (t, w) = tenant_and_workload(&store, "small-net", Quota::default(), 29);
    let made: Vec<Instance> = (0..7)
        .map(|n| {
            store
                .create_instance(new_instance(&t, &w, &format!("vm{n}")))
                .unwrap()
        })
        .collect();
    let addrs: Vec<String> = made
        .iter()
        .map(|i| format!("{} {}", i.subnet, i.ip))
        .collect();
    assert_eq!(
        addrs,
        [
            "172.16.0.0/29 172.16.0.2",
            "172.16.0.0/29 172.16.0.3",
            "172.16.0.0/29 172.16.0.4",
            "172.16.0.0/29 172.16.0.5",
            "172.16.0.0/29 172.16.0.6",
            "172.16.0.8/29 172.16.0.10",
            "172.16.0.8/29 172.16.0.11",
        ]
    );
    for i in &made {
        let [a, b, c, d] = i.ip.octets();
        assert_eq!(i.mac.0, [0x02, 0x00, a, b, c, d]);
    }
    // Another tenant's subnet comes after.
    let (t2, w2) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let other = store.create_instance(new_instance(&t2, &w2, "o")).unwrap();
    assert_eq!(other.subnet.to_string(), "172.16.1.0/24");
    // A freed address is given again, lowest first.
    store.delete_instance(Scope::All, made[2].id).unwrap();
    let again = store
        .create_instance(new_instance(&t, &w, "again"))
        .unwrap();
    assert_eq!(again.ip, made[2].ip);
    // A subnet emptied of instances is freed, and carved again.
    store.delete_instance(Scope::All, made[5].id).unwrap();
    store.delete_instance(Scope::All, made[6].id).unwrap();
    assert_eq!(store.subnets(Scope::Tenant(t.id)).unwrap().len(), 1);
    store.delete_instance(Scope::All, made[0].id).unwrap();
    let refill = store
        .create_instance(new_instance(&t, &w, "refill"))
        .unwrap();
    assert_eq!(
        refill.ip, made[0].ip,
        "room in the first subnet is used first"
    );
    let next = store.create_instance(new_instance(&t, &w, "next")).unwrap();
    assert_eq!(next.subnet.to_string(), "172.16.0.8/29");
}

pub(crate) fn subnets_run_out<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    // A /16 tenant plan: the pool holds 16 such subnets; each /30 after them has none left.
    let (big, wbig) = tenant_and_workload(&store, "big", Quota::default(), 16);
    let first = store
        .create_instance(new_instance(&big, &wbig, "b"))
        .unwrap();
    assert_eq!(first.subnet.to_string(), "172.16.0.0/16");
    let (t, w) = tenant_and_workload(&store, "tiny", Quota::default(), 30);
    let tiny = store.create_instance(new_instance(&t, &w, "t")).unwrap();
    assert_eq!(tiny.subnet.to_string(), "172.17.0.0/30");
    assert_eq!(tiny.ip, Ipv4Addr::new(172, 17, 0, 2));
    // Fill the rest of the pool with /16 tenants.
    for n in 0..14 {
        let (tn, wn) = tenant_and_workload(&store, &format!("t{n}"), Quota::default(), 16);
        store.create_instance(new_instance(&tn, &wn, "x")).unwrap();
    }
    let (last, wlast) = tenant_and_workload(&store, "last", Quota::default(), 16);
    let r = store.create_instance(new_instance(&last, &wlast, "x"));
    assert!(matches!(r, Err(StoreError::Exhausted(_))), "{r:?}");
    assert_eq!(
        store.usage(last.id).unwrap().instances,
        0,
        "nothing half-made"
    );
}

pub(crate) fn cnci_lifecycle<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    let subnet = store.subnets(Scope::Tenant(t.id)).unwrap().remove(0);
    let c = store.create_cnci(subnet.id).unwrap();
    assert_eq!(
        (c.tenant, c.cidr, c.state, c.version),
        (t.id, subnet.cidr, CnciState::Pending, 1)
    );
    assert!(matches!(
        store.create_cnci(subnet.id),
        Err(StoreError::Conflict(_))
    ));
    assert!(is_not_found(store.create_cnci(Uuid::new_v4())));
    let ip: std::net::IpAddr = "192.168.0.40".parse().unwrap();
    let active = store
        .update_cnci(
            c.id,
            1,
            CnciChange {
                state: Some(CnciState::Active),
                ip: Some(Some(ip)),
                node: Some(Some(Uuid::new_v4())),
            },
        )
        .unwrap();
    assert_eq!(
        (active.state, active.ip, active.version),
        (CnciState::Active, Some(ip), 2)
    );
    assert!(matches!(
        store.update_cnci(c.id, 1, CnciChange::default()),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.cnci(Scope::Tenant(t.id), c.id).unwrap(), active);
    let (other, _) = tenant_and_workload(&store, "other", Quota::default(), 24);
    assert!(is_not_found(store.cnci(Scope::Tenant(other.id), c.id)));
    assert!(store.cncis(Scope::Tenant(other.id)).unwrap().is_empty());
    assert_eq!(store.cncis(Scope::All).unwrap(), vec![active]);
    // The subnet stays while its CNCI does, even with no instance left.
    store.delete_instance(Scope::All, i.id).unwrap();
    assert_eq!(store.subnets(Scope::All).unwrap(), vec![subnet]);
    store.delete_cnci(c.id).unwrap();
    assert!(store.subnets(Scope::All).unwrap().is_empty());
    assert!(is_not_found(store.delete_cnci(c.id)));
}

pub(crate) fn events_are_scoped<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let a = tenant_with(&store, "a", Quota::default(), 24);
    let b = tenant_with(&store, "b", Quota::default(), 24);
    let ev = |tenant, message: &str| NewEvent {
        tenant,
        kind: EventKind::Info,
        message: message.into(),
    };
    let e1 = store.append_event(ev(Some(a.id), "a started")).unwrap();
    store.append_event(ev(Some(b.id), "b started")).unwrap();
    let e3 = store.append_event(ev(None, "node joined")).unwrap();
    assert!(e1.seq < e3.seq);
    let mine = store.events(Scope::Tenant(a.id), None, 100).unwrap();
    assert_eq!(mine, vec![e1.clone()]);
    assert_eq!(store.events(Scope::All, None, 100).unwrap().len(), 3);
    assert_eq!(store.events(Scope::All, Some(e1.seq), 1).unwrap().len(), 1);
    assert_eq!(store.clear_events(Scope::Tenant(a.id)).unwrap(), 1);
    assert_eq!(store.events(Scope::All, None, 100).unwrap().len(), 2);
    assert_eq!(store.clear_events(Scope::All).unwrap(), 2);
}

pub(crate) fn nothing_is_lost_on_reopen<F: Fixture>() {
    let fx = F::new();
    let (t, w, u, instances, cnci) = {
        let store = fx.open();
        let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
        let u = store
            .create_user(NewUser {
                name: "alice".into(),
                password_hash: "hash".into(),
            })
            .unwrap();
        store.grant_role(u.id, t.id, Role::Admin).unwrap();
        let mut instances: Vec<Instance> = (0..5)
            .map(|n| {
                store
                    .create_instance(new_instance(&t, &w, &format!("vm{n}")))
                    .unwrap()
            })
            .collect();
        instances[1] = store
            .update_instance(
                Scope::All,
                instances[1].id,
                1,
                InstanceChange {
                    state: Some(InstanceState::Active),
                    ..InstanceChange::default()
                },
            )
            .unwrap();
        let subnet = store.subnets(Scope::All).unwrap().remove(0);
        let cnci = store.create_cnci(subnet.id).unwrap();
        store
            .append_event(NewEvent {
                tenant: Some(t.id),
                kind: EventKind::Warning,
                message: "kept".into(),
            })
            .unwrap();
        (t, w, u, instances, cnci)
    };
    let store = fx.open();
    assert_eq!(store.tenant(t.id).unwrap(), t);
    assert_eq!(store.workload(Scope::All, w.id).unwrap(), w);
    assert_eq!(store.user(u.id).unwrap(), u);
    assert_eq!(store.roles_of_user(u.id).unwrap().len(), 1);
    let listed = store
        .instances(
            Scope::Tenant(t.id),
            InstanceFilter::default(),
            Page::first(100),
        )
        .unwrap();
    assert_eq!(listed.items, instances);
    assert_eq!(store.cnci(Scope::All, cnci.id).unwrap(), cnci);
    assert_eq!(
        store.events(Scope::All, None, 10).unwrap()[0].message,
        "kept"
    );
    // Allocation carries on from what is stored.
    let more = store.create_instance(new_instance(&t, &w, "more")).unwrap();
    assert_eq!(more.ip, Ipv4Addr::new(172, 16, 0, 7));
}

pub(crate) fn ten_thousand_instances_page_quickly<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "big", Quota::default(), 24);
    let (other, wo) = tenant_and_workload(&store, "other", Quota::default(), 24);
    for n in 0..10_000 {
        store
            .create_instance(new_instance(&t, &w, &format!("vm{n}")))
            .unwrap();
    }
    store
        .create_instance(new_instance(&other, &wo, "not-mine"))
        .unwrap();
    let scope = Scope::Tenant(t.id);
    let started = std::time::Instant::now();
    let mut page = Page::first(Page::MAX_LIMIT);
    let mut seen = HashSet::new();
    let mut pages = 0;
    loop {
        let got = store
            .instances(scope, InstanceFilter::default(), page)
            .unwrap();
        pages += 1;
        for i in &got.items {
            assert_eq!(i.tenant, t.id);
            assert!(seen.insert(i.id), "listed twice");
        }
        match got.next {
            Some(marker) => page.marker = Some(marker),
            None => break,
        }
    }
    assert_eq!(seen.len(), 10_000);
    assert_eq!(pages, 10);
    // Generous bound for a debug build on a shared machine; the bench has the real figures.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        store.instances(scope, InstanceFilter::default(), Page::first(0)),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(
        store.subnets(scope).unwrap().len(),
        10_000usize.div_ceil(253)
    );
}

// --- off-host hosts and the operation queue ---

/// A lease that does not run out during a test.
const LONG: Duration = Duration::from_secs(3600);

fn remote_host(store: &dyn Store, name: &str) -> RemoteHost {
    store
        .create_remote_host(NewRemoteHost {
            name: name.into(),
            libvirt_uri: format!("qemu+tcp://{name}/system"),
        })
        .unwrap()
}

fn enqueue(store: &dyn Store, host: Uuid, instance: Uuid, kind: OperationKind) -> Operation {
    store
        .enqueue_operation(NewOperation {
            host,
            instance,
            kind,
            payload: format!("{kind:?} {instance}").into_bytes(),
        })
        .unwrap()
}

fn token_of(op: &Operation) -> u64 {
    op.claim.as_ref().expect("a claim").token
}

fn is_fenced<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::Fenced { .. }))
}

pub(crate) fn remote_host_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let b = remote_host(&store, "beta");
    let a = remote_host(&store, "alpha");
    assert_eq!(store.remote_host(b.id).unwrap(), b);
    assert_eq!(b.libvirt_uri, "qemu+tcp://beta/system");
    assert_eq!(store.remote_hosts().unwrap(), vec![a.clone(), b.clone()]);
    assert!(matches!(
        store.create_remote_host(NewRemoteHost {
            name: "alpha".into(),
            libvirt_uri: "qemu+tls://x/system".into(),
        }),
        Err(StoreError::Conflict(_))
    ));
    for bad in ["", "no-scheme", "://x", "qemu+tcp://a b/system"] {
        let r = store.create_remote_host(NewRemoteHost {
            name: "gamma".into(),
            libvirt_uri: bad.into(),
        });
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{bad:?}: {r:?}");
    }
    // A host with an unfinished operation stays; once it is finished, the host may go.
    let op = enqueue(&store, a.id, Uuid::new_v4(), OperationKind::Stop);
    assert!(matches!(
        store.delete_remote_host(a.id),
        Err(StoreError::Conflict(_))
    ));
    let claimed = store.claim_operation("r1", LONG).unwrap().unwrap();
    assert_eq!(claimed.id, op.id);
    assert!(matches!(
        store.delete_remote_host(a.id),
        Err(StoreError::Conflict(_))
    ));
    store
        .fail_operation(op.id, token_of(&claimed), "no such domain")
        .unwrap();
    store.delete_remote_host(a.id).unwrap();
    assert!(is_not_found(store.remote_host(a.id)));
    assert!(is_not_found(store.delete_remote_host(a.id)));
    assert_eq!(store.remote_hosts().unwrap(), vec![b.clone()]);
    // The finished operation is kept; a new one needs an existing host.
    assert_eq!(
        store.operation(op.id).unwrap().state,
        OperationState::Failed
    );
    assert!(is_not_found(store.enqueue_operation(NewOperation {
        host: a.id,
        instance: Uuid::new_v4(),
        kind: OperationKind::Start,
        payload: Vec::new(),
    })));
    // The name is free again.
    remote_host(&store, "alpha");
}

pub(crate) fn operations_are_claimed_in_fifo_order<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    assert_eq!(store.claim_operation("r1", LONG).unwrap(), None);
    let h1 = remote_host(&store, "h1");
    let h2 = remote_host(&store, "h2");
    let queued: Vec<Operation> = [
        (h1.id, OperationKind::Start),
        (h2.id, OperationKind::Stop),
        (h1.id, OperationKind::Delete),
    ]
    .into_iter()
    .map(|(host, kind)| enqueue(&store, host, Uuid::new_v4(), kind))
    .collect();
    for op in &queued {
        assert_eq!(op.state, OperationState::Queued);
        assert_eq!(op.claim, None);
        assert_eq!(op.result, None);
        assert_eq!(store.operation(op.id).unwrap(), *op);
    }
    assert!(matches!(
        store.claim_operation(" ", LONG),
        Err(StoreError::Invalid(_))
    ));
    // Reopening keeps the queue.
    drop(store);
    let store = fx.open();
    let all = store.operations(OperationFilter::default()).unwrap();
    assert_eq!(all, queued);
    let on_h1 = store
        .operations(OperationFilter {
            state: None,
            host: Some(h1.id),
        })
        .unwrap();
    assert_eq!(on_h1, vec![queued[0].clone(), queued[2].clone()]);

    let mut last_token = 0;
    for (n, want) in queued.iter().enumerate() {
        let owner = format!("replica-{n}");
        let got = store.claim_operation(&owner, LONG).unwrap().unwrap();
        assert_eq!(got.id, want.id, "claim {n} takes the oldest");
        assert_eq!(got.state, OperationState::Claimed);
        assert_eq!(got.payload, want.payload);
        assert_eq!(got.kind, want.kind);
        let claim = got.claim.clone().unwrap();
        assert_eq!(claim.owner, owner);
        assert!(claim.token > last_token, "tokens increase");
        assert!(claim.expires > SystemTime::now() + LONG / 2);
        last_token = claim.token;
        assert_eq!(store.operation(got.id).unwrap(), got);
    }
    assert_eq!(store.claim_operation("r1", LONG).unwrap(), None);
    let claimed = store
        .operations(OperationFilter {
            state: Some(OperationState::Claimed),
            host: None,
        })
        .unwrap();
    assert_eq!(claimed.len(), 3);
    assert!(
        store
            .operations(OperationFilter {
                state: Some(OperationState::Queued),
                host: None,
            })
            .unwrap()
            .is_empty()
    );
}

pub(crate) fn parallel_claims_take_each_operation_once<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let total = 24;
    for _ in 0..total {
        enqueue(&store, host.id, Uuid::new_v4(), OperationKind::Start);
    }
    let claims: Vec<Operation> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|n| {
                let store = &store;
                s.spawn(move || {
                    let owner = format!("replica-{n}");
                    let mut mine = Vec::new();
                    while let Some(op) = store.claim_operation(&owner, LONG).unwrap() {
                        mine.push(op);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(claims.len(), total, "every operation claimed");
    let ids: HashSet<Uuid> = claims.iter().map(|op| op.id).collect();
    assert_eq!(ids.len(), total, "no operation claimed twice");
    let tokens: HashSet<u64> = claims.iter().map(token_of).collect();
    assert_eq!(tokens.len(), total, "every claim has its own token");
    for op in &claims {
        let done = store.complete_operation(op.id, token_of(op), "ok").unwrap();
        assert_eq!(done.state, OperationState::Done);
    }
    let done = store
        .operations(OperationFilter {
            state: Some(OperationState::Done),
            host: Some(host.id),
        })
        .unwrap();
    assert_eq!(done.len(), total);
}

pub(crate) fn an_expired_claim_is_taken_over_and_the_old_token_fenced<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let op = enqueue(&store, host.id, Uuid::new_v4(), OperationKind::Start);
    // A lease of zero has run out as soon as it is taken: the replica "died".
    let first = store
        .claim_operation("slow", Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(first.id, op.id);
    let old = token_of(&first);
    let second = store.claim_operation("fast", LONG).unwrap().unwrap();
    assert_eq!(second.id, op.id, "the expired claim is taken over");
    let new = token_of(&second);
    assert!(new > old, "the takeover's token {new} is above {old}");
    assert_eq!(second.claim.as_ref().unwrap().owner, "fast");
    // A live claim is not taken.
    assert_eq!(store.claim_operation("third", LONG).unwrap(), None);
    // The slow replica's late writes are refused.
    assert!(is_fenced(store.renew_claim(op.id, old, LONG)));
    assert!(is_fenced(store.complete_operation(op.id, old, "late")));
    assert!(is_fenced(store.fail_operation(op.id, old, "late")));
    assert_eq!(store.operation(op.id).unwrap(), second);
    let err = store.complete_operation(op.id, old, "late").unwrap_err();
    assert!(err.to_string().contains("stale"), "{err}");
    // The new holder completes it, once.
    let done = store
        .complete_operation(op.id, new, "domain running")
        .unwrap();
    assert_eq!(done.state, OperationState::Done);
    assert_eq!(done.result.as_deref(), Some("domain running"));
    assert_eq!(token_of(&done), new);
    assert_eq!(done.claim.as_ref().unwrap().owner, "fast");
    assert_eq!(store.operation(op.id).unwrap(), done);
    assert!(is_fenced(store.complete_operation(op.id, new, "again")));
    assert!(is_fenced(store.fail_operation(op.id, new, "again")));
    assert!(is_fenced(store.renew_claim(op.id, new, LONG)));
    assert!(is_fenced(store.complete_operation(op.id, old, "late")));
    assert_eq!(store.claim_operation("third", LONG).unwrap(), None);
    assert!(is_not_found(store.complete_operation(
        Uuid::new_v4(),
        new,
        "x"
    )));
}

pub(crate) fn a_renewed_claim_is_kept<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let op = enqueue(&store, host.id, Uuid::new_v4(), OperationKind::Stop);
    let claimed = store
        .claim_operation("r1", Duration::ZERO)
        .unwrap()
        .unwrap();
    let token = token_of(&claimed);
    // Run out but not taken over: still the holder's, and renewing keeps the token.
    let renewed = store.renew_claim(op.id, token, LONG).unwrap();
    assert_eq!(token_of(&renewed), token);
    assert!(renewed.claim.as_ref().unwrap().expires > claimed.claim.unwrap().expires);
    assert_eq!(store.operation(op.id).unwrap(), renewed);
    assert_eq!(store.claim_operation("r2", LONG).unwrap(), None);
    assert!(is_fenced(store.renew_claim(op.id, token + 1000, LONG)));
    let failed = store
        .fail_operation(op.id, token, "libvirt refused")
        .unwrap();
    assert_eq!(failed.state, OperationState::Failed);
    assert_eq!(failed.result.as_deref(), Some("libvirt refused"));
}

pub(crate) fn one_operation_per_instance_at_a_time<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let (x, y) = (Uuid::new_v4(), Uuid::new_v4());
    let stop_x = enqueue(&store, host.id, x, OperationKind::Stop);
    let delete_x = enqueue(&store, host.id, x, OperationKind::Delete);
    let start_y = enqueue(&store, host.id, y, OperationKind::Start);
    let first = store.claim_operation("r", LONG).unwrap().unwrap();
    assert_eq!(first.id, stop_x.id);
    let second = store.claim_operation("r", LONG).unwrap().unwrap();
    assert_eq!(second.id, start_y.id, "x's delete waits for its stop");
    assert_eq!(store.claim_operation("r", LONG).unwrap(), None);
    store
        .complete_operation(first.id, token_of(&first), "stopped")
        .unwrap();
    let third = store.claim_operation("r", LONG).unwrap().unwrap();
    assert_eq!(third.id, delete_x.id);
}

pub(crate) fn fenced_writes_apply_masked_fields_and_refuse_stale_tokens<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let host = remote_host(&store, "h");
    let (tenant, workload) = tenant_and_workload(&store, "t", Quota::default(), 24);
    let instance = store
        .create_instance(new_instance(&tenant, &workload, "vm"))
        .unwrap();
    let cnci = Uuid::new_v4();
    store
        .update_instance(
            Scope::All,
            instance.id,
            instance.version,
            InstanceChange {
                cnci: Some(Some(cnci)),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    let op = enqueue(&store, host.id, instance.id, OperationKind::Start);
    let slow = store
        .claim_operation("slow", Duration::ZERO)
        .unwrap()
        .unwrap();
    let old = token_of(&slow);
    // A masked update: only the state and the node; the CNCI stays.
    let facts = InstanceFacts {
        state: InstanceState::Active,
        placement: Placement {
            node: Some(host.id),
            cnci: None,
        },
        fault: None,
    };
    let mask = FieldMask::of(["state", "placement.node"]).unwrap();
    let still = store
        .fenced_write(
            op.id,
            old,
            &InstanceWrite::Update(mask.clone(), facts.clone()),
            None,
        )
        .unwrap();
    assert_eq!(still.state, OperationState::Claimed);
    assert_eq!(token_of(&still), old);
    let now = store.instance(Scope::All, instance.id).unwrap();
    assert_eq!(now.state, InstanceState::Active);
    assert_eq!(now.node, Some(host.id));
    assert_eq!(now.cnci, Some(cnci), "a field outside the mask is kept");
    // Another replica takes the operation over (the lease ran out).
    let fast = store.claim_operation("fast", LONG).unwrap().unwrap();
    let new = token_of(&fast);
    let exited = InstanceFacts {
        state: InstanceState::Exited,
        placement: Placement::default(),
        fault: None,
    };
    // The stale replica's late write changes nothing.
    let late = InstanceWrite::Update(FieldMask::all(), exited.clone());
    assert!(is_fenced(store.fenced_write(
        op.id,
        old,
        &late,
        Some((OperationState::Done, "late"))
    )));
    assert!(is_fenced(store.fenced_write(
        op.id,
        old,
        &InstanceWrite::Remove,
        None
    )));
    assert_eq!(store.instance(Scope::All, instance.id).unwrap(), now);
    // The parent field means the whole sub-record: placement cleared, node and CNCI.
    let parent = FieldMask::of(["state", "placement"]).unwrap();
    let done = store
        .fenced_write(
            op.id,
            new,
            &InstanceWrite::Update(parent, exited),
            Some((OperationState::Done, "stopped")),
        )
        .unwrap();
    assert_eq!(done.state, OperationState::Done);
    assert_eq!(done.result.as_deref(), Some("stopped"));
    let after = store.instance(Scope::All, instance.id).unwrap();
    assert_eq!(after.state, InstanceState::Exited);
    assert_eq!((after.node, after.cnci), (None, None));
    // Finished: even the right token is refused now.
    assert!(is_fenced(store.fenced_write(
        op.id,
        new,
        &InstanceWrite::Nothing,
        None
    )));
    // A removal under a live claim takes the record; a second one (instance gone) is fine.
    let del = enqueue(&store, host.id, instance.id, OperationKind::Delete);
    let claim = store.claim_operation("fast", LONG).unwrap().unwrap();
    assert_eq!(claim.id, del.id);
    let t = token_of(&claim);
    store
        .fenced_write(del.id, t, &InstanceWrite::Remove, None)
        .unwrap();
    assert!(is_not_found(store.instance(Scope::All, instance.id)));
    let gone = store
        .fenced_write(
            del.id,
            t,
            &InstanceWrite::Remove,
            Some((OperationState::Done, "deleted")),
        )
        .unwrap();
    assert_eq!(gone.state, OperationState::Done);
    // A replica of one host takes only that host's operations.
    let other = remote_host(&store, "other");
    let theirs = enqueue(&store, other.id, Uuid::new_v4(), OperationKind::Start);
    assert_eq!(
        store.claim_operation_on("r", LONG, Some(host.id)).unwrap(),
        None
    );
    let got = store
        .claim_operation_on("r", LONG, Some(other.id))
        .unwrap()
        .unwrap();
    assert_eq!(got.id, theirs.id);
}

pub(crate) fn a_fault_is_kept_while_in_error<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let i = store.create_instance(new_instance(&t, &w, "vm-1")).unwrap();
    assert_eq!(i.fault, None);
    // The stores keep milliseconds.
    let fault = Fault {
        reason: "launch_failure".into(),
        message: "QEMU could not open /x/seed.iso: Permission denied".into(),
        created: SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_602_611_908),
    };
    let change = |state: Option<InstanceState>, fault: Option<Option<Fault>>| InstanceChange {
        state,
        fault,
        ..InstanceChange::default()
    };
    let failed = store
        .update_instance(
            Scope::All,
            i.id,
            i.version,
            change(
                Some(InstanceState::Error("launch_failure".into())),
                Some(Some(fault.clone())),
            ),
        )
        .unwrap();
    assert_eq!(failed.fault.as_ref(), Some(&fault));
    assert_eq!(store.instance(Scope::All, i.id).unwrap(), failed);
    // Changes that name no fault keep it while the instance stays in error.
    let renamed = store
        .update_instance(
            Scope::All,
            i.id,
            failed.version,
            InstanceChange {
                name: Some("vm-2".into()),
                node: Some(None),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!(renamed.fault.as_ref(), Some(&fault));
    let again = store
        .update_instance(
            Scope::All,
            i.id,
            renamed.version,
            change(Some(InstanceState::Error("launch_failure".into())), None),
        )
        .unwrap();
    assert_eq!(again.fault.as_ref(), Some(&fault));
    // It survives a reopen, in listings too.
    drop(store);
    let store = fx.open();
    let listed = store
        .instances(Scope::All, InstanceFilter::default(), Page::first(10))
        .unwrap();
    assert_eq!(listed.items, vec![again.clone()]);
    // Started again: the state leaves error and the fault goes with it.
    let pending = store
        .update_instance(
            Scope::All,
            i.id,
            again.version,
            change(Some(InstanceState::Pending), None),
        )
        .unwrap();
    assert_eq!(pending.fault, None);
    assert_eq!(store.instance(Scope::All, i.id).unwrap().fault, None);
    // An explicit clear, and a fault from the controller's own reasons.
    let own = Fault::now("start_lost", "no node reported the instance");
    let lost = store
        .update_instance(
            Scope::All,
            i.id,
            pending.version,
            change(
                Some(InstanceState::Error("start_lost".into())),
                Some(Some(own.clone())),
            ),
        )
        .unwrap();
    let kept = lost.fault.clone().unwrap();
    assert_eq!((kept.reason, kept.message), (own.reason, own.message));
    assert!(kept.created <= SystemTime::now());
    assert_eq!(store.instance(Scope::All, i.id).unwrap(), lost);
    let cleared = store
        .update_instance(Scope::All, i.id, lost.version, change(None, Some(None)))
        .unwrap();
    assert_eq!(cleared.fault, None);
    assert_eq!(cleared.state, InstanceState::Error("start_lost".into()));
}
