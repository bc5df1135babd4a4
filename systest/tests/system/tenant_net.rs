//! Tenant networking end to end (root): the controller with `--tenant-network cnci`, the real
//! scheduler, two compute nodes (agent daemons with the sim backend and real bridges, VXLAN
//! tunnels and taps) and a network node (an agent daemon that runs the CNCIs as `cumulo-cnci`
//! processes in namespaces of their own), each in a network namespace, joined by a switch
//! namespace. Two instances of tenant A land on the two compute nodes behind tenant A's CNCI;
//! guests standing in for their VMs (veths with the instance's MAC on the host's bridge) get
//! their addresses by DHCP from the CNCI and ping each other; tenant B's instance (its own CNCI)
//! reaches neither; deleting everything removes the CNCIs' namespaces from the network node.
//!
//! Needs root, `ip`, `ping`, `nft`, busybox and the built `cumulo-cnci` (`cargo build --bins`):
//! without them the test says why and passes, unless `CUMULO_REQUIRE_NETNS=1` (CI).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;
use controller::cluster::Cluster;
use controller::daemon::Controller;
use controller::engine::TenantNetwork;
use ssntp::{Role, Uuid};
use ssntp_net::client::Backoff;
use store::{InstanceState, Quota, Scope};
use testkit::TestPki;
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// Why this test cannot run here, if it cannot.
fn missing() -> Option<String> {
    if let Some(why) = testkit::netns::missing() {
        return Some(why);
    }
    if !cnci_binary().is_file() {
        return Some("cumulo-cnci is not built (cargo build --bins)".into());
    }
    None
}

/// `cumulo-cnci`, next to this test's directory of dependencies.
fn cnci_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(Path::parent).unwrap();
    debug.join("cumulo-cnci")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let name = format!("cumulo-{}-{n}-{tag}", std::process::id());
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) -> String {
        run(Command::new("ip").args(["-n", &self.name]).args(args))
    }

    fn has_link(&self, name: &str) -> bool {
        Command::new("ip")
            .args(["-n", &self.name, "link", "show", "dev", name])
            .output()
            .unwrap()
            .status
            .success()
    }

    fn ping(&self, to: &str) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.name, "ping", "-n", "-q", "-c", "1"])
            .args(["-W", "1", to])
            .output()
            .unwrap()
            .status
            .success()
    }

    fn reaches(&self, to: &str) -> bool {
        (0..10).any(|_| self.ping(to))
    }

    fn cut_off_from(&self, to: &str) -> bool {
        !self.ping(to) && !self.ping(to)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

fn enter(ns: &str) {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    rustix::thread::move_into_link_name_space(
        std::os::fd::AsFd::as_fd(&file),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .unwrap();
}

/// A listener on a namespace's loopback, forwarded (by [`proxy`]) to the scheduler: the test
/// certificates name only localhost.
fn listen_in(ns: &str) -> std::net::TcpListener {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        enter(&ns);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        l
    })
    .join()
    .unwrap()
}

fn proxy(listener: std::net::TcpListener, to: String) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = to.clone();
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(&to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
}

/// An agent daemon in a namespace, on its own thread and runtime; `network`: compute nodes
/// get tenant networking on their `u0` address.
struct NodeAgent {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NodeAgent {
    fn start(ns: &str, config: agent::daemon::DaemonConfig, node_ip: Option<IpAddr>) -> Self {
        let ns = ns.to_string();
        let stop = CancellationToken::new();
        let token = stop.clone();
        let thread = std::thread::spawn(move || {
            enter(&ns);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let done = rt.block_on(async move {
                match node_ip {
                    Some(node_ip) => {
                        let network = agent::net::Network::new(
                            agent::net::RtNetOps::new().unwrap(),
                            agent::net::NetConfig {
                                node_ip,
                                tunnel: agent::net::TunnelKind::Vxlan,
                                vxlan_port: agent::net::VXLAN_PORT,
                                metadata: false,
                            },
                        );
                        let backend = agent::sim::SimBackend::new(config.sim.clone()).unwrap();
                        agent::daemon::run_networked(config, backend, network, token).await
                    }
                    None => agent::daemon::run(config, token).await,
                }
            });
            if let Err(e) = done {
                eprintln!("the agent in {ns} stopped: {e}");
            }
        });
        NodeAgent {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn agent_config(
    pki: &TestPki,
    roles: Role,
    dir: &Path,
    scheduler: &str,
    network: &str,
    extra: &[&str],
) -> agent::daemon::DaemonConfig {
    let (ca, cert, key) = pki.leaf(roles, None).write(dir, "agent");
    let state = dir.join("state");
    let mut args: Vec<String> = [
        "cumulo-agent",
        "--ca-cert",
        ca.to_str().unwrap(),
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
        "--scheduler",
        scheduler,
        "--network",
        network,
        "--backend",
        "sim",
        "--state-dir",
        state.to_str().unwrap(),
        "--no-disk-limit",
        "--no-mem-limit",
        "--vcpus",
        "64",
        "--stats-interval",
        "1s",
        "--tunnel",
        "vxlan",
        "--console-listen",
        "off",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut config = agent::daemon::cli::Args::try_parse_from(args)
        .unwrap()
        .into_config()
        .unwrap();
    config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(300),
    };
    config
}

/// A guest for an instance: a namespace with a veth from `bridge` on `host`, the instance's
/// MAC, an address by DHCP.
fn guest(host: &Netns, bridge: &str, n: usize, mac: &str, script: &Path) -> Netns {
    let g = Netns::new(&format!("g{n}"));
    let (port, dev) = (format!("vg-{n}"), "eth0");
    host.ip(&[
        "link", "add", &port, "type", "veth", "peer", "name", dev, "netns", &g.name,
    ]);
    host.ip(&["link", "set", &port, "master", bridge, "up"]);
    g.ip(&["link", "set", dev, "address", mac]);
    g.ip(&["link", "set", dev, "up"]);
    let leased = Command::new("ip")
        .args(["netns", "exec", &g.name, "busybox", "udhcpc", "-i", dev])
        .args(["-f", "-q", "-n", "-t", "10", "-T", "1", "-s"])
        .arg(script)
        .output()
        .unwrap()
        .status
        .success();
    assert!(leased, "guest {n} ({mac}) got no DHCP lease");
    g
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(path),
                Ok(t) if t.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    files
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[test]
fn instances_of_a_tenant_reach_each_other_through_their_cnci() {
    if let Some(why) = missing() {
        assert!(
            std::env::var("CUMULO_REQUIRE_NETNS").as_deref() != Ok("1")
                || why.contains("cumulo-cnci")
                    && std::env::var("CUMULO_REQUIRE_BINS").as_deref() != Ok("1"),
            "CUMULO_REQUIRE_NETNS=1 but {why}"
        );
        eprintln!("skipping: {why}");
        return;
    }
    let (switch, h1, h2, nn, ctl) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("h2"),
        Netns::new("nn"),
        Netns::new("ctl"),
    );
    switch.ip(&["link", "add", "sw", "type", "bridge"]);
    switch.ip(&["link", "set", "sw", "up"]);
    for (i, (ns, addr)) in [
        (&h1, "198.18.0.1"),
        (&h2, "198.18.0.2"),
        (&nn, "198.18.0.3"),
    ]
    .into_iter()
    .enumerate()
    {
        let port = format!("p{i}");
        switch.ip(&[
            "link", "add", &port, "type", "veth", "peer", "name", "u0", "netns", &ns.name,
        ]);
        switch.ip(&["link", "set", &port, "master", "sw", "up"]);
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "u0"]);
        ns.ip(&["link", "set", "u0", "up"]);
    }
    let listeners = [
        listen_in(&h1.name),
        listen_in(&h2.name),
        listen_in(&nn.name),
    ];
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let hosts: Vec<(String, IpAddr)> = [(&h1, "198.18.0.1"), (&h2, "198.18.0.2")]
        .iter()
        .map(|(ns, ip)| (ns.name.clone(), ip.parse().unwrap()))
        .collect();
    let (ctl_name, nn_name) = (ctl.name.clone(), nn.name.clone());
    let host_names = [h1.name.clone(), h2.name.clone()];
    let dir_path = dir.path().to_owned();
    let test = std::thread::spawn(move || {
        enter(&ctl_name);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let sched = start_scheduler(&pki).await;
            let [l1, l2, l3] = listeners;
            for l in [l1, l2, l3] {
                proxy(l, sched.addr.replace("localhost", "127.0.0.1"));
            }
            let mut agents = Vec::new();
            for (i, (ns, ip)) in hosts.iter().enumerate() {
                let d = dir_path.join(format!("cn{i}"));
                let c = agent_config(
                    &pki,
                    Role::AGENT,
                    &d,
                    &format!("localhost:{}", ports[i]),
                    "cn",
                    &[],
                );
                agents.push(NodeAgent::start(ns, c, Some(*ip)));
            }
            // No CNCI certificate on the network node: the controller issues each CNCI its
            // own, bound to its UUID, in its START.
            let d = dir_path.join("nn");
            let binary = cnci_binary();
            let c = agent_config(
                &pki,
                Role::NETAGENT,
                &d,
                &format!("localhost:{}", ports[2]),
                "nn",
                &[
                    "--cnci-uplink",
                    "u0",
                    "--cnci-addresses",
                    "198.18.0.128/25",
                    "--cnci-binary",
                    binary.to_str().unwrap(),
                ],
            );
            agents.push(NodeAgent::start(&nn_name, c, None));

            let mut config = controller_config(&pki, &sched.addr, &dir_path);
            config.engine.tenant_network = TenantNetwork::Cnci;
            config.engine.cnci_linger = Duration::from_millis(500);
            config.engine.cnci_creds = Some(std::sync::Arc::new(
                controller::cnci_creds::CnciIssuer::from_pem(
                    pki.ca_pem(),
                    &pki.ca_key_pem(),
                    Duration::from_secs(3600),
                )
                .unwrap(),
            ));
            let controller = Controller::start(config).await.unwrap();
            // NODE_CONNECTED comes with the session, before the node's READY: wait for a STATS
            // from each node (it follows its READY on the same session), or the CNCI's START may
            // meet a network node the scheduler cannot place on yet (full_cloud).
            testkit::wait_until(T, "two compute nodes and a network node", || async {
                let nodes = controller.engine.nodes();
                let reported = |n: &&controller::cluster::Node| n.last_stats.is_some();
                nodes
                    .iter()
                    .filter(|n| n.kinds.compute)
                    .filter(reported)
                    .count()
                    == 2
                    && nodes
                        .iter()
                        .filter(|n| n.kinds.network)
                        .any(|n| reported(&n))
            })
            .await;

            // Tenant A: two instances (one per compute node); tenant B: one.
            let (ta, wa) = seed(&controller, Quota::default());
            let (tb, wb) = seed(&controller, Quota::default());
            let a = launch(&controller, ta, wa, 2);
            let b = launch(&controller, tb, wb, 1);
            let all: Vec<Uuid> = a.iter().chain(&b).copied().collect();
            let deadline = tokio::time::Instant::now() + T;
            while states(&controller, &all) != vec![Some(InstanceState::Active); 3] {
                if tokio::time::Instant::now() > deadline {
                    let cncis = blocking(|| controller.store.cncis(Scope::All).unwrap());
                    let log = std::fs::read_dir(dir_path.join("nn/state/cnci"))
                        .map(|d| {
                            d.filter_map(|e| e.ok())
                                .map(|e| {
                                    format!(
                                        "{}: {}",
                                        e.path().display(),
                                        std::fs::read_to_string(e.path()).unwrap_or_default()
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default();
                    panic!(
                        "not active: {:?}\nCNCIs: {cncis:#?}\nnodes: {:#?}\n{log}",
                        states(&controller, &all),
                        controller.engine.nodes()
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let instances: Vec<_> = blocking(|| {
                all.iter()
                    .map(|id| controller.store.instance(Scope::All, *id).unwrap())
                    .collect()
            });
            // Each CNCI connected with a certificate of its own, bound to its UUID, kept for
            // it alone (0600); the node's records and logs hold no private key.
            let cncis = blocking(|| controller.store.cncis(Scope::All).unwrap());
            assert_eq!(cncis.len(), 2, "{cncis:#?}");
            let cnci_dir = dir_path.join("nn/state/cnci");
            let mut serials = Vec::new();
            for cnci in &cncis {
                let (cert, key) = agent::cnci::launch::credentials::paths(&cnci_dir, cnci.id);
                for path in [&cert, &key] {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
                    assert_eq!(mode, 0o600, "{}", path.display());
                }
                let ca = dir_path.join("cnci-test-ca.pem");
                std::fs::write(&ca, pki.ca_pem()).unwrap();
                let own = ssntp_net::tls::TlsIdentity::load(&ca, &cert, &key)
                    .unwrap()
                    .own();
                assert_eq!(own.binding, ssntp::UuidBinding::Bound(cnci.id));
                assert_eq!(own.roles, Role::CNCIAGENT);
                serials.push(std::fs::read_to_string(&cert).unwrap());
            }
            assert_ne!(serials[0], serials[1]);
            for entry in walk(&dir_path.join("nn/state")) {
                if entry.extension().is_some_and(|e| e == "pem") {
                    continue;
                }
                let text = std::fs::read(&entry).unwrap_or_default();
                assert!(
                    !text.windows(11).any(|w| w == b"PRIVATE KEY"),
                    "a private key in {}",
                    entry.display()
                );
            }
            let nodes: Vec<Uuid> = controller
                .engine
                .nodes()
                .iter()
                .filter(|n| n.kinds.compute)
                .map(|n| n.id)
                .collect();
            let script = testkit::netns::dhcp_script(&dir_path).unwrap();
            let host_ns: Vec<Netns> = host_names
                .iter()
                .map(|n| Netns { name: n.clone() })
                .collect();
            let mut guests = Vec::new();
            for (n, i) in instances.iter().enumerate() {
                let node = i.node.unwrap();
                // The host whose agent has the instance's tap.
                let tap = agent::net::tap_name(i.id);
                let deadline = tokio::time::Instant::now() + T;
                while !host_ns.iter().any(|h| h.has_link(&tap)) {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "no tap {tap} for {i:#?}\n{}\n{}",
                        host_ns[0].ip(&["-o", "link"]),
                        host_ns[1].ip(&["-o", "link"])
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                assert!(nodes.contains(&node), "on a compute node");
                let h = host_ns.iter().find(|h| h.has_link(&tap)).unwrap();
                let IpAddr::V4(net) = i.subnet.addr else {
                    panic!("an IPv6 subnet")
                };
                let key = (u32::from(net) >> 8) & 0x00ff_ffff;
                let bridge = agent::net::names::bridge_name(key);
                let mac = i.mac.to_string();
                let g = blocking(|| guest(h, &bridge, n, &mac, &script));
                assert!(
                    g.ip(&["addr", "show", "eth0"])
                        .contains(&format!("inet {}/", i.ip)),
                    "the lease is the controller's address"
                );
                guests.push(g);
            }
            let (a1, a2, b1) = (&guests[0], &guests[1], &guests[2]);
            let (ip_a1, ip_a2) = (instances[0].ip.to_string(), instances[1].ip.to_string());
            assert_ne!(instances[0].node, instances[1].node, "placement spread A");
            let ip_b1 = instances[2].ip.to_string();
            blocking(|| {
                assert!(
                    a1.reaches(&ip_a2),
                    "tenant A's instances through their CNCI"
                );
                assert!(a2.reaches(&ip_a1), "and back");
                // Tenant B's subnet may have the same addresses as A's: B never reaches A's
                // instances, whether an address is B's own or not.
                for ip in [&ip_a1, &ip_a2] {
                    if *ip != ip_b1 {
                        assert!(b1.cut_off_from(ip), "tenant B reaches tenant A at {ip}");
                    }
                }
                for (g, ip) in [(a1, &ip_a1), (a2, &ip_a2)] {
                    if *ip != ip_b1 {
                        assert!(g.cut_off_from(&ip_b1), "tenant A reaches tenant B");
                    }
                }
            });

            // Delete everything: the CNCIs go after their linger, with their namespaces.
            let cncis: Vec<Uuid> = blocking(|| {
                controller
                    .store
                    .cncis(Scope::All)
                    .unwrap()
                    .iter()
                    .map(|c| c.id)
                    .collect()
            });
            assert_eq!(cncis.len(), 2, "one CNCI per tenant subnet");
            blocking(|| {
                for i in &instances {
                    controller
                        .engine
                        .delete(Scope::All, i.id, &controller::cluster::Caller::default())
                        .unwrap();
                }
            });
            wait_states(&controller, &all, None, "deleted").await;
            testkit::wait_until(T, "the CNCIs' namespaces gone", || async {
                let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
                let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
                cncis
                    .iter()
                    .all(|c| !listed.contains(&agent::cnci::launch::ns_name(*c)))
            })
            .await;
            drop(guests);
            for h in host_ns {
                std::mem::forget(h);
            }
            controller.stop().await;
            drop(agents);
            drop(sched);
        });
    });
    let result = test.join();
    // Whatever happened, no CNCI process or namespace stays behind.
    agent::cnci::launch::clean_up(&dir.path().join("nn/state/cnci"), Duration::from_secs(5));
    drop((switch, h1, h2, nn, ctl));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
