//! Users as Keystone's: list and show (admins; a user itself), the projects of a user; create,
//! change (password, name, enabled, default project) and delete (admins); a user's change of
//! its own password (`POST /v3/users/{id}/password`, [`change_password`]). Passwords are hashed
//! on the API's hashing pool, as logins check them. A user made without a password cannot log
//! in until an admin gives it one.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    admin_for, default_domain_id, invalid, list_links, projects_of, projects_response, user_body,
};
use crate::api::extract::{JsonBody, PathParams, QueryParams, nullable, path_id};
use crate::api::{ApiError, ApiState, PeerAddr, Principal, password};
use store::{NewUser, UserChange, UserProfile};

/// The longest user name (Keystone's).
pub const MAX_USER_NAME: usize = 255;
/// The stored "hash" of a user made without a password: no password matches it.
const NO_PASSWORD: &str = "!";

#[derive(Debug, Default, Deserialize)]
pub(super) struct NameFilter {
    #[serde(default)]
    name: Option<String>,
}

/// `GET /v3/users` (admin).
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(filter): QueryParams<NameFilter>,
) -> Result<Json<Value>, ApiError> {
    admin_for(&caller, "identity:list_users")?;
    let users = state.store(|store| Ok(store.users()?)).await?;
    let base = &state.config.public_url;
    let users: Vec<Value> = users
        .iter()
        .filter(|u| filter.name.as_ref().is_none_or(|n| *n == u.name))
        .map(|u| user_body(base, u))
        .collect();
    Ok(Json(
        json!({"users": users, "links": list_links(base, "/v3/users")}),
    ))
}

fn self_or_admin(caller: &Principal, user: Uuid) -> Result<(), ApiError> {
    if caller.is_admin() || caller.user == Some(user) {
        Ok(())
    } else {
        // Keystone's policy answer (identity:get_user), whether the user exists or not.
        Err(ApiError::Forbidden(format!(
            "You are not authorized to perform the requested action: identity:get_user (user \
             {user})."
        )))
    }
}

pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("user", &id)?;
    self_or_admin(&caller, id)?;
    let user = state.store(move |store| Ok(store.user(id)?)).await?;
    Ok(Json(
        json!({"user": user_body(&state.config.public_url, &user)}),
    ))
}

pub(super) async fn projects(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("user", &id)?;
    self_or_admin(&caller, id)?;
    let tenants = state
        .store(move |store| {
            store.user(id)?;
            projects_of(store, id)
        })
        .await?;
    let path = format!("/v3/users/{id}/projects");
    Ok(projects_response(&state.config.public_url, &path, &tenants))
}

/// What `POST /v3/users` and `PATCH /v3/users/{id}` take (inside `"user"`).
#[derive(Debug, Deserialize)]
pub(super) struct UserFields {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    default_project_id: Option<Option<String>>,
    #[serde(default)]
    domain_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct UserBody {
    user: UserFields,
}

impl UserFields {
    fn check(&self) -> Result<(), ApiError> {
        if let Some(name) = &self.name
            && (name.trim().is_empty() || name.chars().count() > MAX_USER_NAME)
        {
            return Err(invalid(
                "name",
                &format!("a user name has 1 to {MAX_USER_NAME} characters, not blank"),
            ));
        }
        if let Some(pw) = &self.password
            && (pw.is_empty() || pw.len() > password::MAX_PASSWORD_LEN)
        {
            return Err(invalid(
                "password",
                &format!("a password has 1 to {} bytes", password::MAX_PASSWORD_LEN),
            ));
        }
        if !default_domain_id(self.domain_id.as_deref()) {
            return Err(ApiError::NotFound(format!(
                "Could not find domain: {}.",
                self.domain_id
                    .as_deref()
                    .unwrap_or("")
                    .chars()
                    .take(64)
                    .collect::<String>()
            )));
        }
        Ok(())
    }

    /// The default project named, if any (`Some(None)`: none, for a change).
    fn default_project(&self) -> Result<Option<Option<Uuid>>, ApiError> {
        match &self.default_project_id {
            None => Ok(None),
            Some(None) => Ok(Some(None)),
            Some(Some(text)) => Uuid::parse_str(text).map(|id| Some(Some(id))).map_err(|_| {
                ApiError::NotFound(format!(
                    "Could not find project: {}.",
                    text.chars().take(64).collect::<String>()
                ))
            }),
        }
    }
}

/// Hashes `pw` on the API's hashing pool (503 when it is full).
async fn hash(state: &ApiState, pw: String) -> Result<String, ApiError> {
    let iterations = state.config.password_iterations;
    state
        .hashing
        .run(move || password::hash(&pw, iterations))
        .await?
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

/// `POST /v3/users` (admins): 201 with the user; 409 for a name taken, 404 for a default
/// project that does not exist. The default project is where a login without a scope goes; it
/// is not a role (`openstack role add` gives one).
pub(super) async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<UserBody>,
) -> Result<Response, ApiError> {
    admin_for(&caller, "identity:create_user")?;
    let fields = body.user;
    fields.check()?;
    let default_project = fields.default_project()?.flatten();
    let name = fields
        .name
        .ok_or_else(|| invalid("name", "a user needs a name"))?;
    let password_hash = match fields.password {
        Some(pw) => hash(&state, pw).await?,
        None => NO_PASSWORD.to_string(),
    };
    let profile = UserProfile {
        enabled: fields.enabled.unwrap_or(true),
        default_project,
    };
    let user = state
        .store(move |s| {
            let new = NewUser {
                name,
                password_hash,
            };
            Ok(s.create_user_with(new, profile)?)
        })
        .await?;
    let body = json!({"user": user_body(&state.config.public_url, &user)});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `PATCH /v3/users/{id}` (admins): a new password (its tokens end), name, `enabled` (disabling
/// ends its tokens) or default project. An admin may not disable itself (409).
pub(super) async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<UserBody>,
) -> Result<Json<Value>, ApiError> {
    admin_for(&caller, "identity:update_user")?;
    let id = path_id("user", &id)?;
    let fields = body.user;
    fields.check()?;
    if caller.user == Some(id) && fields.enabled == Some(false) {
        return Err(ApiError::Conflict("a user cannot disable itself".into()));
    }
    let default_project = fields.default_project()?;
    let password_hash = match fields.password {
        Some(pw) => Some(hash(&state, pw).await?),
        None => None,
    };
    let user = state
        .store(move |s| {
            let current = s.user(id)?;
            let change = UserChange {
                password_hash,
                name: fields.name,
                enabled: fields.enabled,
                default_project,
            };
            Ok(s.update_user(id, current.version, change)?)
        })
        .await?;
    Ok(Json(
        json!({"user": user_body(&state.config.public_url, &user)}),
    ))
}

/// `DELETE /v3/users/{id}` (admins): 204; its role assignments, key pairs and application
/// credentials go with it. A user may not delete itself (409).
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    admin_for(&caller, "identity:delete_user")?;
    let id = path_id("user", &id)?;
    if caller.user == Some(id) {
        return Err(ApiError::Conflict("a user cannot delete itself".into()));
    }
    state.store(move |s| Ok(s.delete_user(id)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What `POST /v3/users/{id}/password` takes (inside `"user"`).
#[derive(Debug, Deserialize)]
pub(super) struct PasswordChange {
    password: String,
    original_password: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct PasswordChangeBody {
    user: PasswordChange,
}

/// `POST /v3/users/{id}/password` (Keystone's "Change password for user"): the user itself, with
/// a token of its own and its current password, gives itself a new one. 204; every token of the
/// user ends (the store raises its token generation with the new hash), the caller's too. A
/// wrong original password is Keystone's 401, and counts against the login limits of the user
/// id and the source, as a wrong login does (429 past them, before anything is hashed), so the
/// route is no way around them. Stricter than Keystone, whose route needs no token and checks
/// only the original password: another user's id is a 403 here, whatever the password.
pub(super) async fn change_password(
    State(state): State<ApiState>,
    caller: Principal,
    peer: Option<Extension<PeerAddr>>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<PasswordChangeBody>,
) -> Result<StatusCode, ApiError> {
    let id = Uuid::parse_str(&id)
        .ok()
        .filter(|id| caller.user == Some(*id))
        .ok_or_else(|| {
            ApiError::Forbidden(
                "You are not authorized to perform the requested action: \
                 identity:change_password: a user changes its own password only."
                    .into(),
            )
        })?;
    let PasswordChange {
        password: new,
        original_password: original,
    } = body.user;
    for (field, pw) in [("password", &new), ("original_password", &original)] {
        if pw.is_empty() || pw.len() > password::MAX_PASSWORD_LEN {
            return Err(invalid(
                field,
                &format!("a password has 1 to {} bytes", password::MAX_PASSWORD_LEN),
            ));
        }
    }
    let peer = peer.map(|Extension(p)| p);
    let admission = super::secrets::admit(&state, peer, None, &format!("id:{id}"))?;
    let user = state.store(move |s| Ok(s.user(id)?)).await?;
    let right = super::secrets::check_secret(
        &state,
        admission,
        original,
        Some(user.password_hash.clone()),
    )
    .await?;
    if !right {
        return Err(ApiError::Unauthorized(
            "Error when changing user password: Invalid user / password".into(),
        ));
    }
    let password_hash = hash(&state, new).await?;
    state
        .store(move |s| {
            let change = UserChange {
                password_hash: Some(password_hash),
                ..UserChange::default()
            };
            Ok(s.update_user(id, user.version, change)?)
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
