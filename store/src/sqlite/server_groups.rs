//! Server groups in SQLite: [`ServerGroupStore`] for [`SqliteStore`], a row per group and a row
//! per member (foreign keys drop a member with its instance, and a group's members with it).

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::{SqliteStore, opt_uuid_at, uuid_at};
use crate::common::{check_name, from_millis, millis, now};
use crate::*;

impl ServerGroupStore for SqliteStore {
    fn create_server_group(&self, new: NewServerGroup) -> Result<ServerGroup> {
        check_name("server group", &new.name)?;
        ServerGroup::check_policy(&new.policy)?;
        self.write(|tx| create(tx, &new))
    }
    fn server_group(&self, scope: Scope, id: Uuid) -> Result<ServerGroup> {
        self.read(|tx| group(tx, scope, id))
    }
    fn server_groups(&self, scope: Scope) -> Result<Vec<ServerGroup>> {
        self.read(|tx| {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {COLS} FROM server_groups
                 WHERE ?1 IS NULL OR tenant_id = ?1 ORDER BY seq"
            ))?;
            let rows = stmt
                .query_map([tenant_of(scope)], row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter().map(|g| with_members(tx, g)).collect()
        })
    }
    fn delete_server_group(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.write(|tx| {
            group(tx, scope, id)?;
            tx.execute("DELETE FROM server_groups WHERE id = ?1", [id.to_string()])?;
            Ok(())
        })
    }
    fn add_server_group_member(
        &self,
        scope: Scope,
        group_id: Uuid,
        instance: Uuid,
    ) -> Result<ServerGroup> {
        self.write(|tx| {
            let g = group(tx, scope, group_id)?;
            let owner: Option<String> = tx
                .query_row(
                    "SELECT tenant_id FROM instances WHERE id = ?1",
                    [instance.to_string()],
                    |r| r.get(0),
                )
                .optional()?;
            if owner != Some(g.tenant.to_string()) {
                return Err(StoreError::not_found("instance", instance));
            }
            g.check_joiner(instance, group_id_of(tx, instance)?)?;
            tx.execute(
                "INSERT INTO server_group_members (instance_id, group_id) VALUES (?1, ?2)",
                [instance.to_string(), group_id.to_string()],
            )?;
            group(tx, Scope::All, group_id)
        })
    }
    fn server_group_of(&self, instance: Uuid) -> Result<Option<ServerGroup>> {
        self.read(|tx| match group_id_of(tx, instance)? {
            Some(id) => group(tx, Scope::All, id).map(Some),
            None => Ok(None),
        })
    }
}

const COLS: &str = "id, tenant_id, user_id, name, policy, created";

fn tenant_of(scope: Scope) -> Option<String> {
    match scope {
        Scope::All => None,
        Scope::Tenant(t) => Some(t.to_string()),
    }
}

fn row(row: &Row<'_>) -> rusqlite::Result<ServerGroup> {
    Ok(ServerGroup {
        id: uuid_at(row, 0)?,
        tenant: uuid_at(row, 1)?,
        user: opt_uuid_at(row, 2)?,
        name: row.get(3)?,
        policy: row.get(4)?,
        members: Vec::new(),
        created: from_millis(row.get(5)?),
    })
}

fn with_members(tx: &Connection, mut g: ServerGroup) -> Result<ServerGroup> {
    let mut stmt = tx.prepare_cached(
        "SELECT instance_id FROM server_group_members WHERE group_id = ?1 ORDER BY seq",
    )?;
    g.members = stmt
        .query_map([g.id.to_string()], |r| uuid_at(r, 0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(g)
}

fn group(tx: &Connection, scope: Scope, id: Uuid) -> Result<ServerGroup> {
    let found = tx
        .prepare_cached(&format!(
            "SELECT {COLS} FROM server_groups WHERE id = ?1 AND (?2 IS NULL OR tenant_id = ?2)"
        ))?
        .query_row(params![id.to_string(), tenant_of(scope)], row)
        .optional()?;
    with_members(
        tx,
        found.ok_or_else(|| StoreError::not_found("server group", id))?,
    )
}

fn group_id_of(tx: &Connection, instance: Uuid) -> Result<Option<Uuid>> {
    Ok(tx
        .query_row(
            "SELECT group_id FROM server_group_members WHERE instance_id = ?1",
            [instance.to_string()],
            |r| uuid_at(r, 0),
        )
        .optional()?)
}

fn create(tx: &Connection, new: &NewServerGroup) -> Result<ServerGroup> {
    let known: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM tenants WHERE id = ?1)",
        [new.tenant.to_string()],
        |r| r.get(0),
    )?;
    if !known {
        return Err(StoreError::not_found("tenant", new.tenant));
    }
    let count: i64 = tx.query_row(
        "SELECT COUNT(*) FROM server_groups WHERE tenant_id = ?1",
        [new.tenant.to_string()],
        |r| r.get(0),
    )?;
    ServerGroup::check_group_room(usize::try_from(count).unwrap_or(usize::MAX))?;
    let g = ServerGroup {
        id: Uuid::new_v4(),
        tenant: new.tenant,
        user: new.user,
        name: new.name.clone(),
        policy: new.policy.clone(),
        members: Vec::new(),
        created: from_millis(millis(now())),
    };
    tx.execute(
        "INSERT INTO server_groups (id, tenant_id, user_id, name, policy, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            g.id.to_string(),
            g.tenant.to_string(),
            g.user.map(|u| u.to_string()),
            g.name,
            g.policy,
            millis(g.created)
        ],
    )?;
    Ok(g)
}
