//! `cumulo-controller launcher-key`: the key that opens one off-host host's sealed launcher key
//! ([`store::sealed`]), for that host's `cumulo-agent --remote --creds-key FILE` replicas.
//! Derived from the CA key the controllers issue launcher certificates with (their
//! `--launcher-ca-key`), so it is the same on every controller and needs no store write; run it
//! once per host, again only when the CA key changes.

use std::path::PathBuf;

use clap::Parser;
use store::StoreError;
use store::sealed::SealError;
use uuid::Uuid;

/// cumulo-controller launcher-key: writes (or prints) the key that opens host HOST's launcher
/// key in the store; give it to that host's replicas only (`--creds-key`).
#[derive(Debug, Parser)]
#[command(
    name = "cumulo-controller launcher-key",
    version,
    args_override_self = true
)]
pub struct LauncherKeyArgs {
    /// The CA key (PEM) the controllers issue launcher certificates with (their
    /// `--launcher-ca-key`).
    #[arg(long, env = "CUMULO_CONTROLLER_LAUNCHER_CA_KEY")]
    pub launcher_ca_key: PathBuf,
    /// The off-host host: its UUID, or its name (a name needs `--store`).
    #[arg(long)]
    pub host: String,
    /// The controllers' store, to find the host by name (or check that a UUID is one).
    #[arg(long, env = "CUMULO_CONTROLLER_STORE")]
    pub store: Option<String>,
    /// How the etcd store is reached (TLS flags: docs/etcd-store.md).
    #[command(flatten)]
    pub etcd: store::EtcdArgs,
    /// Write the key to this file (mode 0600, replaced atomically) instead of printing it.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Why no key was given.
#[derive(Debug, thiserror::Error)]
pub enum LauncherKeyError {
    /// The CA key cannot be read or used.
    #[error("--launcher-ca-key {path}: {why}")]
    CaKey {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// The host is not a UUID and no store was given to find it by name.
    #[error("--host {0}: not a UUID; give --store to find an off-host host by name")]
    NeedStore(String),
    /// The store has no such off-host host.
    #[error("no off-host host {0} in the store")]
    NoHost(String),
    /// The store failed or refused.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The key file cannot be written.
    #[error(transparent)]
    Write(#[from] SealError),
}

/// Whether the command line asks for `launcher-key`.
pub fn wanted(args: &[String]) -> bool {
    args.get(1).is_some_and(|a| a == "launcher-key")
}

/// Derives the host's key; writes it to `--out` and says so, or returns its text to print.
pub fn run(args: &LauncherKeyArgs) -> Result<String, LauncherKeyError> {
    let ca_key = |why: String| LauncherKeyError::CaKey {
        path: args.launcher_ca_key.display().to_string(),
        why,
    };
    let pem = std::fs::read_to_string(&args.launcher_ca_key).map_err(|e| ca_key(e.to_string()))?;
    let master = crate::creds::sealing_master(&pem).map_err(|e| ca_key(e.to_string()))?;
    let (id, name) = match &args.store {
        Some(location) => {
            let etcd = args.etcd.transport(location)?;
            let store = store::open(location, etcd.as_ref())?;
            let hosts = store.remote_hosts()?;
            let by_id = Uuid::parse_str(&args.host).ok();
            let host = hosts
                .into_iter()
                .find(|h| Some(h.id) == by_id || h.name == args.host)
                .ok_or_else(|| LauncherKeyError::NoHost(args.host.clone()))?;
            (host.id, Some(host.name))
        }
        None => (
            Uuid::parse_str(&args.host)
                .map_err(|_| LauncherKeyError::NeedStore(args.host.clone()))?,
            None,
        ),
    };
    let key = master.host_key(id);
    let Some(out) = &args.out else {
        return Ok(key.to_text());
    };
    key.write(out)?;
    let named = name.map(|n| format!(" ({n})")).unwrap_or_default();
    Ok(format!(
        "the launcher key of host {id}{named} is in {} (mode 0600): give it to that host's \
         replicas only (cumulo-agent --remote ... --creds-key FILE)",
        out.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::OperationQueue;

    fn args(dir: &std::path::Path, host: &str) -> LauncherKeyArgs {
        let key = rcgen::KeyPair::generate().unwrap();
        let path = dir.join("ca.key");
        if !path.exists() {
            std::fs::write(&path, key.serialize_pem()).unwrap();
        }
        LauncherKeyArgs {
            launcher_ca_key: path,
            host: host.into(),
            store: None,
            etcd: store::EtcdArgs::default(),
            out: None,
        }
    }

    #[test]
    fn the_key_of_a_host_by_uuid_or_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        let by_uuid = args(dir.path(), &id.to_string());
        let printed = run(&by_uuid).unwrap();
        let key = store::sealed::HostKey::parse(&printed).unwrap();
        assert_eq!(key.host(), id);
        let pem = std::fs::read_to_string(&by_uuid.launcher_ca_key).unwrap();
        let master = crate::creds::sealing_master(&pem).unwrap();
        assert_eq!(master.host_key(id), key);

        // A name needs the store; there, it finds the host.
        assert!(matches!(
            run(&args(dir.path(), "edge")),
            Err(LauncherKeyError::NeedStore(_))
        ));
        let db = dir.path().join("c.db");
        let host = store::SqliteStore::open(&db)
            .unwrap()
            .create_remote_host(store::NewRemoteHost {
                name: "edge".into(),
                libvirt_uri: "qemu+tls://edge/system".into(),
            })
            .unwrap();
        let out = dir.path().join("edge.key");
        let by_name = LauncherKeyArgs {
            store: Some(db.display().to_string()),
            out: Some(out.clone()),
            ..args(dir.path(), "edge")
        };
        let said = run(&by_name).unwrap();
        assert!(said.contains(&host.id.to_string()), "{said}");
        assert_eq!(
            store::sealed::HostKey::read(&out).unwrap(),
            master.host_key(host.id)
        );
        let unknown = LauncherKeyArgs {
            host: "nowhere".into(),
            ..by_name
        };
        assert!(matches!(run(&unknown), Err(LauncherKeyError::NoHost(_))));
        let bad_ca = LauncherKeyArgs {
            launcher_ca_key: dir.path().join("missing.key"),
            ..args(dir.path(), &id.to_string())
        };
        assert!(matches!(run(&bad_ca), Err(LauncherKeyError::CaKey { .. })));
    }
}
