//! The instance actions log in SQLite: [`ActionStore`] for [`SqliteStore`], over the functions
//! below, each of which runs inside the caller's transaction. An instance's actions (at most
//! [`ACTIONS_PER_INSTANCE`]) are read whole, changed in memory by the shared rules
//! (`crate::actions`) and the one that changed is written back.

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::{SqliteStore, bad_column, int, opt_uuid_at, uuid_at};
use crate::actions::{self as rules, events_from_json, events_json};
use crate::common::{from_millis, millis, now};
use crate::*;

impl ActionStore for SqliteStore {
    fn add_instance_action(&self, new: NewInstanceAction) -> Result<InstanceAction> {
        self.write(|tx| add(tx, new))
    }
    fn start_action_event(
        &self,
        instance: Uuid,
        target: ActionTarget<'_>,
        event: &str,
    ) -> Result<Option<InstanceAction>> {
        rules::check_event(event)?;
        self.write(|tx| {
            let mut actions = of_instance(tx, instance)?;
            match rules::start_event(&mut actions, target, event, now()) {
                Some((at, changed)) => {
                    let action = actions.swap_remove(at);
                    if changed {
                        write_back(tx, &action)?;
                    }
                    Ok(Some(action))
                }
                None => Ok(None),
            }
        })
    }
    fn finish_action_event(
        &self,
        instance: Uuid,
        target: ActionTarget<'_>,
        event: &str,
        outcome: EventOutcome,
    ) -> Result<Option<InstanceAction>> {
        rules::check_event(event)?;
        self.write(|tx| {
            let mut actions = of_instance(tx, instance)?;
            match rules::finish_event(&mut actions, target, event, outcome.clone(), now()) {
                Some(at) => {
                    let action = actions.swap_remove(at);
                    write_back(tx, &action)?;
                    Ok(Some(action))
                }
                None => Ok(None),
            }
        })
    }
    fn instance_actions(&self, scope: Scope, instance: Uuid) -> Result<Vec<InstanceAction>> {
        self.read(|tx| {
            let mut visible: Vec<InstanceAction> = of_instance(tx, instance)?
                .into_iter()
                .filter(|a| scope.sees(Some(a.tenant)))
                .collect();
            if visible.is_empty() {
                super::instances::get(tx, scope, instance)?;
            }
            visible.reverse();
            Ok(visible)
        })
    }
    fn instance_action(
        &self,
        scope: Scope,
        instance: Uuid,
        request_id: &str,
    ) -> Result<InstanceAction> {
        self.read(|tx| {
            let visible: Vec<InstanceAction> = of_instance(tx, instance)?
                .into_iter()
                .filter(|a| scope.sees(Some(a.tenant)))
                .collect();
            if let Some(found) = visible.iter().find(|a| a.request_id == request_id) {
                return Ok(found.clone());
            }
            if visible.is_empty() {
                super::instances::get(tx, scope, instance)?;
            }
            Err(StoreError::not_found("instance action", request_id))
        })
    }
}

const COLS: &str = "instance_id, request_id, tenant_id, action, user_id, project_id, start, \
     updated, message, events";

fn action_row(row: &Row<'_>) -> rusqlite::Result<InstanceAction> {
    let events: String = row.get(9)?;
    Ok(InstanceAction {
        instance: uuid_at(row, 0)?,
        request_id: row.get(1)?,
        tenant: uuid_at(row, 2)?,
        action: row.get(3)?,
        user: opt_uuid_at(row, 4)?,
        project: opt_uuid_at(row, 5)?,
        start: from_millis(row.get(6)?),
        updated: from_millis(row.get(7)?),
        message: row.get(8)?,
        events: events_from_json(&events).map_err(|e| bad_column(9, e.to_string()))?,
    })
}

/// The instance's actions, oldest first.
fn of_instance(tx: &Connection, instance: Uuid) -> Result<Vec<InstanceAction>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {COLS} FROM instance_actions WHERE instance_id = ?1 ORDER BY seq"
    ))?;
    let rows = stmt.query_map([instance.to_string()], action_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn add(tx: &Connection, new: NewInstanceAction) -> Result<InstanceAction> {
    rules::check_new(&new)?;
    let tenant: String = tx
        .prepare_cached("SELECT tenant_id FROM instances WHERE id = ?1")?
        .query_row([new.instance.to_string()], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::not_found("instance", new.instance))?;
    let tenant = Uuid::parse_str(&tenant).map_err(|e| StoreError::Backend(e.to_string()))?;
    let taken: bool = tx
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM instance_actions WHERE instance_id = ?1
                 AND request_id = ?2)",
        )?
        .query_row(params![new.instance.to_string(), new.request_id], |r| {
            r.get(0)
        })?;
    if taken {
        return Err(rules::duplicate(&new));
    }
    let action = rules::new_action(new, tenant, now());
    tx.prepare_cached(&format!(
        "INSERT INTO instance_actions ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
    ))?
    .execute(params![
        action.instance.to_string(),
        action.request_id,
        action.tenant.to_string(),
        action.action,
        action.user.map(|u| u.to_string()),
        action.project.map(|p| p.to_string()),
        millis(action.start),
        millis(action.updated),
        action.message,
        events_json(&action.events)?,
    ])?;
    tx.prepare_cached(
        "DELETE FROM instance_actions WHERE instance_id = ?1 AND seq NOT IN
             (SELECT seq FROM instance_actions WHERE instance_id = ?1 ORDER BY seq DESC LIMIT ?2)",
    )?
    .execute(params![
        action.instance.to_string(),
        int(ACTIONS_PER_INSTANCE as u64)?
    ])?;
    Ok(action)
}

/// Writes an action's changing fields (message, events, updated).
fn write_back(tx: &Connection, action: &InstanceAction) -> Result<()> {
    tx.prepare_cached(
        "UPDATE instance_actions SET message = ?3, events = ?4, updated = ?5
             WHERE instance_id = ?1 AND request_id = ?2",
    )?
    .execute(params![
        action.instance.to_string(),
        action.request_id,
        action.message,
        events_json(&action.events)?,
        millis(action.updated),
    ])?;
    Ok(())
}
