//! Port filters for real: [`Network::filter`] on a host namespace whose tenant bridge carries
//! four "VMs" (guest namespaces on veth pairs named like their taps, which is all the filters
//! key on). A and B have firewalls, C and D anti-spoofing only. Proven: an ingress rule for a
//! port lets a connection in and another port stays shut; replies pass without a rule
//! (connection tracking); egress rules restrict what a VM opens; a spoofed source address or
//! MAC and a DHCP server answer from a port are dropped, DHCP requests pass whatever the
//! egress rules; two tenants with the same addresses are tracked in two conntrack zones; a
//! newer firewall without a rule stops new connections; removing a port removes its filter.

use super::*;
use agent::model::NicSpec;
use ssntp::payload::{Firewall, FirewallDirection, FirewallRule};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Background processes in guests, killed (by their PID) on drop.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `ip netns exec NS ARGS` with no input and no inherited output.
fn spawn_in(ns: &Netns, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// One TCP connection from `g` to `to:port` (1 s at most): whether the listener's "hi" came.
fn connects_once(g: &Netns, to: &str, port: u16) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", &g.name, "busybox", "nc", "-w", "1", to])
        .arg(port.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("hi")
}

/// Tries until `deadline` for a connection to succeed.
fn connects(g: &Netns, to: &str, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline {
        if connects_once(g, to, port) {
            return true;
        }
    }
    false
}

/// Two tries, both refused or dropped.
fn shut(g: &Netns, to: &str, port: u16) -> bool {
    !connects_once(g, to, port) && !connects_once(g, to, port)
}

/// Sends one UDP datagram from `g`'s `sport` to `to:dport`, with Python (busybox nc has no UDP
/// here); `receiver` listens on `dport` for 2 s: whether it arrived.
fn udp_arrives(g: &Netns, sport: u16, receiver: &Netns, to: &str, dport: u16) -> bool {
    let listen = format!(
        "import socket,sys\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.bind(('0.0.0.0',{dport}))\ns.settimeout(3)\nprint('ready',flush=True)\n\
         try:\n    s.recvfrom(100)\n    print('got')\nexcept Exception:\n    print('none')\n"
    );
    let mut rx = Command::new("ip")
        .args(["netns", "exec", &receiver.name, "python3", "-c", &listen])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = rx.stdout.take().unwrap();
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut ready).unwrap();
    let send = format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.SOL_SOCKET,socket.SO_BROADCAST,1)\n\
         s.bind(('0.0.0.0',{sport}))\n\
         for _ in range(3): s.sendto(b'x',('{to}',{dport}))\n"
    );
    run(Command::new("ip").args(["netns", "exec", &g.name, "python3", "-c", &send]));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let _ = rx.wait();
    rest.contains("got")
}

fn rule(
    direction: FirewallDirection,
    protocol: u8,
    ports: (u16, u16),
    remote: Option<&str>,
) -> FirewallRule {
    FirewallRule {
        direction,
        protocol: Some(protocol),
        port_min: Some(ports.0),
        port_max: Some(ports.1),
        remote: remote.map(|r| vec![r.parse().unwrap()]),
    }
}

pub(crate) fn nic(vnic: &Vnic, ip: &str, firewall: Option<Firewall>) -> NicSpec {
    NicSpec {
        mac: vnic.mac,
        vnic_uuid: vnic.instance,
        concentrator_uuid: vnic.subnet.cnci,
        concentrator_ip: vnic.subnet.cnci_ip,
        subnet_addr: vnic.subnet.subnet.addr,
        subnet_prefix: vnic.subnet.subnet.prefix,
        subnet_key: vnic.subnet.key,
        private_ip: ip.parse().unwrap(),
        public_ip: false,
        firewall,
    }
}

fn nft_list(h: &Netns) -> String {
    let out = run(Command::new("ip").args(["netns", "exec", &h.name, "nft", "list", "ruleset"]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn port_filters_enforce_firewalls_and_anti_spoofing() {
    if !can_run("port_filters_enforce_firewalls_and_anti_spoofing") {
        return;
    }
    if !tools_or_skip(&["nft", "busybox", "python3"]) {
        return;
    }
    use FirewallDirection::{Egress, Ingress};
    let h = Netns::new("fw");
    h.ip(&["addr", "add", "198.18.0.1/32", "dev", "lo"]);
    let host = Host::new(&h);
    let net = host.network("198.18.0.1");
    let s = subnet(TENANT_A, KEY_A, CNCI_IP);
    let bridge = bridge_name(KEY_A);

    // A may open TCP 22-23 in its subnet; B takes TCP 22 and 24 in, opens anything.
    let fw_a = Firewall {
        revision: 1,
        rules: vec![rule(Egress, 6, (22, 23), Some("10.250.0.0/24"))],
    };
    let fw_b = |revision: u64, ports: &[u16]| Firewall {
        revision,
        rules: ports
            .iter()
            .map(|p| rule(Ingress, 6, (*p, *p), None))
            .chain([FirewallRule {
                direction: Egress,
                protocol: None,
                port_min: None,
                port_max: None,
                remote: None,
            }])
            .collect(),
    };
    let plan = [
        (1, "10.250.0.1", Some(fw_a)),
        (2, "10.250.0.2", Some(fw_b(1, &[22, 24]))),
        (3, "10.250.0.3", None),
        (4, "10.250.0.4", None),
    ];
    let mut guests = Vec::new();
    for (n, ip, fw) in plan {
        let v = vnic(n, s);
        host.attach(&net, v);
        // The VM's tap stands in as a veth of the same name into a guest namespace.
        let tap = tap_name(v.instance);
        h.ip(&["link", "del", &tap]);
        let g = guest(&h, &bridge, &tap, &v, &format!("{ip}/24"));
        let nic = nic(&v, ip, fw);
        let net = net.clone();
        let instance = v.instance;
        host.run(async move { net.lock().await.filter(instance, &nic).await })
            .unwrap();
        guests.push((g, v, ip));
    }
    assert!(
        h.link(&bridge).unwrap().contains("nf_call_iptables 1"),
        "{}",
        h.link(&bridge).unwrap()
    );
    let (a, b, c, d) = (&guests[0].0, &guests[1].0, &guests[2].0, &guests[3].0);
    let mut procs = Procs(Vec::new());
    for port in ["22", "23", "24"] {
        procs.0.push(spawn_in(
            b,
            &["busybox", "nc", "-ll", "-p", port, "-e", "echo", "hi"],
        ));
    }
    procs.0.push(spawn_in(
        d,
        &["busybox", "nc", "-ll", "-p", "22", "-e", "echo", "hi"],
    ));

    // Ingress 22 lets A in, and B's answer comes back to A, which has no ingress rule.
    assert!(connects(a, "10.250.0.2", 22), "{}", nft_list(&h));
    // B takes nothing on 23; A may not open 24.
    assert!(shut(a, "10.250.0.2", 23));
    assert!(shut(a, "10.250.0.2", 24));
    // ICMP is not allowed out of A.
    assert!(a.cut_off_from("10.250.0.2"));
    // C and D have no firewall: everything passes between them.
    assert!(c.reaches("10.250.0.4"));
    assert!(connects(c, "10.250.0.4", 22));

    // Spoofing from C: another source address, then another MAC.
    c.ip(&["addr", "add", "10.250.0.99/24", "dev", "eth0"]);
    let spoofed = !Command::new("ip")
        .args([
            "netns", "exec", &c.name, "ping", "-n", "-q", "-c", "2", "-W", "1",
        ])
        .args(["-I", "10.250.0.99", "10.250.0.4"])
        .output()
        .unwrap()
        .status
        .success();
    assert!(spoofed, "a spoofed source address got through");
    c.ip(&["addr", "del", "10.250.0.99/24", "dev", "eth0"]);
    c.ip(&["link", "set", "eth0", "address", "02:00:00:00:ee:99"]);
    c.ip(&["neigh", "flush", "all"]);
    d.ip(&["neigh", "flush", "all"]);
    assert!(c.cut_off_from("10.250.0.4"), "a spoofed MAC got through");
    c.ip(&[
        "link",
        "set",
        "eth0",
        "address",
        &mac_text(&guests[2].1.mac),
    ]);
    assert!(c.reaches("10.250.0.4"));

    // A DHCP server answer (udp 67 → 68) from a port is dropped; another source port passes.
    assert!(udp_arrives(c, 1067, d, "10.250.0.4", 68));
    assert!(!udp_arrives(c, 67, d, "10.250.0.4", 68));
    // DHCP requests leave a port whatever its egress rules (A's allow only TCP); other UDP not.
    assert!(udp_arrives(a, 68, d, "10.250.0.4", 67));
    assert!(!udp_arrives(a, 1068, d, "10.250.0.4", 67));

    // Another tenant's subnet on the node, with the same addresses: its connections are
    // tracked in its bridge's own conntrack zone.
    let other = subnet(TENANT_B, KEY_B, CNCI_IP);
    let mut others = Vec::new();
    for (n, ip, fw) in [
        (5, "10.250.0.1", None),
        (6, "10.250.0.2", Some(fw_b(1, &[22]))),
    ] {
        let v = vnic(n, other);
        host.attach(&net, v);
        let tap = tap_name(v.instance);
        h.ip(&["link", "del", &tap]);
        let g = guest(&h, &bridge_name(KEY_B), &tap, &v, &format!("{ip}/24"));
        let nic = nic(&v, ip, fw);
        let (net, instance) = (net.clone(), v.instance);
        host.run(async move { net.lock().await.filter(instance, &nic).await })
            .unwrap();
        others.push((g, v, ip));
    }
    procs.0.push(spawn_in(
        &others[1].0,
        &["busybox", "nc", "-ll", "-p", "22", "-e", "echo", "hi"],
    ));
    assert!(connects(&others[0].0, "10.250.0.2", 22));
    let tracked = Command::new("ip")
        .args(["netns", "exec", &h.name, "cat", "/proc/net/nf_conntrack"])
        .output()
        .unwrap();
    let tracked = String::from_utf8_lossy(&tracked.stdout).into_owned();
    let zones: std::collections::BTreeSet<&str> = tracked
        .lines()
        .filter(|l| l.contains("dst=10.250.0.2") && l.contains("dport=22 "))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("zone=")))
        .collect();
    assert_eq!(zones.len(), 2, "one zone per tenant bridge:\n{tracked}");
    for (_, v, _) in &others {
        host.detach(&net, v.instance);
    }

    // A newer firewall of B without 22: new connections stop, 23 opens.
    let update = nic(&guests[1].1, "10.250.0.2", Some(fw_b(2, &[23])));
    let (n2, b_instance) = (net.clone(), guests[1].1.instance);
    host.run(async move { n2.lock().await.filter(b_instance, &update).await })
        .unwrap();
    assert!(shut(a, "10.250.0.2", 22));
    assert!(connects(a, "10.250.0.2", 23));

    // Detaching removes the port's chains and elements; the last one the bridge's zone.
    for (_, v, _) in &guests {
        host.detach(&net, v.instance);
    }
    let left = nft_list(&h);
    assert!(!left.contains("port_"), "{left}");
    assert!(!left.contains("egress_"), "{left}");
    assert!(!left.contains(&bridge), "{left}");
    drop(procs);
}
