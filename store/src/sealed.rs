//! Launcher private keys sealed for their host (issue 21): the store keeps an off-host host's
//! launcher key encrypted, so that reading the store (an etcd backup, a launcher's etcd user,
//! which may read every host's credentials) does not give the key.
//!
//! Three keys, each derived from the one before with HKDF-SHA256:
//! - the **master** ([`MasterKey`]), from the cluster CA's private key (its PKCS#8 DER), salt
//!   `cumulo launcher credentials v1`: every controller holding the CA key derives the same one,
//!   and nothing new is kept on disk;
//! - a **host key** ([`HostKey`]) per off-host host, from the master with the host's UUID in the
//!   info: the replicas of host H get H's key only (a file, `cumulo-controller launcher-key`),
//!   never the master;
//! - the seal itself: AES-256-GCM under the host key with a random 96-bit nonce, the additional
//!   data binding the host's UUID and the SHA-256 of the certificate's PEM, so that a sealed key
//!   opens neither in another host's record nor beside another certificate.
//!
//! The sealed form is text, `sealed:v1:<nonce>:<ciphertext and tag>` (standard base64 each), kept
//! where the PEM was (`LauncherCreds::sealed_key`); the stores refuse anything else. This module
//! holds no key of its own and does no I/O beyond the host key file.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::digest::{SHA256, digest};
use ring::hkdf::{HKDF_SHA256, KeyType, Prk, Salt};
use ring::rand::{SecureRandom, SystemRandom};
use uuid::Uuid;

/// The prefix of a sealed key (format version 1).
pub const SEALED_PREFIX: &str = "sealed:v1:";

/// The prefix of a host key file's text (format version 1).
pub const HOST_KEY_PREFIX: &str = "cumulo-launcher-key:v1:";

/// The HKDF salt of the master: names the purpose and the version of the derivation.
const MASTER_SALT: &[u8] = b"cumulo launcher credentials v1";

/// The HKDF info of a host key, before the host's UUID (16 bytes).
const HOST_INFO: &[u8] = b"cumulo launcher host key v1";

/// The start of the additional data of a seal, before the host's UUID and the certificate's hash.
const AAD_LABEL: &[u8] = b"cumulo launcher key v1";

/// The length of a host key (AES-256).
pub const HOST_KEY_LEN: usize = 32;

/// Why a key could not be sealed, opened, read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The text is not a sealed key of a known format.
    #[error("not a sealed launcher key: {0}")]
    Malformed(String),
    /// The text is a clear private key (written by a controller older than sealing).
    #[error(
        "the launcher key is not sealed (a clear private key, written by an older controller): \
         not used; a current controller replaces it at its next sweep"
    )]
    NotSealed,
    /// The host key is another host's.
    #[error("the host key given is host {key}'s, the credentials are host {record}'s")]
    OtherHost {
        /// The host of the key.
        key: Uuid,
        /// The host of the credentials.
        record: Uuid,
    },
    /// Authentication failed: a key derived from another CA key (or a key file relabelled), or a
    /// record altered or paired with another certificate.
    #[error(
        "the sealed launcher key does not open with this host key: the key file is not the one \
         the controllers' CA key gives for this host (export it again with `cumulo-controller \
         launcher-key`), or the stored record was altered or its certificate swapped"
    )]
    Refused,
    /// The system's random source failed.
    #[error("no random nonce: the system's random source failed")]
    Random,
    /// A host key file cannot be read, parsed or written.
    #[error("launcher key file {path}: {why}")]
    KeyFile {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// An HKDF output length.
struct Len(usize);

impl KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// The master sealing secret: held by controllers only (derived from the cluster CA's key).
pub struct MasterKey(Prk);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// The master derived from `secret`: the cluster CA's private key as PKCS#8 DER (the same
    /// key file gives the same master on every controller).
    pub fn derive(secret: &[u8]) -> MasterKey {
        MasterKey(Salt::new(HKDF_SHA256, MASTER_SALT).extract(secret))
    }

    /// The key of host `host`: what its replicas are given.
    pub fn host_key(&self, host: Uuid) -> HostKey {
        let mut key = [0u8; HOST_KEY_LEN];
        let info = [HOST_INFO, host.as_bytes().as_slice()];
        // Expanding to 32 bytes of SHA-256 cannot exceed HKDF's limit (255 blocks).
        if let Ok(okm) = self.0.expand(&info, Len(HOST_KEY_LEN)) {
            let _ = okm.fill(&mut key);
        }
        HostKey { host, key }
    }
}

/// The key of one off-host host: seals (controller) and opens (its replicas) that host's
/// launcher key, and no other host's.
#[derive(Clone, PartialEq, Eq)]
pub struct HostKey {
    host: Uuid,
    key: [u8; HOST_KEY_LEN],
}

impl std::fmt::Debug for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKey")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl HostKey {
    /// The host whose key this is.
    pub fn host(&self) -> Uuid {
        self.host
    }

    fn aead(&self) -> Result<LessSafeKey, SealError> {
        UnboundKey::new(&AES_256_GCM, &self.key)
            .map(LessSafeKey::new)
            .map_err(|_| SealError::Refused)
    }

    /// The additional data: the label, the host, the SHA-256 of the certificate's PEM.
    fn aad(&self, cert_pem: &str) -> Vec<u8> {
        let mut aad = AAD_LABEL.to_vec();
        aad.extend_from_slice(self.host.as_bytes());
        aad.extend_from_slice(digest(&SHA256, cert_pem.as_bytes()).as_ref());
        aad
    }

    /// `key_pem` sealed for this host beside certificate `cert_pem` (`sealed:v1:...`).
    pub fn seal(&self, cert_pem: &str, key_pem: &str) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| SealError::Random)?;
        let mut data = key_pem.as_bytes().to_vec();
        self.aead()?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.aad(cert_pem)),
                &mut data,
            )
            .map_err(|_| SealError::Refused)?;
        Ok(format!(
            "{SEALED_PREFIX}{}:{}",
            STANDARD.encode(nonce),
            STANDARD.encode(&data)
        ))
    }

    /// The private key (PEM) sealed in `sealed`, from the credentials of host `host` with
    /// certificate `cert_pem`.
    pub fn open(&self, host: Uuid, cert_pem: &str, sealed: &str) -> Result<String, SealError> {
        let (nonce, mut data) = parse_sealed(sealed)?;
        if host != self.host {
            return Err(SealError::OtherHost {
                key: self.host,
                record: host,
            });
        }
        let clear = self
            .aead()?
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(self.aad(cert_pem)),
                &mut data,
            )
            .map_err(|_| SealError::Refused)?;
        String::from_utf8(clear.to_vec()).map_err(|_| SealError::Refused)
    }

    /// The key file's text: `cumulo-launcher-key:v1:<host UUID>:<base64 key>`.
    pub fn to_text(&self) -> String {
        format!(
            "{HOST_KEY_PREFIX}{}:{}",
            self.host.hyphenated(),
            STANDARD.encode(self.key)
        )
    }

    /// A host key from its text (as [`HostKey::to_text`] writes it; blanks around it ignored).
    pub fn parse(text: &str) -> Result<HostKey, String> {
        let rest = text.trim().strip_prefix(HOST_KEY_PREFIX).ok_or_else(|| {
            format!("not a launcher host key (it starts with `{HOST_KEY_PREFIX}`)")
        })?;
        let (host, key) = rest
            .split_once(':')
            .ok_or("no `:` between the host and the key")?;
        let host = Uuid::parse_str(host).map_err(|e| format!("host `{host}`: {e}"))?;
        let key = STANDARD
            .decode(key)
            .map_err(|e| format!("the key is not base64: {e}"))?;
        let key: [u8; HOST_KEY_LEN] = key
            .try_into()
            .map_err(|k: Vec<u8>| format!("{} key bytes, not {HOST_KEY_LEN}", k.len()))?;
        Ok(HostKey { host, key })
    }

    /// The host key in file `path`.
    pub fn read(path: &Path) -> Result<HostKey, SealError> {
        let fail = |why: String| SealError::KeyFile {
            path: path.display().to_string(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        HostKey::parse(&text).map_err(fail)
    }

    /// Writes the host key to `path` (replaced atomically), readable by its owner only.
    pub fn write(&self, path: &Path) -> Result<(), SealError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let fail = |e: std::io::Error| SealError::KeyFile {
            path: path.display().to_string(),
            why: e.to_string(),
        };
        let name = path.file_name().ok_or_else(|| SealError::KeyFile {
            path: path.display().to_string(),
            why: "not a file name".into(),
        })?;
        let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(fail)?;
        writeln!(file, "{}", self.to_text()).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&tmp, path).map_err(fail)
    }
}

/// The nonce and the ciphertext (with its tag) of a sealed key.
fn parse_sealed(sealed: &str) -> Result<([u8; NONCE_LEN], Vec<u8>), SealError> {
    let Some(rest) = sealed.strip_prefix(SEALED_PREFIX) else {
        if sealed.contains("PRIVATE KEY") {
            return Err(SealError::NotSealed);
        }
        return Err(SealError::Malformed(format!(
            "it does not start with `{SEALED_PREFIX}`"
        )));
    };
    let (nonce, data) = rest
        .split_once(':')
        .ok_or_else(|| SealError::Malformed("no `:` between the nonce and the key".into()))?;
    let nonce = STANDARD
        .decode(nonce)
        .map_err(|e| SealError::Malformed(format!("the nonce is not base64: {e}")))?;
    let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|n: Vec<u8>| {
        SealError::Malformed(format!("a nonce of {} bytes, not {NONCE_LEN}", n.len()))
    })?;
    let data = STANDARD
        .decode(data)
        .map_err(|e| SealError::Malformed(format!("the key is not base64: {e}")))?;
    if data.len() <= AES_256_GCM.tag_len() {
        return Err(SealError::Malformed("the key is empty".into()));
    }
    Ok((nonce, data))
}

/// Whether `text` is a key in the sealed form (well formed; whether it opens is the host key's
/// to say).
pub fn check(text: &str) -> Result<(), SealError> {
    parse_sealed(text).map(drop)
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEA\n-----END PRIVATE KEY-----\n";

    #[test]
    fn a_sealed_key_opens_with_its_hosts_key_only() {
        let master = MasterKey::derive(b"the CA's private key");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let (key_a, key_b) = (master.host_key(a), master.host_key(b));
        let sealed = key_a.seal(CERT, KEY).unwrap();
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("PRIVATE KEY"), "{sealed}");
        check(&sealed).unwrap();
        assert_eq!(key_a.open(a, CERT, &sealed).unwrap(), KEY);
        // Every seal has its own nonce.
        assert_ne!(key_a.seal(CERT, KEY).unwrap(), sealed);
        // The same CA key derives the same host key; another CA key another one.
        assert_eq!(
            MasterKey::derive(b"the CA's private key").host_key(a),
            key_a
        );
        let other_ca = MasterKey::derive(b"another CA's key").host_key(a);
        assert_eq!(other_ca.open(a, CERT, &sealed), Err(SealError::Refused));

        // Another host's key: refused by its label, and by the cipher once relabelled.
        assert_eq!(
            key_b.open(a, CERT, &sealed),
            Err(SealError::OtherHost { key: b, record: a })
        );
        let relabelled = key_b.to_text().replace(&b.to_string(), &a.to_string());
        let relabelled = HostKey::parse(&relabelled).unwrap();
        assert_eq!(relabelled.host(), a);
        assert_eq!(relabelled.open(a, CERT, &sealed), Err(SealError::Refused));
        // Moved into another host's record, opened by that host's replicas.
        assert_eq!(key_b.open(b, CERT, &sealed), Err(SealError::Refused));
    }

    #[test]
    fn a_tampered_seal_or_a_swapped_certificate_is_refused() {
        let master = MasterKey::derive(b"ca key");
        let host = Uuid::new_v4();
        let key = master.host_key(host);
        let sealed = key.seal(CERT, KEY).unwrap();
        // One bit of the ciphertext flipped.
        let (head, data) = sealed.rsplit_once(':').unwrap();
        let mut bytes = STANDARD.decode(data).unwrap();
        bytes[3] ^= 1;
        let tampered = format!("{head}:{}", STANDARD.encode(&bytes));
        assert_eq!(key.open(host, CERT, &tampered), Err(SealError::Refused));
        // Another nonce.
        let (_, data) = sealed.rsplit_once(':').unwrap();
        let other_nonce = format!("{SEALED_PREFIX}{}:{data}", STANDARD.encode([7u8; 12]));
        assert_eq!(key.open(host, CERT, &other_nonce), Err(SealError::Refused));
        // Beside another certificate.
        let other_cert = CERT.replace("MIIB", "MIIC");
        assert_eq!(
            key.open(host, &other_cert, &sealed),
            Err(SealError::Refused)
        );
        // Not sealed at all, or not in the format.
        assert_eq!(key.open(host, CERT, KEY), Err(SealError::NotSealed));
        assert_eq!(check(KEY), Err(SealError::NotSealed));
        for bad in [
            "",
            "sealed:v2:AAAA:AAAA",
            "sealed:v1:",
            "sealed:v1:AAAA",
            "sealed:v1:!!:AAAA",
            "sealed:v1:AAAAAAAAAAAAAAAA:",
            "sealed:v1:AAAAAAAAAAAAAAAA:AAAA",
        ] {
            assert!(
                matches!(check(bad), Err(SealError::Malformed(_))),
                "{bad}: {:?}",
                check(bad)
            );
        }
    }

    #[test]
    fn host_keys_round_trip_through_their_file() {
        use std::os::unix::fs::PermissionsExt;
        let key = MasterKey::derive(b"ca key").host_key(Uuid::new_v4());
        assert_eq!(HostKey::parse(&key.to_text()).unwrap(), key);
        assert!(!format!("{key:?}").contains(&STANDARD.encode(key.key)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host.key");
        key.write(&path).unwrap();
        key.write(&path).unwrap();
        assert_eq!(HostKey::read(&path).unwrap(), key);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        for bad in [
            "",
            "cumulo-launcher-key:v1:nope:AAAA",
            &key.to_text()
                .replace(HOST_KEY_PREFIX, "cumulo-launcher-key:v2:"),
            &format!("{HOST_KEY_PREFIX}{}:AAAA", key.host()),
        ] {
            assert!(HostKey::parse(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            HostKey::read(&dir.path().join("missing")),
            Err(SealError::KeyFile { .. })
        ));
    }
}
