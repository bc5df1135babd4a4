//! Flavors over etcd: the reads and writes of [`CatalogStore`](crate::CatalogStore)'s flavor
//! calls for [`EtcdStore`]. A flavor is one record at `flavor/<id>` (its extra specs inside it),
//! its name in the unique-name index; the access list of a private flavor is one record per
//! tenant at `faccess/<flavor>/<tenant>`, so that a flavor's list is one range (deleted with the
//! flavor in one operation) and whether a tenant sees a private flavor is one read. A tenant's
//! entries are found, when it goes, by reading every entry (there is no index by tenant, which
//! would cost a second write per entry).

use std::collections::HashSet;

use uuid::Uuid;

use super::records::{FlavorAccessRec, FlavorRec};
use super::{EtcdStore, Tx, decode_all, duplicate};
use crate::*;

/// Flavor `id` if `scope` sees it: a tenant sees a private flavor when it is on its access list
/// (that entry is read, and compared at commit).
pub(super) fn flavor_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<FlavorRec> {
    let key = tx.keys().flavor(id);
    let rec = tx
        .get_json::<FlavorRec>(&key)?
        .ok_or_else(|| StoreError::not_found("flavor", id))?;
    let seen = match scope {
        Scope::Tenant(t) if !rec.is_public => {
            let entry = tx.keys().flavor_access(id, t);
            tx.get(&entry)?.is_some()
        }
        _ => true,
    };
    if !seen {
        return Err(StoreError::not_found("flavor", id));
    }
    Ok(rec)
}

pub(super) fn create(store: &EtcdStore, new: NewFlavor) -> Result<Flavor> {
    new.check()?;
    let rec = FlavorRec::from(new.into_flavor(Uuid::new_v4()));
    store.atomically("creating a flavor", |tx| {
        let keys = tx.keys();
        let name_key = keys.name("flavor", &rec.name);
        if tx.get(&name_key)?.is_some() {
            return Err(duplicate("flavor", &rec.name));
        }
        tx.put_text(&name_key, &rec.id.to_string());
        tx.put(&keys.flavor(rec.id), &rec)
    })?;
    Ok(rec.model())
}

pub(super) fn flavors(store: &EtcdStore, scope: Scope) -> Result<Vec<Flavor>> {
    store.read(|tx| {
        let keys = tx.keys();
        let recs = decode_all::<FlavorRec>(&tx.range(&keys.flavors())?)?;
        let granted: HashSet<Uuid> = match scope {
            Scope::All => HashSet::new(),
            Scope::Tenant(t) => {
                decode_all::<FlavorAccessRec>(&tx.range(&keys.all_flavor_access())?)?
                    .into_iter()
                    .filter(|a| a.tenant == t)
                    .map(|a| a.flavor)
                    .collect()
            }
        };
        let mut seen: Vec<Flavor> = recs
            .iter()
            .map(FlavorRec::model)
            .filter(|f| f.seen_in(scope, granted.contains(&f.id)))
            .collect();
        seen.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
        Ok(seen)
    })
}

pub(super) fn delete(store: &EtcdStore, id: Uuid) -> Result<()> {
    store.atomically("deleting a flavor", |tx| {
        let f = flavor_in(tx, Scope::All, id)?;
        let keys = tx.keys();
        if tx.any_under(&keys.references("flavor", id))? {
            return Err(StoreError::Conflict(format!("flavor {id} is in use")));
        }
        tx.delete(&keys.name("flavor", &f.name));
        tx.delete(&keys.flavor(id));
        tx.delete_prefix(&keys.flavor_access_list(id));
        Ok(())
    })
}

/// Changes the extra specs of flavor `id` with `edit`, and keeps them if they fit.
fn change_specs(
    store: &EtcdStore,
    id: Uuid,
    edit: impl Fn(&mut ExtraSpecs) -> Result<()>,
) -> Result<Flavor> {
    store.atomically("changing a flavor's extra specs", |tx| {
        let mut rec = flavor_in(tx, Scope::All, id)?;
        edit(&mut rec.extra_specs)?;
        Flavor::check_extra_specs(&rec.extra_specs)?;
        let key = tx.keys().flavor(id);
        tx.put(&key, &rec)?;
        Ok(rec.model())
    })
}

pub(super) fn set_specs(store: &EtcdStore, id: Uuid, specs: ExtraSpecs) -> Result<Flavor> {
    change_specs(store, id, |current| {
        current.extend(specs.clone());
        Ok(())
    })
}

pub(super) fn delete_spec(store: &EtcdStore, id: Uuid, key: &str) -> Result<Flavor> {
    change_specs(store, id, |current| match current.remove(key) {
        Some(_) => Ok(()),
        None => Err(StoreError::not_found("extra spec", key)),
    })
}

/// The access list of flavor `id` (which the caller has read), by tenant id.
fn access_in(tx: &mut Tx<'_>, id: Uuid) -> Result<Vec<Uuid>> {
    let list = tx.keys().flavor_access_list(id);
    let mut tenants: Vec<Uuid> = decode_all::<FlavorAccessRec>(&tx.range(&list)?)?
        .into_iter()
        .map(|a| a.tenant)
        .collect();
    tenants.sort();
    Ok(tenants)
}

pub(super) fn access(store: &EtcdStore, id: Uuid) -> Result<Vec<Uuid>> {
    store.read(|tx| {
        flavor_in(tx, Scope::All, id)?;
        access_in(tx, id)
    })
}

pub(super) fn add_access(store: &EtcdStore, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>> {
    store.atomically("adding flavor access", |tx| {
        if flavor_in(tx, Scope::All, id)?.is_public {
            return Err(StoreError::Invalid(format!(
                "flavor {id} is public: it has no access list"
            )));
        }
        // The tenant's record is read (and compared at commit) here rather than through
        // `identity.rs`, which calls this module when a tenant goes.
        let tenant_key = tx.keys().tenant(tenant);
        if tx.get(&tenant_key)?.is_none() {
            return Err(StoreError::not_found("tenant", tenant));
        }
        let key = tx.keys().flavor_access(id, tenant);
        if tx.get(&key)?.is_some() {
            return Err(StoreError::Conflict(format!(
                "tenant {tenant} is on the access list of flavor {id} already"
            )));
        }
        tx.put(&key, &FlavorAccessRec { flavor: id, tenant })?;
        let mut tenants = access_in(tx, id)?;
        tenants.push(tenant);
        tenants.sort();
        Ok(tenants)
    })
}

pub(super) fn remove_access(store: &EtcdStore, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>> {
    store.atomically("removing flavor access", |tx| {
        flavor_in(tx, Scope::All, id)?;
        let key = tx.keys().flavor_access(id, tenant);
        if tx.get(&key)?.is_none() {
            return Err(StoreError::not_found("flavor access", tenant));
        }
        tx.delete(&key);
        let mut tenants = access_in(tx, id)?;
        tenants.retain(|t| *t != tenant);
        Ok(tenants)
    })
}

/// Deletes tenant `id`'s entries on the access lists of flavors (the tenant is going).
pub(super) fn forget_tenant(tx: &mut Tx<'_>, id: Uuid) -> Result<()> {
    let keys = tx.keys();
    for entry in decode_all::<FlavorAccessRec>(&tx.range(&keys.all_flavor_access())?)? {
        if entry.tenant == id {
            tx.delete(&keys.flavor_access(entry.flavor, id));
        }
    }
    Ok(())
}
