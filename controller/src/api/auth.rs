//! Who is asking: the [`Principal`] extractor. A bearer token (`X-Auth-Token`, or
//! `Authorization: Bearer`) is verified (signature, expiry), then checked against the store in
//! two reads: the token must not be on the revocation list, its token generation must still be
//! its user's (a password change or a role removal raises it), and its user's roles in its
//! project are read. Nothing is cached, so a revoked token, a changed password, a deleted user
//! or a revoked role stops working at once, on every controller sharing the store. Without a
//! token, a client certificate with no SSNTP role, verified against the cluster CA by the TLS
//! layer (see [`ClientCertificate`](super::ClientCertificate)), makes the request a cluster
//! admin's.

use std::time::SystemTime;

use axum::extract::FromRequestParts;
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
    /// The user's roles in that project (a certificate login: `[Admin]`).
    pub roles: Vec<Role>,
    /// The token's claims, for a token login.
    pub claims: Option<Claims>,
    /// The id of the request it made (`req-` and this UUID, its `X-OpenStack-Request-Id`).
    pub request: Option<Uuid>,
}

impl Principal {
    /// Whether the caller is a cluster admin (the admin role in the token's project, or the
    /// admin client certificate).
    pub fn is_admin(&self) -> bool {
        self.roles.contains(&Role::Admin)
    }

    /// Who the caller is, as the cluster records it in instance actions.
    pub fn who(&self) -> Caller {
        Caller {
            user: self.user,
            project: self.project,
            request: self.request,
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
            ApiError::Forbidden("this needs a project-scoped token, not a certificate".into())
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
    let (user, project) = (claims.user, claims.project);
    let (generation, subject) = (claims.generation, token_ref(&claims));
    let roles = state
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
                    "the token was ended by a password change or a role removal".into(),
                ));
            }
            match store.roles_of_user(user) {
                Ok(all) => Ok(all
                    .into_iter()
                    .filter(|a| a.tenant == project)
                    .map(|a| a.role)
                    .collect::<Vec<_>>()),
                Err(StoreError::NotFound { .. }) => Ok(Vec::new()),
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    if roles.is_empty() {
        return Err(ApiError::Unauthorized(
            "the token's user no longer has a role in its project".into(),
        ));
    }
    Ok(Principal {
        user: Some(user),
        project: Some(project),
        roles,
        claims: Some(claims),
        request: None,
    })
}

impl FromRequestParts<ApiState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let request = parts
            .extensions
            .get::<super::request_id::RequestId>()
            .map(|r| r.0);
        if let Some(token) = request_token(parts) {
            let token = token.to_string();
            let mut principal = principal_of_token(state, &token).await?;
            principal.request = request;
            return Ok(principal);
        }
        match parts.extensions.get::<ClientCertificate>() {
            Some(ClientCertificate { admin: true, .. }) => Ok(Principal {
                user: None,
                project: None,
                roles: vec![Role::Admin],
                claims: None,
                request,
            }),
            _ => Err(ApiError::Unauthorized(
                "authentication required: send X-Auth-Token".into(),
            )),
        }
    }
}
