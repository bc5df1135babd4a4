//! Port filters: the anti-spoofing and the firewall ([`Firewall`]) of each instance's tap,
//! enforced with nftables. This module writes the `nft -f -` scripts (pure, tested for their
//! exact text) and keeps which port index and conntrack zone each tap and bridge has;
//! [`NetOps::nft`](super::NetOps::nft) runs a script, as one transaction.
//!
//! Two tables, both named [`TABLE`]:
//!
//! - `bridge cumulo_ports`: chain `prerouting` (hook prerouting, priority -300) jumps, through
//!   the verdict map `ports_in` (tap name → `jump port_N`), to the port's chain `port_N`, which
//!   sets `meta mark` to the port's index `N` (low 16 bits) and drops what the port may not
//!   send: another source MAC; ARP with another sender MAC or IP; IPv4 from another source
//!   (except DHCP discover and request, 0.0.0.0 udp 68 → 67); DHCP server answers (udp sport
//!   67); IPv6 and every other ether type. With the metadata service, it then sets the
//!   destination MAC of TCP to 169.254.169.254:80 to the responder's ([`super::metadata`]). Chain `forward` (hook forward, priority -300) ORs the
//!   destination port's index into the mark's high 16 bits, through `ports_out` (tap name →
//!   `jump to_N`), and lets a metadata responder's port exchange frames with taps only.
//! - `inet cumulo_ports`: the tenant bridges have `nf_call_iptables` on, so bridged IPv4 passes
//!   the inet hooks, where conntrack works (this kernel has no conntrack in the bridge family).
//!   There, `iifname` and `oifname` are the bridge, not the port: the mark says which ports.
//!   Chain `zone` (prerouting, priority -300) gives each tenant bridge its own conntrack zone
//!   (map `zones`: bridge name → zone), since two tenants may use the same addresses. Chain
//!   `forward` (forward, priority 0) jumps through the verdict maps `egress` (`mark & 0xffff`
//!   → `egress_N`) and `ingress` (`mark & 0xffff0000` → `ingress_N`). An egress chain ends an
//!   allowed packet with `return` (an `accept` would end the whole hook, and the destination
//!   port's ingress chain must still run) and drops the rest; an ingress chain accepts or
//!   drops. Both let replies through (`ct state established,related`); egress also DHCP
//!   requests (udp 68 → 67), ingress DHCP answers (udp 67 → 68). A port without a firewall has no inet chains: only anti-spoofing.
//!
//! Each change is one script: adding a port (re)fills its chains and adds its map elements, so
//! other ports are not rewritten; removing one deletes its elements and chains. Port indexes
//! are allocated per node, the lowest free first, at most [`MAX_PORTS`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use ssntp::payload::{Firewall, FirewallDirection, FirewallRule};
use uuid::Uuid;

use super::metadata;
use super::names::{Cidr, mac_text};

/// The name of both tables.
pub const TABLE: &str = "cumulo_ports";
/// The most filtered ports on a node.
pub const MAX_PORTS: u16 = 4095;

/// What a port's filter is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The tap.
    pub tap: String,
    /// The bridge it is on.
    pub bridge: String,
    /// The VM's MAC (the only source MAC it may send from).
    pub mac: [u8; 6],
    /// The VM's address (the only source address it may send from).
    pub ip: Ipv4Addr,
    /// The allow rules; `None`: anti-spoofing only.
    pub firewall: Option<Firewall>,
    /// Whether the node's metadata service answers on the port's bridge: its TCP to
    /// 169.254.169.254:80 goes to the responder ([`super::metadata`]).
    pub metadata: bool,
}

/// A port filter cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// Every port index is in use.
    #[error("no port index left: {MAX_PORTS} ports are filtered on this node")]
    Exhausted,
    /// Every conntrack zone is in use.
    #[error("no conntrack zone left for bridge {0}")]
    NoZone(String),
    /// The instance's address is not IPv4.
    #[error("the instance address {0} is not IPv4 (tenant subnets are IPv4)")]
    NotIpv4(IpAddr),
    /// A name nft cannot take quoted.
    #[error("{0:?} is not an interface name")]
    BadName(String),
}

/// A filtered port, as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Port {
    index: u16,
    tap: String,
    bridge: String,
    /// Whether it has inet chains (a firewall).
    firewall: bool,
}

/// The ports filtered on the node and the zones of their bridges. Changes are planned on a
/// copy ([`PortFilters::plan_set`], [`PortFilters::plan_remove`]) and kept only once the
/// script ran ([`Planned::commit`]).
#[derive(Debug, Clone, Default)]
pub struct PortFilters {
    /// Whether the tables were made by this process.
    ready: bool,
    ports: BTreeMap<Uuid, Port>,
    zones: BTreeMap<String, u16>,
}

/// A planned change: the script to run, and the state once it ran.
#[derive(Debug)]
pub struct Planned {
    /// The `nft -f -` script.
    pub script: String,
    after: PortFilters,
}

impl Planned {
    /// The script ran: keep the state it made.
    pub fn commit(self, filters: &mut PortFilters) {
        *filters = self.after;
    }
}

/// An interface name nft can take quoted.
fn sane(name: &str) -> Result<(), FilterError> {
    let ok = !name.is_empty()
        && name.len() < 16
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
    if ok {
        Ok(())
    } else {
        Err(FilterError::BadName(name.to_string()))
    }
}

impl PortFilters {
    /// No port yet; the tables are (re)made with the first change.
    pub fn new() -> PortFilters {
        PortFilters::default()
    }

    /// Forgets every port: the next change makes the tables afresh (after an agent restart,
    /// ports are filtered again as their instances are re-attached).
    pub fn reset(&mut self) {
        *self = PortFilters::default();
    }

    /// Whether a bridge has filtered ports (and a conntrack zone).
    pub fn has_zone(&self, bridge: &str) -> bool {
        self.zones.contains_key(bridge)
    }

    /// The index of an instance's port, if it is filtered.
    pub fn index(&self, instance: Uuid) -> Option<u16> {
        self.ports.get(&instance).map(|p| p.index)
    }

    /// Plans making or updating an instance's port filter.
    pub fn plan_set(&self, instance: Uuid, spec: &PortSpec) -> Result<Planned, FilterError> {
        sane(&spec.tap)?;
        sane(&spec.bridge)?;
        let mut after = self.clone();
        let mut script = String::new();
        if !after.ready {
            script.push_str(&reset_script());
            after.ready = true;
        }
        let old = after.ports.remove(&instance);
        if let Some(old) = &old
            && (old.tap != spec.tap || old.bridge != spec.bridge)
        {
            // Moved: take the old one away first.
            script.push_str(&after.remove_lines(old));
        }
        let index = match &old {
            Some(old) if old.tap == spec.tap && old.bridge == spec.bridge => old.index,
            _ => after.free_index().ok_or(FilterError::Exhausted)?,
        };
        let had_firewall = old.as_ref().is_some_and(|o| o.firewall && o.index == index);
        if !after.zones.contains_key(&spec.bridge) {
            let z = (1..=u16::MAX)
                .find(|z| !after.zones.values().any(|v| v == z))
                .ok_or_else(|| FilterError::NoZone(spec.bridge.clone()))?;
            after.zones.insert(spec.bridge.clone(), z);
            let _ = writeln!(
                script,
                "add element inet {TABLE} zones {{ \"{}\" : {z} }}",
                spec.bridge
            );
        }
        script.push_str(&port_script(index, spec, had_firewall));
        after.ports.insert(
            instance,
            Port {
                index,
                tap: spec.tap.clone(),
                bridge: spec.bridge.clone(),
                firewall: spec.firewall.is_some(),
            },
        );
        Ok(Planned { script, after })
    }

    /// Plans removing an instance's port filter; `None` if it has none.
    pub fn plan_remove(&self, instance: Uuid) -> Option<Planned> {
        let mut after = self.clone();
        let port = after.ports.remove(&instance)?;
        let script = after.remove_lines(&port);
        Some(Planned { script, after })
    }

    /// The lines that remove `port` (already taken out of `self.ports`), and its bridge's zone
    /// when no other port is on the bridge.
    fn remove_lines(&mut self, port: &Port) -> String {
        let mut s = String::new();
        let (n, tap) = (port.index, &port.tap);
        let t = TABLE;
        let _ = writeln!(s, "delete element bridge {t} ports_in {{ \"{tap}\" }}");
        let _ = writeln!(s, "delete element bridge {t} ports_out {{ \"{tap}\" }}");
        let _ = writeln!(s, "delete chain bridge {t} port_{n}");
        let _ = writeln!(s, "delete chain bridge {t} to_{n}");
        if port.firewall {
            let _ = writeln!(s, "delete element inet {t} egress {{ {} }}", mark_low(n));
            let _ = writeln!(s, "delete element inet {t} ingress {{ {} }}", mark_high(n));
            let _ = writeln!(s, "delete chain inet {t} egress_{n}");
            let _ = writeln!(s, "delete chain inet {t} ingress_{n}");
        }
        if !self.ports.values().any(|p| p.bridge == port.bridge)
            && self.zones.remove(&port.bridge).is_some()
        {
            let _ = writeln!(s, "delete element inet {t} zones {{ \"{}\" }}", port.bridge);
        }
        s
    }

    fn free_index(&self) -> Option<u16> {
        let used: std::collections::BTreeSet<u16> = self.ports.values().map(|p| p.index).collect();
        (1..=MAX_PORTS).find(|i| !used.contains(i))
    }
}

fn mark_low(n: u16) -> String {
    format!("0x{:08x}", u32::from(n))
}

fn mark_high(n: u16) -> String {
    format!("0x{:08x}", u32::from(n) << 16)
}

/// The script that makes both tables afresh (anything in them before is gone).
pub fn reset_script() -> String {
    let t = TABLE;
    let (md, tap) = (metadata::LINK_PREFIX, super::names::TAP_PREFIX);
    [
        format!("add table bridge {t}"),
        format!("delete table bridge {t}"),
        format!("add table inet {t}"),
        format!("delete table inet {t}"),
        format!("add table bridge {t}"),
        format!("add map bridge {t} ports_in {{ type ifname : verdict; }}"),
        format!("add map bridge {t} ports_out {{ type ifname : verdict; }}"),
        format!(
            "add chain bridge {t} prerouting {{ type filter hook prerouting priority -300; policy accept; }}"
        ),
        format!(
            "add chain bridge {t} forward {{ type filter hook forward priority -300; policy accept; }}"
        ),
        format!("add rule bridge {t} prerouting iifname vmap @ports_in"),
        format!("add rule bridge {t} forward oifname vmap @ports_out"),
        // The metadata responders talk with the taps only: never through a tunnel.
        format!(
            "add rule bridge {t} forward iifname \"{md}*\" oifname != \"{tap}*\" drop"
        ),
        format!(
            "add rule bridge {t} forward oifname \"{md}*\" iifname != \"{tap}*\" drop"
        ),
        format!("add table inet {t}"),
        format!("add map inet {t} zones {{ typeof iifname : ct zone; }}"),
        format!("add map inet {t} egress {{ type mark : verdict; }}"),
        format!("add map inet {t} ingress {{ type mark : verdict; }}"),
        format!(
            "add chain inet {t} zone {{ type filter hook prerouting priority -300; policy accept; }}"
        ),
        format!(
            "add chain inet {t} forward {{ type filter hook forward priority 0; policy accept; }}"
        ),
        format!("add rule inet {t} zone ct zone set iifname map @zones"),
        format!("add rule inet {t} forward meta mark and 0x0000ffff vmap @egress"),
        format!("add rule inet {t} forward meta mark and 0xffff0000 vmap @ingress"),
    ]
    .join("\n")
        + "\n"
}

/// The lines that (re)fill port `n`'s chains and add its map elements. `had_firewall`: its
/// inet chains and elements are there already (they are emptied and refilled, or removed).
pub fn port_script(n: u16, spec: &PortSpec, had_firewall: bool) -> String {
    let t = TABLE;
    let (tap, mac, ip) = (&spec.tap, mac_text(&spec.mac), spec.ip);
    let mut lines = Vec::new();
    let port = format!("bridge {t} port_{n}");
    let to = format!("bridge {t} to_{n}");
    lines.push(format!("add chain {port}"));
    lines.push(format!("flush chain {port}"));
    for rule in [
        format!("meta mark set {}", mark_low(n)),
        format!("ether saddr != {mac} drop"),
        format!("ether type arp arp saddr ether != {mac} drop"),
        format!("ether type arp arp saddr ip != {ip} drop"),
        "ether type arp accept".to_string(),
        "ether type ip ip saddr 0.0.0.0 udp sport 68 udp dport 67 accept".to_string(),
        format!("ether type ip ip saddr != {ip} drop"),
        "ether type ip udp sport 67 drop".to_string(),
    ] {
        lines.push(format!("add rule {port} {rule}"));
    }
    if spec.metadata {
        lines.push(format!(
            "add rule {port} ip daddr {} tcp dport {} ether daddr set {}",
            metadata::ADDRESS,
            metadata::PORT,
            mac_text(&metadata::MAC)
        ));
    }
    for rule in ["ether type ip accept", "drop"] {
        lines.push(format!("add rule {port} {rule}"));
    }
    lines.push(format!("add chain {to}"));
    lines.push(format!("flush chain {to}"));
    lines.push(format!(
        "add rule {to} meta mark set meta mark or {}",
        mark_high(n)
    ));
    lines.push(format!(
        "add element bridge {t} ports_in {{ \"{tap}\" : jump port_{n} }}"
    ));
    lines.push(format!(
        "add element bridge {t} ports_out {{ \"{tap}\" : jump to_{n} }}"
    ));
    match &spec.firewall {
        Some(fw) => {
            // Egress ends what it allows with `return` (the destination port's ingress chain
            // must still run), ingress with `accept`. DHCP passes whatever the rules say: out,
            // the requests (the CNCI answers them); in, the CNCI's answers.
            for (chain, direction, far_end, pass, dhcp) in [
                (
                    format!("inet {t} egress_{n}"),
                    FirewallDirection::Egress,
                    "daddr",
                    "return",
                    "udp sport 68 udp dport 67",
                ),
                (
                    format!("inet {t} ingress_{n}"),
                    FirewallDirection::Ingress,
                    "saddr",
                    "accept",
                    "udp sport 67 udp dport 68",
                ),
            ] {
                lines.push(format!("add chain {chain}"));
                lines.push(format!("flush chain {chain}"));
                lines.push(format!(
                    "add rule {chain} ct state established,related {pass}"
                ));
                lines.push(format!("add rule {chain} ct state invalid drop"));
                lines.push(format!("add rule {chain} {dhcp} {pass}"));
                for m in fw
                    .rules
                    .iter()
                    .filter(|r| r.direction == direction)
                    .filter_map(|r| rule_match(r, far_end))
                {
                    lines.push(format!("add rule {chain} {m}{pass}"));
                }
                lines.push(format!("add rule {chain} drop"));
            }
            lines.push(format!(
                "add element inet {t} egress {{ {} : jump egress_{n} }}",
                mark_low(n)
            ));
            lines.push(format!(
                "add element inet {t} ingress {{ {} : jump ingress_{n} }}",
                mark_high(n)
            ));
        }
        None if had_firewall => {
            lines.push(format!(
                "delete element inet {t} egress {{ {} }}",
                mark_low(n)
            ));
            lines.push(format!(
                "delete element inet {t} ingress {{ {} }}",
                mark_high(n)
            ));
            lines.push(format!("delete chain inet {t} egress_{n}"));
            lines.push(format!("delete chain inet {t} ingress_{n}"));
        }
        None => {}
    }
    lines.join("\n") + "\n"
}

/// The match of one rule (ending with a space, or empty for "everything"), with the far end's
/// addresses as `ip <field>`; `None` for a rule that matches nothing (an empty remote list, an
/// ICMP type beyond 255).
pub fn rule_match(rule: &FirewallRule, field: &str) -> Option<String> {
    let mut m = String::new();
    if let Some(remote) = &rule.remote {
        let nets: Vec<Cidr> = remote
            .iter()
            .map(|c| Cidr {
                addr: c.addr,
                prefix: c.prefix,
            })
            .collect();
        let elements = crate::cnci::nat::protected_elements(&nets);
        if elements.is_empty() {
            return None;
        }
        if elements.iter().any(|e| e == "0.0.0.0/0") {
            // Any IPv4 address.
            let _ = write!(m, "meta nfproto ipv4 ");
        } else {
            let _ = write!(m, "ip {field} {{ {} }} ", elements.join(", "));
        }
    }
    let Some(proto) = rule.protocol else {
        return Some(m);
    };
    let _ = write!(m, "meta l4proto {proto} ");
    if rule.is_icmp() {
        if let Some(kind) = rule.port_min {
            let kind = u8::try_from(kind).ok()?;
            let _ = write!(m, "icmp type {kind} ");
            if let Some(code) = rule.port_max {
                let code = u8::try_from(code).ok()?;
                let _ = write!(m, "icmp code {code} ");
            }
        }
    } else if rule.is_port_protocol() {
        match (rule.port_min, rule.port_max) {
            (Some(a), Some(b)) if a != b => {
                let _ = write!(m, "th dport {a}-{b} ");
            }
            (Some(a), _) => {
                let _ = write!(m, "th dport {a} ");
            }
            (None, Some(b)) => {
                let _ = write!(m, "th dport 0-{b} ");
            }
            (None, None) => {}
        }
    }
    Some(m)
}

/// The port spec of a NIC on its tap and bridge.
pub fn port_spec(
    tap: &str,
    bridge: &str,
    nic: &crate::model::NicSpec,
    metadata: bool,
) -> Result<PortSpec, FilterError> {
    let IpAddr::V4(ip) = nic.private_ip else {
        return Err(FilterError::NotIpv4(nic.private_ip));
    };
    Ok(PortSpec {
        tap: tap.to_string(),
        bridge: bridge.to_string(),
        mac: nic.mac,
        ip,
        firewall: nic.firewall.clone(),
        metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        direction: FirewallDirection,
        protocol: Option<u8>,
        ports: (Option<u16>, Option<u16>),
        remote: Option<&[&str]>,
    ) -> FirewallRule {
        FirewallRule {
            direction,
            protocol,
            port_min: ports.0,
            port_max: ports.1,
            remote: remote.map(|r| r.iter().map(|c| c.parse().unwrap()).collect()),
        }
    }

    fn spec(firewall: Option<Firewall>) -> PortSpec {
        PortSpec {
            tap: "ct-000000000001".into(),
            bridge: "cb-0a".into(),
            mac: [2, 0, 0, 0, 0, 1],
            ip: Ipv4Addr::new(10, 250, 0, 5),
            firewall,
            metadata: false,
        }
    }

    #[test]
    fn rules_become_matches() {
        use FirewallDirection::Ingress;
        let m = |r: FirewallRule| rule_match(&r, "saddr");
        assert_eq!(
            m(rule(Ingress, Some(6), (Some(22), Some(22)), None)).as_deref(),
            Some("meta l4proto 6 th dport 22 ")
        );
        assert_eq!(
            m(rule(
                Ingress,
                Some(17),
                (Some(1000), Some(2000)),
                Some(&["10.0.0.0/8", "10.1.0.0/16", "192.0.2.7/24"])
            ))
            .as_deref(),
            Some("ip saddr { 10.0.0.0/8, 192.0.2.0/24 } meta l4proto 17 th dport 1000-2000 ")
        );
        assert_eq!(
            m(rule(Ingress, Some(1), (Some(8), Some(0)), None)).as_deref(),
            Some("meta l4proto 1 icmp type 8 icmp code 0 ")
        );
        assert_eq!(
            m(rule(Ingress, Some(1), (None, None), None)).as_deref(),
            Some("meta l4proto 1 ")
        );
        assert_eq!(
            m(rule(Ingress, None, (None, None), None)).as_deref(),
            Some("")
        );
        assert_eq!(
            m(rule(Ingress, None, (None, None), Some(&["0.0.0.0/0"]))).as_deref(),
            Some("meta nfproto ipv4 ")
        );
        // Matches nothing: no remote, or an ICMP type that does not exist.
        assert_eq!(m(rule(Ingress, Some(6), (None, None), Some(&[]))), None);
        assert_eq!(m(rule(Ingress, Some(1), (Some(300), None), None)), None);
        // Protocols without ports ignore them (GRE).
        assert_eq!(
            m(rule(Ingress, Some(47), (Some(1), Some(2)), None)).as_deref(),
            Some("meta l4proto 47 ")
        );
    }

    #[test]
    fn a_port_without_a_firewall_gets_anti_spoofing_only() {
        let filters = PortFilters::new();
        // With the metadata service: its requests go to the responder's MAC.
        let with_metadata = PortSpec {
            metadata: true,
            ..spec(None)
        };
        let p = filters
            .plan_set(Uuid::from_u128(1), &with_metadata)
            .unwrap();
        let want = reset_script()
            + "add element inet cumulo_ports zones { \"cb-0a\" : 1 }\n"
            + "add chain bridge cumulo_ports port_1\n\
               flush chain bridge cumulo_ports port_1\n\
               add rule bridge cumulo_ports port_1 meta mark set 0x00000001\n\
               add rule bridge cumulo_ports port_1 ether saddr != 02:00:00:00:00:01 drop\n\
               add rule bridge cumulo_ports port_1 ether type arp arp saddr ether != 02:00:00:00:00:01 drop\n\
               add rule bridge cumulo_ports port_1 ether type arp arp saddr ip != 10.250.0.5 drop\n\
               add rule bridge cumulo_ports port_1 ether type arp accept\n\
               add rule bridge cumulo_ports port_1 ether type ip ip saddr 0.0.0.0 udp sport 68 udp dport 67 accept\n\
               add rule bridge cumulo_ports port_1 ether type ip ip saddr != 10.250.0.5 drop\n\
               add rule bridge cumulo_ports port_1 ether type ip udp sport 67 drop\n\
               add rule bridge cumulo_ports port_1 ip daddr 169.254.169.254 tcp dport 80 ether daddr set 02:a9:fe:a9:fe:fe\n\
               add rule bridge cumulo_ports port_1 ether type ip accept\n\
               add rule bridge cumulo_ports port_1 drop\n\
               add chain bridge cumulo_ports to_1\n\
               flush chain bridge cumulo_ports to_1\n\
               add rule bridge cumulo_ports to_1 meta mark set meta mark or 0x00010000\n\
               add element bridge cumulo_ports ports_in { \"ct-000000000001\" : jump port_1 }\n\
               add element bridge cumulo_ports ports_out { \"ct-000000000001\" : jump to_1 }\n";
        assert_eq!(p.script, want);
    }

    #[test]
    fn a_firewall_becomes_egress_and_ingress_chains() {
        use FirewallDirection::{Egress, Ingress};
        let fw = Firewall {
            revision: 2,
            rules: vec![
                rule(
                    Ingress,
                    Some(6),
                    (Some(22), Some(22)),
                    Some(&["10.250.0.0/24"]),
                ),
                rule(Egress, Some(17), (Some(53), Some(53)), None),
                rule(Egress, None, (None, None), Some(&[])),
            ],
        };
        let mut filters = PortFilters::new();
        filters
            .plan_set(Uuid::from_u128(9), &spec(None))
            .unwrap()
            .commit(&mut filters);
        let mut s = spec(Some(fw));
        s.tap = "ct-000000000002".into();
        let p = filters.plan_set(Uuid::from_u128(2), &s).unwrap();
        // The tables and the zone are there already; index 2 is the next free one.
        let inet: Vec<&str> = p.script.lines().filter(|l| l.contains(" inet ")).collect();
        assert_eq!(
            inet,
            vec![
                "add chain inet cumulo_ports egress_2",
                "flush chain inet cumulo_ports egress_2",
                "add rule inet cumulo_ports egress_2 ct state established,related return",
                "add rule inet cumulo_ports egress_2 ct state invalid drop",
                "add rule inet cumulo_ports egress_2 udp sport 68 udp dport 67 return",
                "add rule inet cumulo_ports egress_2 meta l4proto 17 th dport 53 return",
                "add rule inet cumulo_ports egress_2 drop",
                "add chain inet cumulo_ports ingress_2",
                "flush chain inet cumulo_ports ingress_2",
                "add rule inet cumulo_ports ingress_2 ct state established,related accept",
                "add rule inet cumulo_ports ingress_2 ct state invalid drop",
                "add rule inet cumulo_ports ingress_2 udp sport 67 udp dport 68 accept",
                "add rule inet cumulo_ports ingress_2 ip saddr { 10.250.0.0/24 } meta l4proto 6 th dport 22 accept",
                "add rule inet cumulo_ports ingress_2 drop",
                "add element inet cumulo_ports egress { 0x00000002 : jump egress_2 }",
                "add element inet cumulo_ports ingress { 0x00020000 : jump ingress_2 }",
            ]
        );
        assert!(
            p.script
                .starts_with("add chain bridge cumulo_ports port_2\n")
        );
    }

    #[test]
    fn removal_frees_the_index_and_the_last_port_the_zone() {
        let fw = Firewall {
            revision: 1,
            rules: Vec::new(),
        };
        let mut filters = PortFilters::new();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        filters
            .plan_set(a, &spec(Some(fw)))
            .unwrap()
            .commit(&mut filters);
        let mut other = spec(None);
        other.tap = "ct-000000000002".into();
        filters.plan_set(b, &other).unwrap().commit(&mut filters);
        assert_eq!((filters.index(a), filters.index(b)), (Some(1), Some(2)));
        let p = filters.plan_remove(a).unwrap();
        assert_eq!(
            p.script,
            "delete element bridge cumulo_ports ports_in { \"ct-000000000001\" }\n\
             delete element bridge cumulo_ports ports_out { \"ct-000000000001\" }\n\
             delete chain bridge cumulo_ports port_1\n\
             delete chain bridge cumulo_ports to_1\n\
             delete element inet cumulo_ports egress { 0x00000001 }\n\
             delete element inet cumulo_ports ingress { 0x00010000 }\n\
             delete chain inet cumulo_ports egress_1\n\
             delete chain inet cumulo_ports ingress_1\n"
        );
        p.commit(&mut filters);
        let p = filters.plan_remove(b).unwrap();
        assert!(
            p.script
                .ends_with("delete element inet cumulo_ports zones { \"cb-0a\" }\n")
        );
        p.commit(&mut filters);
        assert!(filters.plan_remove(b).is_none());
        // Index 1 is free again.
        let p = filters.plan_set(b, &other).unwrap();
        assert!(p.script.contains("port_1"));
    }

    #[test]
    fn an_update_keeps_the_index_and_replaces_the_rules() {
        let mut filters = PortFilters::new();
        let a = Uuid::from_u128(1);
        let fw = Firewall {
            revision: 1,
            rules: Vec::new(),
        };
        filters
            .plan_set(a, &spec(Some(fw)))
            .unwrap()
            .commit(&mut filters);
        let p = filters.plan_set(a, &spec(None)).unwrap();
        assert!(!p.script.contains("zones"), "{}", p.script);
        assert!(
            p.script
                .contains("delete chain inet cumulo_ports egress_1\n")
        );
        assert!(
            p.script
                .contains("flush chain bridge cumulo_ports port_1\n")
        );
    }

    #[test]
    fn indexes_run_out() {
        let mut filters = PortFilters::new();
        for i in 0..MAX_PORTS {
            let mut s = spec(None);
            s.tap = format!("ct-{i:012x}");
            filters
                .plan_set(Uuid::from_u128(u128::from(i)), &s)
                .unwrap()
                .commit(&mut filters);
        }
        let mut s = spec(None);
        s.tap = "ct-ffffffffffff".into();
        assert_eq!(
            filters
                .plan_set(Uuid::from_u128(u128::MAX), &s)
                .unwrap_err(),
            FilterError::Exhausted
        );
        assert!(matches!(
            filters.plan_set(
                Uuid::from_u128(1),
                &PortSpec {
                    tap: "a\"b".into(),
                    ..spec(None)
                }
            ),
            Err(FilterError::BadName(_))
        ));
    }
}
