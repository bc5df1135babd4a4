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
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[cfg(feature = "sqlite")]
use crate::common::now;
use crate::{QuotaKind, Result, StoreError};

mod floating;
mod groups;
mod model;

pub use floating::pool_hosts;
pub(crate) use floating::{
    create_floating_ip, delete_floating_ip, floating_ips, update_floating_ip,
};
pub use groups::check_rule;
pub(crate) use groups::{
    create_security_group, create_security_group_rule, delete_security_group,
    delete_security_group_rule, security_groups, update_security_group,
};
use groups::{group, rule};
pub use model::*;

/// The longest security group name, description or floating IP description, in bytes.
pub const MAX_NET_TEXT: usize = 255;
/// The most security groups on one port.
pub const MAX_PORT_GROUPS: usize = 32;
/// The name of the group every tenant has.
pub const DEFAULT_GROUP: &str = "default";

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
    /// The groups set on these ports of the tenant (instances of the tenant that exist), before
    /// the tenant's document is loaded: a backend may read the tenant and its document in the
    /// same round trip, for the [`NetTx::load`] that follows.
    fn groups_of_ports(
        &mut self,
        tenant: Uuid,
        instances: &[Uuid],
    ) -> Result<BTreeMap<Uuid, Vec<Uuid>>> {
        let mut set = self.port_groups(tenant)?;
        let wanted: std::collections::HashSet<&Uuid> = instances.iter().collect();
        set.retain(|port, _| wanted.contains(port));
        Ok(set)
    }
    /// Sets the groups of a port of the tenant (the instance exists).
    fn set_port_groups(&mut self, tenant: Uuid, instance: Uuid, groups: &[Uuid]) -> Result<()>;
    /// The floating addresses in use in `[first, last]`, sorted.
    fn taken_addresses(&mut self, first: u32, last: u32) -> Result<Vec<u32>>;
    /// Takes a floating address for the tenant (`Conflict` if it is in use).
    fn claim_address(&mut self, tenant: Uuid, address: u32) -> Result<()>;
    /// Gives a floating address back.
    fn release_address(&mut self, address: u32) -> Result<()>;
}

/// A [`NetTx`] for a read transaction: reads go through, a write is refused and remembered
/// ([`ReadOnly::wanted_write`]), so that the caller runs the whole again in a write transaction.
/// Reads of a tenant's networking write only the first time (its `default` group made), so this
/// lets them run without the store's write lock, beside a long write (a launch of 1,000).
pub(crate) struct ReadOnly<'a> {
    tx: &'a mut dyn NetTx,
    wanted_write: bool,
}

impl<'a> ReadOnly<'a> {
    pub(crate) fn new(tx: &'a mut dyn NetTx) -> ReadOnly<'a> {
        ReadOnly {
            tx,
            wanted_write: false,
        }
    }

    /// Whether a write was asked for (and refused).
    pub(crate) fn wanted_write(&self) -> bool {
        self.wanted_write
    }

    fn refuse(&mut self) -> StoreError {
        self.wanted_write = true;
        StoreError::Backend("a write inside a read transaction".into())
    }
}

impl NetTx for ReadOnly<'_> {
    fn load(&mut self, tenant: Uuid) -> Result<Option<TenantNet>> {
        self.tx.load(tenant)
    }
    fn save(&mut self, _tenant: Uuid, _doc: &TenantNet) -> Result<()> {
        Err(self.refuse())
    }
    fn instance_ip(&mut self, tenant: Uuid, instance: Uuid) -> Result<Option<Ipv4Addr>> {
        self.tx.instance_ip(tenant, instance)
    }
    fn port_groups(&mut self, tenant: Uuid) -> Result<BTreeMap<Uuid, Vec<Uuid>>> {
        self.tx.port_groups(tenant)
    }
    fn groups_of_ports(
        &mut self,
        tenant: Uuid,
        instances: &[Uuid],
    ) -> Result<BTreeMap<Uuid, Vec<Uuid>>> {
        self.tx.groups_of_ports(tenant, instances)
    }
    fn set_port_groups(&mut self, _tenant: Uuid, _instance: Uuid, _groups: &[Uuid]) -> Result<()> {
        Err(self.refuse())
    }
    fn taken_addresses(&mut self, first: u32, last: u32) -> Result<Vec<u32>> {
        self.tx.taken_addresses(first, last)
    }
    fn claim_address(&mut self, _tenant: Uuid, _address: u32) -> Result<()> {
        Err(self.refuse())
    }
    fn release_address(&mut self, _address: u32) -> Result<()> {
        Err(self.refuse())
    }
}

fn text(what: &str, value: &str) -> Result<()> {
    if value.len() > MAX_NET_TEXT || value.contains('\0') {
        return Err(StoreError::Invalid(format!(
            "{what} must be at most {MAX_NET_TEXT} bytes"
        )));
    }
    Ok(())
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

/// What a page of the tenant's servers (`instances`) shows of their networking.
pub(crate) fn servers_networking(
    tx: &mut dyn NetTx,
    tenant: Uuid,
    instances: &[Uuid],
) -> Result<ServersNet> {
    let set = tx.groups_of_ports(tenant, instances)?;
    let (doc, made) = open(tx, tenant)?;
    if made {
        tx.save(tenant, &doc)?;
    }
    let default = doc
        .groups
        .iter()
        .find(|g| g.default)
        .map(|g| g.id)
        .ok_or_else(|| StoreError::Backend(format!("tenant {tenant} has no default group")))?;
    let shown: std::collections::HashSet<&Uuid> = instances.iter().collect();
    let mut floating_ips: Vec<FloatingIp> = doc
        .floating_ips
        .into_iter()
        .filter(|f| f.port.is_some_and(|p| shown.contains(&p)))
        .collect();
    floating_ips.sort_by_key(|f| f.address);
    Ok(ServersNet {
        groups: doc.groups,
        ports: PortGroups { default, set },
        floating_ips,
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
/// runs `f` in one write transaction (again, if the backend retries lost transactions), and a
/// `net_read` of the same shape for the reads, which may run `f` in a read transaction first
/// ([`ReadOnly`]) and again through `net` if it wanted to write.
macro_rules! network_store {
    ($store:ty) => {
        impl $crate::NetworkStore for $store {
            fn security_groups(&self, tenant: Uuid) -> Result<Vec<SecurityGroup>> {
                self.net_read("reading security groups", |tx| {
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
                self.net_read("reading ports' security groups", |tx| {
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
            fn servers_networking(&self, tenant: Uuid, instances: &[Uuid]) -> Result<ServersNet> {
                self.net_read("reading servers' networking", |tx| {
                    $crate::networking::servers_networking(tx, tenant, instances)
                })
            }
            fn floating_ips(&self, tenant: Uuid) -> Result<Vec<FloatingIp>> {
                self.net_read("reading floating IPs", |tx| {
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
                self.net_read("reading network quotas", |tx| {
                    $crate::networking::network_quota(tx, tenant)
                })
            }
            fn set_network_quota(&self, tenant: Uuid, quota: NetworkQuota) -> Result<NetworkQuota> {
                self.net("setting network quotas", |tx| {
                    $crate::networking::set_network_quota(tx, tenant, quota)
                })
            }
            fn network_usage(&self, tenant: Uuid) -> Result<NetworkQuota> {
                self.net_read("reading network usage", |tx| {
                    $crate::networking::network_usage(tx, tenant)
                })
            }
        }
    };
}
pub(crate) use network_store;
