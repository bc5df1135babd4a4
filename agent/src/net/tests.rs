//! [`Network`] over the recording fake: which links it makes (VXLAN or GRE-tap), first and last
//! VNIC of a subnet, repeats and retries, rebuild and repair after a restart.

use std::net::IpAddr;
use uuid::Uuid;

use super::fake::Call;
use super::names::{Cidr, LinkRole, SubnetId, bridge_name, tap_mac, tap_name, tunnel_name};
use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cfg(tunnel: TunnelKind) -> NetConfig {
    NetConfig {
        node_ip: ip("198.18.0.1"),
        tunnel,
        vxlan_port: VXLAN_PORT,
        metadata: false,
    }
}

fn subnet(tenant: u128, key: u32) -> SubnetId {
    SubnetId {
        tenant: Uuid::from_u128(tenant),
        subnet: Cidr {
            addr: ip("10.250.0.0"),
            prefix: 24,
        },
        key,
        cnci: Uuid::from_u128(0xc0c1 + tenant),
        cnci_ip: ip("198.18.0.100"),
    }
}

fn vnic(n: u8, subnet: SubnetId) -> Vnic {
    Vnic {
        veth: false,
        // Distinct in the first 12 hex digits, like random UUIDs.
        instance: Uuid::from_u128(u128::from(n) << 100 | 0xabc),
        mac: [2, 0, 0, 0, 0, n],
        subnet,
    }
}

fn net(fake: &FakeNetOps, tunnel: TunnelKind) -> Network<FakeNetOps> {
    Network::new(fake.clone(), cfg(tunnel))
}

fn created(calls: &[Call]) -> Vec<Call> {
    calls
        .iter()
        .filter(|c| {
            matches!(
                c,
                Call::CreateBridge(_)
                    | Call::CreateTunnel(_)
                    | Call::CreateTap(..)
                    | Call::Delete(_)
            )
        })
        .cloned()
        .collect()
}

#[tokio::test]
async fn first_vnic_makes_bridge_vxlan_and_tap_and_says_first() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let s = subnet(1, 0x0a_fa00);
    let v = vnic(1, s);
    let a = net.attach(&v).await.unwrap();
    assert!(a.first);
    assert_eq!(a.tap, tap_name(v.instance));
    assert_eq!(a.bridge, "cb-000afa00");
    assert_eq!(
        created(&fake.take_changes()),
        vec![
            Call::CreateBridge("cb-000afa00".into()),
            Call::CreateTunnel(TunnelSpec::Vxlan {
                name: "cv-000afa00".into(),
                vni: 0x0a_fa00,
                local: ip("198.18.0.1"),
                remote: ip("198.18.0.100"),
                port: 4789,
            }),
            Call::CreateTap(a.tap.clone(), tap_mac(&v.mac)),
        ]
    );
    let links = fake.links_now();
    let tunnel = &links["cv-000afa00"];
    let tap = &links[&a.tap];
    assert_eq!(tunnel.master.as_deref(), Some("cb-000afa00"));
    assert_eq!(
        tunnel.learning,
        Some(false),
        "no learning on the tunnel port"
    );
    assert_eq!(links[&a.tap].learning, Some(true));
    assert_eq!(tap.master.as_deref(), Some("cb-000afa00"));
    assert!(links.values().all(|l| l.up), "{links:#?}");
    assert_eq!(
        LinkRole::parse(tap.alias.as_deref().unwrap()),
        Some(LinkRole::Tap {
            subnet: s,
            instance: v.instance,
            mac: v.mac,
        })
    );
    assert_eq!(
        LinkRole::parse(links["cb-000afa00"].alias.as_deref().unwrap()),
        Some(LinkRole::Bridge(s))
    );

    // A second VNIC of the subnet: only a tap, and not first.
    let w = vnic(2, s);
    let b = net.attach(&w).await.unwrap();
    assert!(!b.first);
    assert_eq!(
        created(&fake.take_changes()),
        vec![Call::CreateTap(b.tap, tap_mac(&w.mac))]
    );
}

#[tokio::test]
async fn gretap_config_makes_a_keyed_gretap() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::GreTap);
    let a = net.attach(&vnic(1, subnet(1, 42))).await.unwrap();
    assert!(a.first);
    let calls = fake.take_changes();
    assert!(calls.contains(&Call::CreateTunnel(TunnelSpec::GreTap {
        name: "cg-0000002a".into(),
        key: 42,
        local: ip("198.18.0.1"),
        remote: ip("198.18.0.100"),
    })));
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::CreateTunnel(TunnelSpec::Vxlan { .. })))
    );
    assert_eq!(fake.link("cg-0000002a").unwrap().kind, LinkKind::GreTap);
}

#[tokio::test]
async fn auto_picks_gretap_only_where_the_kernel_has_it() {
    let with = FakeNetOps::new();
    assert_eq!(
        resolve_tunnel(&with, TunnelChoice::Auto).await.unwrap(),
        TunnelKind::GreTap
    );
    assert!(with.links_now().is_empty(), "the probe is cleaned up");

    let without = FakeNetOps::without_gretap();
    assert_eq!(
        resolve_tunnel(&without, TunnelChoice::Auto).await.unwrap(),
        TunnelKind::Vxlan
    );
    assert_eq!(
        resolve_tunnel(&without, TunnelChoice::Fixed(TunnelKind::GreTap)).await,
        Err(NetError::TunnelUnsupported(TunnelKind::GreTap))
    );
    assert_eq!(
        resolve_tunnel(&without, TunnelChoice::Fixed(TunnelKind::Vxlan))
            .await
            .unwrap(),
        TunnelKind::Vxlan
    );
    assert!(without.links_now().is_empty());

    // A probe left over from a crash does not get in the way.
    let left = FakeNetOps::new();
    left.insert(Link {
        name: "cg-probe".into(),
        kind: LinkKind::GreTap,
        alias: None,
        master: None,
        up: false,
        mac: None,
        learning: None,
    });
    assert_eq!(
        resolve_tunnel(&left, TunnelChoice::Auto).await.unwrap(),
        TunnelKind::GreTap
    );
    assert!(left.links_now().is_empty());
}

#[tokio::test]
async fn last_vnic_removes_tunnel_and_bridge_and_says_last() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let s = subnet(1, 7);
    let (v, w) = (vnic(1, s), vnic(2, s));
    net.attach(&v).await.unwrap();
    net.attach(&w).await.unwrap();
    fake.take_changes();

    let d = net.detach(v.instance).await.unwrap().unwrap();
    assert!(!d.last);
    assert_eq!(d.subnet, s);
    assert_eq!(
        fake.take_changes(),
        vec![Call::Delete(tap_name(v.instance))]
    );

    let d = net.detach(w.instance).await.unwrap().unwrap();
    assert!(d.last);
    assert!(fake.links_now().is_empty(), "{:#?}", fake.links_now());
    assert_eq!(net.subnets().count(), 0);

    // Repeats are harmless.
    assert_eq!(net.detach(w.instance).await.unwrap(), None);
}

#[tokio::test]
async fn repeated_attach_changes_nothing() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    assert!(net.attach(&v).await.unwrap().first);
    fake.take_changes();
    let again = net.attach(&v).await.unwrap();
    assert!(!again.first);
    assert_eq!(fake.take_changes(), vec![]);
}

#[tokio::test]
async fn a_failed_attach_leaves_nothing_and_the_retry_is_still_first() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    fake.fail_next("create tunnel");
    assert!(matches!(net.attach(&v).await, Err(NetError::Ops(_))));
    assert_eq!(net.vnics().count(), 0);
    assert!(fake.links_now().is_empty(), "{:#?}", fake.links_now());
    assert!(
        net.attach(&v).await.unwrap().first,
        "TENANT_ADDED was never sent"
    );

    // A subnet in use keeps its links when another VNIC fails to plug in.
    fake.fail_next("create tap");
    assert!(net.attach(&vnic(2, subnet(1, 7))).await.is_err());
    assert!(fake.link(&bridge_name(7)).is_some());
    assert!(fake.link(&tap_name(v.instance)).is_some());
}

#[tokio::test]
async fn attach_finishes_a_link_a_crash_left_unnamed() {
    let fake = FakeNetOps::new();
    fake.insert(Link {
        name: bridge_name(8),
        kind: LinkKind::Bridge,
        alias: None,
        master: None,
        up: false,
        mac: None,
        learning: None,
    });
    let mut net = net(&fake, TunnelKind::Vxlan);
    let w = vnic(2, subnet(2, 8));
    assert!(net.attach(&w).await.unwrap().first);
    let changes = fake.take_changes();
    assert!(
        !changes.iter().any(|c| matches!(c, Call::CreateBridge(_))),
        "{changes:?}"
    );
    assert_eq!(
        fake.link(&bridge_name(8)).unwrap().alias,
        Some(LinkRole::Bridge(w.subnet).alias())
    );
}

#[tokio::test]
async fn detach_after_a_failure_can_be_repeated() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    net.attach(&v).await.unwrap();
    fake.fail_next("delete");
    assert!(net.detach(v.instance).await.is_err());
    assert_eq!(net.vnics().count(), 1, "nothing forgotten on failure");
    let d = net.detach(v.instance).await.unwrap().unwrap();
    assert!(d.last, "TENANT_REMOVED is still sent");
    assert!(fake.links_now().is_empty());
}

#[tokio::test]
async fn one_key_two_subnets_is_a_conflict() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    net.attach(&vnic(1, subnet(1, 7))).await.unwrap();
    let other = vnic(2, subnet(2, 7));
    assert!(matches!(
        net.attach(&other).await,
        Err(NetError::SubnetConflict { key: 7, .. })
    ));
}

#[tokio::test]
async fn a_tap_name_taken_by_another_instance_is_refused() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    let mut twin = vnic(9, subnet(1, 7));
    twin.instance = Uuid::from_u128(v.instance.as_u128() + 1); // same first 12 hex digits
    assert_eq!(tap_name(twin.instance), tap_name(v.instance));
    net.attach(&v).await.unwrap();
    assert_eq!(
        net.attach(&twin).await,
        Err(NetError::NameTaken {
            name: tap_name(v.instance)
        })
    );
}

#[tokio::test]
async fn rebuild_after_restart_finds_everything_and_changes_nothing() {
    let fake = FakeNetOps::new();
    let mut before = net(&fake, TunnelKind::Vxlan);
    let (s, t) = (subnet(1, 7), subnet(2, 8));
    let (v1, v2, w1) = (vnic(1, s), vnic(2, s), vnic(3, t));
    for v in [v1, v2, w1] {
        before.attach(&v).await.unwrap();
    }
    drop(before);
    fake.take_changes();

    let mut after = net(&fake, TunnelKind::Vxlan);
    let r = after.rebuild().await.unwrap();
    assert_eq!(fake.take_changes(), vec![]);
    assert_eq!(
        r.vnics[&7],
        [v1.instance, v2.instance].into_iter().collect()
    );
    assert_eq!(r.vnics[&8], [w1.instance].into_iter().collect());
    assert!(
        r.removed.is_empty() && r.deleted.is_empty() && r.created.is_empty(),
        "{r:?}"
    );
    let mut seen: Vec<Vnic> = after.vnics().copied().collect();
    seen.sort_by_key(|v| v.instance);
    assert_eq!(seen, vec![v1, v2, w1]);

    // The rebuilt view drives first/last as before.
    assert!(!after.attach(&v1).await.unwrap().first);
    assert!(!after.detach(v1.instance).await.unwrap().unwrap().last);
    assert!(after.detach(v2.instance).await.unwrap().unwrap().last);
    assert!(fake.link(&bridge_name(7)).is_none());
    assert!(fake.link(&bridge_name(8)).is_some());
}

#[tokio::test]
async fn rebuild_repairs_half_made_and_stale_links() {
    let fake = FakeNetOps::new();
    let mut before = net(&fake, TunnelKind::Vxlan);
    let s = subnet(1, 7);
    let v = vnic(1, s);
    before.attach(&v).await.unwrap();
    drop(before);

    // The tunnel is lost, a tap was made but never named, and an emptied subnet kept its
    // bridge (a crash during a detach).
    fake.remove(&tunnel_name(TunnelKind::Vxlan, 7));
    let bare = |name: &str, kind| Link {
        name: name.into(),
        kind,
        alias: None,
        master: None,
        up: false,
        mac: None,
        learning: None,
    };
    fake.insert(bare("ct-0123456789ab", LinkKind::Tun));
    let emptied = subnet(3, 99);
    fake.insert(Link {
        alias: Some(LinkRole::Bridge(emptied).alias()),
        ..bare(&bridge_name(99), LinkKind::Bridge)
    });
    // Not ours: left alone.
    fake.insert(bare("eth0", LinkKind::Other("e1000".into())));
    fake.take_changes();

    let mut after = net(&fake, TunnelKind::Vxlan);
    let r = after.rebuild().await.unwrap();
    assert_eq!(r.created, vec![tunnel_name(TunnelKind::Vxlan, 7)]);
    assert_eq!(r.deleted, vec!["ct-0123456789ab".to_string()]);
    assert_eq!(r.removed, vec![emptied]);
    let links = fake.links_now();
    assert_eq!(
        links.keys().cloned().collect::<Vec<_>>(),
        vec![
            bridge_name(7),
            tap_name(v.instance),
            tunnel_name(TunnelKind::Vxlan, 7),
            "eth0".into()
        ]
    );
    assert_eq!(links["cv-00000007"].master.as_deref(), Some("cb-00000007"));
    assert!(links["cv-00000007"].up);
}

#[tokio::test]
async fn rebuild_brings_back_a_lost_bridge_and_replugs_the_taps() {
    let fake = FakeNetOps::new();
    let mut before = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    before.attach(&v).await.unwrap();
    fake.remove(&bridge_name(7));

    let mut after = net(&fake, TunnelKind::Vxlan);
    let r = after.rebuild().await.unwrap();
    assert_eq!(r.created, vec![bridge_name(7)]);
    for name in [tunnel_name(TunnelKind::Vxlan, 7), tap_name(v.instance)] {
        assert_eq!(
            fake.link(&name).unwrap().master.as_deref(),
            Some("cb-00000007"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn rebuild_remakes_tunnels_after_a_config_change() {
    let fake = FakeNetOps::new();
    let mut before = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    before.attach(&v).await.unwrap();

    // Another node address: the tunnel is made again with it.
    let mut moved = Network::new(
        fake.clone(),
        NetConfig {
            node_ip: ip("198.18.0.9"),
            ..cfg(TunnelKind::Vxlan)
        },
    );
    fake.take_changes();
    let r = moved.rebuild().await.unwrap();
    assert_eq!(r.created, vec![tunnel_name(TunnelKind::Vxlan, 7)]);
    assert!(
        fake.take_changes()
            .contains(&Call::CreateTunnel(TunnelSpec::Vxlan {
                name: "cv-00000007".into(),
                vni: 7,
                local: ip("198.18.0.9"),
                remote: ip("198.18.0.100"),
                port: 4789,
            }))
    );

    // Another tunnel kind: the VXLAN goes, a GRE-tap comes.
    let mut gre = net(&fake, TunnelKind::GreTap);
    let r = gre.rebuild().await.unwrap();
    assert_eq!(r.created, vec![tunnel_name(TunnelKind::GreTap, 7)]);
    assert!(fake.link("cv-00000007").is_none());
    assert_eq!(
        fake.link("cg-00000007").unwrap().master.as_deref(),
        Some("cb-00000007")
    );
}

#[tokio::test]
async fn prune_detaches_instances_the_agent_no_longer_has() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let s = subnet(1, 7);
    let (v, w) = (vnic(1, s), vnic(2, s));
    net.attach(&v).await.unwrap();
    net.attach(&w).await.unwrap();
    let out = net.prune(|i| i == v.instance).await.unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].instance, w.instance);
    assert!(!out[0].last);
    assert_eq!(net.vnics().count(), 1);
}

#[tokio::test]
async fn mixed_address_families_are_refused() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let mut s = subnet(1, 7);
    s.cnci_ip = ip("2001:db8::1");
    assert!(matches!(
        net.attach(&vnic(1, s)).await,
        Err(NetError::AddressFamily { .. })
    ));
    assert!(fake.links_now().is_empty());
}

#[test]
fn a_start_nic_becomes_a_vnic() {
    let nic = crate::model::NicSpec {
        mac: [2, 0, 0, 0, 0, 5],
        vnic_uuid: Uuid::from_u128(5),
        concentrator_uuid: Uuid::from_u128(6),
        concentrator_ip: ip("198.18.0.100"),
        subnet_addr: ip("10.250.0.0"),
        subnet_prefix: 24,
        subnet_key: 7,
        private_ip: ip("10.250.0.5"),
        public_ip: false,
        firewall: None,
    };
    let v = Vnic::of(Uuid::from_u128(1), Uuid::from_u128(2), &nic);
    assert_eq!(v.subnet.key, 7);
    assert_eq!(v.subnet.subnet.to_string(), "10.250.0.0/24");
    assert_eq!(v.subnet.cnci, Uuid::from_u128(6));
    assert_eq!(v.mac, nic.mac);
}

#[tokio::test]
async fn a_tap_gets_its_own_mac_and_a_new_vm_mac_makes_it_again() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let mut v = vnic(1, subnet(1, 7));
    let a = net.attach(&v).await.unwrap();
    assert_eq!(fake.link(&a.tap).unwrap().mac, Some([0xfe, 0, 0, 0, 0, 1]));
    fake.take_changes();
    v.mac = [2, 0, 0, 0, 0, 0x42];
    net.attach(&v).await.unwrap();
    assert_eq!(
        created(&fake.take_changes()),
        vec![
            Call::Delete(a.tap.clone()),
            Call::CreateTap(a.tap.clone(), [0xfe, 0, 0, 0, 0, 0x42])
        ]
    );
}

#[tokio::test]
async fn rebuild_leaves_a_tap_of_another_subnet_identity_alone() {
    let fake = FakeNetOps::new();
    let mut before = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    before.attach(&v).await.unwrap();
    // Someone made a tap for key 7 that names another tenant.
    let stray = vnic(2, subnet(2, 7));
    fake.insert(Link {
        name: tap_name(stray.instance),
        kind: LinkKind::Tun,
        alias: Some(
            LinkRole::Tap {
                subnet: stray.subnet,
                instance: stray.instance,
                mac: stray.mac,
            }
            .alias(),
        ),
        master: None,
        up: false,
        mac: Some(tap_mac(&stray.mac)),
        learning: None,
    });
    let mut after = net(&fake, TunnelKind::Vxlan);
    let r = after.rebuild().await.unwrap();
    assert_eq!(r.conflicts, vec![tap_name(stray.instance)]);
    assert_eq!(r.vnics[&7], [v.instance].into_iter().collect());
    assert!(fake.link(&tap_name(stray.instance)).is_some());
}

#[tokio::test]
async fn an_instance_on_one_subnet_is_not_silently_moved_to_another() {
    let fake = FakeNetOps::new();
    let mut net = net(&fake, TunnelKind::Vxlan);
    let v = vnic(1, subnet(1, 7));
    net.attach(&v).await.unwrap();
    let moved = Vnic {
        subnet: subnet(1, 8),
        ..v
    };
    assert_eq!(
        net.attach(&moved).await,
        Err(NetError::AttachedElsewhere {
            instance: v.instance,
            key: 7
        })
    );
    assert!(net.detach(v.instance).await.unwrap().unwrap().last);
    assert!(net.attach(&moved).await.unwrap().first);
}

#[tokio::test]
async fn a_containers_vnic_is_a_veth_pair_found_again_after_a_restart() {
    let fake = FakeNetOps::new();
    let mut before = net(&fake, TunnelKind::Vxlan);
    let s = subnet(1, 9);
    let c = Vnic {
        veth: true,
        ..vnic(4, s)
    };
    let v = vnic(5, s);
    let tap = tap_name(c.instance);
    let peer = names::veth_peer_name(c.instance);
    before.attach(&c).await.unwrap();
    before.attach(&v).await.unwrap();
    assert!(fake.take_changes().contains(&Call::CreateVeth(
        tap.clone(),
        peer.clone(),
        tap_mac(&c.mac)
    )));
    let (host, other) = (fake.link(&tap).unwrap(), fake.link(&peer).unwrap());
    assert_eq!((host.kind, other.kind), (LinkKind::Veth, LinkKind::Veth));
    assert_eq!(host.master.as_deref(), Some(bridge_name(9).as_str()));
    drop(before);
    // After a restart the pair is the container's VNIC again, as it was: nothing changes.
    let mut after = net(&fake, TunnelKind::Vxlan);
    let r = after.rebuild().await.unwrap();
    assert_eq!(fake.take_changes(), vec![]);
    assert_eq!(r.vnics[&9], [c.instance, v.instance].into_iter().collect());
    let mut seen: Vec<Vnic> = after.vnics().copied().collect();
    seen.sort_by_key(|v| v.instance);
    assert_eq!(seen, vec![c, v]);
    // Attaching it again keeps it; its detach deletes the node's end.
    assert!(!after.attach(&c).await.unwrap().first);
    assert!(
        fake.take_changes()
            .iter()
            .all(|call| !matches!(call, Call::CreateVeth(..) | Call::CreateTap(..)))
    );
    after.detach(c.instance).await.unwrap();
    assert!(fake.link(&tap).is_none());
}
