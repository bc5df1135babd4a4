//! The hub over the fake kernel, and the concentrator over SSNTP with a fake scheduler.

use super::*;
use crate::cnci::ops::CnciOps;
use crate::net::{Cidr, TunnelKind, VXLAN_PORT};
use std::net::IpAddr;
use uuid::Uuid;

const KEY: u32 = 0x7001;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn hub(kind: TunnelKind) -> (Hub<FakeCnciOps>, FakeCnciOps) {
    let ops = FakeCnciOps::new();
    let hub = Hub::new(
        ops.clone(),
        HubConfig {
            local: ip("198.18.0.100"),
            tunnel: kind,
            vxlan_port: VXLAN_PORT,
        },
    );
    (hub, ops)
}

fn node(n: u8) -> NodeSubnet {
    NodeSubnet {
        node: Uuid::from_u128(u128::from(n)),
        node_ip: ip(&format!("198.18.0.{n}")),
        tenant: Uuid::from_u128(0x7e),
        subnet: Cidr {
            addr: ip("10.250.0.0"),
            prefix: 24,
        },
        key: KEY,
    }
}

#[tokio::test]
async fn vxlan_one_hub_per_subnet_a_flood_entry_per_node() {
    let (mut hub, ops) = hub(TunnelKind::Vxlan);
    let (a, b) = (node(1), node(2));
    assert_eq!(hub.add(&a).await, Ok(Outcome::Added { first: true }));
    assert_eq!(hub.add(&b).await, Ok(Outcome::Added { first: false }));
    assert_eq!(hub.add(&b).await, Ok(Outcome::Unchanged), "a repeat");
    let links = ops.links();
    let (bridge, vx) = (hub::bridge_name(KEY), hub::hub_name(KEY));
    assert_eq!(links.len(), 2, "{links:#?}");
    assert!(links[&bridge].up);
    let v = &links[&vx];
    assert_eq!(v.kind, "vxlan 28673 198.18.0.100 4789");
    assert_eq!(v.master.as_deref(), Some(bridge.as_str()));
    assert!(v.up && v.hairpin);
    let flood: Vec<_> = ops.flood().into_iter().collect();
    assert_eq!(
        flood,
        vec![(vx.clone(), a.node_ip), (vx.clone(), b.node_ip)]
    );

    assert_eq!(hub.remove(&a).await, Ok(Outcome::Removed { last: false }));
    assert_eq!(ops.flood().len(), 1);
    assert_eq!(hub.remove(&a).await, Ok(Outcome::Unchanged));
    assert_eq!(hub.remove(&b).await, Ok(Outcome::Removed { last: true }));
    assert!(ops.links().is_empty() && ops.flood().is_empty());
}

#[tokio::test]
async fn gretap_one_tunnel_per_node() {
    let (mut hub, ops) = hub(TunnelKind::GreTap);
    let (a, b) = (node(1), node(2));
    hub.add(&a).await.unwrap();
    hub.add(&b).await.unwrap();
    let links = ops.links();
    assert_eq!(links.len(), 3, "{links:#?}");
    let ga = &links[&hub::gretap_name(KEY, a.node_ip)];
    assert_eq!(ga.kind, "gretap 28673 198.18.0.100 198.18.0.1");
    assert_eq!(ga.master, Some(hub::bridge_name(KEY)));
    assert!(ga.up);
    assert_ne!(
        hub::gretap_name(KEY, a.node_ip),
        hub::gretap_name(KEY, b.node_ip)
    );
    assert!(hub::gretap_name(KEY, a.node_ip).len() <= 15);
    hub.remove(&a).await.unwrap();
    assert_eq!(ops.links().len(), 2);
    hub.remove(&b).await.unwrap();
    assert!(ops.links().is_empty());
}

#[tokio::test]
async fn a_key_of_another_subnet_is_refused_and_a_failed_first_add_leaves_nothing() {
    let (mut hub, ops) = hub(TunnelKind::Vxlan);
    ops.fail_next("set hairpin");
    assert!(matches!(hub.add(&node(1)).await, Err(HubError::Ops(_))));
    assert!(ops.links().is_empty(), "{:#?}", ops.links());
    hub.add(&node(1)).await.unwrap();
    let mut other = node(2);
    other.tenant = Uuid::from_u128(0xb);
    assert!(matches!(
        hub.add(&other).await,
        Err(HubError::Conflict { key: KEY, .. })
    ));
    assert_eq!(hub.nodes(KEY).len(), 1);
}

#[tokio::test]
async fn a_node_that_moves_leaves_its_old_end() {
    let (mut hub, ops) = hub(TunnelKind::Vxlan);
    let a = node(1);
    hub.add(&a).await.unwrap();
    let mut moved = a;
    moved.node_ip = ip("198.18.0.9");
    hub.add(&moved).await.unwrap();
    let flood: Vec<_> = ops.flood().into_iter().map(|(_, ip)| ip).collect();
    assert_eq!(flood, vec![moved.node_ip]);
}

#[tokio::test]
async fn a_restart_rebuilds_from_aliases_and_flood_entries() {
    for kind in [TunnelKind::Vxlan, TunnelKind::GreTap] {
        let (mut before, ops) = hub(kind);
        let (a, b) = (node(1), node(2));
        before.add(&a).await.unwrap();
        before.add(&b).await.unwrap();
        let links = ops.links();
        let mut after = Hub::new(ops.clone(), *before.config());
        let r = after.rebuild().await.unwrap();
        assert_eq!(
            r.subnets[&KEY],
            [a.node_ip, b.node_ip].into_iter().collect(),
            "{kind}"
        );
        assert!(r.deleted.is_empty(), "{r:?}");
        assert_eq!(ops.links(), links, "nothing changed in the kernel");
        // A repeat names an end; a removal of an unnamed one goes by its address.
        assert_eq!(after.add(&a).await, Ok(Outcome::Unchanged));
        assert_eq!(after.nodes(KEY), vec![(a.node, a.node_ip)]);
        assert_eq!(after.remove(&b).await, Ok(Outcome::Removed { last: false }));
        assert_eq!(after.remove(&a).await, Ok(Outcome::Removed { last: true }));
        assert!(ops.links().is_empty() && ops.flood().is_empty(), "{kind}");
        // Another tenant's subnet with the key is still refused after a restart.
        after.add(&a).await.unwrap();
        let mut again = Hub::new(ops.clone(), *before.config());
        again.rebuild().await.unwrap();
        let mut other = node(3);
        other.tenant = Uuid::from_u128(0xb);
        assert!(matches!(
            again.add(&other).await,
            Err(HubError::Conflict { .. })
        ));
        again.remove(&a).await.unwrap();
    }
}

#[tokio::test]
async fn a_restart_deletes_what_it_cannot_read_and_subnets_with_no_end() {
    let (mut before, ops) = hub(TunnelKind::Vxlan);
    let a = node(1);
    before.add(&a).await.unwrap();
    // A crash in the middle of the last removal: the flood entry went, the links stayed.
    ops.flood_del(&hub::hub_name(KEY), a.node_ip).await.unwrap();
    // A bridge made but never named.
    ops.create_bridge(&hub::bridge_name(9)).await.unwrap();
    let mut after = Hub::new(ops.clone(), *before.config());
    let r = after.rebuild().await.unwrap();
    assert!(r.subnets.is_empty(), "{r:?}");
    assert_eq!(r.deleted.len(), 3, "{r:?}");
    assert!(ops.links().is_empty(), "{:#?}", ops.links());
}

mod edge {
    use super::*;
    use crate::cnci::edge::{Edge, EdgeConfig};
    use crate::cnci::nat::FakeNat;
    use ssntp::payload::{MacAddr, PublicIpCommand, PublicIpFailureReason};
    use std::net::Ipv4Addr;

    fn edge(nat: &FakeNat) -> Edge<FakeNat> {
        Edge::new(
            nat.clone(),
            EdgeConfig {
                uplink: Some("u0".into()),
                uplink_ip: Ipv4Addr::new(198, 18, 0, 100),
                mtu: 1450,
                dhcp: false,
                protect: Vec::new(),
            },
        )
    }

    fn cmd(public: &str, private: &str) -> PublicIpCommand {
        PublicIpCommand {
            concentrator_uuid: Uuid::from_u128(0xcc),
            tenant_uuid: Uuid::from_u128(0x7e),
            instance_uuid: Uuid::from_u128(7),
            public_ip: ip(public),
            private_ip: ip(private),
            vnic_mac: MacAddr([2, 0, 10, 250, 0, 7]),
        }
    }

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn subnets_get_a_gateway_address_and_nat_and_lose_them() {
        let (mut hub, ops) = hub(TunnelKind::Vxlan);
        let nat = FakeNat::default();
        let mut e = edge(&nat);
        e.start(&ops).await.unwrap();
        assert_eq!(nat.uplink(), Some(("u0".into(), v4("198.18.0.100"))));
        hub.add(&node(1)).await.unwrap();
        e.reconcile(&hub).await;
        let subnet = node(1).subnet;
        assert_eq!(nat.subnets(), vec![subnet]);
        assert_eq!(e.subnets().get(&KEY), Some(&subnet));
        let bridge = &ops.links()[&hub::bridge_name(KEY)];
        assert!(bridge.addresses.contains(&(ip("10.250.0.1"), 24)));
        hub.remove(&node(1)).await.unwrap();
        e.reconcile(&hub).await;
        assert!(nat.subnets().is_empty() && e.subnets().is_empty());
    }

    #[tokio::test]
    async fn public_ips_map_one_to_one_and_refuse_what_conflicts() {
        let ops = FakeCnciOps::new();
        ops.add_link("u0", "veth");
        let nat = FakeNat::default();
        let mut e = edge(&nat);
        e.start(&ops).await.unwrap();
        let a = cmd("203.0.113.10", "10.250.0.7");
        assert_eq!(e.assign(&ops, &a).await, Ok(()));
        assert_eq!(e.assign(&ops, &a).await, Ok(()), "a repeat");
        assert_eq!(
            nat.public().get(&v4("203.0.113.10")),
            Some(&v4("10.250.0.7"))
        );
        assert!(
            ops.links()["u0"]
                .addresses
                .contains(&(ip("203.0.113.10"), 32))
        );
        // The public IP of another instance, another public IP for the same instance.
        for c in [
            cmd("203.0.113.10", "10.250.0.8"),
            cmd("203.0.113.11", "10.250.0.7"),
        ] {
            assert_eq!(
                e.assign(&ops, &c).await,
                Err(PublicIpFailureReason::AssignFailure)
            );
        }
        for c in [
            cmd("2001:db8::1", "10.250.0.8"),
            cmd("255.255.255.255", "10.250.0.8"),
        ] {
            assert_eq!(
                e.assign(&ops, &c).await,
                Err(PublicIpFailureReason::InvalidData)
            );
        }
        nat.fail_next("map");
        assert_eq!(
            e.assign(&ops, &cmd("203.0.113.12", "10.250.0.9")).await,
            Err(PublicIpFailureReason::AssignFailure)
        );
        assert_eq!(nat.public().len(), 1);
        // Release: the wrong private address is refused; a repeat is a success.
        assert_eq!(
            e.release(&ops, &cmd("203.0.113.10", "10.250.0.8")).await,
            Err(PublicIpFailureReason::ReleaseFailure)
        );
        assert_eq!(e.release(&ops, &a).await, Ok(()));
        assert_eq!(e.release(&ops, &a).await, Ok(()));
        assert!(nat.public().is_empty());
        assert!(ops.links()["u0"].addresses.is_empty());
    }

    #[tokio::test]
    async fn a_restart_keeps_the_public_ips() {
        let ops = FakeCnciOps::new();
        ops.add_link("u0", "veth");
        let nat = FakeNat::default();
        let mut before = edge(&nat);
        before.start(&ops).await.unwrap();
        let a = cmd("203.0.113.10", "10.250.0.7");
        before.assign(&ops, &a).await.unwrap();
        let mut after = edge(&nat);
        after.start(&ops).await.unwrap();
        assert_eq!(
            after.public().get(&v4("203.0.113.10")),
            Some(&v4("10.250.0.7"))
        );
        assert_eq!(after.release(&ops, &a).await, Ok(()));
        assert!(nat.public().is_empty());
    }

    #[tokio::test]
    async fn without_an_uplink_public_ips_fail() {
        let ops = FakeCnciOps::new();
        let nat = FakeNat::default();
        let mut e = Edge::new(
            nat.clone(),
            EdgeConfig {
                uplink: None,
                uplink_ip: Ipv4Addr::UNSPECIFIED,
                mtu: 1450,
                dhcp: false,
                protect: Vec::new(),
            },
        );
        e.start(&ops).await.unwrap();
        let a = cmd("203.0.113.10", "10.250.0.7");
        assert_eq!(
            e.assign(&ops, &a).await,
            Err(PublicIpFailureReason::AssignFailure)
        );
        assert_eq!(
            e.release(&ops, &a).await,
            Err(PublicIpFailureReason::ReleaseFailure)
        );
    }

    fn peer(physical: &str, subnet: &str) -> ssntp::payload::CnciPeer {
        ssntp::payload::CnciPeer {
            physical_ip: ip(physical),
            subnet: subnet.parse().unwrap(),
            tunnel_ip: ip("10.0.0.1"),
            tunnel_id: 1,
        }
    }

    #[tokio::test]
    async fn refresh_routes_the_siblings_and_a_restart_finds_them() {
        let ops = FakeCnciOps::new();
        ops.add_link("u0", "veth");
        let nat = FakeNat::default();
        let mut e = edge(&nat);
        e.start(&ops).await.unwrap();
        let refresh = |cncis| ssntp::payload::RefreshCnci {
            cnci_uuid: Uuid::from_u128(0xcc),
            cncis,
        };
        let r = refresh(vec![
            peer("198.18.0.100", "10.250.0.0/24"), // itself
            peer("198.18.0.101", "10.250.1.0/24"),
            peer("198.18.0.102", "10.250.2.9/24"), // not a network address: normalised
            peer("fd00::1", "10.250.3.0/24"),      // skipped
        ]);
        e.refresh(&ops, &r).await.unwrap();
        let routes = ops.routes();
        assert_eq!(routes.len(), 2, "{routes:?}");
        assert_eq!(routes[&(v4("10.250.1.0"), 24)], v4("198.18.0.101"));
        assert_eq!(routes[&(v4("10.250.2.0"), 24)], v4("198.18.0.102"));
        assert_eq!(nat.siblings().len(), 2);
        // A restart reads them back; the next refresh drops the gone sibling and moves one.
        let mut after = edge(&nat);
        after.start(&ops).await.unwrap();
        assert_eq!(after.siblings().len(), 2);
        let r = refresh(vec![peer("198.18.0.103", "10.250.1.0/24")]);
        after.refresh(&ops, &r).await.unwrap();
        let routes = ops.routes();
        assert_eq!(
            routes.into_iter().collect::<Vec<_>>(),
            vec![((v4("10.250.1.0"), 24), v4("198.18.0.103"))]
        );
        assert_eq!(nat.siblings(), vec!["10.250.1.0/24".parse().unwrap()]);
    }
}
