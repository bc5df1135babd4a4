//! The host's launcher credentials on a replica's disk (`--tls-pki DIR --creds-key FILE`): read
//! from the store, the key opened with the host's key (`store::sealed`), written in libvirt's
//! `pkipath` layout.
//!
//! At start ([`CredsCopy::start`]) credentials that are in the store but cannot be opened (a key
//! file of another host, or not the one the controllers' CA key gives; a record altered) stop the
//! replica with the cause, before it takes any operation. Afterwards ([`CredsCopy::update`]) each
//! new certificate is opened and written; one that cannot be is logged once, with its cause, and
//! the files on disk are left as they were.

use std::path::{Path, PathBuf};

use store::sealed::{HostKey, SealError};
use store::{LauncherCreds, StoreError};
use uuid::Uuid;

/// Why the credentials could not be copied.
#[derive(Debug, thiserror::Error)]
pub enum CredsError {
    /// A pki directory was asked for without the key that opens the credentials.
    #[error(
        "--tls-pki needs --creds-key FILE: the store keeps launcher keys sealed for their host \
         (the file comes from `cumulo-controller launcher-key --host HOST --out FILE`)"
    )]
    NoKey,
    /// The key file given is another host's.
    #[error(
        "--creds-key is the key of host {key}, this replica serves host {host} (write that \
         host's with `cumulo-controller launcher-key --host {host} --out FILE`)"
    )]
    OtherHost {
        /// The key's host.
        key: Uuid,
        /// The replica's host.
        host: Uuid,
    },
    /// The key in the store does not open.
    #[error("the launcher credentials of host {host} in the store: {source}")]
    Open {
        /// The host.
        host: Uuid,
        /// Why.
        source: SealError,
    },
    /// The store could not be read.
    #[error("reading the launcher credentials: {0}")]
    Store(StoreError),
    /// The files could not be written.
    #[error("writing the launcher credentials into {dir}: {source}")]
    Write {
        /// The pki directory.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Writes launcher credentials (the key in clear, `key_pem`) into `dir` in libvirt's `pkipath`
/// layout (`cacert.pem`, `clientcert.pem`, `clientkey.pem`), each file replaced atomically, the
/// key readable by its owner only.
pub fn write_creds(dir: &Path, creds: &LauncherCreds, key_pem: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    for (name, text, mode) in [
        ("cacert.pem", creds.ca_pem.as_str(), 0o644),
        ("clientcert.pem", creds.cert_pem.as_str(), 0o644),
        ("clientkey.pem", key_pem, 0o600),
    ] {
        let tmp = dir.join(format!(".{name}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))?;
    }
    Ok(())
}

/// The host key in `path` (`--creds-key`); a file others may read is used, with a warning.
pub fn read_key(path: &Path) -> Result<HostKey, SealError> {
    use std::os::unix::fs::PermissionsExt;
    let key = HostKey::read(path)?;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %path.display(),
            "the launcher key file is readable by others than its owner (chmod 600 it)"
        );
    }
    Ok(key)
}

/// A replica's copy of its host's credentials.
#[derive(Debug)]
pub struct CredsCopy {
    dir: PathBuf,
    key: HostKey,
    /// The certificate on disk.
    written: Option<String>,
    /// The last certificate that could not be used (logged once).
    refused: Option<String>,
}

impl CredsCopy {
    /// A copy into `dir` for host `host`, opened with `key` (`None`: not given, an error).
    pub fn new(dir: PathBuf, key: Option<HostKey>, host: Uuid) -> Result<CredsCopy, CredsError> {
        let key = key.ok_or(CredsError::NoKey)?;
        if key.host() != host {
            return Err(CredsError::OtherHost {
                key: key.host(),
                host,
            });
        }
        Ok(CredsCopy {
            dir,
            key,
            written: None,
            refused: None,
        })
    }

    /// The pki directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// At start, with what the store answered for the host's credentials: writes them; fails on
    /// credentials that cannot be opened or written, and on a store error. None yet, or a key
    /// not sealed (an older controller's, replaced at the next sweep), is not a failure.
    pub fn start(&mut self, read: Result<LauncherCreds, StoreError>) -> Result<(), CredsError> {
        match self.take(read) {
            Err(
                e @ CredsError::Open {
                    source: SealError::NotSealed,
                    ..
                },
            ) => {
                tracing::warn!(dir = %self.dir.display(), "launcher credentials not used: {e}");
                Ok(())
            }
            other => other,
        }
    }

    /// Later, with what the store answered: writes new credentials; logs those that cannot be
    /// used (once per certificate), with why, and failures to read or write them.
    pub fn update(&mut self, read: Result<LauncherCreds, StoreError>) {
        let dir = self.dir.display().to_string();
        match self.take(read) {
            Ok(()) => {}
            Err(
                e @ CredsError::Open {
                    source: SealError::NotSealed,
                    ..
                },
            ) => tracing::warn!(%dir, "launcher credentials not used: {e}"),
            Err(e @ CredsError::Open { .. }) => {
                tracing::error!(%dir, "launcher credentials not updated: {e}");
            }
            Err(e) => tracing::warn!(%dir, "launcher credentials not updated: {e}"),
        }
    }

    fn take(&mut self, read: Result<LauncherCreds, StoreError>) -> Result<(), CredsError> {
        let creds = match read {
            Ok(creds) => creds,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(CredsError::Store(e)),
        };
        let cert = Some(&creds.cert_pem);
        if self.written.as_ref() == cert || self.refused.as_ref() == cert {
            return Ok(());
        }
        let opened = self
            .key
            .open(creds.host, &creds.cert_pem, &creds.sealed_key)
            .map_err(|source| CredsError::Open {
                host: creds.host,
                source,
            });
        let written = opened.and_then(|key_pem| {
            write_creds(&self.dir, &creds, &key_pem).map_err(|source| CredsError::Write {
                dir: self.dir.display().to_string(),
                source,
            })
        });
        match written {
            Ok(()) => {
                tracing::info!(dir = %self.dir.display(), "launcher credentials updated");
                self.written = Some(creds.cert_pem);
                self.refused = None;
                Ok(())
            }
            Err(e) => {
                // A certificate whose key does not open is not tried again (nor logged again);
                // a write failure is, at the next check.
                if matches!(e, CredsError::Open { .. }) {
                    self.refused = Some(creds.cert_pem);
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};
    use store::sealed::MasterKey;

    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";

    fn creds(key: &HostKey, cert: &str) -> LauncherCreds {
        let cert = format!("-----BEGIN CERTIFICATE-----\n{cert}\n-----END CERTIFICATE-----\n");
        LauncherCreds {
            host: key.host(),
            sealed_key: key.seal(&cert, KEY).unwrap(),
            cert_pem: cert,
            ca_pem: "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n".into(),
            not_after: SystemTime::now() + Duration::from_secs(3600),
            issued: SystemTime::now(),
        }
    }

    #[test]
    fn credentials_are_opened_and_written_with_the_hosts_key_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let master = MasterKey::derive(b"ca");
        let (host, other) = (Uuid::new_v4(), Uuid::new_v4());
        let key = master.host_key(host);
        assert!(matches!(
            CredsCopy::new(pki.clone(), None, host),
            Err(CredsError::NoKey)
        ));
        assert!(matches!(
            CredsCopy::new(pki.clone(), Some(master.host_key(other)), host),
            Err(CredsError::OtherHost { .. })
        ));
        let mut copy = CredsCopy::new(pki.clone(), Some(key.clone()), host).unwrap();
        // Nothing issued yet: nothing written, no failure.
        copy.start(Err(StoreError::not_found("launcher credentials", host)))
            .unwrap();
        assert!(!pki.exists());
        let first = creds(&key, "first");
        copy.start(Ok(first.clone())).unwrap();
        let read = |f: &str| std::fs::read_to_string(pki.join(f)).unwrap();
        assert_eq!(read("clientkey.pem"), KEY);
        assert_eq!(read("clientcert.pem"), first.cert_pem);
        let mode = std::fs::metadata(pki.join("clientkey.pem"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        // A record that does not open (another CA's seal) is refused and the files kept.
        let foreign = creds(&MasterKey::derive(b"other ca").host_key(host), "foreign");
        assert!(matches!(
            CredsCopy::new(dir.path().join("p2"), Some(key.clone()), host)
                .unwrap()
                .start(Ok(foreign.clone())),
            Err(CredsError::Open {
                source: SealError::Refused,
                ..
            })
        ));
        copy.update(Ok(foreign));
        assert_eq!(read("clientcert.pem"), first.cert_pem);
        // A key not sealed (an older controller's) is not a failure at start, and not used.
        let clear = LauncherCreds {
            sealed_key: KEY.into(),
            ..creds(&key, "clear")
        };
        let mut fresh = CredsCopy::new(dir.path().join("p3"), Some(key.clone()), host).unwrap();
        fresh.start(Ok(clear)).unwrap();
        assert!(!dir.path().join("p3").exists());
        // The next good certificate replaces the files.
        let second = creds(&key, "second");
        copy.update(Ok(second.clone()));
        assert_eq!(read("clientcert.pem"), second.cert_pem);
    }
}
