//! Checking a role certificate as an SSNTP endpoint will: it chains to the anchor for both TLS
//! server and client use (rustls's WebPKI verifiers, ring), and it carries the expected roles.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use ssntp::Role;
use ssntp::cert::{AltName, CertError, CertInfo};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Why a certificate failed the check.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The certificate cannot be read.
    #[error("unreadable certificate: {0}")]
    Unreadable(#[from] CertError),
    /// The anchor cannot be used as a trust anchor.
    #[error("the anchor is unusable as a trust anchor: {0}")]
    Anchor(String),
    /// rustls refused it as a TLS client certificate.
    #[error("not a valid TLS client certificate under this anchor: {0}")]
    Client(rustls::Error),
    /// rustls refused it as a TLS server certificate for its own first name.
    #[error("not a valid TLS server certificate for {name} under this anchor: {error}")]
    Server {
        /// The name checked.
        name: String,
        /// rustls's reason.
        error: rustls::Error,
    },
    /// Other roles than asked for.
    #[error("the certificate carries roles {got}, not {want}")]
    Roles {
        /// The roles asked for.
        want: Role,
        /// The roles it carries.
        got: Role,
    },
    /// The anchor's key did not sign it.
    #[error("it was not signed by this anchor's key")]
    NotSignedByAnchor,
}

/// The crypto provider of the whole workspace: ring.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Checks `cert` at `now`: rustls accepts it as a client certificate and, when it names a host
/// (its first DNS or IP name), as that host's server certificate, with `anchor` the only trust
/// anchor; and its roles are exactly `roles`. Returns what it says.
pub fn verify(
    cert: &CertificateDer<'_>,
    anchor: &CertificateDer<'_>,
    roles: Role,
    now: SystemTime,
) -> Result<CertInfo, VerifyError> {
    let info = CertInfo::parse(cert)?;
    let mut store = RootCertStore::empty();
    store
        .add(anchor.clone().into_owned())
        .map_err(|e| VerifyError::Anchor(e.to_string()))?;
    let store = Arc::new(store);
    let time = UnixTime::since_unix_epoch(
        now.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO),
    );

    let client = WebPkiClientVerifier::builder_with_provider(store.clone(), provider())
        .build()
        .map_err(|e| VerifyError::Anchor(e.to_string()))?;
    client
        .verify_client_cert(cert, &[], time)
        .map_err(VerifyError::Client)?;

    let first_name = info.alt_names.iter().find_map(|n| match n {
        AltName::Dns(dns) => Some(dns.clone()),
        AltName::Ip(ip) => Some(ip.to_string()),
        _ => None,
    });
    if let Some(name) = first_name {
        let server = WebPkiServerVerifier::builder_with_provider(store, provider())
            .build()
            .map_err(|e| VerifyError::Anchor(e.to_string()))?;
        let server_name = ServerName::try_from(name.as_str())
            .map_err(|e| VerifyError::Server {
                name: name.clone(),
                error: rustls::Error::General(e.to_string()),
            })?
            .to_owned();
        server
            .verify_server_cert(cert, &[], &server_name, &[], time)
            .map_err(|error| VerifyError::Server { name, error })?;
    }

    if info.roles != roles {
        return Err(VerifyError::Roles {
            want: roles,
            got: info.roles,
        });
    }
    Ok(info)
}

/// Checks only that `anchor`'s key signed `cert`, whatever the dates and purposes: what
/// renewal needs to know of an old, maybe expired, certificate.
pub fn signed_by(cert: &[u8], anchor: &[u8]) -> Result<(), VerifyError> {
    let parse = |der| {
        X509Certificate::from_der(der)
            .map(|(_, c)| c)
            .map_err(|e| VerifyError::Unreadable(CertError::Malformed(e.to_string())))
    };
    let cert = parse(cert)?;
    let anchor = parse(anchor)?;
    cert.verify_signature(Some(anchor.public_key()))
        .map_err(|_| VerifyError::NotSignedByAnchor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{Anchor, CaProfile, LeafProfile, Names, issue_ca, issue_leaf};
    use crate::key::KeyType;
    use rustls::CertificateError;

    fn anchor(now: SystemTime) -> Anchor {
        named_anchor("ca", now)
    }

    fn named_anchor(name: &str, now: SystemTime) -> Anchor {
        let key = KeyType::P256.generate().unwrap();
        let names = Names::for_hosts(name, None, &[], &[], None).unwrap();
        let cert = issue_ca(&CaProfile { names, days: 30 }, &key, now).unwrap();
        Anchor::new(cert.der, key, now).unwrap()
    }

    fn leaf(
        anchor: &Anchor,
        hosts: &[&str],
        roles: Role,
        now: SystemTime,
    ) -> CertificateDer<'static> {
        let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
        let profile = LeafProfile {
            names: Names::for_hosts("leaf", None, &hosts, &[], None).unwrap(),
            roles,
            uuid: None,
            days: 2,
            api_admin: false,
        };
        let key = KeyType::P256.generate().unwrap();
        issue_leaf(&profile, &key, anchor, now).unwrap().der
    }

    #[test]
    fn accepts_ours_and_checks_roles() {
        let now = SystemTime::now();
        let ca = anchor(now);
        for hosts in [&["node.test"][..], &["10.1.2.3"], &[]] {
            let cert = leaf(&ca, hosts, Role::DUAL, now);
            let info = verify(&cert, ca.der(), Role::DUAL, now).unwrap();
            assert_eq!(info.roles, Role::DUAL);
            let err = verify(&cert, ca.der(), Role::AGENT, now).unwrap_err();
            assert!(matches!(err, VerifyError::Roles { .. }), "{err}");
            signed_by(&cert, ca.der()).unwrap();
        }
    }

    #[test]
    fn refuses_another_ca_and_expired() {
        let now = SystemTime::now();
        let ca = anchor(now);
        let other = named_anchor("other", now);
        let cert = leaf(&ca, &["node.test"], Role::AGENT, now);
        let err = verify(&cert, other.der(), Role::AGENT, now).unwrap_err();
        assert!(
            matches!(
                err,
                VerifyError::Client(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer
                ))
            ),
            "{err:?}"
        );
        // Another CA with the same name: found by name, refused by signature.
        let twin = anchor(now);
        let err = verify(&cert, twin.der(), Role::AGENT, now).unwrap_err();
        assert!(
            matches!(
                err,
                VerifyError::Client(rustls::Error::InvalidCertificate(
                    CertificateError::BadSignature
                ))
            ),
            "{err:?}"
        );
        assert!(matches!(
            signed_by(&cert, other.der()),
            Err(VerifyError::NotSignedByAnchor)
        ));
        let later = now + Duration::from_secs(3 * 86400);
        let err = verify(&cert, ca.der(), Role::AGENT, later).unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
    }
}
