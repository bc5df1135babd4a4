//! Tenants (and their usage), users and role assignments in SQLite: [`IdentityStore`] for
//! [`SqliteStore`], over the functions below, each of which runs inside the caller's transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::{
    Cached, SqliteStore, app_creds, bad_column, delete_row, duplicate, instances, int, u64_at,
    uuid_at,
};
use std::time::SystemTime;

use crate::access::check_description;
use crate::common::{check_name, check_token_id, check_version, from_millis, millis, now};
use crate::net::{MAX_SUBNET_PREFIX, MIN_SUBNET_PREFIX};
use crate::*;

impl IdentityStore for SqliteStore {
    fn create_described_tenant(&self, new: NewTenant, description: String) -> Result<Tenant> {
        self.write(|tx| create_tenant(tx, new, description))
    }
    fn tenant(&self, id: Uuid) -> Result<Tenant> {
        self.read(|tx| tenant(tx, id))
    }
    fn tenants(&self) -> Result<Vec<Tenant>> {
        self.read(tenants)
    }
    fn update_tenant(&self, id: Uuid, expected: u64, change: TenantChange) -> Result<Tenant> {
        self.write(|tx| update_tenant(tx, id, expected, change))
    }
    fn delete_tenant(&self, id: Uuid) -> Result<()> {
        self.write(|tx| delete_tenant(tx, id))
    }
    fn usage(&self, id: Uuid) -> Result<Usage> {
        self.read(|tx| {
            tenant(tx, id)?;
            instances::usage(tx, id)
        })
    }

    fn create_user_with(&self, new: NewUser, profile: UserProfile) -> Result<User> {
        self.write(|tx| create_user(tx, new, profile))
    }
    fn user(&self, id: Uuid) -> Result<User> {
        self.read(|tx| user(tx, "id", &id.to_string()))
    }
    fn user_by_name(&self, name: &str) -> Result<User> {
        self.read(|tx| user(tx, "name", name))
    }
    fn users(&self) -> Result<Vec<User>> {
        self.read(users)
    }
    fn update_user(&self, id: Uuid, expected: u64, change: UserChange) -> Result<User> {
        self.write(|tx| update_user(tx, id, expected, change))
    }
    fn delete_user(&self, id: Uuid) -> Result<()> {
        self.write(|tx| delete_row(tx, "users", "user", id))
    }
    fn grant_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()> {
        self.write(|tx| grant_role(tx, user, tenant, role))
    }
    fn revoke_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()> {
        self.write(|tx| revoke_role(tx, user, tenant, role))
    }
    fn roles_of_user(&self, user: Uuid) -> Result<Vec<RoleAssignment>> {
        self.read(|tx| roles(tx, "user_id", user))
    }
    fn roles_in_tenant(&self, tenant: Uuid) -> Result<Vec<RoleAssignment>> {
        self.read(|tx| roles(tx, "tenant_id", tenant))
    }

    fn create_app_credential(&self, new: NewAppCredential, limit: u32) -> Result<AppCredential> {
        self.write(|tx| app_creds::create(tx, new, limit))
    }
    fn app_credential(&self, id: Uuid) -> Result<AppCredential> {
        self.read(|tx| app_creds::get(tx, id))
    }
    fn app_credentials(&self, user: Uuid) -> Result<Vec<AppCredential>> {
        self.read(|tx| app_creds::list(tx, user))
    }
    fn delete_app_credential(&self, user: Uuid, id: Uuid) -> Result<()> {
        self.write(|tx| app_creds::delete(tx, user, id))
    }

    fn revoke_token(&self, token: &TokenRef) -> Result<()> {
        check_token_id(&token.id)?;
        self.write(|tx| {
            let now = now();
            prune_tokens(tx, now)?;
            if token.expires > now {
                tx.execute(
                    "INSERT OR REPLACE INTO revoked_tokens (id, expires) VALUES (?1, ?2)",
                    params![token.id, millis(token.expires)],
                )?;
            }
            Ok(())
        })
    }
    fn token_state(&self, user_id: Uuid, token: &TokenRef) -> Result<TokenState> {
        check_token_id(&token.id)?;
        self.read(|tx| {
            let generation = user(tx, "id", &user_id.to_string())?.token_generation;
            let revoked: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM revoked_tokens WHERE id = ?1)",
                [&token.id],
                |r| r.get(0),
            )?;
            Ok(TokenState {
                generation,
                revoked,
            })
        })
    }
    fn prune_revoked_tokens(&self, now: SystemTime) -> Result<u64> {
        self.write(|tx| prune_tokens(tx, now))
    }
}

/// Deletes the revocation entries of tokens expired before `now`; returns how many.
fn prune_tokens(tx: &Connection, now: SystemTime) -> Result<u64> {
    let n = tx.execute(
        "DELETE FROM revoked_tokens WHERE expires < ?1",
        [millis(now)],
    )?;
    Ok(u64::try_from(n).unwrap_or(u64::MAX))
}

/// Raises the token generation of `user_id` (its tokens end).
fn end_tokens(tx: &Connection, user_id: Uuid) -> Result<()> {
    tx.execute(
        "UPDATE users SET token_generation = token_generation + 1 WHERE id = ?1",
        [user_id.to_string()],
    )?;
    Ok(())
}

const TENANT_COLS: &str = "id, name, quota_instances, quota_vcpus, quota_memory_mb, \
     subnet_prefix, created, version, description";

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
        description: row.get(8)?,
    })
}

fn quota_params(quota: &Quota) -> Result<(Option<i64>, Option<i64>, Option<i64>)> {
    Ok((
        quota.instances.map(i64::from),
        quota.vcpus.map(i64::from),
        quota.memory_mb.map(int).transpose()?,
    ))
}

pub(super) fn create_tenant(
    tx: &Connection,
    new: NewTenant,
    description: String,
) -> Result<Tenant> {
    check_name("tenant", &new.name)?;
    check_description("project", &description)?;
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
        description,
        created: now(),
        version: 1,
    };
    let (qi, qv, qm) = quota_params(&tenant.quota)?;
    tx.execute(
        "INSERT INTO tenants (id, name, quota_instances, quota_vcpus, quota_memory_mb, subnet_prefix, created, version, description)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8)",
        params![tenant.id.to_string(), tenant.name, qi, qv, qm, tenant.subnet_prefix, millis(tenant.created), tenant.description],
    )
    .map_err(|e| duplicate(e, "tenant", &tenant.name))?;
    Ok(tenant)
}

pub(super) fn tenant(tx: &Connection, id: Uuid) -> Result<Tenant> {
    tx.query_row_cached(
        &format!("SELECT {TENANT_COLS} FROM tenants WHERE id = ?1"),
        [id.to_string()],
        tenant_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("tenant", id))
}

pub(super) fn tenants(tx: &Connection) -> Result<Vec<Tenant>> {
    let mut stmt = tx.prepare(&format!("SELECT {TENANT_COLS} FROM tenants ORDER BY name"))?;
    let rows = stmt.query_map([], tenant_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn update_tenant(
    tx: &Connection,
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
    if let Some(description) = change.description {
        check_description("project", &description)?;
        t.description = description;
    }
    t.version += 1;
    let (qi, qv, qm) = quota_params(&t.quota)?;
    tx.execute(
        "UPDATE tenants SET name = ?2, quota_instances = ?3, quota_vcpus = ?4, quota_memory_mb = ?5, version = ?6, description = ?7 WHERE id = ?1",
        params![id.to_string(), t.name, qi, qv, qm, int(t.version)?, t.description],
    )
    .map_err(|e| duplicate(e, "tenant", &t.name))?;
    Ok(t)
}

pub(super) fn delete_tenant(tx: &Connection, id: Uuid) -> Result<()> {
    tenant(tx, id)?;
    let (busy, volumes): (bool, bool) = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM instances WHERE tenant_id = ?1)
             OR EXISTS (SELECT 1 FROM subnets WHERE tenant_id = ?1)
             OR EXISTS (SELECT 1 FROM cncis WHERE tenant_id = ?1),
             EXISTS (SELECT 1 FROM volumes WHERE owner = ?1)",
        [id.to_string()],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if busy {
        return Err(StoreError::Conflict(format!(
            "tenant {id} still has instances, subnets or CNCIs"
        )));
    }
    if volumes {
        return Err(StoreError::Conflict(format!(
            "tenant {id} still has volumes"
        )));
    }
    // Its images go with it: other tenants' workloads of them (shared or community images) go
    // too, unless an instance uses one. Its memberships of other tenants' images go by cascade.
    let used_by_others: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM instances i JOIN workloads w ON w.id = i.workload_id
             JOIN images m ON m.id = w.image_id
             WHERE m.owner = ?1 AND w.owner IS NOT ?1)",
        [id.to_string()],
        |r| r.get(0),
    )?;
    if used_by_others {
        return Err(StoreError::Conflict(format!(
            "tenant {id} has images that other tenants' instances use"
        )));
    }
    tx.execute(
        "DELETE FROM workloads WHERE owner IS NOT ?1
             AND image_id IN (SELECT id FROM images WHERE owner = ?1)",
        [id.to_string()],
    )?;
    // Private workloads go before private images (a workload refers to its image).
    tx.execute("DELETE FROM workloads WHERE owner = ?1", [id.to_string()])?;
    tx.execute("DELETE FROM images WHERE owner = ?1", [id.to_string()])?;
    tx.execute("DELETE FROM tenants WHERE id = ?1", [id.to_string()])?;
    Ok(())
}

const USER_COLS: &str =
    "id, name, password_hash, created, version, token_generation, enabled, default_project_id";

fn user_row(row: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User {
        id: uuid_at(row, 0)?,
        name: row.get(1)?,
        password_hash: row.get(2)?,
        created: from_millis(row.get(3)?),
        version: u64_at(row, 4)?,
        token_generation: u64_at(row, 5)?,
        enabled: row.get(6)?,
        default_project: row
            .get::<_, Option<String>>(7)?
            .map(|text| Uuid::parse_str(&text).map_err(|e| bad_column(7, e.to_string())))
            .transpose()?,
    })
}

pub(super) fn create_user(tx: &Connection, new: NewUser, profile: UserProfile) -> Result<User> {
    check_name("user", &new.name)?;
    if new.password_hash.is_empty() {
        return Err(StoreError::Invalid("empty password hash".into()));
    }
    if let Some(project) = profile.default_project {
        tenant(tx, project)?;
    }
    let user = User {
        id: Uuid::new_v4(),
        name: new.name,
        password_hash: new.password_hash,
        created: now(),
        version: 1,
        token_generation: 0,
        enabled: profile.enabled,
        default_project: profile.default_project,
    };
    tx.execute(
        "INSERT INTO users (id, name, password_hash, created, version, enabled, default_project_id)
         VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6)",
        params![
            user.id.to_string(),
            user.name,
            user.password_hash,
            millis(user.created),
            user.enabled,
            user.default_project.map(|p| p.to_string()),
        ],
    )
    .map_err(|e| duplicate(e, "user", &user.name))?;
    Ok(user)
}

/// One user by `column` (`id` or `name`).
pub(super) fn user(tx: &Connection, column: &str, value: &str) -> Result<User> {
    tx.query_row(
        &format!("SELECT {USER_COLS} FROM users WHERE {column} = ?1"),
        [value],
        user_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("user", value))
}

pub(super) fn users(tx: &Connection) -> Result<Vec<User>> {
    let mut stmt = tx.prepare(&format!("SELECT {USER_COLS} FROM users ORDER BY name"))?;
    let rows = stmt.query_map([], user_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn update_user(
    tx: &Connection,
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
        u.token_generation += 1;
    }
    if let Some(name) = change.name {
        check_name("user", &name)?;
        u.name = name;
    }
    if let Some(enabled) = change.enabled {
        if u.enabled && !enabled {
            u.token_generation += 1;
        }
        u.enabled = enabled;
    }
    if let Some(project) = change.default_project {
        if let Some(project) = project {
            tenant(tx, project)?;
        }
        u.default_project = project;
    }
    u.version += 1;
    tx.execute(
        "UPDATE users SET password_hash = ?2, version = ?3, token_generation = ?4, name = ?5,
             enabled = ?6, default_project_id = ?7 WHERE id = ?1",
        params![
            id.to_string(),
            u.password_hash,
            int(u.version)?,
            int(u.token_generation)?,
            u.name,
            u.enabled,
            u.default_project.map(|p| p.to_string()),
        ],
    )
    .map_err(|e| duplicate(e, "user", &u.name))?;
    Ok(u)
}

pub(super) fn grant_role(
    tx: &Connection,
    user_id: Uuid,
    tenant_id: Uuid,
    role: Role,
) -> Result<()> {
    user(tx, "id", &user_id.to_string())?;
    tenant(tx, tenant_id)?;
    tx.execute(
        "INSERT OR IGNORE INTO roles (user_id, tenant_id, role) VALUES (?1, ?2, ?3)",
        params![user_id.to_string(), tenant_id.to_string(), role.as_str()],
    )?;
    Ok(())
}

pub(super) fn revoke_role(
    tx: &Connection,
    user_id: Uuid,
    tenant_id: Uuid,
    role: Role,
) -> Result<()> {
    let n = tx.execute(
        "DELETE FROM roles WHERE user_id = ?1 AND tenant_id = ?2 AND role = ?3",
        params![user_id.to_string(), tenant_id.to_string(), role.as_str()],
    )?;
    if n == 0 {
        return Err(StoreError::not_found(
            "role assignment",
            format!("{user_id}/{tenant_id}"),
        ));
    }
    end_tokens(tx, user_id)
}

/// The role assignments whose `column` (`user_id` or `tenant_id`) is `id`.
pub(super) fn roles(tx: &Connection, column: &str, id: Uuid) -> Result<Vec<RoleAssignment>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT user_id, tenant_id, role FROM roles WHERE {column} = ?1 ORDER BY user_id, tenant_id, role"
    ))?;
    let rows = stmt.query_map([id.to_string()], |row| {
        let role: String = row.get(2)?;
        Ok(RoleAssignment {
            user: uuid_at(row, 0)?,
            tenant: uuid_at(row, 1)?,
            role: Role::from_name(&role)
                .ok_or_else(|| bad_column(2, format!("unknown role {role:?}")))?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
