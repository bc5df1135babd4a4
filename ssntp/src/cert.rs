//! Reading an X.509 certificate (DER): the roles and the bound UUID an SSNTP peer proves
//! (PROTOCOL.md §2), and a summary of any certificate for display.
//!
//! The networked layer and `cumulo-cert` use the same code, so what the tool writes is what an
//! endpoint reads. Pure: no IO, no clock. It does not check signatures, chains or validity dates:
//! that is the TLS layer's job (or `cumulo-cert --verify`'s).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use uuid::Uuid;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{ExtendedKeyUsage, GeneralName};
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

use crate::handshake::{PeerCertificate, UuidBinding};
use crate::role::Role;

/// The prefix of a URI subject alternative name that binds an endpoint's UUID (compared
/// case-insensitively).
pub const UUID_URI_PREFIX: &str = "urn:uuid:";

/// Why a certificate could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// Not one DER-encoded X.509 certificate.
    #[error("not a DER X.509 certificate: {0}")]
    Malformed(String),
    /// Bytes after the certificate.
    #[error("{0} bytes after the DER certificate")]
    TrailingBytes(usize),
    /// An extension that is malformed or present more than once.
    #[error("bad {name} extension: {reason}")]
    Extension {
        /// Which extension.
        name: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// The roles and bound UUID of a peer's certificate (DER): roles are the OR of the role OIDs in
/// the Extended Key Usage (unknown OIDs ignored, none → no role); the binding comes from the
/// `urn:uuid:` URI names (see [`uuid_binding`]).
pub fn peer_certificate(der: &[u8]) -> Result<PeerCertificate, CertError> {
    let cert = parse(der)?;
    Ok(PeerCertificate {
        roles: roles_of(&cert)?,
        binding: uuid_binding(uris(&names_of(&cert)?)),
    })
}

/// The UUID bound by a certificate's URI names: none with the `urn:uuid:` prefix (any case) →
/// [`UuidBinding::Unbound`]; exactly one, holding a hyphenated UUID → [`UuidBinding::Bound`];
/// more than one, or one that is not a UUID → [`UuidBinding::Ambiguous`].
pub fn uuid_binding<'a>(uris: impl IntoIterator<Item = &'a str>) -> UuidBinding {
    let mut found = UuidBinding::Unbound;
    for uri in uris {
        let Some(rest) = strip_uuid_prefix(uri) else {
            continue;
        };
        found = match (found, parse_hyphenated(rest)) {
            (UuidBinding::Unbound, Some(uuid)) => UuidBinding::Bound(uuid),
            _ => return UuidBinding::Ambiguous,
        };
    }
    found
}

fn strip_uuid_prefix(uri: &str) -> Option<&str> {
    let head = uri.get(..UUID_URI_PREFIX.len())?;
    head.eq_ignore_ascii_case(UUID_URI_PREFIX)
        .then(|| &uri[UUID_URI_PREFIX.len()..])
}

fn parse_hyphenated(text: &str) -> Option<Uuid> {
    // `Uuid::try_parse` also takes the simple, braced and URN forms; only the 36-character
    // hyphenated form is a UUID in a `urn:uuid:` name (RFC 9562).
    if text.len() != 36 {
        return None;
    }
    Uuid::try_parse(text).ok()
}

/// A subject alternative name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AltName {
    /// A DNS name.
    Dns(String),
    /// An IP address.
    Ip(IpAddr),
    /// A URI (`urn:uuid:…` binds an endpoint's UUID).
    Uri(String),
    /// An e-mail address.
    Email(String),
    /// Any other kind, described.
    Other(String),
}

impl fmt::Display for AltName {
    /// `DNS:host`, `IP:10.0.0.1`, `URI:urn:uuid:…`, `email:a@b`, or the other kind's description.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AltName::Dns(name) => write!(f, "DNS:{name}"),
            AltName::Ip(ip) => write!(f, "IP:{ip}"),
            AltName::Uri(uri) => write!(f, "URI:{uri}"),
            AltName::Email(email) => write!(f, "email:{email}"),
            AltName::Other(other) => f.write_str(other),
        }
    }
}

/// A certificate's public key algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// ECDSA on NIST P-256.
    EcdsaP256,
    /// ECDSA on NIST P-384.
    EcdsaP384,
    /// ECDSA on NIST P-521.
    EcdsaP521,
    /// ECDSA on another curve (the curve's dotted OID, if named).
    EcdsaOther(String),
    /// Ed25519.
    Ed25519,
    /// Ed448.
    Ed448,
    /// RSA, with its modulus size in bits.
    Rsa {
        /// Modulus size.
        bits: usize,
    },
    /// Anything else: the algorithm's dotted OID.
    Other(String),
}

impl fmt::Display for KeyKind {
    /// `ECDSA P-256`, `Ed25519`, `RSA 2048`, …
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyKind::EcdsaP256 => f.write_str("ECDSA P-256"),
            KeyKind::EcdsaP384 => f.write_str("ECDSA P-384"),
            KeyKind::EcdsaP521 => f.write_str("ECDSA P-521"),
            KeyKind::EcdsaOther(curve) => write!(f, "ECDSA curve {curve}"),
            KeyKind::Ed25519 => f.write_str("Ed25519"),
            KeyKind::Ed448 => f.write_str("Ed448"),
            KeyKind::Rsa { bits } => write!(f, "RSA {bits}"),
            KeyKind::Other(oid) => write!(f, "algorithm {oid}"),
        }
    }
}

/// The purposes of a certificate's Extended Key Usage extension.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyPurposes {
    /// `anyExtendedKeyUsage`.
    pub any: bool,
    /// TLS server (`serverAuth`).
    pub server_auth: bool,
    /// TLS client (`clientAuth`).
    pub client_auth: bool,
    /// Every other purpose, role OIDs included, as dotted OIDs.
    pub other: Vec<String>,
}

/// What `cumulo-cert --dump` shows of a certificate: ours or any other X.509 certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// The subject's distinguished name (`CN=…, O=…`).
    pub subject: String,
    /// The subject's first common name (CN), if any.
    pub common_name: Option<String>,
    /// The subject's first organization (O), if any.
    pub organization: Option<String>,
    /// The issuer's distinguished name.
    pub issuer: String,
    /// Whether subject and issuer are the same name (a root or self-signed certificate).
    pub self_issued: bool,
    /// The serial number in hex, bytes separated by `:`.
    pub serial: String,
    /// Start of validity, seconds since the Unix epoch.
    pub not_before: i64,
    /// End of validity, seconds since the Unix epoch.
    pub not_after: i64,
    /// Whether basicConstraints says CA.
    pub is_ca: bool,
    /// The key usages by their RFC 5280 names, empty without the extension.
    pub key_usage: Vec<&'static str>,
    /// The Extended Key Usage; `None` without the extension.
    pub purposes: Option<KeyPurposes>,
    /// The SSNTP roles (OR of the role OIDs in the Extended Key Usage).
    pub roles: Role,
    /// The UUID the certificate binds.
    pub binding: UuidBinding,
    /// The subject alternative names, in order.
    pub alt_names: Vec<AltName>,
    /// The public key algorithm.
    pub key: KeyKind,
    /// The subject public key itself (the content of the BIT STRING: an EC point, an RSA
    /// `RSAPublicKey`, 32 bytes of Ed25519), to match a private key against.
    pub public_key: Vec<u8>,
    /// The signature algorithm, by name where known, else its dotted OID.
    pub signature: String,
}

impl CertInfo {
    /// Whether it is a REST API admin's client certificate: its Extended Key Usage carries
    /// [`crate::api_admin_oid`].
    pub fn is_api_admin(&self) -> bool {
        let oid = crate::api_admin_oid();
        self.purposes
            .as_ref()
            .is_some_and(|p| p.other.contains(&oid))
    }

    /// Reads a certificate (DER).
    pub fn parse(der: &[u8]) -> Result<CertInfo, CertError> {
        let cert = parse(der)?;
        let alt_names = names_of(&cert)?;
        let is_ca = cert
            .basic_constraints()
            .map_err(|e| extension_error("basicConstraints", e))?
            .is_some_and(|bc| bc.value.ca);
        let key_usage = match cert
            .key_usage()
            .map_err(|e| extension_error("keyUsage", e))?
        {
            Some(ku) => key_usage_names(ku.value),
            None => Vec::new(),
        };
        let purposes = eku_of(&cert)?.map(|eku| KeyPurposes {
            any: eku.any,
            server_auth: eku.server_auth,
            client_auth: eku.client_auth,
            other: other_purposes(eku),
        });
        let spki = cert.public_key();
        Ok(CertInfo {
            subject: cert.subject().to_string(),
            common_name: first_text(cert.subject().iter_common_name()),
            organization: first_text(cert.subject().iter_organization()),
            issuer: cert.issuer().to_string(),
            self_issued: cert.subject().as_raw() == cert.issuer().as_raw(),
            serial: hex_colon(cert.raw_serial()),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            is_ca,
            key_usage,
            purposes,
            roles: roles_of(&cert)?,
            binding: uuid_binding(uris(&alt_names)),
            key: key_kind(spki),
            public_key: spki.subject_public_key.data.to_vec(),
            signature: signature_name(&cert.signature_algorithm.algorithm.to_id_string()),
            alt_names,
        })
    }

    /// What the TLS layer needs of it.
    pub fn peer(&self) -> PeerCertificate {
        PeerCertificate {
            roles: self.roles,
            binding: self.binding,
        }
    }

    /// The DNS names among the subject alternative names.
    pub fn dns_names(&self) -> impl Iterator<Item = &str> {
        self.alt_names.iter().filter_map(|n| match n {
            AltName::Dns(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The IP addresses among the subject alternative names.
    pub fn ip_addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.alt_names.iter().filter_map(|n| match n {
            AltName::Ip(ip) => Some(*ip),
            _ => None,
        })
    }
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, CertError> {
    let (rest, cert) =
        X509Certificate::from_der(der).map_err(|e| CertError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CertError::TrailingBytes(rest.len()));
    }
    Ok(cert)
}

fn first_text<'a>(
    mut attrs: impl Iterator<Item = &'a x509_parser::x509::AttributeTypeAndValue<'a>>,
) -> Option<String> {
    attrs
        .next()
        .and_then(|a| a.as_str().ok())
        .map(str::to_string)
}

fn extension_error(name: &'static str, e: impl fmt::Display) -> CertError {
    CertError::Extension {
        name,
        reason: e.to_string(),
    }
}

fn eku_of<'a>(
    cert: &'a X509Certificate<'_>,
) -> Result<Option<&'a ExtendedKeyUsage<'a>>, CertError> {
    Ok(cert
        .extended_key_usage()
        .map_err(|e| extension_error("extendedKeyUsage", e))?
        .map(|ext| ext.value))
}

fn roles_of(cert: &X509Certificate<'_>) -> Result<Role, CertError> {
    Ok(eku_of(cert)?
        .map(|eku| Role::from_oids(eku.other.iter().map(|oid| oid.as_bytes())))
        .unwrap_or_default())
}

fn names_of(cert: &X509Certificate<'_>) -> Result<Vec<AltName>, CertError> {
    let Some(san) = cert
        .subject_alternative_name()
        .map_err(|e| extension_error("subjectAltName", e))?
    else {
        return Ok(Vec::new());
    };
    Ok(san.value.general_names.iter().map(alt_name).collect())
}

fn uris(names: &[AltName]) -> impl Iterator<Item = &str> {
    names.iter().filter_map(|n| match n {
        AltName::Uri(uri) => Some(uri.as_str()),
        _ => None,
    })
}

fn alt_name(name: &GeneralName<'_>) -> AltName {
    match name {
        GeneralName::DNSName(n) => AltName::Dns((*n).to_string()),
        GeneralName::URI(u) => AltName::Uri((*u).to_string()),
        GeneralName::RFC822Name(e) => AltName::Email((*e).to_string()),
        GeneralName::IPAddress(bytes) => match *bytes {
            [a, b, c, d] => AltName::Ip(IpAddr::V4(Ipv4Addr::new(*a, *b, *c, *d))),
            bytes => match <[u8; 16]>::try_from(bytes) {
                Ok(v6) => AltName::Ip(IpAddr::V6(Ipv6Addr::from(v6))),
                Err(_) => AltName::Other(format!("IP:<{} bytes>", bytes.len())),
            },
        },
        GeneralName::DirectoryName(dn) => AltName::Other(format!("DirName:{dn}")),
        GeneralName::RegisteredID(oid) => AltName::Other(format!("RID:{}", dotted(oid.as_bytes()))),
        GeneralName::OtherName(oid, _) => {
            AltName::Other(format!("othername:{}", dotted(oid.as_bytes())))
        }
        other => AltName::Other(format!("{other:?}")),
    }
}

fn other_purposes(eku: &ExtendedKeyUsage<'_>) -> Vec<String> {
    let named = [
        (eku.code_signing, "1.3.6.1.5.5.7.3.3"),
        (eku.email_protection, "1.3.6.1.5.5.7.3.4"),
        (eku.time_stamping, "1.3.6.1.5.5.7.3.8"),
        (eku.ocsp_signing, "1.3.6.1.5.5.7.3.9"),
    ];
    named
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, oid)| (*oid).to_string())
        .chain(eku.other.iter().map(|oid| dotted(oid.as_bytes())))
        .collect()
}

fn key_usage_names(ku: &x509_parser::extensions::KeyUsage) -> Vec<&'static str> {
    [
        (ku.digital_signature(), "digitalSignature"),
        (ku.non_repudiation(), "nonRepudiation"),
        (ku.key_encipherment(), "keyEncipherment"),
        (ku.data_encipherment(), "dataEncipherment"),
        (ku.key_agreement(), "keyAgreement"),
        (ku.key_cert_sign(), "keyCertSign"),
        (ku.crl_sign(), "cRLSign"),
        (ku.encipher_only(), "encipherOnly"),
        (ku.decipher_only(), "decipherOnly"),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .map(|(_, name)| name)
    .collect()
}

/// DER content bytes of the named curves (`namedCurve` parameter of `id-ecPublicKey`).
const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];

fn key_kind(spki: &SubjectPublicKeyInfo<'_>) -> KeyKind {
    let alg = spki.algorithm.algorithm.to_id_string();
    match alg.as_str() {
        "1.2.840.10045.2.1" => {
            let curve = spki.algorithm.parameters.as_ref().map(|p| p.data);
            match curve {
                Some(P256) => KeyKind::EcdsaP256,
                Some(P384) => KeyKind::EcdsaP384,
                Some(P521) => KeyKind::EcdsaP521,
                Some(other) => KeyKind::EcdsaOther(dotted(other)),
                None => KeyKind::EcdsaOther("(none)".into()),
            }
        }
        "1.3.101.112" => KeyKind::Ed25519,
        "1.3.101.113" => KeyKind::Ed448,
        "1.2.840.113549.1.1.1" => KeyKind::Rsa {
            bits: spki.parsed().map(|k| k.key_size()).unwrap_or(0),
        },
        _ => KeyKind::Other(alg),
    }
}

fn signature_name(oid: &str) -> String {
    let name = match oid {
        "1.2.840.10045.4.3.2" => "ecdsa-with-SHA256",
        "1.2.840.10045.4.3.3" => "ecdsa-with-SHA384",
        "1.2.840.10045.4.3.4" => "ecdsa-with-SHA512",
        "1.3.101.112" => "Ed25519",
        "1.3.101.113" => "Ed448",
        "1.2.840.113549.1.1.5" => "sha1WithRSAEncryption",
        "1.2.840.113549.1.1.10" => "RSASSA-PSS",
        "1.2.840.113549.1.1.11" => "sha256WithRSAEncryption",
        "1.2.840.113549.1.1.12" => "sha384WithRSAEncryption",
        "1.2.840.113549.1.1.13" => "sha512WithRSAEncryption",
        other => return other.to_string(),
    };
    name.to_string()
}

/// The dotted form of an OID's DER content bytes; arcs up to 128 bits (the role arc needs 124).
/// Content that is not a well-formed OID is shown in hex.
pub fn dotted(content: &[u8]) -> String {
    let mut arcs: Vec<u128> = Vec::new();
    let mut arc: u128 = 0;
    let mut pending = false;
    for &byte in content {
        if arc >> 121 != 0 || (!pending && byte == 0x80) {
            return hex_colon(content);
        }
        arc = (arc << 7) | u128::from(byte & 0x7f);
        pending = byte & 0x80 != 0;
        if !pending {
            arcs.push(arc);
            arc = 0;
        }
    }
    let Some(&first) = arcs.first() else {
        return hex_colon(content);
    };
    if pending {
        return hex_colon(content);
    }
    let (a, b) = match first {
        0..40 => (0, first),
        40..80 => (1, first - 40),
        _ => (2, first - 80),
    };
    let mut out = format!("{a}.{b}");
    for arc in &arcs[1..] {
        out.push('.');
        out.push_str(&arc.to_string());
    }
    out
}

fn hex_colon(bytes: &[u8]) -> String {
    let parts: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_from_uris() {
        let id = "6ba7b810-9dad-11d1-80b4-00c04fd430c8";
        let uuid = Uuid::parse_str(id).unwrap();
        assert_eq!(uuid_binding([]), UuidBinding::Unbound);
        assert_eq!(
            uuid_binding(["https://example.org/", "urn:isbn:123"]),
            UuidBinding::Unbound
        );
        assert_eq!(
            uuid_binding([format!("urn:uuid:{id}").as_str()]),
            UuidBinding::Bound(uuid)
        );
        // The prefix is case-insensitive, and so is the hex.
        let upper = format!("URN:UUID:{}", id.to_uppercase());
        assert_eq!(uuid_binding([upper.as_str()]), UuidBinding::Bound(uuid));
        let mixed = format!("Urn:Uuid:{id}");
        assert_eq!(
            uuid_binding(["https://x/", mixed.as_str()]),
            UuidBinding::Bound(uuid)
        );
    }

    #[test]
    fn binding_ambiguous_when_two_or_malformed() {
        let a = "urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8";
        let b = "urn:uuid:6ba7b811-9dad-11d1-80b4-00c04fd430c8";
        assert_eq!(uuid_binding([a, b]), UuidBinding::Ambiguous);
        assert_eq!(uuid_binding([a, a]), UuidBinding::Ambiguous);
        assert_eq!(uuid_binding(["urn:uuid:nope"]), UuidBinding::Ambiguous);
        assert_eq!(uuid_binding(["urn:uuid:"]), UuidBinding::Ambiguous);
        // Only the hyphenated form counts.
        assert_eq!(
            uuid_binding(["urn:uuid:6ba7b8109dad11d180b400c04fd430c8"]),
            UuidBinding::Ambiguous
        );
        assert_eq!(
            uuid_binding(["urn:uuid:{6ba7b810-9dad-11d1-80b4-00c04fd430c8}"]),
            UuidBinding::Ambiguous
        );
        // A malformed one after a good one.
        assert_eq!(uuid_binding([a, "urn:uuid:x"]), UuidBinding::Ambiguous);
        // Short or non-ASCII URIs do not panic.
        assert_eq!(uuid_binding(["urn", "urn:uuíd:x"]), UuidBinding::Unbound);
    }

    #[test]
    fn dotted_oids() {
        assert_eq!(dotted(&[0x2b, 6, 1, 5, 5, 7, 3, 1]), "1.3.6.1.5.5.7.3.1");
        assert_eq!(dotted(P256), "1.2.840.10045.3.1.7");
        for role in Role::all().iter() {
            let der = role.oid_der().unwrap();
            assert_eq!(Some(dotted(&der)), role.oid());
        }
        // Truncated or non-minimal content is shown in hex.
        assert_eq!(dotted(&[0x2b, 0x86]), "2b:86");
        assert_eq!(dotted(&[0x2b, 0x80, 0x01]), "2b:80:01");
        assert_eq!(dotted(&[]), "");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            peer_certificate(b"not a certificate"),
            Err(CertError::Malformed(_))
        ));
        assert!(CertInfo::parse(&[]).is_err());
    }
}
