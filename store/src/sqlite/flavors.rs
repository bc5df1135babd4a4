//! Flavors in SQLite: the `flavors` table (its `is_public` flag and its extra specs as a JSON
//! object), and `flavor_access`, the access lists of private flavors (rows going with the
//! flavor and with the tenant). Each function runs inside the caller's transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::identity::tenant;
use super::{Cached, bad_column, delete_row, duplicate, int, u32_at, u64_at, uuid_at};
use crate::*;

const FLAVOR_COLS: &str = "id, name, vcpus, memory_mb, disk_gb, is_public, extra_specs";

/// The SQL condition for "flavor seen in the scope whose tenant is `?1`" (`?1` NULL for
/// [`Scope::All`]): public, or private with the tenant on its access list.
const SEEN: &str = "(?1 IS NULL OR is_public = 1 OR EXISTS (SELECT 1 FROM flavor_access a \
                    WHERE a.flavor_id = flavors.id AND a.tenant_id = ?1))";

fn tenant_of(scope: Scope) -> Option<String> {
    match scope {
        Scope::All => None,
        Scope::Tenant(t) => Some(t.to_string()),
    }
}

fn flavor_row(row: &Row<'_>) -> rusqlite::Result<Flavor> {
    let specs: String = row.get(6)?;
    Ok(Flavor {
        id: uuid_at(row, 0)?,
        name: row.get(1)?,
        vcpus: u32_at(row, 2)?,
        memory_mb: u64_at(row, 3)?,
        disk_gb: u64_at(row, 4)?,
        is_public: row.get(5)?,
        extra_specs: serde_json::from_str(&specs).map_err(|e| bad_column(6, e.to_string()))?,
    })
}

pub(super) fn create(tx: &Connection, new: NewFlavor) -> Result<Flavor> {
    new.check()?;
    let flavor = new.into_flavor(Uuid::new_v4());
    tx.execute(
        "INSERT INTO flavors (id, name, vcpus, memory_mb, disk_gb, is_public, extra_specs) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, '{}')",
        params![
            flavor.id.to_string(),
            flavor.name,
            flavor.vcpus,
            int(flavor.memory_mb)?,
            int(flavor.disk_gb)?,
            flavor.is_public,
        ],
    )
    .map_err(|e| duplicate(e, "flavor", &flavor.name))?;
    Ok(flavor)
}

/// Flavor `id` if `scope` sees it.
pub(super) fn flavor(tx: &Connection, scope: Scope, id: Uuid) -> Result<Flavor> {
    tx.query_row_cached(
        &format!("SELECT {FLAVOR_COLS} FROM flavors WHERE id = ?2 AND {SEEN}"),
        params![tenant_of(scope), id.to_string()],
        flavor_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("flavor", id))
}

/// The flavors `scope` sees, by name.
pub(super) fn flavors(tx: &Connection, scope: Scope) -> Result<Vec<Flavor>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT {FLAVOR_COLS} FROM flavors WHERE {SEEN} ORDER BY name"
    ))?;
    let rows = stmt.query_map([tenant_of(scope)], flavor_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Deletes flavor `id` (its access list goes with it: `ON DELETE CASCADE`).
pub(super) fn delete(tx: &Connection, id: Uuid) -> Result<()> {
    delete_row(tx, "flavors", "flavor", id)
}

fn save_specs(tx: &Connection, flavor: &Flavor) -> Result<()> {
    let text = serde_json::to_string(&flavor.extra_specs)
        .map_err(|e| StoreError::Backend(e.to_string()))?;
    tx.execute(
        "UPDATE flavors SET extra_specs = ?1 WHERE id = ?2",
        params![text, flavor.id.to_string()],
    )?;
    Ok(())
}

pub(super) fn set_specs(tx: &Connection, id: Uuid, specs: ExtraSpecs) -> Result<Flavor> {
    let mut f = flavor(tx, Scope::All, id)?;
    f.extra_specs.extend(specs);
    Flavor::check_extra_specs(&f.extra_specs)?;
    save_specs(tx, &f)?;
    Ok(f)
}

pub(super) fn delete_spec(tx: &Connection, id: Uuid, key: &str) -> Result<Flavor> {
    let mut f = flavor(tx, Scope::All, id)?;
    if f.extra_specs.remove(key).is_none() {
        return Err(StoreError::not_found("extra spec", key));
    }
    save_specs(tx, &f)?;
    Ok(f)
}

/// The access list of flavor `id`, by tenant id.
pub(super) fn access(tx: &Connection, id: Uuid) -> Result<Vec<Uuid>> {
    flavor(tx, Scope::All, id)?;
    let mut stmt =
        tx.prepare("SELECT tenant_id FROM flavor_access WHERE flavor_id = ?1 ORDER BY tenant_id")?;
    let rows = stmt.query_map([id.to_string()], |row| uuid_at(row, 0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn add_access(tx: &Connection, id: Uuid, member: Uuid) -> Result<Vec<Uuid>> {
    let f = flavor(tx, Scope::All, id)?;
    if f.is_public {
        return Err(StoreError::Invalid(format!(
            "flavor {id} is public: it has no access list"
        )));
    }
    tenant(tx, member)?;
    let added = tx.execute(
        "INSERT OR IGNORE INTO flavor_access (flavor_id, tenant_id) VALUES (?1, ?2)",
        params![id.to_string(), member.to_string()],
    )?;
    if added == 0 {
        return Err(StoreError::Conflict(format!(
            "tenant {member} is on the access list of flavor {id} already"
        )));
    }
    access(tx, id)
}

pub(super) fn remove_access(tx: &Connection, id: Uuid, member: Uuid) -> Result<Vec<Uuid>> {
    flavor(tx, Scope::All, id)?;
    let removed = tx.execute(
        "DELETE FROM flavor_access WHERE flavor_id = ?1 AND tenant_id = ?2",
        params![id.to_string(), member.to_string()],
    )?;
    if removed == 0 {
        return Err(StoreError::not_found("flavor access", member));
    }
    access(tx, id)
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use rusqlite::Connection;

    use super::super::schema::MIGRATIONS;
    use crate::*;

    /// A database from before private flavors (the migration that makes `flavor_access`): its
    /// flavors come out public and without extra specs, and then take both; an access entry goes
    /// with its tenant.
    #[test]
    fn a_database_before_private_flavors_keeps_its_flavors_public() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("before.db");
        let before = MIGRATIONS
            .iter()
            .position(|m| m.contains("CREATE TABLE flavor_access"))
            .unwrap();
        let (tenant, flavor): (Uuid, Uuid) = (Uuid::new_v4(), Uuid::new_v4());
        let conn = Connection::open(&path).unwrap();
        for migration in &MIGRATIONS[..before] {
            conn.execute_batch(migration).unwrap();
        }
        conn.execute_batch(&format!(
            "CREATE TABLE schema_version (version INTEGER NOT NULL);
             INSERT INTO schema_version (version) VALUES ({before});
             INSERT INTO tenants (id, name, subnet_prefix, created, version)
                 VALUES ('{tenant}', 't', 24, 0, 1);
             INSERT INTO flavors (id, name, vcpus, memory_mb, disk_gb)
                 VALUES ('{flavor}', 'old', 1, 64, 1);"
        ))
        .unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        let old = store.flavor(Scope::Tenant(tenant), flavor).unwrap();
        assert!(old.is_public && old.extra_specs.is_empty(), "{old:?}");
        let specs: ExtraSpecs = [("k".to_string(), "v".to_string())].into();
        let old = store.set_flavor_extra_specs(flavor, specs.clone()).unwrap();
        assert_eq!(old.extra_specs, specs);
        let private = store
            .create_flavor(NewFlavor {
                name: "new".into(),
                vcpus: 1,
                memory_mb: 64,
                disk_gb: 0,
                is_public: false,
            })
            .unwrap();
        store.add_flavor_access(private.id, tenant).unwrap();
        assert_eq!(store.flavors(Scope::Tenant(tenant)).unwrap().len(), 2);
        store.delete_tenant(tenant).unwrap();
        assert!(store.flavor_access(private.id).unwrap().is_empty());
    }
}
