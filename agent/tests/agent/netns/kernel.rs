//! What the kernel is left with: a rebuild repairing a crash's leftovers, the tunnel kind this
//! kernel can make, the net backend plugging instances in and out.

use super::*;

#[test]
fn rebuild_repairs_what_a_crash_left_in_the_kernel() {
    if !can_run("rebuild_repairs_what_a_crash_left_in_the_kernel") {
        return;
    }
    let h = Netns::new("h");
    h.ip(&["addr", "add", "198.18.0.1/32", "dev", "lo"]);
    let host = Host::new(&h);
    let net = host.network("198.18.0.1");
    let kind = host.tunnel(&net);
    let a1 = vnic(1, subnet(TENANT_A, KEY_A, "198.18.0.2"));
    host.attach(&net, a1);

    // The crash: the tunnel is gone, a tap was made but never named, and a subnet whose last
    // VNIC went away kept its bridge.
    h.ip(&["link", "del", &tunnel_name(kind, KEY_A)]);
    h.ip(&["tuntap", "add", "dev", "ct-0123456789ab", "mode", "tap"]);
    let emptied = subnet(TENANT_B, 99, "198.18.0.2");
    h.ip(&["link", "add", &bridge_name(99), "type", "bridge"]);
    h.ip(&[
        "link",
        "set",
        &bridge_name(99),
        "alias",
        &LinkRole::Bridge(emptied).alias(),
    ]);
    // Not ours: left alone.
    h.ip(&["link", "add", "br-other", "type", "bridge"]);

    drop(net);
    let net = host.network("198.18.0.1");
    let r = host.rebuild(&net);
    assert_eq!(r.created, vec![tunnel_name(kind, KEY_A)]);
    assert_eq!(r.deleted, vec!["ct-0123456789ab".to_string()]);
    assert_eq!(r.removed, vec![emptied]);
    let tunnel = h.link(&tunnel_name(kind, KEY_A)).unwrap();
    assert!(
        tunnel.contains(&format!("master {}", bridge_name(KEY_A))),
        "{tunnel}"
    );
    assert!(h.link("ct-0123456789ab").is_none());
    assert!(h.link(&bridge_name(99)).is_none());
    assert!(h.link("br-other").is_some());

    // And it goes on working: the last detach removes everything.
    assert!(host.detach(&net, a1.instance).unwrap().last);
    let left: Vec<String> = h
        .links()
        .into_iter()
        .filter(|n| names::is_ours(n))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn auto_tunnel_is_what_this_kernel_can_make() {
    if !can_run("auto_tunnel_is_what_this_kernel_can_make") {
        return;
    }
    let h = Netns::new("k");
    let has_gretap = Command::new("ip")
        .args(["-n", &h.name, "link", "add", "gt", "type", "gretap"])
        .args(["local", "127.0.0.1", "remote", "127.0.0.2", "key", "1"])
        .output()
        .unwrap()
        .status
        .success();
    let host = Host::new(&h);
    let (auto, fixed) = host.run(async {
        let ops = RtNetOps::new().unwrap();
        (
            resolve_tunnel(&ops, TunnelChoice::Auto).await,
            resolve_tunnel(&ops, TunnelChoice::Fixed(TunnelKind::GreTap)).await,
        )
    });
    if has_gretap {
        assert_eq!(auto, Ok(TunnelKind::GreTap));
        assert_eq!(fixed, Ok(TunnelKind::GreTap));
    } else {
        assert_eq!(auto, Ok(TunnelKind::Vxlan));
        assert_eq!(fixed, Err(NetError::TunnelUnsupported(TunnelKind::GreTap)));
    }
    assert!(h.link("cg-probe").is_none(), "the probe is cleaned up");
}

#[test]
fn net_backend_plugs_instances_in_and_out_for_real() {
    if !can_run("net_backend_plugs_instances_in_and_out_for_real") {
        return;
    }
    use agent::Backend;
    use agent::backend::fake::FakeBackend;
    use agent::model::{Firmware, InstanceSpec, NicSpec, Resources, VmKind};
    use agent::net::{NetBackend, TenantChange};

    let h = Netns::new("nb");
    h.ip(&["addr", "add", "198.18.0.1/32", "dev", "lo"]);
    let host = Host::new(&h);
    let spec = InstanceSpec {
        instance: Uuid::from_u128(0x5eed << 100),
        tenant: Uuid::from_u128(TENANT_A),
        workload: Uuid::from_u128(1),
        kind: VmKind::Qemu,
        role: agent::model::InstanceRole::Workload,
        firmware: Firmware::Legacy,
        image: "tiny".into(),
        resources: Resources::default(),
        nic: Some(NicSpec {
            mac: [2, 0, 0, 0, 0, 9],
            vnic_uuid: Uuid::from_u128(9),
            concentrator_uuid: Uuid::from_u128(0xc),
            concentrator_ip: CNCI_IP.parse().unwrap(),
            subnet_addr: "10.250.0.0".parse().unwrap(),
            subnet_prefix: 24,
            subnet_key: KEY_A,
            private_ip: "10.250.0.9".parse().unwrap(),
            public_ip: false,
            firewall: None,
        }),
        disks: Vec::new(),
        volumes: Vec::new(),
        user_data: None,
        meta_data: Default::default(),
        restart: false,
        kernel: None,
    };
    let instance = spec.instance;
    let changes = host.run(async move {
        let ops = RtNetOps::new().unwrap();
        let args = agent::net::NetArgs {
            tunnel: TunnelChoice::Auto,
            node_ip: Some("198.18.0.1".parse().unwrap()),
            vxlan_port: VXLAN_PORT,
            no_metadata: false,
        };
        let net = args.network(ops).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        let backend = NetBackend::new(FakeBackend::new(), net, tx);
        backend.rebuild().await.unwrap();
        backend.create(&spec).await.unwrap();
        let added = rx.try_recv().unwrap();
        backend.delete(spec.instance).await.unwrap();
        let removed = rx.try_recv().unwrap();
        (added, removed)
    });
    assert!(
        matches!(changes.0, TenantChange::Added(s) if s.key == KEY_A),
        "{changes:?}"
    );
    assert!(
        matches!(changes.1, TenantChange::Removed(s) if s.key == KEY_A),
        "{changes:?}"
    );
    assert!(h.link(&tap_name(instance)).is_none());
    let left: Vec<String> = h
        .links()
        .into_iter()
        .filter(|n| names::is_ours(n))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
