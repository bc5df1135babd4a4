//! OpenSSH keys for key pairs: checking an imported public key line, its fingerprint as Nova
//! gives it (the MD5 of the key blob, colon-separated hex), and generating an Ed25519 key pair
//! whose private half is written in OpenSSH's format (`openssh-key-v1`, unencrypted) for the
//! user, once. Pure: no store, no I/O.
//!
//! A public key line is `<type> <base64 blob> [comment]`; the blob is SSH wire data (RFC 4253
//! §6.6) whose first string repeats the type. Accepted types: `ssh-ed25519`, `ssh-rsa` (1024
//! to 16384 bits) and `ecdsa-sha2-nistp256/384/521`; the blob must have exactly the fields of
//! its type.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use md5::{Digest, Md5};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};

/// Why a public key or a generation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshKeyError {
    /// The text is not an OpenSSH public key of an accepted type.
    #[error("{0}")]
    Invalid(String),
    /// The system's random source or the key generation failed.
    #[error("key generation failed: {0}")]
    Generation(&'static str),
}

/// A checked OpenSSH public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The line as stored: type, base64 blob and comment (if any), single-spaced, trimmed.
    pub line: String,
    /// The MD5 fingerprint of the blob, colon-separated lowercase hex.
    pub fingerprint: String,
}

/// A generated key pair: its public key and its private key in OpenSSH's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// The public half.
    pub public: PublicKey,
    /// The private half, `-----BEGIN OPENSSH PRIVATE KEY-----` ...; never stored.
    pub private_pem: String,
}

/// The comment of generated keys.
const COMMENT: &str = "Generated-by-cumulo";

/// Reads SSH wire data: strings (u32 length, then bytes).
struct Wire<'a>(&'a [u8]);

impl<'a> Wire<'a> {
    fn string(&mut self) -> Option<&'a [u8]> {
        let (len, rest) = self.0.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
        if len > rest.len() {
            return None;
        }
        let (s, rest) = rest.split_at(len);
        self.0 = rest;
        Some(s)
    }

    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Appends an SSH string.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    // Every string written here is a key, a name or a short section: far below 4 GiB.
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(s);
}

/// The MD5 fingerprint of a key blob, as Nova and `ssh-keygen -E md5` write it.
pub fn fingerprint(blob: &[u8]) -> String {
    Md5::digest(blob)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The number of significant bits of an SSH mpint (positive, big-endian, maybe a leading 0).
fn mpint_bits(n: &[u8]) -> usize {
    let n = match n.iter().position(|&b| b != 0) {
        Some(first) => &n[first..],
        None => return 0,
    };
    n.len() * 8 - n[0].leading_zeros() as usize
}

/// Whether `blob` has exactly the fields of a key of type `kind`.
fn blob_fits(kind: &str, blob: &[u8]) -> Result<(), String> {
    let mut wire = Wire(blob);
    if wire.string() != Some(kind.as_bytes()) {
        return Err("the key's data does not match its type".into());
    }
    let bad = || format!("the {kind} key's data is malformed");
    match kind {
        "ssh-ed25519" => {
            let key = wire.string().ok_or_else(bad)?;
            if key.len() != 32 {
                return Err(bad());
            }
        }
        "ssh-rsa" => {
            let e = wire.string().ok_or_else(bad)?;
            let n = wire.string().ok_or_else(bad)?;
            if e.is_empty() || e[0] & 0x80 != 0 || n.is_empty() || n[0] & 0x80 != 0 {
                return Err(bad());
            }
            let bits = mpint_bits(n);
            if !(1024..=16384).contains(&bits) {
                return Err(format!(
                    "an RSA key must have 1024 to 16384 bits, not {bits}"
                ));
            }
        }
        _ => {
            let (curve, point_len) = match kind {
                "ecdsa-sha2-nistp256" => ("nistp256", 65),
                "ecdsa-sha2-nistp384" => ("nistp384", 97),
                "ecdsa-sha2-nistp521" => ("nistp521", 133),
                _ => return Err(format!("unsupported key type {kind}")),
            };
            if wire.string() != Some(curve.as_bytes()) {
                return Err(bad());
            }
            let point = wire.string().ok_or_else(bad)?;
            if point.len() != point_len || point[0] != 4 {
                return Err(bad());
            }
        }
    }
    if !wire.done() {
        return Err(bad());
    }
    Ok(())
}

/// Checks an OpenSSH public key line and gives its stored form and fingerprint.
pub fn parse_public(text: &str) -> Result<PublicKey, SshKeyError> {
    let text = text.trim();
    if text.contains(['\n', '\r']) {
        return Err(SshKeyError::Invalid(
            "give one public key, on one line".into(),
        ));
    }
    let mut words = text.split_whitespace();
    let (Some(kind), Some(data)) = (words.next(), words.next()) else {
        return Err(SshKeyError::Invalid(
            "not an OpenSSH public key (<type> <base64> [comment])".into(),
        ));
    };
    if !matches!(
        kind,
        "ssh-ed25519"
            | "ssh-rsa"
            | "ecdsa-sha2-nistp256"
            | "ecdsa-sha2-nistp384"
            | "ecdsa-sha2-nistp521"
    ) {
        return Err(SshKeyError::Invalid(format!(
            "unsupported key type {kind:?} (ssh-ed25519, ssh-rsa or ecdsa-sha2-nistp256/384/521)"
        )));
    }
    let blob = STANDARD
        .decode(data)
        .map_err(|_| SshKeyError::Invalid("the key's data is not base64".into()))?;
    blob_fits(kind, &blob).map_err(SshKeyError::Invalid)?;
    let comment: Vec<&str> = words.collect();
    let line = if comment.is_empty() {
        format!("{kind} {data}")
    } else {
        format!("{kind} {data} {}", comment.join(" "))
    };
    Ok(PublicKey {
        line,
        fingerprint: fingerprint(&blob),
    })
}

/// Generates an Ed25519 key pair from 32 bytes of the system's random source.
pub fn generate() -> Result<Generated, SshKeyError> {
    let rng = SystemRandom::new();
    let mut seed = [0u8; 32];
    rng.fill(&mut seed)
        .map_err(|_| SshKeyError::Generation("no random bytes"))?;
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
        .map_err(|_| SshKeyError::Generation("the seed was refused"))?;
    let public = pair.public_key().as_ref();
    let mut blob = Vec::with_capacity(51);
    put_string(&mut blob, b"ssh-ed25519");
    put_string(&mut blob, public);
    let mut check = [0u8; 4];
    rng.fill(&mut check)
        .map_err(|_| SshKeyError::Generation("no random bytes"))?;
    let private_pem = openssh_private(&blob, public, &seed, check);
    seed.fill(0);
    Ok(Generated {
        public: PublicKey {
            line: format!("ssh-ed25519 {} {COMMENT}", STANDARD.encode(&blob)),
            fingerprint: fingerprint(&blob),
        },
        private_pem,
    })
}

/// An unencrypted `openssh-key-v1` private key of one Ed25519 key, PEM-armoured as
/// `ssh-keygen` writes it (70 columns).
fn openssh_private(blob: &[u8], public: &[u8], seed: &[u8], check: [u8; 4]) -> String {
    let mut section = Vec::with_capacity(160);
    section.extend_from_slice(&check);
    section.extend_from_slice(&check);
    put_string(&mut section, b"ssh-ed25519");
    put_string(&mut section, public);
    let mut secret = Vec::with_capacity(64);
    secret.extend_from_slice(seed);
    secret.extend_from_slice(public);
    put_string(&mut section, &secret);
    put_string(&mut section, COMMENT.as_bytes());
    // Padded with 1, 2, 3, ... to the cipher's block size (8 for "none").
    let mut pad = 1u8;
    while section.len() % 8 != 0 {
        section.push(pad);
        pad += 1;
    }
    let mut body = b"openssh-key-v1\0".to_vec();
    put_string(&mut body, b"none");
    put_string(&mut body, b"none");
    put_string(&mut body, b"");
    body.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut body, blob);
    put_string(&mut body, &section);
    let encoded = STANDARD.encode(&body);
    let mut pem = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for line in encoded.as_bytes().chunks(70) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END OPENSSH PRIVATE KEY-----\n");
    pem
}

#[cfg(test)]
mod tests {
    use super::*;

    // ssh-keygen -t ed25519 output, and its `ssh-keygen -l -E md5` fingerprint.
    const ED25519: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDqQAmShDSQy5PElKTKfr2Xx0D8ZW+CSzdNTY+7C0SPx k@h";

    fn key_of(kind: &str, fields: &[&[u8]]) -> String {
        let mut blob = Vec::new();
        put_string(&mut blob, kind.as_bytes());
        for f in fields {
            put_string(&mut blob, f);
        }
        format!("{kind} {}", STANDARD.encode(blob))
    }

    #[test]
    fn accepted_public_keys() {
        let k = parse_public(&format!("  {ED25519}\n")).unwrap();
        assert_eq!(k.line, ED25519);
        assert_eq!(k.fingerprint.len(), 47);
        let mut n = vec![0u8];
        n.extend([0xc3; 256]);
        let rsa = key_of("ssh-rsa", &[&[1, 0, 1], &n]);
        assert!(parse_public(&rsa).is_ok());
        let mut point = vec![4u8];
        point.extend([7; 64]);
        let ec = key_of("ecdsa-sha2-nistp256", &[b"nistp256", &point]);
        assert!(parse_public(&format!("{ec} me@there  too")).is_ok());
        assert_eq!(
            parse_public(&format!("{ec} me@there  too")).unwrap().line,
            format!("{ec} me@there too")
        );
    }

    #[test]
    fn refused_public_keys() {
        let small_rsa = key_of("ssh-rsa", &[&[1, 0, 1], &[0x7f; 64]]);
        let mut point = vec![4u8];
        point.extend([7; 64]);
        let wrong_curve = key_of("ecdsa-sha2-nistp384", &[b"nistp256", &point]);
        let trailing = format!("{}AAAA", key_of("ssh-ed25519", &[&[1; 32]]));
        let short = key_of("ssh-ed25519", &[&[1; 31]]);
        let mismatched = key_of("ssh-ed25519", &[&[1; 32]]).replace("ssh-ed25519 ", "ssh-rsa ");
        for bad in [
            "",
            "ssh-ed25519",
            "ssh-dss AAAAB3NzaC1kc3M=",
            "ssh-ed25519 !!!!",
            "hello world",
            small_rsa.as_str(),
            wrong_curve.as_str(),
            trailing.as_str(),
            short.as_str(),
            mismatched.as_str(),
            &format!("{ED25519}\n{ED25519}"),
        ] {
            assert!(
                matches!(parse_public(bad), Err(SshKeyError::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn fingerprints_are_md5_in_colon_hex() {
        // MD5("") = d41d8cd98f00b204e9800998ecf8427e.
        assert_eq!(
            fingerprint(b""),
            "d4:1d:8c:d9:8f:00:b2:04:e9:80:09:98:ec:f8:42:7e"
        );
    }

    #[test]
    fn generated_keys_parse_and_differ() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_ne!(a.public, b.public);
        assert_eq!(parse_public(&a.public.line).unwrap(), a.public);
        assert!(
            a.private_pem
                .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----\n")
        );
        assert!(
            a.private_pem
                .ends_with("-----END OPENSSH PRIVATE KEY-----\n")
        );
        let body: String = a
            .private_pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let raw = STANDARD.decode(body).unwrap();
        assert!(raw.starts_with(b"openssh-key-v1\0"));
    }

    /// `ssh-keygen -y` reads the generated private key and gives back its public key, when
    /// ssh-keygen is installed (skipped otherwise).
    #[test]
    fn ssh_keygen_reads_the_private_key() {
        use std::os::unix::fs::PermissionsExt;
        let Ok(probe) = std::process::Command::new("ssh-keygen").arg("-?").output() else {
            eprintln!("ssh-keygen not installed: skipped");
            return;
        };
        drop(probe);
        let generated = generate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("id");
        std::fs::write(&path, &generated.private_pem).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let out = std::process::Command::new("ssh-keygen")
            .arg("-y")
            .arg("-f")
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let public = String::from_utf8(out.stdout).unwrap();
        assert_eq!(public.trim(), generated.public.line);
        let out = std::process::Command::new("ssh-keygen")
            .args(["-l", "-E", "md5", "-f"])
            .arg(&path)
            .output()
            .unwrap();
        let listed = String::from_utf8(out.stdout).unwrap();
        assert!(
            listed.contains(&format!("MD5:{}", generated.public.fingerprint)),
            "{listed}"
        );
    }
}
