//! What the store finds under a prefix that other versions of its code wrote: the schema
//! version, networking records that still hold their full subnets, and node index keys that hold
//! no brief.
#![allow(clippy::unwrap_used)]

use uuid::Uuid;

use super::tests::{Fixture, admin_listing, fixture};
use super::*;

/// The prefix's schema version rewritten as `version`.
fn schema_written(fx: &Fixture, version: u32) {
    fx.store_with(EtcdOptions::default())
        .atomically("test", |tx| {
            let key = tx.keys().schema();
            tx.put(&key, &records::SchemaRec { version })
        })
        .unwrap();
}

#[test]
fn an_older_schema_is_raised_and_then_refused_by_older_code() {
    let Some(fx) = fixture() else { return };
    schema_written(&fx, SCHEMA_VERSION - 1);
    let again = fx.store_with(EtcdOptions::default());
    assert_eq!(again.schema_version().unwrap(), SCHEMA_VERSION);
    // This code still opens it (code that knows only the older version refuses it now).
    assert!(EtcdStore::connect(&[fx.server.endpoint()], &fx.prefix, &fx.transport()).is_ok());
}

#[test]
fn a_newer_schema_is_refused() {
    let Some(fx) = fixture() else { return };
    schema_written(&fx, SCHEMA_VERSION + 1);
    let err = EtcdStore::connect(&[fx.server.endpoint()], &fx.prefix, &fx.transport()).unwrap_err();
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            found: SCHEMA_VERSION + 1,
            known: SCHEMA_VERSION
        }
    );
}

/// Every key under `prefix`, as read.
fn keys_under(store: &EtcdStore, prefix: &str) -> Vec<Kv> {
    store
        .range(prefix, &super::keys::prefix_end(prefix), 0, |o| o)
        .unwrap()
        .1
}

/// The keys of `tenant`'s full subnets.
fn full_subnet_keys(store: &EtcdStore, tenant: Uuid) -> Vec<Kv> {
    keys_under(store, &store.keys.full_subnets(tenant))
}

#[test]
fn networking_records_of_before_hold_full_subnets_and_still_work() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    // A /30 holds one instance: each creation fills a subnet.
    let (t, w) = crate::suite::tenant_and_workload(&store, "old", Quota::default(), 30);
    let made: Vec<Instance> = (0..3)
        .map(|n| {
            store
                .create_instance(crate::suite::new_instance(&t, &w, &format!("vm{n}")))
                .unwrap()
        })
        .collect();
    let full_keys = || full_subnet_keys(&store, t.id);
    let full = full_keys();
    assert_eq!(full.len(), 3, "a full subnet has a key of its own");
    // Rewritten as the code of before kept them: every subnet in the tenant's record.
    store
        .atomically("test", |tx| {
            let mut net = super::identity::net_in(tx, t.id)?;
            assert!(net.subnets.is_empty());
            for kv in &full {
                net.subnets.push(kv.decode()?);
                tx.delete(&kv.key);
            }
            let key = tx.keys().net(t.id);
            tx.put(&key, &net)
        })
        .unwrap();
    let listed = |n| {
        let subnets = store.subnets(Scope::Tenant(t.id)).unwrap();
        assert_eq!(subnets.len(), n, "{subnets:?}");
        assert_eq!(store.subnets(Scope::All).unwrap(), subnets);
    };
    listed(3);
    // An instance deleted from such a subnet empties it, and it goes.
    store.delete_instance(Scope::All, made[0].id).unwrap();
    listed(2);
    assert!(full_keys().is_empty());
    // The next creation carves the lowest free block again, and moves every full subnet out.
    let next = store
        .create_instance(crate::suite::new_instance(&t, &w, "next"))
        .unwrap();
    assert_eq!(next.subnet, made[0].subnet);
    assert_eq!(full_keys().len(), 3);
    let net = store.read(|tx| super::identity::net_in(tx, t.id)).unwrap();
    assert!(net.subnets.is_empty());
    listed(3);
}

#[test]
fn a_record_of_before_with_many_full_subnets_is_moved_out_a_share_per_creation() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    // 130 /30s, one instance each: more full subnets than one transaction may write.
    let (t, w) = crate::suite::tenant_and_workload(&store, "many", Quota::default(), 30);
    for n in 0..130 {
        store
            .create_instance(crate::suite::new_instance(&t, &w, &format!("vm{n}")))
            .unwrap();
    }
    let full_keys = || full_subnet_keys(&store, t.id);
    let full = full_keys();
    assert_eq!(full.len(), 130);
    // Rewritten as the code of before kept them, in several transactions (test setup only).
    store
        .atomically("test", |tx| {
            let mut net = super::identity::net_in(tx, t.id)?;
            for kv in &full {
                net.subnets.push(kv.decode()?);
            }
            let key = tx.keys().net(t.id);
            tx.put(&key, &net)
        })
        .unwrap();
    for share in full.chunks(100) {
        store
            .atomically("test", |tx| {
                for kv in share {
                    tx.delete(&kv.key);
                }
                Ok(())
            })
            .unwrap();
    }
    assert!(full_keys().is_empty());
    let in_record = || {
        store
            .read(|tx| super::identity::net_in(tx, t.id))
            .unwrap()
            .subnets
            .len()
    };
    // Each creation moves a share out, the subnet it fills too.
    let mut made = 0;
    while in_record() > 0 {
        store
            .create_instance(crate::suite::new_instance(&t, &w, "next"))
            .unwrap();
        made += 1;
        assert!(made <= 5, "{} still in the record", in_record());
    }
    // 32 of before each time: 130 take five creations.
    assert_eq!(made, 5);
    assert_eq!(full_keys().len(), 135);
    assert_eq!(store.subnets(Scope::Tenant(t.id)).unwrap().len(), 135);
}

/// The index keys of `node`, as read.
fn index_keys(store: &EtcdStore, node: Uuid) -> Vec<Kv> {
    keys_under(store, &store.keys.on_nodes(node))
}

#[test]
fn node_index_keys_of_schema_2_hold_no_brief_and_still_give_one() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let (t, w) = crate::suite::tenant_and_workload(&store, "briefs", Quota::default(), 24);
    let node = Uuid::new_v4();
    let placed: Vec<Instance> = [InstanceState::Active, InstanceState::Pending]
        .into_iter()
        .chain([InstanceState::Error("no room".into())])
        .enumerate()
        .map(|(n, state)| {
            let i = store
                .create_instance(crate::suite::new_instance(&t, &w, &format!("vm{n}")))
                .unwrap();
            crate::suite::placed(&store, &i, node, state)
        })
        .collect();
    let briefs: Vec<InstanceBrief> = placed.iter().map(InstanceBrief::from).collect();
    // Schema 3: each index key holds its brief, the error's reason too.
    let index = index_keys(&store, node);
    assert_eq!(index.len(), 3);
    assert!(index.iter().all(|kv| !kv.value.is_empty()));
    assert_eq!(store.instance_briefs_on(node).unwrap(), briefs);
    // Rewritten as code of schema 2 wrote them: empty. The briefs come from the records.
    store
        .atomically("test", |tx| {
            for kv in &index {
                tx.put_text(&kv.key, "");
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(store.instance_briefs_on(node).unwrap(), briefs);
    // The next change of a record writes its brief again; a move takes the key with it.
    let other = Uuid::new_v4();
    let moved = store
        .update_instance(
            Scope::All,
            placed[0].id,
            placed[0].version,
            InstanceChange {
                node: Some(Some(other)),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    let started = store
        .update_instance(
            Scope::All,
            placed[1].id,
            placed[1].version,
            InstanceChange {
                state: Some(InstanceState::Active),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    assert_eq!(
        store.instance_briefs_on(node).unwrap(),
        vec![InstanceBrief::from(&started), briefs[2].clone()]
    );
    // The started one's brief written again, the other's key as schema 2 left it.
    let mut held: Vec<(Uuid, bool)> = index_keys(&store, node)
        .iter()
        .map(|kv| {
            let id = Uuid::parse_str(kv.key.rsplit('/').next().unwrap()).unwrap();
            (id, kv.value.is_empty())
        })
        .collect();
    held.sort_unstable();
    let mut want = vec![(started.id, false), (placed[2].id, true)];
    want.sort_unstable();
    assert_eq!(held, want);
    assert_eq!(
        store.instance_briefs_on(other).unwrap(),
        vec![InstanceBrief::from(&moved)]
    );
    // An index key left with no record (a layout gone wrong) is no instance.
    store
        .atomically("test", |tx| {
            tx.put_text(&tx.keys().on_node(other, Uuid::new_v4()), "");
            Ok(())
        })
        .unwrap();
    assert_eq!(store.instance_briefs_on(other).unwrap().len(), 1);
}

#[test]
fn a_prefix_raised_from_schema_2_counts_states_from_the_records() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let (t, w) = crate::suite::tenant_and_workload(&store, "counts", Quota::default(), 24);
    let made: Vec<Instance> = (0..3)
        .map(|n| {
            store
                .create_instance(crate::suite::new_instance(&t, &w, &format!("vm{n}")))
                .unwrap()
        })
        .collect();
    let active = InstanceChange {
        state: Some(InstanceState::Active),
        ..InstanceChange::default()
    };
    store
        .update_instance(Scope::All, made[0].id, made[0].version, active)
        .unwrap();
    let want: std::collections::BTreeMap<&str, u64> =
        [("active", 1), ("pending", 2)].into_iter().collect();
    // A new prefix has the state index whole: counted from it.
    let marker = store.keys.state_index();
    assert!(store.get_many(std::slice::from_ref(&marker)).unwrap()[0].is_some());
    assert_eq!(store.instance_counts().unwrap(), want);
    // As a prefix raised from schema 2 has it: no marker, and an instance of before not in the
    // index. The records are counted by a store opened on it (one that counted before keeps
    // its tally from the watch on the index: the marker is never deleted but here).
    store
        .atomically("test", |tx| {
            tx.delete(&marker);
            tx.delete(&tx.keys().in_state("pending", made[2].id));
            Ok(())
        })
        .unwrap();
    let raised = fx.store_with(EtcdOptions::default());
    assert_eq!(raised.instance_counts().unwrap(), want);
    assert_eq!(raised.instance_counts().unwrap(), want);
}

#[test]
fn every_tenants_listing_pages_the_creation_index_and_a_prefix_raised_from_schema_3_the_records() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let (a, wa) = crate::suite::tenant_and_workload(&store, "a", Quota::default(), 24);
    let (b, wb) = crate::suite::tenant_and_workload(&store, "b", Quota::default(), 24);
    let mut made: Vec<Uuid> = (0..9)
        .map(|n| {
            let (t, w) = if n % 3 == 0 { (&b, &wb) } else { (&a, &wa) };
            let new = crate::suite::new_instance(t, w, &format!("vm{n}"));
            store.create_instance(new).unwrap().id
        })
        .collect();
    // A new prefix has the index whole: one key per instance, in creation order.
    let marker = store.keys.created_index();
    assert!(store.get_many(std::slice::from_ref(&marker)).unwrap()[0].is_some());
    let indexed = |store: &EtcdStore| -> Vec<Uuid> {
        keys_under(store, &store.keys.creations())
            .iter()
            .map(|kv| kv.key.rsplit('/').next().unwrap().parse().unwrap())
            .collect()
    };
    assert_eq!(indexed(&store), made);
    assert_eq!(admin_listing(&store, 4), made);
    // An instance's key goes with it.
    store.delete_instance(Scope::All, made[4]).unwrap();
    made.remove(4);
    assert_eq!(indexed(&store), made);
    assert_eq!(admin_listing(&store, 3), made);
    // As a prefix raised from schema 3 has it: no marker, and instances of before not in the
    // index. The records are paged, in the same order.
    store
        .atomically("test", |tx| {
            tx.delete(&marker);
            for id in &made[..2] {
                let rec: records::InstanceRec = tx.get_json(&tx.keys().instance(*id))?.unwrap();
                tx.delete(&tx.keys().created(rec.stamp.unwrap(), *id));
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(admin_listing(&store, 3), made);
    assert_eq!(admin_listing(&store, 100), made);
}
