//! Off-host hosts and the operation queue in SQLite: [`OperationQueue`] for [`SqliteStore`], over
//! the functions below, each of which runs inside the caller's transaction. A claim picks the oldest eligible row, raises the one-row `fencing` counter and
//! writes both in its `BEGIN IMMEDIATE` transaction, so claims are serialised and every token is
//! larger than the one before, across threads and processes sharing the file.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::{SqliteStore, bad_column, u64_at, uuid_at};
use crate::common::{from_millis, millis, now};
use crate::queue::{check_creds, check_owner, check_remote_host, fenced};
use crate::*;

impl OperationQueue for SqliteStore {
    fn create_remote_host(&self, new: NewRemoteHost) -> Result<RemoteHost> {
        self.write(|tx| create_host(tx, new))
    }
    fn remote_host(&self, id: Uuid) -> Result<RemoteHost> {
        self.read(|tx| host(tx, id))
    }
    fn remote_hosts(&self) -> Result<Vec<RemoteHost>> {
        self.read(hosts)
    }
    fn delete_remote_host(&self, id: Uuid) -> Result<()> {
        self.write(|tx| delete_host(tx, id))
    }
    fn enqueue_operation(&self, new: NewOperation) -> Result<Operation> {
        self.write(|tx| enqueue(tx, new))
    }
    fn operation(&self, id: Uuid) -> Result<Operation> {
        self.read(|tx| get(tx, id))
    }
    fn operations(&self, filter: OperationFilter) -> Result<Vec<Operation>> {
        self.read(|tx| list(tx, filter))
    }
    fn claim_operations_on(
        &self,
        owner: &str,
        lease: Duration,
        host: Option<Uuid>,
        max: usize,
    ) -> Result<Vec<Operation>> {
        self.write(|tx| claim(tx, owner, lease, host, max))
    }
    fn unfinished_operations(&self, host: Uuid) -> Result<usize> {
        self.read(|tx| unfinished(tx, host))
    }
    fn renew_claim(&self, id: Uuid, token: u64, lease: Duration) -> Result<Operation> {
        self.write(|tx| renew(tx, id, token, lease))
    }
    fn complete_operation(&self, id: Uuid, token: u64, result: &str) -> Result<Operation> {
        self.write(|tx| finish(tx, id, token, OperationState::Done, result))
    }
    fn fail_operation(&self, id: Uuid, token: u64, reason: &str) -> Result<Operation> {
        self.write(|tx| finish(tx, id, token, OperationState::Failed, reason))
    }
    fn put_launcher_creds(&self, creds: LauncherCreds) -> Result<()> {
        self.write(|tx| put_creds(tx, &creds))
    }
    fn launcher_creds(&self, host: Uuid) -> Result<LauncherCreds> {
        self.write(|tx| creds(tx, host))
    }
    fn fenced_write(
        &self,
        id: Uuid,
        token: u64,
        write: &InstanceWrite,
        finish: Option<(OperationState, &str)>,
    ) -> Result<Operation> {
        self.write(|tx| fenced_write(tx, id, token, write, finish))
    }
}

const HOST_COLS: &str = "id, name, libvirt_uri, created";
const OP_COLS: &str = "id, host_id, instance_id, kind, payload, state, owner, token, expires, \
     result, created, updated";

fn host_row(row: &Row<'_>) -> rusqlite::Result<RemoteHost> {
    Ok(RemoteHost {
        id: uuid_at(row, 0)?,
        name: row.get(1)?,
        libvirt_uri: row.get(2)?,
        created: from_millis(row.get(3)?),
    })
}

fn op_row(row: &Row<'_>) -> rusqlite::Result<Operation> {
    let kind: String = row.get(3)?;
    let kind = OperationKind::parse(&kind)
        .ok_or_else(|| bad_column(3, format!("unknown operation kind {kind:?}")))?;
    let state: String = row.get(5)?;
    let state = OperationState::parse(&state)
        .ok_or_else(|| bad_column(5, format!("unknown operation state {state:?}")))?;
    let owner: Option<String> = row.get(6)?;
    let claim = match owner {
        Some(owner) => Some(Claim {
            owner,
            token: u64_at(row, 7)?,
            expires: from_millis(row.get(8)?),
        }),
        None => None,
    };
    Ok(Operation {
        id: uuid_at(row, 0)?,
        host: uuid_at(row, 1)?,
        instance: uuid_at(row, 2)?,
        kind,
        payload: row.get(4)?,
        state,
        claim,
        result: row.get(9)?,
        created: from_millis(row.get(10)?),
        updated: from_millis(row.get(11)?),
    })
}

/// Milliseconds from now to the end of a lease.
fn lease_end(lease: Duration) -> i64 {
    let lease = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    millis(now()).saturating_add(lease)
}

pub(super) fn create_host(tx: &Connection, new: NewRemoteHost) -> Result<RemoteHost> {
    check_remote_host(&new)?;
    let host = RemoteHost {
        id: Uuid::new_v4(),
        name: new.name,
        libvirt_uri: new.libvirt_uri,
        created: now(),
    };
    tx.execute(
        "INSERT INTO remote_hosts (id, name, libvirt_uri, created) VALUES (?1, ?2, ?3, ?4)",
        params![
            host.id.to_string(),
            host.name,
            host.libvirt_uri,
            millis(host.created)
        ],
    )
    .map_err(|e| match StoreError::from(e) {
        StoreError::Conflict(_) => {
            StoreError::Conflict(format!("remote host {:?} already exists", host.name))
        }
        other => other,
    })?;
    Ok(host)
}

pub(super) fn host(tx: &Connection, id: Uuid) -> Result<RemoteHost> {
    tx.query_row(
        &format!("SELECT {HOST_COLS} FROM remote_hosts WHERE id = ?1"),
        [id.to_string()],
        host_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("remote host", id))
}

pub(super) fn hosts(tx: &Connection) -> Result<Vec<RemoteHost>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT {HOST_COLS} FROM remote_hosts ORDER BY name"
    ))?;
    let rows = stmt.query_map([], host_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn delete_host(tx: &Connection, id: Uuid) -> Result<()> {
    host(tx, id)?;
    let pending: i64 = tx.query_row(
        "SELECT COUNT(*) FROM operations WHERE host_id = ?1 AND state IN ('queued', 'claimed')",
        [id.to_string()],
        |r| r.get(0),
    )?;
    if pending > 0 {
        return Err(StoreError::Conflict(format!(
            "remote host {id} has {pending} unfinished operations"
        )));
    }
    tx.execute("DELETE FROM remote_hosts WHERE id = ?1", [id.to_string()])?;
    tx.execute(
        "DELETE FROM launcher_creds WHERE host_id = ?1",
        [id.to_string()],
    )?;
    Ok(())
}

pub(super) fn enqueue(tx: &Connection, new: NewOperation) -> Result<Operation> {
    host(tx, new.host)?;
    let id = Uuid::new_v4();
    let at = millis(now());
    tx.execute(
        "INSERT INTO operations (id, host_id, instance_id, kind, payload, state, created, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, ?6)",
        params![
            id.to_string(),
            new.host.to_string(),
            new.instance.to_string(),
            new.kind.as_str(),
            new.payload,
            at
        ],
    )?;
    get(tx, id)
}

pub(super) fn get(tx: &Connection, id: Uuid) -> Result<Operation> {
    tx.query_row(
        &format!("SELECT {OP_COLS} FROM operations WHERE id = ?1"),
        [id.to_string()],
        op_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("operation", id))
}

pub(super) fn list(tx: &Connection, filter: OperationFilter) -> Result<Vec<Operation>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT {OP_COLS} FROM operations
         WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR host_id = ?2) ORDER BY seq"
    ))?;
    let rows = stmt.query_map(
        params![
            filter.state.map(OperationState::as_str),
            filter.host.map(|h| h.to_string())
        ],
        op_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn claim(
    tx: &Connection,
    owner: &str,
    lease: Duration,
    host: Option<Uuid>,
    max: usize,
) -> Result<Vec<Operation>> {
    check_owner(owner)?;
    let now_ms = millis(now());
    let host = host.map(|h| h.to_string());
    let max = i64::try_from(max.clamp(1, MAX_CLAIM_BATCH)).unwrap_or(1);
    // The oldest queued (or expired) operations with no older unfinished one on their instance
    // (so at most one per instance).
    let mut stmt = tx.prepare_cached(
        "SELECT o.id FROM operations o
         WHERE o.state IN ('queued', 'claimed') AND (o.state = 'queued' OR o.expires <= ?1)
           AND (?2 IS NULL OR o.host_id = ?2)
           AND NOT EXISTS (SELECT 1 FROM operations p
                           WHERE p.instance_id = o.instance_id AND p.seq < o.seq
                             AND p.state IN ('queued', 'claimed'))
         ORDER BY o.seq LIMIT ?3",
    )?;
    let found = stmt
        .query_map(params![now_ms, host, max], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    let mut claimed = Vec::with_capacity(found.len());
    for id in found {
        // Each its own token: claims are serialised by the transaction, tokens only grow.
        let token: i64 = tx.query_row(
            "UPDATE fencing SET last = last + 1 RETURNING last",
            [],
            |r| r.get(0),
        )?;
        tx.execute(
            "UPDATE operations SET state = 'claimed', owner = ?2, token = ?3, expires = ?4,
             updated = ?5 WHERE id = ?1",
            params![id, owner, token, lease_end(lease), now_ms],
        )?;
        let id = Uuid::parse_str(&id).map_err(|e| StoreError::Backend(e.to_string()))?;
        claimed.push(get(tx, id)?);
    }
    Ok(claimed)
}

/// How many operations of `host` are queued or claimed.
pub(super) fn unfinished(tx: &Connection, host: Uuid) -> Result<usize> {
    let n: i64 = tx.query_row(
        "SELECT COUNT(*) FROM operations WHERE host_id = ?1 AND state IN ('queued', 'claimed')",
        params![host.to_string()],
        |r| r.get(0),
    )?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Operation `id` if `token` is its current claim; `Fenced` otherwise.
fn held(tx: &Connection, id: Uuid, token: u64) -> Result<Operation> {
    let op = get(tx, id)?;
    let current = op.claim.as_ref().map(|c| c.token);
    if op.state != OperationState::Claimed || current != Some(token) {
        return Err(fenced(id, token));
    }
    Ok(op)
}

pub(super) fn renew(tx: &Connection, id: Uuid, token: u64, lease: Duration) -> Result<Operation> {
    held(tx, id, token)?;
    tx.execute(
        "UPDATE operations SET expires = ?2, updated = ?3 WHERE id = ?1",
        params![id.to_string(), lease_end(lease), millis(now())],
    )?;
    get(tx, id)
}

pub(super) fn finish(
    tx: &Connection,
    id: Uuid,
    token: u64,
    state: OperationState,
    result: &str,
) -> Result<Operation> {
    held(tx, id, token)?;
    tx.execute(
        "UPDATE operations SET state = ?2, result = ?3, updated = ?4 WHERE id = ?1",
        params![id.to_string(), state.as_str(), result, millis(now())],
    )?;
    get(tx, id)
}

/// A launcher's write about operation `id` under claim `token`, in the caller's transaction:
/// refused with `Fenced` unless `token` is the current claim.
pub(super) fn fenced_write(
    tx: &Connection,
    id: Uuid,
    token: u64,
    write: &InstanceWrite,
    finish_with: Option<(OperationState, &str)>,
) -> Result<Operation> {
    let op = held(tx, id, token)?;
    match write {
        InstanceWrite::Nothing => {}
        InstanceWrite::Update(mask, facts) => {
            let current = super::instances::get(tx, Scope::All, op.instance)?;
            super::instances::update(
                tx,
                Scope::All,
                op.instance,
                current.version,
                mask.change(facts),
            )?;
        }
        InstanceWrite::Remove => match super::instances::delete(tx, Scope::All, op.instance) {
            Ok(()) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        },
    }
    match finish_with {
        Some((state, result)) => finish(tx, id, token, state, result),
        None => Ok(op),
    }
}

pub(super) fn put_creds(tx: &Connection, creds: &LauncherCreds) -> Result<()> {
    check_creds(creds)?;
    host(tx, creds.host)?;
    tx.execute(
        "INSERT INTO launcher_creds (host_id, cert, key, ca, not_after, issued)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (host_id) DO UPDATE SET cert = ?2, key = ?3, ca = ?4, not_after = ?5,
             issued = ?6",
        params![
            creds.host.to_string(),
            creds.cert_pem,
            creds.sealed_key,
            creds.ca_pem,
            millis(creds.not_after),
            millis(creds.issued)
        ],
    )?;
    Ok(())
}

pub(super) fn creds(tx: &Connection, host: Uuid) -> Result<LauncherCreds> {
    tx.query_row(
        "SELECT cert, key, ca, not_after, issued FROM launcher_creds WHERE host_id = ?1",
        [host.to_string()],
        |r| {
            Ok(LauncherCreds {
                host,
                cert_pem: r.get(0)?,
                sealed_key: r.get(1)?,
                ca_pem: r.get(2)?,
                not_after: from_millis(r.get(3)?),
                issued: from_millis(r.get(4)?),
            })
        },
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("launcher credentials", host))
}
