//! Flavors (everyone reads; admins create and delete) and images (public ones and the tenant's
//! own; members register private images of their tenant, admins public ones or any tenant's).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::views;
use crate::api::extract::{JsonBody, PathParams, path_id, present};
use crate::api::{ApiError, ApiState, Principal};
use store::{ImageKind, NewFlavor, NewImage};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateFlavor {
    name: String,
    vcpus: u32,
    memory_mb: u64,
    #[serde(default)]
    disk_gb: u64,
}

pub async fn list_flavors(
    State(state): State<ApiState>,
    _caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let flavors = state.store(|s| Ok(s.flavors()?)).await?;
    let flavors: Vec<Value> = flavors.iter().map(views::flavor).collect();
    Ok(Json(json!({"flavors": flavors})))
}

pub async fn show_flavor(
    State(state): State<ApiState>,
    _caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("flavor", &id)?;
    let flavor = state.store(move |s| Ok(s.flavor(id)?)).await?;
    Ok(Json(views::flavor(&flavor)))
}

pub async fn create_flavor(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<CreateFlavor>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    if body.vcpus == 0 || body.memory_mb == 0 {
        return Err(ApiError::BadRequest(
            "a flavor needs at least 1 vCPU and 1 MiB".into(),
        ));
    }
    let new = NewFlavor {
        name: body.name,
        vcpus: body.vcpus,
        memory_mb: body.memory_mb,
        disk_gb: body.disk_gb,
    };
    let flavor = state.store(move |s| Ok(s.create_flavor(new)?)).await?;
    Ok((StatusCode::CREATED, Json(views::flavor(&flavor))).into_response())
}

pub async fn delete_flavor(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("flavor", &id)?;
    state.store(move |s| Ok(s.delete_flavor(id)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KindName {
    Qcow2,
    Raw,
    Iso,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateImage {
    name: String,
    kind: KindName,
    reference: String,
    #[serde(default)]
    public: bool,
    #[serde(default, deserialize_with = "present")]
    tenant: Option<Uuid>,
}

/// The owner a caller creates an object for: public (admins), a named tenant (admins), or the
/// caller's project.
pub fn owner_for(
    caller: &Principal,
    public: bool,
    tenant: Option<Uuid>,
) -> Result<Option<Uuid>, ApiError> {
    match (public, tenant) {
        (true, Some(_)) => Err(ApiError::BadRequest(
            "an object is either public or a tenant's".into(),
        )),
        (true, None) => {
            caller.require_admin()?;
            Ok(None)
        }
        (false, Some(t)) if caller.project == Some(t) => Ok(Some(t)),
        (false, Some(t)) => {
            caller.require_admin()?;
            Ok(Some(t))
        }
        (false, None) => caller.project().map(Some),
    }
}

pub async fn list_images(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let scope = caller.scope()?;
    let images = state.store(move |s| Ok(s.images(scope)?)).await?;
    let images: Vec<Value> = images.iter().map(views::image).collect();
    Ok(Json(json!({"images": images})))
}

pub async fn show_image(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("image", &id)?;
    let scope = caller.scope()?;
    let image = state.store(move |s| Ok(s.image(scope, id)?)).await?;
    Ok(Json(views::image(&image)))
}

pub async fn create_image(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<CreateImage>,
) -> Result<Response, ApiError> {
    let owner = owner_for(&caller, body.public, body.tenant)?;
    if body.reference.trim().is_empty() {
        return Err(ApiError::BadRequest("an image needs a reference".into()));
    }
    let new = NewImage {
        owner,
        name: body.name,
        kind: match body.kind {
            KindName::Qcow2 => ImageKind::Qcow2,
            KindName::Raw => ImageKind::Raw,
            KindName::Iso => ImageKind::Iso,
        },
        reference: body.reference,
    };
    let image = state.store(move |s| Ok(s.create_image(new)?)).await?;
    Ok((StatusCode::CREATED, Json(views::image(&image))).into_response())
}

pub async fn delete_image(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("image", &id)?;
    let scope = caller.scope()?;
    state
        .store(move |s| {
            let image = s.image(scope, id)?;
            if !scope.owns(image.owner) {
                return Err(ApiError::Forbidden(
                    "public images are the admins' to delete".into(),
                ));
            }
            Ok(s.delete_image(scope, id)?)
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
