//! Flavors (everyone reads those they see: admins all, members the public ones and the private
//! ones their project has access to, as on the Compute API; admins create public ones and
//! delete) and images (public ones and the tenant's
//! own; members register private images of their tenant, admins public ones or any tenant's).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::views::{self, KindName};
use crate::api::compute::flavor_scope;
use crate::api::extract::{JsonBody, PathParams, path_id, present};
use crate::api::{ApiError, ApiState, Principal};
use store::{ImageKind, NewFlavor, NewImage};

/// A new flavor (`disk_gb`: 0 unless told).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = FlavorCreate)]
pub struct CreateFlavor {
    #[schema(min_length = 1, max_length = 255, pattern = r"\S")]
    name: String,
    #[schema(minimum = 1, maximum = 4_294_967_295_u64)]
    vcpus: u32,
    #[schema(minimum = 1, maximum = 9_223_372_036_854_775_807_u64)]
    memory_mb: u64,
    #[serde(default)]
    #[schema(maximum = 9_223_372_036_854_775_807_u64)]
    disk_gb: u64,
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/flavors",
    operation_id = "list_flavors",
    summary = "List flavors",
    tag = "flavors",
    responses((status = 200, description = "success", body = views::Flavors)),
)]
pub async fn list_flavors(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Flavors>, ApiError> {
    let seen = flavor_scope(&caller)?;
    let flavors = state.store(move |s| Ok(s.flavors(seen)?)).await?;
    Ok(Json(views::Flavors {
        flavors: flavors.iter().map(views::flavor).collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/flavors/{id}",
    operation_id = "show_a_flavor",
    summary = "Show a flavor",
    tag = "flavors",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::Flavor)),
)]
pub async fn show_flavor(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::Flavor>, ApiError> {
    let id = path_id("flavor", &id)?;
    let seen = flavor_scope(&caller)?;
    let flavor = state.store(move |s| Ok(s.flavor(seen, id)?)).await?;
    Ok(Json(views::flavor(&flavor)))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/flavors",
    operation_id = "create_a_flavor",
    summary = "Create a flavor",
    tag = "flavors",
    request_body = CreateFlavor,
    responses((status = 201, description = "success", body = views::Flavor)),
)]
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
        is_public: true,
    };
    let flavor = state.store(move |s| Ok(s.create_flavor(new)?)).await?;
    Ok((StatusCode::CREATED, Json(views::flavor(&flavor))).into_response())
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/flavors/{id}",
    operation_id = "delete_a_flavor",
    summary = "Delete a flavor",
    tag = "flavors",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 204, description = "success (no body)")),
)]
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

/// A new image registered by its reference on the nodes (admins only): public, a named
/// tenant's, or the admin's project's; never both public and a tenant's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ImageCreate)]
pub struct CreateImage {
    #[schema(min_length = 1, max_length = 255, pattern = r"\S")]
    name: String,
    kind: KindName,
    #[schema(min_length = 1, pattern = r"\S")]
    reference: String,
    #[serde(default)]
    public: bool,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
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

#[utoipa::path(
    get,
    path = "/cumulo/v1/images",
    operation_id = "list_images",
    summary = "List images",
    tag = "images",
    responses((status = 200, description = "success", body = views::Images)),
)]
pub async fn list_images(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Images>, ApiError> {
    let scope = caller.scope()?;
    // As Glance lists by default: a tenant's own, public, and shared images it accepted (not
    // others' community images, nor shared images it has not accepted, which it may still show
    // and boot by id).
    let images = state
        .store(move |s| crate::api::image::listed_by_default(s, scope))
        .await?;
    Ok(Json(views::Images {
        images: images.iter().map(views::image).collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/images/{id}",
    operation_id = "show_an_image",
    summary = "Show an image",
    tag = "images",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::Image)),
)]
pub async fn show_image(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::Image>, ApiError> {
    let id = path_id("image", &id)?;
    let scope = caller.scope()?;
    let image = state.store(move |s| Ok(s.image(scope, id)?)).await?;
    Ok(Json(views::image(&image)))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/images",
    operation_id = "register_an_image",
    summary = "Register an image",
    tag = "images",
    request_body = CreateImage,
    responses((status = 201, description = "success", body = views::Image)),
)]
pub async fn create_image(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<CreateImage>,
) -> Result<Response, ApiError> {
    // A reference names a file on the nodes, which any instance could be booted from: only an
    // admin registers one (for the public or for a tenant). Tenants upload through the Image
    // API, where images are addressed by the hash of what was uploaded.
    caller.require_admin()?;
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
            KindName::Kernel => ImageKind::Kernel,
            KindName::Ramdisk => ImageKind::Ramdisk,
            KindName::Container => ImageKind::Container,
        },
        reference: body.reference,
    };
    let image = state.store(move |s| Ok(s.create_image(new)?)).await?;
    Ok((StatusCode::CREATED, Json(views::image(&image))).into_response())
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/images/{id}",
    operation_id = "delete_an_image",
    summary = "Delete an image",
    tag = "images",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 204, description = "success (no body)")),
)]
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
