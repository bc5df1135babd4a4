//! [`open`]: the store named by a path or a URL, as the controller's `--store` flag gives it.

use std::sync::Arc;

use super::{Result, Store, StoreError};

/// The key prefix of an `etcd://` URL without a path.
pub const DEFAULT_ETCD_PREFIX: &str = "/cumulo/";

/// How [`open`] reaches etcd: the [`EtcdTransport`](super::EtcdTransport) (a build without
/// etcd has none).
#[cfg(feature = "etcd")]
pub type EtcdSettings = super::EtcdTransport;
/// How [`open`] reaches etcd (a build without etcd has none).
#[cfg(not(feature = "etcd"))]
pub type EtcdSettings = std::convert::Infallible;

/// Where a store lives, parsed from the `--store` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An SQLite database file.
    Sqlite(std::path::PathBuf),
    /// etcd endpoints (`host:port`) and the key prefix.
    Etcd {
        /// The client endpoints.
        endpoints: Vec<String>,
        /// Every key starts with it (ends with `/`).
        prefix: String,
    },
}

impl StoreLocation {
    /// Parses `etcd://host:port[,host:port...][/prefix]` or a file path.
    pub fn parse(text: &str) -> Result<StoreLocation> {
        let Some(rest) = text.strip_prefix("etcd://") else {
            if text.is_empty() {
                return Err(StoreError::Invalid("empty store path".into()));
            }
            return Ok(StoreLocation::Sqlite(text.into()));
        };
        let (hosts, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let endpoints: Vec<String> = hosts.split(',').map(str::to_string).collect();
        for e in &endpoints {
            let port = e
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(_))) if !host.is_empty()) {
                return Err(StoreError::Invalid(format!(
                    "etcd endpoint {e:?} is not host:port (in {text:?})"
                )));
            }
        }
        let prefix = match path.trim_matches('/') {
            "" => DEFAULT_ETCD_PREFIX.to_string(),
            p => format!("/{p}/"),
        };
        Ok(StoreLocation::Etcd { endpoints, prefix })
    }
}

/// Opens the store at `url_or_path`: etcd for `etcd://host:port[,host:port...][/prefix]` (prefix
/// `/cumulo/` by default) over `etcd` (required for an etcd URL: TLS, or plain text when the
/// caller was explicitly told so), otherwise the SQLite database at that path. Blocks (connects,
/// migrates): from async code call it in `spawn_blocking`.
pub fn open(url_or_path: &str, etcd: Option<&EtcdSettings>) -> Result<Arc<dyn Store>> {
    #[cfg(not(feature = "etcd"))]
    let _ = etcd;
    let store: Arc<dyn Store> = match StoreLocation::parse(url_or_path)? {
        #[cfg(feature = "sqlite")]
        StoreLocation::Sqlite(path) => Arc::new(super::SqliteStore::open(path)?),
        #[cfg(feature = "etcd")]
        StoreLocation::Etcd { endpoints, prefix } => connect_etcd(&endpoints, &prefix, etcd)?,
        #[allow(unreachable_patterns)]
        other => {
            return Err(StoreError::Invalid(format!(
                "{other:?}: this build has no store of that kind"
            )));
        }
    };
    Ok(store)
}

/// Opens the shared store at `url` (`etcd://...`, as [`open`]) and nothing else: what a process
/// that shares the cluster state with the controllers opens (an off-host launcher replica). A
/// file path is refused, since SQLite serves one process; and a binary that calls only this
/// does not link SQLite even when Cargo built `store` with it for another member of the
/// workspace.
#[cfg(feature = "etcd")]
pub fn open_shared(url: &str, etcd: Option<&EtcdSettings>) -> Result<Arc<dyn Store>> {
    match StoreLocation::parse(url)? {
        StoreLocation::Etcd { endpoints, prefix } => connect_etcd(&endpoints, &prefix, etcd),
        StoreLocation::Sqlite(path) => Err(StoreError::Invalid(format!(
            "{}: the shared store is etcd (etcd://host:port[,host:port...][/prefix]); an SQLite \
             file serves one process only",
            path.display()
        ))),
    }
}

#[cfg(feature = "etcd")]
fn connect_etcd(
    endpoints: &[String],
    prefix: &str,
    etcd: Option<&EtcdSettings>,
) -> Result<Arc<dyn Store>> {
    let transport = etcd.ok_or_else(|| {
        StoreError::Invalid(
            "an etcd store needs its TLS settings (the etcd CA, a client certificate and key), \
             or plain text asked for explicitly"
                .into(),
        )
    })?;
    Ok(Arc::new(super::EtcdStore::connect(
        endpoints, prefix, transport,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "etcd")]
    #[test]
    fn the_shared_store_is_etcd_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let err = open_shared(path.to_str().unwrap(), None).err().unwrap();
        assert!(
            err.to_string().contains("SQLite file serves one process"),
            "{err}"
        );
        assert!(!path.exists(), "an SQLite file was made");
        let err = open_shared("etcd://127.0.0.1:1", None).err().unwrap();
        assert!(err.to_string().contains("TLS settings"), "{err}");
    }

    #[test]
    fn paths_and_etcd_urls_are_told_apart() {
        assert_eq!(
            StoreLocation::parse("/var/lib/cumulo/store.db").unwrap(),
            StoreLocation::Sqlite("/var/lib/cumulo/store.db".into())
        );
        assert_eq!(
            StoreLocation::parse("etcd://10.0.0.1:2379,10.0.0.2:2379").unwrap(),
            StoreLocation::Etcd {
                endpoints: vec!["10.0.0.1:2379".into(), "10.0.0.2:2379".into()],
                prefix: "/cumulo/".into()
            }
        );
        assert_eq!(
            StoreLocation::parse("etcd://localhost:2379/prod/east/").unwrap(),
            StoreLocation::Etcd {
                endpoints: vec!["localhost:2379".into()],
                prefix: "/prod/east/".into()
            }
        );
        for bad in [
            "etcd://",
            "etcd://host",
            "etcd://:2379",
            "etcd://h:99999",
            "",
        ] {
            assert!(
                matches!(StoreLocation::parse(bad), Err(StoreError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn open_gives_sqlite_for_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path().join("s.db").to_str().unwrap(), None).unwrap();
        assert!(store.tenants().unwrap().is_empty());
    }
}
