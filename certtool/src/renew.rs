//! Renewal: a new certificate and a new key for an existing role certificate, with the same
//! subject (CN and O), roles, subject alternative names and bound UUID, and a new validity.
//!
//! The key is always new (same type as the old one unless asked otherwise): renewing is also
//! rotating the key. The old certificate may have expired; it must have been signed by the
//! anchor that signs the new one.

use std::time::SystemTime;

use rcgen::KeyPair;
use rustls::pki_types::CertificateDer;
use ssntp::UuidBinding;
use ssntp::cert::{AltName, CertError, CertInfo};

use crate::build::{self, Anchor, BuildError, Issued, LeafProfile, Names};
use crate::key::{KeyError, KeyType};
use crate::verify::{self, VerifyError};

/// Why a certificate could not be renewed.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    /// The old certificate cannot be read.
    #[error("the certificate to renew is unreadable: {0}")]
    Unreadable(#[from] CertError),
    /// It is a CA.
    #[error(
        "the certificate to renew is a CA; renew role certificates only, or make a new CA with --anchor"
    )]
    IsCa,
    /// The anchor did not sign it.
    #[error(
        "the certificate to renew was not issued by this anchor ({0}); pass the CA that signed it"
    )]
    OtherIssuer(#[source] VerifyError),
    /// Its UUID binding is ambiguous.
    #[error(
        "the certificate to renew binds several or malformed urn:uuid: names; make a new one with --role and --uuid"
    )]
    Ambiguous,
    /// Its key type is not one this tool makes.
    #[error("the certificate to renew has a {0} key; pass --key-type to choose the new key's type")]
    KeyType(String),
    /// A key could not be made.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The certificate could not be made.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The new certificate failed its own check.
    #[error("the renewed certificate fails its check: {0}")]
    Check(#[source] VerifyError),
}

/// A renewed certificate and its new key.
#[derive(Debug)]
pub struct Renewed {
    /// The new certificate.
    pub cert: Issued,
    /// Its new key.
    pub key: KeyPair,
    /// What the new certificate says.
    pub info: CertInfo,
}

/// Renews `old` with `anchor`: see the module documentation. `key_type` overrides the old key's
/// type; `days` is the new validity, or `not_after` its end when given.
pub fn renew(
    old: &CertificateDer<'_>,
    anchor: &Anchor,
    key_type: Option<KeyType>,
    days: u32,
    not_after: Option<SystemTime>,
    now: SystemTime,
) -> Result<Renewed, RenewError> {
    let info = CertInfo::parse(old)?;
    if info.is_ca {
        return Err(RenewError::IsCa);
    }
    verify::signed_by(old, anchor.der()).map_err(RenewError::OtherIssuer)?;
    let uuid = match info.binding {
        UuidBinding::Unbound => None,
        UuidBinding::Bound(uuid) => Some(uuid),
        UuidBinding::Ambiguous => return Err(RenewError::Ambiguous),
    };
    let key_type = match key_type.or_else(|| KeyType::of(&info.key)) {
        Some(kind) => kind,
        None => return Err(RenewError::KeyType(info.key.to_string())),
    };
    // The `urn:uuid:` name comes back from `uuid`; every other name is kept in order.
    let alt_names: Vec<AltName> = info
        .alt_names
        .iter()
        .filter(|n| !matches!(n, AltName::Uri(u) if ssntp::cert::uuid_binding([u.as_str()]) != UuidBinding::Unbound))
        .cloned()
        .collect();
    let common_name = info
        .common_name
        .clone()
        .or_else(|| info.dns_names().next().map(str::to_string))
        .unwrap_or_else(|| "cumulo".to_string());
    let profile = LeafProfile {
        names: Names {
            common_name,
            organization: info.organization.clone(),
            alt_names,
        },
        roles: info.roles,
        uuid,
        days,
        api_admin: info.is_api_admin(),
    };
    let key = key_type.generate()?;
    let cert = build::issue_leaf_until(&profile, &key, anchor, now, not_after)?;
    let info =
        verify::verify(&cert.der, anchor.der(), profile.roles, now).map_err(RenewError::Check)?;
    Ok(Renewed { cert, key, info })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{CaProfile, issue_ca, issue_leaf};
    use ssntp::{Role, Uuid};
    use std::time::Duration;

    fn anchor(now: SystemTime) -> Anchor {
        let key = KeyType::P256.generate().unwrap();
        let names = Names::for_hosts("ca", Some("org"), &[], &[], None).unwrap();
        let cert = issue_ca(&CaProfile { names, days: 100 }, &key, now).unwrap();
        Anchor::new(cert.der, key, now).unwrap()
    }

    #[test]
    fn keeps_identity_and_renews_dates_and_key() {
        let then = SystemTime::now();
        let ca = anchor(then);
        let uuid = Uuid::new_v4();
        let profile = LeafProfile {
            names: Names::for_hosts(
                "node",
                Some("org"),
                &["node.test".into(), "10.0.0.9".into()],
                &[],
                Some("ops@example.org"),
            )
            .unwrap(),
            roles: Role::DUAL,
            uuid: Some(uuid),
            days: 1,
            api_admin: false,
        };
        let old_key = KeyType::Ed25519.generate().unwrap();
        let old = issue_leaf(&profile, &old_key, &ca, then).unwrap();
        let old_info = CertInfo::parse(&old.der).unwrap();

        // Two days later the old one has expired; renewal still works.
        let now = then + Duration::from_secs(2 * 86400);
        let new = renew(&old.der, &ca, None, 30, None, now).unwrap();
        assert_eq!(new.info.roles, Role::DUAL);
        assert_eq!(new.info.binding, UuidBinding::Bound(uuid));
        assert_eq!(new.info.alt_names, old_info.alt_names);
        assert_eq!(new.info.subject, old_info.subject);
        assert_eq!(new.info.key, old_info.key);
        assert_ne!(new.info.public_key, old_info.public_key);
        assert_ne!(new.info.serial, old_info.serial);
        assert_eq!(new.info.not_after - new.info.not_before, 30 * 86400);

        // An end of validity instead of days: exactly that end.
        let until = now + Duration::from_secs(90);
        let short = renew(&old.der, &ca, None, 30, Some(until), now).unwrap();
        assert_eq!(short.info.not_after, crate::build::unix(until));
        assert_eq!(short.info.binding, UuidBinding::Bound(uuid));
        assert!(matches!(
            renew(&old.der, &ca, None, 30, Some(now), now),
            Err(RenewError::Build(BuildError::NotAfter))
        ));

        let p384 = renew(&old.der, &ca, Some(KeyType::P384), 30, None, now).unwrap();
        assert_eq!(KeyType::of(&p384.info.key), Some(KeyType::P384));
    }

    #[test]
    fn refuses_cas_and_strangers() {
        let now = SystemTime::now();
        let ca = anchor(now);
        assert!(matches!(
            renew(ca.der(), &ca, None, 1, None, now),
            Err(RenewError::IsCa)
        ));
        let other = anchor(now);
        let profile = LeafProfile {
            names: Names::for_hosts("n", None, &[], &[], None).unwrap(),
            roles: Role::AGENT,
            uuid: None,
            days: 1,
            api_admin: false,
        };
        let key = KeyType::P256.generate().unwrap();
        let cert = issue_leaf(&profile, &key, &other, now).unwrap();
        let err = renew(&cert.der, &ca, None, 1, None, now).unwrap_err();
        assert!(matches!(err, RenewError::OtherIssuer(_)), "{err}");
    }
}
