//! The networking objects and their limits, as the Networking API shows them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use ssntp::payload::Cidr;
use uuid::Uuid;

/// A tenant's limits on networking objects (Neutron's `floatingip`, `security_group` and
/// `security_group_rule` quotas).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkQuota {
    /// Floating IPs.
    pub floating_ips: u32,
    /// Security groups, `default` included.
    pub security_groups: u32,
    /// Rules over all the tenant's groups, the `default` group's included.
    pub security_group_rules: u32,
}

impl NetworkQuota {
    /// Neutron's defaults: 50 floating IPs, 10 groups, 100 rules.
    pub const DEFAULT: NetworkQuota = NetworkQuota {
        floating_ips: 50,
        security_groups: 10,
        security_group_rules: 100,
    };
    /// The largest limits that may be set (they bound a tenant's document).
    pub const MAX: NetworkQuota = NetworkQuota {
        floating_ips: 1000,
        security_groups: 100,
        security_group_rules: 1000,
    };
}

impl Default for NetworkQuota {
    fn default() -> NetworkQuota {
        NetworkQuota::DEFAULT
    }
}

/// Which way a rule lets traffic through, seen from the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Into the instance.
    Ingress,
    /// Out of the instance.
    Egress,
}

impl Direction {
    /// Neutron's word for it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// The address family of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EtherType {
    /// `IPv4`.
    IPv4,
    /// `IPv6`.
    IPv6,
}

impl EtherType {
    /// Neutron's word for it.
    pub fn as_str(&self) -> &'static str {
        match self {
            EtherType::IPv4 => "IPv4",
            EtherType::IPv6 => "IPv6",
        }
    }
}

/// Whom a rule lets traffic come from (ingress) or go to (egress).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RuleRemote {
    /// Anyone.
    Any,
    /// Addresses in a prefix (kept as its network address, `10.0.0.0/8`).
    Prefix(String),
    /// The ports in a group of the same tenant.
    Group(Uuid),
}

/// The protocols a rule may name by name (Neutron's list); any number 0..=255 is taken too.
pub const RULE_PROTOCOLS: &[&str] = &[
    "ah",
    "dccp",
    "egp",
    "esp",
    "gre",
    "hopopt",
    "icmp",
    "icmpv6",
    "igmp",
    "ipip",
    "ipv6-encap",
    "ipv6-frag",
    "ipv6-icmp",
    "ipv6-nonxt",
    "ipv6-opts",
    "ipv6-route",
    "ospf",
    "pgm",
    "rsvp",
    "sctp",
    "tcp",
    "udp",
    "udplite",
    "vrrp",
];

/// The protocols whose rules may name ports.
pub(super) const PORT_PROTOCOLS: &[&str] = &[
    "tcp", "udp", "dccp", "sctp", "udplite", "6", "17", "33", "132", "136",
];
/// The protocols whose rules may name an ICMP type and code.
pub(super) const ICMP_PROTOCOLS: &[&str] = &["icmp", "icmpv6", "ipv6-icmp", "1", "58"];

/// A security group rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroupRule {
    /// Its id.
    pub id: Uuid,
    /// Its group.
    pub group: Uuid,
    /// The group's tenant.
    pub tenant: Uuid,
    /// Which way.
    pub direction: Direction,
    /// The address family.
    pub ethertype: EtherType,
    /// The protocol (a name of [`RULE_PROTOCOLS`] or a number), none for any.
    pub protocol: Option<String>,
    /// The first port (TCP, UDP, ...) or the ICMP type.
    pub port_min: Option<u16>,
    /// The last port or the ICMP code.
    pub port_max: Option<u16>,
    /// Whom.
    pub remote: RuleRemote,
    /// Free text, at most [`MAX_NET_TEXT`](super::MAX_NET_TEXT) bytes.
    pub description: String,
    /// When it was made.
    pub created: SystemTime,
}

impl SecurityGroupRule {
    /// Whether two rules let the same traffic through (Neutron's duplicate check).
    pub(super) fn same_as(&self, other: &NewSecurityGroupRule) -> bool {
        self.group == other.group
            && self.direction == other.direction
            && self.ethertype == other.ethertype
            && self.protocol == other.protocol
            && self.port_min == other.port_min
            && self.port_max == other.port_max
            && self.remote == other.remote
    }
}

/// A rule to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSecurityGroupRule {
    /// The group it goes in.
    pub group: Uuid,
    /// Which way.
    pub direction: Direction,
    /// The address family.
    pub ethertype: EtherType,
    /// The protocol, none for any (checked and made lowercase).
    pub protocol: Option<String>,
    /// The first port or the ICMP type.
    pub port_min: Option<u16>,
    /// The last port or the ICMP code.
    pub port_max: Option<u16>,
    /// Whom (a prefix is checked against the address family and kept as its network).
    pub remote: RuleRemote,
    /// Free text.
    pub description: String,
}

/// A security group and its rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecurityGroup {
    /// Its id.
    pub id: Uuid,
    /// Its tenant.
    pub tenant: Uuid,
    /// Its name (not unique, as in Neutron; only `default` is reserved).
    pub name: String,
    /// Free text.
    pub description: String,
    /// Whether it is the tenant's `default` group (never deleted or renamed).
    pub default: bool,
    /// Its rules, oldest first.
    pub rules: Vec<SecurityGroupRule>,
    /// When it was made.
    pub created: SystemTime,
    /// When it or its rules last changed.
    pub updated: SystemTime,
    /// Raised by every change of it or its rules (Neutron's `revision_number`).
    pub revision: u64,
}

/// A security group to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSecurityGroup {
    /// The tenant.
    pub tenant: Uuid,
    /// Its name (at most [`MAX_NET_TEXT`](super::MAX_NET_TEXT) bytes, not `default` in any case).
    pub name: String,
    /// Free text.
    pub description: String,
}

/// What to change of a security group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityGroupChange {
    /// A new name.
    pub name: Option<String>,
    /// A new description.
    pub description: Option<String>,
}

/// A floating IP: an address of the external network's pool held by a tenant, and the port
/// (instance) it is associated with, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloatingIp {
    /// Its id.
    pub id: Uuid,
    /// Its tenant.
    pub tenant: Uuid,
    /// The address.
    pub address: Ipv4Addr,
    /// The instance whose port it is associated with.
    pub port: Option<Uuid>,
    /// That port's address it maps to.
    pub fixed_ip: Option<Ipv4Addr>,
    /// Free text.
    pub description: String,
    /// When it was allocated.
    pub created: SystemTime,
    /// When it last changed.
    pub updated: SystemTime,
    /// Raised by every change.
    pub revision: u64,
}

/// A floating IP to allocate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFloatingIp {
    /// The tenant.
    pub tenant: Uuid,
    /// The pool (an IPv4 block; its first host is the gateway, never handed out).
    pub pool: Cidr,
    /// The address asked for, if any (else the lowest free one).
    pub address: Option<Ipv4Addr>,
    /// Free text.
    pub description: String,
    /// The instance to associate it with at once, if any.
    pub port: Option<Uuid>,
    /// That port's address to map to (it must be the port's); the port's own when not given.
    pub fixed_ip: Option<Ipv4Addr>,
}

/// What to change of a floating IP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloatingIpChange {
    /// Associate with this instance's port (`Some(Some)`), or disassociate (`Some(None)`).
    pub port: Option<Option<Uuid>>,
    /// The port's address to map to (it must be the port's); the port's own when not given.
    pub fixed_ip: Option<Ipv4Addr>,
    /// A new description.
    pub description: Option<String>,
}

/// What a page of a tenant's servers shows of their networking
/// ([`NetworkStore::servers_networking`](crate::NetworkStore::servers_networking)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServersNet {
    /// The tenant's groups, `default` first (for their names).
    pub groups: Vec<SecurityGroup>,
    /// The groups of the servers' ports; no other port is in `set`.
    pub ports: PortGroups,
    /// The floating IPs associated with the servers' ports, by address.
    pub floating_ips: Vec<FloatingIp>,
}

/// The security groups of a tenant's ports: those set on a port, else the `default` group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortGroups {
    /// The tenant's `default` group.
    pub default: Uuid,
    /// The ports (instance ids) whose groups were set, and their groups.
    pub set: BTreeMap<Uuid, Vec<Uuid>>,
}

impl PortGroups {
    /// The groups of the port of `instance`.
    pub fn of(&self, instance: Uuid) -> Vec<Uuid> {
        self.set
            .get(&instance)
            .cloned()
            .unwrap_or_else(|| vec![self.default])
    }

    /// Whether any port of the tenant is in `group`.
    pub fn uses(&self, group: Uuid) -> bool {
        group == self.default || self.set.values().any(|g| g.contains(&group))
    }
}
