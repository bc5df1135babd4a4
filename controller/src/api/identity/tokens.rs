//! Tokens: `POST /v3/auth/tokens` with one of three methods, `GET /v3/auth/tokens` (validation)
//! and `DELETE /v3/auth/tokens` (revocation).
//!
//! - `password` (a user by id, or by name in domain `Default`): rate limited per user name and
//!   per source address unless the caller shows an admin client certificate (429 with
//!   `Retry-After`); the password is checked on the hashing pool (503 with `Retry-After` when it
//!   is full), an unknown user's as long as a known one's. A disabled user is refused (401).
//! - `token` (an existing token): a new token for the same user with the scope asked for
//!   (re-scoping), which expires with the original.
//! - `application_credential`: a token scoped to the credential's project with its roles
//!   (`app_creds.rs`).
//!
//! The scope: a project (by id, or by name in domain `Default`) where the user has a role; none
//! (or `"unscoped"`): the user's default project if it has a role there, else an unscoped token
//! (no project, roles or catalog: it lists `/v3/auth/projects` and is exchanged for a scoped
//! one). Domain and system scopes are refused (401): cumulo gives no roles on them.
//!
//! `DELETE /v3/auth/tokens` puts the subject token on the store's revocation list until it
//! expires: from then on it is 401 on use and 404 on validation, as Keystone answers, on every
//! controller sharing the store (see `auth.rs` for what else ends a token).

use std::time::SystemTime;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::app_creds::{self, AppCredMethod};
use super::{
    DomainRef, SUBJECT_TOKEN, catalog, default_domain, domain, found, role_ref, roles_in,
    unauthorized,
};
use crate::api::auth::{principal_of_token, token_ref};
use crate::api::clock::rfc3339_micro;
use crate::api::extract::{JsonBody, QueryParams};
use crate::api::token::{Claims, Grant};
use crate::api::{ApiError, ApiState, ClientCertificate, PeerAddr, Principal};
use store::{AppCredential, IdentityStore, Role, Tenant, User};

/// What a token is, to describe it.
struct Described {
    user: User,
    tenant: Option<Tenant>,
    /// The roles given (or the credential's that the user holds), without those they imply.
    roles: Vec<Role>,
    cred: Option<AppCredential>,
}

fn token_body(base: &str, claims: &Claims, what: &Described, with_catalog: bool) -> Value {
    let method = match what.cred {
        Some(_) => "application_credential",
        None => "password",
    };
    let user = &what.user;
    let mut token = json!({
        "methods": [method],
        "user": {"id": user.id, "name": user.name, "domain": domain(), "password_expires_at": null},
        "audit_ids": [claims.audit],
        "issued_at": rfc3339_micro(claims.issued_at()),
        "expires_at": rfc3339_micro(claims.expires_at()),
    });
    if let Some(tenant) = &what.tenant {
        let roles: Vec<Value> = Role::effective(&what.roles)
            .into_iter()
            .map(role_ref)
            .collect();
        token["project"] = json!({"id": tenant.id, "name": tenant.name, "domain": domain()});
        token["is_domain"] = json!(false);
        token["roles"] = json!(roles);
        if with_catalog {
            token["catalog"] = catalog(base, Some(tenant.id));
        }
    }
    if let Some(cred) = &what.cred {
        token["application_credential"] =
            json!({"id": cred.id, "name": cred.name, "restricted": !cred.unrestricted});
    }
    json!({"token": token})
}

#[derive(Debug, Deserialize)]
pub(super) struct LoginRequest {
    auth: LoginAuth,
}

#[derive(Debug, Deserialize)]
struct LoginAuth {
    identity: LoginIdentity,
    #[serde(default)]
    scope: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct LoginIdentity {
    methods: Vec<String>,
    #[serde(default)]
    password: Option<PasswordMethod>,
    #[serde(default)]
    token: Option<TokenMethod>,
    #[serde(default)]
    application_credential: Option<AppCredMethod>,
}

#[derive(Debug, Deserialize)]
struct PasswordMethod {
    user: UserRef,
}

#[derive(Debug, Deserialize)]
struct TokenMethod {
    id: String,
}

#[derive(Debug, Deserialize)]
struct UserRef {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    domain: Option<DomainRef>,
    password: String,
}

#[derive(Debug, Deserialize)]
struct ProjectRef {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    domain: Option<DomainRef>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct TokenQuery {
    #[serde(default)]
    nocatalog: Option<String>,
}

fn find_user(store: &dyn IdentityStore, user: &UserRef) -> Result<Option<User>, ApiError> {
    match (&user.id, &user.name) {
        (Some(id), _) => match Uuid::parse_str(id) {
            Ok(id) => found(store.user(id)),
            Err(_) => Ok(None),
        },
        (None, Some(name)) => found(store.user_by_name(name)),
        (None, None) => Err(ApiError::BadRequest(
            "the password method needs a user id or name".into(),
        )),
    }
}

/// The project a scope's `project` names, if it exists.
fn find_project(store: &dyn IdentityStore, project: &Value) -> Result<Tenant, ApiError> {
    let project: ProjectRef = serde_json::from_value(project.clone())
        .map_err(|e| ApiError::BadRequest(format!("bad project scope: {e}")))?;
    if !default_domain(project.domain.as_ref()) {
        return Err(unauthorized());
    }
    let found = match (&project.id, &project.name) {
        (Some(id), _) => match Uuid::parse_str(id) {
            Ok(id) => found(store.tenant(id))?,
            Err(_) => None,
        },
        (None, Some(name)) => store.tenants()?.into_iter().find(|t| &t.name == name),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "the project scope needs an id or a name".into(),
            ));
        }
    };
    found.ok_or_else(unauthorized)
}

/// The project (and the user's roles there) that `scope` asks `user` a token for; `None` for
/// an unscoped token.
fn resolve_scope(
    store: &dyn IdentityStore,
    user: &User,
    scope: &Option<Value>,
) -> Result<Option<(Tenant, Vec<Role>)>, ApiError> {
    let tenant = match scope {
        None | Some(Value::Null) => {
            // The default project, if the user has a role there; else unscoped.
            let Some(project) = user.default_project else {
                return Ok(None);
            };
            let Some(tenant) = found(store.tenant(project))? else {
                return Ok(None);
            };
            let roles = roles_in(store, user.id, tenant.id)?;
            return Ok((!roles.is_empty()).then_some((tenant, roles)));
        }
        Some(Value::String(s)) if s == "unscoped" => return Ok(None),
        Some(Value::Object(o)) if o.contains_key("project") => find_project(store, &o["project"])?,
        Some(Value::Object(_)) => {
            // A domain, the system, a trust: cumulo gives no roles on them.
            return Err(ApiError::Unauthorized(
                "cumulo issues project-scoped and unscoped tokens only".into(),
            ));
        }
        Some(_) => return Err(ApiError::BadRequest("bad scope".into())),
    };
    let roles = roles_in(store, user.id, tenant.id)?;
    if roles.is_empty() {
        return Err(ApiError::Unauthorized(format!(
            "user {} has no role in project {}",
            user.name, tenant.name
        )));
    }
    Ok(Some((tenant, roles)))
}

/// `POST /v3/auth/tokens`: 201 with the token in `X-Subject-Token` (`?nocatalog`: without the
/// catalog). One method at a time.
pub(super) async fn login(
    State(state): State<ApiState>,
    peer: Option<Extension<PeerAddr>>,
    cert: Option<Extension<ClientCertificate>>,
    QueryParams(query): QueryParams<TokenQuery>,
    JsonBody(request): JsonBody<LoginRequest>,
) -> Result<Response, ApiError> {
    let identity = request.auth.identity;
    let scope = request.auth.scope;
    let peer = peer.map(|Extension(p)| p);
    let cert = cert.map(|Extension(c)| c);
    let (grant, described) = match identity.methods.as_slice() {
        [] => return Err(ApiError::BadRequest("a login needs a method".into())),
        [method] if method == "password" => {
            password_login(&state, peer, cert, identity.password, scope).await?
        }
        [method] if method == "token" => token_login(&state, identity.token, scope).await?,
        [method] if method == "application_credential" => {
            let a = app_creds::authenticate(&state, peer, cert, identity.application_credential)
                .await?;
            if let Some(scope) = scope.filter(|s| !s.is_null()) {
                let asked = scope.get("project").cloned().unwrap_or(Value::Null);
                let project = state.store(move |s| find_project(s, &asked)).await?;
                if project.id != a.tenant.id {
                    return Err(ApiError::Unauthorized(
                        "an application credential's token is scoped to its project".into(),
                    ));
                }
            }
            let grant = Grant {
                user: a.user.id,
                project: Some(a.tenant.id),
                generation: a.user.token_generation,
                app_cred: Some(a.cred.id),
                not_after: a.cred.expires,
            };
            let described = Described {
                roles: a.cred.roles.clone(),
                user: a.user,
                tenant: Some(a.tenant),
                cred: Some(a.cred),
            };
            (grant, described)
        }
        [_] => {
            return Err(ApiError::Unauthorized(
                "the methods are password, token and application_credential".into(),
            ));
        }
        _ => {
            return Err(ApiError::Unauthorized(
                "one authentication method at a time".into(),
            ));
        }
    };
    let (token, claims) = state
        .signer
        .issue_grant(&grant, SystemTime::now())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let body = token_body(
        &state.config.public_url,
        &claims,
        &described,
        query.nocatalog.is_none(),
    );
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    let value = HeaderValue::from_str(&token)
        .map_err(|_| ApiError::Internal("token is not a header value".into()))?;
    response.headers_mut().insert(SUBJECT_TOKEN, value);
    Ok(response)
}

/// A grant scoped as `scope` asks, for `user`.
fn scoped_grant(
    store: &dyn IdentityStore,
    user: User,
    scope: &Option<Value>,
    not_after: Option<SystemTime>,
) -> Result<(Grant, Described), ApiError> {
    let scoped = resolve_scope(store, &user, scope)?;
    let grant = Grant {
        user: user.id,
        project: scoped.as_ref().map(|(t, _)| t.id),
        generation: user.token_generation,
        app_cred: None,
        not_after,
    };
    let (tenant, roles) = match scoped {
        Some((t, r)) => (Some(t), r),
        None => (None, Vec::new()),
    };
    Ok((
        grant,
        Described {
            user,
            tenant,
            roles,
            cred: None,
        },
    ))
}

async fn password_login(
    state: &ApiState,
    peer: Option<PeerAddr>,
    cert: Option<ClientCertificate>,
    method: Option<PasswordMethod>,
    scope: Option<Value>,
) -> Result<(Grant, Described), ApiError> {
    let method = method
        .ok_or_else(|| ApiError::BadRequest("the password method needs a password".into()))?;
    let mut user_ref = method.user;
    if !default_domain(user_ref.domain.as_ref()) {
        return Err(unauthorized());
    }
    let limited_as = match (&user_ref.id, &user_ref.name) {
        (Some(id), _) => format!("id:{id}"),
        (None, Some(name)) => format!("name:{name}"),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "the password method needs a user id or name".into(),
            ));
        }
    };
    let admission = super::secrets::admit(state, peer, cert, &limited_as)?;
    let password = std::mem::take(&mut user_ref.password);
    let user = state
        .store(move |store| find_user(store, &user_ref))
        .await?;
    let stored = user.as_ref().map(|u| u.password_hash.clone());
    let right = super::secrets::check_secret(state, admission, password, stored).await?;
    let Some(user) = user.filter(|_| right) else {
        return Err(unauthorized());
    };
    if !user.enabled {
        return Err(ApiError::Unauthorized(format!(
            "The account is disabled for user: {}.",
            user.id
        )));
    }
    state
        .store(move |store| scoped_grant(store, user, &scope, None))
        .await
}

/// Re-scoping: a valid token (not one of an application credential) for a new token of the
/// same user with `scope`, expiring when the original does.
async fn token_login(
    state: &ApiState,
    method: Option<TokenMethod>,
    scope: Option<Value>,
) -> Result<(Grant, Described), ApiError> {
    let method =
        method.ok_or_else(|| ApiError::BadRequest("the token method needs a token id".into()))?;
    let subject = principal_of_token(state, &method.id)
        .await
        .map_err(|_| unauthorized())?;
    if subject.app_credential.is_some() {
        return Err(ApiError::Forbidden(
            "a token of an application credential cannot be exchanged for another".into(),
        ));
    }
    let claims = subject.claims.ok_or_else(unauthorized)?;
    let not_after = Some(claims.expires_at());
    state
        .store(move |store| {
            let user = found(store.user(claims.user))?.ok_or_else(unauthorized)?;
            if !user.enabled {
                return Err(unauthorized());
            }
            scoped_grant(store, user, &scope, not_after)
        })
        .await
}

fn subject_token(headers: &HeaderMap) -> Result<String, ApiError> {
    headers
        .get(SUBJECT_TOKEN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| ApiError::BadRequest("X-Subject-Token is required".into()))
}

/// `GET /v3/auth/tokens`: the token in `X-Subject-Token`, if valid (asked by its own user or an
/// admin, such as a service validating its callers' tokens); `?nocatalog` leaves the catalog out.
pub(super) async fn validate(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<TokenQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let subject_text = subject_token(&headers)?;
    let subject = principal_of_token(&state, &subject_text)
        .await
        .map_err(|_| ApiError::NotFound("the subject token is not valid".into()))?;
    if !caller.is_admin() && caller.user != subject.user {
        return Err(ApiError::Forbidden(
            "only admins may validate other users' tokens".into(),
        ));
    }
    let claims = subject
        .claims
        .clone()
        .ok_or_else(|| ApiError::Internal("a token principal without claims".into()))?;
    let base = state.config.public_url.clone();
    let roles = subject.roles.clone();
    let body = state
        .store(move |store| {
            let user = store.user(claims.user)?;
            let tenant = claims.project.map(|p| store.tenant(p)).transpose()?;
            let cred = match claims.app_cred {
                Some(id) => found(store.app_credential(id))?,
                None => None,
            };
            let described = Described {
                user,
                tenant,
                roles,
                cred,
            };
            Ok(token_body(
                &base,
                &claims,
                &described,
                query.nocatalog.is_none(),
            ))
        })
        .await?;
    let mut response = Json(body).into_response();
    if let Ok(value) = HeaderValue::from_str(&subject_text) {
        response.headers_mut().insert(SUBJECT_TOKEN, value);
    }
    Ok(response)
}

/// `DELETE /v3/auth/tokens`: revokes the token in `X-Subject-Token` (its own user's, or any for
/// admins); 404 when it is not valid (already revoked, expired, forged).
pub(super) async fn revoke(
    State(state): State<ApiState>,
    caller: Principal,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let subject = principal_of_token(&state, &subject_token(&headers)?)
        .await
        .map_err(|_| ApiError::NotFound("the subject token is not valid".into()))?;
    if !caller.is_admin() && caller.user != subject.user {
        return Err(ApiError::Forbidden(
            "only admins may revoke other users' tokens".into(),
        ));
    }
    let claims = subject
        .claims
        .as_ref()
        .ok_or_else(|| ApiError::Internal("a token principal without claims".into()))?;
    let entry = token_ref(claims);
    state
        .store(move |store| Ok(store.revoke_token(&entry)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
