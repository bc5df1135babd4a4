//! Users' application credentials in SQLite, for [`IdentityStore`](crate::IdentityStore) on
//! [`SqliteStore`](super::SqliteStore). A credential's row goes with its user and with its
//! project (`ON DELETE CASCADE`).

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::identity::{tenant, user};
use super::{bad_column, duplicate, uuid_at};
use crate::access::{check_app_credential_limit, new_app_credential, roles_from_text, roles_text};
use crate::common::{from_millis, millis, now};
use crate::*;

const COLS: &str =
    "id, user_id, tenant_id, name, description, secret_hash, roles, expires, unrestricted, created";

fn row(row: &Row<'_>) -> rusqlite::Result<AppCredential> {
    let roles: String = row.get(6)?;
    Ok(AppCredential {
        id: uuid_at(row, 0)?,
        user: uuid_at(row, 1)?,
        project: uuid_at(row, 2)?,
        name: row.get(3)?,
        description: row.get(4)?,
        secret_hash: row.get(5)?,
        roles: roles_from_text(&roles)
            .ok_or_else(|| bad_column(6, format!("unknown role in {roles:?}")))?,
        expires: row.get::<_, Option<i64>>(7)?.map(from_millis),
        unrestricted: row.get(8)?,
        created: from_millis(row.get(9)?),
    })
}

pub(super) fn create(tx: &Connection, new: NewAppCredential, limit: u32) -> Result<AppCredential> {
    let cred = new_app_credential(new, now())?;
    user(tx, "id", &cred.user.to_string())?;
    tenant(tx, cred.project)?;
    let count: i64 = tx.query_row(
        "SELECT COUNT(*) FROM app_credentials WHERE user_id = ?1",
        [cred.user.to_string()],
        |r| r.get(0),
    )?;
    let taken: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM app_credentials WHERE user_id = ?1 AND name = ?2)",
        params![cred.user.to_string(), cred.name],
        |r| r.get(0),
    )?;
    if taken {
        return Err(StoreError::Conflict(format!(
            "application credential {} exists already",
            cred.name
        )));
    }
    check_app_credential_limit(usize::try_from(count).unwrap_or(usize::MAX), limit)?;
    tx.execute(
        &format!(
            "INSERT INTO app_credentials ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
        ),
        params![
            cred.id.to_string(),
            cred.user.to_string(),
            cred.project.to_string(),
            cred.name,
            cred.description,
            cred.secret_hash,
            roles_text(&cred.roles),
            cred.expires.map(millis),
            cred.unrestricted,
            millis(cred.created)
        ],
    )
    .map_err(|e| duplicate(e, "application credential", &cred.name))?;
    Ok(cred)
}

pub(super) fn get(tx: &Connection, id: Uuid) -> Result<AppCredential> {
    tx.query_row(
        &format!("SELECT {COLS} FROM app_credentials WHERE id = ?1"),
        [id.to_string()],
        row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("application credential", id))
}

pub(super) fn list(tx: &Connection, user: Uuid) -> Result<Vec<AppCredential>> {
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {COLS} FROM app_credentials WHERE user_id = ?1 ORDER BY name"
    ))?;
    let rows = stmt.query_map([user.to_string()], row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn delete(tx: &Connection, user: Uuid, id: Uuid) -> Result<()> {
    let n = tx.execute(
        "DELETE FROM app_credentials WHERE id = ?1 AND user_id = ?2",
        params![id.to_string(), user.to_string()],
    )?;
    if n == 0 {
        return Err(StoreError::not_found("application credential", id));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use rusqlite::Connection;

    use super::super::schema::{MIGRATIONS, known_version};
    use crate::*;

    /// A database from before the identity migration (the one that makes `app_credentials`,
    /// found by its content, so that renumbering it changes nothing here) with a tenant, a user
    /// and a role: the tenant gains an empty description, the user is enabled without a default
    /// project, and both take application credentials.
    #[test]
    fn a_database_before_the_identity_migration_gains_its_fields_and_app_credentials() {
        let at = MIGRATIONS
            .iter()
            .position(|m| m.contains("CREATE TABLE app_credentials"))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("before.db");
        let (tenant, user) = (
            "00000000-0000-0000-0000-000000000001",
            "00000000-0000-0000-0000-000000000002",
        );
        {
            let conn = Connection::open(&path).unwrap();
            for migration in &MIGRATIONS[..at] {
                conn.execute_batch(migration).unwrap();
            }
            conn.execute_batch(&format!(
                "CREATE TABLE schema_version (version INTEGER NOT NULL);
                 INSERT INTO schema_version (version) VALUES ({at});
                 INSERT INTO tenants (id, name, subnet_prefix, created, version)
                     VALUES ('{tenant}', 't', 24, 0, 1);
                 INSERT INTO users (id, name, password_hash, created, version)
                     VALUES ('{user}', 'u', 'h', 0, 1);
                 INSERT INTO roles VALUES ('{user}', '{tenant}', 'member');"
            ))
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        let (tenant, user) = (tenant.parse().unwrap(), user.parse().unwrap());
        assert_eq!(store.tenant(tenant).unwrap().description, "");
        let u = store.user(user).unwrap();
        assert!(u.enabled);
        assert_eq!(u.default_project, None);
        assert_eq!(store.roles_of_user(user).unwrap()[0].role, Role::Member);
        let cred = store
            .create_app_credential(
                NewAppCredential {
                    user,
                    project: tenant,
                    name: "ci".into(),
                    description: String::new(),
                    secret_hash: "h".into(),
                    roles: vec![Role::Reader],
                    expires: None,
                    unrestricted: false,
                },
                1,
            )
            .unwrap();
        assert_eq!(store.app_credentials(user).unwrap(), vec![cred]);
    }
}
