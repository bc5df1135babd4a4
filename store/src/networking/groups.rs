//! Security groups and their rules, checked as Neutron checks them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use uuid::Uuid;

use super::*;
use crate::common::now;
use crate::{QuotaKind, Result, StoreError};

fn group_name(name: &str) -> Result<()> {
    text("security group name", name)?;
    if name.eq_ignore_ascii_case(DEFAULT_GROUP) {
        return Err(StoreError::Conflict(
            "Default security group already exists.".into(),
        ));
    }
    Ok(())
}

pub(super) fn rule(
    group: &SecurityGroup,
    direction: Direction,
    ethertype: EtherType,
) -> SecurityGroupRule {
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

pub(super) fn group(
    tenant: Uuid,
    name: String,
    description: String,
    default: bool,
) -> SecurityGroup {
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
