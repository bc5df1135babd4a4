//! The suite: instances, their quotas and addresses, subnets, CNCIs and faults
//! ([`InstanceStore`](crate::InstanceStore)).

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::*;

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

pub(crate) fn parallel_creates_respect_the_quota<F: Fixture>() {
    let fx = F::new();
    let store = Arc::new(fx.open());
    let quota = Quota {
        instances: Some(10),
        ..Quota::default()
    };
    let (t, w) = tenant_and_workload(store.as_ref(), "acme", quota, 24);
    let results: Vec<Result<Instance>> = in_parallel(8, |n| {
        (0..5)
            .map(|k| store.create_instance(new_instance(&t, &w, &format!("vm-{n}-{k}"))))
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

/// Pages of every size go past a long run of deleted instances (and past a deleted marker's
/// neighbours) to the end, each instance once, in creation order.
pub(crate) fn pages_go_past_a_run_of_deleted_instances<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "gaps", Quota::default(), 24);
    let made = crate::suite::instances_made(&store, &t, &w, 60);
    // Kept: the first 5, then 1 of every 10 of the rest after a run of 30 deleted.
    let kept: Vec<Uuid> = made
        .iter()
        .enumerate()
        .filter(|&(n, _)| n < 5 || (n >= 35 && n % 10 == 0))
        .map(|(_, i)| i.id)
        .collect();
    for i in &made {
        if !kept.contains(&i.id) {
            store.delete_instance(Scope::All, i.id).unwrap();
        }
    }
    for limit in 1..=7 {
        let mut page = Page::first(limit);
        let mut seen = Vec::new();
        loop {
            let got = store
                .instances(Scope::Tenant(t.id), InstanceFilter::default(), page)
                .unwrap();
            assert!(got.items.len() <= limit as usize);
            seen.extend(got.items.iter().map(|i| i.id));
            match got.next {
                Some(marker) => page.marker = Some(marker),
                None => break,
            }
        }
        assert_eq!(seen, kept, "pages of {limit}");
    }
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

/// A rebuild re-points an instance to another workload (another image, other user data): one its
/// tenant sees, of its size. The old workload is free to go afterwards.
pub(crate) fn an_instance_moves_to_a_workload_of_its_size<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (other, theirs) = tenant_and_workload(&store, "umbrella", Quota::default(), 24);
    let scope = Scope::Tenant(t.id);
    let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    let workload_of = |flavor: Uuid, name: &str| {
        store
            .create_workload(NewWorkload {
                owner: Some(t.id),
                name: name.into(),
                flavor,
                image: w.image,
                user_data: "#cloud-config\nnew: 1\n".into(),
                ephemeral: false,
            })
            .unwrap()
    };
    let same = workload_of(w.flavor, "rebuilt");
    let big = store
        .create_flavor(NewFlavor {
            name: "big".into(),
            vcpus: 4,
            memory_mb: 4096,
            disk_gb: 20,
            is_public: true,
        })
        .unwrap();
    let bigger = workload_of(big.id, "bigger");
    let to = |workload: Uuid, version: u64| {
        store.update_instance(
            scope,
            i.id,
            version,
            InstanceChange {
                workload: Some(workload),
                ..InstanceChange::default()
            },
        )
    };
    assert!(matches!(
        to(bigger.id, i.version),
        Err(StoreError::Invalid(_))
    ));
    assert!(is_not_found(to(theirs.id, i.version)));
    assert_ne!(other.id, t.id);
    let moved = to(same.id, i.version).unwrap();
    assert_eq!((moved.workload, moved.vcpus), (same.id, i.vcpus));
    assert_eq!(store.instance(scope, i.id).unwrap().workload, same.id);
    // The old workload is no longer in use; the new one is.
    store.delete_workload(scope, w.id).unwrap();
    assert!(matches!(
        store.delete_workload(scope, same.id),
        Err(StoreError::Conflict(_))
    ));
}

/// A resize moves an instance to a workload of another size: its vCPUs and memory follow, within
/// its tenant's quota (the instance's own usage is not counted twice); the workload it had is
/// kept as `previous_workload` until cleared.
pub(crate) fn a_resize_changes_the_size_within_the_quota<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let quota = Quota {
        instances: None,
        vcpus: Some(3),
        memory_mb: None,
    };
    let (t, w) = tenant_and_workload(&store, "acme", quota, 24);
    let scope = Scope::Tenant(t.id);
    let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    let sized = |vcpus: u32| {
        let flavor = store
            .create_flavor(NewFlavor {
                name: format!("f{vcpus}"),
                vcpus,
                memory_mb: 1024,
                disk_gb: 20,
                is_public: true,
            })
            .unwrap();
        store
            .create_workload(NewWorkload {
                owner: Some(t.id),
                name: format!("w{vcpus}"),
                flavor: flavor.id,
                image: w.image,
                user_data: String::new(),
                ephemeral: false,
            })
            .unwrap()
    };
    let (four, two) = (sized(4), sized(2));
    let resize = |workload: Uuid, version: u64| {
        store.update_instance(
            scope,
            i.id,
            version,
            InstanceChange {
                workload: Some(workload),
                resize: true,
                previous_workload: Some(Some(w.id)),
                ..InstanceChange::default()
            },
        )
    };
    assert!(matches!(
        resize(four.id, i.version),
        Err(StoreError::QuotaExceeded { .. })
    ));
    let resized = resize(two.id, i.version).unwrap();
    assert_eq!(
        (resized.vcpus, resized.memory_mb, resized.previous_workload),
        (2, 1024, Some(w.id))
    );
    let read = store.instance(scope, i.id).unwrap();
    assert_eq!(read, resized);
    // 2 + 1 fits the quota of 3; one more does not.
    store.create_instance(new_instance(&t, &w, "b")).unwrap();
    assert!(matches!(
        store.create_instance(new_instance(&t, &w, "c")),
        Err(StoreError::QuotaExceeded { .. })
    ));
    let cleared = store
        .update_instance(
            scope,
            i.id,
            read.version,
            InstanceChange {
                previous_workload: Some(None),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!(cleared.previous_workload, None);
}

pub(crate) fn metadata_and_lock_are_kept_and_bounded<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let scope = Scope::Tenant(t.id);
    let mut new = new_instance(&t, &w, "vm-1");
    new.metadata = Metadata::from([("role".to_string(), "web".to_string())]);
    new.user = Some(Uuid::from_u128(7));
    let mut bad = new.clone();
    bad.zone = Some("no zone".into());
    assert!(matches!(
        store.create_instance(bad),
        Err(StoreError::Invalid(_))
    ));
    new.zone = Some("edge-1".into());
    let i = store.create_instance(new.clone()).unwrap();
    assert_eq!(i.zone.as_deref(), Some("edge-1"));
    assert_eq!(i.metadata, new.metadata);
    assert_eq!(i.user, Some(Uuid::from_u128(7)));
    assert_eq!(i.locked_by, None);
    assert_eq!(store.instance(scope, i.id).unwrap(), i);

    // Too many items, an empty key, a long value: refused, nothing kept.
    let mut many = new.clone();
    many.metadata = (0..=Instance::MAX_METADATA)
        .map(|n| (format!("k{n}"), String::new()))
        .collect();
    assert!(matches!(
        store.create_instance(many),
        Err(StoreError::Invalid(_))
    ));
    for bad in [
        Metadata::from([(String::new(), "v".to_string())]),
        Metadata::from([("k".to_string(), "v".repeat(256))]),
        Metadata::from([("k".repeat(256), "v".to_string())]),
    ] {
        let change = InstanceChange {
            metadata: Some(bad),
            ..InstanceChange::default()
        };
        assert!(matches!(
            store.update_instance(scope, i.id, i.version, change),
            Err(StoreError::Invalid(_))
        ));
    }
    assert_eq!(store.instance(scope, i.id).unwrap(), i);

    // The whole metadata is replaced; the lock is set and lifted; both survive a reopen.
    // Lengths are characters, as Nova counts them: 255 of `é` are 510 bytes.
    let full: Metadata = (0..Instance::MAX_METADATA)
        .map(|n| (format!("k{n}"), "é".repeat(Instance::MAX_METADATA_TEXT)))
        .collect();
    let changed = store
        .update_instance(
            scope,
            i.id,
            i.version,
            InstanceChange {
                metadata: Some(full.clone()),
                locked_by: Some(Some(LockedBy::Admin)),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!(changed.metadata, full);
    assert_eq!(changed.locked_by, Some(LockedBy::Admin));
    // A change that names neither keeps both.
    let renamed = store
        .update_instance(
            scope,
            i.id,
            changed.version,
            InstanceChange {
                name: Some("vm-2".into()),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!(
        (&renamed.metadata, renamed.locked_by),
        (&full, Some(LockedBy::Admin))
    );
    drop(store);
    let store = fx.open();
    assert_eq!(store.instance(scope, i.id).unwrap(), renamed);
    let unlocked = store
        .update_instance(
            scope,
            i.id,
            renamed.version,
            InstanceChange {
                metadata: Some(Metadata::new()),
                locked_by: Some(None),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!((unlocked.metadata.len(), unlocked.locked_by), (0, None));
    assert_eq!(store.instance(scope, i.id).unwrap(), unlocked);
}

pub(crate) fn reservation_ids_are_kept_and_bounded<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let scope = Scope::Tenant(t.id);
    let made = Instance::new_reservation();
    assert!(made.starts_with("r-") && made.len() == 10, "{made}");
    assert!(
        made[2..]
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    );
    assert_ne!(made, Instance::new_reservation());
    // Two instances of one create share it; another create has its own, or none.
    let mut new = new_instance(&t, &w, "vm");
    new.reservation = Some(made.clone());
    let a = store.create_instance(new.clone()).unwrap();
    let b = store.create_instance(new.clone()).unwrap();
    let none = store
        .create_instance(new_instance(&t, &w, "other"))
        .unwrap();
    assert_eq!(a.reservation.as_deref(), Some(made.as_str()));
    assert_eq!(store.instance(scope, b.id).unwrap().reservation, Some(made));
    assert_eq!(store.instance(scope, none.id).unwrap().reservation, None);
    // A reservation id that is too long or of other characters is refused, nothing kept.
    for bad in [String::new(), "r-".repeat(33), "r-a b".into(), "r-é".into()] {
        new.reservation = Some(bad.clone());
        assert!(
            matches!(
                store.create_instance(new.clone()),
                Err(StoreError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    let listed = store
        .instances(scope, InstanceFilter::default(), Page::first(10))
        .unwrap();
    assert_eq!(listed.items.len(), 3);
}

/// `instance_briefs_on` gives each instance on the node (id, state with its reason, node,
/// version) as the whole record has it, in creation order, and none of another node's;
/// `instance_counts` counts every state that has instances; `instances_by_id` reads whole
/// records in the order asked, `None` for an unknown or deleted one.
pub(crate) fn briefs_and_counts_match_the_records<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    assert!(store.instance_counts().unwrap().is_empty());
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (node, other) = (Uuid::new_v4(), Uuid::new_v4());
    let states = [
        (Some(node), InstanceState::Active),
        (Some(node), InstanceState::Error("no room".into())),
        (Some(other), InstanceState::Active),
        (None, InstanceState::Pending),
        (Some(node), InstanceState::Exited),
    ];
    let mut made = Vec::new();
    for (k, (placed, state)) in states.iter().enumerate() {
        let i = store
            .create_instance(new_instance(&t, &w, &format!("vm-{k}")))
            .unwrap();
        let i = if *state == InstanceState::Pending {
            i
        } else {
            store
                .update_instance(
                    Scope::All,
                    i.id,
                    i.version,
                    InstanceChange {
                        state: Some(state.clone()),
                        node: Some(*placed),
                        ..InstanceChange::default()
                    },
                )
                .unwrap()
        };
        made.push(i);
    }
    let on_node: Vec<InstanceBrief> = made
        .iter()
        .filter(|i| i.node == Some(node))
        .map(InstanceBrief::from)
        .collect();
    assert_eq!(on_node.len(), 3);
    assert_eq!(store.instance_briefs_on(node).unwrap(), on_node);
    assert_eq!(
        store.instance_briefs_on(other).unwrap(),
        vec![InstanceBrief::from(&made[2])]
    );
    assert!(store.instance_briefs_on(Uuid::new_v4()).unwrap().is_empty());
    let counts = store.instance_counts().unwrap();
    let want: std::collections::BTreeMap<&str, u64> =
        [("active", 2), ("error", 1), ("pending", 1), ("exited", 1)]
            .into_iter()
            .collect();
    assert_eq!(counts, want);
    let stranger = Uuid::new_v4();
    let asked = [made[3].id, stranger, made[0].id, made[1].id];
    let read = store.instances_by_id(&asked).unwrap();
    assert_eq!(
        read,
        vec![
            Some(made[3].clone()),
            None,
            Some(made[0].clone()),
            Some(made[1].clone())
        ]
    );
    assert!(store.instances_by_id(&[]).unwrap().is_empty());
    store.delete_instance(Scope::All, made[0].id).unwrap();
    assert_eq!(store.instance_counts().unwrap().get("active"), Some(&1));
    assert_eq!(
        store.instance_briefs_on(node).unwrap(),
        on_node[1..].to_vec()
    );
    assert_eq!(
        store.instances_by_id(&[made[0].id, made[2].id]).unwrap(),
        vec![None, Some(made[2].clone())]
    );
}

/// In a batch each write succeeds or fails on its own (a refused one changes nothing, the others
/// stay), reads see the writes before them, and everything is there once the batch returns; a
/// batch inside a batch is part of it.
pub(crate) fn a_batch_keeps_each_write_on_its_own<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let mut made = Vec::new();
    let mut refused = None;
    let mut seen_inside = Vec::new();
    store
        .batch(&mut || {
            let a = store.create_instance(new_instance(&t, &w, "a")).unwrap();
            seen_inside.push(store.instance(Scope::All, a.id).unwrap());
            // A stale version: refused, and the batch goes on.
            refused = Some(store.update_instance(
                Scope::All,
                a.id,
                a.version + 7,
                InstanceChange {
                    state: Some(InstanceState::Active),
                    ..InstanceChange::default()
                },
            ));
            let a = store
                .update_instance(
                    Scope::All,
                    a.id,
                    a.version,
                    InstanceChange {
                        state: Some(InstanceState::Exited),
                        ..InstanceChange::default()
                    },
                )
                .unwrap();
            store
                .batch(&mut || {
                    made.push(store.create_instance(new_instance(&t, &w, "b")).unwrap());
                })
                .unwrap();
            made.push(a);
        })
        .unwrap();
    assert!(
        matches!(refused, Some(Err(StoreError::Conflict(_)))),
        "{refused:?}"
    );
    assert_eq!(seen_inside[0].state, InstanceState::Pending);
    for i in &made {
        assert_eq!(&store.instance(Scope::All, i.id).unwrap(), i);
    }
    assert_eq!(made[1].state, InstanceState::Exited);
    assert_eq!(made[1].version, 2);
    assert_eq!(store.instance_counts().unwrap().values().sum::<u64>(), 2);
}
