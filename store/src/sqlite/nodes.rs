//! The nodes an admin disabled, in SQLite: [`NodeStore`] for [`SqliteStore`], a row per node.

use rusqlite::{Connection, Row, params};
use uuid::Uuid;

use super::{SqliteStore, uuid_at};
use crate::common::{check_disabled_count, check_disabled_reason, from_millis, millis, now};
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
