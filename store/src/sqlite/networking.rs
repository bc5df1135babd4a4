//! Tenants' networking objects in SQLite: [`NetworkStore`] for [`SqliteStore`]. A tenant's
//! document is one JSON row of `tenant_networks`; the ports' groups are rows of `port_groups`
//! and the floating addresses in use rows of `floating_addresses`, each going with its
//! instance or tenant (`ON DELETE CASCADE`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use super::{SqliteStore, uuid_at};
use crate::networking::{NetTx, ReadOnly, TenantNet, network_store};
use crate::*;

/// [`NetTx`] over one SQLite transaction.
pub(super) struct SqliteNet<'a>(pub(super) &'a Connection);

fn json_err(e: serde_json::Error) -> StoreError {
    StoreError::Backend(format!("a networking record does not decode: {e}"))
}

impl NetTx for SqliteNet<'_> {
    fn load(&mut self, id: Uuid) -> Result<Option<TenantNet>> {
        let exists: bool = self.0.query_row(
            "SELECT EXISTS (SELECT 1 FROM tenants WHERE id = ?1)",
            [id.to_string()],
            |r| r.get(0),
        )?;
        if !exists {
            return Err(StoreError::not_found("tenant", id));
        }
        let doc: Option<String> = self
            .0
            .query_row(
                "SELECT doc FROM tenant_networks WHERE tenant_id = ?1",
                [id.to_string()],
                |r| r.get(0),
            )
            .optional()?;
        doc.map(|d| serde_json::from_str(&d).map_err(json_err))
            .transpose()
    }

    fn save(&mut self, id: Uuid, doc: &TenantNet) -> Result<()> {
        let text = serde_json::to_string(doc).map_err(json_err)?;
        self.0.execute(
            "INSERT INTO tenant_networks (tenant_id, doc) VALUES (?1, ?2)
                 ON CONFLICT (tenant_id) DO UPDATE SET doc = excluded.doc",
            params![id.to_string(), text],
        )?;
        Ok(())
    }

    fn instance_ip(&mut self, tenant: Uuid, instance: Uuid) -> Result<Option<Ipv4Addr>> {
        let ip: Option<i64> = self
            .0
            .query_row(
                "SELECT ip FROM instances WHERE id = ?1 AND tenant_id = ?2",
                [instance.to_string(), tenant.to_string()],
                |r| r.get(0),
            )
            .optional()?;
        Ok(ip.and_then(|ip| u32::try_from(ip).ok()).map(Ipv4Addr::from))
    }

    fn port_groups(&mut self, tenant: Uuid) -> Result<BTreeMap<Uuid, Vec<Uuid>>> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT instance_id, groups FROM port_groups WHERE tenant_id = ?1")?;
        let rows = stmt.query_map([tenant.to_string()], |r| {
            Ok((uuid_at(r, 0)?, r.get::<_, String>(1)?))
        })?;
        let mut all = BTreeMap::new();
        for row in rows {
            let (instance, groups) = row?;
            all.insert(instance, serde_json::from_str(&groups).map_err(json_err)?);
        }
        Ok(all)
    }

    fn set_port_groups(&mut self, tenant: Uuid, instance: Uuid, groups: &[Uuid]) -> Result<()> {
        let text = serde_json::to_string(groups).map_err(json_err)?;
        self.0.execute(
            "INSERT INTO port_groups (instance_id, tenant_id, groups) VALUES (?1, ?2, ?3)
                 ON CONFLICT (instance_id) DO UPDATE SET groups = excluded.groups",
            params![instance.to_string(), tenant.to_string(), text],
        )?;
        Ok(())
    }

    fn taken_addresses(&mut self, first: u32, last: u32) -> Result<Vec<u32>> {
        let mut stmt = self.0.prepare_cached(
            "SELECT address FROM floating_addresses WHERE address BETWEEN ?1 AND ?2
                 ORDER BY address",
        )?;
        let rows = stmt.query_map([i64::from(first), i64::from(last)], |r| r.get::<_, i64>(0))?;
        let mut all = Vec::new();
        for row in rows {
            all.extend(u32::try_from(row?).ok());
        }
        Ok(all)
    }

    fn claim_address(&mut self, tenant: Uuid, address: u32) -> Result<()> {
        self.0
            .execute(
                "INSERT INTO floating_addresses (address, tenant_id) VALUES (?1, ?2)",
                params![i64::from(address), tenant.to_string()],
            )
            .map_err(|e| match StoreError::from(e) {
                StoreError::Conflict(_) => StoreError::Conflict(format!(
                    "IP address {} already allocated",
                    Ipv4Addr::from(address)
                )),
                other => other,
            })?;
        Ok(())
    }

    fn release_address(&mut self, address: u32) -> Result<()> {
        self.0.execute(
            "DELETE FROM floating_addresses WHERE address = ?1",
            [i64::from(address)],
        )?;
        Ok(())
    }
}

impl SqliteStore {
    fn net<T>(&self, _what: &str, mut f: impl FnMut(&mut dyn NetTx) -> Result<T>) -> Result<T> {
        self.write(|tx| f(&mut SqliteNet(tx)))
    }

    /// A read: in a read transaction, which does not wait for the write lock; again in a write
    /// transaction only when it had to write (a tenant's first `default` group).
    fn net_read<T>(&self, what: &str, mut f: impl FnMut(&mut dyn NetTx) -> Result<T>) -> Result<T> {
        let mut wanted_write = false;
        let out = self.read(|conn| {
            let mut net = SqliteNet(conn);
            let mut tx = ReadOnly::new(&mut net);
            let out = f(&mut tx);
            wanted_write = tx.wanted_write();
            out
        });
        if wanted_write {
            return self.net(what, f);
        }
        out
    }
}

network_store!(SqliteStore);
