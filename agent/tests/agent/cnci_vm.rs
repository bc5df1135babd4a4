//! The CNCI as a VM (root and libvirt): a network node's agent (`--network nn --backend libvirt
//! --cnci-image cnci`) boots the CNCI placed on it from the CNCI guest image
//! (`scripts/cnci-guest.sh`: the tiny guest with this build's `cumulo-cnci` inside) under QEMU;
//! the VM's tap moves onto a bridge in the CNCI's namespace on the network node, and the VM
//! reaches the scheduler through the agent's relay there. A compute node's instance (a guest
//! namespace on host 1) gets its address from the VM's DHCP server over the VXLAN tunnel, pings
//! its gateway (the VM) and an outside address beyond the compute network through the VM's
//! outbound NAT, and not the compute network itself (the control plane: the CNCI's
//! `--protect`, which its node's agent gives it); after a restart
//! of the network node's agent the VM is booted again and serves again; deleting the CNCI
//! removes the domain, its tap and its namespace.
//!
//! Topology as in [`crate::edge`]: a switch namespace, host 1 (compute, sim instances with
//! tenant networking), the network node, an outside namespace, and the scheduler and a fake
//! controller in a namespace of their own. libvirtd runs where this test starts (its QEMU opens
//! the tap there: `--cnci-tap-netns`).
//!
//! Needs root, the tools of [`crate::edge`] and `CUMULO_LIBVIRT_URI` (skipped otherwise, a
//! failure under `CUMULO_REQUIRE_NETNS=1` / `CUMULO_LIBVIRT_REQUIRED=1`).
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use crate::edge::{
    KEY, TENANT, bare_guest, blocking, can_run_edge, cnci_start, dhcp, dhcp_script, mac, networking,
};
use crate::libvirt::{VMS, libvirt_args, libvirt_uri, state_dir};
use crate::netns::{Netns, underlay};
use crate::overlay::{HostAgent, compute_config, enter, listen_in, ports, proxy, run_in, until};
use crate::support::*;
use agent::net::names::bridge_name;
use std::net::IpAddr;
use virt::connect::Connect;
use virt::domain::Domain;

/// How long the CNCI VM may take to boot and announce itself (QEMU without KVM).
const BOOT: Duration = Duration::from_secs(120);

/// Builds the CNCI guest image from this build's `cumulo-cnci` into `<state>/images/cnci`.
fn cnci_image(state: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cnci-guest.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_cumulo-cnci"))
        .arg(state.join("images/cnci"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The agent daemon in namespace `ns` on its own thread, as `cumulo-agent` runs it.
struct NsDaemon {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<Result<(), agent::daemon::DaemonError>>>,
}

impl NsDaemon {
    fn start(ns: &str, config: agent::daemon::DaemonConfig) -> NsDaemon {
        let ns = ns.to_string();
        let stop = CancellationToken::new();
        let token = stop.clone();
        let thread = std::thread::spawn(move || {
            enter(&ns);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(agent::daemon::run(config, token))
        });
        NsDaemon {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
    }
}

impl Drop for NsDaemon {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Whether libvirt at `uri` has a domain named `name`.
fn domain_exists(uri: &str, name: &str) -> bool {
    let mut c = Connect::open(Some(uri)).unwrap();
    let found = Domain::lookup_by_name(&c, name).is_ok();
    let _ = c.close();
    found
}

/// Destroys and undefines domain `name` if it exists (a failed test's leftover).
fn remove_domain(uri: &str, name: &str) {
    let Ok(mut c) = Connect::open(Some(uri)) else {
        return;
    };
    if let Ok(d) = Domain::lookup_by_name(&c, name) {
        let _ = d.destroy();
        let _ = d.undefine();
    }
    let _ = c.close();
}

#[test]
fn a_network_node_runs_the_cnci_as_a_vm() {
    let name = "a_network_node_runs_the_cnci_as_a_vm";
    if !can_run_edge(name) {
        return;
    }
    let Some(uri) = libvirt_uri() else {
        return;
    };
    let _one_vm_test_at_a_time = VMS.blocking_lock();
    // libvirtd's QEMU opens taps in the namespace this process started in.
    let tap_netns = format!("/proc/{}/ns/net", std::process::id());
    let (switch, h1, nn, ctl, outside) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("nn"),
        Netns::new("ctl"),
        Netns::new("out"),
    );
    underlay(
        &switch,
        &[
            (&h1, "198.18.0.1"),
            (&nn, "198.18.0.3"),
            (&outside, "198.18.0.200"),
        ],
    );
    // The outside world beyond the compute network: an address of the outside namespace that
    // the network node routes to it (the outside answers the CNCI's compute address on link).
    outside.ip(&["addr", "add", "203.0.113.200/32", "dev", "lo"]);
    nn.ip(&["route", "add", "203.0.113.200/32", "via", "198.18.0.200"]);
    let listeners = [listen_in(&h1.name), listen_in(&nn.name)];
    let ports = ports(&listeners);
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let (n1, n3) = (u(1), u(3));
    let h1_config = compute_config(&pki, dir.path(), 0, n1, ports[0]);
    // The network node: NETAGENT only, libvirt, and the CNCI image in its image store.
    // No CNCI certificate on the node: each START of the CNCI carries its own (as the
    // controller's do), bound to its UUID.
    let files = agent_files(&pki, Role::NETAGENT, Some(n3), &dir.path().join("nn"));
    let state = state_dir(dir.path());
    cnci_image(&state);
    let mut extra: Vec<String> = libvirt_args(&uri);
    extra.extend(
        [
            "--cnci-uplink",
            "u0",
            "--cnci-addresses",
            "198.18.0.128/25",
            "--cnci-image",
            "cnci",
            "--cnci-tap-netns",
            &tap_netns,
            "--tunnel",
            "vxlan",
        ]
        .map(String::from),
    );
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut argv = vec!["cumulo-agent".to_string()];
    argv.extend(crate::support::argv(
        &files,
        &format!("localhost:{}", ports[1]),
        &state,
        "nn",
        &extra,
    ));
    let mut nn_config = Args::try_parse_from(argv).unwrap().into_config().unwrap();
    nn_config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(300),
    };
    let nn_again = nn_config.clone();
    let names = (ctl.name.clone(), nn.name.clone(), h1.name.clone());
    let dir_path = dir.path().to_owned();
    let test_uri = uri.clone();
    let seeds = state.join("libvirt/instances");
    let result = run_in(&names.0.clone(), async move {
        let (_, nn_name, h1_name) = names;
        let uri = test_uri;
        let sched = real_scheduler(&pki).await;
        let [l1, l2] = listeners;
        for l in [l1, l2] {
            proxy(l, sched.addr.replace("localhost", "127.0.0.1"));
        }
        let mut c = controller(&pki, &sched.addr).await;
        let host1 = HostAgent::start(&h1_name, "198.18.0.1", h1_config);
        let network_node = NsDaemon::start(&nn_name, nn_config);
        for n in [n1, n3] {
            c.stats(n, "the agent's first STATS", |_| true).await;
        }

        // The controller's START for the CNCI: the network node boots it as a VM.
        // A UUID no other test uses: the CNCI's namespace and tap are named by it.
        let cnci = u(0xc9);
        let with_own = |start: Start| {
            let leaf = pki.leaf(Role::CNCIAGENT, Some(cnci));
            let mut start = start;
            let meta = start.meta_data.get_or_insert_with(Default::default);
            meta.insert(ssntp::payload::CNCI_CERT_KEY.into(), leaf.cert_pem.clone());
            meta.insert(ssntp::payload::CNCI_KEY_KEY.into(), leaf.key_pem.clone());
            (start, leaf.cert_pem)
        };
        let (first, first_cert) = with_own(cnci_start(cnci));
        let began = Instant::now();
        c.send(&start_payload(first));
        let hello = c
            .expect_within(
                BOOT,
                "the CNCI VM's CONCENTRATOR_INSTANCE_ADDED",
                |m| match &m.payload {
                    Payload::ConcentratorInstanceAdded(a) => Some(a.clone()),
                    Payload::StartFailure(f) => panic!("{f:?}"),
                    _ => None,
                },
            )
            .await;
        eprintln!(
            "CNCI VM: START to CONCENTRATOR_INSTANCE_ADDED in {:?}",
            began.elapsed()
        );
        assert_eq!((hello.instance_uuid, hello.tenant_uuid), (cnci, TENANT));
        assert_eq!(
            hello.concentrator_ip,
            "198.18.0.129".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            hello.concentrator_mac.0,
            agent::cnci::launch::vm_mac("198.18.0.129".parse().unwrap())
        );
        let domain = format!("cumulo-{cnci}");
        assert!(domain_exists(&uri, &domain), "no domain {domain}");
        let ns = agent::cnci::launch::ns_name(cnci);
        let cn = Netns { name: ns.clone() };
        let tap = agent::net::tap_name(cnci);
        let link = cn.link(&tap);
        assert!(
            link.as_deref().is_some_and(|l| l.contains("master cb0")),
            "the VM's tap is not on the CNCI namespace's bridge: {link:?}"
        );

        // An instance of the tenant on host 1, served by the CNCI VM.
        let i1 = u(0xa7);
        let mut net = networking(7);
        net.concentrator_uuid = cnci;
        net.concentrator_ip = hello.concentrator_ip;
        start_active(&mut c, i1, n1, TENANT, net).await;
        let bridge = bridge_name(KEY);
        let h1 = Netns { name: h1_name };
        let g1 = bare_guest(&h1, &bridge, 7, mac(7));
        let script = dhcp_script(&dir_path);
        let (g1, ok) = blocking(move || {
            let leased = dhcp(&g1, 7, &script);
            let gateway = leased && g1.reaches("10.250.0.1");
            let outside = gateway && g1.reaches("203.0.113.200");
            // The compute network is the control plane's: the CNCI forwards nothing new there.
            let protected = outside && g1.cut_off_from("198.18.0.200");
            (g1, [leased, gateway, outside, protected])
        })
        .await;
        assert!(ok[0], "no DHCP lease from the CNCI VM");
        assert!(ok[1], "no ping to the gateway (the CNCI VM)");
        assert!(ok[2], "no ping to the outside through the CNCI VM's NAT");
        assert!(
            ok[3],
            "the guest reached the compute network (198.18.0.200) through the CNCI VM"
        );

        // The network node's agent restarts: the VM the earlier run left (its relay gone
        // with that run) is powered off and booted again, and serves the subnet again.
        blocking(move || network_node.stop()).await;
        let network_node = NsDaemon::start(&nn_name, nn_again);
        c.expect_within(
            BOOT,
            "the CNCI VM's announcement after a restart",
            |m| match &m.payload {
                Payload::ConcentratorInstanceAdded(a) if a.instance_uuid == cnci => Some(()),
                _ => None,
            },
        )
        .await;
        let (g1, again) = blocking(move || {
            let ok = g1.reaches("10.250.0.1");
            (g1, ok)
        })
        .await;
        assert!(again, "no ping to the CNCI VM after the agent's restart");

        // Stopped, then started again with new credentials (as the controller restarts an
        // exited CNCI, e.g. one whose certificate expired): its seed is rewritten with them
        // before it boots, and it serves the subnet again.
        let seed = seeds.join(cnci.to_string()).join("seed.iso");
        let body = |pem: &str| pem.lines().nth(1).unwrap().to_string();
        let holds = |cert: &str| {
            let iso = std::fs::read(&seed).unwrap();
            let line = body(cert);
            iso.windows(line.len()).any(|w| w == line.as_bytes())
        };
        assert!(
            holds(&first_cert),
            "the seed lacks the CNCI's own certificate"
        );
        c.send(&delete(cnci, n3, true));
        c.expect_within(BOOT, "INSTANCE_STOPPED of the CNCI", |m| match &m.payload {
            Payload::InstanceStopped(e) if e.instance_uuid == cnci => Some(()),
            _ => None,
        })
        .await;
        let (mut again, second_cert) = with_own(cnci_start(cnci));
        again.restart = true;
        again.requirements.node_id = Some(n3);
        c.send(&start_payload(again));
        c.expect_within(
            BOOT,
            "the CNCI VM's announcement after its restart",
            |m| match &m.payload {
                Payload::ConcentratorInstanceAdded(a) if a.instance_uuid == cnci => Some(()),
                Payload::StartFailure(f) if f.instance_uuid == cnci => panic!("{f:?}"),
                _ => None,
            },
        )
        .await;
        assert!(holds(&second_cert), "the seed was not rewritten");
        assert!(!holds(&first_cert));
        // It serves host 1 again once host 1 announces its subnet again (a rebooted CNCI VM
        // has a new kernel with no tunnel ends; nodes announce their subnets again every
        // TENANT_REANNOUNCE).
        let deadline = Instant::now() + agent::daemon::TENANT_REANNOUNCE + BOOT;
        let mut g1 = g1;
        loop {
            let (back, served) = blocking(move || {
                let ok = g1.reaches("10.250.0.1");
                (g1, ok)
            })
            .await;
            g1 = back;
            if served {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no ping to the CNCI VM after its restart"
            );
        }

        // Delete the instance, then the CNCI: domain, tap and namespace go.
        c.send(&delete(i1, n1, false));
        c.expect("INSTANCE_DELETED of the instance", |m| match &m.payload {
            Payload::InstanceDeleted(d) if d.instance_uuid == i1 => Some(()),
            _ => None,
        })
        .await;
        c.send(&delete(cnci, n3, false));
        c.expect("INSTANCE_DELETED of the CNCI", |m| match &m.payload {
            Payload::InstanceDeleted(d) if d.instance_uuid == cnci => Some(()),
            _ => None,
        })
        .await;
        assert!(!domain_exists(&uri, &domain), "the CNCI's domain is left");
        let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(
            !String::from_utf8_lossy(&listed.stdout).contains(&ns),
            "the CNCI's namespace is left"
        );
        let nn = Netns { name: nn_name };
        let host_end = agent::cnci::launch::host_end(cnci);
        until("the CNCI's veth gone", || nn.link(&host_end).is_none()).await;
        assert!(
            !Path::new("/sys/class/net").join(&tap).exists(),
            "the VM's tap is left where QEMU ran"
        );
        std::mem::forget((h1, nn, cn));
        drop(g1);
        blocking(move || {
            network_node.stop();
            host1.stop();
        })
        .await;
        sched.stop.cancel();
    });
    // Whatever happened, no CNCI domain, namespace or tap stays behind.
    agent::cnci::launch::clean_up(&state.join("cnci"), Duration::from_secs(5));
    remove_domain(&uri, &format!("cumulo-{}", u(0xc9)));
    let _ = Command::new("ip")
        .args(["link", "del", &agent::net::tap_name(u(0xc9))])
        .output();
    drop((switch, h1, nn, ctl, outside));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
