//! The bounded event log in SQLite: [`EventStore`] for [`SqliteStore`], over the functions below,
//! each of which runs inside the caller's transaction.

use rusqlite::types::Value;
use rusqlite::{Connection, Row, params, params_from_iter};

use super::instances::scope_cond;
use super::{SqliteStore, bad_column, int, opt_uuid_at, u64_at};
use crate::common::{from_millis, millis, now};
use crate::*;

impl EventStore for SqliteStore {
    fn append_event(&self, new: NewEvent) -> Result<Event> {
        self.write(|tx| append_event(tx, new, self.event_capacity))
    }
    fn events(&self, scope: Scope, after: Option<u64>, limit: u32) -> Result<Vec<Event>> {
        self.read(|tx| events(tx, scope, after, limit))
    }
    fn recent_events(&self, scope: Scope, limit: u32) -> Result<Vec<Event>> {
        self.read(|tx| recent_events(tx, scope, limit))
    }
    fn clear_events(&self, scope: Scope) -> Result<u64> {
        self.write(|tx| clear_events(tx, scope))
    }
}

fn event_kind_text(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Info => "info",
        EventKind::Warning => "warning",
        EventKind::Error => "error",
    }
}

fn event_row(row: &Row<'_>) -> rusqlite::Result<Event> {
    let kind: String = row.get(3)?;
    Ok(Event {
        seq: u64_at(row, 0)?,
        time: from_millis(row.get(1)?),
        tenant: opt_uuid_at(row, 2)?,
        kind: match kind.as_str() {
            "info" => EventKind::Info,
            "warning" => EventKind::Warning,
            "error" => EventKind::Error,
            other => return Err(bad_column(3, format!("unknown event kind {other:?}"))),
        },
        message: row.get(4)?,
    })
}

pub(super) fn append_event(tx: &Connection, new: NewEvent, capacity: u64) -> Result<Event> {
    let time = now();
    tx.prepare_cached(
        "INSERT INTO events (time, tenant_id, kind, message) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        millis(time),
        new.tenant.map(|t| t.to_string()),
        event_kind_text(new.kind),
        new.message
    ])?;
    let seq = tx.last_insert_rowid();
    tx.prepare_cached("DELETE FROM events WHERE seq <= ?1")?
        .execute([seq - int(capacity)?])?;
    Ok(Event {
        seq: u64::try_from(seq).map_err(|e| StoreError::Backend(e.to_string()))?,
        time,
        tenant: new.tenant,
        kind: new.kind,
        message: new.message,
    })
}

pub(super) fn events(
    tx: &Connection,
    scope: Scope,
    after: Option<u64>,
    limit: u32,
) -> Result<Vec<Event>> {
    let (cond, param) = scope_cond(scope);
    let cond = cond.replace("i.", "");
    let mut args = vec![Value::Integer(int(after.unwrap_or(0))?)];
    args.extend(param);
    args.push(Value::Integer(i64::from(limit.min(Page::MAX_LIMIT))));
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT seq, time, tenant_id, kind, message FROM events WHERE seq > ?{cond}
         ORDER BY seq LIMIT ?"
    ))?;
    let rows = stmt.query_map(params_from_iter(args), event_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn recent_events(tx: &Connection, scope: Scope, limit: u32) -> Result<Vec<Event>> {
    let (cond, param) = scope_cond(scope);
    let cond = cond.replace("i.", "");
    let mut args: Vec<Value> = param.into_iter().collect();
    args.push(Value::Integer(i64::from(limit.min(Page::MAX_LIMIT))));
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT seq, time, tenant_id, kind, message FROM events WHERE seq > 0{cond}
         ORDER BY seq DESC LIMIT ?"
    ))?;
    let rows = stmt.query_map(params_from_iter(args), event_row)?;
    let mut events: Vec<Event> = rows.collect::<rusqlite::Result<_>>()?;
    events.reverse();
    Ok(events)
}

pub(super) fn clear_events(tx: &Connection, scope: Scope) -> Result<u64> {
    let n = match scope {
        Scope::All => tx.execute("DELETE FROM events", [])?,
        Scope::Tenant(t) => {
            tx.execute("DELETE FROM events WHERE tenant_id = ?1", [t.to_string()])?
        }
    };
    Ok(n as u64)
}
