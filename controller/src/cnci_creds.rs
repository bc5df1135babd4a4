//! Each CNCI's own credentials (issue 21 item 2): for every START of a CNCI (its launch, a
//! retry, a restart) the controller makes a new key and a certificate from the cluster CA with
//! the CNCIAGENT role and the CNCI's UUID bound (its `urn:uuid:` name), valid from a minute
//! before now for [`CnciIssuer::lifetime`], and sends both in the START's meta data
//! (`ssntp::payload::{CNCI_CERT_KEY, CNCI_KEY_KEY}`; `docs/protocol.md`). Nothing is stored: a
//! new START brings new ones. So no certificate is shared by CNCIs, and one taken from a CNCI
//! (its seed, its node) speaks only as that CNCI, and only until it expires; the scheduler
//! refuses it any other UUID (PROTOCOL.md §2, §4).
//!
//! An established session outlives its certificate; a CNCI whose certificate expired exits when
//! its session ends (it could not connect again), its node reports it exited, and the
//! controller starts it again, with new credentials.

use std::time::{Duration, SystemTime};

use certtool::build::{Anchor, LeafProfile, Names, issue_leaf_until};
use certtool::key::{KeyType, to_pem};
use ssntp::Role;
use uuid::Uuid;

/// Why a CNCI's credentials could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CnciCredsError {
    /// The CA certificate or key is unusable.
    #[error("CNCI credentials CA: {0}")]
    Ca(String),
    /// Making the key or the certificate failed.
    #[error("issuing CNCI {id}'s certificate: {why}")]
    Issue {
        /// The CNCI.
        id: Uuid,
        /// Why.
        why: String,
    },
}

/// A CNCI's certificate and key (PEM). The key is not shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct CnciCreds {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl std::fmt::Debug for CnciCreds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CnciCreds")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

/// Issues CNCI certificates from the cluster CA.
pub struct CnciIssuer {
    anchor: Anchor,
    lifetime: Duration,
}

impl std::fmt::Debug for CnciIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CnciIssuer")
            .field("ca", &self.anchor)
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

impl CnciIssuer {
    /// The shortest lifetime accepted: a CNCI must be able to boot and connect with it.
    pub const MIN_LIFETIME: Duration = Duration::from_secs(10 * 60);

    /// An issuer from the CA's certificate and key (PEM), issuing certificates valid for
    /// `lifetime` (at least [`CnciIssuer::MIN_LIFETIME`]).
    pub fn from_pem(
        ca_pem: &str,
        ca_key_pem: &str,
        lifetime: Duration,
    ) -> Result<CnciIssuer, CnciCredsError> {
        if lifetime < CnciIssuer::MIN_LIFETIME {
            return Err(CnciCredsError::Ca(format!(
                "a lifetime of {lifetime:?} is shorter than {:?}",
                CnciIssuer::MIN_LIFETIME
            )));
        }
        let anchor = Anchor::from_pem(ca_pem.as_bytes(), ca_key_pem.as_bytes(), SystemTime::now())
            .map_err(|e| CnciCredsError::Ca(e.to_string()))?;
        Ok(CnciIssuer { anchor, lifetime })
    }

    /// How long issued certificates are valid.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// A new key and certificate for CNCI `id`: the CNCIAGENT role, `id` bound, valid from a
    /// minute before `now` (clocks differ) until `now` + the lifetime (cut to the CA's end).
    pub fn issue(&self, id: Uuid, now: SystemTime) -> Result<CnciCreds, CnciCredsError> {
        let issue = |why: String| CnciCredsError::Issue { id, why };
        let key = KeyType::P256.generate().map_err(|e| issue(e.to_string()))?;
        let profile = LeafProfile {
            names: Names {
                common_name: format!("cumulo-cnci {id}"),
                organization: Some("cumulo".into()),
                alt_names: Vec::new(),
            },
            roles: Role::CNCIAGENT,
            uuid: Some(id),
            // Replaced by the end below; it only has to be a valid count.
            days: 1,
            api_admin: false,
        };
        let from = now.checked_sub(Duration::from_secs(60)).unwrap_or(now);
        let cert = issue_leaf_until(
            &profile,
            &key,
            &self.anchor,
            from,
            Some(now + self.lifetime),
        )
        .map_err(|e| issue(e.to_string()))?;
        Ok(CnciCreds {
            cert_pem: cert.pem,
            key_pem: to_pem(&key),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::UuidBinding;
    use ssntp::cert::CertInfo;

    fn issuer(lifetime: Duration) -> Result<CnciIssuer, CnciCredsError> {
        let pki = testkit::TestPki::new();
        CnciIssuer::from_pem(pki.ca_pem(), &pki.ca_key_pem(), lifetime)
    }

    #[test]
    fn a_cnci_gets_its_own_short_lived_certificate_bound_to_its_uuid() {
        let issuer = issuer(Duration::from_secs(3600)).unwrap();
        let now = SystemTime::now();
        let (a, b) = (Uuid::from_u128(7), Uuid::from_u128(8));
        let creds = issuer.issue(a, now).unwrap();
        let der =
            <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::from_pem_slice(
            creds.cert_pem.as_bytes(),
        )
        .unwrap();
        let info = CertInfo::parse(&der).unwrap();
        assert_eq!(info.roles, Role::CNCIAGENT);
        assert_eq!(info.binding, UuidBinding::Bound(a));
        assert!(!info.is_api_admin());
        let secs = |t: SystemTime| {
            i64::try_from(t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()).unwrap()
        };
        assert_eq!(info.not_after, secs(now) + 3600);
        assert_eq!(info.not_before, secs(now) - 60);
        assert!(creds.key_pem.contains("PRIVATE KEY"));
        // The key is the certificate's: they make a TLS identity.
        let pki = testkit::TestPki::new();
        let mine = ssntp_net::tls::TlsIdentity::from_pem(
            pki.ca_pem().as_bytes(),
            creds.cert_pem.as_bytes(),
            creds.key_pem.as_bytes(),
        )
        .unwrap();
        mine.client_config().unwrap();
        assert!(!format!("{creds:?}").contains("PRIVATE KEY"));
        // Another CNCI, another key and certificate.
        let other = issuer.issue(b, now).unwrap();
        assert_ne!(other.key_pem, creds.key_pem);
        assert_ne!(other.cert_pem, creds.cert_pem);
    }

    #[test]
    fn a_lifetime_too_short_to_boot_with_is_refused() {
        assert!(matches!(
            issuer(Duration::from_secs(59)),
            Err(CnciCredsError::Ca(_))
        ));
    }
}
