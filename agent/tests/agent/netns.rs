//! Tenant networking for real: [`RtNetOps`] and [`Network`] in network namespaces these tests
//! make (root only). Two compute "hosts" and a stand-in CNCI, joined by a switch namespace:
//! each host makes the bridge, overlay tunnel (to the CNCI) and tap of a tenant subnet; the
//! CNCI terminates both tunnels on one bridge (made here with `ip`: the real CNCI is
//! `cumulo-cnci`'s job); a "guest" namespace per instance, plugged into its host's bridge by a
//! veth pair (standing in for the VM on the tap), pings the other host's guest through the
//! CNCI. Another tenant with the same subnet address and another key is cut off; an agent
//! restart (a new `Network`, rebuilt from the links' aliases) keeps traffic flowing; the last
//! detach removes everything.
//!
//! Without root or `ip`/`ping` the tests say why and pass, unless `CUMULO_REQUIRE_NETNS=1` (CI)
//! makes that a failure. Every namespace is deleted by a guard, also when a test fails.
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use agent::net::names::{self, LinkRole, bridge_name, tunnel_name};
use agent::net::{
    Attached, Cidr, Detached, NetConfig, NetError, Network, RtNetOps, SubnetId, TunnelChoice,
    TunnelKind, VXLAN_PORT, Vnic, resolve_tunnel, tap_mac, tap_name,
};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use uuid::Uuid;

mod filter;
mod hub;
mod kernel;
mod metadata;

/// Why these tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    for tool in ["ip", "ping"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "`{tool}` is not installed (scripts/deps.sh installs it)"
            ));
        }
    }
    None
}

/// Whether to run; says why not on stderr, or fails under `CUMULO_REQUIRE_NETNS=1`.
pub(crate) fn can_run(test: &str) -> bool {
    let Some(why) = missing() else { return true };
    if std::env::var("CUMULO_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: CUMULO_REQUIRE_NETNS=1 but {why}");
    }
    eprintln!("skipping {test}: {why}");
    false
}

/// Whether `tools` are all installed; says which is not on stderr, or fails under
/// `CUMULO_REQUIRE_NETNS=1`.
pub(crate) fn tools_or_skip(tools: &[&str]) -> bool {
    for tool in tools {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(
                std::env::var("CUMULO_REQUIRE_NETNS").as_deref() != Ok("1"),
                "CUMULO_REQUIRE_NETNS=1 but `{tool}` is not installed"
            );
            eprintln!("skipping: `{tool}` is not installed");
            return false;
        }
    }
    true
}

pub(crate) fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace, deleted on drop.
pub(crate) struct Netns {
    pub(crate) name: String,
}

impl Netns {
    pub(crate) fn new(tag: &str) -> Netns {
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(sweep_stale);
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let name = format!("cumulo-{}-{n}-{tag}", std::process::id());
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS`, which must succeed; its stdout.
    pub(crate) fn ip(&self, args: &[&str]) -> String {
        let out = run(Command::new("ip").args(["-n", &self.name]).args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The names of the links.
    fn links(&self) -> Vec<String> {
        self.ip(&["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect()
    }

    /// `ip -d link show NAME`, or `None` if there is no such link.
    pub(crate) fn link(&self, name: &str) -> Option<String> {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-d", "link", "show", "dev", name])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One ping from this namespace, waiting up to `wait` seconds per packet.
    fn ping(&self, to: &str, count: u32, wait: u32) -> bool {
        Command::new("ip")
            .args(["netns", "exec", &self.name, "ping", "-n", "-q"])
            .args(["-c", &count.to_string(), "-W", &wait.to_string(), to])
            .output()
            .unwrap()
            .status
            .success()
    }

    /// Pings until one answer comes (the first may wait for ARP and bridge learning).
    pub(crate) fn reaches(&self, to: &str) -> bool {
        (0..10).any(|_| self.ping(to, 1, 1))
    }

    /// No answer to two pings.
    pub(crate) fn cut_off_from(&self, to: &str) -> bool {
        !self.ping(to, 2, 1)
    }
}

/// Deletes namespaces that an earlier run of these tests left behind when it was killed (their
/// names carry the process ID of a process that is gone).
fn sweep_stale() {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name
            .strip_prefix("cumulo-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).output();
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A thread inside a namespace with its own tokio runtime: everything the agent would do on
/// that host runs there (the netlink socket and `/dev/net/tun` follow the thread's namespace).
struct Host {
    jobs: Option<tokio::sync::mpsc::UnboundedSender<Job>>,
    thread: Option<JoinHandle<()>>,
    ns: String,
}

type Net = Arc<tokio::sync::Mutex<Network<RtNetOps>>>;

impl Host {
    fn new(ns: &Netns) -> Host {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let path = format!("/run/netns/{}", ns.name);
        let thread = std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&file),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // Always driven, between jobs too: tasks a job spawned (a metadata responder) go on.
            rt.block_on(async move {
                while let Some(job) = rx.recv().await {
                    job.await;
                }
            });
        });
        Host {
            jobs: Some(tx),
            thread: Some(thread),
            ns: ns.name.clone(),
        }
    }

    fn run<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::pin(async move {
            let _ = tx.send(fut.await);
        });
        self.jobs.as_ref().unwrap().send(job).unwrap();
        rx.recv()
            .unwrap_or_else(|_| panic!("the thread of host {} died", self.ns))
    }

    /// A fresh agent's networking: a new netlink socket, `--tunnel auto`, nothing known yet.
    fn network(&self, node_ip: &str) -> Net {
        self.network_with(node_ip, false)
    }

    /// The same, `metadata`: with the metadata service's rule in the port filters.
    fn network_with(&self, node_ip: &str, metadata: bool) -> Net {
        let node_ip: IpAddr = node_ip.parse().unwrap();
        self.run(async move {
            let ops = RtNetOps::new().unwrap();
            let tunnel = resolve_tunnel(&ops, TunnelChoice::Auto).await.unwrap();
            let cfg = NetConfig {
                node_ip,
                tunnel,
                vxlan_port: VXLAN_PORT,
                metadata,
            };
            let mut net = Network::new(ops, cfg);
            net.set_metadata(metadata);
            Arc::new(tokio::sync::Mutex::new(net))
        })
    }

    fn attach(&self, net: &Net, vnic: Vnic) -> Attached {
        let net = net.clone();
        self.run(async move { net.lock().await.attach(&vnic).await })
            .unwrap()
    }

    fn detach(&self, net: &Net, instance: Uuid) -> Option<Detached> {
        let net = net.clone();
        self.run(async move { net.lock().await.detach(instance).await })
            .unwrap()
    }

    fn rebuild(&self, net: &Net) -> agent::net::Rebuilt {
        let net = net.clone();
        self.run(async move { net.lock().await.rebuild().await })
            .unwrap()
    }

    fn tunnel(&self, net: &Net) -> TunnelKind {
        let net = net.clone();
        self.run(async move { net.lock().await.config().tunnel })
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const TENANT_A: u128 = 0xa;
const TENANT_B: u128 = 0xb;
const KEY_A: u32 = 0x0a_fa00;
const KEY_B: u32 = 0x0a_fb00;

fn subnet(tenant: u128, key: u32, cnci_ip: &str) -> SubnetId {
    SubnetId {
        tenant: Uuid::from_u128(tenant),
        subnet: Cidr {
            addr: "10.250.0.0".parse().unwrap(),
            prefix: 24,
        },
        key,
        cnci: Uuid::from_u128(0xc0c1_0000 + tenant),
        cnci_ip: cnci_ip.parse().unwrap(),
    }
}

fn vnic(n: u8, subnet: SubnetId) -> Vnic {
    Vnic {
        veth: false,
        instance: Uuid::from_u128(u128::from(n) << 100 | 0x1234),
        mac: [2, 0, 0, 0, 0xee, n],
        subnet,
    }
}

pub(crate) fn mac_text(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Namespaces joined by a bridge in a switch namespace, each with `u0` at its address.
pub(crate) fn underlay(switch: &Netns, hosts: &[(&Netns, &str)]) {
    switch.ip(&["link", "add", "sw", "type", "bridge"]);
    switch.ip(&["link", "set", "sw", "up"]);
    for (i, (ns, addr)) in hosts.iter().enumerate() {
        let port = format!("p{i}");
        switch.ip(&[
            "link", "add", &port, "type", "veth", "peer", "name", "u0", "netns", &ns.name,
        ]);
        switch.ip(&["link", "set", &port, "master", "sw", "up"]);
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "u0"]);
        ns.ip(&["link", "set", "u0", "up"]);
    }
}

const CNCI_IP: &str = "198.18.0.100";

/// `bridge ARGS` in a namespace.
fn bridge_cmd(ns: &Netns, args: &[&str]) {
    run(Command::new("ip")
        .args(["netns", "exec", &ns.name, "bridge"])
        .args(args));
}

/// A stand-in CNCI for one subnet: the compute nodes' tunnels end on one bridge. VXLAN: one
/// device per VNI (the kernel allows no second one in a namespace), flooding to every node,
/// with hairpin so that node-to-node frames go back out of it. GRE-tap: one tunnel per node.
fn cnci_subnet(cnci: &Netns, kind: TunnelKind, key: u32, nodes: &[&str]) {
    let bridge = format!("sb{key:x}");
    cnci.ip(&["link", "add", &bridge, "type", "bridge"]);
    cnci.ip(&["link", "set", &bridge, "up"]);
    let key_text = key.to_string();
    match kind {
        TunnelKind::Vxlan => {
            let dev = format!("sv{key:x}");
            cnci.ip(&[
                "link", "add", &dev, "type", "vxlan", "id", &key_text, "local", CNCI_IP, "dstport",
                "4789",
            ]);
            cnci.ip(&["link", "set", &dev, "master", &bridge, "up"]);
            for node in nodes {
                bridge_cmd(
                    cnci,
                    &[
                        "fdb",
                        "append",
                        "00:00:00:00:00:00",
                        "dev",
                        &dev,
                        "dst",
                        node,
                    ],
                );
            }
            bridge_cmd(cnci, &["link", "set", "dev", &dev, "hairpin", "on"]);
        }
        TunnelKind::GreTap => {
            for (i, node) in nodes.iter().enumerate() {
                let dev = format!("sg{key:x}-{i}");
                cnci.ip(&[
                    "link", "add", &dev, "type", "gretap", "key", &key_text, "local", CNCI_IP,
                    "remote", node,
                ]);
                cnci.ip(&["link", "set", &dev, "master", &bridge, "up"]);
            }
        }
    }
}

/// A guest namespace standing in for the VM of `vnic`: a veth pair from the host's bridge,
/// the guest end with the VM's MAC and address.
pub(crate) fn guest(host: &Netns, bridge: &str, port: &str, vnic: &Vnic, addr: &str) -> Netns {
    let g = Netns::new(port);
    host.ip(&[
        "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", &g.name,
    ]);
    host.ip(&["link", "set", port, "master", bridge, "up"]);
    g.ip(&["link", "set", "eth0", "address", &mac_text(&vnic.mac)]);
    g.ip(&["addr", "add", addr, "dev", "eth0"]);
    g.ip(&["link", "set", "eth0", "up"]);
    g
}

/// The MAC a guest has learnt for an address.
fn neighbour(g: &Netns, addr: &str) -> String {
    g.ip(&["neigh", "show", addr])
}

#[test]
fn two_hosts_overlay_isolation_restart_and_cleanup() {
    if !can_run("two_hosts_overlay_isolation_restart_and_cleanup") {
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
    let (host1, host2) = (Host::new(&h1), Host::new(&h2));
    let n1 = host1.network("198.18.0.1");
    let n2 = host2.network("198.18.0.2");
    let kind = host1.tunnel(&n1);
    eprintln!("tunnel kind here: {kind}");
    for key in [KEY_A, KEY_B] {
        cnci_subnet(&cnci, kind, key, &["198.18.0.1", "198.18.0.2"]);
    }

    // Tenant A: one instance on each host.
    let a1 = vnic(1, subnet(TENANT_A, KEY_A, CNCI_IP));
    let a2 = vnic(2, subnet(TENANT_A, KEY_A, CNCI_IP));
    let at1 = host1.attach(&n1, a1);
    let at2 = host2.attach(&n2, a2);
    assert!(at1.first && at2.first);
    assert_eq!(at1.bridge, bridge_name(KEY_A));

    // The kernel has what the names and aliases say.
    let tap = h1.link(&tap_name(a1.instance)).unwrap();
    assert!(tap.contains("tun type tap"), "{tap}");
    assert!(tap.contains(&mac_text(&tap_mac(&a1.mac))), "{tap}");
    assert!(tap.contains(&format!("master {}", at1.bridge)), "{tap}");
    let tunnel = h1.link(&tunnel_name(kind, KEY_A)).unwrap();
    assert!(
        tunnel.contains(&format!("master {}", at1.bridge)),
        "{tunnel}"
    );
    assert!(tunnel.contains("learning off"), "{tunnel}");
    match kind {
        TunnelKind::Vxlan => assert!(tunnel.contains(&format!("vxlan id {KEY_A}")), "{tunnel}"),
        TunnelKind::GreTap => assert!(tunnel.contains("gretap"), "{tunnel}"),
    }
    assert!(tunnel.contains(&format!("remote {CNCI_IP}")), "{tunnel}");
    let alias = tunnel
        .lines()
        .find_map(|l| l.trim().strip_prefix("alias "))
        .unwrap();
    assert!(
        matches!(LinkRole::parse(alias), Some(LinkRole::Tunnel { subnet, .. }) if subnet == a1.subnet),
        "{alias}"
    );

    let ga1 = guest(&h1, &at1.bridge, "vh-a1", &a1, "10.250.0.1/24");
    let ga2 = guest(&h2, &at2.bridge, "vh-a2", &a2, "10.250.0.2/24");
    assert!(
        ga1.reaches("10.250.0.2"),
        "tenant A across the overlay, through the CNCI"
    );
    assert!(ga2.reaches("10.250.0.1"), "and back");
    assert!(neighbour(&ga1, "10.250.0.2").contains(&mac_text(&a2.mac)));

    // Tenant B: the same subnet address, another key. b1 even has a1's address.
    let b1 = vnic(3, subnet(TENANT_B, KEY_B, CNCI_IP));
    let b2 = vnic(4, subnet(TENANT_B, KEY_B, CNCI_IP));
    let bt1 = host1.attach(&n1, b1);
    let bt2 = host2.attach(&n2, b2);
    assert!(bt1.first && bt2.first);
    assert_ne!(bt1.bridge, at1.bridge);
    let gb1 = guest(&h1, &bt1.bridge, "vh-b1", &b1, "10.250.0.1/24");
    let _gb2 = guest(&h2, &bt2.bridge, "vh-b2", &b2, "10.250.0.4/24");
    assert!(gb1.reaches("10.250.0.4"), "tenant B across the overlay");
    assert!(gb1.cut_off_from("10.250.0.2"), "tenant B reaches tenant A");
    assert!(ga1.cut_off_from("10.250.0.4"), "tenant A reaches tenant B");
    assert!(ga2.cut_off_from("10.250.0.4"), "tenant A reaches tenant B");

    // A second instance of tenant A on host 1 is not the subnet's first.
    let a3 = vnic(5, subnet(TENANT_A, KEY_A, CNCI_IP));
    assert!(!host1.attach(&n1, a3).first);

    // Agent restart on host 1: a new Network, rebuilt from the links' aliases, changes nothing
    // in the kernel and traffic keeps flowing.
    let before = h1.ip(&["-o", "link", "show"]);
    drop(n1);
    let n1 = host1.network("198.18.0.1");
    let rebuilt = host1.rebuild(&n1);
    assert_eq!(
        rebuilt.vnics[&KEY_A],
        [a1.instance, a3.instance].into_iter().collect()
    );
    assert_eq!(rebuilt.vnics[&KEY_B], [b1.instance].into_iter().collect());
    assert!(
        rebuilt.created.is_empty() && rebuilt.deleted.is_empty() && rebuilt.removed.is_empty(),
        "{rebuilt:?}"
    );
    let ifindexes = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split(':').take(2).collect::<Vec<_>>().join(":"))
            .collect()
    };
    assert_eq!(
        ifindexes(&before),
        ifindexes(&h1.ip(&["-o", "link", "show"]))
    );
    // What RtNetOps reads back from the kernel is what the rebuild relies on.
    let listed = host1.run(async {
        use agent::net::NetOps;
        RtNetOps::new().unwrap().links().await.unwrap()
    });
    let get = |name: &str| listed.iter().find(|l| l.name == name).unwrap().clone();
    let (tun, tap, br) = (
        get(&tunnel_name(kind, KEY_A)),
        get(&tap_name(a1.instance)),
        get(&bridge_name(KEY_A)),
    );
    assert_eq!(tun.kind, agent::net::LinkKind::of_tunnel(kind));
    assert_eq!(tun.master.as_deref(), Some(at1.bridge.as_str()));
    assert_eq!(tun.learning, Some(false));
    assert_eq!(tap.kind, agent::net::LinkKind::Tun);
    assert_eq!(tap.mac, Some(tap_mac(&a1.mac)));
    assert_eq!(tap.learning, Some(true));
    assert!(tap.up && tun.up && br.up);
    assert_eq!(br.kind, agent::net::LinkKind::Bridge);
    assert_eq!(br.learning, None);
    assert_eq!(
        br.alias.as_deref().and_then(LinkRole::parse),
        Some(LinkRole::Bridge(a1.subnet))
    );
    assert!(ga1.reaches("10.250.0.2"), "tenant A after the restart");
    assert!(gb1.reaches("10.250.0.4"), "tenant B after the restart");

    // Detach: not last, then last (tunnel and bridge go), per tenant.
    let d = host1.detach(&n1, a3.instance).unwrap();
    assert!(!d.last);
    let d = host1.detach(&n1, a1.instance).unwrap();
    assert!(d.last && d.subnet == a1.subnet);
    assert!(h1.link(&bridge_name(KEY_A)).is_none());
    assert!(h1.link(&tunnel_name(kind, KEY_A)).is_none());
    assert!(h1.link(&tap_name(a1.instance)).is_none());
    assert!(
        ga2.cut_off_from("10.250.0.1"),
        "host 1's tenant A is unplugged"
    );
    assert!(gb1.reaches("10.250.0.4"), "tenant B is untouched");
    assert!(host1.detach(&n1, b1.instance).unwrap().last);
    assert_eq!(host1.detach(&n1, b1.instance), None);
    let left: Vec<String> = h1
        .links()
        .into_iter()
        .filter(|n| names::is_ours(n))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
