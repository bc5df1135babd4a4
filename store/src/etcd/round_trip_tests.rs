//! What a read costs in round trips to etcd, counted by the store's call counter
//! ([`EtcdStore::calls`]): a page's networking, a node's briefs kept between its reports.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use uuid::Uuid;

use super::tests::{fixture, tenant_and_workload};
use super::*;

/// What a page of servers shows of their networking is one round trip, whatever the tenant's
/// ports number (the groups of a page of 100 ports, the tenant and its document, read
/// together), and one more to check the instances of its associated floating IPs, all at once.
#[test]
fn a_page_of_servers_networking_is_one_round_trip() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let (t, w) = tenant_and_workload(&store, Quota::default(), 1);
    let made: Vec<Uuid> = crate::suite::instances_made(&store, &t, &w, 100)
        .iter()
        .map(|i| i.id)
        .collect();
    let web = store
        .create_security_group(NewSecurityGroup {
            tenant: t.id,
            name: "web".into(),
            description: String::new(),
        })
        .unwrap();
    for id in made.iter().step_by(3) {
        store.set_port_groups(t.id, *id, &[web.id]).unwrap();
    }
    let before = store.calls();
    let page = store.servers_networking(t.id, &made).unwrap();
    assert_eq!(store.calls() - before, 1);
    assert_eq!(page.ports.set.len(), 34);
    for id in &made[..3] {
        let f = store
            .create_floating_ip(NewFloatingIp {
                tenant: t.id,
                pool: "192.168.233.0/24".parse().unwrap(),
                address: None,
                description: String::new(),
                port: Some(*id),
                fixed_ip: None,
            })
            .unwrap();
        assert_eq!(f.port, Some(*id));
    }
    let before = store.calls();
    let page = store.servers_networking(t.id, &made).unwrap();
    assert_eq!(store.calls() - before, 2);
    assert_eq!(page.floating_ips.len(), 3);
}

/// A node's briefs are read from etcd once (with the watch on the node indexes made then), then
/// answered again with no call, with this store's own writes under the node's index applied to
/// them (a change of one of its instances, one placed there or taken away, a deletion), in the
/// index's order; another node's writes leave them. Another process's writes are applied when
/// the watch delivers them (a store keeping none makes no watch, and reads every time).
#[test]
fn a_nodes_briefs_follow_this_stores_writes_under_its_index_with_no_read() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let other_process = fx.store_with(EtcdOptions {
        briefs_kept: Duration::ZERO,
        ..EtcdOptions::default()
    });
    let (t, w) = tenant_and_workload(&store, Quota::default(), 1);
    let (node, elsewhere) = (Uuid::new_v4(), Uuid::new_v4());
    let place = |store: &EtcdStore, i: &Instance, node: Uuid, state: InstanceState| {
        crate::suite::placed(store, i, node, state)
    };
    let made = crate::suite::instances_made(&store, &t, &w, 4);
    let mut on: Vec<Instance> = made[..3]
        .iter()
        .map(|i| place(&store, i, node, InstanceState::Active))
        .collect();
    let there = place(&store, &made[3], elsewhere, InstanceState::Active);
    let briefs = |on: &[Instance]| on.iter().map(InstanceBrief::from).collect::<Vec<_>>();
    // Read, then answered again with no call.
    let reads = |store: &EtcdStore| {
        let before = store.calls();
        let got = store.instance_briefs_on(node).unwrap();
        (got, store.calls() - before)
    };
    assert_eq!(reads(&store), (briefs(&on), 2));
    assert!(store.briefs.is_watched());
    assert_eq!(reads(&store), (briefs(&on), 0));
    // Another node's change leaves it.
    place(&store, &there, elsewhere, InstanceState::Exited);
    assert_eq!(reads(&store), (briefs(&on), 0));
    // A change of one of its instances is applied to the read.
    on[0] = place(&store, &on[0], node, InstanceState::Exited);
    assert_eq!(reads(&store), (briefs(&on), 0));
    // One moved away, one moved in, one deleted.
    let moved = place(&store, &on.remove(1), elsewhere, InstanceState::Active);
    assert_eq!(reads(&store), (briefs(&on), 0));
    // Back in its place: briefs come in creation order.
    on.insert(1, place(&store, &moved, node, InstanceState::Active));
    assert_eq!(reads(&store), (briefs(&on), 0));
    store.delete_instance(Scope::All, on.remove(0).id).unwrap();
    assert_eq!(reads(&store), (briefs(&on), 0));
    // What etcd holds, read afresh by a store that keeps nothing, is the same.
    assert_eq!(other_process.instance_briefs_on(node).unwrap(), briefs(&on));
    // Another process's change: seen there at once, here when the watch delivers it, still
    // with no call.
    on[0] = place(&other_process, &on[0], node, InstanceState::Exited);
    assert_eq!(reads(&other_process), (briefs(&on), 1));
    assert_eq!(reads(&other_process), (briefs(&on), 1));
    assert!(!other_process.briefs.is_watched());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (got, calls) = reads(&store);
        if (&got, calls) == (&briefs(&on), 0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the watch did not deliver the other process's write: {got:?} ({calls} calls)"
        );
        std::thread::yield_now();
    }
    // Its deletion too, and one placed there.
    store.delete_instance(Scope::All, on.remove(1).id).unwrap();
    let made = crate::suite::instances_made(&other_process, &t, &w, 1);
    on.push(place(&other_process, &made[0], node, InstanceState::Active));
    other_process
        .delete_instance(Scope::All, on.remove(0).id)
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reads(&store) != (briefs(&on), 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the watch did not deliver the other process's writes"
        );
        std::thread::yield_now();
    }
}

/// Instance counts come from the watch on the state index: the watch made and the states
/// counted at its first revision, then no round trip; this store's own writes count at once,
/// another process's once the watch delivers them.
#[test]
fn instance_counts_follow_the_state_index_with_no_read() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let other_process = fx.store_with(EtcdOptions::default());
    let (t, w) = tenant_and_workload(&store, Quota::default(), 1);
    let node = Uuid::new_v4();
    let made = crate::suite::instances_made(&store, &t, &w, 3);
    let counts = |store: &EtcdStore| {
        let before = store.calls();
        let got = store.instance_counts().unwrap();
        (got.into_iter().collect::<Vec<_>>(), store.calls() - before)
    };
    assert_eq!(counts(&store), (vec![("pending", 3)], 2));
    assert_eq!(counts(&store), (vec![("pending", 3)], 0));
    // This store's start and deletion, counted at once: from the tally once the watch has
    // delivered them (within 1 s, on a very busy machine perhaps not: then read from etcd).
    let own = |store: &EtcdStore, want: Vec<(&str, u64)>| {
        let (got, calls) = counts(store);
        assert_eq!(got, want);
        assert!(calls <= 1, "{calls} calls");
    };
    crate::suite::placed(&store, &made[0], node, InstanceState::Active);
    own(&store, vec![("active", 1), ("pending", 2)]);
    store.delete_instance(Scope::All, made[1].id).unwrap();
    own(&store, vec![("active", 1), ("pending", 1)]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while counts(&store) != (vec![("active", 1), ("pending", 1)], 0) {
        assert!(std::time::Instant::now() < deadline, "{:?}", counts(&store));
        std::thread::yield_now();
    }
    // Another process's start.
    crate::suite::placed(&other_process, &made[2], node, InstanceState::Active);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while counts(&store) != (vec![("active", 2)], 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "the watch did not deliver the other process's start: {:?}",
            counts(&store)
        );
        std::thread::yield_now();
    }
    // What etcd holds, counted afresh.
    assert_eq!(
        other_process.counted_at(0).unwrap(),
        store.instance_counts().ok()
    );
}
