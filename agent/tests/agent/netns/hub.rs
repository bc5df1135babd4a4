//! Two hosts pinging each other through the CNCI's hub.

use super::*;

/// The concentrator's side made by `cumulo-cnci`'s [`Hub`](agent::cnci::Hub) over
/// [`RtCnciOps`](agent::cnci::RtCnciOps) (not the stand-in of the other tests): guests on two hosts reach
/// each other through it, another tenant with the same addresses does not, and a node whose
/// TENANT_REMOVED came is cut off from the subnet while the others are not touched.
#[test]
fn two_hosts_ping_through_the_cnci_hub() {
    use agent::cnci::{Hub, HubConfig, NodeSubnet, Outcome, RtCnciOps};
    if !can_run("two_hosts_ping_through_the_cnci_hub") {
        return;
    }
    let (switch, h1, h2, cnci) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("h2"),
        Netns::new("cnci"),
    );
    underlay(
        &switch,
        &[(&h1, "198.18.0.1"), (&h2, "198.18.0.2"), (&cnci, CNCI_IP)],
    );
    let (host1, host2, concentrator) = (Host::new(&h1), Host::new(&h2), Host::new(&cnci));
    let n1 = host1.network("198.18.0.1");
    let n2 = host2.network("198.18.0.2");
    let kind = host1.tunnel(&n1);
    let hub = concentrator.run(async move {
        let hub = Hub::new(
            RtCnciOps::new().unwrap(),
            HubConfig {
                local: CNCI_IP.parse().unwrap(),
                tunnel: kind,
                vxlan_port: VXLAN_PORT,
            },
        );
        Arc::new(tokio::sync::Mutex::new(hub))
    });
    // What TENANT_ADDED / TENANT_REMOVED from host `n` for `subnet` carry.
    let event = |n: u8, s: SubnetId| NodeSubnet {
        node: Uuid::from_u128(u128::from(n)),
        node_ip: format!("198.18.0.{n}").parse().unwrap(),
        tenant: s.tenant,
        subnet: s.subnet,
        key: s.key,
    };
    let tell = |e: NodeSubnet, added: bool| {
        let hub = hub.clone();
        concentrator
            .run(async move {
                let mut hub = hub.lock().await;
                if added {
                    hub.add(&e).await
                } else {
                    hub.remove(&e).await
                }
            })
            .unwrap()
    };

    let a1 = vnic(1, subnet(TENANT_A, KEY_A, CNCI_IP));
    let a2 = vnic(2, subnet(TENANT_A, KEY_A, CNCI_IP));
    let b1 = vnic(3, subnet(TENANT_B, KEY_B, CNCI_IP));
    let b2 = vnic(4, subnet(TENANT_B, KEY_B, CNCI_IP));
    let (at1, at2) = (host1.attach(&n1, a1), host2.attach(&n2, a2));
    let (bt1, bt2) = (host1.attach(&n1, b1), host2.attach(&n2, b2));
    for (n, v) in [(1, a1), (2, a2), (1, b1), (2, b2)] {
        assert!(matches!(
            tell(event(n, v.subnet), true),
            Outcome::Added { .. }
        ));
    }
    let ga1 = guest(&h1, &at1.bridge, "vh-a1", &a1, "10.250.0.1/24");
    let ga2 = guest(&h2, &at2.bridge, "vh-a2", &a2, "10.250.0.2/24");
    let gb1 = guest(&h1, &bt1.bridge, "vh-b1", &b1, "10.250.0.1/24");
    let _gb2 = guest(&h2, &bt2.bridge, "vh-b2", &b2, "10.250.0.4/24");
    assert!(ga1.reaches("10.250.0.2"), "tenant A through the CNCI's hub");
    assert!(ga2.reaches("10.250.0.1"), "and back");
    assert!(gb1.reaches("10.250.0.4"), "tenant B through its own hub");
    assert!(gb1.cut_off_from("10.250.0.2"), "tenant B reaches tenant A");
    assert!(ga1.cut_off_from("10.250.0.4"), "tenant A reaches tenant B");

    // The CNCI's hub of subnet A floods to both hosts and has learnt a2's MAC behind host 2.
    let hub_a = agent::cnci::hub::hub_name(KEY_A);
    let fdb = || {
        let out = run(Command::new("ip")
            .args(["netns", "exec", &cnci.name, "bridge", "fdb", "show", "dev"])
            .arg(&hub_a));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let to_host2 = |fdb: &str| {
        fdb.lines()
            .filter(|l| l.contains("dst 198.18.0.2"))
            .map(|l| l.split(' ').next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    let before = fdb();
    assert!(
        to_host2(&before).contains(&"00:00:00:00:00:00".to_string()),
        "{before}"
    );
    assert!(to_host2(&before).contains(&mac_text(&a2.mac)), "{before}");
    // Host 2 leaves subnet A (TENANT_REMOVED once its last VNIC of A is gone): every entry
    // towards it goes, the flood entry and what was learnt; host 1's and subnet B's stay.
    let d = host2.detach(&n2, a2.instance).unwrap();
    assert!(d.last);
    assert_eq!(
        tell(event(2, a2.subnet), false),
        Outcome::Removed { last: false }
    );
    let after = fdb();
    assert!(to_host2(&after).is_empty(), "{after}");
    assert!(after.contains("dst 198.18.0.1"), "{after}");
    assert!(gb1.reaches("10.250.0.4"), "tenant B untouched");
    // The last node: the CNCI's bridge and hub of the subnet go.
    assert_eq!(
        tell(event(1, a1.subnet), false),
        Outcome::Removed { last: true }
    );
    assert!(cnci.link(&agent::cnci::hub::bridge_name(KEY_A)).is_none());
    assert!(cnci.link(&agent::cnci::hub::bridge_name(KEY_B)).is_some());
}
