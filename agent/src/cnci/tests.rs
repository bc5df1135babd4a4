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
