//! Credentials for off-host launchers (issue 11): short-lived TLS client certificates that the
//! `cumulo-agent --remote` replicas present to an off-host host's libvirtd (`qemu+tls://`).
//!
//! The controller holds the CA key; it issues one client certificate and key per off-host host
//! (CN `cumulo-launcher <host name>`, extended key usage clientAuth only, valid for
//! [`CredsIssuer::lifetime`] from a minute before now), and keeps them in the store, where every
//! replica reads them. [`renew_due`] renews every host whose credentials are missing or have less
//! than a third of their lifetime left: the controller calls it periodically (its sweep) and
//! [`renew`] on demand (`POST /cumulo/v1/nodes/{id}/credentials`). Nothing long-lived leaves the
//! controller: the remote host keeps only its own libvirtd server certificate and the CA
//! certificate; replicas hold a key that expires within the lifetime.
//!
//! The private key is stored sealed (issue 21, [`store::sealed`]): under the host's key, derived
//! from a master that is itself derived from the CA key ([`sealing_master`]), so every controller
//! with the CA key seals alike and a reader of the store gets certificates, not keys. The
//! replicas of a host are given that host's key once (`cumulo-controller launcher-key`,
//! [`crate::launcher_key`]).

use std::time::{Duration, SystemTime};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use uuid::Uuid;

use store::sealed::{HostKey, MasterKey, SealError};
use store::{LauncherCreds, OperationQueue, RemoteHost, StoreError};

/// Why credentials could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum CredsError {
    /// The CA certificate or key is unusable.
    #[error("launcher CA: {0}")]
    Ca(String),
    /// Making the certificate failed.
    #[error("issuing a launcher certificate: {0}")]
    Issue(String),
    /// Sealing the key failed.
    #[error("sealing a launcher key: {0}")]
    Seal(#[from] SealError),
    /// The store failed or refused.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Issues launcher client certificates from the controller's CA.
pub struct CredsIssuer {
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
    master: MasterKey,
    lifetime: Duration,
}

/// The master sealing key of launcher keys, derived from the CA's private key (PEM, PKCS#8): the
/// same key file gives the same master on every controller.
pub fn sealing_master(ca_key_pem: &str) -> Result<MasterKey, CredsError> {
    let key = KeyPair::from_pem(ca_key_pem).map_err(|e| CredsError::Ca(e.to_string()))?;
    Ok(MasterKey::derive(key.serialized_der()))
}

impl std::fmt::Debug for CredsIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredsIssuer")
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl CredsIssuer {
    /// The shortest lifetime accepted.
    pub const MIN_LIFETIME: Duration = Duration::from_secs(60);

    /// An issuer from the CA's certificate and key (PEM), issuing certificates valid for
    /// `lifetime` (at least [`CredsIssuer::MIN_LIFETIME`]).
    pub fn from_pem(
        ca_pem: &str,
        ca_key_pem: &str,
        lifetime: Duration,
    ) -> Result<CredsIssuer, CredsError> {
        if lifetime < CredsIssuer::MIN_LIFETIME {
            return Err(CredsError::Ca(format!(
                "a lifetime of {lifetime:?} is shorter than {:?}",
                CredsIssuer::MIN_LIFETIME
            )));
        }
        let master = sealing_master(ca_key_pem)?;
        let key = KeyPair::from_pem(ca_key_pem).map_err(|e| CredsError::Ca(e.to_string()))?;
        let issuer =
            Issuer::from_ca_cert_pem(ca_pem, key).map_err(|e| CredsError::Ca(e.to_string()))?;
        Ok(CredsIssuer {
            ca_pem: ca_pem.to_string(),
            issuer,
            master,
            lifetime,
        })
    }

    /// The key that opens host `host`'s sealed launcher keys: its replicas' `--creds-key`.
    pub fn host_key(&self, host: Uuid) -> HostKey {
        self.master.host_key(host)
    }

    /// How long issued certificates are valid.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// A new key and client certificate for `host`, valid from a minute before `now`; the key
    /// sealed for the host beside the certificate.
    pub fn issue(&self, host: &RemoteHost, now: SystemTime) -> Result<LauncherCreds, CredsError> {
        let issue = |e: rcgen::Error| CredsError::Issue(e.to_string());
        // Whole seconds, as the certificate says them (and as the stores keep them).
        let secs = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_err(|e| CredsError::Issue(e.to_string()))?
            .as_secs();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let key = KeyPair::generate().map_err(issue)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("cumulo-launcher {}", host.name));
        dn.push(DnType::OrganizationName, "cumulo");
        params.distinguished_name = dn;
        let from = now.checked_sub(Duration::from_secs(60)).unwrap_or(now);
        let until = now + self.lifetime;
        params.not_before = to_offset(from)?;
        params.not_after = to_offset(until)?;
        params.is_ca = IsCa::ExplicitNoCa;
        // libvirt refuses a client certificate whose (critical) key usage lacks either.
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let mut serial = *Uuid::new_v4().as_bytes();
        // A positive DER INTEGER.
        serial[0] &= 0x7f;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        let cert = params.signed_by(&key, &self.issuer).map_err(issue)?;
        let cert_pem = cert.pem();
        let sealed_key = self
            .host_key(host.id)
            .seal(&cert_pem, &key.serialize_pem())?;
        Ok(LauncherCreds {
            host: host.id,
            cert_pem,
            sealed_key,
            ca_pem: self.ca_pem.clone(),
            not_after: until,
            issued: now,
        })
    }
}

fn to_offset(t: SystemTime) -> Result<time::OffsetDateTime, CredsError> {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|e| CredsError::Issue(e.to_string()))?
        .as_secs();
    let secs = i64::try_from(secs).map_err(|e| CredsError::Issue(e.to_string()))?;
    time::OffsetDateTime::from_unix_timestamp(secs).map_err(|e| CredsError::Issue(e.to_string()))
}

/// Whether credentials issued at `issued`, ending at `not_after`, are due for renewal at `now`
/// (less than a third of their lifetime left), or hold a key that is not sealed (written by a
/// controller older than sealing, into an etcd store).
pub fn due(creds: &LauncherCreds, now: SystemTime) -> bool {
    if store::sealed::check(&creds.sealed_key).is_err() {
        return true;
    }
    let lifetime = creds
        .not_after
        .duration_since(creds.issued)
        .unwrap_or_default();
    match creds.not_after.duration_since(now) {
        Ok(left) => left < lifetime / 3,
        Err(_) => true,
    }
}

/// Issues new credentials for host `id` now and stores them.
pub fn renew(
    store: &dyn OperationQueue,
    issuer: &CredsIssuer,
    id: Uuid,
    now: SystemTime,
) -> Result<LauncherCreds, CredsError> {
    let host = store.remote_host(id)?;
    let creds = issuer.issue(&host, now)?;
    store.put_launcher_creds(creds.clone())?;
    tracing::info!(host = %host.id, name = %host.name, "launcher credentials renewed");
    Ok(creds)
}

/// Renews the credentials of every off-host host that has none or whose are due at `now`;
/// returns the hosts renewed.
pub fn renew_due(
    store: &dyn OperationQueue,
    issuer: &CredsIssuer,
    now: SystemTime,
) -> Result<Vec<Uuid>, CredsError> {
    let mut renewed = Vec::new();
    for host in store.remote_hosts()? {
        let needed = match store.launcher_creds(host.id) {
            Ok(creds) => due(&creds, now),
            Err(StoreError::NotFound { .. }) => true,
            Err(e) => return Err(e.into()),
        };
        if needed {
            renew(store, issuer, host.id, now)?;
            renewed.push(host.id);
        }
    }
    Ok(renewed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use store::{NewRemoteHost, SqliteStore};

    /// A CA made here: its certificate and key (PEM).
    fn ca() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "test launcher CA");
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn certificates_are_short_lived_client_certificates_of_the_ca() {
        let (ca_pem, ca_key) = ca();
        let issuer = CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(3600)).unwrap();
        let host = RemoteHost {
            id: Uuid::new_v4(),
            name: "edge-1".into(),
            libvirt_uri: "qemu+tls://edge-1/system".into(),
            created: SystemTime::now(),
        };
        let now = SystemTime::now();
        let creds = issuer.issue(&host, now).unwrap();
        let der =
            rustls::pki_types::CertificateDer::from_pem_slice(creds.cert_pem.as_bytes()).unwrap();
        let info = ssntp::cert::CertInfo::parse(&der).unwrap();
        assert_eq!(info.common_name.as_deref(), Some("cumulo-launcher edge-1"));
        assert!(!info.is_ca);
        let ca_der = rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap();
        let ca_info = ssntp::cert::CertInfo::parse(&ca_der).unwrap();
        assert_eq!(info.issuer, ca_info.subject);
        let secs = |t: SystemTime| {
            i64::try_from(t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()).unwrap()
        };
        assert_eq!(info.not_after, secs(now) + 3600);
        assert!(info.not_before <= secs(now));
        // The key is sealed for the host: it opens with the host's key (from any issuer of the
        // same CA key) and is the certificate's.
        assert!(!creds.sealed_key.contains("PRIVATE KEY"));
        let again = CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(60)).unwrap();
        assert_eq!(again.host_key(host.id), issuer.host_key(host.id));
        assert_eq!(
            sealing_master(&ca_key).unwrap().host_key(host.id),
            issuer.host_key(host.id)
        );
        let key_pem = issuer
            .host_key(host.id)
            .open(host.id, &creds.cert_pem, &creds.sealed_key)
            .unwrap();
        let key = KeyPair::from_pem(&key_pem).unwrap();
        let public = key.public_key_raw();
        assert!(der.as_ref().windows(public.len()).any(|w| w == public));
        assert!(
            issuer
                .host_key(Uuid::new_v4())
                .open(host.id, &creds.cert_pem, &creds.sealed_key)
                .is_err()
        );
        // Another CA key seals otherwise.
        let (_, other_key) = ca();
        assert_ne!(
            sealing_master(&other_key).unwrap().host_key(host.id),
            issuer.host_key(host.id)
        );
        // Too short a lifetime, or a key that is not the CA's, is refused.
        assert!(CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(1)).is_err());
        assert!(CredsIssuer::from_pem(&ca_pem, "not a key", Duration::from_secs(3600)).is_err());
    }

    #[test]
    fn credentials_are_renewed_when_missing_or_in_their_last_third() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        let (ca_pem, ca_key) = ca();
        let issuer = CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(3000)).unwrap();
        let host = store
            .create_remote_host(NewRemoteHost {
                name: "edge".into(),
                libvirt_uri: "qemu+tls://edge/system".into(),
            })
            .unwrap();
        let t0 = SystemTime::now();
        assert_eq!(renew_due(&store, &issuer, t0).unwrap(), vec![host.id]);
        let first = store.launcher_creds(host.id).unwrap();
        // Fresh: nothing to do, later in the first two thirds neither.
        assert!(renew_due(&store, &issuer, t0).unwrap().is_empty());
        let t1 = t0 + Duration::from_secs(1900);
        assert!(renew_due(&store, &issuer, t1).unwrap().is_empty());
        // In the last third: a new key and certificate.
        let t2 = t0 + Duration::from_secs(2100);
        assert_eq!(renew_due(&store, &issuer, t2).unwrap(), vec![host.id]);
        let second = store.launcher_creds(host.id).unwrap();
        assert_ne!(second.sealed_key, first.sealed_key);
        assert_ne!(second.cert_pem, first.cert_pem);
        assert!(second.not_after > first.not_after);
        // A record whose key is not sealed (an older controller's, in etcd) is due at once.
        let clear = LauncherCreds {
            sealed_key: "-----BEGIN PRIVATE KEY-----\n".into(),
            ..second.clone()
        };
        assert!(due(&clear, t2));
        assert!(!due(&second, t2));
        // On demand, at any time.
        let third = renew(&store, &issuer, host.id, t2).unwrap();
        assert_eq!(store.launcher_creds(host.id).unwrap(), third);
        assert!(matches!(
            renew(&store, &issuer, Uuid::new_v4(), t2),
            Err(CredsError::Store(StoreError::NotFound { .. }))
        ));
    }
}
