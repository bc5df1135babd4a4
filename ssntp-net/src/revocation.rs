//! Revoked certificates: a certificate revocation list (RFC 5280 CRL) signed by the cluster CA,
//! checked ([`RevocationList::parse`]) and held where a server's TLS handshakes read it
//! ([`Revocations`]): a client certificate whose serial number is on it is refused at the
//! handshake, and a live session of one is ended
//! ([`ServerHandle::disconnect_revoked`](crate::ServerHandle::disconnect_revoked)).
//!
//! `cumulo-cert revoke` makes and extends the list; `cumulo-scheduler --crl FILE` reloads it
//! when the file changes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::revocation_list::CertificateRevocationList;

/// The largest list read (a list of a million serial numbers is about 40 MB; ours are far
/// smaller): more is refused before it is parsed.
pub const MAX_CRL_BYTES: usize = 16 << 20;

/// Why a revocation list is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrlError {
    /// Larger than [`MAX_CRL_BYTES`].
    #[error("the revocation list is {0} bytes, more than the {MAX_CRL_BYTES} read")]
    TooLarge(usize),
    /// PEM that holds no `X509 CRL` block, or a broken one.
    #[error("the revocation list's PEM: {0}")]
    Pem(String),
    /// Not a DER CRL.
    #[error("not a DER certificate revocation list: {0}")]
    Malformed(String),
    /// The CA certificate is unreadable.
    #[error("the CA certificate: {0}")]
    Ca(String),
    /// Not issued by the CA.
    #[error("the revocation list is issued by {issuer}, not by the CA ({ca})")]
    Issuer {
        /// The list's issuer.
        issuer: String,
        /// The CA's subject.
        ca: String,
    },
    /// Its signature is not the CA's.
    #[error("the revocation list's signature is not the CA's: {0}")]
    Signature(String),
    /// A file could not be read.
    #[error("cannot read {path}: {why}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// A checked revocation list: the serial numbers it revokes, its number and when it was made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevocationList {
    number: Vec<u8>,
    this_update: i64,
    serials: HashSet<Box<[u8]>>,
}

impl RevocationList {
    /// Reads a CRL (PEM with an `X509 CRL` block, or DER) and checks that `ca_der` (the cluster
    /// CA's certificate, DER) issued and signed it. Dates are not checked: a list stays in force
    /// until a newer one replaces it (a stale list still revokes what it names).
    pub fn parse(bytes: &[u8], ca_der: &[u8]) -> Result<RevocationList, CrlError> {
        if bytes.len() > MAX_CRL_BYTES {
            return Err(CrlError::TooLarge(bytes.len()));
        }
        // DER starts with a SEQUENCE; anything else is read as PEM.
        let der = if bytes.first() == Some(&0x30) {
            bytes.to_vec()
        } else {
            pem_block(bytes)?
        };
        let (rest, crl) = CertificateRevocationList::from_der(&der)
            .map_err(|e| CrlError::Malformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(CrlError::Malformed(format!(
                "{} bytes after the list",
                rest.len()
            )));
        }
        let (_, ca) = X509Certificate::from_der(ca_der).map_err(|e| CrlError::Ca(e.to_string()))?;
        if crl.issuer().as_raw() != ca.subject().as_raw() {
            return Err(CrlError::Issuer {
                issuer: crl.issuer().to_string(),
                ca: ca.subject().to_string(),
            });
        }
        crl.verify_signature(ca.public_key())
            .map_err(|e| CrlError::Signature(e.to_string()))?;
        let serials = crl
            .iter_revoked_certificates()
            .map(|r| trim(r.raw_serial()).into())
            .collect();
        Ok(RevocationList {
            number: crl
                .crl_number()
                .map(|n| trim(&n.to_bytes_be()).to_vec())
                .unwrap_or_default(),
            this_update: crl.last_update().timestamp(),
            serials,
        })
    }

    /// Whether it revokes the certificate with this serial number (its DER integer's bytes).
    pub fn revokes(&self, serial: &[u8]) -> bool {
        self.serials.contains(trim(serial))
    }

    /// How many certificates it revokes.
    pub fn len(&self) -> usize {
        self.serials.len()
    }

    /// Whether it revokes none.
    pub fn is_empty(&self) -> bool {
        self.serials.is_empty()
    }

    /// Its CRL number, big-endian without leading zeros (empty when it has none).
    pub fn number(&self) -> &[u8] {
        &self.number
    }

    /// When it was made (its thisUpdate), seconds since the Unix epoch.
    pub fn this_update(&self) -> i64 {
        self.this_update
    }

    /// Whether it is older than `other` (a lower CRL number, or the same number and an earlier
    /// date): an older list must not replace a newer one (a replayed file would lift
    /// revocations).
    pub fn is_older_than(&self, other: &RevocationList) -> bool {
        let by_number = (self.number.len(), &self.number).cmp(&(other.number.len(), &other.number));
        by_number.then(self.this_update.cmp(&other.this_update)) == std::cmp::Ordering::Less
    }
}

/// A serial number's bytes without the leading zero bytes of its DER encoding.
fn trim(serial: &[u8]) -> &[u8] {
    let zeros = serial.iter().take_while(|b| **b == 0).count();
    &serial[zeros.min(serial.len().saturating_sub(1))..]
}

/// The DER of the first `X509 CRL` PEM block.
fn pem_block(text: &[u8]) -> Result<Vec<u8>, CrlError> {
    use rustls::pki_types::CertificateRevocationListDer;
    use rustls::pki_types::pem::PemObject;
    CertificateRevocationListDer::from_pem_slice(text)
        .map(|der| der.as_ref().to_vec())
        .map_err(|e| CrlError::Pem(e.to_string()))
}

/// The serial number of a certificate (DER), as its DER integer's bytes.
pub fn serial_of(cert_der: &[u8]) -> Option<Vec<u8>> {
    let (_, cert) = X509Certificate::from_der(cert_der).ok()?;
    Some(trim(cert.raw_serial()).to_vec())
}

/// A revocation list kept in a file, and the CA it must come from.
#[derive(Debug, Clone)]
pub struct CrlFile {
    path: PathBuf,
    ca_der: Vec<u8>,
}

/// What says a file changed: its size, modification time and inode.
type Stamp = (u64, Option<std::time::SystemTime>, u64);

impl CrlFile {
    /// The list at `path`, issued by the first certificate of `ca_pem` (a PEM file).
    pub fn new(path: &Path, ca_pem: &Path) -> Result<CrlFile, CrlError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let text = std::fs::read(ca_pem).map_err(|e| CrlError::Read {
            path: ca_pem.to_path_buf(),
            why: e.to_string(),
        })?;
        let ca_der = CertificateDer::pem_slice_iter(&text)
            .next()
            .and_then(Result::ok)
            .ok_or_else(|| CrlError::Ca(format!("no certificate in {}", ca_pem.display())))?;
        Ok(CrlFile {
            path: path.to_path_buf(),
            ca_der: ca_der.as_ref().to_vec(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and checks the list (a file larger than [`MAX_CRL_BYTES`] is not read).
    pub fn load(&self) -> Result<RevocationList, CrlError> {
        Ok(self.load_stamped()?.0)
    }

    fn stamp(&self) -> Result<Stamp, CrlError> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&self.path).map_err(|e| self.read_error(e))?;
        Ok((meta.len(), meta.modified().ok(), meta.ino()))
    }

    fn read_error(&self, e: std::io::Error) -> CrlError {
        CrlError::Read {
            path: self.path.clone(),
            why: e.to_string(),
        }
    }

    fn load_stamped(&self) -> Result<(RevocationList, Stamp), CrlError> {
        use std::io::Read;
        let stamp = self.stamp()?;
        if stamp.0 > MAX_CRL_BYTES as u64 {
            return Err(CrlError::TooLarge(
                usize::try_from(stamp.0).unwrap_or(usize::MAX),
            ));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&self.path)
            .and_then(|f| f.take(MAX_CRL_BYTES as u64 + 1).read_to_end(&mut bytes))
            .map_err(|e| self.read_error(e))?;
        Ok((RevocationList::parse(&bytes, &self.ca_der)?, stamp))
    }
}

/// Reads `file` again every `every` while `stop` is not cancelled, when it changed: a newer
/// list goes in force in `revocations`, and each time the live sessions of the certificates
/// the list in force revokes are ended; a list that cannot be read, is not the CA's, or is older than the one in force is
/// logged and left out (the one in force stays).
pub async fn watch(
    file: CrlFile,
    revocations: Revocations,
    server: crate::ServerHandle,
    every: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    // Nothing seen yet: the first round reads the file again, so that a list written between
    // the caller's first load and now is not missed.
    let mut seen: Option<Stamp> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let stamp = file.stamp().ok();
        if stamp != seen {
            seen = stamp;
            reload(&file, &revocations, &mut seen).await;
        }
        // Every time, not only after a reload: a session whose handshake passed just before a
        // new list went in force is ended on the next round.
        for (uuid, role) in server.disconnect_revoked(&revocations.current()) {
            tracing::warn!(%uuid, %role, "session ended: its certificate is revoked");
        }
    }
}

async fn reload(file: &CrlFile, revocations: &Revocations, seen: &mut Option<Stamp>) {
    let loaded = {
        let file = file.clone();
        tokio::task::spawn_blocking(move || file.load_stamped()).await
    };
    let list = match loaded {
        Ok(Ok((list, stamp))) => {
            *seen = Some(stamp);
            list
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "revocation list not reloaded; the one in force stays");
            return;
        }
        Err(_) => return,
    };
    if list.is_older_than(&revocations.current()) {
        tracing::warn!(
            path = %file.path().display(),
            "revocation list not reloaded: older than the one in force (a lower CRL number)"
        );
        return;
    }
    tracing::info!(
        path = %file.path().display(),
        revoked = list.len(),
        "revocation list reloaded"
    );
    revocations.set(list);
}

/// The revocation list in force, shared by a server's handshakes and whoever reloads it.
/// Cloning shares it. Starts empty (nothing revoked).
#[derive(Debug, Clone, Default)]
pub struct Revocations(Arc<RwLock<Arc<RevocationList>>>);

impl Revocations {
    /// An empty list in force.
    pub fn new() -> Revocations {
        Revocations::default()
    }

    /// Puts `list` in force (from the next handshake on).
    pub fn set(&self, list: RevocationList) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(list);
    }

    /// The list in force.
    pub fn current(&self) -> Arc<RevocationList> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the list in force revokes this serial number.
    pub fn revokes(&self, serial: &[u8]) -> bool {
        self.current().revokes(serial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_compare_without_their_sign_zero() {
        assert_eq!(trim(&[0, 0x80, 1]), &[0x80, 1]);
        assert_eq!(trim(&[0]), &[0]);
        assert_eq!(trim(&[]), &[] as &[u8]);
    }

    #[test]
    fn junk_is_a_typed_error() {
        assert!(matches!(
            RevocationList::parse(
                b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n",
                b""
            ),
            Err(CrlError::Malformed(_))
        ));
        assert!(matches!(
            RevocationList::parse(b"hello", b""),
            Err(CrlError::Pem(_))
        ));
        assert!(matches!(
            RevocationList::parse(&[0x30, 0x82, 0xff], b""),
            Err(CrlError::Malformed(_))
        ));
        assert!(matches!(
            RevocationList::parse(&vec![0x30; MAX_CRL_BYTES + 1], b""),
            Err(CrlError::TooLarge(_))
        ));
    }
}
