//! Bearer tokens: self-contained, HMAC-SHA256-signed claims (user, project if scoped, expiry, the
//! user's token generation, an audit id, the application credential it was issued for, if any),
//! so any controller holding the same key checks them, and they survive a restart.
//!
//! Wire form: `cu1.<claims>.<tag>`, both parts unpadded URL-safe base64; the claims are JSON.
//! The key is 32 random bytes, kept in a key file (created with mode 0600 on first use) that
//! several controllers may share. Validation here checks the tag (constant time), then the
//! expiry; the caller then reads the store (see `auth.rs`): the token must not be on the
//! revocation list (by its audit id), its generation must still be its user's (a password change
//! or a role removal raises it), and the user must still hold a role in the project. So
//! `DELETE /v3/auth/tokens`, a password change, a revoked role or a deleted user end a token at
//! once, on every controller sharing the store.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::clock::{from_unix_secs, unix_secs};

const PREFIX: &str = "cu1.";
/// The usual lifetime of a token: one hour.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// The length of a signing key.
pub const KEY_LEN: usize = 32;
/// The longest token text looked at.
pub const MAX_TOKEN_LEN: usize = 2048;

/// Why a token was refused, or a key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Not a token of ours, or its signature does not match.
    #[error("the token is malformed or its signature does not match")]
    Invalid,
    /// Its lifetime is over.
    #[error("the token has expired")]
    Expired,
    /// The key file could not be read or written.
    #[error("token key file {path}: {source}")]
    KeyFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The key file does not hold a key.
    #[error("token key file {0} does not hold a {KEY_LEN}-byte key")]
    BadKey(String),
    /// The system's random generator failed.
    #[error("no randomness for a token")]
    Random,
}

/// What a token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The user.
    #[serde(rename = "u")]
    pub user: Uuid,
    /// The project (tenant) it is scoped to; none for an unscoped token.
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub project: Option<Uuid>,
    /// Issued at, Unix seconds.
    #[serde(rename = "i")]
    pub issued: u64,
    /// Expires at, Unix seconds.
    #[serde(rename = "e")]
    pub expires: u64,
    /// A random audit id (Keystone's `audit_ids`), so two tokens issued the same second differ;
    /// the revocation list names tokens by it.
    #[serde(rename = "a")]
    pub audit: String,
    /// The user's token generation at login (absent in tokens issued before it existed: 0).
    #[serde(rename = "g", default)]
    pub generation: u64,
    /// The application credential it was issued for (its roles bound the token's).
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub app_cred: Option<Uuid>,
}

/// What a token is issued for ([`TokenSigner::issue_grant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The user.
    pub user: Uuid,
    /// The project, or none for an unscoped token.
    pub project: Option<Uuid>,
    /// The user's token generation now.
    pub generation: u64,
    /// The application credential it is issued for.
    pub app_cred: Option<Uuid>,
    /// A time the token must not outlive (a re-scoped token's original's expiry, an application
    /// credential's).
    pub not_after: Option<SystemTime>,
}

impl Claims {
    /// When it expires.
    pub fn expires_at(&self) -> SystemTime {
        from_unix_secs(self.expires)
    }

    /// When it was issued.
    pub fn issued_at(&self) -> SystemTime {
        from_unix_secs(self.issued)
    }
}

/// Signs and checks tokens with one key.
pub struct TokenSigner {
    key: hmac::Key,
    ttl: Duration,
}

impl std::fmt::Debug for TokenSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSigner")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl TokenSigner {
    /// A signer with `key`, issuing tokens valid for `ttl`.
    pub fn new(key: &[u8; KEY_LEN], ttl: Duration) -> TokenSigner {
        TokenSigner {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
            ttl,
        }
    }

    /// A signer with a fresh random key (tests, or a single controller that may forget tokens
    /// on restart).
    pub fn random(ttl: Duration) -> Result<TokenSigner, TokenError> {
        Ok(TokenSigner::new(&random_key()?, ttl))
    }

    /// A signer whose key is in `path`, created (mode 0600) with a random key if missing.
    pub fn from_key_file(path: &Path, ttl: Duration) -> Result<TokenSigner, TokenError> {
        let shown = path.display().to_string();
        let key_error = |source| TokenError::KeyFile {
            path: shown.clone(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(mut file) => {
                let key = random_key()?;
                file.write_all(URL_SAFE_NO_PAD.encode(key).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(key_error)?;
                Ok(TokenSigner::new(&key, ttl))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = std::fs::read_to_string(path).map_err(key_error)?;
                let bytes = URL_SAFE_NO_PAD
                    .decode(text.trim())
                    .map_err(|_| TokenError::BadKey(shown.clone()))?;
                let key: [u8; KEY_LEN] = bytes
                    .try_into()
                    .map_err(|_| TokenError::BadKey(shown.clone()))?;
                Ok(TokenSigner::new(&key, ttl))
            }
            Err(e) => Err(key_error(e)),
        }
    }

    /// How long the tokens it issues live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A token for `user` (at token generation `generation`) in `project`, issued `now`;
    /// returns it with its claims.
    pub fn issue(
        &self,
        user: Uuid,
        project: Uuid,
        generation: u64,
        now: SystemTime,
    ) -> Result<(String, Claims), TokenError> {
        let grant = Grant {
            user,
            project: Some(project),
            generation,
            app_cred: None,
            not_after: None,
        };
        self.issue_grant(&grant, now)
    }

    /// A token for `grant`, issued `now`, living the signer's lifetime or until the grant's
    /// `not_after`, whichever comes first; returns it with its claims.
    pub fn issue_grant(
        &self,
        grant: &Grant,
        now: SystemTime,
    ) -> Result<(String, Claims), TokenError> {
        let mut audit = [0u8; 16];
        SystemRandom::new()
            .fill(&mut audit)
            .map_err(|_| TokenError::Random)?;
        let issued = unix_secs(now);
        let mut expires = issued.saturating_add(self.ttl.as_secs());
        if let Some(limit) = grant.not_after {
            expires = expires.min(unix_secs(limit));
        }
        let claims = Claims {
            user: grant.user,
            project: grant.project,
            issued,
            expires,
            audit: URL_SAFE_NO_PAD.encode(audit),
            generation: grant.generation,
            app_cred: grant.app_cred,
        };
        let body = serde_json::to_vec(&claims).map_err(|_| TokenError::Invalid)?;
        let body = URL_SAFE_NO_PAD.encode(body);
        let tag = hmac::sign(&self.key, body.as_bytes());
        let token = format!("{PREFIX}{body}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()));
        Ok((token, claims))
    }

    /// The claims of `token` if it is ours and unexpired at `now`.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<Claims, TokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TokenError::Invalid);
        }
        let rest = token.strip_prefix(PREFIX).ok_or(TokenError::Invalid)?;
        let (body, tag) = rest.split_once('.').ok_or(TokenError::Invalid)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TokenError::Invalid)?;
        hmac::verify(&self.key, body.as_bytes(), &tag).map_err(|_| TokenError::Invalid)?;
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TokenError::Invalid)?;
        let claims: Claims = serde_json::from_slice(&json).map_err(|_| TokenError::Invalid)?;
        if unix_secs(now) >= claims.expires {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

fn random_key() -> Result<[u8; KEY_LEN], TokenError> {
    let mut key = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| TokenError::Random)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> TokenSigner {
        TokenSigner::new(&[7; KEY_LEN], Duration::from_secs(3600))
    }

    #[test]
    fn issued_tokens_verify_until_they_expire() {
        let now = SystemTime::now();
        let (user, project) = (Uuid::new_v4(), Uuid::new_v4());
        let (token, claims) = signer().issue(user, project, 3, now).unwrap();
        assert_eq!(signer().verify(&token, now).unwrap(), claims);
        assert_eq!(
            (claims.user, claims.project, claims.generation),
            (user, Some(project), 3)
        );
        let later = now + Duration::from_secs(3601);
        assert!(matches!(
            signer().verify(&token, later),
            Err(TokenError::Expired)
        ));
    }

    #[test]
    fn forged_tokens_are_refused() {
        let now = SystemTime::now();
        let (token, _) = signer()
            .issue(Uuid::new_v4(), Uuid::new_v4(), 0, now)
            .unwrap();
        let other = TokenSigner::new(&[8; KEY_LEN], Duration::from_secs(3600));
        assert!(matches!(
            other.verify(&token, now),
            Err(TokenError::Invalid)
        ));
        // Claims changed under the same tag: a longer expiry.
        let (body, tag) = token.trim_start_matches(PREFIX).split_once('.').unwrap();
        let mut claims: Claims =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(body).unwrap()).unwrap();
        claims.expires += 100_000;
        let forged = format!(
            "{PREFIX}{}.{tag}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap())
        );
        assert!(matches!(
            signer().verify(&forged, now),
            Err(TokenError::Invalid)
        ));
        for junk in ["", "cu1.", "cu1.a.b", "x.y.z", &"a".repeat(5000)] {
            assert!(signer().verify(junk, now).is_err());
        }
    }

    /// A token issued before token generations existed (no `g` in its claims) is at
    /// generation 0, so it stays good until its user's password or roles change.
    #[test]
    fn a_token_without_a_generation_is_at_generation_0() {
        let signer = signer();
        let now = SystemTime::now();
        let json = format!(
            r#"{{"u":"{}","p":"{}","i":{},"e":{},"a":"old"}}"#,
            Uuid::nil(),
            Uuid::nil(),
            unix_secs(now),
            unix_secs(now) + 60
        );
        let body = URL_SAFE_NO_PAD.encode(json);
        let tag = hmac::sign(&signer.key, body.as_bytes());
        let token = format!("{PREFIX}{body}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()));
        let claims = signer.verify(&token, now).unwrap();
        assert_eq!((claims.audit.as_str(), claims.generation), ("old", 0));
    }

    /// An unscoped token has no project; an application credential's names it; neither
    /// outlives its grant's `not_after`.
    #[test]
    fn grants_scope_and_bound_their_tokens() {
        let signer = signer();
        let now = SystemTime::now();
        let (user, cred) = (Uuid::new_v4(), Uuid::new_v4());
        let grant = Grant {
            user,
            project: None,
            generation: 1,
            app_cred: None,
            not_after: None,
        };
        let (token, claims) = signer.issue_grant(&grant, now).unwrap();
        assert_eq!(signer.verify(&token, now).unwrap(), claims);
        assert_eq!((claims.project, claims.app_cred), (None, None));
        assert_eq!(claims.expires, unix_secs(now) + 3600);
        let bounded = Grant {
            project: Some(Uuid::new_v4()),
            app_cred: Some(cred),
            not_after: Some(now + Duration::from_secs(60)),
            ..grant
        };
        let (token, claims) = signer.issue_grant(&bounded, now).unwrap();
        assert_eq!(signer.verify(&token, now).unwrap().app_cred, Some(cred));
        assert_eq!(claims.expires, unix_secs(now) + 60);
        assert!(matches!(
            signer.verify(&token, now + Duration::from_secs(61)),
            Err(TokenError::Expired)
        ));
    }

    #[test]
    fn the_key_file_is_made_once_and_shared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token.key");
        let ttl = Duration::from_secs(60);
        let first = TokenSigner::from_key_file(&path, ttl).unwrap();
        let second = TokenSigner::from_key_file(&path, ttl).unwrap();
        let now = SystemTime::now();
        let (token, _) = first.issue(Uuid::new_v4(), Uuid::new_v4(), 0, now).unwrap();
        assert!(second.verify(&token, now).is_ok());
        std::fs::write(&path, "short").unwrap();
        assert!(matches!(
            TokenSigner::from_key_file(&path, ttl),
            Err(TokenError::BadKey(_))
        ));
    }
}
