//! Tenants' networking objects over etcd: [`NetworkStore`] for [`EtcdStore`]. A tenant's
//! document is one record at `netdoc/<tenant>`, the groups set on a port one at
//! `portsg/<tenant>/<instance>`, and each floating address in use one at `fipaddr/<address>`
//! (its tenant), whose creation is checked in the transaction, so that no two tenants take one
//! address. An allocation reads the whole `fipaddr/` range, so parallel allocations conflict
//! and retry.
//!
//! An instance's deletion leaves these records alone: an off-host launcher deletes instance
//! records under the launcher role, which may not touch a tenant's networking
//! (docs/etcd-store.md). A floating IP associated with a gone instance reads as disassociated,
//! and a gone port's groups as none; the stale `portsg/` record goes with its tenant.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::records::InstanceRec;
use super::{EtcdStore, Tx, decode_all};
use crate::networking::{NetTx, TenantNet, network_store};
use crate::*;

/// The groups set on one port.
#[derive(Debug, Serialize, Deserialize)]
struct PortGroupsRec {
    instance: Uuid,
    groups: Vec<Uuid>,
}

/// [`NetTx`] over one etcd transaction.
pub(super) struct EtcdNet<'a, 's>(pub(super) &'a mut Tx<'s>);

impl NetTx for EtcdNet<'_, '_> {
    fn load(&mut self, tenant: Uuid) -> Result<Option<TenantNet>> {
        let keys = self.0.keys();
        if self.0.get(&keys.tenant(tenant))?.is_none() {
            return Err(StoreError::not_found("tenant", tenant));
        }
        let key = keys.net_doc(tenant);
        let mut doc: Option<TenantNet> = self.0.get_json(&key)?;
        // An instance's deletion does not touch this document (a launcher, which may delete
        // instance records, may not write it): an association with an instance that is gone
        // reads as none. The associated instances are read in one round trip.
        if let Some(doc) = doc.as_mut() {
            let ports: Vec<Uuid> = doc.floating_ips.iter().filter_map(|f| f.port).collect();
            if !ports.is_empty() {
                let recs = self
                    .0
                    .get_many(&ports.iter().map(|p| keys.instance(*p)).collect::<Vec<_>>())?;
                let mut live = std::collections::HashSet::new();
                for (port, kv) in ports.iter().zip(recs) {
                    if let Some(kv) = kv
                        && kv.decode::<InstanceRec>()?.tenant == tenant
                    {
                        live.insert(*port);
                    }
                }
                for f in doc.floating_ips.iter_mut() {
                    if f.port.is_some_and(|p| !live.contains(&p)) {
                        f.port = None;
                        f.fixed_ip = None;
                    }
                }
            }
        }
        Ok(doc)
    }

    fn save(&mut self, tenant: Uuid, doc: &TenantNet) -> Result<()> {
        let key = self.0.keys().net_doc(tenant);
        self.0.put(&key, doc)
    }

    fn instance_ip(&mut self, tenant: Uuid, instance: Uuid) -> Result<Option<Ipv4Addr>> {
        let key = self.0.keys().instance(instance);
        Ok(self
            .0
            .get_json::<InstanceRec>(&key)?
            .filter(|rec| rec.tenant == tenant)
            .map(|rec| Ipv4Addr::from(rec.ip)))
    }

    fn port_groups(&mut self, tenant: Uuid) -> Result<BTreeMap<Uuid, Vec<Uuid>>> {
        let prefix = self.0.keys().ports_groups(tenant);
        let recs: Vec<PortGroupsRec> = decode_all(&self.0.range(&prefix)?)?;
        // The groups of a gone instance's port stay until its tenant goes (see `load`): they
        // read as none.
        let mut ports = BTreeMap::new();
        for r in recs {
            if self.instance_ip(tenant, r.instance)?.is_some() {
                ports.insert(r.instance, r.groups);
            }
        }
        Ok(ports)
    }

    /// One round trip for these ports' records, the tenant's and its document (read ahead for
    /// the [`NetTx::load`] that follows; one more per 128 keys past the first 126 ports); the
    /// instances are the caller's, known to exist. The ports' records are read for display
    /// only: the commit does not compare them, so a read that writes the tenant's document
    /// (its `default` group made) stays within etcd's compares, whatever the page's size.
    fn groups_of_ports(
        &mut self,
        tenant: Uuid,
        instances: &[Uuid],
    ) -> Result<BTreeMap<Uuid, Vec<Uuid>>> {
        let keys = self.0.keys();
        let watched = [keys.tenant(tenant), keys.net_doc(tenant)];
        let ports: Vec<String> = instances
            .iter()
            .map(|i| keys.port_groups(tenant, *i))
            .collect();
        let found = self.0.prefetch_and_see(&watched, &ports)?;
        let mut ports = BTreeMap::new();
        for kv in found.into_iter().flatten() {
            let rec: PortGroupsRec = kv.decode()?;
            ports.insert(rec.instance, rec.groups);
        }
        Ok(ports)
    }

    fn set_port_groups(&mut self, tenant: Uuid, instance: Uuid, groups: &[Uuid]) -> Result<()> {
        let key = self.0.keys().port_groups(tenant, instance);
        let rec = PortGroupsRec {
            instance,
            groups: groups.to_vec(),
        };
        self.0.put(&key, &rec)
    }

    fn taken_addresses(&mut self, first: u32, last: u32) -> Result<Vec<u32>> {
        let prefix = self.0.keys().floating_addresses();
        let mut all = Vec::new();
        for kv in self.0.range(&prefix)? {
            let address = kv
                .key
                .strip_prefix(&prefix)
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .ok_or_else(|| {
                    StoreError::Backend(format!("bad floating address key {}", kv.key))
                })?;
            if (first..=last).contains(&address) {
                all.push(address);
            }
        }
        all.sort_unstable();
        Ok(all)
    }

    fn claim_address(&mut self, tenant: Uuid, address: u32) -> Result<()> {
        let key = self.0.keys().floating_address(address);
        if self.0.get(&key)?.is_some() {
            return Err(StoreError::Conflict(format!(
                "IP address {} already allocated",
                Ipv4Addr::from(address)
            )));
        }
        self.0.put_text(&key, &tenant.to_string());
        Ok(())
    }

    fn release_address(&mut self, address: u32) -> Result<()> {
        let key = self.0.keys().floating_address(address);
        self.0.delete(&key);
        Ok(())
    }
}

impl EtcdStore {
    fn net<T>(&self, what: &str, mut f: impl FnMut(&mut dyn NetTx) -> Result<T>) -> Result<T> {
        self.atomically(what, |tx| f(&mut EtcdNet(tx)))
    }

    /// A read: etcd's transactions commit nothing when nothing was written, so a read is
    /// [`EtcdStore::net`] as it is.
    fn net_read<T>(&self, what: &str, f: impl FnMut(&mut dyn NetTx) -> Result<T>) -> Result<T> {
        self.net(what, f)
    }
}

network_store!(EtcdStore);

/// A tenant is going: its networking document, its ports' groups and its floating addresses go.
pub(super) fn forget_tenant(tx: &mut Tx<'_>, tenant: Uuid) -> Result<()> {
    let keys = tx.keys();
    let doc: Option<TenantNet> = tx.get_json(&keys.net_doc(tenant))?;
    for f in doc.map(|d| d.floating_ips).unwrap_or_default() {
        tx.delete(&keys.floating_address(u32::from(f.address)));
    }
    tx.delete(&keys.net_doc(tenant));
    tx.delete_prefix(&keys.ports_groups(tenant));
    Ok(())
}
