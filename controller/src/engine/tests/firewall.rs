//! Port firewalls: what a START carries, and what goes to the nodes when the groups, their
//! rules, or their members change.

use super::*;
use ssntp::payload::{Cidr, Firewall, FirewallDirection, FirewallRule, MacAddr, NodeNetwork};
use std::net::{IpAddr, Ipv4Addr};
use store::{Direction, EtherType, NewSecurityGroupRule, RuleRemote};

use crate::engine::firewall::{Push, compile};

fn host(ip: Ipv4Addr) -> Cidr {
    Cidr {
        addr: IpAddr::V4(ip),
        prefix: 32,
    }
}

/// OpenStack's default group, compiled: egress open, ingress from the group's members.
fn default_rules(members: &[Ipv4Addr]) -> Vec<FirewallRule> {
    vec![
        FirewallRule {
            direction: FirewallDirection::Egress,
            protocol: None,
            port_min: None,
            port_max: None,
            remote: None,
        },
        FirewallRule {
            direction: FirewallDirection::Ingress,
            protocol: None,
            port_min: None,
            port_max: None,
            remote: Some(members.iter().copied().map(host).collect()),
        },
    ]
}

fn start_firewall(sent: &[Payload], id: Uuid) -> Firewall {
    starts(sent)
        .into_iter()
        .find(|s| s.instance_uuid == id)
        .and_then(|s| s.networking.as_ref())
        .and_then(|n| n.firewall.clone())
        .expect("a START with a firewall")
}

/// A world with tenant networks and one instance active on NODE, which reported an address.
fn port_world() -> (World, Instance, tokio::sync::mpsc::Receiver<Push>) {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let pushes = w.engine.firewall_pushes().expect("the pushes, once");
    w.node_connected(NODE, NodeType::ComputeNode);
    let made = w.launch(1).remove(0);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.event(added(&cnci));
    let instance = w.instance(made.id);
    let fw = start_firewall(&w.out.take(), instance.id);
    assert_eq!(fw.rules, default_rules(&[instance.ip]));
    fw.check().unwrap();
    w.stats_with(
        NODE,
        ssntp::payload::NodeState::Ready,
        &[(instance.id, Reported::Active)],
        vec![NodeNetwork {
            ip: IpAddr::V4(Ipv4Addr::new(10, 1, 0, 7)),
            mac: MacAddr([0; 6]),
        }],
    );
    (w, instance, pushes)
}

fn drain(pushes: &mut tokio::sync::mpsc::Receiver<Push>) -> Vec<Push> {
    let mut all = Vec::new();
    while let Ok(push) = pushes.try_recv() {
        all.push(push);
    }
    all
}

fn ssh_rule(w: &World) -> store::SecurityGroupRule {
    let default = w
        .engine
        .store()
        .security_groups(w.tenant)
        .unwrap()
        .into_iter()
        .find(|g| g.default)
        .unwrap();
    w.engine
        .store()
        .create_security_group_rule(
            w.tenant,
            NewSecurityGroupRule {
                group: default.id,
                direction: Direction::Ingress,
                ethertype: EtherType::IPv4,
                protocol: Some("tcp".into()),
                port_min: Some(22),
                port_max: Some(22),
                remote: RuleRemote::Prefix("0.0.0.0/0".into()),
                description: String::new(),
            },
        )
        .unwrap()
}

#[test]
fn the_start_carries_the_port_firewall_and_a_new_member_reaches_the_others() {
    let (w, first, mut pushes) = port_world();
    // Nothing changed for the first port since its START.
    w.engine.sweep(SystemTime::now()).unwrap();
    assert!(drain(&mut pushes).is_empty());
    let second = w.launch(1).remove(0);
    let second = w.instance(second.id);
    let fw = start_firewall(&w.out.take(), second.id);
    let both = {
        let mut both = [first.ip, second.ip];
        both.sort();
        both
    };
    assert_eq!(fw.rules, default_rules(&both));
    // The first port's ingress now takes the second's address: its node is told, by the sweep.
    assert!(drain(&mut pushes).is_empty());
    w.engine.sweep(SystemTime::now()).unwrap();
    let sent = drain(&mut pushes);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].instance, first.id);
    assert_eq!(sent[0].node, NODE);
    assert_eq!(sent[0].addr.ip(), IpAddr::V4(Ipv4Addr::new(10, 1, 0, 7)));
    assert_eq!(sent[0].firewall.rules, default_rules(&both));
    assert!(sent[0].firewall.revision >= fw.revision);
}

#[test]
fn rule_changes_are_pushed_once_and_failures_again_by_the_sweep() {
    let (w, instance, mut pushes) = port_world();
    let rule = ssh_rule(&w);
    w.engine.security_groups_changed(w.tenant);
    let sent = drain(&mut pushes);
    assert_eq!(sent.len(), 1);
    let ssh = FirewallRule {
        direction: FirewallDirection::Ingress,
        protocol: Some(6),
        port_min: Some(22),
        port_max: Some(22),
        remote: Some(vec!["0.0.0.0/0".parse().unwrap()]),
    };
    assert!(sent[0].firewall.rules.contains(&ssh), "{:?}", sent[0]);
    // The same rules again: nothing goes.
    w.engine.security_groups_changed(w.tenant);
    assert!(drain(&mut pushes).is_empty());
    // The push failed (the node was unreachable): the sweep sends it again.
    w.engine.firewall_outcomes().failed(&sent[0]);
    w.engine.sweep(SystemTime::now()).unwrap();
    let again = drain(&mut pushes);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].firewall.rules, sent[0].firewall.rules);
    assert!(again[0].firewall.revision > sent[0].firewall.revision);
    // The rule goes: so does it from the port.
    w.engine
        .store()
        .delete_security_group_rule(w.tenant, rule.id)
        .unwrap();
    w.engine.security_groups_changed(w.tenant);
    let removed = drain(&mut pushes);
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].firewall.rules, default_rules(&[instance.ip]));
}

#[test]
fn a_port_in_other_groups_gets_their_rules_only() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let store = w.engine.store();
    let web = store
        .create_security_group(store::NewSecurityGroup {
            tenant: w.tenant,
            name: "web".into(),
            description: String::new(),
        })
        .unwrap();
    let made = w.launch(1).remove(0);
    store.set_port_groups(w.tenant, made.id, &[web.id]).unwrap();
    let groups = store.security_groups(w.tenant).unwrap();
    let ports = store.port_groups(w.tenant).unwrap();
    let members = [crate::engine::firewall::Member {
        instance: made.id,
        ip: Ipv4Addr::new(172, 16, 0, 2),
    }];
    // A new group has Neutron's two egress rules (IPv4, IPv6): only the IPv4 one counts.
    assert_eq!(
        compile(made.id, &groups, &ports, &members),
        vec![FirewallRule {
            direction: FirewallDirection::Egress,
            protocol: None,
            port_min: None,
            port_max: None,
            remote: None,
        }]
    );
    // Another port, in `default`, whose ingress names `default`: the web port is not in it.
    let other = Uuid::from_u128(99);
    assert_eq!(
        compile(other, &groups, &ports, &members),
        default_rules(&[])
    );
}

#[test]
fn protocols_are_numbered() {
    use crate::engine::firewall::protocol_number;
    assert_eq!(protocol_number("tcp"), Some(6));
    assert_eq!(protocol_number("icmp"), Some(1));
    assert_eq!(protocol_number("ipv6-icmp"), Some(58));
    assert_eq!(protocol_number("132"), Some(132));
    assert_eq!(protocol_number("300"), None);
    assert_eq!(protocol_number("nope"), None);
}
