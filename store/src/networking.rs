//! Tenant networking objects, as the Networking (Neutron) API presents them: security groups and
//! their rules, floating IPs, the security groups on each instance's port, and each tenant's
//! limits on them ([`NetworkQuota`]).
//!
//! A tenant's groups, rules, floating IPs and limits are one document ([`TenantNet`]), read and
//! written whole in one transaction by both backends, so that every check (names, duplicates,
//! limits, references between groups) is the same code on both. Its size is bounded by the
//! limits ([`NetworkQuota::MAX`]). Two things live beside it: the ports' groups (one record per
//! instance that has groups other than its tenant's `default`, going with the instance), and the
//! floating addresses in use over all tenants (one record per address, so that no two tenants
//! take the same one). The `default` group is made, with OpenStack's default rules, the first
//! time a tenant's document is touched.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use ssntp::payload::Cidr;
use uuid::Uuid;

use crate::common::now;
use crate::{QuotaKind, Result, StoreError};

/// The longest security group name, description or floating IP description, in bytes.
pub const MAX_NET_TEXT: usize = 255;
/// The most security groups on one port.
pub const MAX_PORT_GROUPS: usize = 32;
/// The name of the group every tenant has.
pub const DEFAULT_GROUP: &str = "default";

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
const PORT_PROTOCOLS: &[&str] = &[
    "tcp", "udp", "dccp", "sctp", "udplite", "6", "17", "33", "132", "136",
];
/// The protocols whose rules may name an ICMP type and code.
const ICMP_PROTOCOLS: &[&str] = &["icmp", "icmpv6", "ipv6-icmp", "1", "58"];

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
    /// Free text, at most [`MAX_NET_TEXT`] bytes.
    pub description: String,
    /// When it was made.
    pub created: SystemTime,
}

impl SecurityGroupRule {
    /// Whether two rules let the same traffic through (Neutron's duplicate check).
    fn same_as(&self, other: &NewSecurityGroupRule) -> bool {
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
    /// Its name (at most [`MAX_NET_TEXT`] bytes, not `default` in any case).
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

/// A tenant's networking document, as both backends keep it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TenantNet {
    #[serde(default)]
    pub(crate) groups: Vec<SecurityGroup>,
    #[serde(default)]
    pub(crate) floating_ips: Vec<FloatingIp>,
    #[serde(default)]
    pub(crate) quota: Option<NetworkQuota>,
}

/// What the shared logic needs of a backend, inside one of its transactions.
pub(crate) trait NetTx {
    /// The tenant's document, if it has one (`NotFound` when the tenant does not exist).
    fn load(&mut self, tenant: Uuid) -> Result<Option<TenantNet>>;
    /// Writes the tenant's document.
    fn save(&mut self, tenant: Uuid, doc: &TenantNet) -> Result<()>;
    /// The address of `instance` if it is the tenant's.
    fn instance_ip(&mut self, tenant: Uuid, instance: Uuid) -> Result<Option<Ipv4Addr>>;
    /// The groups set on the tenant's ports.
    fn port_groups(&mut self, tenant: Uuid) -> Result<BTreeMap<Uuid, Vec<Uuid>>>;
    /// Sets the groups of a port of the tenant (the instance exists).
    fn set_port_groups(&mut self, tenant: Uuid, instance: Uuid, groups: &[Uuid]) -> Result<()>;
    /// The floating addresses in use in `[first, last]`, sorted.
    fn taken_addresses(&mut self, first: u32, last: u32) -> Result<Vec<u32>>;
    /// Takes a floating address for the tenant (`Conflict` if it is in use).
    fn claim_address(&mut self, tenant: Uuid, address: u32) -> Result<()>;
    /// Gives a floating address back.
    fn release_address(&mut self, address: u32) -> Result<()>;
}

fn text(what: &str, value: &str) -> Result<()> {
    if value.len() > MAX_NET_TEXT || value.contains('\0') {
        return Err(StoreError::Invalid(format!(
            "{what} must be at most {MAX_NET_TEXT} bytes"
        )));
    }
    Ok(())
}

fn group_name(name: &str) -> Result<()> {
    text("security group name", name)?;
    if name.eq_ignore_ascii_case(DEFAULT_GROUP) {
        return Err(StoreError::Conflict(
            "Default security group already exists.".into(),
        ));
    }
    Ok(())
}

fn rule(group: &SecurityGroup, direction: Direction, ethertype: EtherType) -> SecurityGroupRule {
    SecurityGroupRule {
        id: Uuid::new_v4(),
        group: group.id,
        tenant: group.tenant,
        direction,
        ethertype,
        protocol: None,
        port_min: None,
        port_max: None,
        remote: match direction {
            Direction::Ingress => RuleRemote::Group(group.id),
            Direction::Egress => RuleRemote::Any,
        },
        description: String::new(),
        created: group.created,
    }
}

fn group(tenant: Uuid, name: String, description: String, default: bool) -> SecurityGroup {
    let at = now();
    SecurityGroup {
        id: Uuid::new_v4(),
        tenant,
        name,
        description,
        default,
        rules: Vec::new(),
        created: at,
        updated: at,
        revision: 1,
    }
}

/// The tenant's document, with its `default` group made if it had none; `true` when it must
/// be written.
fn open(tx: &mut dyn NetTx, tenant: Uuid) -> Result<(TenantNet, bool)> {
    let mut doc = tx.load(tenant)?.unwrap_or_default();
    if doc.groups.iter().any(|g| g.default) {
        return Ok((doc, false));
    }
    let mut default = group(
        tenant,
        DEFAULT_GROUP.into(),
        "Default security group".into(),
        true,
    );
    // OpenStack's default rules: everything out, in only from the group's own ports.
    for (direction, ethertype) in [
        (Direction::Egress, EtherType::IPv4),
        (Direction::Egress, EtherType::IPv6),
        (Direction::Ingress, EtherType::IPv4),
        (Direction::Ingress, EtherType::IPv6),
    ] {
        let made = rule(&default, direction, ethertype);
        default.rules.push(made);
    }
    doc.groups.insert(0, default);
    Ok((doc, true))
}

/// Runs `f` on the tenant's document and writes it back.
fn change<T>(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    f: impl FnOnce(&mut dyn NetTx, &mut TenantNet) -> Result<T>,
) -> Result<T> {
    let (mut doc, _) = open(tx, tenant)?;
    let out = f(tx, &mut doc)?;
    tx.save(tenant, &doc)?;
    Ok(out)
}

/// Reads the tenant's document (writing it first if its `default` group had to be made).
fn look<T>(tx: &mut dyn NetTx, tenant: Uuid, f: impl FnOnce(&TenantNet) -> T) -> Result<T> {
    let (doc, made) = open(tx, tenant)?;
    if made {
        tx.save(tenant, &doc)?;
    }
    Ok(f(&doc))
}

fn quota_of(doc: &TenantNet) -> NetworkQuota {
    doc.quota.unwrap_or_default()
}

fn over(what: QuotaKind, limit: u32) -> StoreError {
    StoreError::QuotaExceeded {
        what,
        limit: u64::from(limit),
    }
}

fn group_at(doc: &mut TenantNet, id: Uuid) -> Result<&mut SecurityGroup> {
    doc.groups
        .iter_mut()
        .find(|g| g.id == id)
        .ok_or_else(|| StoreError::not_found("security group", id))
}

fn touch_group(g: &mut SecurityGroup) {
    g.updated = now();
    g.revision += 1;
}

/// The tenant's groups (its `default` first).
pub(crate) fn security_groups(tx: &mut dyn NetTx, tenant: Uuid) -> Result<Vec<SecurityGroup>> {
    look(tx, tenant, |doc| doc.groups.clone())
}

/// Makes a group, with Neutron's two egress rules, under the tenant's limits.
pub(crate) fn create_security_group(
    tx: &mut dyn NetTx,
    new: NewSecurityGroup,
) -> Result<SecurityGroup> {
    group_name(&new.name)?;
    text("security group description", &new.description)?;
    change(tx, new.tenant, |_, doc| {
        let quota = quota_of(doc);
        if doc.groups.len() >= quota.security_groups as usize {
            return Err(over(QuotaKind::SecurityGroups, quota.security_groups));
        }
        let rules: usize = doc.groups.iter().map(|g| g.rules.len()).sum();
        if rules + 2 > quota.security_group_rules as usize {
            return Err(over(
                QuotaKind::SecurityGroupRules,
                quota.security_group_rules,
            ));
        }
        let mut made = group(new.tenant, new.name, new.description, false);
        for ethertype in [EtherType::IPv4, EtherType::IPv6] {
            let egress = rule(&made, Direction::Egress, ethertype);
            made.rules.push(egress);
        }
        doc.groups.push(made.clone());
        Ok(made)
    })
}

/// Renames a group or changes its description (`Conflict` for the `default` group's name).
pub(crate) fn update_security_group(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    id: Uuid,
    changes: SecurityGroupChange,
) -> Result<SecurityGroup> {
    if let Some(name) = &changes.name {
        text("security group name", name)?;
    }
    if let Some(description) = &changes.description {
        text("security group description", description)?;
    }
    change(tx, tenant, |_, doc| {
        let g = group_at(doc, id)?;
        if let Some(name) = changes.name
            && name != g.name
        {
            if g.default {
                return Err(StoreError::Conflict(
                    "Updating default security group not allowed.".into(),
                ));
            }
            group_name(&name)?;
            g.name = name;
        }
        if let Some(description) = changes.description {
            g.description = description;
        }
        touch_group(g);
        Ok(g.clone())
    })
}

/// Deletes a group: `Conflict` for the `default` group or one a port is in; the rules of other
/// groups that name it as their remote go too.
pub(crate) fn delete_security_group(tx: &mut dyn NetTx, tenant: Uuid, id: Uuid) -> Result<()> {
    change(tx, tenant, |tx, doc| {
        let g = group_at(doc, id)?;
        if g.default {
            return Err(StoreError::Conflict(
                "Removing default security group not allowed.".into(),
            ));
        }
        if tx.port_groups(tenant)?.values().any(|g| g.contains(&id)) {
            return Err(StoreError::Conflict(format!("Security Group {id} in use.")));
        }
        doc.groups.retain(|g| g.id != id);
        for other in &mut doc.groups {
            let before = other.rules.len();
            other.rules.retain(|r| r.remote != RuleRemote::Group(id));
            if other.rules.len() != before {
                touch_group(other);
            }
        }
        Ok(())
    })
}

/// The network address of a prefix of `ethertype`, written as Neutron shows it.
fn normal_prefix(prefix: &str, ethertype: EtherType) -> Result<String> {
    let bad = || StoreError::Invalid(format!("'{prefix}' is not a valid IP prefix"));
    let (addr, len) = match prefix.split_once('/') {
        Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
        None => (prefix, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let family = match addr {
        IpAddr::V4(_) => EtherType::IPv4,
        IpAddr::V6(_) => EtherType::IPv6,
    };
    if family != ethertype {
        return Err(StoreError::Invalid(format!(
            "Conflicting value ethertype {} for CIDR {prefix}",
            ethertype.as_str()
        )));
    }
    Ok(match addr {
        IpAddr::V4(a) => {
            let len = len.unwrap_or(32);
            if len > 32 {
                return Err(bad());
            }
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            format!("{}/{len}", Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let len = len.unwrap_or(128);
            if len > 128 {
                return Err(bad());
            }
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            format!("{}/{len}", Ipv6Addr::from(u128::from(a) & mask))
        }
    })
}

/// Checks a new rule as Neutron does, and puts it in its normal form.
pub fn check_rule(mut new: NewSecurityGroupRule) -> Result<NewSecurityGroupRule> {
    text("security group rule description", &new.description)?;
    if let Some(protocol) = new.protocol.take() {
        let protocol = protocol.to_ascii_lowercase();
        let known = RULE_PROTOCOLS.contains(&protocol.as_str())
            || protocol
                .parse::<u8>()
                .is_ok_and(|n| n.to_string() == protocol);
        if !known {
            return Err(StoreError::Invalid(format!(
                "Security group rule protocol {protocol} not supported. Only protocol values \
                 {} and integer representations [0 to 255] are supported.",
                RULE_PROTOCOLS.join(", ")
            )));
        }
        new.protocol = Some(protocol);
    }
    if let RuleRemote::Prefix(prefix) = &new.remote {
        new.remote = RuleRemote::Prefix(normal_prefix(prefix, new.ethertype)?);
    }
    let ports = new.port_min.is_some() || new.port_max.is_some();
    match new.protocol.as_deref() {
        _ if !ports => {}
        None => {
            return Err(StoreError::Invalid(
                "Must also specify protocol if port range is given.".into(),
            ));
        }
        Some(p) if PORT_PROTOCOLS.contains(&p) => {
            let (Some(min), Some(max)) = (new.port_min, new.port_max) else {
                return Err(StoreError::Invalid(
                    "For TCP/UDP protocols, port_range_min must be <= port_range_max".into(),
                ));
            };
            if min == 0 || min > max {
                return Err(StoreError::Invalid(format!(
                    "Invalid port range {min}:{max}: port_range_min must be <= port_range_max, \
                     both from 1 to 65535"
                )));
            }
        }
        Some(p) if ICMP_PROTOCOLS.contains(&p) => {
            for (field, value) in [("type", new.port_min), ("code", new.port_max)] {
                if value.is_some_and(|v| v > 255) {
                    return Err(StoreError::Invalid(format!(
                        "Invalid value for ICMP {field} (port-range-{}): {}",
                        if field == "type" { "min" } else { "max" },
                        value.unwrap_or_default()
                    )));
                }
            }
            if new.port_min.is_none() {
                return Err(StoreError::Invalid(
                    "ICMP code (port-range-max) is provided but ICMP type (port-range-min) is \
                     missing."
                        .into(),
                ));
            }
        }
        Some(p) => {
            return Err(StoreError::Invalid(format!(
                "Invalid protocol {p} for port range, only supported for TCP, UDP, UDPLITE, \
                 SCTP, DCCP and ICMP"
            )));
        }
    }
    Ok(new)
}

/// Adds a rule to a group of the tenant: `Conflict` for a rule the group has, `NotFound` for
/// a group (or remote group) the tenant does not have, under the tenant's rule limit.
pub(crate) fn create_security_group_rule(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    new: NewSecurityGroupRule,
) -> Result<SecurityGroupRule> {
    let new = check_rule(new)?;
    change(tx, tenant, |_, doc| {
        if let RuleRemote::Group(remote) = new.remote {
            group_at(doc, remote)?;
        }
        let quota = quota_of(doc);
        let rules: usize = doc.groups.iter().map(|g| g.rules.len()).sum();
        let g = group_at(doc, new.group)?;
        if let Some(existing) = g.rules.iter().find(|r| r.same_as(&new)) {
            return Err(StoreError::Conflict(format!(
                "Security group rule already exists. Rule id is {}.",
                existing.id
            )));
        }
        if rules >= quota.security_group_rules as usize {
            return Err(over(
                QuotaKind::SecurityGroupRules,
                quota.security_group_rules,
            ));
        }
        let made = SecurityGroupRule {
            id: Uuid::new_v4(),
            group: g.id,
            tenant,
            direction: new.direction,
            ethertype: new.ethertype,
            protocol: new.protocol,
            port_min: new.port_min,
            port_max: new.port_max,
            remote: new.remote,
            description: new.description,
            created: now(),
        };
        g.rules.push(made.clone());
        touch_group(g);
        Ok(made)
    })
}

/// Deletes a rule of one of the tenant's groups.
pub(crate) fn delete_security_group_rule(tx: &mut dyn NetTx, tenant: Uuid, id: Uuid) -> Result<()> {
    change(tx, tenant, |_, doc| {
        let g = doc
            .groups
            .iter_mut()
            .find(|g| g.rules.iter().any(|r| r.id == id))
            .ok_or_else(|| StoreError::not_found("security group rule", id))?;
        g.rules.retain(|r| r.id != id);
        touch_group(g);
        Ok(())
    })
}

/// The groups of the tenant's ports.
pub(crate) fn port_groups(tx: &mut dyn NetTx, tenant: Uuid) -> Result<PortGroups> {
    let default = look(tx, tenant, |doc| {
        doc.groups.iter().find(|g| g.default).map(|g| g.id)
    })?
    .ok_or_else(|| StoreError::Backend(format!("tenant {tenant} has no default group")))?;
    Ok(PortGroups {
        default,
        set: tx.port_groups(tenant)?,
    })
}

/// Sets the groups of the port of `instance` (`NotFound` for an instance or group the tenant
/// does not have; duplicates are dropped; at most [`MAX_PORT_GROUPS`]).
pub(crate) fn set_port_groups(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    instance: Uuid,
    groups: &[Uuid],
) -> Result<Vec<Uuid>> {
    let mut wanted: Vec<Uuid> = Vec::new();
    for g in groups {
        if !wanted.contains(g) {
            wanted.push(*g);
        }
    }
    if wanted.len() > MAX_PORT_GROUPS {
        return Err(StoreError::Invalid(format!(
            "a port may be in at most {MAX_PORT_GROUPS} security groups"
        )));
    }
    let (doc, made) = open(tx, tenant)?;
    if made {
        tx.save(tenant, &doc)?;
    }
    if tx.instance_ip(tenant, instance)?.is_none() {
        return Err(StoreError::not_found("port", instance));
    }
    for g in &wanted {
        if !doc.groups.iter().any(|have| have.id == *g) {
            return Err(StoreError::not_found("security group", g));
        }
    }
    tx.set_port_groups(tenant, instance, &wanted)?;
    Ok(wanted)
}

/// The tenant's floating IPs, by address.
pub(crate) fn floating_ips(tx: &mut dyn NetTx, tenant: Uuid) -> Result<Vec<FloatingIp>> {
    let mut all = look(tx, tenant, |doc| doc.floating_ips.clone())?;
    all.sort_by_key(|f| f.address);
    Ok(all)
}

/// A pool's network address, and the first and last addresses it hands out: all but the
/// network, its first host (the gateway) and its broadcast address.
pub fn pool_hosts(pool: Cidr) -> Result<(u32, u32, u32)> {
    match pool.addr {
        IpAddr::V4(a) if (8..=30).contains(&pool.prefix) => {
            let base = u32::from(a)
                & u32::MAX
                    .checked_shl(32 - u32::from(pool.prefix))
                    .unwrap_or(0);
            let (first, last) = crate::net::instance_hosts(base, pool.prefix);
            Ok((base, first, last))
        }
        _ => Err(StoreError::Invalid(format!(
            "the floating IP pool {pool} must be an IPv4 block from /8 to /30"
        ))),
    }
}

/// Where a floating IP maps to: the port's own address unless `fixed` names it.
fn fixed_for(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    port: Uuid,
    fixed: Option<Ipv4Addr>,
) -> Result<Ipv4Addr> {
    let ip = tx
        .instance_ip(tenant, port)?
        .ok_or_else(|| StoreError::not_found("port", port))?;
    match fixed {
        Some(f) if f != ip => Err(StoreError::Invalid(format!(
            "Port {port} does not have fixed ip {f}"
        ))),
        _ => Ok(ip),
    }
}

/// Allocates a floating IP from `new.pool`: the address asked for (`Invalid` outside the pool's
/// hosts, `Conflict` when in use) or the lowest free one (`Exhausted` when none is left), under
/// the tenant's limit.
pub(crate) fn create_floating_ip(tx: &mut dyn NetTx, new: NewFloatingIp) -> Result<FloatingIp> {
    text("floating IP description", &new.description)?;
    let (base, first, last) = pool_hosts(new.pool)?;
    let tenant = new.tenant;
    change(tx, tenant, |tx, doc| {
        let quota = quota_of(doc);
        if doc.floating_ips.len() >= quota.floating_ips as usize {
            return Err(over(QuotaKind::FloatingIps, quota.floating_ips));
        }
        let address = match new.address {
            Some(a) => {
                let n = u32::from(a);
                if n < first || n > last {
                    return Err(StoreError::Invalid(format!(
                        "IP address {a} is not a valid IP for the external network's subnet {}",
                        new.pool
                    )));
                }
                n
            }
            None => {
                let taken = tx.taken_addresses(first, last)?;
                crate::net::first_free_host(base, new.pool.prefix, &taken).ok_or_else(|| {
                    StoreError::Exhausted(format!(
                        "No more IP addresses available on the external network ({})",
                        new.pool
                    ))
                })?
            }
        };
        let fixed_ip = new
            .port
            .map(|p| fixed_for(tx, tenant, p, new.fixed_ip))
            .transpose()?;
        tx.claim_address(tenant, address)?;
        let at = now();
        let made = FloatingIp {
            id: Uuid::new_v4(),
            tenant,
            address: Ipv4Addr::from(address),
            port: new.port,
            fixed_ip,
            description: new.description.clone(),
            created: at,
            updated: at,
            revision: 1,
        };
        doc.floating_ips.push(made.clone());
        Ok(made)
    })
}

/// Associates a floating IP with a port of the tenant, disassociates it, or changes its
/// description (`Conflict` when another floating IP of the tenant maps to that port's address).
pub(crate) fn update_floating_ip(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    id: Uuid,
    changes: FloatingIpChange,
) -> Result<FloatingIp> {
    if let Some(d) = &changes.description {
        text("floating IP description", d)?;
    }
    change(tx, tenant, |tx, doc| {
        let at = doc
            .floating_ips
            .iter()
            .position(|f| f.id == id)
            .ok_or_else(|| StoreError::not_found("floating IP", id))?;
        match changes.port {
            Some(Some(port)) => {
                let fixed = fixed_for(tx, tenant, port, changes.fixed_ip)?;
                if let Some(other) = doc
                    .floating_ips
                    .iter()
                    .find(|f| f.id != id && f.port == Some(port))
                {
                    return Err(StoreError::Conflict(format!(
                        "Cannot associate floating IP {} ({id}) with port {port} using fixed IP \
                         {fixed}, as that fixed IP already has a floating IP on external \
                         network: {}.",
                        doc.floating_ips[at].address, other.address
                    )));
                }
                doc.floating_ips[at].port = Some(port);
                doc.floating_ips[at].fixed_ip = Some(fixed);
            }
            Some(None) => {
                doc.floating_ips[at].port = None;
                doc.floating_ips[at].fixed_ip = None;
            }
            None => {}
        }
        let f = &mut doc.floating_ips[at];
        if let Some(d) = changes.description {
            f.description = d;
        }
        f.updated = now();
        f.revision += 1;
        Ok(f.clone())
    })
}

/// Releases a floating IP of the tenant.
pub(crate) fn delete_floating_ip(tx: &mut dyn NetTx, tenant: Uuid, id: Uuid) -> Result<()> {
    change(tx, tenant, |tx, doc| {
        let at = doc
            .floating_ips
            .iter()
            .position(|f| f.id == id)
            .ok_or_else(|| StoreError::not_found("floating IP", id))?;
        let gone = doc.floating_ips.remove(at);
        tx.release_address(u32::from(gone.address))
    })
}

/// The tenant's limits.
pub(crate) fn network_quota(tx: &mut dyn NetTx, tenant: Uuid) -> Result<NetworkQuota> {
    Ok(tx.load(tenant)?.and_then(|d| d.quota).unwrap_or_default())
}

/// Sets the tenant's limits (`Invalid` past [`NetworkQuota::MAX`]); what it holds already
/// stays, but nothing more is made until it is under them again.
pub(crate) fn set_network_quota(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    quota: NetworkQuota,
) -> Result<NetworkQuota> {
    let max = NetworkQuota::MAX;
    if quota.floating_ips > max.floating_ips
        || quota.security_groups > max.security_groups
        || quota.security_group_rules > max.security_group_rules
    {
        return Err(StoreError::Invalid(format!(
            "network quotas may be at most floatingip {}, security_group {}, \
             security_group_rule {}",
            max.floating_ips, max.security_groups, max.security_group_rules
        )));
    }
    change(tx, tenant, |_, doc| {
        doc.quota = Some(quota);
        Ok(quota)
    })
}

/// What a tenant holds against its limits.
pub(crate) fn network_usage(tx: &mut dyn NetTx, tenant: Uuid) -> Result<NetworkQuota> {
    look(tx, tenant, |doc| NetworkQuota {
        floating_ips: u32::try_from(doc.floating_ips.len()).unwrap_or(u32::MAX),
        security_groups: u32::try_from(doc.groups.len()).unwrap_or(u32::MAX),
        security_group_rules: u32::try_from(
            doc.groups.iter().map(|g| g.rules.len()).sum::<usize>(),
        )
        .unwrap_or(u32::MAX),
    })
}

/// An instance's record is going: its floating IPs are disassociated (the port-groups record is
/// the backend's to delete). SQLite's deletion only: etcd's leaves the tenant's networking alone
/// (`etcd/networking.rs`).
#[cfg(feature = "sqlite")]
pub(crate) fn forget_port(tx: &mut dyn NetTx, tenant: Uuid, instance: Uuid) -> Result<()> {
    let Some(mut doc) = tx.load(tenant)? else {
        return Ok(());
    };
    let mut changed = false;
    for f in doc
        .floating_ips
        .iter_mut()
        .filter(|f| f.port == Some(instance))
    {
        f.port = None;
        f.fixed_ip = None;
        f.updated = now();
        f.revision += 1;
        changed = true;
    }
    if changed {
        tx.save(tenant, &doc)?;
    }
    Ok(())
}

/// Implements [`NetworkStore`](crate::NetworkStore) for a backend with an inherent
/// `fn net<T>(&self, what: &str, f: impl FnMut(&mut dyn NetTx) -> Result<T>) -> Result<T>` that
/// runs `f` in one write transaction (again, if the backend retries lost transactions).
macro_rules! network_store {
    ($store:ty) => {
        impl $crate::NetworkStore for $store {
            fn security_groups(&self, tenant: Uuid) -> Result<Vec<SecurityGroup>> {
                self.net("reading security groups", |tx| {
                    $crate::networking::security_groups(tx, tenant)
                })
            }
            fn create_security_group(&self, new: NewSecurityGroup) -> Result<SecurityGroup> {
                self.net("creating a security group", |tx| {
                    $crate::networking::create_security_group(tx, new.clone())
                })
            }
            fn update_security_group(
                &self,
                tenant: Uuid,
                id: Uuid,
                change: SecurityGroupChange,
            ) -> Result<SecurityGroup> {
                self.net("updating a security group", |tx| {
                    $crate::networking::update_security_group(tx, tenant, id, change.clone())
                })
            }
            fn delete_security_group(&self, tenant: Uuid, id: Uuid) -> Result<()> {
                self.net("deleting a security group", |tx| {
                    $crate::networking::delete_security_group(tx, tenant, id)
                })
            }
            fn create_security_group_rule(
                &self,
                tenant: Uuid,
                new: NewSecurityGroupRule,
            ) -> Result<SecurityGroupRule> {
                self.net("creating a security group rule", |tx| {
                    $crate::networking::create_security_group_rule(tx, tenant, new.clone())
                })
            }
            fn delete_security_group_rule(&self, tenant: Uuid, id: Uuid) -> Result<()> {
                self.net("deleting a security group rule", |tx| {
                    $crate::networking::delete_security_group_rule(tx, tenant, id)
                })
            }
            fn port_groups(&self, tenant: Uuid) -> Result<PortGroups> {
                self.net("reading ports' security groups", |tx| {
                    $crate::networking::port_groups(tx, tenant)
                })
            }
            fn set_port_groups(
                &self,
                tenant: Uuid,
                instance: Uuid,
                groups: &[Uuid],
            ) -> Result<Vec<Uuid>> {
                self.net("setting a port's security groups", |tx| {
                    $crate::networking::set_port_groups(tx, tenant, instance, groups)
                })
            }
            fn floating_ips(&self, tenant: Uuid) -> Result<Vec<FloatingIp>> {
                self.net("reading floating IPs", |tx| {
                    $crate::networking::floating_ips(tx, tenant)
                })
            }
            fn create_floating_ip(&self, new: NewFloatingIp) -> Result<FloatingIp> {
                self.net("allocating a floating IP", |tx| {
                    $crate::networking::create_floating_ip(tx, new.clone())
                })
            }
            fn update_floating_ip(
                &self,
                tenant: Uuid,
                id: Uuid,
                change: FloatingIpChange,
            ) -> Result<FloatingIp> {
                self.net("updating a floating IP", |tx| {
                    $crate::networking::update_floating_ip(tx, tenant, id, change.clone())
                })
            }
            fn delete_floating_ip(&self, tenant: Uuid, id: Uuid) -> Result<()> {
                self.net("releasing a floating IP", |tx| {
                    $crate::networking::delete_floating_ip(tx, tenant, id)
                })
            }
            fn network_quota(&self, tenant: Uuid) -> Result<NetworkQuota> {
                self.net("reading network quotas", |tx| {
                    $crate::networking::network_quota(tx, tenant)
                })
            }
            fn set_network_quota(&self, tenant: Uuid, quota: NetworkQuota) -> Result<NetworkQuota> {
                self.net("setting network quotas", |tx| {
                    $crate::networking::set_network_quota(tx, tenant, quota)
                })
            }
            fn network_usage(&self, tenant: Uuid) -> Result<NetworkQuota> {
                self.net("reading network usage", |tx| {
                    $crate::networking::network_usage(tx, tenant)
                })
            }
        }
    };
}
pub(crate) use network_store;
