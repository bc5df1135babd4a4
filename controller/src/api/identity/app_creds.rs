//! Application credentials as Keystone's: a user makes one with a project-scoped token (the
//! credential is scoped to the token's project, with a subset of the token's roles), lists,
//! shows and deletes its own (admins: anyone's), and an application logs in with its id and
//! secret (or its name, its user and the secret): [`authenticate`], for `tokens.rs`.
//!
//! The secret is given or generated (32 random bytes, URL-safe base64), shown once in the
//! creation's answer, and kept only as a hash made as passwords' are. A token of a credential
//! that is not `unrestricted` may not make or delete credentials (403), as Keystone's. At most
//! [`MAX_PER_USER`] credentials per user.

use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    DomainRef, default_domain, found, invalid, list_links, policy, role_ref, unauthorized,
};
use crate::api::clock::{parse_time, rfc3339_micro};
use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, ClientCertificate, PeerAddr, Principal, password};
use store::{AppCredential, MAX_DESCRIPTION, NewAppCredential, Role, StoreError, Tenant, User};

/// The most application credentials one user may have.
pub const MAX_PER_USER: u32 = 100;

fn cred_body(base: &str, cred: &AppCredential) -> Value {
    let roles: Vec<Value> = cred
        .roles
        .iter()
        .map(|r| {
            let mut v = role_ref(*r);
            v["domain_id"] = Value::Null;
            v
        })
        .collect();
    json!({
        "id": cred.id,
        "name": cred.name,
        "description": if cred.description.is_empty() { Value::Null } else { json!(cred.description) },
        "user_id": cred.user,
        "project_id": cred.project,
        "roles": roles,
        "expires_at": cred.expires.map(rfc3339_micro),
        "unrestricted": cred.unrestricted,
        "access_rules": [],
        "links": {"self": format!(
            "{base}/v3/users/{}/application_credentials/{}", cred.user, cred.id
        )},
    })
}

/// A role as a creation names it: by name or by id (the same here).
#[derive(Debug, Deserialize)]
pub(super) struct RoleRef {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateFields {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    roles: Option<Vec<RoleRef>>,
    #[serde(default)]
    unrestricted: Option<bool>,
    #[serde(default)]
    access_rules: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateBody {
    application_credential: CreateFields,
}

/// A fresh secret: 32 random bytes, URL-safe base64, drawn again while it begins with `-` (one
/// in 64), which a command line such as `openstack --os-application-credential-secret -x...`
/// would take for an option.
fn generate_secret() -> Result<String, ApiError> {
    let random = SystemRandom::new();
    loop {
        let mut bytes = [0u8; 32];
        random
            .fill(&mut bytes)
            .map_err(|_| ApiError::Internal("no randomness for a secret".into()))?;
        let secret = URL_SAFE_NO_PAD.encode(bytes);
        if !secret.starts_with('-') {
            return Ok(secret);
        }
    }
}

/// The roles a creation asks for, each one the caller's token has; all of the token's if none.
fn chosen_roles(caller: &Principal, asked: Option<Vec<RoleRef>>) -> Result<Vec<Role>, ApiError> {
    let held = caller.effective_roles();
    let Some(asked) = asked.filter(|a| !a.is_empty()) else {
        return Ok(held);
    };
    if asked.len() > Role::ALL.len() * 2 {
        return Err(invalid("roles", "too many roles"));
    }
    let mut roles = Vec::new();
    for r in asked {
        let text =
            r.id.or(r.name)
                .ok_or_else(|| invalid("roles", "a role needs an id or a name"))?;
        let role = Role::from_name(&text).ok_or_else(|| {
            ApiError::NotFound(format!(
                "Could not find role: {}.",
                text.chars().take(64).collect::<String>()
            ))
        })?;
        if !held.contains(&role) {
            // Keystone's answer when the user does not hold a role asked for.
            return Err(ApiError::NotFound(format!(
                "Could not find role assignment with role: {role}, user or group: {}, project, \
                 domain, or system: {}.",
                caller.user.map(|u| u.to_string()).unwrap_or_default(),
                caller.project.map(|p| p.to_string()).unwrap_or_default(),
            )));
        }
        roles.push(role);
    }
    Ok(roles)
}

/// `POST /v3/users/{id}/application_credentials`: by the user itself, with a project-scoped
/// token (not one of a restricted credential); 201 with the secret, shown this once.
pub(super) async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    peer: Option<axum::Extension<PeerAddr>>,
    PathParams(user): PathParams<String>,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<Response, ApiError> {
    let user = path_id("user", &user)?;
    if caller.user != Some(user) {
        return Err(policy("identity:create_application_credential"));
    }
    caller.require_unrestricted()?;
    let project = caller.project.ok_or_else(|| {
        ApiError::Forbidden("an application credential is made with a project-scoped token".into())
    })?;
    let fields = body.application_credential;
    if fields.access_rules.as_ref().is_some_and(|r| !r.is_empty()) {
        return Err(invalid("access_rules", "cumulo has no access rules"));
    }
    if fields
        .description
        .as_ref()
        .is_some_and(|d| d.len() > MAX_DESCRIPTION)
    {
        return Err(invalid(
            "description",
            &format!("at most {MAX_DESCRIPTION} bytes"),
        ));
    }
    if fields.name.trim().is_empty() || fields.name.chars().count() > 255 {
        return Err(invalid("name", "a name has 1 to 255 characters, not blank"));
    }
    let expires = match fields.expires_at.as_deref() {
        None => None,
        Some(text) => {
            let at =
                parse_time(text).ok_or_else(|| invalid("expires_at", "not an ISO 8601 time"))?;
            if at <= SystemTime::now() {
                return Err(invalid("expires_at", "the time is past"));
            }
            Some(at)
        }
    };
    let roles = chosen_roles(&caller, fields.roles)?;
    // What the store would refuse is refused before any hashing: a name the user has, the
    // limit reached (the store checks again, in its transaction).
    let name = fields.name.clone();
    state
        .store(move |s| {
            let existing = s.app_credentials(user)?;
            if existing.iter().any(|c| c.name == name) {
                return Err(ApiError::Conflict(format!(
                    "Conflict occurred attempting to store application_credential - Duplicate entry {name}"
                )));
            }
            if existing.len() >= MAX_PER_USER as usize {
                return Err(ApiError::Forbidden(format!(
                    "Unable to create additional application credentials, maximum of \
                     {MAX_PER_USER} already exceeded for user."
                )));
            }
            Ok(())
        })
        .await?;
    // A generated secret has 256 random bits: one round of the hash keeps it safe, and costs the
    // hashing pool nothing. A secret the user chose may be weak: it gets a password's rounds,
    // and goes through the login limiter (by user and source) as a login would, so that
    // creations cannot crowd the pool that logins share.
    let (secret, iterations, admission) = match fields.secret {
        None => (generate_secret()?, 1, None),
        Some(secret) => {
            let admitted = state.login_limiter.admit(
                peer.map(|axum::Extension(PeerAddr(a))| a.ip()),
                &format!("appcred-create:{user}"),
            )?;
            (secret, state.config.password_iterations, Some(admitted))
        }
    };
    if secret.is_empty() || secret.len() > password::MAX_PASSWORD_LEN {
        return Err(invalid(
            "secret",
            &format!("a secret has 1 to {} bytes", password::MAX_PASSWORD_LEN),
        ));
    }
    let hashed = secret.clone();
    let secret_hash = state
        .hashing
        .run(move || password::hash(&hashed, iterations))
        .await?
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    // A creation is not a failed login: what it spent of the user's budget comes back.
    if let Some(admission) = admission {
        admission.refund();
    }
    let new = NewAppCredential {
        user,
        project,
        name: fields.name,
        description: fields.description.unwrap_or_default(),
        secret_hash,
        roles,
        expires,
        unrestricted: fields.unrestricted.unwrap_or(false),
    };
    let cred = state
        .store(move |s| match s.create_app_credential(new, MAX_PER_USER) {
            Err(StoreError::QuotaExceeded { .. }) => Err(ApiError::Forbidden(format!(
                "Unable to create additional application credentials, maximum of \
                 {MAX_PER_USER} already exceeded for user."
            ))),
            other => Ok(other?),
        })
        .await?;
    let mut shown = cred_body(&state.config.public_url, &cred);
    shown["secret"] = json!(secret);
    let answer = json!({"application_credential": shown});
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// Refuses a caller that is neither the user nor an admin (Keystone's answer for `action`).
fn owner_or_admin(caller: &Principal, user: Uuid, action: &str) -> Result<(), ApiError> {
    if caller.is_admin() || caller.user == Some(user) {
        Ok(())
    } else {
        Err(policy(action))
    }
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct NameFilter {
    #[serde(default)]
    name: Option<String>,
}

/// `GET /v3/users/{id}/application_credentials[?name=]`: the user's, by name (never secrets).
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(user): PathParams<String>,
    QueryParams(filter): QueryParams<NameFilter>,
) -> Result<Json<Value>, ApiError> {
    let user = path_id("user", &user)?;
    owner_or_admin(&caller, user, "identity:list_application_credentials")?;
    let creds = state
        .store(move |s| {
            s.user(user)?;
            Ok(s.app_credentials(user)?)
        })
        .await?;
    let base = &state.config.public_url;
    let listed: Vec<Value> = creds
        .iter()
        .filter(|c| filter.name.as_ref().is_none_or(|n| *n == c.name))
        .map(|c| cred_body(base, c))
        .collect();
    let path = format!("/v3/users/{user}/application_credentials");
    Ok(Json(
        json!({"application_credentials": listed, "links": list_links(base, &path)}),
    ))
}

/// One credential of `user`, or 404 (another user's too).
fn cred_of(
    state_store: &dyn store::Store,
    user: Uuid,
    id: Uuid,
) -> Result<AppCredential, ApiError> {
    match found(state_store.app_credential(id))? {
        Some(cred) if cred.user == user => Ok(cred),
        _ => Err(ApiError::NotFound(format!(
            "Could not find application credential: {id}."
        ))),
    }
}

pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((user, id)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let user = path_id("user", &user)?;
    owner_or_admin(&caller, user, "identity:get_application_credential")?;
    let id = path_id("application credential", &id)?;
    let cred = state.store(move |s| cred_of(s, user, id)).await?;
    Ok(Json(
        json!({"application_credential": cred_body(&state.config.public_url, &cred)}),
    ))
}

/// `DELETE /v3/users/{id}/application_credentials/{id}`: 204; its tokens end at once.
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((user, id)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let user = path_id("user", &user)?;
    owner_or_admin(&caller, user, "identity:delete_application_credential")?;
    caller.require_unrestricted()?;
    let id = path_id("application credential", &id)?;
    state
        .store(move |s| {
            cred_of(s, user, id)?;
            Ok(s.delete_app_credential(user, id)?)
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The `application_credential` method of a login.
#[derive(Debug, Deserialize)]
pub(super) struct AppCredMethod {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    user: Option<AppCredUser>,
    secret: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct AppCredUser {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    domain: Option<DomainRef>,
}

/// Who a credential login is: the credential, its user, its project and its roles.
pub(super) struct Authenticated {
    pub(super) cred: AppCredential,
    pub(super) user: User,
    pub(super) tenant: Tenant,
}

/// The credential `method` names, if any; 400 when it names none.
fn lookup(s: &dyn store::Store, method: &AppCredMethod) -> Result<Option<AppCredential>, ApiError> {
    if let Some(id) = &method.id {
        return match Uuid::parse_str(id) {
            Ok(id) => found(s.app_credential(id)),
            Err(_) => Ok(None),
        };
    }
    let name = method.name.as_deref().ok_or_else(|| {
        ApiError::BadRequest(
            "an application credential is named by its id, or its name and user".into(),
        )
    })?;
    let user_ref = method.user.as_ref().ok_or_else(|| {
        ApiError::BadRequest("an application credential named by name needs its user".into())
    })?;
    if !default_domain(user_ref.domain.as_ref()) {
        return Ok(None);
    }
    let user = match (&user_ref.id, &user_ref.name) {
        (Some(id), _) => match Uuid::parse_str(id) {
            Ok(id) => found(s.user(id))?,
            Err(_) => None,
        },
        (None, Some(name)) => found(s.user_by_name(name))?,
        (None, None) => {
            return Err(ApiError::BadRequest(
                "the user needs an id or a name".into(),
            ));
        }
    };
    let Some(user) = user else { return Ok(None) };
    Ok(s.app_credentials(user.id)?
        .into_iter()
        .find(|c| c.name == name))
}

/// Checks an `application_credential` login (rate limited as password logins are, by the
/// credential it names and the source; the secret checked on the hashing pool): 401 for a wrong
/// secret, an unknown or expired credential, a disabled user, or a user without all of the
/// credential's roles in its project any more.
pub(super) async fn authenticate(
    state: &ApiState,
    peer: Option<PeerAddr>,
    cert: Option<ClientCertificate>,
    method: Option<AppCredMethod>,
) -> Result<Authenticated, ApiError> {
    let mut method = method.ok_or_else(|| {
        ApiError::BadRequest("the application_credential method needs a credential".into())
    })?;
    let limited_as = match (&method.id, &method.name) {
        (Some(id), _) => format!("appcred:{id}"),
        (None, Some(name)) => format!("appcred-name:{name}"),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "an application credential is named by its id, or its name and user".into(),
            ));
        }
    };
    let admission = super::secrets::admit(state, peer, cert, &limited_as)?;
    let secret = std::mem::take(&mut method.secret);
    let cred = state.store(move |s| lookup(s, &method)).await?;
    let stored = cred.as_ref().map(|c| c.secret_hash.clone());
    let right = super::secrets::check_secret(state, admission, secret, stored).await?;
    let Some(cred) = cred.filter(|_| right) else {
        return Err(unauthorized());
    };
    if cred.expires.is_some_and(|at| at <= SystemTime::now()) {
        return Err(ApiError::Unauthorized(
            "The application credential has expired.".into(),
        ));
    }
    state
        .store(move |s| {
            let user = found(s.user(cred.user))?.ok_or_else(unauthorized)?;
            if !user.enabled {
                return Err(unauthorized());
            }
            let tenant = found(s.tenant(cred.project))?.ok_or_else(unauthorized)?;
            let held = Role::effective(&super::roles_in(s, user.id, tenant.id)?);
            if !cred.roles.iter().all(|r| held.contains(r)) {
                return Err(ApiError::Unauthorized(
                    "the user no longer has the roles of this application credential".into(),
                ));
            }
            Ok(Authenticated { cred, user, tenant })
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_are_long_distinct_and_never_look_like_an_option() {
        // One draw in 64 begins with `-` before the redraw: 2,000 draws would show one with
        // near certainty.
        let secrets: std::collections::HashSet<String> =
            (0..2000).map(|_| generate_secret().unwrap()).collect();
        assert_eq!(secrets.len(), 2000);
        for secret in &secrets {
            assert_eq!(secret.len(), 43, "{secret}");
            assert!(!secret.starts_with('-'), "{secret}");
        }
    }
}
