//! What password and application-credential logins share: their admission by the login
//! limiter, and the check of a secret on the hashing pool.

use crate::api::logins::Admission;
use crate::api::{ApiError, ApiState, ClientCertificate, PeerAddr, password};

/// A login's admission by the login limiter, as `limited_as` from `peer`; none for the admin
/// client certificate.
pub(super) fn admit<'a>(
    state: &'a ApiState,
    peer: Option<PeerAddr>,
    cert: Option<ClientCertificate>,
    limited_as: &str,
) -> Result<Option<Admission<'a>>, ApiError> {
    match cert {
        Some(c) if c.admin => Ok(None),
        _ => Ok(Some(
            state
                .login_limiter
                .admit(peer.map(|PeerAddr(a)| a.ip()), limited_as)?,
        )),
    }
}

/// Whether `secret` matches `stored`, checked on the hashing pool (no stored hash costs as much
/// as one, and matches nothing). The admission is refunded when the secret matched, or when
/// nothing was hashed (the pool was full): only a wrong secret counts against the limits.
pub(super) async fn check_secret(
    state: &ApiState,
    admission: Option<Admission<'_>>,
    secret: String,
    stored: Option<String>,
) -> Result<bool, ApiError> {
    let iterations = state.config.password_iterations;
    let checked = state
        .hashing
        .run(move || match stored {
            Some(stored) => password::verify(&secret, &stored),
            None => {
                password::verify_nothing(&secret, iterations);
                false
            }
        })
        .await;
    if let Some(admission) = admission
        && checked.as_ref().map_or(true, |right| *right)
    {
        admission.refund();
    }
    checked
}
