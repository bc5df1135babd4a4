//! Making certificates with rcgen: the CA (trust anchor) and the role certificates it signs.
//!
//! Pure: keys and the current time are passed in, PEM text comes out; nothing touches files.

use std::net::IpAddr;
use std::time::SystemTime;

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use ssntp::cert::{AltName, CertError, CertInfo};
use ssntp::{Role, Uuid};
use time::{Duration, OffsetDateTime};

use crate::eku;
use crate::key::{self, KeyError};

/// Validity of a role certificate unless `--days` says otherwise.
pub const LEAF_DAYS: u32 = 365;
/// Validity of a CA unless `--days` says otherwise: ten years.
pub const CA_DAYS: u32 = 3650;
/// The longest validity `--days` accepts (100 years).
pub const MAX_DAYS: u32 = 36500;

/// A certificate that could not be made, or an anchor that cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A host name that is not a DNS name.
    #[error(
        "invalid host name {0:?}: use letters, digits, '-' and '.' (labels of 1 to 63 characters), or an IP address"
    )]
    HostName(String),
    /// An e-mail address that cannot go in a certificate.
    #[error("invalid e-mail address {0:?}: expected ASCII text like name@example.org")]
    Email(String),
    /// A subject alternative name of a kind this tool cannot write.
    #[error("cannot write the subject alternative name {0}")]
    AltName(String),
    /// The anchor's PEM holds no certificate.
    #[error("the anchor certificate file holds no PEM certificate")]
    AnchorNoCertificate,
    /// The anchor certificate cannot be read.
    #[error("the anchor certificate is unreadable: {0}")]
    AnchorUnreadable(#[source] CertError),
    /// The anchor certificate is not a CA.
    #[error(
        "the anchor certificate ({subject}) is not a CA ({why}); pass the CA certificate made with `cumulo-cert --anchor`"
    )]
    NotCa {
        /// The anchor's subject.
        subject: String,
        /// What it lacks.
        why: &'static str,
    },
    /// The anchor key cannot be read.
    #[error("the anchor key is unusable: {0}")]
    AnchorKey(#[source] KeyError),
    /// The anchor key is not the anchor certificate's.
    #[error(
        "the anchor key does not match the anchor certificate ({subject}); pass the key written with that CA"
    )]
    KeyMismatch {
        /// The anchor's subject.
        subject: String,
    },
    /// The anchor has expired.
    #[error(
        "the anchor certificate ({subject}) expired; make a new CA with `cumulo-cert --anchor`"
    )]
    AnchorExpired {
        /// The anchor's subject.
        subject: String,
    },
    /// No validity days.
    #[error("--days must be between 1 and {MAX_DAYS}")]
    Days,
    /// An end of validity that is not after the start.
    #[error("--not-after must be later than now")]
    NotAfter,
    /// The system's random generator failed.
    #[error("the system random generator failed")]
    Random,
    /// rcgen refused the parameters.
    #[error("could not make the certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
}

/// What goes in a certificate's subject and subject alternative names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Names {
    /// The subject's common name.
    pub common_name: String,
    /// The subject's organization, if any.
    pub organization: Option<String>,
    /// Subject alternative names (DNS, IP, e-mail, URI), in order; the `urn:uuid:` name is
    /// added from the certificate's UUID, not from here.
    pub alt_names: Vec<AltName>,
}

impl Names {
    /// Names for hosts (DNS names or IP addresses, checked), extra IP addresses and an optional
    /// e-mail address.
    pub fn for_hosts(
        common_name: &str,
        organization: Option<&str>,
        hosts: &[String],
        ips: &[IpAddr],
        email: Option<&str>,
    ) -> Result<Names, BuildError> {
        let mut alt_names = Vec::new();
        for host in hosts {
            let name = match host.parse::<IpAddr>() {
                Ok(ip) => AltName::Ip(ip),
                Err(_) => AltName::Dns(check_host(host)?),
            };
            if !alt_names.contains(&name) {
                alt_names.push(name);
            }
        }
        for ip in ips {
            if !alt_names.contains(&AltName::Ip(*ip)) {
                alt_names.push(AltName::Ip(*ip));
            }
        }
        if let Some(email) = email {
            alt_names.push(AltName::Email(check_email(email)?));
        }
        Ok(Names {
            common_name: common_name.to_string(),
            organization: organization.map(str::to_string),
            alt_names,
        })
    }
}

/// Checks a DNS host name: ASCII letters, digits and `-` in dot-separated labels of 1 to 63
/// characters, no label starting or ending with `-`, at most 253 characters. Returns it
/// lowercased.
pub fn check_host(host: &str) -> Result<String, BuildError> {
    let bad = || BuildError::HostName(host.to_string());
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.is_empty() || name.len() > 253 {
        return Err(bad());
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok {
            return Err(bad());
        }
    }
    Ok(name.to_ascii_lowercase())
}

/// Checks an e-mail address for a certificate: ASCII `user@host`, the host a DNS name.
pub fn check_email(email: &str) -> Result<String, BuildError> {
    let ok = email.is_ascii()
        && !email
            .chars()
            .any(|c| c.is_ascii_whitespace() || c.is_ascii_control())
        && email
            .split_once('@')
            .is_some_and(|(user, domain)| !user.is_empty() && check_host(domain).is_ok());
    if ok {
        Ok(email.to_string())
    } else {
        Err(BuildError::Email(email.to_string()))
    }
}

/// What a CA is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaProfile {
    /// Subject and alternative names (the DNS and IP names tell endpoints where the cluster is).
    pub names: Names,
    /// Validity in days from now.
    pub days: u32,
}

/// What a role certificate is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafProfile {
    /// Subject and alternative names.
    pub names: Names,
    /// The SSNTP roles (empty: a certificate no SSNTP endpoint accepts, e.g. a REST client).
    pub roles: Role,
    /// The endpoint UUID bound with a `urn:uuid:` URI name; `None` leaves it unbound.
    pub uuid: Option<Uuid>,
    /// Validity in days from now (cut to the CA's own end).
    pub days: u32,
    /// Whether it is a REST API admin's client certificate ([`ssntp::api_admin_oid`] in its
    /// Extended Key Usage).
    pub api_admin: bool,
}

/// A certificate just made.
#[derive(Debug, Clone)]
pub struct Issued {
    /// DER.
    pub der: CertificateDer<'static>,
    /// PEM of the certificate alone.
    pub pem: String,
}

/// A CA able to sign: its certificate, checked to be a CA, and its matching key.
pub struct Anchor {
    der: CertificateDer<'static>,
    pem: String,
    info: CertInfo,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anchor")
            .field("subject", &self.info.subject)
            .finish_non_exhaustive()
    }
}

impl Anchor {
    /// Checks that the first certificate of `cert_pem` is a CA that can sign certificates, valid
    /// at `now`, and that `key_pem` holds its private key.
    pub fn from_pem(
        cert_pem: &[u8],
        key_pem: &[u8],
        now: SystemTime,
    ) -> Result<Anchor, BuildError> {
        let der = CertificateDer::pem_slice_iter(cert_pem)
            .next()
            .and_then(Result::ok)
            .ok_or(BuildError::AnchorNoCertificate)?;
        let key = key::load_key(key_pem).map_err(BuildError::AnchorKey)?;
        Anchor::new(der, key, now)
    }

    /// As [`Anchor::from_pem`], from a DER certificate and a key pair.
    pub fn new(
        der: CertificateDer<'static>,
        key: KeyPair,
        now: SystemTime,
    ) -> Result<Anchor, BuildError> {
        let info = CertInfo::parse(&der).map_err(BuildError::AnchorUnreadable)?;
        let not_ca = |why| BuildError::NotCa {
            subject: info.subject.clone(),
            why,
        };
        if !info.is_ca {
            return Err(not_ca("no basicConstraints CA:TRUE"));
        }
        if !info.key_usage.is_empty() && !info.key_usage.contains(&"keyCertSign") {
            return Err(not_ca("its key usage lacks keyCertSign"));
        }
        if !key::matches(&key, &info) {
            return Err(BuildError::KeyMismatch {
                subject: info.subject.clone(),
            });
        }
        if info.not_after <= unix(now) {
            return Err(BuildError::AnchorExpired {
                subject: info.subject.clone(),
            });
        }
        let issuer = Issuer::from_ca_cert_der(&der, key)?;
        let pem = pem_of(&der);
        Ok(Anchor {
            der,
            pem,
            info,
            issuer,
        })
    }

    /// The CA certificate (DER).
    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }

    /// The CA certificate (PEM), to follow a leaf in its file.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// What the CA certificate says.
    pub fn info(&self) -> &CertInfo {
        &self.info
    }

    /// The CA as a signer (of certificates and revocation lists).
    pub fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }

    /// The CA's key pair.
    pub fn key(&self) -> &KeyPair {
        self.issuer.key()
    }
}

/// Makes a self-signed CA: basicConstraints CA (no intermediates below it), key usage
/// keyCertSign and cRLSign, no Extended Key Usage, no role, no UUID.
pub fn issue_ca(profile: &CaProfile, key: &KeyPair, now: SystemTime) -> Result<Issued, BuildError> {
    let mut params = base_params(&profile.names, profile.days, now)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(key)?;
    Ok(issued(cert.der().clone()))
}

/// Makes a role certificate for `key`, signed by `anchor`: basicConstraints CA:FALSE, key usage
/// digitalSignature, Extended Key Usage serverAuth + clientAuth + the role OIDs, the UUID as a
/// `urn:uuid:` URI name. Its validity ends no later than the CA's.
pub fn issue_leaf(
    profile: &LeafProfile,
    key: &KeyPair,
    anchor: &Anchor,
    now: SystemTime,
) -> Result<Issued, BuildError> {
    issue_leaf_until(profile, key, anchor, now, None)
}

/// [`issue_leaf`], valid until `not_after` instead of for `profile.days` when it is given (a
/// certificate that must expire soon, e.g. to test expiry). `not_after` must be later than
/// `now`; it is cut to the CA's end as well.
pub fn issue_leaf_until(
    profile: &LeafProfile,
    key: &impl rcgen::PublicKeyData,
    anchor: &Anchor,
    now: SystemTime,
    not_after: Option<SystemTime>,
) -> Result<Issued, BuildError> {
    let mut params = base_params(&profile.names, profile.days, now)?;
    if let Some(end) = not_after {
        if unix(end) <= unix(now) {
            return Err(BuildError::NotAfter);
        }
        params.not_after =
            OffsetDateTime::from_unix_timestamp(unix(end)).map_err(|_| BuildError::NotAfter)?;
    }
    let ca_end =
        OffsetDateTime::from_unix_timestamp(anchor.info.not_after).map_err(|_| BuildError::Days)?;
    params.not_after = params.not_after.min(ca_end);
    if let Some(uuid) = profile.uuid {
        let uri = format!("{}{}", ssntp::cert::UUID_URI_PREFIX, uuid.hyphenated());
        params.subject_alt_names.push(SanType::URI(ia5(&uri)?));
    }
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params
        .custom_extensions
        .push(eku::extension(profile.roles, profile.api_admin));
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(key, &anchor.issuer)?;
    Ok(issued(cert.der().clone()))
}

fn base_params(names: &Names, days: u32, now: SystemTime) -> Result<CertificateParams, BuildError> {
    if days == 0 || days > MAX_DAYS {
        return Err(BuildError::Days);
    }
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, names.common_name.as_str());
    if let Some(org) = &names.organization {
        dn.push(DnType::OrganizationName, org.as_str());
    }
    params.distinguished_name = dn;
    let start = OffsetDateTime::from_unix_timestamp(unix(now)).map_err(|_| BuildError::Days)?;
    params.not_before = start;
    params.not_after = start + Duration::days(i64::from(days));
    params.serial_number = Some(random_serial()?);
    for name in &names.alt_names {
        params.subject_alt_names.push(match name {
            AltName::Dns(dns) => SanType::DnsName(ia5(dns)?),
            AltName::Ip(ip) => SanType::IpAddress(*ip),
            AltName::Uri(uri) => SanType::URI(ia5(uri)?),
            AltName::Email(email) => SanType::Rfc822Name(ia5(email)?),
            AltName::Other(other) => return Err(BuildError::AltName(other.clone())),
        });
    }
    Ok(params)
}

fn ia5(text: &str) -> Result<Ia5String, BuildError> {
    Ia5String::try_from(text).map_err(|_| BuildError::AltName(text.to_string()))
}

/// A positive 16-byte serial number with 126 random bits (RFC 5280: at most 20 bytes).
fn random_serial() -> Result<SerialNumber, BuildError> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| BuildError::Random)?;
    // Clear the sign bit and set the next, so the DER INTEGER is positive and always 16 bytes.
    bytes[0] = (bytes[0] & 0x3f) | 0x40;
    Ok(SerialNumber::from_slice(&bytes))
}

fn issued(der: CertificateDer<'static>) -> Issued {
    let pem = pem_of(&der);
    Issued { der, pem }
}

/// The PEM text of a DER certificate.
pub fn pem_of(der: &[u8]) -> String {
    crate::pem::encode("CERTIFICATE", der)
}

/// Seconds since the Unix epoch (negative before it).
pub fn unix(time: SystemTime) -> i64 {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KeyType;
    use rcgen::{CustomExtension, ExtendedKeyUsagePurpose};
    use ssntp::UuidBinding;
    use ssntp::cert::peer_certificate;

    fn now() -> SystemTime {
        SystemTime::now()
    }

    fn ca() -> Anchor {
        let key = KeyType::P256.generate().unwrap();
        let names =
            Names::for_hosts("test CA", Some("cumulo"), &["ca.test".into()], &[], None).unwrap();
        let cert = issue_ca(&CaProfile { names, days: 10 }, &key, now()).unwrap();
        Anchor::new(cert.der, key, now()).unwrap()
    }

    fn leaf_profile(roles: Role, uuid: Option<Uuid>) -> LeafProfile {
        LeafProfile {
            names: Names::for_hosts("node", None, &["node.test".into()], &[], None).unwrap(),
            roles,
            uuid,
            days: 1,
            api_admin: false,
        }
    }

    fn leaf(anchor: &Anchor, roles: Role, uuid: Option<Uuid>) -> CertInfo {
        let key = KeyType::P256.generate().unwrap();
        let cert = issue_leaf(&leaf_profile(roles, uuid), &key, anchor, now()).unwrap();
        CertInfo::parse(&cert.der).unwrap()
    }

    #[test]
    fn every_role_combination_reads_back() {
        let anchor = ca();
        // All 64 subsets of the six roles, the dual role 0x14 among them.
        for bits in 0..=Role::all().bits() {
            let roles = Role::from_bits(bits).unwrap();
            let key = KeyType::P256.generate().unwrap();
            let cert = issue_leaf(&leaf_profile(roles, None), &key, &anchor, now()).unwrap();
            let peer = peer_certificate(&cert.der).unwrap();
            assert_eq!(peer.roles, roles, "roles {bits:#x}");
            let info = CertInfo::parse(&cert.der).unwrap();
            let purposes = info.purposes.unwrap();
            assert!(purposes.server_auth && purposes.client_auth && !purposes.any);
            assert_eq!(purposes.other.len(), roles.iter().count());
            for role in roles.iter() {
                assert!(purposes.other.contains(&role.oid().unwrap()));
            }
        }
        let dual = leaf(&anchor, Role::DUAL, None);
        assert_eq!(dual.roles.bits(), 0x14);
    }

    #[test]
    fn unknown_oids_are_ignored_and_no_role_oid_is_no_role() {
        let anchor = ca();
        let key = KeyType::P256.generate().unwrap();
        // An EKU with an unknown OID under the role arc, one from elsewhere, and AGENT.
        let mut unknown = Role::AGENT.oid_der().unwrap();
        *unknown.last_mut().unwrap() = 99;
        let agent = Role::AGENT.oid_der().unwrap();
        let mut body = Vec::new();
        for oid in [&eku::SERVER_AUTH[..], &unknown, &[0x2a, 0x03, 0x04], &agent] {
            body.push(0x06);
            body.push(oid.len() as u8);
            body.extend_from_slice(oid);
        }
        let mut value = vec![0x30, body.len() as u8];
        value.extend(body);
        let mut params = base_params(&leaf_profile(Role::empty(), None).names, 1, now()).unwrap();
        params
            .custom_extensions
            .push(CustomExtension::from_oid_content(&[2, 5, 29, 37], value));
        let cert = params.signed_by(&key, &anchor.issuer).unwrap();
        assert_eq!(peer_certificate(cert.der()).unwrap().roles, Role::AGENT);

        // A standard EKU without role OIDs, and no EKU at all: no role.
        let mut params = base_params(&leaf_profile(Role::empty(), None).names, 1, now()).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &anchor.issuer).unwrap();
        assert_eq!(peer_certificate(cert.der()).unwrap().roles, Role::empty());
        let params = base_params(&leaf_profile(Role::empty(), None).names, 1, now()).unwrap();
        let cert = params.signed_by(&key, &anchor.issuer).unwrap();
        let peer = peer_certificate(cert.der()).unwrap();
        assert_eq!(peer.roles, Role::empty());
        assert_eq!(peer.binding, UuidBinding::Unbound);
    }

    #[test]
    fn uuid_binding_reads_back() {
        let anchor = ca();
        let uuid = Uuid::new_v4();
        let info = leaf(&anchor, Role::AGENT, Some(uuid));
        assert_eq!(info.binding, UuidBinding::Bound(uuid));
        assert!(
            info.alt_names
                .contains(&AltName::Uri(format!("urn:uuid:{uuid}")))
        );
        assert_eq!(
            leaf(&anchor, Role::AGENT, None).binding,
            UuidBinding::Unbound
        );

        // Two URI names, or a bad one: ambiguous.
        let key = KeyType::P256.generate().unwrap();
        let mut profile = leaf_profile(Role::AGENT, Some(uuid));
        profile
            .names
            .alt_names
            .push(AltName::Uri(format!("URN:UUID:{}", Uuid::new_v4())));
        let cert = issue_leaf(&profile, &key, &anchor, now()).unwrap();
        assert_eq!(
            peer_certificate(&cert.der).unwrap().binding,
            UuidBinding::Ambiguous
        );
        let mut profile = leaf_profile(Role::AGENT, None);
        profile
            .names
            .alt_names
            .push(AltName::Uri("urn:uuid:1234".into()));
        let cert = issue_leaf(&profile, &key, &anchor, now()).unwrap();
        assert_eq!(
            peer_certificate(&cert.der).unwrap().binding,
            UuidBinding::Ambiguous
        );
    }

    #[test]
    fn ca_and_leaf_shapes() {
        let anchor = ca();
        let ca = anchor.info();
        assert!(ca.is_ca && ca.self_issued);
        assert_eq!(ca.key_usage, vec!["keyCertSign", "cRLSign"]);
        assert_eq!(ca.purposes, None);
        assert_eq!(ca.roles, Role::empty());
        assert_eq!(ca.not_after - ca.not_before, 10 * 86400);
        assert_eq!(ca.signature, "ecdsa-with-SHA256");
        assert_eq!(ca.serial.len(), 16 * 3 - 1);

        let leaf = leaf(&anchor, Role::SCHEDULER, None);
        assert!(!leaf.is_ca && !leaf.self_issued);
        assert_eq!(leaf.issuer, ca.subject);
        assert_eq!(leaf.key_usage, vec!["digitalSignature"]);
        assert_eq!(leaf.not_after - leaf.not_before, 86400);
        assert_eq!(leaf.alt_names, vec![AltName::Dns("node.test".into())]);
        assert_ne!(leaf.serial, ca.serial);
    }

    #[test]
    fn leaf_validity_ends_with_the_ca() {
        let anchor = ca();
        let key = KeyType::P256.generate().unwrap();
        let mut profile = leaf_profile(Role::AGENT, None);
        profile.days = 100;
        let cert = issue_leaf(&profile, &key, &anchor, now()).unwrap();
        let info = CertInfo::parse(&cert.der).unwrap();
        assert_eq!(info.not_after, anchor.info().not_after);
    }

    #[test]
    fn every_key_type_signs_and_is_signed() {
        for kind in KeyType::ALL {
            let key = kind.generate().unwrap();
            let names = Names::for_hosts("ca", None, &[], &[], None).unwrap();
            let cert = issue_ca(&CaProfile { names, days: 1 }, &key, now()).unwrap();
            let anchor = Anchor::new(cert.der, key, now()).unwrap();
            let leaf_key = kind.generate().unwrap();
            let cert =
                issue_leaf(&leaf_profile(Role::AGENT, None), &leaf_key, &anchor, now()).unwrap();
            let info = CertInfo::parse(&cert.der).unwrap();
            assert_eq!(KeyType::of(&info.key), Some(kind));
            assert!(crate::key::matches(&leaf_key, &info));
        }
    }

    #[test]
    fn anchors_are_checked() {
        let anchor = ca();
        let key = KeyType::P256.generate().unwrap();
        let leaf = issue_leaf(&leaf_profile(Role::AGENT, None), &key, &anchor, now()).unwrap();
        let err = Anchor::new(leaf.der, key, now()).unwrap_err();
        assert!(matches!(err, BuildError::NotCa { .. }), "{err}");

        let other = KeyType::P256.generate().unwrap();
        let err = Anchor::new(anchor.der().clone(), other, now()).unwrap_err();
        assert!(matches!(err, BuildError::KeyMismatch { .. }), "{err}");

        let later = now() + std::time::Duration::from_secs(11 * 86400);
        let key = crate::key::load_key(anchor.key().serialize_pem().as_bytes()).unwrap();
        let err = Anchor::new(anchor.der().clone(), key, later).unwrap_err();
        assert!(matches!(err, BuildError::AnchorExpired { .. }), "{err}");

        let key_pem = anchor.key().serialize_pem();
        let again = Anchor::from_pem(anchor.pem().as_bytes(), key_pem.as_bytes(), now()).unwrap();
        assert_eq!(again.info(), anchor.info());
        let err = Anchor::from_pem(b"", key_pem.as_bytes(), now()).unwrap_err();
        assert!(matches!(err, BuildError::AnchorNoCertificate));
    }

    #[test]
    fn names_are_checked() {
        for good in ["localhost", "a-b.example.org", "X1.test.", "1.2.3.4.nip"] {
            assert!(check_host(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a..b",
            "a b",
            "é.test",
            "*.test",
            &"a".repeat(64),
        ] {
            assert!(check_host(bad).is_err(), "{bad}");
        }
        let names = Names::for_hosts(
            "n",
            None,
            &["Node.Test".into(), "10.0.0.1".into(), "::1".into()],
            &["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()],
            Some("ops@example.org"),
        )
        .unwrap();
        assert_eq!(
            names.alt_names,
            vec![
                AltName::Dns("node.test".into()),
                AltName::Ip("10.0.0.1".parse().unwrap()),
                AltName::Ip("::1".parse().unwrap()),
                AltName::Ip("10.0.0.2".parse().unwrap()),
                AltName::Email("ops@example.org".into()),
            ]
        );
        assert!(Names::for_hosts("n", None, &[], &[], Some("nobody")).is_err());
    }

    #[test]
    fn pem_matches_rcgen() {
        let key = KeyType::P256.generate().unwrap();
        let names = Names::for_hosts("ca", None, &[], &[], None).unwrap();
        let params = base_params(&names, 1, now()).unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            pem_of(cert.der()).replace("\r\n", "\n"),
            cert.pem().replace("\r\n", "\n")
        );
    }
}
