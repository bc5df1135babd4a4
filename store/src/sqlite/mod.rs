//! [`SqliteStore`]: the embedded store, one SQLite file (bundled SQLite, WAL journal, foreign keys
//! on, a busy timeout), with versioned migrations (`schema.rs`).
//!
//! Every write runs in a `BEGIN IMMEDIATE` transaction, which takes SQLite's single write lock at
//! the start: read-check-write sequences (quota, address allocation, version compare) are
//! serialised between threads and processes. Reads run in deferred transactions and see one
//! snapshot. Connections come from a small pool so that readers do not wait for each other.
//!
//! Durability: `synchronous = NORMAL` in WAL mode, so a commit survives a process crash; after a
//! power loss the last commits may be rolled back, never half-applied.
//!
//! Secrecy: the file holds password hashes, launcher keys and user data, so it is made (or set)
//! mode 0600 before SQLite opens it, whatever the umask. SQLite gives the `-wal` and `-shm` files
//! it makes the database file's mode (its own default, 0644, only applies to a file it creates);
//! those left by an earlier run are set to 0600 too.
//!
//! This file holds the connections and transactions; each concern's trait is implemented in the
//! file of that concern (`identity.rs`, `catalog.rs`, `instances.rs`, `volumes.rs`, `events.rs`,
//! `actions.rs`, `queue.rs`), over functions that run inside a transaction given to them, so that one
//! transaction may combine several (creating an instance reads its tenant and workload).

mod actions;
mod app_creds;
mod catalog;
mod events;
mod flavors;
mod identity;
mod image_members;
mod instances;
mod keypairs;
mod networking;
mod nodes;
mod queue;
mod schema;
mod server_groups;
mod volumes;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::common::DEFAULT_EVENT_CAPACITY;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use uuid::Uuid;

use super::*;

/// How long a connection waits for another's write lock before failing with `Backend`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle connections kept in the pool.
const POOL_KEEP: usize = 8;
/// Prepared statements each connection keeps (`prepare_cached`): more than the distinct
/// statements of an instance's launch and reports together, so that those are parsed once per
/// connection rather than again each time the cache (rusqlite's default: 16) turns over.
const STATEMENTS_KEPT: usize = 256;
/// The page cache of each connection, in KiB.
const PAGE_CACHE_KIB: i64 = 16 * 1024;
/// The SQLite store. Cheap to share between threads (`Arc<SqliteStore>`).
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    pool: Mutex<Vec<Connection>>,
    event_capacity: u64,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and migrates it to the newest schema.
    /// A database written by a newer controller is refused with [`StoreError::SchemaTooNew`].
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        SqliteStore::open_with(path, DEFAULT_EVENT_CAPACITY)
    }

    /// As [`SqliteStore::open`], keeping at most `event_capacity` events (at least 1).
    pub fn open_with(path: impl AsRef<Path>, event_capacity: u64) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        make_private(&path)?;
        let mut conn = connect(&path)?;
        schema::migrate(&mut conn)?;
        Ok(SqliteStore {
            path,
            pool: Mutex::new(vec![conn]),
            event_capacity: event_capacity.max(1),
        })
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<u32> {
        self.with_conn(|conn| schema::current_version(conn))
    }

    /// The newest schema version this code knows.
    pub fn known_schema_version() -> u32 {
        schema::known_version()
    }

    fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let pooled = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => connect(&self.path)?,
        };
        let result = f(&mut conn);
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL_KEEP {
            pool.push(conn);
        }
        result
    }

    /// Runs `f` in a write transaction (`BEGIN IMMEDIATE`), committed if `f` succeeds. Within a
    /// batch of this thread ([`SqliteStore::run_batch`]): in a savepoint of the batch's
    /// transaction, rolled back to it if `f` fails.
    fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        if self.batching() {
            return self
                .in_batch(|conn| {
                    // SQLite may have rolled the whole transaction back (a full disk, an I/O
                    // error): then nothing more is written in this batch, which fails.
                    if conn.is_autocommit() {
                        return aborted_batch();
                    }
                    run_cached(conn, "SAVEPOINT cumulo_write")?;
                    let out = f(conn);
                    if conn.is_autocommit() {
                        return out.and_then(|_| aborted_batch());
                    }
                    let closed = match &out {
                        Ok(_) => run_cached(conn, "RELEASE cumulo_write"),
                        Err(_) => undo_savepoint(conn),
                    };
                    if let Err(e) = closed {
                        // Not kept: undone, if the savepoint can still be undone.
                        let _ = undo_savepoint(conn);
                        return out.and(Err(e.into()));
                    }
                    out
                })
                .unwrap_or_else(lost_batch);
        }
        self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })
    }

    /// Runs `f` in a read transaction (one snapshot); within a batch of this thread, in the
    /// batch's transaction (which sees the batch's writes).
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        if self.batching() {
            return self.in_batch(f).unwrap_or_else(lost_batch);
        }
        self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let out = f(&tx)?;
            tx.finish()?;
            Ok(out)
        })
    }

    /// This store's key in [`BATCH`].
    fn batch_key(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Whether this thread runs a batch of this store.
    fn batching(&self) -> bool {
        self.in_batch(|_| ()).is_some()
    }

    /// `f` on the connection of this thread's batch of this store, if there is one.
    fn in_batch<T>(&self, f: impl FnOnce(&Connection) -> T) -> Option<T> {
        BATCH.with(|batch| match &*batch.borrow() {
            Some((key, conn)) if *key == self.batch_key() => Some(f(conn)),
            _ => None,
        })
    }

    /// [`InstanceStore::batch`]: `f` with this thread's reads and writes of this store in one
    /// `BEGIN IMMEDIATE` transaction, committed when `f` returns (rolled back if it panics).
    pub(crate) fn run_batch(&self, f: &mut dyn FnMut()) -> Result<()> {
        if self.batching() {
            // Already in one: the outer batch commits.
            f();
            return Ok(());
        }
        let pooled = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => connect(&self.path)?,
        };
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            if pool.len() < POOL_KEEP {
                pool.push(conn);
            }
            return Err(e.into());
        }
        BATCH.with(|batch| *batch.borrow_mut() = Some((self.batch_key(), conn)));
        // Takes the connection back even if `f` panics (then rolls back and drops it).
        struct Unpin {
            committed: bool,
        }
        impl Drop for Unpin {
            fn drop(&mut self) {
                if !self.committed
                    && let Some((_, conn)) = BATCH.with(|batch| batch.borrow_mut().take())
                {
                    let _ = conn.execute_batch("ROLLBACK");
                }
            }
        }
        let mut unpin = Unpin { committed: false };
        f();
        unpin.committed = true;
        let Some((_, conn)) = BATCH.with(|batch| batch.borrow_mut().take()) else {
            return lost_batch();
        };
        // A transaction SQLite rolled back (see `write`) is not committed: the batch failed.
        let committed = if conn.is_autocommit() {
            aborted_batch()
        } else {
            conn.execute_batch("COMMIT").map_err(StoreError::from)
        };
        if committed.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL_KEEP {
            pool.push(conn);
        }
        committed
    }
}

/// The error of a write in (and of) a batch whose transaction SQLite rolled back.
fn aborted_batch<T>() -> Result<T> {
    Err(StoreError::Backend(
        "the batch's transaction was rolled back by SQLite; nothing of it is kept".into(),
    ))
}

/// The error of a batch whose connection is not where it was a moment ago (never expected).
fn lost_batch<T>() -> Result<T> {
    Err(StoreError::Backend(
        "the batch's connection went missing".into(),
    ))
}

thread_local! {
    /// The batch this thread is running ([`SqliteStore::run_batch`]): its store's key and the
    /// connection whose transaction it is.
    static BATCH: std::cell::RefCell<Option<(usize, Connection)>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes the database file at `path` mode 0600 (created empty if missing: SQLite takes an empty
/// file for a new database), and its `-wal` and `-shm` files if there are any.
fn make_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let failed = |p: &Path| {
        let p = p.display().to_string();
        move |e: std::io::Error| StoreError::Backend(format!("{p}: {e}"))
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(failed(path))?;
    let private = std::fs::Permissions::from_mode(0o600);
    file.set_permissions(private.clone())
        .map_err(failed(path))?;
    for suffix in ["-wal", "-shm"] {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        let side = PathBuf::from(side);
        match std::fs::set_permissions(&side, private.clone()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(&side)(e)),
        }
    }
    Ok(())
}

fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // A batch's savepoints journal the pages each write changes: in memory, not in a temporary
    // file written and read back through the kernel (a batch's one write at a time). SQLite
    // also keeps there what it sorts or groups without an index: the largest, the counts by
    // state, is a few bytes per instance.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // Pages kept per connection (a negative size is KiB), filled as pages are read: the
    // indexes a node's report and a launch walk (the default is 2 MiB). SQLite drops a
    // connection's cache when another has written since its last read, so it mostly serves
    // the reads within one transaction; each connection of the pool, and each opened beyond it
    // when all are busy, may hold this much.
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
    Ok(conn)
}

/// `query_row` and `execute` with the statement prepared once per connection (its cache holds
/// [`STATEMENTS_KEPT`]): for the statements of every launch and report, which SQLite would
/// otherwise parse and plan again each time.
pub(crate) trait Cached {
    /// As [`Connection::query_row`].
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>;
    /// As [`Connection::execute`].
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize>;
}

impl Cached for Connection {
    fn query_row_cached<T, P, F>(&self, sql: &str, params: P, f: F) -> rusqlite::Result<T>
    where
        P: rusqlite::Params,
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, params: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }
}

/// Runs `sql`, one statement that returns no rows, prepared once per connection.
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Undoes and closes a batch's write savepoint.
fn undo_savepoint(conn: &Connection) -> rusqlite::Result<()> {
    run_cached(conn, "ROLLBACK TO cumulo_write")?;
    run_cached(conn, "RELEASE cumulo_write")
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> StoreError {
        match err.sqlite_error_code() {
            Some(ErrorCode::ConstraintViolation) => StoreError::Conflict(err.to_string()),
            Some(ErrorCode::DiskFull) => StoreError::Full(err.to_string()),
            _ => StoreError::Backend(err.to_string()),
        }
    }
}

// --- column conversions and row helpers, shared by the submodules ---

/// An unsigned figure as an SQLite integer (`Invalid` past `i64::MAX`).
pub(crate) fn int(value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| StoreError::Invalid(format!("{value} is too large")))
}

/// A conversion failure for column `idx`.
pub(crate) fn bad_column(idx: usize, what: impl Into<String>) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, what.into().into())
}

/// A UUID column.
pub(crate) fn uuid_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Uuid> {
    let text: String = row.get(idx)?;
    Uuid::parse_str(&text).map_err(|e| bad_column(idx, e.to_string()))
}

/// A nullable UUID column.
pub(crate) fn opt_uuid_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Option<Uuid>> {
    let text: Option<String> = row.get(idx)?;
    text.map(|t| Uuid::parse_str(&t).map_err(|e| bad_column(idx, e.to_string())))
        .transpose()
}

/// An unsigned column.
pub(crate) fn u64_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(idx)?;
    u64::try_from(v).map_err(|e| bad_column(idx, e.to_string()))
}

/// A 32-bit unsigned column.
pub(crate) fn u32_at(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u32> {
    let v: i64 = row.get(idx)?;
    u32::try_from(v).map_err(|e| bad_column(idx, e.to_string()))
}

/// A unique-constraint failure as a readable `Conflict`.
fn duplicate(err: rusqlite::Error, kind: &str, name: &str) -> StoreError {
    match StoreError::from(err) {
        StoreError::Conflict(_) => StoreError::Conflict(format!("{kind} {name:?} already exists")),
        other => other,
    }
}

/// Deletes one row of `table` by id; `NotFound` if absent, `Conflict` if still referred to.
fn delete_row(tx: &Connection, table: &str, kind: &'static str, id: Uuid) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl crate::suite::Fixture for Fixture {
        type S = SqliteStore;
        fn new() -> Fixture {
            Fixture {
                dir: tempfile::tempdir().expect("temp dir"),
            }
        }
        fn open(&self) -> SqliteStore {
            SqliteStore::open(self.dir.path().join("store.db")).expect("open store")
        }
        fn raw(&self) -> Vec<u8> {
            ["store.db", "store.db-wal"]
                .iter()
                .flat_map(|f| std::fs::read(self.dir.path().join(f)).unwrap_or_default())
                .collect()
        }
    }

    crate::store_suite!(Fixture);

    /// A batch is one transaction: another thread sees none of its writes until it returns, and
    /// then all; a batch that panics leaves nothing, and the store goes on.
    #[test]
    fn a_batch_commits_at_once_and_a_panic_leaves_nothing() {
        use crate::suite::Fixture as _;
        let fx = Fixture::new();
        let store = std::sync::Arc::new(fx.open());
        let (t, w) = crate::suite::tenant_and_workload(&*store, "acme", Quota::default(), 24);
        let count = |store: &std::sync::Arc<SqliteStore>| {
            let store = store.clone();
            std::thread::spawn(move || store.instance_counts().unwrap().values().sum::<u64>())
                .join()
                .unwrap()
        };
        store
            .batch(&mut || {
                for k in 0..3 {
                    let name = format!("vm-{k}");
                    store
                        .create_instance(crate::suite::new_instance(&t, &w, &name))
                        .unwrap();
                }
                assert_eq!(count(&store), 0, "another thread sees the batch's writes");
            })
            .unwrap();
        assert_eq!(count(&store), 3);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            store
                .batch(&mut || {
                    store
                        .create_instance(crate::suite::new_instance(&t, &w, "lost"))
                        .unwrap();
                    panic!("in the batch");
                })
                .unwrap();
        }));
        assert!(panicked.is_err());
        assert_eq!(count(&store), 3);
        store
            .create_instance(crate::suite::new_instance(&t, &w, "after"))
            .unwrap();
        assert_eq!(count(&store), 4);
    }

    /// A tenant's networking is read without the write lock: its reads go on, and see the last
    /// commit, while a batch (a launch) holds the lock; only the first read, which makes the
    /// `default` group, writes. (Were they to wait, they would fail after the busy timeout.)
    #[test]
    fn networking_reads_do_not_wait_for_a_batch() {
        use crate::suite::Fixture as _;
        let fx = Fixture::new();
        let store = std::sync::Arc::new(fx.open());
        let (t, w) = crate::suite::tenant_and_workload(&*store, "acme", Quota::default(), 24);
        let groups = store.security_groups(t.id).unwrap();
        assert_eq!(groups.len(), 1, "the first read makes the default group");
        let made = store
            .create_instance(crate::suite::new_instance(&t, &w, "vm"))
            .unwrap();
        let read = |store: &std::sync::Arc<SqliteStore>| {
            let store = store.clone();
            let tenant = t.id;
            std::thread::spawn(move || {
                let groups = store.security_groups(tenant).unwrap();
                let ports = store.port_groups(tenant).unwrap();
                let floating = store.floating_ips(tenant).unwrap();
                store.network_quota(tenant).unwrap();
                store.network_usage(tenant).unwrap();
                (groups, ports.default, floating.len())
            })
            .join()
            .unwrap()
        };
        store
            .batch(&mut || {
                store
                    .set_port_groups(t.id, made.id, &[groups[0].id])
                    .unwrap();
                let (seen, default, floating) = read(&store);
                assert_eq!(seen, groups);
                assert_eq!(default, groups[0].id);
                assert_eq!(floating, 0);
            })
            .unwrap();
        assert_eq!(store.port_groups(t.id).unwrap().of(made.id), [groups[0].id]);
    }

    /// The database, its WAL and its shared memory are the controller's alone: new (the
    /// test's umask would leave them readable), and left open by an earlier run.
    #[test]
    fn the_database_and_its_wal_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("controller.db");
        let files = ["", "-wal", "-shm"].map(|s| PathBuf::from(format!("{}{s}", path.display())));
        let store = SqliteStore::open(&path).unwrap();
        store
            .create_tenant(NewTenant {
                name: "t".into(),
                quota: Quota::default(),
                subnet_prefix: 24,
            })
            .unwrap();
        for file in &files {
            assert_eq!(mode(file), 0o600, "{}", file.display());
        }
        drop(store);
        for file in files.iter().filter(|f| f.exists()) {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let _store = SqliteStore::open(&path).unwrap();
        for file in files.iter().filter(|f| f.exists()) {
            assert_eq!(mode(file), 0o600, "{}", file.display());
        }
    }

    #[test]
    fn an_empty_file_is_migrated_to_the_newest_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.db");
        std::fs::File::create(&path).unwrap();
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.schema_version().unwrap(),
            SqliteStore::known_schema_version()
        );
        drop(store);
        // Opening again applies nothing and keeps the version.
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.schema_version().unwrap(),
            SqliteStore::known_schema_version()
        );
    }

    #[test]
    fn a_version_1_database_gains_the_operation_queue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(schema::MIGRATIONS[0]).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER NOT NULL);
             INSERT INTO schema_version (version) VALUES (1);",
        )
        .unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), schema::known_version());
        assert_eq!(
            store.claim_operation("r", Duration::from_secs(1)).unwrap(),
            None
        );
        let host = store
            .create_remote_host(NewRemoteHost {
                name: "edge".into(),
                libvirt_uri: "qemu+tcp://127.0.0.1/system".into(),
            })
            .unwrap();
        let op = store
            .enqueue_operation(NewOperation {
                host: host.id,
                instance: Uuid::new_v4(),
                kind: OperationKind::Start,
                payload: b"start".to_vec(),
            })
            .unwrap();
        let claimed = store
            .claim_operation("r", Duration::from_secs(60))
            .unwrap()
            .unwrap();
        assert_eq!(claimed.id, op.id);
        assert_eq!(
            claimed.claim.unwrap().token,
            1,
            "the first token of a store"
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("newer.db");
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let newer = i64::from(SqliteStore::known_schema_version()) + 1;
        conn.execute("UPDATE schema_version SET version = ?1", [newer])
            .unwrap();
        drop(conn);
        let err = SqliteStore::open(&path).unwrap_err();
        assert_eq!(
            err,
            StoreError::SchemaTooNew {
                found: SqliteStore::known_schema_version() + 1,
                known: SqliteStore::known_schema_version(),
            }
        );
        assert!(err.to_string().contains("newer"), "{err}");
    }

    #[test]
    fn a_failed_migration_leaves_the_file_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clash.db");
        // A table in the way of migration 1 makes it fail half-way.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE instances (x INTEGER);")
            .unwrap();
        drop(conn);
        assert!(matches!(
            SqliteStore::open(&path),
            Err(StoreError::Backend(_))
        ));
        let conn = Connection::open(&path).unwrap();
        assert_eq!(schema::current_version(&conn).unwrap(), 0);
        let tenants: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name = 'tenants'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tenants, 0, "migration 1 was rolled back");
    }

    #[test]
    fn the_event_log_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_with(dir.path().join("ev.db"), 5).unwrap();
        for n in 0..12 {
            store
                .append_event(NewEvent {
                    tenant: None,
                    kind: EventKind::Info,
                    message: format!("e{n}"),
                })
                .unwrap();
        }
        let kept: Vec<String> = store
            .events(Scope::All, None, 100)
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .collect();
        assert_eq!(kept, ["e7", "e8", "e9", "e10", "e11"]);
    }

    #[test]
    fn two_stores_on_one_file_share_the_quota() {
        // Two handles on one file, as two controller processes would have: the write lock of
        // SQLite, not a lock in memory, keeps the quota.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let first = SqliteStore::open(&path).unwrap();
        let second = SqliteStore::open(&path).unwrap();
        let tenant = first
            .create_tenant(NewTenant {
                name: "t".into(),
                quota: Quota {
                    instances: None,
                    vcpus: Some(6),
                    memory_mb: None,
                },
                subnet_prefix: 24,
            })
            .unwrap();
        let flavor = first
            .create_flavor(NewFlavor {
                name: "two".into(),
                vcpus: 2,
                memory_mb: 64,
                disk_gb: 1,
                is_public: true,
            })
            .unwrap();
        let image = first
            .create_image(NewImage {
                owner: None,
                name: "i".into(),
                kind: ImageKind::Raw,
                reference: "i.raw".into(),
            })
            .unwrap();
        let workload = second
            .create_workload(NewWorkload {
                owner: None,
                name: "w".into(),
                flavor: flavor.id,
                image: image.id,
                user_data: String::new(),
                ephemeral: false,
            })
            .unwrap();
        let new = || NewInstance {
            tenant: tenant.id,
            workload: workload.id,
            name: "vm".into(),
            key: None,
            metadata: Default::default(),
            user: None,
            reservation: None,
            zone: None,
        };
        let made: usize = std::thread::scope(|s| {
            let handles: Vec<_> = [&first, &second, &first, &second]
                .into_iter()
                .map(|store| {
                    s.spawn(move || {
                        (0..4)
                            .filter(|_| store.create_instance(new()).is_ok())
                            .count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(made, 3, "6 vCPUs hold three 2-vCPU instances");
        assert_eq!(second.usage(tenant.id).unwrap().vcpus, 6);
    }

    #[test]
    fn connections_have_wal_and_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("p.db")).unwrap();
        store
            .with_conn(|conn| {
                let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
                let fk: i64 = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
                assert_eq!(mode, "wal");
                assert_eq!(fk, 1);
                Ok(())
            })
            .unwrap();
    }
}
