//! Who is asking: the [`Principal`] extractor. A bearer token (`X-Auth-Token`, or
//! `Authorization: Bearer`) is verified (signature, expiry), then checked against the store in
//! two reads: the token must not be on the revocation list, its token generation must still be
//! its user's (a password change, a role removal or disabling the user raises it), and its
//! user's roles in its project are read (a third read for a token of an application credential:
//! the credential must still exist, and its roles bound the token's). Nothing is cached, so a
//! revoked token, a changed password, a deleted user, a deleted credential or a revoked role
//! stops working at once, on every controller sharing the store. Without a token, a client
//! certificate with no SSNTP role, verified against the cluster CA by the TLS layer (see
//! [`ClientCertificate`](super::ClientCertificate)), makes the request a cluster admin's.
//!
//! Roles are Keystone's defaults, each implying the next: `admin` → `manager` → `member` →
//! `reader`. Any method but `GET`, `HEAD` and `OPTIONS` needs `member` (so a `reader`, or an
//! unscoped token, only reads: 403 in the route's error shape), except what a user does to its
//! own identity: revoking its token, making and deleting its application credentials.

use std::time::SystemTime;

use axum::extract::FromRequestParts;
use axum::http::Method;
use axum::http::request::Parts;
use uuid::Uuid;

use super::serve::ClientCertificate;
use super::token::{Claims, TokenError};
use super::{ApiError, ApiState};
use crate::cluster::Caller;
use store::{Role, Scope, StoreError, TokenRef};

/// The header carrying a token (Keystone's).
pub const TOKEN_HEADER: &str = "x-auth-token";

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The user, for a token login.
    pub user: Option<Uuid>,
    /// The project the token is scoped to (none for a certificate login).
    pub project: Option<Uuid>,
    /// The roles given to the user in that project (a certificate login: `[Admin]`; an unscoped
    /// token: none; an application credential's token: those of the credential's roles the user
    /// still has), without the roles they imply ([`Principal::effective_roles`]).
    pub roles: Vec<Role>,
    /// The token's claims, for a token login.
    pub claims: Option<Claims>,
    /// The application credential the token was issued for.
    pub app_credential: Option<AppCredentialUse>,
    /// The id of the request it made (`req-` and this UUID, its `X-OpenStack-Request-Id`).
    pub request: Option<Uuid>,
    /// The trace the request asked for (`X-Cumulo-Trace`), if any.
    pub trace: Option<crate::cluster::TraceLabel>,
}

/// The application credential behind a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppCredentialUse {
    /// Its id.
    pub id: Uuid,
    /// Whether it may make and delete application credentials.
    pub unrestricted: bool,
}

impl Principal {
    /// Whether the caller is a cluster admin (the admin role in the token's project, or the
    /// admin client certificate).
    pub fn is_admin(&self) -> bool {
        self.roles.contains(&Role::Admin)
    }

    /// The caller's roles with those they imply, strongest first.
    pub fn effective_roles(&self) -> Vec<Role> {
        Role::effective(&self.roles)
    }

    /// Whether the caller may change things in its project (`member`, or a role implying it).
    pub fn can_write(&self) -> bool {
        self.effective_roles().contains(&Role::Member)
    }

    /// Refuses a token of a restricted application credential (Keystone's rule: such a token
    /// may not make or delete application credentials).
    pub fn require_unrestricted(&self) -> Result<(), ApiError> {
        match self.app_credential {
            Some(cred) if !cred.unrestricted => Err(ApiError::Forbidden(
                "a token of a restricted application credential may not manage application \
                 credentials"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// Who the caller is, as the cluster records it in instance actions.
    pub fn who(&self) -> Caller {
        Caller {
            user: self.user,
            project: self.project,
            request: self.request,
            trace: self.trace,
        }
    }

    /// Refuses callers that are not admins.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(ApiError::Forbidden("this needs the admin role".into()))
        }
    }

    /// The project of a project-scoped token.
    pub fn project(&self) -> Result<Uuid, ApiError> {
        self.project.ok_or_else(|| {
            ApiError::Forbidden(
                "this needs a project-scoped token, not an unscoped one or a certificate".into(),
            )
        })
    }

    /// What the caller may see on the native API: everything for admins, else its project.
    pub fn scope(&self) -> Result<Scope, ApiError> {
        if self.is_admin() {
            Ok(Scope::All)
        } else {
            self.project().map(Scope::Tenant)
        }
    }

    /// The caller's project scope, as the OpenStack routes use it (admins too see only their
    /// project unless they ask for all).
    pub fn project_scope(&self, all_tenants: bool) -> Result<Scope, ApiError> {
        if all_tenants && self.is_admin() {
            Ok(Scope::All)
        } else {
            self.project().map(Scope::Tenant)
        }
    }
}

/// The token of a request, if it carries one.
pub fn request_token(parts: &Parts) -> Option<&str> {
    if let Some(value) = parts.headers.get(TOKEN_HEADER) {
        return Some(value.to_str().unwrap_or(""));
    }
    let value = parts.headers.get(axum::http::header::AUTHORIZATION)?;
    let text = value.to_str().unwrap_or("");
    Some(text.strip_prefix("Bearer ").unwrap_or(""))
}

/// A token as the revocation list names it.
pub fn token_ref(claims: &Claims) -> TokenRef {
    TokenRef {
        id: claims.audit.clone(),
        expires: claims.expires_at(),
    }
}

/// Checks `token` and builds its principal.
pub async fn principal_of_token(state: &ApiState, token: &str) -> Result<Principal, ApiError> {
    let claims = state
        .signer
        .verify(token, SystemTime::now())
        .map_err(|e| match e {
            TokenError::Expired => ApiError::Unauthorized("the token has expired".into()),
            _ => ApiError::Unauthorized("the token is not valid".into()),
        })?;
    let (user, project, cred) = (claims.user, claims.project, claims.app_cred);
    let (generation, subject) = (claims.generation, token_ref(&claims));
    let (roles, app_credential) = state
        .store(move |store| {
            let found = match store.token_state(user, &subject) {
                Ok(found) => found,
                Err(StoreError::NotFound { .. }) => {
                    return Err(ApiError::Unauthorized(
                        "the token's user no longer exists".into(),
                    ));
                }
                // An audit id the list does not take (not one this code issues).
                Err(StoreError::Invalid(_)) => {
                    return Err(ApiError::Unauthorized("the token is not valid".into()));
                }
                Err(e) => return Err(e.into()),
            };
            if found.revoked {
                return Err(ApiError::Unauthorized("the token has been revoked".into()));
            }
            if found.generation != generation {
                return Err(ApiError::Unauthorized(
                    "the token was ended by a password change, a role removal or the user's \
                     disabling"
                        .into(),
                ));
            }
            let Some(project) = project else {
                // Unscoped: no roles, nothing to check.
                return Ok((Vec::new(), None));
            };
            let roles = match store.roles_of_user(user) {
                Ok(all) => all
                    .into_iter()
                    .filter(|a| a.tenant == project)
                    .map(|a| a.role)
                    .collect::<Vec<_>>(),
                Err(StoreError::NotFound { .. }) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            let Some(cred) = cred else {
                return Ok((roles, None));
            };
            let gone =
                || ApiError::Unauthorized("the token's application credential is gone".into());
            let cred = match store.app_credential(cred) {
                Ok(cred) if cred.user == user && cred.project == project => cred,
                Ok(_) | Err(StoreError::NotFound { .. }) => return Err(gone()),
                Err(e) => return Err(e.into()),
            };
            if cred.expires.is_some_and(|at| at <= SystemTime::now()) {
                return Err(ApiError::Unauthorized(
                    "the token's application credential has expired".into(),
                ));
            }
            let held = Role::effective(&roles);
            let roles = cred
                .roles
                .iter()
                .filter(|r| held.contains(r))
                .copied()
                .collect();
            let using = AppCredentialUse {
                id: cred.id,
                unrestricted: cred.unrestricted,
            };
            Ok((roles, Some(using)))
        })
        .await?;
    if project.is_some() && roles.is_empty() {
        return Err(ApiError::Unauthorized(
            "the token's user no longer has a role in its project".into(),
        ));
    }
    Ok(Principal {
        user: Some(user),
        project,
        roles,
        claims: Some(claims),
        app_credential,
        request: None,
        trace: None,
    })
}

/// Whether `method` on `path` is something a user does to its own identity, which needs no
/// role: revoking a token, making or deleting its application credentials, changing its
/// password (the handlers check that the user is the caller).
fn self_service(method: &Method, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    if *method == Method::DELETE && path == "/v3/auth/tokens" {
        return true;
    }
    let parts: Vec<&str> = path.split('/').collect();
    // ["", "v3", "users", <id>, "application_credentials", <id>?], [..., <id>, "password"]
    matches!(
        (method, parts.as_slice()),
        (
            &Method::POST,
            ["", "v3", "users", _, "application_credentials"]
        ) | (&Method::POST, ["", "v3", "users", _, "password"])
            | (
                &Method::DELETE,
                ["", "v3", "users", _, "application_credentials", _]
            )
    )
}

/// Refuses a change by a caller without `member` (a reader, an unscoped token).
fn check_writes(principal: &Principal, parts: &Parts) -> Result<(), ApiError> {
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    if reads.contains(&parts.method)
        || principal.can_write()
        || self_service(&parts.method, parts.uri.path())
    {
        return Ok(());
    }
    Err(ApiError::Forbidden(match principal.project {
        Some(_) => "the reader role may only read: this needs the member role".into(),
        None => "an unscoped token may only read: this needs a project-scoped token".into(),
    }))
}

/// The header that asks for the request's STARTs to be traced, under this label.
pub const TRACE_HEADER: &str = "x-cumulo-trace";

/// The trace label a request asks for (400 for one that is not a label); only a POST (a
/// create) is traced, so other requests are not refused for it.
fn trace_label(parts: &Parts) -> Result<Option<crate::cluster::TraceLabel>, ApiError> {
    if parts.method != Method::POST {
        return Ok(None);
    }
    let Some(value) = parts.headers.get(TRACE_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(crate::cluster::TraceLabel::new)
        .map(Some)
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "X-Cumulo-Trace: a label of 1 to {} printable ASCII characters",
                crate::cluster::TraceLabel::MAX
            ))
        })
}

impl FromRequestParts<ApiState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let request = parts
            .extensions
            .get::<super::request_id::RequestId>()
            .map(|r| r.0);
        let trace = trace_label(parts)?;
        if let Some(token) = request_token(parts) {
            let token = token.to_string();
            let mut principal = principal_of_token(state, &token).await?;
            principal.request = request;
            principal.trace = trace;
            check_writes(&principal, parts)?;
            return Ok(principal);
        }
        match parts.extensions.get::<ClientCertificate>() {
            Some(ClientCertificate { admin: true, .. }) => Ok(Principal {
                user: None,
                project: None,
                roles: vec![Role::Admin],
                claims: None,
                app_credential: None,
                request,
                trace,
            }),
            _ => Err(ApiError::Unauthorized(
                "authentication required: send X-Auth-Token".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_service_is_a_users_own_identity() {
        let id = Uuid::new_v4();
        for (method, path, expected) in [
            (Method::DELETE, "/v3/auth/tokens".to_string(), true),
            (Method::POST, "/v3/auth/tokens".to_string(), false),
            (
                Method::POST,
                format!("/v3/users/{id}/application_credentials"),
                true,
            ),
            (
                Method::POST,
                format!("/v3/users/{id}/application_credentials/"),
                true,
            ),
            (
                Method::DELETE,
                format!("/v3/users/{id}/application_credentials/{id}"),
                true,
            ),
            (
                Method::PUT,
                format!("/v3/users/{id}/application_credentials/{id}"),
                false,
            ),
            (Method::DELETE, format!("/v3/users/{id}"), false),
            (Method::POST, format!("/v3/users/{id}/password"), true),
            (Method::PATCH, format!("/v3/users/{id}/password"), false),
            (Method::POST, "/compute/v2.1/servers".to_string(), false),
            (
                Method::DELETE,
                format!("/v3/users/{id}/application_credentials/{id}/x"),
                false,
            ),
        ] {
            assert_eq!(self_service(&method, &path), expected, "{method} {path}");
        }
    }
}
