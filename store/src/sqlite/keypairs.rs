//! Users' key pairs in SQLite: [`KeypairStore`] for [`SqliteStore`]. A key pair's row goes with
//! its user (`ON DELETE CASCADE`).

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::identity::user;
use super::{SqliteStore, bad_column, duplicate, uuid_at};
use crate::common::{check_keypair, check_keypair_quota, from_millis, millis, now};
use crate::*;

impl KeypairStore for SqliteStore {
    fn create_keypair(&self, new: NewKeypair, limit: u32) -> Result<Keypair> {
        check_keypair(&new)?;
        self.write(|tx| create(tx, new, limit))
    }
    fn keypair(&self, user: Uuid, name: &str) -> Result<Keypair> {
        self.read(|tx| get(tx, user, name))
    }
    fn keypairs(&self, user: Uuid) -> Result<Vec<Keypair>> {
        self.read(|tx| list(tx, user))
    }
    fn delete_keypair(&self, user: Uuid, name: &str) -> Result<()> {
        self.write(|tx| {
            let n = tx.execute(
                "DELETE FROM keypairs WHERE user_id = ?1 AND name = ?2",
                params![user.to_string(), name],
            )?;
            if n == 0 {
                return Err(StoreError::not_found("key pair", name));
            }
            Ok(())
        })
    }
}

const COLS: &str = "user_id, name, kind, public_key, fingerprint, created";

fn row(row: &Row<'_>) -> rusqlite::Result<Keypair> {
    let kind: String = row.get(2)?;
    Ok(Keypair {
        user: uuid_at(row, 0)?,
        name: row.get(1)?,
        kind: KeypairKind::from_name(&kind)
            .ok_or_else(|| bad_column(2, format!("unknown key pair kind {kind:?}")))?,
        public_key: row.get(3)?,
        fingerprint: row.get(4)?,
        created: from_millis(row.get(5)?),
    })
}

fn create(tx: &Connection, new: NewKeypair, limit: u32) -> Result<Keypair> {
    user(tx, "id", &new.user.to_string())?;
    let count: i64 = tx.query_row(
        "SELECT COUNT(*) FROM keypairs WHERE user_id = ?1",
        [new.user.to_string()],
        |r| r.get(0),
    )?;
    check_keypair_quota(usize::try_from(count).unwrap_or(usize::MAX), limit)?;
    let keypair = Keypair {
        user: new.user,
        name: new.name,
        kind: new.kind,
        public_key: new.public_key,
        fingerprint: new.fingerprint,
        created: now(),
    };
    tx.execute(
        &format!("INSERT INTO keypairs ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        params![
            keypair.user.to_string(),
            keypair.name,
            keypair.kind.as_str(),
            keypair.public_key,
            keypair.fingerprint,
            millis(keypair.created)
        ],
    )
    .map_err(|e| duplicate(e, "key pair", &keypair.name))?;
    Ok(keypair)
}

fn get(tx: &Connection, user: Uuid, name: &str) -> Result<Keypair> {
    tx.query_row(
        &format!("SELECT {COLS} FROM keypairs WHERE user_id = ?1 AND name = ?2"),
        params![user.to_string(), name],
        row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("key pair", name))
}

fn list(tx: &Connection, user: Uuid) -> Result<Vec<Keypair>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {COLS} FROM keypairs WHERE user_id = ?1 ORDER BY name"
    ))?;
    let rows = stmt.query_map([user.to_string()], row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
