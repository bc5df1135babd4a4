//! The nodes an admin disabled, in SQLite: [`NodeStore`] for [`SqliteStore`], a row per node.

use std::time::SystemTime;

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::{SqliteStore, uuid_at};
use crate::common::{
    check_disabled_count, check_disabled_reason, check_join_token, check_join_token_count,
    check_joined_node, from_millis, millis, now,
};
use crate::*;

impl NodeStore for SqliteStore {
    fn disable_node(&self, node: Uuid, reason: Option<String>) -> Result<DisabledNode> {
        check_disabled_reason(&reason)?;
        self.write(|tx| disable(tx, node, reason))
    }
    fn enable_node(&self, node: Uuid) -> Result<bool> {
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM disabled_nodes WHERE node_id = ?1",
                [node.to_string()],
            )?;
            Ok(n > 0)
        })
    }
    fn create_join_token(&self, new: JoinToken) -> Result<JoinToken> {
        self.write(|tx| {
            tx.execute(
                "DELETE FROM join_tokens WHERE expires <= ?1",
                [millis(new.created)],
            )?;
            let count: i64 = tx.query_row("SELECT COUNT(*) FROM join_tokens", [], |r| r.get(0))?;
            check_join_token_count(usize::try_from(count).unwrap_or(usize::MAX))?;
            tx.execute(
                &format!(
                    "INSERT INTO join_tokens ({TOKEN_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL)"
                ),
                params![
                    new.id.to_string(),
                    new.secret_hash.to_vec(),
                    new.roles,
                    millis(new.created),
                    millis(new.expires)
                ],
            )
            .map_err(|e| super::duplicate(e, "join token", &new.id.to_string()))?;
            token(tx, new.id)
        })
    }
    fn join_tokens(&self) -> Result<Vec<JoinToken>> {
        self.read(|tx| {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {TOKEN_COLS} FROM join_tokens ORDER BY expires, id"
            ))?;
            Ok(stmt
                .query_map([], token_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
    fn delete_join_token(&self, id: Uuid) -> Result<()> {
        self.write(|tx| {
            let n = tx.execute("DELETE FROM join_tokens WHERE id = ?1", [id.to_string()])?;
            if n == 0 {
                return Err(StoreError::not_found("join token", id));
            }
            Ok(())
        })
    }
    fn redeem_join_token(
        &self,
        id: Uuid,
        secret_hash: &[u8; 32],
        now: SystemTime,
        node: JoinedNode,
    ) -> Result<JoinedNode> {
        self.write(|tx| {
            let found = token(tx, id)?;
            check_join_token(&found, secret_hash, now)?;
            let count: i64 = tx.query_row("SELECT COUNT(*) FROM joined_nodes", [], |r| r.get(0))?;
            check_joined_node(&node, usize::try_from(count).unwrap_or(usize::MAX))?;
            tx.execute(
                "UPDATE join_tokens SET used_at = ?2, used_by = ?3 WHERE id = ?1",
                params![id.to_string(), millis(now), node.id.to_string()],
            )?;
            tx.execute(
                &format!(
                    "INSERT INTO joined_nodes ({JOINED_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL)"
                ),
                params![
                    node.id.to_string(),
                    node.hostname,
                    node.roles,
                    node.serial,
                    millis(node.not_after),
                    millis(node.joined)
                ],
            )
            .map_err(|e| super::duplicate(e, "joined node", &node.id.to_string()))?;
            joined(tx, node.id)
        })
    }
    fn joined_nodes(&self) -> Result<Vec<JoinedNode>> {
        self.read(|tx| {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {JOINED_COLS} FROM joined_nodes ORDER BY id"
            ))?;
            Ok(stmt
                .query_map([], joined_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
    fn revoke_joined_node(&self, id: Uuid, at: SystemTime) -> Result<JoinedNode> {
        self.write(|tx| {
            joined(tx, id)?;
            tx.execute(
                "UPDATE joined_nodes SET revoked = ?2 WHERE id = ?1 AND revoked IS NULL",
                params![id.to_string(), millis(at)],
            )?;
            joined(tx, id)
        })
    }
    fn disabled_nodes(&self) -> Result<Vec<DisabledNode>> {
        self.read(|tx| {
            let mut stmt = tx.prepare_cached(
                "SELECT node_id, reason, since FROM disabled_nodes ORDER BY node_id",
            )?;
            Ok(stmt
                .query_map([], row)?
                .collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
}

const TOKEN_COLS: &str = "id, secret_hash, roles, created, expires, used_at, used_by";
const JOINED_COLS: &str = "id, hostname, roles, serial, not_after, joined, revoked";

fn token_row(row: &Row<'_>) -> rusqlite::Result<JoinToken> {
    let hash: Vec<u8> = row.get(1)?;
    let used_at: Option<i64> = row.get(5)?;
    let used_by: Option<String> = row.get(6)?;
    let used = match (used_at, used_by) {
        (Some(at), Some(by)) => Some((
            from_millis(at),
            by.parse()
                .map_err(|_| super::bad_column(6, format!("not a UUID: {by:?}")))?,
        )),
        _ => None,
    };
    Ok(JoinToken {
        id: uuid_at(row, 0)?,
        secret_hash: hash
            .try_into()
            .map_err(|_| super::bad_column(1, "not 32 bytes".to_string()))?,
        roles: row.get(2)?,
        created: from_millis(row.get(3)?),
        expires: from_millis(row.get(4)?),
        used,
    })
}

fn joined_row(row: &Row<'_>) -> rusqlite::Result<JoinedNode> {
    let revoked: Option<i64> = row.get(6)?;
    Ok(JoinedNode {
        id: uuid_at(row, 0)?,
        hostname: row.get(1)?,
        roles: row.get(2)?,
        serial: row.get(3)?,
        not_after: from_millis(row.get(4)?),
        joined: from_millis(row.get(5)?),
        revoked: revoked.map(from_millis),
    })
}

fn token(tx: &Connection, id: Uuid) -> Result<JoinToken> {
    tx.query_row(
        &format!("SELECT {TOKEN_COLS} FROM join_tokens WHERE id = ?1"),
        [id.to_string()],
        token_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("join token", id))
}

fn joined(tx: &Connection, id: Uuid) -> Result<JoinedNode> {
    tx.query_row(
        &format!("SELECT {JOINED_COLS} FROM joined_nodes WHERE id = ?1"),
        [id.to_string()],
        joined_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("joined node", id))
}

fn row(row: &Row<'_>) -> rusqlite::Result<DisabledNode> {
    Ok(DisabledNode {
        node: uuid_at(row, 0)?,
        reason: row.get(1)?,
        since: from_millis(row.get(2)?),
    })
}

fn disable(tx: &Connection, node: Uuid, reason: Option<String>) -> Result<DisabledNode> {
    let there: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM disabled_nodes WHERE node_id = ?1)",
        [node.to_string()],
        |r| r.get(0),
    )?;
    if !there {
        let count: i64 = tx.query_row("SELECT COUNT(*) FROM disabled_nodes", [], |r| r.get(0))?;
        check_disabled_count(usize::try_from(count).unwrap_or(usize::MAX))?;
    }
    let since = from_millis(millis(now()));
    tx.execute(
        "INSERT INTO disabled_nodes (node_id, reason, since) VALUES (?1, ?2, ?3)
         ON CONFLICT (node_id) DO UPDATE SET reason = excluded.reason, since = excluded.since",
        params![node.to_string(), reason, millis(since)],
    )?;
    Ok(DisabledNode {
        node,
        reason,
        since,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound, here only: both stores check it with the same function
    /// (`check_disabled_count`), and filling etcd one transaction at a time takes long.
    #[test]
    fn disabled_nodes_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
        for n in 0..DisabledNode::MAX_NODES {
            store
                .disable_node(Uuid::from_u128(n as u128 + 1), None)
                .unwrap();
        }
        assert!(matches!(
            store.disable_node(Uuid::from_u128(u128::MAX), None),
            Err(StoreError::Invalid(_))
        ));
        // One already disabled may be disabled again.
        store
            .disable_node(Uuid::from_u128(1), Some("again".into()))
            .unwrap();
        assert_eq!(
            store.disabled_nodes().unwrap().len(),
            DisabledNode::MAX_NODES
        );
    }
}
