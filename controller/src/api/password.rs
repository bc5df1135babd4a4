//! Password hashes: PBKDF2-HMAC-SHA256 (ring) with a random 16-byte salt, kept as a PHC-style
//! string that carries its iteration count: `$pbkdf2-sha256$i=600000$<salt>$<hash>` (salt and
//! hash in unpadded standard base64). Verification uses the count in the string, so raising the
//! default later does not lock anyone out.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use ring::pbkdf2;
use ring::rand::{SecureRandom, SystemRandom};

/// The default iteration count (OWASP's figure for PBKDF2-HMAC-SHA256).
pub const DEFAULT_ITERATIONS: u32 = 600_000;
/// The largest count a stored hash may name (a bound on the work one login costs).
const MAX_ITERATIONS: u32 = 10_000_000;
const PREFIX: &str = "$pbkdf2-sha256$i=";
const SALT_LEN: usize = 16;
const HASH_LEN: usize = 32;
/// The longest password accepted (longer ones are refused, not truncated).
pub const MAX_PASSWORD_LEN: usize = 1024;

/// Why a password could not be hashed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// Empty, or longer than [`MAX_PASSWORD_LEN`].
    #[error("a password must have 1 to {MAX_PASSWORD_LEN} bytes")]
    BadLength,
    /// The system's random generator failed.
    #[error("no randomness for a salt")]
    Random,
}

/// Hashes `password` with `iterations` (at least 1) rounds and a fresh salt.
pub fn hash(password: &str, iterations: u32) -> Result<String, PasswordError> {
    if password.is_empty() || password.len() > MAX_PASSWORD_LEN {
        return Err(PasswordError::BadLength);
    }
    let rounds = NonZeroU32::new(iterations.clamp(1, MAX_ITERATIONS)).unwrap_or(NonZeroU32::MIN);
    let mut salt = [0u8; SALT_LEN];
    SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| PasswordError::Random)?;
    let mut out = [0u8; HASH_LEN];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        rounds,
        &salt,
        password.as_bytes(),
        &mut out,
    );
    Ok(format!(
        "{PREFIX}{rounds}${}${}",
        STANDARD_NO_PAD.encode(salt),
        STANDARD_NO_PAD.encode(out)
    ))
}

/// Whether `password` matches `stored` (constant-time comparison). A malformed hash matches
/// nothing.
pub fn verify(password: &str, stored: &str) -> bool {
    let Some((rounds, salt, expected)) = parse(stored) else {
        return false;
    };
    if password.len() > MAX_PASSWORD_LEN {
        return false;
    }
    pbkdf2::verify(
        pbkdf2::PBKDF2_HMAC_SHA256,
        rounds,
        &salt,
        password.as_bytes(),
        &expected,
    )
    .is_ok()
}

/// Spends about the time of one verification, for logins of unknown users (so that timing does
/// not tell which user names exist).
pub fn verify_nothing(password: &str, iterations: u32) {
    let rounds = NonZeroU32::new(iterations.clamp(1, MAX_ITERATIONS)).unwrap_or(NonZeroU32::MIN);
    let mut out = [0u8; HASH_LEN];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        rounds,
        &[0u8; SALT_LEN],
        password.as_bytes(),
        &mut out,
    );
}

fn parse(stored: &str) -> Option<(NonZeroU32, Vec<u8>, Vec<u8>)> {
    let rest = stored.strip_prefix(PREFIX)?;
    let mut parts = rest.split('$');
    let rounds: u32 = parts.next()?.parse().ok()?;
    if rounds > MAX_ITERATIONS {
        return None;
    }
    let salt = STANDARD_NO_PAD.decode(parts.next()?).ok()?;
    let hash = STANDARD_NO_PAD.decode(parts.next()?).ok()?;
    if parts.next().is_some() || hash.len() != HASH_LEN || salt.is_empty() {
        return None;
    }
    Some((NonZeroU32::new(rounds)?, salt, hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_carry_their_count() {
        let stored = hash("s3cret", 1000).unwrap();
        assert!(stored.starts_with("$pbkdf2-sha256$i=1000$"));
        assert!(verify("s3cret", &stored));
        assert!(!verify("s3cret!", &stored));
        assert_ne!(stored, hash("s3cret", 1000).unwrap(), "salted");
    }

    #[test]
    fn malformed_hashes_match_nothing() {
        for bad in [
            "",
            "plain",
            "$pbkdf2-sha256$i=0$AAAA$AAAA",
            "$pbkdf2-sha256$i=x$a$b",
        ] {
            assert!(!verify("", bad));
            assert!(!verify("x", bad));
        }
        assert_eq!(hash("", 1), Err(PasswordError::BadLength));
    }
}
