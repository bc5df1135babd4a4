//! Tenants, users, roles, flavors, images and workloads in SQLite: each function runs inside the
//! caller's transaction.

use rusqlite::{OptionalExtension, Row, Transaction, params};
use uuid::Uuid;

use super::{
    bad_column, check_name, from_millis, int, millis, now, opt_uuid_at, u32_at, u64_at, uuid_at,
};
use crate::net::{MAX_SUBNET_PREFIX, MIN_SUBNET_PREFIX};
use crate::*;

const TENANT_COLS: &str =
    "id, name, quota_instances, quota_vcpus, quota_memory_mb, subnet_prefix, created, version";

fn tenant_row(row: &Row<'_>) -> rusqlite::Result<Tenant> {
    let instances: Option<i64> = row.get(2)?;
    let vcpus: Option<i64> = row.get(3)?;
    let memory: Option<i64> = row.get(4)?;
    let prefix: i64 = row.get(5)?;
    Ok(Tenant {
        id: uuid_at(row, 0)?,
        name: row.get(1)?,
        quota: Quota {
            instances: instances.and_then(|v| u32::try_from(v).ok()),
            vcpus: vcpus.and_then(|v| u32::try_from(v).ok()),
            memory_mb: memory.and_then(|v| u64::try_from(v).ok()),
        },
        subnet_prefix: u8::try_from(prefix).map_err(|e| bad_column(5, e.to_string()))?,
        created: from_millis(row.get(6)?),
        version: u64_at(row, 7)?,
    })
}

fn quota_params(quota: &Quota) -> Result<(Option<i64>, Option<i64>, Option<i64>)> {
    Ok((
        quota.instances.map(i64::from),
        quota.vcpus.map(i64::from),
        quota.memory_mb.map(int).transpose()?,
    ))
}

pub(super) fn create_tenant(tx: &Transaction<'_>, new: NewTenant) -> Result<Tenant> {
    check_name("tenant", &new.name)?;
    if !(MIN_SUBNET_PREFIX..=MAX_SUBNET_PREFIX).contains(&new.subnet_prefix) {
        return Err(StoreError::Invalid(format!(
            "subnet prefix must be {MIN_SUBNET_PREFIX} to {MAX_SUBNET_PREFIX}"
        )));
    }
    let tenant = Tenant {
        id: Uuid::new_v4(),
        name: new.name,
        quota: new.quota,
        subnet_prefix: new.subnet_prefix,
        created: now(),
        version: 1,
    };
    let (qi, qv, qm) = quota_params(&tenant.quota)?;
    tx.execute(
        "INSERT INTO tenants (id, name, quota_instances, quota_vcpus, quota_memory_mb, subnet_prefix, created, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1)",
        params![tenant.id.to_string(), tenant.name, qi, qv, qm, tenant.subnet_prefix, millis(tenant.created)],
    )
    .map_err(|e| duplicate(e, "tenant", &tenant.name))?;
    Ok(tenant)
}

/// A unique-constraint failure as a readable `Conflict`.
fn duplicate(err: rusqlite::Error, kind: &str, name: &str) -> StoreError {
    match StoreError::from(err) {
        StoreError::Conflict(_) => StoreError::Conflict(format!("{kind} {name:?} already exists")),
        other => other,
    }
}

pub(super) fn tenant(tx: &Transaction<'_>, id: Uuid) -> Result<Tenant> {
    tx.query_row(
        &format!("SELECT {TENANT_COLS} FROM tenants WHERE id = ?1"),
        [id.to_string()],
        tenant_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("tenant", id))
}

pub(super) fn tenants(tx: &Transaction<'_>) -> Result<Vec<Tenant>> {
    let mut stmt = tx.prepare(&format!("SELECT {TENANT_COLS} FROM tenants ORDER BY name"))?;
    let rows = stmt.query_map([], tenant_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// `Conflict` unless `found` is `expected`.
pub(super) fn check_version(kind: &str, id: Uuid, found: u64, expected: u64) -> Result<()> {
    if found != expected {
        return Err(StoreError::Conflict(format!(
            "{kind} {id} is at version {found}, not {expected}"
        )));
    }
    Ok(())
}

pub(super) fn update_tenant(
    tx: &Transaction<'_>,
    id: Uuid,
    expected: u64,
    change: TenantChange,
) -> Result<Tenant> {
    let mut t = tenant(tx, id)?;
    check_version("tenant", id, t.version, expected)?;
    if let Some(name) = change.name {
        check_name("tenant", &name)?;
        t.name = name;
    }
    if let Some(quota) = change.quota {
        t.quota = quota;
    }
    t.version += 1;
    let (qi, qv, qm) = quota_params(&t.quota)?;
    tx.execute(
        "UPDATE tenants SET name = ?2, quota_instances = ?3, quota_vcpus = ?4, quota_memory_mb = ?5, version = ?6 WHERE id = ?1",
        params![id.to_string(), t.name, qi, qv, qm, int(t.version)?],
    )
    .map_err(|e| duplicate(e, "tenant", &t.name))?;
    Ok(t)
}

pub(super) fn delete_tenant(tx: &Transaction<'_>, id: Uuid) -> Result<()> {
    tenant(tx, id)?;
    let busy: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM instances WHERE tenant_id = ?1)
             OR EXISTS (SELECT 1 FROM subnets WHERE tenant_id = ?1)
             OR EXISTS (SELECT 1 FROM cncis WHERE tenant_id = ?1)",
        [id.to_string()],
        |r| r.get(0),
    )?;
    if busy {
        return Err(StoreError::Conflict(format!(
            "tenant {id} still has instances, subnets or CNCIs"
        )));
    }
    // Private workloads go before private images (a workload refers to its image).
    tx.execute("DELETE FROM workloads WHERE owner = ?1", [id.to_string()])?;
    tx.execute("DELETE FROM images WHERE owner = ?1", [id.to_string()])?;
    tx.execute("DELETE FROM tenants WHERE id = ?1", [id.to_string()])?;
    Ok(())
}

/// Deletes one row of `table` by id; `NotFound` if absent, `Conflict` if still referred to.
pub(super) fn delete_row(
    tx: &Transaction<'_>,
    table: &str,
    kind: &'static str,
    id: Uuid,
) -> Result<()> {
    let n = tx
        .execute(
            &format!("DELETE FROM {table} WHERE id = ?1"),
            [id.to_string()],
        )
        .map_err(|e| match StoreError::from(e) {
            StoreError::Conflict(_) => StoreError::Conflict(format!("{kind} {id} is in use")),
            other => other,
        })?;
    if n == 0 {
        return Err(StoreError::not_found(kind, id));
    }
    Ok(())
}

const USER_COLS: &str = "id, name, password_hash, created, version";

fn user_row(row: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User {
        id: uuid_at(row, 0)?,
        name: row.get(1)?,
        password_hash: row.get(2)?,
        created: from_millis(row.get(3)?),
        version: u64_at(row, 4)?,
    })
}

pub(super) fn create_user(tx: &Transaction<'_>, new: NewUser) -> Result<User> {
    check_name("user", &new.name)?;
    if new.password_hash.is_empty() {
        return Err(StoreError::Invalid("empty password hash".into()));
    }
    let user = User {
        id: Uuid::new_v4(),
        name: new.name,
        password_hash: new.password_hash,
        created: now(),
        version: 1,
    };
    tx.execute(
        "INSERT INTO users (id, name, password_hash, created, version) VALUES (?1, ?2, ?3, ?4, 1)",
        params![
            user.id.to_string(),
            user.name,
            user.password_hash,
            millis(user.created)
        ],
    )
    .map_err(|e| duplicate(e, "user", &user.name))?;
    Ok(user)
}

/// One user by `column` (`id` or `name`).
pub(super) fn user(tx: &Transaction<'_>, column: &str, value: &str) -> Result<User> {
    tx.query_row(
        &format!("SELECT {USER_COLS} FROM users WHERE {column} = ?1"),
        [value],
        user_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("user", value))
}

pub(super) fn users(tx: &Transaction<'_>) -> Result<Vec<User>> {
    let mut stmt = tx.prepare(&format!("SELECT {USER_COLS} FROM users ORDER BY name"))?;
    let rows = stmt.query_map([], user_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn update_user(
    tx: &Transaction<'_>,
    id: Uuid,
    expected: u64,
    change: UserChange,
) -> Result<User> {
    let mut u = user(tx, "id", &id.to_string())?;
    check_version("user", id, u.version, expected)?;
    if let Some(hash) = change.password_hash {
        if hash.is_empty() {
            return Err(StoreError::Invalid("empty password hash".into()));
        }
        u.password_hash = hash;
    }
    u.version += 1;
    tx.execute(
        "UPDATE users SET password_hash = ?2, version = ?3 WHERE id = ?1",
        params![id.to_string(), u.password_hash, int(u.version)?],
    )?;
    Ok(u)
}

fn role_text(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::Member => "member",
    }
}

pub(super) fn grant_role(
    tx: &Transaction<'_>,
    user_id: Uuid,
    tenant_id: Uuid,
    role: Role,
) -> Result<()> {
    user(tx, "id", &user_id.to_string())?;
    tenant(tx, tenant_id)?;
    tx.execute(
        "INSERT OR IGNORE INTO roles (user_id, tenant_id, role) VALUES (?1, ?2, ?3)",
        params![user_id.to_string(), tenant_id.to_string(), role_text(role)],
    )?;
    Ok(())
}

pub(super) fn revoke_role(
    tx: &Transaction<'_>,
    user_id: Uuid,
    tenant_id: Uuid,
    role: Role,
) -> Result<()> {
    let n = tx.execute(
        "DELETE FROM roles WHERE user_id = ?1 AND tenant_id = ?2 AND role = ?3",
        params![user_id.to_string(), tenant_id.to_string(), role_text(role)],
    )?;
    if n == 0 {
        return Err(StoreError::not_found(
            "role assignment",
            format!("{user_id}/{tenant_id}"),
        ));
    }
    Ok(())
}

/// The role assignments whose `column` (`user_id` or `tenant_id`) is `id`.
pub(super) fn roles(tx: &Transaction<'_>, column: &str, id: Uuid) -> Result<Vec<RoleAssignment>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT user_id, tenant_id, role FROM roles WHERE {column} = ?1 ORDER BY user_id, tenant_id, role"
    ))?;
    let rows = stmt.query_map([id.to_string()], |row| {
        let role: String = row.get(2)?;
        Ok(RoleAssignment {
            user: uuid_at(row, 0)?,
            tenant: uuid_at(row, 1)?,
            role: match role.as_str() {
                "admin" => Role::Admin,
                "member" => Role::Member,
                other => return Err(bad_column(2, format!("unknown role {other:?}"))),
            },
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

const FLAVOR_COLS: &str = "id, name, vcpus, memory_mb, disk_gb";

fn flavor_row(row: &Row<'_>) -> rusqlite::Result<Flavor> {
    Ok(Flavor {
        id: uuid_at(row, 0)?,
        name: row.get(1)?,
        vcpus: u32_at(row, 2)?,
        memory_mb: u64_at(row, 3)?,
        disk_gb: u64_at(row, 4)?,
    })
}

pub(super) fn create_flavor(tx: &Transaction<'_>, new: NewFlavor) -> Result<Flavor> {
    check_name("flavor", &new.name)?;
    if new.vcpus == 0 || new.memory_mb == 0 {
        return Err(StoreError::Invalid(
            "a flavor needs at least 1 vCPU and 1 MiB".into(),
        ));
    }
    let flavor = Flavor {
        id: Uuid::new_v4(),
        name: new.name,
        vcpus: new.vcpus,
        memory_mb: new.memory_mb,
        disk_gb: new.disk_gb,
    };
    tx.execute(
        "INSERT INTO flavors (id, name, vcpus, memory_mb, disk_gb) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            flavor.id.to_string(),
            flavor.name,
            flavor.vcpus,
            int(flavor.memory_mb)?,
            int(flavor.disk_gb)?
        ],
    )
    .map_err(|e| duplicate(e, "flavor", &flavor.name))?;
    Ok(flavor)
}

pub(super) fn flavor(tx: &Transaction<'_>, id: Uuid) -> Result<Flavor> {
    tx.query_row(
        &format!("SELECT {FLAVOR_COLS} FROM flavors WHERE id = ?1"),
        [id.to_string()],
        flavor_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("flavor", id))
}

pub(super) fn flavors(tx: &Transaction<'_>) -> Result<Vec<Flavor>> {
    let mut stmt = tx.prepare(&format!("SELECT {FLAVOR_COLS} FROM flavors ORDER BY name"))?;
    let rows = stmt.query_map([], flavor_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The SQL condition and parameter for "owner visible in `scope`" on column `owner`.
fn visible(scope: Scope) -> (&'static str, Option<String>) {
    match scope {
        Scope::All => ("?1 IS NULL", None),
        Scope::Tenant(t) => ("(owner IS NULL OR owner = ?1)", Some(t.to_string())),
    }
}

const IMAGE_COLS: &str = "id, owner, name, kind, reference, created";

fn image_row(row: &Row<'_>) -> rusqlite::Result<Image> {
    let kind: String = row.get(3)?;
    Ok(Image {
        id: uuid_at(row, 0)?,
        owner: opt_uuid_at(row, 1)?,
        name: row.get(2)?,
        kind: match kind.as_str() {
            "qcow2" => ImageKind::Qcow2,
            "raw" => ImageKind::Raw,
            "iso" => ImageKind::Iso,
            other => return Err(bad_column(3, format!("unknown image kind {other:?}"))),
        },
        reference: row.get(4)?,
        created: from_millis(row.get(5)?),
    })
}

fn kind_text(kind: ImageKind) -> &'static str {
    match kind {
        ImageKind::Qcow2 => "qcow2",
        ImageKind::Raw => "raw",
        ImageKind::Iso => "iso",
    }
}

pub(super) fn create_image(tx: &Transaction<'_>, new: NewImage) -> Result<Image> {
    check_name("image", &new.name)?;
    if new.reference.is_empty() {
        return Err(StoreError::Invalid("empty image reference".into()));
    }
    if let Some(owner) = new.owner {
        tenant(tx, owner)?;
    }
    let image = Image {
        id: Uuid::new_v4(),
        owner: new.owner,
        name: new.name,
        kind: new.kind,
        reference: new.reference,
        created: now(),
    };
    tx.execute(
        "INSERT INTO images (id, owner, name, kind, reference, created) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            image.id.to_string(),
            image.owner.map(|o| o.to_string()),
            image.name,
            kind_text(image.kind),
            image.reference,
            millis(image.created)
        ],
    )?;
    Ok(image)
}

pub(super) fn image(tx: &Transaction<'_>, scope: Scope, id: Uuid) -> Result<Image> {
    let (cond, param) = visible(scope);
    tx.query_row(
        &format!("SELECT {IMAGE_COLS} FROM images WHERE {cond} AND id = ?2"),
        params![param, id.to_string()],
        image_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("image", id))
}

pub(super) fn images(tx: &Transaction<'_>, scope: Scope) -> Result<Vec<Image>> {
    let (cond, param) = visible(scope);
    let mut stmt = tx.prepare(&format!(
        "SELECT {IMAGE_COLS} FROM images WHERE {cond} ORDER BY name, id"
    ))?;
    let rows = stmt.query_map([param], image_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

const WORKLOAD_COLS: &str = "id, owner, name, flavor_id, image_id, user_data, version";

fn workload_row(row: &Row<'_>) -> rusqlite::Result<Workload> {
    Ok(Workload {
        id: uuid_at(row, 0)?,
        owner: opt_uuid_at(row, 1)?,
        name: row.get(2)?,
        flavor: uuid_at(row, 3)?,
        image: uuid_at(row, 4)?,
        user_data: row.get(5)?,
        version: u64_at(row, 6)?,
    })
}

pub(super) fn create_workload(tx: &Transaction<'_>, new: NewWorkload) -> Result<Workload> {
    check_name("workload", &new.name)?;
    let scope = match new.owner {
        Some(owner) => {
            tenant(tx, owner)?;
            Scope::Tenant(owner)
        }
        None => Scope::All,
    };
    flavor(tx, new.flavor)?;
    let img = image(tx, scope, new.image)?;
    if new.owner.is_none() && img.owner.is_some() {
        return Err(StoreError::Invalid(
            "a public workload needs a public image".into(),
        ));
    }
    let workload = Workload {
        id: Uuid::new_v4(),
        owner: new.owner,
        name: new.name,
        flavor: new.flavor,
        image: new.image,
        user_data: new.user_data,
        version: 1,
    };
    tx.execute(
        "INSERT INTO workloads (id, owner, name, flavor_id, image_id, user_data, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1)",
        params![
            workload.id.to_string(),
            workload.owner.map(|o| o.to_string()),
            workload.name,
            workload.flavor.to_string(),
            workload.image.to_string(),
            workload.user_data
        ],
    )?;
    Ok(workload)
}

pub(super) fn workload(tx: &Transaction<'_>, scope: Scope, id: Uuid) -> Result<Workload> {
    let (cond, param) = visible(scope);
    tx.query_row(
        &format!("SELECT {WORKLOAD_COLS} FROM workloads WHERE {cond} AND id = ?2"),
        params![param, id.to_string()],
        workload_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("workload", id))
}

pub(super) fn workloads(tx: &Transaction<'_>, scope: Scope) -> Result<Vec<Workload>> {
    let (cond, param) = visible(scope);
    let mut stmt = tx.prepare(&format!(
        "SELECT {WORKLOAD_COLS} FROM workloads WHERE {cond} ORDER BY name, id"
    ))?;
    let rows = stmt.query_map([param], workload_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn update_workload(
    tx: &Transaction<'_>,
    scope: Scope,
    id: Uuid,
    expected: u64,
    change: WorkloadChange,
) -> Result<Workload> {
    let mut w = workload(tx, scope, id)?;
    if !scope.owns(w.owner) {
        return Err(StoreError::not_found("workload", id));
    }
    check_version("workload", id, w.version, expected)?;
    if let Some(name) = change.name {
        check_name("workload", &name)?;
        w.name = name;
    }
    if let Some(data) = change.user_data {
        w.user_data = data;
    }
    w.version += 1;
    tx.execute(
        "UPDATE workloads SET name = ?2, user_data = ?3, version = ?4 WHERE id = ?1",
        params![id.to_string(), w.name, w.user_data, int(w.version)?],
    )?;
    Ok(w)
}
