//! The daemon with tenant networking ([`daemon::run_networked`]) over a recording
//! [`FakeNetOps`]: the first instance of a subnet sends TENANT_ADDED, its delete TENANT_REMOVED,
//! both as frames from the node to the CNCI (here a fake scheduler receives them).
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use crate::support::*;
use agent::net::{FakeNetOps, NetConfig, Network, TunnelKind, VXLAN_PORT, tap_name};
use ssntp::payload::{Cidr, MacAddr, Networking, TenantEvent};

const CNCI: Uuid = Uuid::from_bytes([0xcc; 16]);

fn networking(n: u8) -> Networking {
    Networking {
        vnic_mac: MacAddr([2, 0, 0, 0, 0, n]),
        vnic_uuid: u(n),
        concentrator_uuid: CNCI,
        concentrator_ip: "198.18.0.100".parse().unwrap(),
        subnet: Cidr {
            addr: "10.250.0.0".parse().unwrap(),
            prefix: 24,
        },
        subnet_key: 0x7001,
        private_ip: format!("10.250.0.{n}").parse().unwrap(),
        public_ip: false,
        firewall: None,
    }
}

fn tenant_event(m: &Message, node: Uuid, added: bool) -> Option<TenantEvent> {
    match (&m.payload, added) {
        (Payload::TenantAdded(e), true) | (Payload::TenantRemoved(e), false)
            if m.frame.origin == node =>
        {
            Some(e.clone())
        }
        _ => None,
    }
}

/// TENANT_ADDED for the subnet's first instance only, TENANT_REMOVED after its last delete,
/// with the node's address and the subnet's identity; the links come and go in the (fake)
/// kernel.
#[tokio::test]
async fn the_first_vnic_adds_the_tenant_and_the_last_delete_removes_it() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("localhost:{}", listener.local_addr().unwrap().port());
    let mut fake = fake_scheduler(&pki, listener).await;
    let node = u(3);
    let files = agent_files(&pki, Role::AGENT, Some(node), dir.path());
    let state = dir.path().join("state");
    let config = config(&files, &addr, &state, &[]);
    let backend = SimBackend::new(config.sim.clone()).unwrap();
    let ops = FakeNetOps::without_gretap();
    let node_ip = "198.18.0.1".parse().unwrap();
    let network = Network::new(
        ops.clone(),
        NetConfig {
            node_ip,
            tunnel: TunnelKind::Vxlan,
            vxlan_port: VXLAN_PORT,
            metadata: false,
        },
    );
    let stop = CancellationToken::new();
    let done = tokio::spawn(daemon::run_networked(
        config,
        backend,
        network,
        stop.clone(),
    ));
    fake.stats(node, "the agent's first STATS", |_| true).await;

    let (a, b) = (u(0xa1), u(0xa2));
    for (instance, n) in [(a, 1), (b, 2)] {
        let mut s = start(instance, "debian");
        s.networking = Some(networking(n));
        fake.send(node, &start_payload(s));
        fake.stats(node, "active", |s| {
            state_in(s, instance) == Some(InstanceState::Active)
        })
        .await;
    }
    let added = fake
        .message("TENANT_ADDED", |m| tenant_event(m, node, true).is_some())
        .await;
    let added = tenant_event(&added, node, true).unwrap();
    assert_eq!(
        (added.agent_uuid, added.agent_ip, added.tenant_uuid),
        (node, node_ip, u(0x7e))
    );
    assert_eq!((added.concentrator_uuid, added.subnet_key), (CNCI, 0x7001));
    assert_eq!(added.tenant_subnet.to_string(), "10.250.0.0/24");
    assert!(ops.link(&tap_name(a)).is_some() && ops.link(&tap_name(b)).is_some());

    fake.send(node, &delete(a, node, false));
    fake.message("INSTANCE_DELETED of a", |m| {
        event_from(m, node, Operand::InstanceDeleted, a)
    })
    .await;
    assert!(ops.link(&tap_name(a)).is_none());
    assert_eq!(
        ops.links_now().len(),
        3,
        "b's tap, the bridge and the tunnel stay"
    );
    fake.send(node, &delete(b, node, false));
    let removed = fake
        .message("TENANT_REMOVED", |m| tenant_event(m, node, false).is_some())
        .await;
    assert_eq!(tenant_event(&removed, node, false).unwrap(), added);
    fake.message("INSTANCE_DELETED of b", |m| {
        event_from(m, node, Operand::InstanceDeleted, b)
    })
    .await;
    assert!(ops.links_now().is_empty(), "{:#?}", ops.links_now());
    assert!(
        !fake
            .seen
            .iter()
            .any(|s| matches!(s, Seen::Message(m) if tenant_event(m, node, true).is_some())),
        "TENANT_ADDED once"
    );

    stop.cancel();
    tokio::time::timeout(T, done)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    fake.shut().await;
}

/// A subnet whose last detach was cut short (a bridge left, no tap) is removed by the rebuild at
/// start, before there is a session: its TENANT_REMOVED waits in the backlog and reaches the
/// scheduler once connected.
#[tokio::test]
async fn a_subnet_left_half_removed_is_reported_removed_at_start() {
    use agent::net::names::{LinkRole, bridge_name};
    use agent::net::{Link, LinkKind, SubnetId};
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("localhost:{}", listener.local_addr().unwrap().port());
    let mut fake = fake_scheduler(&pki, listener).await;
    let node = u(4);
    let files = agent_files(&pki, Role::AGENT, Some(node), dir.path());
    let config = config(&files, &addr, &dir.path().join("state"), &[]);
    let backend = SimBackend::new(config.sim.clone()).unwrap();
    let ops = FakeNetOps::without_gretap();
    let left = SubnetId {
        tenant: u(0x7e),
        subnet: "10.250.0.0/24".parse().unwrap(),
        key: 0x7002,
        cnci: CNCI,
        cnci_ip: "198.18.0.100".parse().unwrap(),
    };
    ops.insert(Link {
        name: bridge_name(left.key),
        kind: LinkKind::Bridge,
        alias: Some(LinkRole::Bridge(left).alias()),
        master: None,
        up: true,
        mac: None,
        learning: None,
    });
    let network = Network::new(
        ops.clone(),
        NetConfig {
            node_ip: "198.18.0.1".parse().unwrap(),
            tunnel: TunnelKind::Vxlan,
            vxlan_port: VXLAN_PORT,
            metadata: false,
        },
    );
    let stop = CancellationToken::new();
    let done = tokio::spawn(daemon::run_networked(
        config,
        backend,
        network,
        stop.clone(),
    ));
    let removed = fake
        .message("TENANT_REMOVED", |m| tenant_event(m, node, false).is_some())
        .await;
    let removed = tenant_event(&removed, node, false).unwrap();
    assert_eq!(
        (removed.subnet_key, removed.concentrator_uuid),
        (0x7002, CNCI)
    );
    assert!(ops.links_now().is_empty(), "{:#?}", ops.links_now());
    stop.cancel();
    tokio::time::timeout(T, done)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    fake.shut().await;
}
