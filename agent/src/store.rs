//! The state directory: one record per instance (its spec and desired state) and the
//! maintenance flag, each written atomically so that a kill -9 at any point leaves either the
//! old file or the new one, never a torn one.
//!
//! Layout: `<state-dir>/instances/<uuid>.json` (a [`Record`] in JSON), temporary files
//! `<state-dir>/instances/.<uuid>.json.tmp` while one is written, and `<state-dir>/maintenance`
//! while the node is evacuated. A write is: temporary file, write, fsync, rename over the
//! record, fsync the directory. Loading ignores (and removes) temporary files. All calls block:
//! the core runs them on tokio's blocking pool.
//!
//! Records hold the user data: `instances/` is mode 0700 and every file written there 0600,
//! whatever the umask.
//!
//! [`Store::memory`] keeps the records in memory instead, for a core whose records need not
//! outlive it: an off-host operation's (its durable record is its claim in the shared store, and
//! a replica that dies is replaced by a takeover, never by reading what it left on disk).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use uuid::Uuid;

use crate::model::{InstanceSpec, StopCause};

/// The version written in every record.
pub const RECORD_VERSION: u32 = 1;

/// A state directory operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file system call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A record could not be encoded (not expected to happen).
    #[error("encoding the record of {instance}: {source}")]
    Encode {
        /// The instance.
        instance: Uuid,
        /// Why.
        source: serde_json::Error,
    },
    /// A record could not be read back.
    #[error("decoding the record of {instance}: {source}")]
    Decode {
        /// The instance.
        instance: Uuid,
        /// Why.
        source: serde_json::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// What should become of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Desired {
    /// It should run here.
    Running,
    /// It should stay here powered off, disks kept, until a START with `restart`.
    Stopped {
        /// Why it was powered off (a RESTORE boots those an EVACUATE stopped).
        cause: StopCause,
    },
    /// It should stay frozen in memory.
    Paused,
    /// It should stay saved to disk until a resume.
    Suspended,
    /// It is being removed (`stop: None`; records written by agents before stops kept
    /// instances may also say `stop` with a cause: those are removed too, and reported
    /// deleted).
    Removing {
        /// Why it was being stopped, when it is not a plain delete.
        stop: Option<StopCause>,
    },
}

/// One instance's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The record format version ([`RECORD_VERSION`]).
    pub version: u32,
    /// What should become of the instance.
    pub desired: Desired,
    /// What it is made from.
    pub spec: InstanceSpec,
}

impl Record {
    /// A record of the current version.
    pub fn new(spec: InstanceSpec, desired: Desired) -> Record {
        Record {
            version: RECORD_VERSION,
            desired,
            spec,
        }
    }
}

/// What [`Store::load`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The records that read back.
    pub records: Vec<Record>,
    /// Instances whose record exists but does not read back (damaged outside the agent): their
    /// leftovers are kept, and a START for them is refused with `instance_exists`.
    pub unreadable: Vec<Uuid>,
    /// Whether the node is evacuated.
    pub maintenance: bool,
}

struct Paths {
    root: PathBuf,
    instances: PathBuf,
    maintenance: PathBuf,
}

impl Paths {
    fn record(&self, instance: Uuid) -> PathBuf {
        self.instances.join(format!("{instance}.json"))
    }

    fn temp(&self, instance: Uuid) -> PathBuf {
        self.instances.join(format!(".{instance}.json.tmp"))
    }
}

/// Where a store's records are, as one call uses them.
enum At<'s> {
    Dir(&'s Paths),
    Memory(MutexGuard<'s, Memory>),
}

/// Records kept in memory ([`Store::memory`]).
#[derive(Default)]
struct Memory {
    records: BTreeMap<Uuid, Record>,
    maintenance: bool,
}

#[derive(Clone)]
enum Backing {
    Dir(Arc<Paths>),
    Memory(Arc<Mutex<Memory>>),
}

/// The state directory (or records in memory). Clones share it.
#[derive(Clone)]
pub struct Store {
    backing: Backing,
}

impl Store {
    /// Opens the state directory, making it (and `instances/`, mode 0700) if it is not there.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        let instances = root.join("instances");
        support::private::dir(&instances).map_err(io_err("creating", &instances))?;
        Ok(Store {
            backing: Backing::Dir(Arc::new(Paths {
                root: root.to_owned(),
                instances,
                maintenance: root.join("maintenance"),
            })),
        })
    }

    /// An empty store whose records live in memory only (module docs): nothing touches a disk.
    pub fn memory() -> Store {
        Store {
            backing: Backing::Memory(Arc::default()),
        }
    }

    /// The directory, or the records in memory (locked).
    fn at(&self) -> At<'_> {
        match &self.backing {
            Backing::Dir(paths) => At::Dir(paths),
            Backing::Memory(m) => At::Memory(m.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }

    fn paths(&self) -> Option<&Paths> {
        match &self.backing {
            Backing::Dir(paths) => Some(paths),
            Backing::Memory(_) => None,
        }
    }

    /// The state directory (`None` in memory).
    pub fn root(&self) -> Option<&Path> {
        self.paths().map(|p| p.root.as_path())
    }

    /// The path of an instance's record (`None` in memory).
    pub fn record_path(&self, instance: Uuid) -> Option<PathBuf> {
        self.paths().map(|p| p.record(instance))
    }

    /// Reads every record and the maintenance flag; removes temporary files left by a crash.
    pub fn load(&self) -> Result<Loaded, StoreError> {
        let paths = match self.at() {
            At::Dir(paths) => paths,
            At::Memory(m) => {
                return Ok(Loaded {
                    records: m.records.values().cloned().collect(),
                    unreadable: Vec::new(),
                    maintenance: m.maintenance,
                });
            }
        };
        let dir = &paths.instances;
        let mut loaded = Loaded {
            maintenance: paths.maintenance.exists(),
            ..Loaded::default()
        };
        for entry in fs::read_dir(dir).map_err(io_err("reading", dir))? {
            let entry = entry.map_err(io_err("reading", dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') && name.ends_with(".tmp") {
                // A write that did not reach its rename: the record it was replacing (if
                // any) is intact. Losing the temporary file loses nothing.
                if let Err(e) = fs::remove_file(entry.path()) {
                    tracing::warn!(path = %entry.path().display(), error = %e, "removing a stale temporary record");
                }
                continue;
            }
            let Some(instance) = name
                .strip_suffix(".json")
                .and_then(|s| s.parse::<Uuid>().ok())
            else {
                continue;
            };
            let path = entry.path();
            let bytes = fs::read(&path).map_err(io_err("reading", &path))?;
            match serde_json::from_slice::<Record>(&bytes) {
                Ok(mut r) if r.spec.instance == instance && r.version == RECORD_VERSION => {
                    r.spec.settle_role();
                    loaded.records.push(r)
                }
                Ok(_) => {
                    tracing::warn!(path = %path.display(), "record of another instance or version");
                    loaded.unreadable.push(instance);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable record");
                    loaded.unreadable.push(instance);
                }
            }
        }
        loaded.records.sort_by_key(|r| r.spec.instance);
        loaded.unreadable.sort();
        Ok(loaded)
    }

    /// Writes an instance's record atomically (replacing the one there).
    pub fn write(&self, record: &Record) -> Result<(), StoreError> {
        let instance = record.spec.instance;
        let paths = match self.at() {
            At::Dir(paths) => paths,
            At::Memory(mut m) => {
                m.records.insert(instance, record.clone());
                return Ok(());
            }
        };
        let mut bytes = serde_json::to_vec_pretty(record)
            .map_err(|source| StoreError::Encode { instance, source })?;
        bytes.push(b'\n');
        write_atomic(&paths.temp(instance), &paths.record(instance), &bytes)
    }

    /// Replaces the spec in an instance's record, keeping what the record wants; nothing to do
    /// if there is no record (the instance is being forgotten).
    pub fn update_spec(&self, spec: InstanceSpec) -> Result<(), StoreError> {
        let path = match self.at() {
            At::Dir(paths) => paths.record(spec.instance),
            At::Memory(mut m) => {
                if let Some(record) = m.records.get_mut(&spec.instance) {
                    record.spec = spec;
                }
                return Ok(());
            }
        };
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("reading", &path)(e)),
        };
        let mut record: Record =
            serde_json::from_slice(&bytes).map_err(|source| StoreError::Decode {
                instance: spec.instance,
                source,
            })?;
        record.spec = spec;
        self.write(&record)
    }

    /// Removes an instance's record (nothing to do if there is none).
    pub fn remove(&self, instance: Uuid) -> Result<(), StoreError> {
        match self.at() {
            At::Dir(paths) => remove_durably(&paths.record(instance)),
            At::Memory(mut m) => {
                m.records.remove(&instance);
                Ok(())
            }
        }
    }

    /// Sets or clears the maintenance flag, durably.
    pub fn set_maintenance(&self, on: bool) -> Result<(), StoreError> {
        let paths = match self.at() {
            At::Dir(paths) => paths,
            At::Memory(mut m) => {
                m.maintenance = on;
                return Ok(());
            }
        };
        let flag = &paths.maintenance;
        if on {
            let temp = paths.root.join(".maintenance.tmp");
            write_atomic(&temp, flag, b"evacuated\n")
        } else {
            remove_durably(flag)
        }
    }
}

/// Temporary file (mode 0600), write, fsync, rename over `path`, fsync the directory.
fn write_atomic(temp: &Path, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut file = support::private::create(temp).map_err(io_err("creating", temp))?;
    file.write_all(bytes).map_err(io_err("writing", temp))?;
    file.sync_all().map_err(io_err("syncing", temp))?;
    drop(file);
    fs::rename(temp, path).map_err(io_err("renaming to", path))?;
    sync_parent(path)
}

fn remove_durably(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Ok(()) => sync_parent(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("removing", path)(e)),
    }
}

fn sync_parent(path: &Path) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Firmware, Resources, VmKind};

    fn spec(n: u128, image: &str) -> InstanceSpec {
        InstanceSpec {
            instance: Uuid::from_u128(n),
            tenant: Uuid::from_u128(100),
            workload: Uuid::from_u128(200),
            kind: VmKind::Sim,
            role: crate::model::InstanceRole::Workload,
            firmware: Firmware::Efi,
            image: image.into(),
            resources: Resources {
                vcpus: 1,
                mem_mb: 128,
                disk_mb: 1024,
            },
            nic: None,
            disks: Vec::new(),
            volumes: Vec::new(),
            user_data: Some("#cloud-config\n".into()),
            meta_data: Default::default(),
            restart: false,
            kernel: None,
        }
    }

    #[test]
    fn records_round_trip_and_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = Record::new(spec(1, "debian"), Desired::Running);
        let b = Record::new(
            spec(2, "fedora"),
            Desired::Removing {
                stop: Some(StopCause::Evacuated),
            },
        );
        store.write(&a).unwrap();
        store.write(&b).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.records, vec![a.clone(), b]);
        assert!(loaded.unreadable.is_empty() && !loaded.maintenance);
        store.remove(Uuid::from_u128(2)).unwrap();
        store.remove(Uuid::from_u128(2)).unwrap();
        assert_eq!(store.load().unwrap().records, vec![a]);
    }

    /// Records hold user data: the agent's alone, whatever the umask left on the directory.
    #[test]
    fn records_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let dir = tempfile::tempdir().unwrap();
        let instances = dir.path().join("instances");
        fs::create_dir(&instances).unwrap();
        fs::set_permissions(&instances, fs::Permissions::from_mode(0o755)).unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(mode(&instances), 0o700);
        let record = Record::new(spec(1, "debian"), Desired::Running);
        store.write(&record).unwrap();
        assert_eq!(mode(&store.record_path(Uuid::from_u128(1)).unwrap()), 0o600);
        // A temporary file left readable by a crash is not what the next write leaves.
        let temp = store.paths().unwrap().temp(Uuid::from_u128(1));
        fs::write(&temp, b"torn").unwrap();
        fs::set_permissions(&temp, fs::Permissions::from_mode(0o644)).unwrap();
        store.write(&record).unwrap();
        assert_eq!(mode(&store.record_path(Uuid::from_u128(1)).unwrap()), 0o600);
    }

    #[test]
    fn maintenance_flag_persists_until_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.set_maintenance(true).unwrap();
        assert!(Store::open(dir.path()).unwrap().load().unwrap().maintenance);
        store.set_maintenance(false).unwrap();
        store.set_maintenance(false).unwrap();
        assert!(!store.load().unwrap().maintenance);
    }

    /// A kill -9 during a write leaves the temporary file cut at any length: whatever the
    /// length, loading finds the old record intact and drops the temporary file.
    #[test]
    fn a_torn_write_never_replaces_a_good_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let old = Record::new(spec(7, "old-image"), Desired::Running);
        store.write(&old).unwrap();
        let new = Record::new(spec(7, "new-image"), Desired::Removing { stop: None });
        let new_bytes = serde_json::to_vec_pretty(&new).unwrap();
        let temp = store.paths().unwrap().temp(Uuid::from_u128(7));
        for cut in 0..=new_bytes.len() {
            fs::write(&temp, &new_bytes[..cut]).unwrap();
            let loaded = store.load().unwrap();
            assert_eq!(loaded.records, vec![old.clone()], "cut at {cut}");
            assert!(loaded.unreadable.is_empty());
            assert!(!temp.exists(), "the temporary file is cleaned up");
        }
        store.write(&new).unwrap();
        assert_eq!(store.load().unwrap().records, vec![new]);
    }

    #[test]
    fn garbage_temporary_files_of_new_instances_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        fs::write(
            store.paths().unwrap().temp(Uuid::from_u128(9)),
            b"\0\xff{garbage",
        )
        .unwrap();
        fs::write(dir.path().join("instances/notes.txt"), b"not ours").unwrap();
        fs::write(dir.path().join(".maintenance.tmp"), b"").unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded, Loaded::default());
    }

    #[test]
    fn records_in_memory_round_trip_and_touch_no_disk() {
        let store = Store::memory();
        assert_eq!(store.root(), None);
        assert_eq!(store.record_path(Uuid::from_u128(1)), None);
        let a = Record::new(spec(1, "debian"), Desired::Running);
        let b = Record::new(spec(2, "fedora"), Desired::Running);
        store.write(&b).unwrap();
        store.write(&a).unwrap();
        let mut newer = spec(1, "debian");
        newer.user_data = None;
        store.update_spec(newer.clone()).unwrap();
        // A record that is not there is not made by an update.
        store.update_spec(spec(3, "x")).unwrap();
        store.set_maintenance(true).unwrap();
        let shared = store.clone();
        let loaded = shared.load().unwrap();
        assert_eq!(
            loaded.records,
            vec![Record::new(newer, Desired::Running), b.clone()]
        );
        assert!(loaded.maintenance && loaded.unreadable.is_empty());
        store.remove(Uuid::from_u128(1)).unwrap();
        store.set_maintenance(false).unwrap();
        assert_eq!(
            Store::memory().load().unwrap(),
            Loaded::default(),
            "each memory store is its own"
        );
        let loaded = store.load().unwrap();
        assert_eq!((loaded.records, loaded.maintenance), (vec![b], false));
    }

    /// Records damaged outside the agent (not by a crash: writes are atomic) are reported as
    /// unreadable, never a panic or an error that stops the agent.
    #[test]
    fn damaged_records_are_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let good = Record::new(spec(1, "debian"), Desired::Running);
        store.write(&good).unwrap();
        fs::write(
            store.record_path(Uuid::from_u128(2)).unwrap(),
            b"{\"version\":1,",
        )
        .unwrap();
        let other = Record::new(spec(4, "x"), Desired::Running);
        fs::write(
            store.record_path(Uuid::from_u128(3)).unwrap(),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.records, vec![good]);
        assert_eq!(
            loaded.unreadable,
            vec![Uuid::from_u128(2), Uuid::from_u128(3)]
        );
    }
}
