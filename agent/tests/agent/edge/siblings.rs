//! Two subnets of one tenant, each with its own CNCI: REFRESH_CNCI routes between them.

use super::*;

/// A second subnet of the tenant, with its own CNCI.
const CNCI_B: Uuid = Uuid::from_bytes([0xce; 16]);
const CNCI_B_IP: &str = "198.18.0.101";
const KEY_A: u32 = 0x7006;
const KEY_B: u32 = 0x7007;

/// Instance `n` of subnet `10.250.<third>.0/24`, served by `cnci` at `cnci_ip` with `key`.
fn networking_in(cnci: Uuid, cnci_ip: &str, third: u8, key: u32, n: u8) -> Networking {
    Networking {
        vnic_mac: MacAddr([2, 0, 10, 250, third, n]),
        vnic_uuid: u(0x60 + n),
        concentrator_uuid: cnci,
        concentrator_ip: cnci_ip.parse().unwrap(),
        subnet: Cidr {
            addr: format!("10.250.{third}.0").parse().unwrap(),
            prefix: 24,
        },
        subnet_key: key,
        private_ip: format!("10.250.{third}.{n}").parse().unwrap(),
        public_ip: false,
        firewall: None,
    }
}

fn peer(ip: &str, third: u8, key: u32) -> CnciPeer {
    CnciPeer {
        physical_ip: ip.parse().unwrap(),
        subnet: Cidr {
            addr: format!("10.250.{third}.0").parse().unwrap(),
            prefix: 24,
        },
        tunnel_ip: format!("10.250.{third}.1").parse().unwrap(),
        tunnel_id: key,
    }
}

#[test]
fn two_subnets_of_a_tenant_route_through_their_cncis() {
    let name = "two_subnets_of_a_tenant_route_through_their_cncis";
    if !can_run_edge(name) {
        return;
    }
    let (switch, h1, ca_ns, cb_ns, ctl) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("cnci-a"),
        Netns::new("cnci-b"),
        Netns::new("ctl"),
    );
    underlay(
        &switch,
        &[(&h1, "198.18.0.1"), (&ca_ns, CNCI_IP), (&cb_ns, CNCI_B_IP)],
    );
    let listeners = [
        listen_in(&h1.name),
        listen_in(&ca_ns.name),
        listen_in(&cb_ns.name),
    ];
    let ports = ports(&listeners);
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let n1 = u(1);
    let cfg = compute_config(&pki, dir.path(), 0, n1, ports[0]);
    let names = (
        ctl.name.clone(),
        ca_ns.name.clone(),
        cb_ns.name.clone(),
        h1.name.clone(),
    );
    let dir_path = dir.path().to_owned();
    let result = run_in(&names.0.clone(), async move {
        let (_, ca_name, cb_name, h1_name) = names;
        let sched = real_scheduler(&pki).await;
        let [l1, l2, l3] = listeners;
        for l in [l1, l2, l3] {
            proxy(l, sched.addr.replace("localhost", "127.0.0.1"));
        }
        let mut c = controller(&pki, &sched.addr).await;
        let agent = HostAgent::start(&h1_name, "198.18.0.1", cfg);
        let mut cncis = Vec::new();
        for (i, (ns, uuid, ip)) in [(&ca_name, CNCI, CNCI_IP), (&cb_name, CNCI_B, CNCI_B_IP)]
            .into_iter()
            .enumerate()
        {
            let files = pki
                .leaf(Role::CNCIAGENT, Some(uuid))
                .write(&dir_path, &format!("cnci{i}"));
            let log = dir_path.join(format!("cnci{i}.log"));
            cncis.push((spawn_cnci(ns, uuid, ip, ports[1 + i], &files, &log), log));
        }
        let logs = || {
            cncis
                .iter()
                .map(|(_, l)| std::fs::read_to_string(l).unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n----\n")
        };
        let mut announced = Vec::new();
        while announced.len() < 2 {
            let a = c
                .expect("CONCENTRATOR_INSTANCE_ADDED", |m| match &m.payload {
                    Payload::ConcentratorInstanceAdded(a) => Some(a.instance_uuid),
                    _ => None,
                })
                .await;
            if !announced.contains(&a) {
                announced.push(a);
            }
        }
        c.stats(n1, "the agent's first STATS", |_| true).await;

        // One instance in each subnet, both on the one host.
        let (ia, ib) = (u(0xb7), u(0xb9));
        for (i, net) in [
            (ia, networking_in(CNCI, CNCI_IP, 0, KEY_A, 7)),
            (ib, networking_in(CNCI_B, CNCI_B_IP, 1, KEY_B, 9)),
        ] {
            start_active(&mut c, i, n1, TENANT, net).await;
        }
        let (na, nb) = (
            Netns {
                name: ca_name.clone(),
            },
            Netns {
                name: cb_name.clone(),
            },
        );
        until("both CNCIs serving their subnet", || {
            na.ip(&["-o", "addr", "show"]).contains("10.250.0.1/24")
                && nb.ip(&["-o", "addr", "show"]).contains("10.250.1.1/24")
                && logs().matches("subnet served").count() >= 2
        })
        .await;
        let h1 = Netns { name: h1_name };
        let ga = bare_guest(&h1, &bridge_name(KEY_A), 7, [2, 0, 10, 250, 0, 7]);
        let gb = bare_guest(&h1, &bridge_name(KEY_B), 9, [2, 0, 10, 250, 1, 9]);
        let script = dhcp_script(&dir_path);
        let (ga, gb, leased) = blocking(move || {
            let ok = dhcp(&ga, 7, &script) && dhcp(&gb, 9, &script);
            (ga, gb, ok)
        })
        .await;
        assert!(leased, "no DHCP lease\n{}", logs());
        let (ga, cut) = blocking(move || {
            let cut = ga.cut_off_from("10.250.1.9");
            (ga, cut)
        })
        .await;
        assert!(cut, "subnets routed before any REFRESH_CNCI");

        // REFRESH_CNCI: each CNCI routes the other's subnet via it, untranslated.
        let all = vec![peer(CNCI_IP, 0, KEY_A), peer(CNCI_B_IP, 1, KEY_B)];
        for cnci in [CNCI, CNCI_B] {
            c.send(&Payload::RefreshCnci(RefreshCnci {
                cnci_uuid: cnci,
                cncis: all.clone(),
            }));
        }
        until("the routes to the sibling subnets", || {
            na.ip(&["route", "show", "10.250.1.0/24"])
                .contains(&format!("via {CNCI_B_IP}"))
                && nb
                    .ip(&["route", "show", "10.250.0.0/24"])
                    .contains(&format!("via {CNCI_IP}"))
        })
        .await;
        let (ga, gb, ok) = blocking(move || {
            let ok = ga.reaches("10.250.1.9") && gb.reaches("10.250.0.7");
            (ga, gb, ok)
        })
        .await;
        assert!(ok, "between the tenant's subnets\n{}", logs());

        // A refresh without the sibling takes its route away.
        c.send(&Payload::RefreshCnci(RefreshCnci {
            cnci_uuid: CNCI,
            cncis: vec![peer(CNCI_IP, 0, KEY_A)],
        }));
        until("the route gone", || {
            na.ip(&["route", "show", "10.250.1.0/24"]).is_empty()
        })
        .await;
        let (ga, cut) = blocking(move || {
            let cut = ga.cut_off_from("10.250.1.9");
            (ga, cut)
        })
        .await;
        assert!(cut, "still routed after the sibling went");

        for i in [ia, ib] {
            c.send(&delete(i, n1, false));
        }
        until("both subnets gone from their CNCIs", || {
            na.link(&format!("kb-{KEY_A:08x}")).is_none()
                && nb.link(&format!("kb-{KEY_B:08x}")).is_none()
        })
        .await;
        std::mem::forget((h1, na, nb));
        drop((ga, gb));
        for (mut p, _) in cncis {
            p.signal(rustix::process::Signal::TERM);
            assert_eq!(p.exit_code().await, Some(0));
        }
        blocking(move || agent.stop()).await;
        sched.stop.cancel();
    });
    drop((switch, h1, ca_ns, cb_ns, ctl));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
