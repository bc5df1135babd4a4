//! The CNCI's edge for real (root only), on the topology of [`crate::overlay`]: two hosts with
//! agent daemons, `cumulo-cnci` in a namespace of its own, the real scheduler and a controller,
//! plus an "outside" namespace on the compute network. Instances' guests (veths with the
//! START's MAC, no address) get their addresses from the CNCI's DHCP server with busybox
//! `udhcpc` and ping each other through the overlay; they reach the outside through the CNCI's
//! outbound NAT while the outside cannot reach them; ASSIGN_PUBLIC_IP makes one reachable from
//! the outside at its public IP (also after a CNCI restart), RELEASE_PUBLIC_IP cuts it off
//! again; deleting the instances removes the subnet from the CNCI.
//!
//! Skipped like [`crate::netns`] without root, `ip`, `ping`, `nft` or `busybox` (a failure
//! under `CUMULO_REQUIRE_NETNS=1`).
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use crate::netns::{Netns, can_run, mac_text, underlay};
use crate::overlay::{
    HostAgent, compute_config, enter, fdb, listen_in, ports, proxy, run_in, until,
};
use crate::support::*;
use agent::net::names::bridge_name;
use ssntp::payload::{
    Cidr, CnciPeer, MacAddr, Networking, PublicIpCommand, PublicIpFailureReason, RefreshCnci,
};
use std::net::IpAddr;

mod dual;
mod siblings;

const CNCI: Uuid = Uuid::from_bytes([0xcd; 16]);
pub(crate) const TENANT: Uuid = Uuid::from_bytes([0x7f; 16]);
pub(crate) const KEY: u32 = 0x7004;
const CNCI_IP: &str = "198.18.0.100";
const OUTSIDE_IP: &str = "198.18.0.200";
const PUBLIC_IP: &str = "203.0.113.10";

/// The controller's plan: the MAC carries the private address (`02:00` + its four bytes).
pub(crate) fn mac(n: u8) -> [u8; 6] {
    [2, 0, 10, 250, 0, n]
}

pub(crate) fn networking(n: u8) -> Networking {
    Networking {
        vnic_mac: MacAddr(mac(n)),
        vnic_uuid: u(0x50 + n),
        concentrator_uuid: CNCI,
        concentrator_ip: CNCI_IP.parse().unwrap(),
        subnet: Cidr {
            addr: "10.250.0.0".parse().unwrap(),
            prefix: 24,
        },
        subnet_key: KEY,
        private_ip: format!("10.250.0.{n}").parse().unwrap(),
        public_ip: false,
        firewall: None,
    }
}

/// Why this test cannot run here beyond [`can_run`]'s reasons.
fn tools_missing() -> Option<String> {
    for tool in ["nft", "busybox"] {
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

/// Whether test `name` can run here ([`can_run`], and the tools [`tools_missing`] looks for);
/// a failure under `CUMULO_REQUIRE_NETNS=1` when it cannot.
pub(crate) fn can_run_edge(name: &str) -> bool {
    if !can_run(name) {
        return false;
    }
    if let Some(why) = tools_missing() {
        assert!(
            std::env::var("CUMULO_REQUIRE_NETNS").as_deref() != Ok("1"),
            "{name}: CUMULO_REQUIRE_NETNS=1 but {why}"
        );
        eprintln!("skipping {name}: {why}");
        return false;
    }
    true
}

/// The udhcpc script: configures the interface from the lease and writes what it got to
/// `<dir>/<interface>.lease` as `ip mask router mtu`.
pub(crate) fn dhcp_script(dir: &Path) -> PathBuf {
    let path = dir.join("udhcpc.sh");
    let lease = dir.join("$interface.lease");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             case \"$1\" in\n\
             bound|renew)\n\
             \tip addr flush dev \"$interface\"\n\
             \tip addr add \"$ip/$mask\" dev \"$interface\"\n\
             \t[ -n \"$mtu\" ] && ip link set dev \"$interface\" mtu \"$mtu\"\n\
             \t[ -n \"$router\" ] && ip route replace default via \"${{router%% *}}\" dev \"$interface\"\n\
             \techo \"$ip $mask $router $mtu\" > \"{}\"\n\
             \t;;\n\
             esac\n",
            lease.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A guest namespace for an instance: a veth from the host's bridge, the guest end (named
/// `g<n>`, so that the lease files differ) with the instance's MAC and no address.
pub(crate) fn bare_guest(host: &Netns, bridge: &str, n: u8, mac: [u8; 6]) -> Netns {
    let g = Netns::new(&format!("g{n}"));
    let (port, dev) = (format!("vh-{n}"), format!("g{n}"));
    host.ip(&[
        "link", "add", &port, "type", "veth", "peer", "name", &dev, "netns", &g.name,
    ]);
    host.ip(&["link", "set", &port, "master", bridge, "up"]);
    g.ip(&["link", "set", &dev, "address", &mac_text(&mac)]);
    g.ip(&["link", "set", &dev, "up"]);
    g
}

/// Runs busybox udhcpc once in the guest (up to 10 discovers a second apart); whether it got
/// a lease.
pub(crate) fn dhcp(g: &Netns, n: u8, script: &Path) -> bool {
    let dev = format!("g{n}");
    Command::new("ip")
        .args(["netns", "exec", &g.name, "busybox", "udhcpc", "-i", &dev])
        .args(["-f", "-q", "-n", "-t", "10", "-T", "1", "-s"])
        .arg(script)
        .output()
        .unwrap()
        .status
        .success()
}

fn command(n: u8, public: &str) -> PublicIpCommand {
    PublicIpCommand {
        concentrator_uuid: CNCI,
        tenant_uuid: TENANT,
        instance_uuid: u(0xa0 + n),
        public_ip: public.parse().unwrap(),
        private_ip: format!("10.250.0.{n}").parse().unwrap(),
        vnic_mac: MacAddr(mac(n)),
    }
}

/// `cumulo-cnci` in namespace `ns`, its log appended to `log`.
fn spawn_cnci(
    ns: &str,
    uuid: Uuid,
    ip: &str,
    port: u16,
    (ca, cert, key): &(PathBuf, PathBuf, PathBuf),
    log: &Path,
) -> Process {
    let child = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(env!("CARGO_BIN_EXE_cumulo-cnci"))
        .args(["--ca-cert", ca.to_str().unwrap()])
        .args(["--cert", cert.to_str().unwrap()])
        .args(["--key", key.to_str().unwrap()])
        .args(["--scheduler", &format!("localhost:{port}")])
        .args(["--uuid", &uuid.to_string(), "--tenant", &TENANT.to_string()])
        .args(["--ip", ip, "--tunnel", "vxlan"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .spawn()
        .unwrap();
    Process(child)
}

/// Runs a blocking check on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[test]
fn guests_get_leases_reach_outside_and_a_public_ip_maps_and_unmaps() {
    let name = "guests_get_leases_reach_outside_and_a_public_ip_maps_and_unmaps";
    if !can_run_edge(name) {
        return;
    }
    let (switch, h1, h2, cnci, ctl, outside) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("h2"),
        Netns::new("cnci"),
        Netns::new("ctl"),
        Netns::new("out"),
    );
    underlay(
        &switch,
        &[
            (&h1, "198.18.0.1"),
            (&h2, "198.18.0.2"),
            (&cnci, CNCI_IP),
            (&outside, OUTSIDE_IP),
        ],
    );
    let listeners = [
        listen_in(&h1.name),
        listen_in(&h2.name),
        listen_in(&cnci.name),
    ];
    let ports = ports(&listeners);
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let (n1, n2) = (u(1), u(2));
    let mut agents = Vec::new();
    for (i, (ns, ip)) in [(&h1, "198.18.0.1"), (&h2, "198.18.0.2")]
        .into_iter()
        .enumerate()
    {
        let cfg = compute_config(&pki, dir.path(), i, [n1, n2][i], ports[i]);
        agents.push((ns.name.clone(), ip.to_string(), cfg));
    }
    let names = (
        ctl.name.clone(),
        cnci.name.clone(),
        h1.name.clone(),
        h2.name.clone(),
        outside.name.clone(),
    );
    let dir_path = dir.path().to_owned();
    let result = run_in(&names.0.clone(), async move {
        let (_, cnci_name, h1_name, h2_name, out_name) = names;
        let sched = real_scheduler(&pki).await;
        let [l1, l2, l3] = listeners;
        for l in [l1, l2, l3] {
            proxy(l, sched.addr.replace("localhost", "127.0.0.1"));
        }
        let mut c = controller(&pki, &sched.addr).await;
        let running: Vec<HostAgent> = agents
            .into_iter()
            .map(|(ns, ip, cfg)| HostAgent::start(&ns, &ip, cfg))
            .collect();
        let (ca, cert, key) = pki
            .leaf(Role::CNCIAGENT, Some(CNCI))
            .write(&dir_path, "cnci");
        let log = dir_path.join("cnci.log");
        let files = (ca, cert, key);
        let spawn = || spawn_cnci(&cnci_name, CNCI, CNCI_IP, ports[2], &files, &log);
        let mut cnci_process = spawn();
        let logs = || std::fs::read_to_string(&log).unwrap_or_default();
        c.expect("CONCENTRATOR_INSTANCE_ADDED", |m| {
            matches!(m.payload, Payload::ConcentratorInstanceAdded(_)).then_some(())
        })
        .await;
        for n in [n1, n2] {
            c.stats(n, "the agent's first STATS", |_| true).await;
        }

        // One instance on each host, with the controller's MAC → IP plan.
        let (i1, i2) = (u(0xa7), u(0xa8));
        for (i, node, k) in [(i1, n1, 7), (i2, n2, 8)] {
            start_active(&mut c, i, node, TENANT, networking(k)).await;
        }
        let hub = format!("kv-{KEY:08x}");
        let cnci_bridge = format!("kb-{KEY:08x}");
        let cn = Netns {
            name: cnci_name.clone(),
        };
        until("both hosts at the CNCI, its gateway address up", || {
            let f = fdb(&cnci_name, &hub);
            f.contains("dst 198.18.0.1")
                && f.contains("dst 198.18.0.2")
                && cn.ip(&["-o", "addr", "show"]).contains(&format!(
                    "10.250.0.1/24 brd 10.250.0.255 scope global {cnci_bridge}"
                ))
        })
        .await;
        until("the CNCI's DHCP server", || {
            logs().contains("subnet served")
        })
        .await;

        // DHCP: each guest gets the address the plan gives its MAC, the gateway as router,
        // the overlay's MTU.
        let bridge = bridge_name(KEY);
        let h1 = Netns { name: h1_name };
        let h2 = Netns { name: h2_name };
        let g1 = bare_guest(&h1, &bridge, 7, mac(7));
        let g2 = bare_guest(&h2, &bridge, 8, mac(8));
        let script = dhcp_script(&dir_path);
        let (g1, g2, leased) = {
            let script = script.clone();
            blocking(move || {
                let ok = dhcp(&g1, 7, &script) && dhcp(&g2, 8, &script);
                (g1, g2, ok)
            })
            .await
        };
        assert!(leased, "no DHCP lease\n{}", logs());
        for n in [7, 8] {
            let lease = std::fs::read_to_string(dir_path.join(format!("g{n}.lease"))).unwrap();
            assert_eq!(lease.trim(), format!("10.250.0.{n} 24 10.250.0.1 1450"));
        }
        assert!(
            g1.ip(&["addr", "show", "g7"])
                .contains("inet 10.250.0.7/24")
        );
        assert!(g1.ip(&["link", "show", "g7"]).contains("mtu 1450"));

        // Between the guests through the overlay, and out through the CNCI's NAT.
        let out = Netns { name: out_name };
        let (g1, g2, out, ok) = blocking(move || {
            let ok = g1.reaches("10.250.0.8") && g2.reaches("10.250.0.7");
            let nat = g1.reaches(OUTSIDE_IP) && g2.reaches(OUTSIDE_IP);
            (g1, g2, out, [ok, nat])
        })
        .await;
        assert!(ok[0], "guest to guest through the CNCI\n{}", logs());
        assert!(ok[1], "guests to the outside through NAT\n{}", logs());
        // The outside cannot reach a private address, even with a route to it.
        out.ip(&["route", "add", "10.250.0.0/24", "via", CNCI_IP]);
        out.ip(&["route", "add", "203.0.113.0/24", "dev", "u0"]);
        let (out, cut) = blocking(move || {
            let cut = out.cut_off_from("10.250.0.7");
            (out, cut)
        })
        .await;
        assert!(cut, "the outside reaches a private address");

        // A public IP: mapped, then refused for another instance, then invalid data.
        c.send(&Payload::AssignPublicIp(command(7, PUBLIC_IP)));
        let done = c
            .expect("PUBLIC_IP_ASSIGNED", |m| match &m.payload {
                Payload::PublicIpAssigned(e) => Some(e.clone()),
                Payload::AssignPublicIpFailure(f) => panic!("{f:?}\n{}", logs()),
                _ => None,
            })
            .await;
        assert_eq!(
            (done.concentrator_uuid, done.instance_uuid, done.public_ip),
            (CNCI, u(0xa7), PUBLIC_IP.parse().unwrap())
        );
        c.send(&Payload::AssignPublicIp(command(8, PUBLIC_IP)));
        let refused = c
            .expect("ASSIGN_PUBLIC_IP_FAILURE", |m| match &m.payload {
                Payload::AssignPublicIpFailure(f) => Some(f.reason),
                _ => None,
            })
            .await;
        assert_eq!(refused, PublicIpFailureReason::AssignFailure);
        let mut v6 = command(8, PUBLIC_IP);
        v6.public_ip = "2001:db8::1".parse().unwrap();
        c.send(&Payload::AssignPublicIp(v6));
        let refused = c
            .expect("ASSIGN_PUBLIC_IP_FAILURE", |m| match &m.payload {
                Payload::AssignPublicIpFailure(f) => Some(f.reason),
                _ => None,
            })
            .await;
        assert_eq!(refused, PublicIpFailureReason::InvalidData);
        let (out, reached) = blocking(move || {
            let ok = out.reaches(PUBLIC_IP);
            (out, ok)
        })
        .await;
        assert!(reached, "the outside to the public IP\n{}", logs());

        // A CNCI restart keeps the mapping (it reads it back from nftables).
        cnci_process.signal(rustix::process::Signal::TERM);
        assert_eq!(cnci_process.exit_code().await, Some(0), "{}", logs());
        cnci_process = spawn();
        c.expect("CONCENTRATOR_INSTANCE_ADDED again", |m| {
            matches!(m.payload, Payload::ConcentratorInstanceAdded(_)).then_some(())
        })
        .await;
        let (out, reached) = blocking(move || {
            let ok = out.reaches(PUBLIC_IP);
            (out, ok)
        })
        .await;
        assert!(reached, "the public IP after a CNCI restart\n{}", logs());

        // Released: the outside no longer reaches it. A repeat is answered the same.
        for _ in 0..2 {
            c.send(&Payload::ReleasePublicIp(command(7, PUBLIC_IP)));
            c.expect("PUBLIC_IP_UNASSIGNED", |m| match &m.payload {
                Payload::PublicIpUnassigned(e) => Some(e.clone()),
                Payload::UnassignPublicIpFailure(f) => panic!("{f:?}\n{}", logs()),
                _ => None,
            })
            .await;
        }
        let (out, cut) = blocking(move || {
            let cut = out.cut_off_from(PUBLIC_IP);
            (out, cut)
        })
        .await;
        assert!(cut, "the outside still reaches a released public IP");
        assert!(!cn.ip(&["addr", "show", "u0"]).contains(PUBLIC_IP));

        // Deleting both instances removes the subnet from the CNCI: bridge, hub, NAT.
        for (i, node) in [(i1, n1), (i2, n2)] {
            c.send(&delete(i, node, false));
        }
        until("the subnet gone from the CNCI", || {
            cn.link(&cnci_bridge).is_none() && cn.link(&hub).is_none()
        })
        .await;
        until("the subnet gone from NAT", || {
            let o = Command::new("ip")
                .args(["netns", "exec", &cnci_name, "nft", "list", "set", "ip"])
                .args(["cumulo_cnci", "subnets"])
                .output()
                .unwrap();
            !String::from_utf8_lossy(&o.stdout).contains("10.250.0.0/24")
        })
        .await;
        // The namespaces are the main thread's to delete.
        std::mem::forget((h1, h2, cn, out));
        drop((g1, g2));

        cnci_process.signal(rustix::process::Signal::TERM);
        assert_eq!(cnci_process.exit_code().await, Some(0), "{}", logs());
        blocking(move || {
            for a in running {
                a.stop();
            }
        })
        .await;
        sched.stop.cancel();
    });
    drop((switch, h1, h2, cnci, ctl, outside));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Counts what a TCP peer sends to `port` in namespace `ns` until it closes: (bytes, seconds
/// from the first byte to the close).
fn tcp_sink(ns: &str, port: u16) -> std::thread::JoinHandle<(u64, f64)> {
    let ns = ns.to_string();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        use std::io::Read;
        enter(&ns);
        let l = std::net::TcpListener::bind(("0.0.0.0", port)).unwrap();
        ready_tx.send(()).unwrap();
        let (mut conn, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        let mut first = None;
        loop {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            first.get_or_insert_with(std::time::Instant::now);
            total += n as u64;
        }
        let secs = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
        (total, secs)
    });
    ready_rx.recv().unwrap();
    t
}

/// Sends to `to` from namespace `ns` for `secs` seconds, then closes.
fn tcp_source(ns: &str, to: &str, secs: u64) {
    use std::io::Write;
    let (ns, to) = (ns.to_string(), to.to_string());
    std::thread::spawn(move || {
        enter(&ns);
        let mut conn = std::net::TcpStream::connect(&to).unwrap();
        let buf = vec![0x5au8; 128 * 1024];
        let end = std::time::Instant::now() + Duration::from_secs(secs);
        while std::time::Instant::now() < end {
            conn.write_all(&buf).unwrap();
        }
    })
    .join()
    .unwrap();
}

/// TCP throughput from `from` to `to_ip` (in `to_ns`), in Gbit/s, over `secs` seconds.
fn throughput(from: &str, to_ns: &str, to_ip: &str, secs: u64) -> f64 {
    let sink = tcp_sink(to_ns, 5201);
    tcp_source(from, &format!("{to_ip}:5201"), secs);
    let (bytes, elapsed) = sink.join().unwrap();
    bytes as f64 * 8.0 / elapsed / 1e9
}

/// The figures of `docs/benchmarks.md` ("Tenant networking through the CNCI"): START to the
/// first ping through the CNCI, and TCP throughput to an instance over the overlay (from an
/// instance on another host), through its floating IP (from the outside), and over a plain
/// veth pair, alternated in the same run. Not a pass/fail test: run it with
/// `CUMULO_REQUIRE_NETNS=1 cargo test -p agent --test agent edge::numbers -- --ignored
/// --nocapture`.
#[test]
#[ignore = "measures; prints figures for docs/benchmarks.md"]
fn numbers() {
    if !can_run("numbers") || tools_missing().is_some() {
        return;
    }
    let (switch, h1, h2, cnci, ctl, outside) = (
        Netns::new("sw"),
        Netns::new("h1"),
        Netns::new("h2"),
        Netns::new("cnci"),
        Netns::new("ctl"),
        Netns::new("out"),
    );
    underlay(
        &switch,
        &[
            (&h1, "198.18.0.1"),
            (&h2, "198.18.0.2"),
            (&cnci, CNCI_IP),
            (&outside, OUTSIDE_IP),
        ],
    );
    // The outside reaches the floating IPs on the compute network, where the CNCI answers.
    outside.ip(&["route", "add", "203.0.113.0/24", "dev", "u0"]);
    // The baseline: two namespaces joined by one veth pair.
    let (va, vb) = (Netns::new("va"), Netns::new("vb"));
    va.ip(&[
        "link", "add", "v0", "type", "veth", "peer", "name", "v0", "netns", &vb.name,
    ]);
    for (ns, a) in [(&va, "192.0.2.1/24"), (&vb, "192.0.2.2/24")] {
        ns.ip(&["addr", "add", a, "dev", "v0"]);
        ns.ip(&["link", "set", "v0", "up"]);
    }
    let listeners = [
        listen_in(&h1.name),
        listen_in(&h2.name),
        listen_in(&cnci.name),
    ];
    let ports = ports(&listeners);
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new();
    let (n1, n2) = (u(1), u(2));
    let mut agents = Vec::new();
    for (i, (ns, ip)) in [(&h1, "198.18.0.1"), (&h2, "198.18.0.2")]
        .into_iter()
        .enumerate()
    {
        let cfg = compute_config(&pki, dir.path(), i, [n1, n2][i], ports[i]);
        agents.push((ns.name.clone(), ip.to_string(), cfg));
    }
    let names = (
        ctl.name.clone(),
        cnci.name.clone(),
        h1.name.clone(),
        h2.name.clone(),
        va.name.clone(),
        vb.name.clone(),
        outside.name.clone(),
    );
    let dir_path = dir.path().to_owned();
    let result = run_in(&names.0.clone(), async move {
        let (_, cnci_name, h1_name, h2_name, va_name, vb_name, out_name) = names;
        let sched = real_scheduler(&pki).await;
        let [l1, l2, l3] = listeners;
        for l in [l1, l2, l3] {
            proxy(l, sched.addr.replace("localhost", "127.0.0.1"));
        }
        let mut c = controller(&pki, &sched.addr).await;
        let running: Vec<HostAgent> = agents
            .into_iter()
            .map(|(ns, ip, cfg)| HostAgent::start(&ns, &ip, cfg))
            .collect();
        let files = pki
            .leaf(Role::CNCIAGENT, Some(CNCI))
            .write(&dir_path, "cnci");
        let log = dir_path.join("cnci.log");
        let mut cnci_process = spawn_cnci(&cnci_name, CNCI, CNCI_IP, ports[2], &files, &log);
        c.expect("CONCENTRATOR_INSTANCE_ADDED", |m| {
            matches!(m.payload, Payload::ConcentratorInstanceAdded(_)).then_some(())
        })
        .await;
        for n in [n1, n2] {
            c.stats(n, "the agent's first STATS", |_| true).await;
        }
        let script = dhcp_script(&dir_path);
        let (h1, h2) = (Netns { name: h1_name }, Netns { name: h2_name });
        let bridge = bridge_name(KEY);
        // Instance 8 on host 2: the peer every later instance pings.
        c.send(&pinned_start(u(0xa8), n2, TENANT, networking(8)));
        until("host 2's tap", || {
            h2.link(&agent::net::tap_name(u(0xa8))).is_some()
        })
        .await;
        let g8 = bare_guest(&h2, &bridge, 8, mac(8));
        let sc = script.clone();
        let g8 = blocking(move || {
            assert!(dhcp(&g8, 8, &sc));
            g8
        })
        .await;

        // START to the first ping, for instances on host 1 (the first makes the subnet
        // there and its TENANT_ADDED reaches the CNCI).
        let mut guests = Vec::new();
        println!("run  START→tap(ms)  START→lease(ms)  START→first ping(ms)");
        for (run, n) in (10u8..16).enumerate() {
            let i = u(0xb0 + n);
            let t0 = std::time::Instant::now();
            c.send(&pinned_start(i, n1, TENANT, networking(n)));
            let tap = agent::net::tap_name(i);
            let deadline = Instant::now() + T;
            while h1.link(&tap).is_none() {
                assert!(Instant::now() < deadline, "no tap");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let t_tap = t0.elapsed();
            let g = bare_guest(&h1, &bridge, n, mac(n));
            let sc = script.clone();
            let (g, t_lease, t_ping) = blocking(move || {
                assert!(dhcp(&g, n, &sc));
                let t_lease = t0.elapsed();
                assert!(g.reaches("10.250.0.8"));
                (g, t_lease, t0.elapsed())
            })
            .await;
            println!(
                "{run:>3}  {:>13.1}  {:>15.1}  {:>20.1}",
                t_tap.as_secs_f64() * 1e3,
                t_lease.as_secs_f64() * 1e3,
                t_ping.as_secs_f64() * 1e3
            );
            guests.push(g);
        }

        // Instance 8's floating IP, for the outside.
        c.send(&Payload::AssignPublicIp(command(8, PUBLIC_IP)));
        c.expect("PUBLIC_IP_ASSIGNED", |m| match &m.payload {
            Payload::PublicIpAssigned(_) => Some(()),
            Payload::AssignPublicIpFailure(f) => panic!("{f:?}"),
            _ => None,
        })
        .await;

        // Throughput to instance 8, alternated: over the overlay from an instance on host 1
        // (host 1 → CNCI → host 2: two tunnels), over the overlay from the CNCI's own address
        // (one tunnel), through its floating IP from the outside (the CNCI's DNAT, then one
        // tunnel), and a plain veth pair.
        let from = guests[0].name.clone();
        let (g8_name, cnci_ns) = (g8.name.clone(), cnci_name.clone());
        let results = blocking(move || {
            let mut r = Vec::new();
            for _ in 0..3 {
                let o = throughput(&from, &g8_name, "10.250.0.8", 5);
                let one = throughput(&cnci_ns, &g8_name, "10.250.0.8", 5);
                let f = throughput(&out_name, &g8_name, PUBLIC_IP, 5);
                let v = throughput(&va_name, &vb_name, "192.0.2.2", 5);
                r.push((o, one, f, v));
            }
            r
        })
        .await;
        for (o, one, f, v) in results {
            println!(
                "TCP 5 s: instance to instance over the overlay {o:.2} Gbit/s; CNCI to instance \
                 {one:.2}; floating IP from the outside {f:.2} (ratio {:.2} to the first, {:.2} \
                 to the second); plain veth {v:.2}",
                f / o,
                f / one
            );
        }
        std::mem::forget((h1, h2));
        drop((guests, g8));
        cnci_process.signal(rustix::process::Signal::TERM);
        assert_eq!(cnci_process.exit_code().await, Some(0));
        blocking(move || {
            for a in running {
                a.stop();
            }
        })
        .await;
        sched.stop.cancel();
    });
    drop((switch, h1, h2, cnci, ctl, va, vb, outside));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// The START the controller sends for a CNCI (`controller::engine::cnci`): a small instance on
/// a network node, `cumulo-role: cnci`, its address on the compute network not known yet.
pub(crate) fn cnci_start(cnci: Uuid) -> Start {
    let mut s = start(cnci, "cnci");
    s.tenant_uuid = TENANT;
    s.vm_type = ssntp::payload::VmType::Qemu;
    s.requirements.network_node = true;
    s.requirements.mem_mb = 128;
    s.requirements.disk_mb = 0;
    s.meta_data = Some(
        [("cumulo-role".to_string(), "cnci".to_string())]
            .into_iter()
            .collect(),
    );
    let mut net = networking(1);
    net.vnic_mac = MacAddr([2, 0, 10, 250, 0, 1]);
    net.concentrator_uuid = cnci;
    net.concentrator_ip = "0.0.0.0".parse().unwrap();
    net.private_ip = "10.250.0.1".parse().unwrap();
    s.networking = Some(net);
    s
}
