//! Each CNCI's own credentials: the certificate (CNCIAGENT role, the CNCI's UUID bound) and key
//! that the controller issues for every START of a CNCI and sends in the START's meta data
//! (`docs/protocol.md`, START). The agent takes them out at its wire boundary
//! ([`take_credentials`], before the core sees the START: the core's records keep the meta data
//! without them) and keeps them beside the CNCI's record, readable by the agent's user alone:
//! `<dir>/<uuid>.cert.pem` and `<dir>/<uuid>.key.pem`. A process CNCI reads them at its start, a
//! CNCI VM from its seed (rewritten when a restart brought new ones). A node's own `--cnci-cert`
//! (one certificate, bound to no UUID) serves only CNCIs whose START carried none.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ssntp::payload::{CNCI_CERT_KEY, CNCI_KEY_KEY, Start};
use uuid::Uuid;

/// Why a START's CNCI credentials were not kept.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The START carries one of the two and not the other.
    #[error("the START of CNCI {0} carries a certificate or a key without the other")]
    Incomplete(Uuid),
    /// Writing them failed.
    #[error("writing the credentials of CNCI {id} in {dir}: {source}")]
    Write {
        /// The CNCI.
        id: Uuid,
        /// The launcher's directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Where a CNCI's own certificate and key are kept in the launcher's directory `dir`.
pub fn paths(dir: &Path, id: Uuid) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{id}.cert.pem")),
        dir.join(format!("{id}.key.pem")),
    )
}

/// Keeps the credentials a CNCI's START carries in `dir` (each file replaced atomically, mode
/// 0600 whatever the umask). Returns whether the START carried any: a workload's START, or a
/// CNCI's without credentials, writes nothing.
pub fn take_credentials(dir: &Path, start: &Start) -> Result<bool, CredentialsError> {
    if !start.is_cnci() {
        return Ok(false);
    }
    let meta = start.meta_data.as_ref();
    let get = |key| meta.and_then(|m| m.get(key));
    let id = start.instance_uuid;
    let (cert, key) = match (get(CNCI_CERT_KEY), get(CNCI_KEY_KEY)) {
        (None, None) => return Ok(false),
        (Some(cert), Some(key)) => (cert, key),
        _ => return Err(CredentialsError::Incomplete(id)),
    };
    let write = |source| CredentialsError::Write {
        id,
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(write)?;
    let (cert_path, key_path) = paths(dir, id);
    for (path, text) in [(&cert_path, cert), (&key_path, key)] {
        replace(path, text).map_err(write)?;
    }
    Ok(true)
}

/// Writes `text` to a fresh 0600 file beside `path`, then renames it over `path`.
fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("pem.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// The certificate and key CNCI `id` runs with: its own (from its START) when they are kept,
/// else the node's shared ones ([`super::LaunchConfig::shared`]).
pub fn for_cnci(c: &super::LaunchConfig, id: Uuid) -> Result<(PathBuf, PathBuf), NoCredentials> {
    let (cert, key) = paths(&c.dir, id);
    if cert.is_file() && key.is_file() {
        return Ok((cert, key));
    }
    c.shared.clone().ok_or(NoCredentials(id))
}

/// A CNCI with neither credentials of its own nor the node's shared ones.
#[derive(Debug, thiserror::Error)]
#[error(
    "CNCI {0}: its START carried no certificate of its own (a controller issues them with \
     --ca-key) and this node has no --cnci-cert"
)]
pub struct NoCredentials(pub Uuid);

/// Removes a CNCI's credentials (its delete).
pub(super) fn remove(dir: &Path, id: Uuid) {
    let (cert, key) = paths(dir, id);
    let _ = std::fs::remove_file(cert);
    let _ = std::fs::remove_file(key);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    fn start(meta: &[(&str, &str)]) -> Start {
        let mut s = crate::wire::tests::start();
        s.meta_data = Some(
            meta.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        s
    }

    #[test]
    fn a_cncis_credentials_are_kept_private_and_replaced_by_newer_ones() {
        let dir = tempfile::tempdir().unwrap();
        let cnci = [(ssntp::payload::ROLE_KEY, "cnci")];
        let first = start(&[cnci[0], (CNCI_CERT_KEY, "CERT 1"), (CNCI_KEY_KEY, "KEY 1")]);
        assert!(take_credentials(dir.path(), &first).unwrap());
        let (cert, key) = paths(dir.path(), first.instance_uuid);
        for path in [&cert, &key] {
            let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
        let second = start(&[cnci[0], (CNCI_CERT_KEY, "CERT 2"), (CNCI_KEY_KEY, "KEY 2")]);
        assert!(take_credentials(dir.path(), &second).unwrap());
        assert_eq!(std::fs::read_to_string(&cert).unwrap(), "CERT 2");
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "KEY 2");
        remove(dir.path(), first.instance_uuid);
        assert!(!cert.exists() && !key.exists());
    }

    #[test]
    fn workloads_and_starts_without_credentials_write_nothing_and_half_a_pair_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let workload = start(&[(CNCI_CERT_KEY, "C"), (CNCI_KEY_KEY, "K")]);
        assert!(!take_credentials(dir.path(), &workload).unwrap());
        let bare = start(&[(ssntp::payload::ROLE_KEY, "cnci")]);
        assert!(!take_credentials(dir.path(), &bare).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let half = start(&[(ssntp::payload::ROLE_KEY, "cnci"), (CNCI_CERT_KEY, "C")]);
        assert!(matches!(
            take_credentials(dir.path(), &half),
            Err(CredentialsError::Incomplete(_))
        ));
    }
}
