//! Users and roles (admin only): create with a password, list, show, change the password,
//! delete; grant and revoke roles in tenants.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::views::{self, RoleName};
use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal, password};
use store::{NewUser, Role, UserChange};

/// A new user and its password.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UserCreate)]
pub struct CreateUser {
    #[schema(min_length = 1, max_length = 255, pattern = r"\S")]
    name: String,
    #[schema(min_length = 1, max_length = 1024)]
    password: String,
}

/// A user's new password.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UserUpdate)]
pub struct UpdateUser {
    #[schema(min_length = 1, max_length = 1024)]
    password: String,
}

/// A role to grant a user in a tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RoleGrant)]
pub struct Grant {
    tenant: Uuid,
    role: RoleName,
}

fn parse_role(text: &str) -> Result<Role, ApiError> {
    Role::from_name(text).ok_or_else(|| ApiError::NotFound(format!("role {text} not found")))
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

#[utoipa::path(
    get,
    path = "/cumulo/v1/users",
    operation_id = "list_users",
    summary = "List users",
    tag = "users",
    responses((status = 200, description = "success", body = views::Users)),
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Users>, ApiError> {
    caller.require_admin()?;
    let users = state.store(|s| Ok(s.users()?)).await?;
    Ok(Json(views::Users {
        users: users.iter().map(views::user).collect(),
    }))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/users",
    operation_id = "create_a_user",
    summary = "Create a user",
    tag = "users",
    request_body = CreateUser,
    responses((status = 201, description = "success", body = views::User)),
)]
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

#[utoipa::path(
    get,
    path = "/cumulo/v1/users/{id}",
    operation_id = "show_a_user",
    summary = "Show a user",
    tag = "users",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::User)),
)]
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::User>, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    let (user, roles) = state
        .store(move |s| Ok((s.user(id)?, s.roles_of_user(id)?)))
        .await?;
    Ok(Json(views::user_with_roles(&user, &roles)))
}

#[utoipa::path(
    patch,
    path = "/cumulo/v1/users/{id}",
    operation_id = "change_a_password",
    summary = "Change a password",
    tag = "users",
    params(("id" = Uuid, Path, description = "the object's id")),
    request_body = UpdateUser,
    responses((status = 200, description = "success", body = views::User)),
)]
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<UpdateUser>,
) -> Result<Json<views::User>, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    let password_hash = hash(&state, body.password).await?;
    let user = state
        .store(move |s| {
            let current = s.user(id)?;
            let change = UserChange {
                password_hash: Some(password_hash),
                ..UserChange::default()
            };
            Ok(s.update_user(id, current.version, change)?)
        })
        .await?;
    Ok(Json(views::user(&user)))
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/users/{id}",
    operation_id = "delete_a_user",
    summary = "Delete a user",
    tag = "users",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 204, description = "success (no body)")),
)]
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

#[utoipa::path(
    get,
    path = "/cumulo/v1/users/{id}/roles",
    operation_id = "list_a_users_roles",
    summary = "List a user's roles",
    tag = "users",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::Roles)),
)]
pub async fn roles(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::Roles>, ApiError> {
    caller.require_admin()?;
    let id = path_id("user", &id)?;
    let roles = state
        .store(move |s| {
            s.user(id)?;
            Ok(s.roles_of_user(id)?)
        })
        .await?;
    Ok(Json(views::Roles {
        roles: roles.iter().map(views::assignment).collect(),
    }))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/users/{id}/roles",
    operation_id = "grant_a_role",
    summary = "Grant a role",
    tag = "users",
    params(("id" = Uuid, Path, description = "the object's id")),
    request_body = Grant,
    responses((status = 204, description = "success (no body)")),
)]
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

#[utoipa::path(
    delete,
    path = "/cumulo/v1/users/{id}/roles/{tenant}/{role}",
    operation_id = "revoke_a_role",
    summary = "Revoke a role",
    tag = "users",
    params(("id" = Uuid, Path, description = "the object's id"), ("tenant" = Uuid, Path, description = "the tenant's id"), ("role" = RoleName, Path, description = "the role")),
    responses((status = 204, description = "success (no body)")),
)]
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
