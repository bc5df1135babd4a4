//! Revocation lists (RFC 5280 CRLs) signed by the cluster CA: `cumulo-cert revoke` adds
//! certificates to one, keeping what it revoked already, with a CRL number one higher each
//! time (a server refuses to go back to an older list). `cumulo-scheduler --crl FILE` reads it.

use std::time::{Duration, SystemTime};

use rcgen::{CertificateRevocationListParams, KeyIdMethod, RevokedCertParams, SerialNumber};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::revocation_list::CertificateRevocationList;

use crate::build::{Anchor, unix};

/// How long a list says it is good for (its nextUpdate). cumulo's readers keep a list in force
/// until a newer one replaces it; other readers may want a fresh one by then.
pub const NEXT_UPDATE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Why a list could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum CrlError {
    /// The existing list is not one of this CA's.
    #[error("the existing revocation list: {0}")]
    Existing(String),
    /// A certificate to revoke is unreadable.
    #[error("a certificate to revoke: {0}")]
    Cert(String),
    /// A certificate to revoke was not issued by this CA.
    #[error("a certificate to revoke (serial {serial}) was not issued by this CA ({ca})")]
    OtherIssuer {
        /// Its serial number.
        serial: String,
        /// The CA's subject.
        ca: String,
    },
    /// Signing failed.
    #[error("making the revocation list: {0}")]
    Sign(#[from] rcgen::Error),
}

/// One revoked certificate: its serial number (the DER integer's bytes) and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// The serial number.
    pub serial: Vec<u8>,
    /// When it was revoked (seconds since the Unix epoch).
    pub at: i64,
}

/// What a list holds: its number and the certificates it revokes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct List {
    /// The CRL number.
    pub number: u64,
    /// The revoked certificates.
    pub revoked: Vec<Revoked>,
}

/// Reads a list (DER) that `anchor` issued and signed.
pub fn read(der: &[u8], anchor: &Anchor) -> Result<List, CrlError> {
    let bad = |e: String| CrlError::Existing(e);
    let (_, crl) = CertificateRevocationList::from_der(der).map_err(|e| bad(e.to_string()))?;
    let (_, ca) = X509Certificate::from_der(anchor.der()).map_err(|e| bad(e.to_string()))?;
    if crl.issuer().as_raw() != ca.subject().as_raw() {
        return Err(bad(format!("issued by {}, not by this CA", crl.issuer())));
    }
    crl.verify_signature(ca.public_key())
        .map_err(|e| bad(format!("its signature is not this CA's: {e}")))?;
    let number = match crl.crl_number() {
        None => 0,
        Some(n) => {
            let bytes = n.to_bytes_be();
            if bytes.len() > 8 {
                return Err(bad("its CRL number is larger than 64 bits".into()));
            }
            bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
        }
    };
    let revoked = crl
        .iter_revoked_certificates()
        .map(|r| Revoked {
            serial: r.raw_serial().to_vec(),
            at: r.revocation_date.timestamp(),
        })
        .collect();
    Ok(List { number, revoked })
}

/// The serial number of `cert` (DER), checked to be one `anchor` issued.
pub fn serial_to_revoke(cert: &[u8], anchor: &Anchor) -> Result<Vec<u8>, CrlError> {
    let (_, c) = X509Certificate::from_der(cert).map_err(|e| CrlError::Cert(e.to_string()))?;
    let (_, ca) =
        X509Certificate::from_der(anchor.der()).map_err(|e| CrlError::Cert(e.to_string()))?;
    if c.issuer().as_raw() != ca.subject().as_raw()
        || c.verify_signature(Some(ca.public_key())).is_err()
    {
        return Err(CrlError::OtherIssuer {
            serial: c.raw_serial_as_string(),
            ca: ca.subject().to_string(),
        });
    }
    Ok(c.raw_serial().to_vec())
}

/// `list` with `serials` added (those it holds already keep their first date), its number one
/// higher, signed by `anchor` at `now`: the new list's PEM.
pub fn extend(
    mut list: List,
    serials: &[Vec<u8>],
    anchor: &Anchor,
    now: SystemTime,
) -> Result<(List, String), CrlError> {
    let at = unix(now);
    for serial in serials {
        if !list.revoked.iter().any(|r| &r.serial == serial) {
            list.revoked.push(Revoked {
                serial: serial.clone(),
                at,
            });
        }
    }
    list.number += 1;
    let time = |secs: i64| {
        OffsetDateTime::from_unix_timestamp(secs).map_err(|_| rcgen::Error::InvalidCrlNextUpdate)
    };
    let params = CertificateRevocationListParams {
        this_update: time(at)?,
        next_update: time(at + NEXT_UPDATE.as_secs() as i64)?,
        crl_number: SerialNumber::from(list.number),
        issuing_distribution_point: None,
        revoked_certs: list
            .revoked
            .iter()
            .map(|r| {
                Ok(RevokedCertParams {
                    serial_number: SerialNumber::from_slice(&r.serial),
                    revocation_time: time(r.at)?,
                    reason_code: None,
                    invalidity_date: None,
                })
            })
            .collect::<Result<_, rcgen::Error>>()?,
        key_identifier_method: KeyIdMethod::Sha256,
    };
    let crl = params.signed_by(anchor.issuer())?;
    let pem = crl.pem()?;
    Ok((list, pem))
}

/// Changes the list in the file `path` under a lock (`<path>.lock`, shared by `cumulo-cert
/// revoke` and the controller, so that two writers never lose each other's revocations): reads
/// it (none yet: an empty list; one that is not `anchor`'s: an error), lets `change` change it,
/// signs it with a number one higher ([`extend`]) and replaces the file through a temporary file
/// of this writer's own. Returns the new list and its PEM.
pub fn update(
    path: &std::path::Path,
    anchor: &Anchor,
    now: SystemTime,
    change: impl FnOnce(&mut List) -> Vec<Vec<u8>>,
) -> Result<(List, String), CrlError> {
    use rustls::pki_types::CertificateRevocationListDer;
    use rustls::pki_types::pem::PemObject;
    let io = |what: &str, e: std::io::Error| {
        CrlError::Existing(format!("{what} {}: {e}", path.display()))
    };
    let lock_path = path.with_extension("lock");
    use std::os::unix::fs::OpenOptionsExt;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| io("locking", e))?;
    lock.lock().map_err(|e| io("locking", e))?;
    let mut list = match std::fs::read(path) {
        Ok(bytes) => {
            let der = CertificateRevocationListDer::from_pem_slice(&bytes)
                .map_err(|e| CrlError::Existing(e.to_string()))?;
            read(der.as_ref(), anchor)?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => List::default(),
        Err(e) => return Err(io("reading", e)),
    };
    let serials = change(&mut list);
    let (list, pem) = extend(list, &serials, anchor, now)?;
    let tmp = path.with_extension(format!(
        "{}.{}.tmp",
        std::process::id(),
        now.duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let written = std::fs::write(&tmp, &pem).and_then(|()| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, path)
    });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("writing", e));
    }
    drop(lock);
    Ok((list, pem))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{CaProfile, LeafProfile, Names, issue_ca, issue_leaf};
    use crate::key::KeyType;
    use rustls::pki_types::CertificateRevocationListDer;
    use rustls::pki_types::pem::PemObject;
    use ssntp::Role;

    fn anchor(now: SystemTime) -> Anchor {
        let key = KeyType::P256.generate().unwrap();
        let names = Names::for_hosts("ca", None, &["ca".into()], &[], None).unwrap();
        let ca = issue_ca(&CaProfile { names, days: 10 }, &key, now).unwrap();
        Anchor::new(ca.der, key, now).unwrap()
    }

    fn leaf(anchor: &Anchor, now: SystemTime) -> Vec<u8> {
        let key = KeyType::P256.generate().unwrap();
        let profile = LeafProfile {
            names: Names::for_hosts("n", None, &["n".into()], &[], None).unwrap(),
            roles: Role::AGENT,
            uuid: None,
            days: 1,
            api_admin: false,
        };
        issue_leaf(&profile, &key, anchor, now)
            .unwrap()
            .der
            .to_vec()
    }

    #[test]
    fn a_list_grows_keeps_its_dates_and_counts_up() {
        let now = SystemTime::now();
        let ca = anchor(now);
        let (a, b) = (leaf(&ca, now), leaf(&ca, now));
        let sa = serial_to_revoke(&a, &ca).unwrap();
        let sb = serial_to_revoke(&b, &ca).unwrap();
        let (list, pem) = extend(List::default(), std::slice::from_ref(&sa), &ca, now).unwrap();
        assert_eq!(list.number, 1);
        let der = CertificateRevocationListDer::from_pem_slice(pem.as_bytes()).unwrap();
        let read_back = read(der.as_ref(), &ca).unwrap();
        assert_eq!(read_back, list);
        let later = now + Duration::from_secs(60);
        let (list2, _) = extend(read_back, &[sa.clone(), sb.clone()], &ca, later).unwrap();
        assert_eq!(list2.number, 2);
        assert_eq!(list2.revoked.len(), 2);
        assert_eq!(list2.revoked[0].at, unix(now), "the first date stays");
        // Another CA's list and certificates are refused.
        let other = anchor(now);
        assert!(matches!(
            read(der.as_ref(), &other),
            Err(CrlError::Existing(_))
        ));
        assert!(matches!(
            serial_to_revoke(&a, &other),
            Err(CrlError::OtherIssuer { .. })
        ));
    }
}
