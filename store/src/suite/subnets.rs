//! The suite: subnets, addresses and CNCIs ([`InstanceStore`](crate::InstanceStore)).

use std::collections::HashSet;
use std::net::Ipv4Addr;

use super::*;

pub(crate) fn addresses_are_allocated_and_reused<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    // A /29 holds 8 addresses: network, gateway, 5 instances, broadcast.
    let (t, w) = tenant_and_workload(&store, "small-net", Quota::default(), 29);
    let made = instances_made(&store, &t, &w, 7);
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

pub(crate) fn small_subnets_get_distinct_keys<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    // Each /30 holds one instance: 80 instances make 80 subnets over more than one /24 (64 /30s
    // each), beside /28s, /25s and /24s of other tenants, every prefix in between included.
    let mut expected = 0;
    for (prefix, instances) in [
        (30u8, 80u32),
        (28, 30),
        (25, 130),
        (24, 2),
        (26, 70),
        (29, 12),
    ] {
        let (t, w) = tenant_and_workload(&store, &format!("p{prefix}"), Quota::default(), prefix);
        for n in 0..instances {
            store
                .create_instance(new_instance(&t, &w, &format!("vm{n}")))
                .unwrap();
        }
        let per_subnet = crate::net::block_size(prefix) - 3;
        expected += u64::from(instances).div_ceil(per_subnet);
    }
    let subnets = store.subnets(Scope::All).unwrap();
    assert_eq!(subnets.len() as u64, expected);
    let keys: HashSet<u32> = subnets
        .iter()
        .map(|s| crate::net::subnet_key(&s.cidr))
        .collect();
    assert_eq!(keys.len(), subnets.len(), "a key is shared: {subnets:?}");
    assert!(keys.iter().all(|&k| k != 0 && k < 1 << 24), "{keys:?}");
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

pub(crate) fn full_subnets_are_listed_and_keep_their_cnci<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    // A /30 holds one instance: each creation fills a subnet.
    let (t, w) = tenant_and_workload(&store, "tiny", Quota::default(), 30);
    let made: Vec<Instance> = (0..3)
        .map(|n| {
            store
                .create_instance(new_instance(&t, &w, &format!("vm{n}")))
                .unwrap()
        })
        .collect();
    let mine = store.subnets(Scope::Tenant(t.id)).unwrap();
    assert_eq!(
        mine.iter().map(|s| s.cidr.to_string()).collect::<Vec<_>>(),
        ["172.16.0.0/30", "172.16.0.4/30", "172.16.0.8/30"],
        "every subnet, full or not, in address order"
    );
    assert_eq!(store.subnets(Scope::All).unwrap(), mine);
    // A CNCI on a full subnet; the subnet stays while it does.
    let c = store.create_cnci(mine[1].id).unwrap();
    assert_eq!((c.tenant, c.cidr), (t.id, mine[1].cidr));
    assert!(matches!(
        store.create_cnci(mine[1].id),
        Err(StoreError::Conflict(_))
    ));
    store.delete_instance(Scope::All, made[1].id).unwrap();
    assert_eq!(store.subnets(Scope::Tenant(t.id)).unwrap(), mine);
    assert!(
        store.delete_tenant(t.id).is_err(),
        "a tenant with subnets stays"
    );
    // Its address is given again, in the subnet its CNCI kept.
    let again = store
        .create_instance(new_instance(&t, &w, "again"))
        .unwrap();
    assert_eq!((again.subnet, again.ip), (made[1].subnet, made[1].ip));
    store.delete_instance(Scope::All, again.id).unwrap();
    store.delete_cnci(c.id).unwrap();
    assert_eq!(
        store.subnets(Scope::Tenant(t.id)).unwrap(),
        vec![mine[0].clone(), mine[2].clone()]
    );
    // A full subnet whose CNCI goes stays with its instance.
    let c0 = store.create_cnci(mine[0].id).unwrap();
    store.delete_cnci(c0.id).unwrap();
    for i in [&made[0], &made[2]] {
        store.delete_instance(Scope::All, i.id).unwrap();
    }
    assert!(store.subnets(Scope::All).unwrap().is_empty());
    store.delete_tenant(t.id).unwrap();
}
