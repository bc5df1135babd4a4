//! An endpoint's UUID: the one bound in its certificate, or else one per role kept in a state
//! directory, locked so that two processes with one role on a host never share it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use uuid::Uuid;

use ssntp::Role;
use ssntp::handshake::{PeerCertificate, UuidBinding};

/// Why an endpoint has no usable UUID.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The certificate binds more than one UUID.
    #[error("the certificate binds more than one UUID")]
    Ambiguous,
    /// No UUID is bound and no state directory was given.
    #[error("the certificate binds no UUID: give a state directory to keep one in")]
    NoStateDir,
    /// Another process holds this role's UUID.
    #[error("{0} is locked by another process with the same role")]
    Locked(PathBuf),
    /// The stored UUID is unreadable.
    #[error("{path}: not a UUID ({detail})")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// File system trouble.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Holds a stored UUID's lock for as long as it lives.
#[derive(Debug)]
pub struct UuidLock {
    _file: File,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The endpoint's UUID for `role`: bound in the certificate, or stored under `state_dir` (made
/// on first use). A stored UUID comes with the lock that keeps it ours.
pub fn endpoint_uuid(
    own: &PeerCertificate,
    state_dir: Option<&Path>,
    role: Role,
) -> Result<(Uuid, Option<UuidLock>), IdentityError> {
    match own.binding {
        UuidBinding::Bound(uuid) => return Ok((uuid, None)),
        UuidBinding::Ambiguous => return Err(IdentityError::Ambiguous),
        UuidBinding::Unbound => {}
    }
    let dir = state_dir.ok_or(IdentityError::NoStateDir)?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let name = role.to_string().replace('|', "-");
    let path = dir.join(format!("ssntp-{name}.uuid"));
    let lock_path = dir.join(format!("ssntp-{name}.lock"));
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Err(IdentityError::Locked(path)),
        Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
    }
    let uuid = match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e: uuid::Error| IdentityError::Corrupt {
                path: path.clone(),
                detail: e.to_string(),
            })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let uuid = Uuid::new_v4();
            let tmp = dir.join(format!("ssntp-{name}.uuid.tmp"));
            let mut f = File::create(&tmp).map_err(io(&tmp))?;
            writeln!(f, "{uuid}")
                .and_then(|()| f.sync_all())
                .map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
            uuid
        }
        Err(e) => return Err(io(&path)(e)),
    };
    Ok((uuid, Some(UuidLock { _file: lock })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unbound() -> PeerCertificate {
        PeerCertificate {
            roles: Role::AGENT,
            binding: UuidBinding::Unbound,
        }
    }

    #[test]
    fn bound_uuid_wins_and_ambiguous_is_refused() {
        let u = Uuid::from_bytes([3; 16]);
        let bound = PeerCertificate {
            roles: Role::AGENT,
            binding: UuidBinding::Bound(u),
        };
        assert_eq!(endpoint_uuid(&bound, None, Role::AGENT).unwrap().0, u);
        let amb = PeerCertificate {
            roles: Role::AGENT,
            binding: UuidBinding::Ambiguous,
        };
        assert!(matches!(
            endpoint_uuid(&amb, None, Role::AGENT),
            Err(IdentityError::Ambiguous)
        ));
        assert!(matches!(
            endpoint_uuid(&unbound(), None, Role::AGENT),
            Err(IdentityError::NoStateDir)
        ));
    }

    #[test]
    fn stored_uuid_is_kept_and_locked() {
        let dir = std::env::temp_dir().join(format!("ssntp-identity-{}", Uuid::new_v4()));
        let (first, lock) = endpoint_uuid(&unbound(), Some(&dir), Role::DUAL).unwrap();
        assert!(lock.is_some());
        assert!(matches!(
            endpoint_uuid(&unbound(), Some(&dir), Role::DUAL),
            Err(IdentityError::Locked(_))
        ));
        // Another role has its own UUID.
        let (other, _l2) = endpoint_uuid(&unbound(), Some(&dir), Role::CONTROLLER).unwrap();
        assert_ne!(first, other);
        drop(lock);
        let (again, _l3) = endpoint_uuid(&unbound(), Some(&dir), Role::DUAL).unwrap();
        assert_eq!(first, again);
        std::fs::write(dir.join("ssntp-cnciagent.uuid"), "garbage").unwrap();
        assert!(matches!(
            endpoint_uuid(&unbound(), Some(&dir), Role::CNCIAGENT),
            Err(IdentityError::Corrupt { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
