//! How cumulo names its links and what it writes in their aliases.
//!
//! Kernel names are short (IFNAMSIZ: 15 characters): a prefix and an id in hex.
//!
//! | link | name | id |
//! |---|---|---|
//! | bridge of a subnet | `cb-<8 hex>` | the subnet key |
//! | VXLAN tunnel of a subnet | `cv-<8 hex>` | the subnet key |
//! | GRE-tap tunnel of a subnet | `cg-<8 hex>` | the subnet key |
//! | an instance's tap | `ct-<12 hex>` | the first 12 hex digits of the instance UUID |
//!
//! The full logical identity of each link is its alias (IFLA_IFALIAS, up to 255 bytes), one
//! line of `key=value` words after a version and a role, for example
//! `cumulo/1 tap t=<tenant> s=10.0.0.0/24 k=7 c=<CNCI> cip=192.0.2.1 i=<instance> m=<VM MAC>`
//! (UUIDs in their 32-digit form, so that the longest alias, IPv6 everywhere, fits in 255
//! bytes). Every alias carries the whole subnet identity, so that any one
//! surviving link is enough to rebuild (and repair) its subnet after a restart.

use std::net::IpAddr;
use uuid::Uuid;

use super::TunnelKind;

/// The version word every alias starts with.
pub const ALIAS_VERSION: &str = "cumulo/1";

/// Bridge name prefix.
pub const BRIDGE_PREFIX: &str = "cb-";
/// VXLAN tunnel name prefix.
pub const VXLAN_PREFIX: &str = "cv-";
/// GRE-tap tunnel name prefix.
pub const GRETAP_PREFIX: &str = "cg-";
/// Tap name prefix.
pub const TAP_PREFIX: &str = "ct-";

/// The longest Linux interface name (IFNAMSIZ less the NUL).
pub const MAX_NAME: usize = 15;

/// The bridge of the subnet with this key.
pub fn bridge_name(key: u32) -> String {
    format!("{BRIDGE_PREFIX}{key:08x}")
}

/// The tunnel of the subnet with this key.
pub fn tunnel_name(kind: TunnelKind, key: u32) -> String {
    match kind {
        TunnelKind::Vxlan => format!("{VXLAN_PREFIX}{key:08x}"),
        TunnelKind::GreTap => format!("{GRETAP_PREFIX}{key:08x}"),
    }
}

/// The tap of this instance (what a VM backend plugs the instance's NIC into).
pub fn tap_name(instance: Uuid) -> String {
    let hex = instance.simple().to_string();
    format!("{TAP_PREFIX}{}", &hex[..12])
}

/// The other end of a container's NIC (a veth pair whose node end is [`tap_name`]), until its
/// backend moves it into the container's namespace (as `eth0`).
pub fn veth_peer_name(instance: Uuid) -> String {
    let hex = instance.simple().to_string();
    format!("ctp{}", &hex[..12])
}

/// Whether a link name is in cumulo's name space (one of the prefixes above, then hex).
pub fn is_ours(name: &str) -> bool {
    let hex_len = |rest: &str| rest.bytes().all(|b| b.is_ascii_hexdigit()) && !rest.is_empty();
    if let Some(rest) = name.strip_prefix(TAP_PREFIX) {
        return rest.len() == 12 && hex_len(rest);
    }
    [BRIDGE_PREFIX, VXLAN_PREFIX, GRETAP_PREFIX]
        .iter()
        .any(|p| {
            name.strip_prefix(p)
                .is_some_and(|rest| rest.len() == 8 && hex_len(rest))
        })
}

/// An IP prefix, `10.0.0.0/24`: the protocol's own type (one CIDR type in the whole tree).
pub use ssntp::payload::Cidr;

/// A tenant subnet as a compute node sees it: the bridge and tunnel are made for this
/// (tenant, subnet, CNCI) and keyed by `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubnetId {
    /// The tenant.
    pub tenant: Uuid,
    /// The subnet.
    pub subnet: Cidr,
    /// The subnet key: VXLAN VNI or GRE key.
    pub key: u32,
    /// The subnet's CNCI.
    pub cnci: Uuid,
    /// The CNCI's tunnel end point.
    pub cnci_ip: IpAddr,
}

impl SubnetId {
    fn words(&self) -> String {
        format!(
            "t={} s={} k={} c={} cip={}",
            self.tenant.simple(),
            self.subnet,
            self.key,
            self.cnci.simple(),
            self.cnci_ip
        )
    }

    fn from_words(w: &Words<'_>) -> Option<SubnetId> {
        Some(SubnetId {
            tenant: w.get("t")?.parse().ok()?,
            subnet: w.get("s")?.parse().ok()?,
            key: w.get("k")?.parse().ok()?,
            cnci: w.get("c")?.parse().ok()?,
            cnci_ip: w.get("cip")?.parse().ok()?,
        })
    }
}

/// What a cumulo link is for: its alias, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkRole {
    /// The subnet's bridge.
    Bridge(SubnetId),
    /// The subnet's tunnel to its CNCI.
    Tunnel {
        /// The subnet.
        subnet: SubnetId,
        /// VXLAN or GRE-tap.
        kind: TunnelKind,
        /// The node's end point.
        local: IpAddr,
        /// The VXLAN destination port (0 for GRE-tap).
        port: u16,
    },
    /// An instance's tap.
    Tap {
        /// The subnet.
        subnet: SubnetId,
        /// The instance.
        instance: Uuid,
        /// The instance's MAC (the START's; the tap's own address is [`tap_mac`] of it).
        mac: [u8; 6],
    },
}

impl LinkRole {
    /// The subnet the link belongs to.
    pub fn subnet(&self) -> &SubnetId {
        match self {
            LinkRole::Bridge(s)
            | LinkRole::Tunnel { subnet: s, .. }
            | LinkRole::Tap { subnet: s, .. } => s,
        }
    }

    /// The kernel name of the link.
    pub fn name(&self) -> String {
        match self {
            LinkRole::Bridge(s) => bridge_name(s.key),
            LinkRole::Tunnel { subnet, kind, .. } => tunnel_name(*kind, subnet.key),
            LinkRole::Tap { instance, .. } => tap_name(*instance),
        }
    }

    /// The alias text that identifies the link.
    pub fn alias(&self) -> String {
        match self {
            LinkRole::Bridge(s) => format!("{ALIAS_VERSION} bridge {}", s.words()),
            LinkRole::Tunnel {
                subnet,
                kind,
                local,
                port,
            } => format!(
                "{ALIAS_VERSION} {kind} {} l={local} p={port}",
                subnet.words()
            ),
            LinkRole::Tap {
                subnet,
                instance,
                mac,
            } => format!(
                "{ALIAS_VERSION} tap {} i={} m={}",
                subnet.words(),
                instance.simple(),
                mac_hex(mac)
            ),
        }
    }

    /// Reads an alias; `None` if it is not one of ours or is damaged.
    pub fn parse(alias: &str) -> Option<LinkRole> {
        let mut it = alias.split_ascii_whitespace();
        if it.next()? != ALIAS_VERSION {
            return None;
        }
        let role = it.next()?;
        let words = Words(it.map(|w| w.split_once('=')).collect::<Option<Vec<_>>>()?);
        let subnet = SubnetId::from_words(&words)?;
        match role {
            "bridge" => Some(LinkRole::Bridge(subnet)),
            "vxlan" | "gretap" => Some(LinkRole::Tunnel {
                subnet,
                kind: if role == "vxlan" {
                    TunnelKind::Vxlan
                } else {
                    TunnelKind::GreTap
                },
                local: words.get("l")?.parse().ok()?,
                port: words.get("p")?.parse().ok()?,
            }),
            "tap" => Some(LinkRole::Tap {
                subnet,
                instance: words.get("i")?.parse().ok()?,
                mac: parse_mac_hex(words.get("m")?)?,
            }),
            _ => None,
        }
    }
}

struct Words<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Words<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// The address of the tap that carries a VM with this MAC: the same with the first octet
/// `0xfe` (as libvirt does). The tap must not have the VM's own MAC: a bridge keeps its ports'
/// addresses as its own, so frames for the VM would go up the bridge's stack instead of out of
/// the tap. `0xfe` is a locally administered unicast octet.
pub fn tap_mac(vm: &[u8; 6]) -> [u8; 6] {
    let mut mac = *vm;
    mac[0] = 0xfe;
    mac
}

/// `0200ac100005`: a MAC as 12 hex digits (the alias form).
pub fn mac_hex(mac: &[u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads [`mac_hex`]'s form.
pub fn parse_mac_hex(s: &str) -> Option<[u8; 6]> {
    if s.len() != 12 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut mac = [0u8; 6];
    for (i, byte) in mac.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(mac)
}

/// A MAC as nft and `ip` write it (`02:00:00:00:00:01`).
pub fn mac_text(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet() -> SubnetId {
        SubnetId {
            tenant: Uuid::from_u128(0x1111_2222_3333_4444_5555_6666_7777_8888),
            subnet: "10.250.0.0/24".parse().unwrap(),
            key: 0xdead_beef,
            cnci: Uuid::from_u128(0xaaaa),
            cnci_ip: "192.0.2.10".parse().unwrap(),
        }
    }

    #[test]
    fn names_fit_ifnamsiz_and_are_recognised() {
        let instance = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let names = [
            bridge_name(u32::MAX),
            tunnel_name(TunnelKind::Vxlan, 7),
            tunnel_name(TunnelKind::GreTap, 7),
            tap_name(instance),
        ];
        assert_eq!(names[0], "cb-ffffffff");
        assert_eq!(names[1], "cv-00000007");
        assert_eq!(names[2], "cg-00000007");
        assert_eq!(names[3], "ct-0123456789ab");
        for n in &names {
            assert!(n.len() <= MAX_NAME, "{n}");
            assert!(is_ours(n), "{n}");
        }
        for n in [
            "eth0",
            "cb-1",
            "cb-0000000g",
            "ct-00000007",
            "cx-00000007",
            "cb-",
        ] {
            assert!(!is_ours(n), "{n}");
        }
    }

    #[test]
    fn aliases_round_trip_and_fit() {
        let s = subnet();
        let roles = [
            LinkRole::Bridge(s),
            LinkRole::Tunnel {
                subnet: s,
                kind: TunnelKind::Vxlan,
                local: "192.0.2.1".parse().unwrap(),
                port: 4789,
            },
            LinkRole::Tunnel {
                subnet: SubnetId {
                    cnci_ip: "2001:db8::ffff:ffff:ffff:ffff".parse().unwrap(),
                    subnet: "fd00:ffff:ffff:ffff::/64".parse().unwrap(),
                    ..s
                },
                kind: TunnelKind::GreTap,
                local: "2001:db8::ffff:ffff:ffff:fffe".parse().unwrap(),
                port: 0,
            },
            LinkRole::Tap {
                subnet: s,
                instance: Uuid::from_u128(u128::MAX),
                mac: [2, 0, 0xac, 0x10, 0, 5],
            },
        ];
        let v6 = SubnetId {
            cnci_ip: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap(),
            subnet: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"
                .parse()
                .unwrap(),
            key: u32::MAX,
            ..s
        };
        let worst = [
            LinkRole::Tap {
                subnet: v6,
                instance: Uuid::from_u128(u128::MAX),
                mac: [0xff; 6],
            },
            LinkRole::Tunnel {
                subnet: v6,
                kind: TunnelKind::GreTap,
                local: v6.cnci_ip,
                port: u16::MAX,
            },
        ];
        for role in roles.into_iter().chain(worst) {
            let alias = role.alias();
            assert!(alias.len() < 256, "{} bytes: {alias}", alias.len());
            assert_eq!(LinkRole::parse(&alias), Some(role.clone()), "{alias}");
            assert!(is_ours(&role.name()));
        }
    }

    #[test]
    fn damaged_or_foreign_aliases_are_not_ours() {
        let good = LinkRole::Bridge(subnet()).alias();
        for bad in [
            String::new(),
            "my bridge".to_string(),
            good.replace("cumulo/1", "cumulo/2"),
            good.replace("bridge", "switch"),
            good.replace("k=3735928559", "k=x"),
            good.replace(" cip=192.0.2.10", ""),
            format!("{good} junk"),
        ] {
            assert_eq!(LinkRole::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn macs_round_trip_and_taps_get_their_own() {
        let mac = [0x02, 0, 0xac, 0x10, 0, 0xff];
        assert_eq!(mac_hex(&mac), "0200ac1000ff");
        assert_eq!(parse_mac_hex(&mac_hex(&mac)), Some(mac));
        for bad in ["", "0200", "0200ac1000ff00", "0200ac1000fg", "+200ac1000ff"] {
            assert_eq!(parse_mac_hex(bad), None, "{bad}");
        }
        assert_eq!(tap_mac(&mac), [0xfe, 0, 0xac, 0x10, 0, 0xff]);
    }
}
