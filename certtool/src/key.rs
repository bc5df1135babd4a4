//! Key types and key pairs: generate one, load one (PKCS#8 PEM), and match one against a
//! certificate.

use std::fmt;
use std::str::FromStr;

use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_ED25519};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use ssntp::cert::{CertInfo, KeyKind};

/// The key types `cumulo-cert` makes (`--key-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyType {
    /// ECDSA on NIST P-256, signing with SHA-256 (the default).
    #[default]
    P256,
    /// ECDSA on NIST P-384, signing with SHA-384.
    P384,
    /// Ed25519.
    Ed25519,
    /// RSA with a 2048-bit modulus, signing with SHA-256 (PKCS#1 v1.5).
    Rsa2048,
}

/// A key that could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// An unknown `--key-type`.
    #[error("unknown key type {0:?}; valid key types: p256, p384, ed25519, rsa2048")]
    UnknownType(String),
    /// The random generator or the key library failed.
    #[error("could not generate a {kind} key: {reason}")]
    Generate {
        /// What was asked for.
        kind: KeyType,
        /// What failed.
        reason: String,
    },
    /// No private key in the PEM text.
    #[error("no PEM private key found; expected a PKCS#8 \"PRIVATE KEY\" block")]
    NoKey,
    /// A PKCS#1 or SEC1 key, which ring cannot load.
    #[error(
        "the key is a {0} key, not PKCS#8; convert it with `openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.p8`"
    )]
    NotPkcs8(&'static str),
    /// A PKCS#8 key of an algorithm that cannot sign here.
    #[error("unsupported private key ({0}); use an ECDSA P-256/P-384, Ed25519 or RSA key")]
    Unsupported(String),
}

impl KeyType {
    /// Every key type, the default first.
    pub const ALL: [KeyType; 4] = [
        KeyType::P256,
        KeyType::P384,
        KeyType::Ed25519,
        KeyType::Rsa2048,
    ];

    /// The name `--key-type` takes.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::P256 => "p256",
            KeyType::P384 => "p384",
            KeyType::Ed25519 => "ed25519",
            KeyType::Rsa2048 => "rsa2048",
        }
    }

    /// The key type of a certificate's public key, where it is one `cumulo-cert` makes.
    pub fn of(kind: &KeyKind) -> Option<KeyType> {
        match kind {
            KeyKind::EcdsaP256 => Some(KeyType::P256),
            KeyKind::EcdsaP384 => Some(KeyType::P384),
            KeyKind::Ed25519 => Some(KeyType::Ed25519),
            KeyKind::Rsa { bits: 2048 } => Some(KeyType::Rsa2048),
            _ => None,
        }
    }

    /// A fresh key pair. ring makes the ECDSA and Ed25519 keys; ring cannot generate RSA keys,
    /// so the `rsa` crate makes the RSA key and ring loads it to sign.
    pub fn generate(self) -> Result<KeyPair, KeyError> {
        let failed = |reason: String| KeyError::Generate { kind: self, reason };
        match self {
            KeyType::P256 => KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256),
            KeyType::P384 => KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384),
            KeyType::Ed25519 => KeyPair::generate_for(&PKCS_ED25519),
            KeyType::Rsa2048 => {
                use rsa::pkcs8::EncodePrivateKey;
                let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048)
                    .map_err(|e| failed(e.to_string()))?;
                let der = key.to_pkcs8_der().map_err(|e| failed(e.to_string()))?;
                KeyPair::from_pkcs8_der_and_sign_algo(
                    &PrivatePkcs8KeyDer::from(der.as_bytes()),
                    &rcgen::PKCS_RSA_SHA256,
                )
            }
        }
        .map_err(|e| failed(e.to_string()))
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KeyType {
    type Err = KeyError;

    /// `p256`, `p384`, `ed25519` or `rsa2048`, case-insensitive.
    fn from_str(s: &str) -> Result<KeyType, KeyError> {
        KeyType::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| KeyError::UnknownType(s.to_string()))
    }
}

/// Loads the first private key of a PEM text; it must be PKCS#8 (what `cumulo-cert` writes).
pub fn load_key(pem: &[u8]) -> Result<KeyPair, KeyError> {
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|_| KeyError::NoKey)?;
    match &key {
        PrivateKeyDer::Pkcs8(pkcs8) => KeyPair::try_from(pkcs8)
            .map_err(|_| KeyError::Unsupported("PKCS#8 key of another algorithm".into())),
        PrivateKeyDer::Pkcs1(_) => Err(KeyError::NotPkcs8("PKCS#1 RSA")),
        PrivateKeyDer::Sec1(_) => Err(KeyError::NotPkcs8("SEC1 EC")),
        _ => Err(KeyError::Unsupported("unknown encoding".into())),
    }
}

/// The PEM text (`PRIVATE KEY`, PKCS#8) of a key pair, as written to `.key` files.
///
/// ring makes Ed25519 keys in PKCS#8 v2 (with the public key), which OpenSSL 3.0 cannot read;
/// they are written as PKCS#8 v1 (RFC 8410: the 32-byte seed alone), which ring reads too.
pub fn to_pem(key: &KeyPair) -> String {
    let der = key.serialized_der();
    let v1 = ed25519_v2_seed(der).map(|seed| {
        let mut v1 = ED25519_V1_PREFIX.to_vec();
        v1.extend_from_slice(seed);
        v1
    });
    crate::pem::encode("PRIVATE KEY", v1.as_deref().unwrap_or(der))
}

/// PKCS#8 v1 of Ed25519 up to the seed: SEQUENCE { INTEGER 0, { id-Ed25519 }, OCTET STRING {
/// OCTET STRING (32) } }.
const ED25519_V1_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// PKCS#8 v2 of Ed25519 as ring writes it, up to the seed; the public key `[1]` follows it.
const ED25519_V2_PREFIX: [u8; 16] = [
    0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

fn ed25519_v2_seed(der: &[u8]) -> Option<&[u8]> {
    let rest = der.strip_prefix(&ED25519_V2_PREFIX[..])?;
    (rest.len() == 32 + 35).then(|| &rest[..32])
}

/// Whether `key` is the private half of the certificate's public key.
pub fn matches(key: &KeyPair, cert: &CertInfo) -> bool {
    key.public_key_raw() == cert.public_key.as_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in KeyType::ALL {
            assert_eq!(kind.name().parse::<KeyType>().unwrap(), kind);
            assert_eq!(kind.to_string(), kind.name());
        }
        assert_eq!(" P256 ".parse::<KeyType>().unwrap(), KeyType::P256);
        let err = "dsa".parse::<KeyType>().unwrap_err().to_string();
        assert!(err.contains("p256, p384, ed25519, rsa2048"), "{err}");
        assert_eq!(KeyType::default(), KeyType::P256);
    }

    #[test]
    fn every_type_generates_and_reloads_from_pem() {
        for kind in KeyType::ALL {
            let key = kind.generate().unwrap();
            let again = load_key(to_pem(&key).as_bytes()).unwrap();
            assert_eq!(again.public_key_raw(), key.public_key_raw(), "{kind}");
            let pem = to_pem(&key);
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{kind}");
            if kind == KeyType::Ed25519 {
                assert_eq!(key.serialized_der().len(), 83, "ring's v2");
                assert!(pem.len() < key.serialize_pem().len(), "v1 is shorter");
            } else {
                assert_eq!(
                    pem.replace("\r\n", "\n"),
                    key.serialize_pem().replace("\r\n", "\n")
                );
            }
        }
    }

    #[test]
    fn non_pkcs8_keys_say_how_to_convert() {
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIGq6\n-----END EC PRIVATE KEY-----\n";
        let err = load_key(sec1.as_bytes()).unwrap_err();
        assert!(matches!(err, KeyError::NotPkcs8(_)), "{err:?}");
        assert!(err.to_string().contains("openssl pkcs8 -topk8"));
        assert!(matches!(load_key(b"nothing here"), Err(KeyError::NoKey)));
    }
}
