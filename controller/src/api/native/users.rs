//! Users and roles (admin only): create with a password, list, show, change the password,
//! delete; grant and revoke roles in tenants.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::views;
use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal, password};
use store::{NewUser, Role, UserChange};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    name: String,
    password: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateUser {
    password: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    tenant: uuid::Uuid,
    role: RoleName,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    Admin,
    Member,
}

impl From<RoleName> for Role {
    fn from(r: RoleName) -> Role {
        match r {
            RoleName::Admin => Role::Admin,
            RoleName::Member => Role::Member,
        }
    }
}

fn parse_role(text: &str) -> Result<Role, ApiError> {
    match text {
        "admin" => Ok(Role::Admin),
        "member" => Ok(Role::Member),
        _ => Err(ApiError::NotFound(format!("role {text} not found"))),
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

pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let users = state.store(|s| Ok(s.users()?)).await?;
    let users: Vec<Value> = users.iter().map(views::user).collect();
    Ok(Json(json!({"users": users})))
}

pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<CreateUser>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    if body.name.trim().is_empty() {
        return Err(ApiError::BadRequest("a user needs a name".into()));
    }
    let password_hash = hash(&state, body.password).await?;
    let user = state
        .store(move |s| {
            Ok(s.create_user(NewUser {
                name: body.name,
                password_hash,
            })?)
        })
        .await?;
    Ok((StatusCode::CREATED, Json(views::user(&user))).into_response())
}

pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    let (user, roles) = state
        .store(move |s| Ok((s.user(id)?, s.roles_of_user(id)?)))
        .await?;
    let mut body = views::user(&user);
    body["roles"] = roles.iter().map(views::assignment).collect();
    Ok(Json(body))
}

pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<UpdateUser>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    let password_hash = hash(&state, body.password).await?;
    let user = state
        .store(move |s| {
            let current = s.user(id)?;
            let change = UserChange {
                password_hash: Some(password_hash),
            };
            Ok(s.update_user(id, current.version, change)?)
        })
        .await?;
    Ok(Json(views::user(&user)))
}

pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    if caller.user == Some(id) {
        return Err(ApiError::Conflict("a user cannot delete itself".into()));
    }
    state.store(move |s| Ok(s.delete_user(id)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn roles(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    let roles = state
        .store(move |s| {
            s.user(id)?;
            Ok(s.roles_of_user(id)?)
        })
        .await?;
    let roles: Vec<Value> = roles.iter().map(views::assignment).collect();
    Ok(Json(json!({"roles": roles})))
}

pub async fn grant(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Grant>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    state
        .store(move |s| Ok(s.grant_role(id, body.tenant, body.role.into())?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn revoke(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, tenant, role)): PathParams<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    let tenant = path_id("tenant", &tenant)?;
    let role = parse_role(&role)?;
    if caller.user == Some(id) && caller.project == Some(tenant) {
        return Err(ApiError::Conflict(
            "a user cannot revoke its own role in the project of its token".into(),
        ));
    }
    state
        .store(move |s| Ok(s.revoke_role(id, tenant, role)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
