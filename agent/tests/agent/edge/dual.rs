//! A dual-role node: the agent launches the CNCI itself, and its instances get leases and ping.

use super::*;

#[test]
fn a_dual_node_runs_the_cnci_its_instances_get_leases_and_ping() {
    let name = "a_dual_node_runs_the_cnci_its_instances_get_leases_and_ping";
    if !can_run_edge(name) {
        return;
    }
    // Host 1 is a compute node; the network node is dual: it runs the CNCI and an instance.
    let (switch, h1, nn, ctl) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("nn"),
        Netns::new("ctl"),
    );
    underlay(&switch, &[(&h1, "198.18.0.1"), (&nn, "198.18.0.3")]);
    // A network beyond the compute network's prefix, that only the network node routes to
    // (and that has no route to the tenant's subnet): reached through the CNCI's NAT.
    let out = Netns::new("out");
    nn.ip(&[
        "link", "add", "xo", "type", "veth", "peer", "name", "u0", "netns", &out.name,
    ]);
    nn.ip(&["addr", "add", "192.0.2.1/24", "dev", "xo"]);
    nn.ip(&["link", "set", "xo", "up"]);
    out.ip(&["addr", "add", "192.0.2.2/24", "dev", "u0"]);
    out.ip(&["link", "set", "u0", "up"]);
    out.ip(&["route", "add", "default", "via", "192.0.2.1"]);
    let listeners = [listen_in(&h1.name), listen_in(&nn.name)];
    let ports = ports(&listeners);
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let (n1, n3) = (u(1), u(3));
    let h1_config = compute_config(&pki, dir.path(), 0, n1, ports[0]);
    // The network node: AGENT and NETAGENT, and a certificate for the CNCIs it runs.
    let files = agent_files(
        &pki,
        Role::AGENT | Role::NETAGENT,
        Some(n3),
        &dir.path().join("nn"),
    );
    let (_, cnci_cert, cnci_key) = pki
        .leaf(Role::CNCIAGENT, None)
        .write(&dir.path().join("nn"), "cncis");
    let mut argv = vec!["cumulo-agent".to_string()];
    argv.extend(crate::support::argv(
        &files,
        &format!("localhost:{}", ports[1]),
        &dir.path().join("state-nn"),
        "dual",
        &[
            "--cnci-cert",
            cnci_cert.to_str().unwrap(),
            "--cnci-key",
            cnci_key.to_str().unwrap(),
            "--cnci-uplink",
            "u0",
            "--cnci-addresses",
            "198.18.0.128/25",
            "--cnci-binary",
            env!("CARGO_BIN_EXE_cumulo-cnci"),
            "--tunnel",
            "vxlan",
        ],
    ));
    let mut nn_config = Args::try_parse_from(argv).unwrap().into_config().unwrap();
    nn_config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(300),
    };
    let names = (ctl.name.clone(), nn.name.clone(), h1.name.clone());
    let dir_path = dir.path().to_owned();
    let result = run_in(&names.0.clone(), async move {
        let (_, nn_name, h1_name) = names;
        let sched = real_scheduler(&pki).await;
        let [l1, l2] = listeners;
        for l in [l1, l2] {
            proxy(l, sched.addr.replace("localhost", "127.0.0.1"));
        }
        let mut c = controller(&pki, &sched.addr).await;
        let host1 = HostAgent::start(&h1_name, "198.18.0.1", h1_config);
        // The dual node's agent: tenant networking on its own address, and the launcher.
        let network_node = HostAgent::start(&nn_name, "198.18.0.3", nn_config);
        for n in [n1, n3] {
            c.stats(n, "the agent's first STATS", |_| true).await;
        }

        // The controller's START for the CNCI goes to the network node, which runs it.
        let cnci = u(0xcf);
        c.send(&start_payload(cnci_start(cnci)));
        let hello = c
            .expect("the CNCI's CONCENTRATOR_INSTANCE_ADDED", |m| {
                match &m.payload {
                    Payload::ConcentratorInstanceAdded(a) => Some(a.clone()),
                    Payload::StartFailure(f) => panic!("{f:?}"),
                    _ => None,
                }
            })
            .await;
        assert_eq!((hello.instance_uuid, hello.tenant_uuid), (cnci, TENANT));
        assert_eq!(
            hello.concentrator_ip,
            "198.18.0.129".parse::<IpAddr>().unwrap()
        );
        let ns = agent::cnci::launch::ns_name(cnci);
        let cn = Netns { name: ns.clone() };
        assert!(cn.ip(&["addr", "show", "u0"]).contains("198.18.0.129/24"));
        // Its default route: out of u0, to the node's end of the pair.
        let default = cn.ip(&["route", "show", "default"]);
        assert!(default.contains("default dev u0"), "{default}");
        c.stats(n3, "the CNCI active", |s| {
            state_in(s, cnci) == Some(InstanceState::Active)
        })
        .await;

        // Two instances of the tenant, on host 1 and on the network node itself (whose
        // tunnel reaches its own CNCI through the veth), served by that CNCI.
        let (i1, i2) = (u(0xa7), u(0xa8));
        for (i, node, k) in [(i1, n1, 7), (i2, n3, 8)] {
            let mut net = networking(k);
            net.concentrator_uuid = cnci;
            net.concentrator_ip = hello.concentrator_ip;
            start_active(&mut c, i, node, TENANT, net).await;
        }
        let hub = format!("kv-{KEY:08x}");
        until("both hosts at the CNCI", || {
            let f = fdb(&ns, &hub);
            f.contains("dst 198.18.0.1") && f.contains("dst 198.18.0.3")
        })
        .await;
        let bridge = bridge_name(KEY);
        let (h1, h2) = (Netns { name: h1_name }, Netns { name: nn_name });
        let g1 = bare_guest(&h1, &bridge, 7, mac(7));
        let g2 = bare_guest(&h2, &bridge, 8, mac(8));
        let script = dhcp_script(&dir_path);
        let cn_ns = cn.name.clone();
        let (g1, g2, ok) = blocking(move || {
            let leased = dhcp(&g1, 7, &script) && dhcp(&g2, 8, &script);
            let ping = leased && g1.reaches("10.250.0.8") && g2.reaches("10.250.0.7");
            // Beyond the compute network: the CNCI itself, and a guest through its NAT.
            let probe = Netns { name: cn_ns };
            let beyond = probe.reaches("192.0.2.2");
            // Not ours to delete (the agent does).
            std::mem::forget(probe);
            let natted = leased && g1.reaches("192.0.2.2");
            (g1, g2, [leased, ping, beyond, natted])
        })
        .await;
        assert!(ok[0], "no DHCP lease from the network node's CNCI");
        assert!(ok[1], "no ping through the network node's CNCI");
        assert!(ok[2], "the CNCI does not reach beyond the compute network");
        assert!(ok[3], "a guest does not reach beyond the compute network");

        // Delete everything: the instances, then the CNCI (its process and namespace).
        for (i, node) in [(i1, n1), (i2, n3)] {
            c.send(&delete(i, node, false));
        }
        until("the subnet gone from the CNCI", || cn.link(&hub).is_none()).await;
        c.send(&delete(cnci, n3, false));
        c.expect("INSTANCE_DELETED of the CNCI", |m| match &m.payload {
            Payload::InstanceDeleted(d) if d.instance_uuid == cnci => Some(()),
            _ => None,
        })
        .await;
        let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(
            !String::from_utf8_lossy(&listed.stdout).contains(&ns),
            "the CNCI's namespace is left"
        );
        let host_end = agent::cnci::launch::host_end(cnci);
        // The kernel dismantles a deleted namespace (and the veth pair) in the background.
        until("the CNCI's veth gone", || h2.link(&host_end).is_none()).await;
        std::mem::forget((h1, h2, cn));
        drop((g1, g2));
        blocking(move || {
            network_node.stop();
            host1.stop();
        })
        .await;
        sched.stop.cancel();
    });
    // Whatever happened, no CNCI process or namespace stays behind.
    agent::cnci::launch::clean_up(&dir.path().join("state-nn/cnci"), Duration::from_secs(5));
    drop((switch, h1, nn, ctl, out));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
