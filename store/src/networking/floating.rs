//! Floating IPs: addresses of an external pool held by a tenant, mapped to a port.

use std::net::{IpAddr, Ipv4Addr};

use ssntp::payload::Cidr;
use uuid::Uuid;

use super::*;
use crate::common::now;
use crate::{QuotaKind, Result, StoreError};

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
