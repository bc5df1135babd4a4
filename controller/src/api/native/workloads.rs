//! Workloads (flavor + image + cloud-init user data): the tenant's own and public ones are
//! visible; members manage their tenant's, admins any and public ones.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::catalog::owner_for;
use super::views;
use crate::api::extract::{JsonBody, PathParams, path_id, present};
use crate::api::{ApiError, ApiState, Principal};
use store::{NewWorkload, Scope, WorkloadChange};

/// The most user data a workload holds.
const MAX_USER_DATA: usize = 65_535;

/// A new workload; its owner as an image's (never both public and a tenant's).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WorkloadCreate)]
pub struct CreateWorkload {
    #[schema(min_length = 1, max_length = 255, pattern = r"\S")]
    name: String,
    flavor: Uuid,
    image: Uuid,
    #[serde(default)]
    #[schema(max_length = 65535)]
    user_data: String,
    #[serde(default)]
    public: bool,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    tenant: Option<Uuid>,
    /// Its instances hold nothing worth keeping (see `docs/api.md`, "Ephemeral workloads").
    #[serde(default)]
    ephemeral: bool,
}

/// A workload's new name or user data.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WorkloadUpdate)]
pub struct UpdateWorkload {
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false, min_length = 1, max_length = 255, pattern = r"\S")]
    name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false, max_length = 65535)]
    user_data: Option<String>,
}

fn check_user_data(text: &str) -> Result<(), ApiError> {
    if text.len() > MAX_USER_DATA {
        Err(ApiError::BadRequest(format!(
            "user_data is over {MAX_USER_DATA} bytes"
        )))
    } else {
        Ok(())
    }
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/workloads",
    operation_id = "list_workloads",
    summary = "List workloads",
    tag = "workloads",
    responses((status = 200, description = "success", body = views::Workloads)),
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Workloads>, ApiError> {
    let scope = caller.scope()?;
    let workloads = state.store(move |s| Ok(s.workloads(scope)?)).await?;
    Ok(Json(views::Workloads {
        workloads: workloads.iter().map(views::workload).collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/workloads/{id}",
    operation_id = "show_a_workload",
    summary = "Show a workload",
    tag = "workloads",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::Workload)),
)]
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::Workload>, ApiError> {
    let id = path_id("workload", &id)?;
    let scope = caller.scope()?;
    let workload = state.store(move |s| Ok(s.workload(scope, id)?)).await?;
    Ok(Json(views::workload(&workload)))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/workloads",
    operation_id = "create_a_workload",
    summary = "Create a workload",
    tag = "workloads",
    request_body = CreateWorkload,
    responses((status = 201, description = "success", body = views::Workload)),
)]
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<CreateWorkload>,
) -> Result<Response, ApiError> {
    let owner = owner_for(&caller, body.public, body.tenant)?;
    let seen = crate::api::compute::flavor_scope(&caller)?;
    check_user_data(&body.user_data)?;
    let new = NewWorkload {
        owner,
        name: body.name,
        flavor: body.flavor,
        image: body.image,
        user_data: body.user_data,
        ephemeral: body.ephemeral,
    };
    let workload = state
        .store(move |s| {
            // A flavor or image that is missing (or not the owner's to see): not found.
            s.flavor(seen, new.flavor)?;
            let seen_by = new.owner.map_or(Scope::All, Scope::Tenant);
            let image = s.image(seen_by, new.image)?;
            if new.owner.is_none() && image.owner.is_some() {
                return Err(ApiError::BadRequest(
                    "a public workload needs a public image".into(),
                ));
            }
            Ok(s.create_workload(new)?)
        })
        .await?;
    Ok((StatusCode::CREATED, Json(views::workload(&workload))).into_response())
}

#[utoipa::path(
    patch,
    path = "/cumulo/v1/workloads/{id}",
    operation_id = "update_a_workload",
    summary = "Update a workload",
    tag = "workloads",
    params(("id" = Uuid, Path, description = "the object's id")),
    request_body = UpdateWorkload,
    responses((status = 200, description = "success", body = views::Workload)),
)]
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<UpdateWorkload>,
) -> Result<Json<views::Workload>, ApiError> {
    let id = path_id("workload", &id)?;
    let scope = caller.scope()?;
    if let Some(text) = &body.user_data {
        check_user_data(text)?;
    }
    let change = WorkloadChange {
        name: body.name,
        user_data: body.user_data,
    };
    let workload = state
        .store(move |s| {
            let current = s.workload(scope, id)?;
            if !scope.owns(current.owner) {
                return Err(ApiError::Forbidden(
                    "public workloads are the admins' to change".into(),
                ));
            }
            Ok(s.update_workload(scope, id, current.version, change)?)
        })
        .await?;
    Ok(Json(views::workload(&workload)))
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/workloads/{id}",
    operation_id = "delete_a_workload",
    summary = "Delete a workload",
    tag = "workloads",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 204, description = "success (no body)")),
)]
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("workload", &id)?;
    let scope = caller.scope()?;
    state
        .store(move |s| {
            let current = s.workload(scope, id)?;
            if !scope.owns(current.owner) {
                return Err(ApiError::Forbidden(
                    "public workloads are the admins' to delete".into(),
                ));
            }
            Ok(s.delete_workload(scope, id)?)
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
