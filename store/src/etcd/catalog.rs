//! Tenants, users, roles, flavors, images and workloads over etcd.

use uuid::Uuid;

use super::keys::suffix;
use super::records::*;
use super::{EtcdStore, Kv, Tx};
use crate::common::{check_name, check_version, millis, now};
use crate::net::{MAX_SUBNET_PREFIX, MIN_SUBNET_PREFIX};
use crate::*;

/// Decodes every record of `kvs`.
fn decode_all<T: serde::de::DeserializeOwned>(kvs: &[Kv]) -> Result<Vec<T>> {
    kvs.iter().map(Kv::decode).collect()
}

/// Every record under `prefix`, read without a transaction.
fn all<T: serde::de::DeserializeOwned>(store: &EtcdStore, prefix: &str) -> Result<Vec<T>> {
    store.read(|tx| decode_all(&tx.range(prefix)?))
}

fn duplicate(kind: &str, name: &str) -> StoreError {
    StoreError::Conflict(format!("{kind} {name:?} already exists"))
}

// --- tenants ---

pub(super) fn create_tenant(store: &EtcdStore, new: NewTenant) -> Result<Tenant> {
    check_name("tenant", &new.name)?;
    if !(MIN_SUBNET_PREFIX..=MAX_SUBNET_PREFIX).contains(&new.subnet_prefix) {
        return Err(StoreError::Invalid(format!(
            "subnet prefix must be {MIN_SUBNET_PREFIX} to {MAX_SUBNET_PREFIX}"
        )));
    }
    let rec = TenantRec {
        id: Uuid::new_v4(),
        name: new.name,
        quota: new.quota.into(),
        subnet_prefix: new.subnet_prefix,
        created_ms: millis(now()),
        version: 1,
    };
    store.atomically("creating a tenant", |tx| {
        let keys = tx.keys();
        let name_key = keys.name("tenant", &rec.name);
        if tx.get(&name_key)?.is_some() {
            return Err(duplicate("tenant", &rec.name));
        }
        tx.put_text(&name_key, &rec.id.to_string());
        tx.put(&keys.tenant(rec.id), &rec)?;
        tx.put(&keys.net(rec.id), &NetRec::default())?;
        Ok(())
    })?;
    Ok(rec.model())
}

/// The tenant record, read in `tx`.
pub(super) fn tenant_in(tx: &mut Tx<'_>, id: Uuid) -> Result<TenantRec> {
    let key = tx.keys().tenant(id);
    tx.get_json(&key)?
        .ok_or_else(|| StoreError::not_found("tenant", id))
}

pub(super) fn tenant(store: &EtcdStore, id: Uuid) -> Result<Tenant> {
    store.read(|tx| tenant_in(tx, id)).map(|t| t.model())
}

pub(super) fn tenants(store: &EtcdStore) -> Result<Vec<Tenant>> {
    let mut all: Vec<Tenant> = all::<TenantRec>(store, &store.keys.tenants())?
        .iter()
        .map(TenantRec::model)
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

pub(super) fn update_tenant(
    store: &EtcdStore,
    id: Uuid,
    expected: u64,
    change: TenantChange,
) -> Result<Tenant> {
    store.atomically("updating a tenant", |tx| {
        let mut t = tenant_in(tx, id)?;
        check_version("tenant", id, t.version, expected)?;
        let keys = tx.keys();
        if let Some(name) = &change.name {
            check_name("tenant", name)?;
            if *name != t.name {
                let new_key = keys.name("tenant", name);
                if tx.get(&new_key)?.is_some() {
                    return Err(duplicate("tenant", name));
                }
                tx.delete(&keys.name("tenant", &t.name));
                tx.put_text(&new_key, &id.to_string());
                t.name = name.clone();
            }
        }
        if let Some(quota) = change.quota {
            t.quota = quota.into();
        }
        t.version += 1;
        tx.put(&keys.tenant(id), &t)?;
        Ok(t.model())
    })
}

pub(super) fn delete_tenant(store: &EtcdStore, id: Uuid) -> Result<()> {
    store.atomically("deleting a tenant", |tx| {
        let t = tenant_in(tx, id)?;
        let keys = tx.keys();
        let net: NetRec = tx.get_json(&keys.net(id))?.unwrap_or_default();
        if net.usage.instances > 0 || !net.subnets.is_empty() {
            return Err(StoreError::Conflict(format!(
                "tenant {id} still has instances, subnets or CNCIs"
            )));
        }
        // Private workloads and images go with the tenant (no other tenant can use them).
        for w in decode_all::<WorkloadRec>(&tx.range(&keys.workloads())?)? {
            if w.owner == Some(id) {
                tx.delete(&keys.workload(w.id));
                tx.delete(&keys.reference("flavor", w.flavor, w.id));
                tx.delete(&keys.reference("image", w.image, w.id));
                tx.delete_prefix(&keys.references("workload", w.id));
            }
        }
        for i in decode_all::<ImageRec>(&tx.range(&keys.images())?)? {
            if i.owner == Some(id) {
                tx.delete(&keys.image(i.id));
            }
        }
        let by_tenant = keys.roles_in_tenant(id);
        for kv in tx.range(&by_tenant)? {
            let (user, role) = parse_role_key(&kv.key, &by_tenant)?;
            tx.delete(&keys.role_by_user(user, id, role_text(role)));
        }
        tx.delete_prefix(&by_tenant);
        tx.delete(&keys.name("tenant", &t.name));
        tx.delete(&keys.net(id));
        tx.delete(&keys.tenant(id));
        Ok(())
    })
}

// --- users and roles ---

pub(super) fn create_user(store: &EtcdStore, new: NewUser) -> Result<User> {
    check_name("user", &new.name)?;
    if new.password_hash.is_empty() {
        return Err(StoreError::Invalid("empty password hash".into()));
    }
    let rec = UserRec {
        id: Uuid::new_v4(),
        name: new.name,
        password_hash: new.password_hash,
        created_ms: millis(now()),
        version: 1,
    };
    store.atomically("creating a user", |tx| {
        let keys = tx.keys();
        let name_key = keys.name("user", &rec.name);
        if tx.get(&name_key)?.is_some() {
            return Err(duplicate("user", &rec.name));
        }
        tx.put_text(&name_key, &rec.id.to_string());
        tx.put(&keys.user(rec.id), &rec)
    })?;
    Ok(rec.model())
}

fn user_in(tx: &mut Tx<'_>, id: Uuid) -> Result<UserRec> {
    let key = tx.keys().user(id);
    tx.get_json(&key)?
        .ok_or_else(|| StoreError::not_found("user", id))
}

pub(super) fn user(store: &EtcdStore, id: Uuid) -> Result<User> {
    store.read(|tx| user_in(tx, id)).map(|u| u.model())
}

pub(super) fn user_by_name(store: &EtcdStore, name: &str) -> Result<User> {
    store
        .read(|tx| {
            let key = tx.keys().name("user", name);
            let id = match tx.get(&key)? {
                Some(kv) => Uuid::parse_str(kv.text()?)
                    .map_err(|e| StoreError::Backend(format!("bad user id at {key}: {e}")))?,
                None => return Err(StoreError::not_found("user", name)),
            };
            // A user deleted between the two reads is not found either.
            user_in(tx, id).map_err(|_| StoreError::not_found("user", name))
        })
        .map(|u| u.model())
}

pub(super) fn users(store: &EtcdStore) -> Result<Vec<User>> {
    let mut all: Vec<User> = all::<UserRec>(store, &store.keys.users())?
        .iter()
        .map(UserRec::model)
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

pub(super) fn update_user(
    store: &EtcdStore,
    id: Uuid,
    expected: u64,
    change: UserChange,
) -> Result<User> {
    store.atomically("updating a user", |tx| {
        let mut u = user_in(tx, id)?;
        check_version("user", id, u.version, expected)?;
        if let Some(hash) = &change.password_hash {
            if hash.is_empty() {
                return Err(StoreError::Invalid("empty password hash".into()));
            }
            u.password_hash = hash.clone();
        }
        u.version += 1;
        let key = tx.keys().user(id);
        tx.put(&key, &u)?;
        Ok(u.model())
    })
}

pub(super) fn delete_user(store: &EtcdStore, id: Uuid) -> Result<()> {
    store.atomically("deleting a user", |tx| {
        let u = user_in(tx, id)?;
        let keys = tx.keys();
        let by_user = keys.roles_of_user(id);
        for kv in tx.range(&by_user)? {
            let (tenant, role) = parse_role_key(&kv.key, &by_user)?;
            tx.delete(&keys.role_by_tenant(tenant, id, role_text(role)));
        }
        tx.delete_prefix(&by_user);
        tx.delete(&keys.name("user", &u.name));
        tx.delete(&keys.user(id));
        Ok(())
    })
}

/// The other identifier and the role of a role key under `prefix` (`.../<id>/<role>`).
fn parse_role_key(key: &str, prefix: &str) -> Result<(Uuid, Role)> {
    let bad = || StoreError::Backend(format!("bad role key {key}"));
    let rest = suffix(key, prefix).ok_or_else(bad)?;
    let (id, role) = rest.split_once('/').ok_or_else(bad)?;
    Ok((
        Uuid::parse_str(id).map_err(|_| bad())?,
        role_from(role).ok_or_else(bad)?,
    ))
}

pub(super) fn grant_role(store: &EtcdStore, user: Uuid, tenant: Uuid, role: Role) -> Result<()> {
    store.atomically("granting a role", |tx| {
        user_in(tx, user)?;
        tenant_in(tx, tenant)?;
        let keys = tx.keys();
        tx.put_text(&keys.role_by_user(user, tenant, role_text(role)), "");
        tx.put_text(&keys.role_by_tenant(tenant, user, role_text(role)), "");
        Ok(())
    })
}

pub(super) fn revoke_role(store: &EtcdStore, user: Uuid, tenant: Uuid, role: Role) -> Result<()> {
    store.atomically("revoking a role", |tx| {
        let keys = tx.keys();
        let by_user = keys.role_by_user(user, tenant, role_text(role));
        if tx.get(&by_user)?.is_none() {
            return Err(StoreError::not_found(
                "role assignment",
                format!("{user}/{tenant}"),
            ));
        }
        tx.delete(&by_user);
        tx.delete(&keys.role_by_tenant(tenant, user, role_text(role)));
        Ok(())
    })
}

pub(super) fn roles_of_user(store: &EtcdStore, user: Uuid) -> Result<Vec<RoleAssignment>> {
    let prefix = store.keys.roles_of_user(user);
    let mut out = store.read(|tx| {
        tx.range(&prefix)?
            .iter()
            .map(|kv| {
                let (tenant, role) = parse_role_key(&kv.key, &prefix)?;
                Ok(RoleAssignment { user, tenant, role })
            })
            .collect::<Result<Vec<_>>>()
    })?;
    out.sort();
    Ok(out)
}

pub(super) fn roles_in_tenant(store: &EtcdStore, tenant: Uuid) -> Result<Vec<RoleAssignment>> {
    let prefix = store.keys.roles_in_tenant(tenant);
    let mut out = store.read(|tx| {
        tx.range(&prefix)?
            .iter()
            .map(|kv| {
                let (user, role) = parse_role_key(&kv.key, &prefix)?;
                Ok(RoleAssignment { user, tenant, role })
            })
            .collect::<Result<Vec<_>>>()
    })?;
    out.sort();
    Ok(out)
}

// --- flavors ---

pub(super) fn create_flavor(store: &EtcdStore, new: NewFlavor) -> Result<Flavor> {
    check_name("flavor", &new.name)?;
    if new.vcpus == 0 || new.memory_mb == 0 {
        return Err(StoreError::Invalid(
            "a flavor needs at least 1 vCPU and 1 MiB".into(),
        ));
    }
    let rec = FlavorRec {
        id: Uuid::new_v4(),
        name: new.name,
        vcpus: new.vcpus,
        memory_mb: new.memory_mb,
        disk_gb: new.disk_gb,
    };
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

fn flavor_in(tx: &mut Tx<'_>, id: Uuid) -> Result<FlavorRec> {
    let key = tx.keys().flavor(id);
    tx.get_json(&key)?
        .ok_or_else(|| StoreError::not_found("flavor", id))
}

pub(super) fn flavor(store: &EtcdStore, id: Uuid) -> Result<Flavor> {
    store.read(|tx| flavor_in(tx, id)).map(|f| f.model())
}

pub(super) fn flavors(store: &EtcdStore) -> Result<Vec<Flavor>> {
    let mut all: Vec<Flavor> = all::<FlavorRec>(store, &store.keys.flavors())?
        .iter()
        .map(FlavorRec::model)
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

pub(super) fn delete_flavor(store: &EtcdStore, id: Uuid) -> Result<()> {
    store.atomically("deleting a flavor", |tx| {
        let f = flavor_in(tx, id)?;
        let keys = tx.keys();
        if tx.any_under(&keys.references("flavor", id))? {
            return Err(StoreError::Conflict(format!("flavor {id} is in use")));
        }
        tx.delete(&keys.name("flavor", &f.name));
        tx.delete(&keys.flavor(id));
        Ok(())
    })
}

// --- images ---

pub(super) fn create_image(store: &EtcdStore, new: NewImage) -> Result<Image> {
    check_name("image", &new.name)?;
    if new.reference.is_empty() {
        return Err(StoreError::Invalid("empty image reference".into()));
    }
    let rec = ImageRec::new(Uuid::new_v4(), new, now());
    store.atomically("creating an image", |tx| {
        if let Some(owner) = rec.owner {
            tenant_in(tx, owner)?;
        }
        let key = tx.keys().image(rec.id);
        tx.put(&key, &rec)
    })?;
    Ok(rec.model())
}

/// The image `id` if `scope` sees it.
fn image_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<ImageRec> {
    let key = tx.keys().image(id);
    tx.get_json::<ImageRec>(&key)?
        .filter(|i| scope.sees(i.owner))
        .ok_or_else(|| StoreError::not_found("image", id))
}

pub(super) fn image(store: &EtcdStore, scope: Scope, id: Uuid) -> Result<Image> {
    store.read(|tx| image_in(tx, scope, id)).map(|i| i.model())
}

pub(super) fn images(store: &EtcdStore, scope: Scope) -> Result<Vec<Image>> {
    let mut all: Vec<Image> = all::<ImageRec>(store, &store.keys.images())?
        .iter()
        .filter(|i| scope.sees(i.owner))
        .map(ImageRec::model)
        .collect();
    all.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
    Ok(all)
}

pub(super) fn delete_image(store: &EtcdStore, scope: Scope, id: Uuid) -> Result<()> {
    store.atomically("deleting an image", |tx| {
        let image = image_in(tx, scope, id)?;
        if !scope.owns(image.owner) {
            return Err(StoreError::not_found("image", id));
        }
        let keys = tx.keys();
        if tx.any_under(&keys.references("image", id))? {
            return Err(StoreError::Conflict(format!("image {id} is in use")));
        }
        tx.delete(&keys.image(id));
        Ok(())
    })
}

// --- workloads ---

pub(super) fn create_workload(store: &EtcdStore, new: NewWorkload) -> Result<Workload> {
    check_name("workload", &new.name)?;
    let id = Uuid::new_v4();
    store.atomically("creating a workload", |tx| {
        let scope = match new.owner {
            Some(owner) => {
                tenant_in(tx, owner)?;
                Scope::Tenant(owner)
            }
            None => Scope::All,
        };
        let flavor = flavor_in(tx, new.flavor)?;
        let image = image_in(tx, scope, new.image)?;
        if new.owner.is_none() && image.owner.is_some() {
            return Err(StoreError::Invalid(
                "a public workload needs a public image".into(),
            ));
        }
        let rec = WorkloadRec {
            id,
            owner: new.owner,
            name: new.name.clone(),
            flavor: flavor.id,
            image: image.id,
            user_data: new.user_data.clone(),
            version: 1,
            vcpus: flavor.vcpus,
            memory_mb: flavor.memory_mb,
        };
        let keys = tx.keys();
        tx.put(&keys.workload(id), &rec)?;
        tx.put_text(&keys.reference("flavor", flavor.id, id), "");
        tx.put_text(&keys.reference("image", image.id, id), "");
        Ok(rec.model())
    })
}

/// The workload `id` if `scope` sees it.
pub(super) fn workload_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<WorkloadRec> {
    let key = tx.keys().workload(id);
    tx.get_json::<WorkloadRec>(&key)?
        .filter(|w| scope.sees(w.owner))
        .ok_or_else(|| StoreError::not_found("workload", id))
}

pub(super) fn workload(store: &EtcdStore, scope: Scope, id: Uuid) -> Result<Workload> {
    store
        .read(|tx| workload_in(tx, scope, id))
        .map(|w| w.model())
}

pub(super) fn workloads(store: &EtcdStore, scope: Scope) -> Result<Vec<Workload>> {
    let mut all: Vec<Workload> = all::<WorkloadRec>(store, &store.keys.workloads())?
        .iter()
        .filter(|w| scope.sees(w.owner))
        .map(WorkloadRec::model)
        .collect();
    all.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
    Ok(all)
}

pub(super) fn update_workload(
    store: &EtcdStore,
    scope: Scope,
    id: Uuid,
    expected: u64,
    change: WorkloadChange,
) -> Result<Workload> {
    store.atomically("updating a workload", |tx| {
        let mut w = workload_in(tx, scope, id)?;
        if !scope.owns(w.owner) {
            return Err(StoreError::not_found("workload", id));
        }
        check_version("workload", id, w.version, expected)?;
        if let Some(name) = &change.name {
            check_name("workload", name)?;
            w.name = name.clone();
        }
        if let Some(data) = &change.user_data {
            w.user_data = data.clone();
        }
        w.version += 1;
        let key = tx.keys().workload(id);
        tx.put(&key, &w)?;
        Ok(w.model())
    })
}

pub(super) fn delete_workload(store: &EtcdStore, scope: Scope, id: Uuid) -> Result<()> {
    store.atomically("deleting a workload", |tx| {
        let w = workload_in(tx, scope, id)?;
        if !scope.owns(w.owner) {
            return Err(StoreError::not_found("workload", id));
        }
        let keys = tx.keys();
        if tx.any_under(&keys.references("workload", id))? {
            return Err(StoreError::Conflict(format!("workload {id} is in use")));
        }
        tx.delete(&keys.workload(id));
        tx.delete(&keys.reference("flavor", w.flavor, id));
        tx.delete(&keys.reference("image", w.image, id));
        Ok(())
    })
}
