//! The suite: tenants' security groups, rules, ports' groups, floating IPs and network quotas
//! ([`NetworkStore`](crate::NetworkStore)).

use std::net::Ipv4Addr;

use uuid::Uuid;

use super::*;

fn pool() -> ssntp::payload::Cidr {
    "192.168.233.0/24".parse().unwrap()
}

fn new_group(tenant: Uuid, name: &str) -> NewSecurityGroup {
    NewSecurityGroup {
        tenant,
        name: name.into(),
        description: "web servers".into(),
    }
}

fn tcp_in(group: Uuid, port: u16) -> NewSecurityGroupRule {
    NewSecurityGroupRule {
        group,
        direction: Direction::Ingress,
        ethertype: EtherType::IPv4,
        protocol: Some("TCP".into()),
        port_min: Some(port),
        port_max: Some(port),
        remote: RuleRemote::Prefix("10.1.2.3/8".into()),
        description: String::new(),
    }
}

fn new_fip(tenant: Uuid, address: Option<[u8; 4]>) -> NewFloatingIp {
    NewFloatingIp {
        tenant,
        pool: pool(),
        address: address.map(Ipv4Addr::from),
        description: String::new(),
        port: None,
        fixed_ip: None,
    }
}

fn is_conflict<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::Conflict(_)))
}

pub(crate) fn security_group_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    let other = tenant_with(&store, "other", Quota::default(), 24);
    // The default group, made on first use, with OpenStack's four rules.
    let groups = store.security_groups(t.id).unwrap();
    assert_eq!(groups.len(), 1);
    let default = groups[0].clone();
    assert!(default.default);
    assert_eq!(default.name, "default");
    assert_eq!(default.rules.len(), 4);
    let ingress: Vec<_> = default
        .rules
        .iter()
        .filter(|r| r.direction == Direction::Ingress)
        .collect();
    assert_eq!(ingress.len(), 2);
    assert!(
        ingress
            .iter()
            .all(|r| r.remote == RuleRemote::Group(default.id))
    );
    assert_eq!(store.security_groups(t.id).unwrap()[0].id, default.id);

    let web = store.create_security_group(new_group(t.id, "web")).unwrap();
    assert_eq!(web.rules.len(), 2);
    assert!(web.rules.iter().all(|r| r.direction == Direction::Egress));
    assert!(is_conflict(
        store.create_security_group(new_group(t.id, "default"))
    ));
    assert!(matches!(
        store.create_security_group(new_group(t.id, &"x".repeat(256))),
        Err(StoreError::Invalid(_))
    ));
    // Rules: checked, normalized, no duplicates.
    let ssh = store
        .create_security_group_rule(t.id, tcp_in(web.id, 22))
        .unwrap();
    assert_eq!(ssh.protocol.as_deref(), Some("tcp"));
    assert_eq!(ssh.remote, RuleRemote::Prefix("10.0.0.0/8".into()));
    let again = store.create_security_group_rule(t.id, tcp_in(web.id, 22));
    assert!(
        matches!(&again, Err(StoreError::Conflict(m)) if m.contains(&ssh.id.to_string())),
        "{again:?}"
    );
    for bad in [
        NewSecurityGroupRule {
            protocol: Some("carrier-pigeon".into()),
            ..tcp_in(web.id, 22)
        },
        NewSecurityGroupRule {
            port_min: Some(30),
            port_max: Some(20),
            ..tcp_in(web.id, 22)
        },
        NewSecurityGroupRule {
            protocol: None,
            ..tcp_in(web.id, 22)
        },
        NewSecurityGroupRule {
            ethertype: EtherType::IPv6,
            ..tcp_in(web.id, 22)
        },
    ] {
        assert!(
            matches!(
                store.create_security_group_rule(t.id, bad.clone()),
                Err(StoreError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    let from_default = store
        .create_security_group_rule(
            t.id,
            NewSecurityGroupRule {
                remote: RuleRemote::Group(default.id),
                ..tcp_in(web.id, 80)
            },
        )
        .unwrap();
    // Another tenant sees and touches nothing of it.
    assert!(is_not_found(
        store.create_security_group_rule(other.id, tcp_in(web.id, 23))
    ));
    assert!(is_not_found(store.delete_security_group(other.id, web.id)));
    assert!(is_not_found(
        store.delete_security_group_rule(other.id, ssh.id)
    ));
    assert!(
        store
            .security_groups(other.id)
            .unwrap()
            .iter()
            .all(|g| g.tenant == other.id)
    );
    // Renames; `default` keeps its name.
    let renamed = store
        .update_security_group(
            t.id,
            web.id,
            SecurityGroupChange {
                name: Some("www".into()),
                description: Some(String::new()),
            },
        )
        .unwrap();
    assert_eq!(
        (renamed.name.as_str(), renamed.description.as_str()),
        ("www", "")
    );
    assert!(renamed.revision > web.revision);
    assert!(is_conflict(store.update_security_group(
        t.id,
        default.id,
        SecurityGroupChange {
            name: Some("mine".into()),
            ..SecurityGroupChange::default()
        }
    )));
    // Deleting: never `default`; a group named as a remote takes those rules with it.
    assert!(is_conflict(store.delete_security_group(t.id, default.id)));
    let db = store.create_security_group(new_group(t.id, "db")).unwrap();
    store
        .create_security_group_rule(
            t.id,
            NewSecurityGroupRule {
                remote: RuleRemote::Group(db.id),
                ..tcp_in(default.id, 5432)
            },
        )
        .unwrap();
    store.delete_security_group(t.id, db.id).unwrap();
    let now = store.security_groups(t.id).unwrap();
    assert_eq!(now.len(), 2);
    assert_eq!(now[0].rules.len(), 4);
    store
        .delete_security_group_rule(t.id, from_default.id)
        .unwrap();
    assert!(is_not_found(
        store.delete_security_group_rule(t.id, from_default.id)
    ));
    let before = store.security_groups(t.id).unwrap();
    assert_eq!(before[1].rules.len(), 3);
    drop(store);
    let store = fx.open();
    assert_eq!(store.security_groups(t.id).unwrap(), before);
    assert!(is_not_found(store.security_groups(Uuid::new_v4())));
}

pub(crate) fn network_quotas_bound_groups_rules_and_floating_ips<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    assert_eq!(store.network_quota(t.id).unwrap(), NetworkQuota::DEFAULT);
    let quota = NetworkQuota {
        floating_ips: 1,
        security_groups: 2,
        security_group_rules: 7,
    };
    store.set_network_quota(t.id, quota).unwrap();
    assert_eq!(store.network_quota(t.id).unwrap(), quota);
    assert!(matches!(
        store.set_network_quota(
            t.id,
            NetworkQuota {
                security_groups: 101,
                ..quota
            }
        ),
        Err(StoreError::Invalid(_))
    ));
    let web = store.create_security_group(new_group(t.id, "web")).unwrap();
    assert!(matches!(
        store.create_security_group(new_group(t.id, "db")),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::SecurityGroups,
            limit: 2
        })
    ));
    store
        .create_security_group_rule(t.id, tcp_in(web.id, 22))
        .unwrap();
    assert!(matches!(
        store.create_security_group_rule(t.id, tcp_in(web.id, 23)),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::SecurityGroupRules,
            limit: 7
        })
    ));
    store.create_floating_ip(new_fip(t.id, None)).unwrap();
    assert!(matches!(
        store.create_floating_ip(new_fip(t.id, None)),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::FloatingIps,
            limit: 1
        })
    ));
    assert_eq!(
        store.network_usage(t.id).unwrap(),
        NetworkQuota {
            floating_ips: 1,
            security_groups: 2,
            security_group_rules: 7
        }
    );
}

pub(crate) fn ports_keep_their_groups_until_the_instance_goes<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (other, ow) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let i = store.create_instance(new_instance(&t, &w, "a")).unwrap();
    let theirs = store
        .create_instance(new_instance(&other, &ow, "b"))
        .unwrap();
    let ports = store.port_groups(t.id).unwrap();
    assert_eq!(ports.of(i.id), vec![ports.default]);
    let web = store.create_security_group(new_group(t.id, "web")).unwrap();
    let set = store
        .set_port_groups(t.id, i.id, &[web.id, ports.default, web.id])
        .unwrap();
    assert_eq!(set, vec![web.id, ports.default]);
    assert_eq!(store.port_groups(t.id).unwrap().of(i.id), set);
    assert!(is_not_found(store.set_port_groups(
        t.id,
        theirs.id,
        &[web.id]
    )));
    assert!(is_not_found(store.set_port_groups(
        t.id,
        i.id,
        &[Uuid::new_v4()]
    )));
    let their_default = store.port_groups(other.id).unwrap().default;
    assert!(is_not_found(store.set_port_groups(
        t.id,
        i.id,
        &[their_default]
    )));
    assert!(is_conflict(store.delete_security_group(t.id, web.id)));
    store.set_port_groups(t.id, i.id, &[]).unwrap();
    assert!(store.port_groups(t.id).unwrap().of(i.id).is_empty());
    store.set_port_groups(t.id, i.id, &[web.id]).unwrap();
    store.delete_instance(Scope::Tenant(t.id), i.id).unwrap();
    assert!(store.port_groups(t.id).unwrap().set.is_empty());
    store.delete_security_group(t.id, web.id).unwrap();
}

/// `servers_networking` answers for the servers asked about as the three reads of the whole
/// tenant do, and for them only: another port's groups and another server's floating IP are
/// not in it, nor a floating IP associated with a server that went.
pub(crate) fn a_page_of_servers_reads_its_own_networking<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    // A tenant never touched: its `default` group is made by the read, as by the others.
    let none = store.servers_networking(t.id, &[]).unwrap();
    assert_eq!(none.groups.len(), 1);
    assert_eq!(none.ports.default, none.groups[0].id);
    assert!(none.ports.set.is_empty() && none.floating_ips.is_empty());
    let [a, b, c, gone] = ["a", "b", "c", "gone"]
        .map(|name| store.create_instance(new_instance(&t, &w, name)).unwrap());
    let web = store.create_security_group(new_group(t.id, "web")).unwrap();
    for i in [&a, &c, &gone] {
        store.set_port_groups(t.id, i.id, &[web.id]).unwrap();
    }
    let on = |port| FloatingIpChange {
        port: Some(Some(port)),
        ..FloatingIpChange::default()
    };
    let mut fips = Vec::new();
    for i in [&b, &c, &gone] {
        let f = store.create_floating_ip(new_fip(t.id, None)).unwrap();
        fips.push(store.update_floating_ip(t.id, f.id, on(i.id)).unwrap());
    }
    store.create_floating_ip(new_fip(t.id, None)).unwrap();
    store.delete_instance(Scope::Tenant(t.id), gone.id).unwrap();

    let page = store.servers_networking(t.id, &[a.id, b.id]).unwrap();
    assert_eq!(page.groups, store.security_groups(t.id).unwrap());
    let whole = store.port_groups(t.id).unwrap();
    assert_eq!(page.ports.default, whole.default);
    assert_eq!(page.ports.set.keys().collect::<Vec<_>>(), vec![&a.id]);
    for i in [&a, &b] {
        assert_eq!(page.ports.of(i.id), whole.of(i.id));
    }
    assert_eq!(page.ports.of(a.id), vec![web.id]);
    assert_eq!(page.floating_ips, vec![fips[0].clone()]);
    // Every server of the tenant that is left: as the whole tenant's reads answer for them.
    let all = store.servers_networking(t.id, &[a.id, b.id, c.id]).unwrap();
    assert_eq!(all.ports.set, whole.set);
    let associated: Vec<FloatingIp> = store
        .floating_ips(t.id)
        .unwrap()
        .into_iter()
        .filter(|f| f.port.is_some())
        .collect();
    assert_eq!(all.floating_ips, associated);
    assert_eq!(associated.len(), 2);
    assert!(is_not_found(
        store.servers_networking(Uuid::new_v4(), &[a.id])
    ));
}

/// A tenant whose networking nothing touched yet gets its `default` group from the first read,
/// a page of more servers than an etcd transaction takes compares (128) included: the ports
/// are read for display, not compared at the commit that writes the group.
pub(crate) fn a_large_page_of_a_new_tenants_servers_makes_its_default_group<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let ids: Vec<Uuid> = instances_made(&store, &t, &w, 130)
        .iter()
        .map(|i| i.id)
        .collect();
    let page = store.servers_networking(t.id, &ids).unwrap();
    assert_eq!(page.groups.len(), 1);
    assert!(page.groups[0].default);
    assert!(page.ports.set.is_empty() && page.floating_ips.is_empty());
    assert_eq!(store.security_groups(t.id).unwrap(), page.groups);
}

pub(crate) fn floating_ips_are_unique_per_pool_and_follow_their_port<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (other, ow) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let a = store.create_floating_ip(new_fip(t.id, None)).unwrap();
    assert_eq!(a.address, Ipv4Addr::new(192, 168, 233, 2));
    assert_eq!(a.port, None);
    let b = store.create_floating_ip(new_fip(other.id, None)).unwrap();
    assert_eq!(b.address, Ipv4Addr::new(192, 168, 233, 3));
    let picked = store
        .create_floating_ip(new_fip(t.id, Some([192, 168, 233, 77])))
        .unwrap();
    assert!(is_conflict(store.create_floating_ip(new_fip(
        other.id,
        Some([192, 168, 233, 77])
    ))));
    for outside in [[192, 168, 233, 1], [192, 168, 233, 255], [10, 0, 0, 5]] {
        assert!(matches!(
            store.create_floating_ip(new_fip(t.id, Some(outside))),
            Err(StoreError::Invalid(_))
        ));
    }
    // Associate with a port of the tenant (never another tenant's).
    let i = store.create_instance(new_instance(&t, &w, "a")).unwrap();
    let theirs = store
        .create_instance(new_instance(&other, &ow, "b"))
        .unwrap();
    let on = |port| FloatingIpChange {
        port: Some(Some(port)),
        ..FloatingIpChange::default()
    };
    let assoc = store.update_floating_ip(t.id, a.id, on(i.id)).unwrap();
    assert_eq!((assoc.port, assoc.fixed_ip), (Some(i.id), Some(i.ip)));
    assert!(assoc.revision > a.revision);
    assert!(is_conflict(store.update_floating_ip(
        t.id,
        picked.id,
        on(i.id)
    )));
    assert!(is_not_found(store.update_floating_ip(
        t.id,
        a.id,
        on(theirs.id)
    )));
    assert!(is_not_found(store.update_floating_ip(
        other.id,
        a.id,
        on(theirs.id)
    )));
    assert!(is_not_found(store.delete_floating_ip(other.id, a.id)));
    assert!(matches!(
        store.update_floating_ip(
            t.id,
            picked.id,
            FloatingIpChange {
                port: Some(Some(i.id)),
                fixed_ip: Some(Ipv4Addr::new(172, 31, 0, 9)),
                ..FloatingIpChange::default()
            }
        ),
        Err(StoreError::Invalid(_))
    ));
    let off = store
        .update_floating_ip(
            t.id,
            a.id,
            FloatingIpChange {
                port: Some(None),
                ..FloatingIpChange::default()
            },
        )
        .unwrap();
    assert_eq!((off.port, off.fixed_ip), (None, None));
    store.update_floating_ip(t.id, a.id, on(i.id)).unwrap();
    // The instance goes: the floating IP stays the tenant's, disassociated.
    store.delete_instance(Scope::Tenant(t.id), i.id).unwrap();
    let mine = store.floating_ips(t.id).unwrap();
    assert_eq!(
        mine.iter().map(|f| (f.address, f.port)).collect::<Vec<_>>(),
        vec![(a.address, None), (picked.address, None)]
    );
    // Released, an address is allocated again.
    store.delete_floating_ip(t.id, a.id).unwrap();
    assert!(is_not_found(store.delete_floating_ip(t.id, a.id)));
    let again = store.create_floating_ip(new_fip(other.id, None)).unwrap();
    assert_eq!(again.address, a.address);
    // A tenant that goes gives its addresses back.
    store.delete_tenant(t.id).unwrap_or_else(|e| panic!("{e}"));
    let taken = store
        .create_floating_ip(new_fip(other.id, Some([192, 168, 233, 77])))
        .unwrap();
    assert_eq!(taken.tenant, other.id);
    // A small pool runs out.
    let tiny = NewFloatingIp {
        pool: "10.9.9.0/30".parse().unwrap(),
        ..new_fip(other.id, None)
    };
    store.create_floating_ip(tiny.clone()).unwrap();
    assert!(matches!(
        store.create_floating_ip(tiny),
        Err(StoreError::Exhausted(_))
    ));
}
