//! Tenants (admin: create, list, rename, delete; a member may read its own) and their quotas
//! (`GET` limits and usage; admin `PUT`). A tenant created without limits gets the controller's
//! default quota ([`ApiConfig::default_quota`](crate::api::ApiConfig::default_quota)); only an
//! explicit `null` makes a limit unlimited.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;
use uuid::Uuid;

use super::views;
use crate::api::extract::{JsonBody, PathParams, nullable, path_id, present, present_object};
use crate::api::{ApiError, ApiState, Principal};
use store::{NewTenant, Quota, TenantChange};

/// Limits in a request: a number sets a limit, `null` makes it unlimited, and a field left out
/// keeps what the tenant has (on creation: the controller's `--default-quota`).
#[derive(Debug, Default, Clone, Copy, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u32>, maximum = 4_294_967_295_u64)]
    instances: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u32>, maximum = 4_294_967_295_u64)]
    vcpus: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    #[schema(value_type = Option<u64>, maximum = 9_223_372_036_854_775_807_u64)]
    memory_mb: Option<Option<u64>>,
}

impl QuotaBody {
    /// `base` with the limits this body sets.
    fn over(self, base: Quota) -> Quota {
        Quota {
            instances: self.instances.unwrap_or(base.instances),
            vcpus: self.vcpus.unwrap_or(base.vcpus),
            memory_mb: self.memory_mb.unwrap_or(base.memory_mb),
        }
    }
}

/// A new tenant (`subnet_prefix`: the size of its subnets, 24 unless told).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TenantCreate)]
pub struct CreateTenant {
    #[schema(min_length = 1, max_length = 255, pattern = r"\S")]
    name: String,
    #[serde(default, deserialize_with = "present_object")]
    #[schema(nullable = false)]
    quota: Option<QuotaBody>,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false, minimum = 16, maximum = 30)]
    subnet_prefix: Option<u8>,
}

/// A tenant's new name or limits.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TenantUpdate)]
pub struct UpdateTenant {
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false, min_length = 1, max_length = 255, pattern = r"\S")]
    name: Option<String>,
    #[serde(default, deserialize_with = "present_object")]
    #[schema(nullable = false)]
    quota: Option<QuotaBody>,
}

/// Refuses a member asking about another tenant (as not found).
fn own_or_admin(caller: &Principal, tenant: Uuid) -> Result<(), ApiError> {
    if caller.is_admin() || caller.project == Some(tenant) {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!("tenant {tenant} not found")))
    }
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/tenants",
    operation_id = "list_tenants",
    summary = "List tenants",
    tag = "tenants",
    responses((status = 200, description = "success", body = views::Tenants)),
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Tenants>, ApiError> {
    let tenants = match caller.is_admin() {
        true => state.store(|s| Ok(s.tenants()?)).await?,
        false => {
            let own = caller.project()?;
            vec![state.store(move |s| Ok(s.tenant(own)?)).await?]
        }
    };
    Ok(Json(views::Tenants {
        tenants: tenants.iter().map(views::tenant).collect(),
    }))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/tenants",
    operation_id = "create_a_tenant",
    summary = "Create a tenant",
    tag = "tenants",
    request_body = CreateTenant,
    responses((status = 201, description = "success", body = views::Tenant)),
)]
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<CreateTenant>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let prefix = body.subnet_prefix.unwrap_or(24);
    if !(store::net::MIN_SUBNET_PREFIX..=store::net::MAX_SUBNET_PREFIX).contains(&prefix) {
        return Err(ApiError::BadRequest(format!(
            "subnet_prefix must be from {} to {}",
            store::net::MIN_SUBNET_PREFIX,
            store::net::MAX_SUBNET_PREFIX
        )));
    }
    let new = NewTenant {
        name: body.name,
        quota: body
            .quota
            .unwrap_or_default()
            .over(state.config.default_quota),
        subnet_prefix: prefix,
    };
    let tenant = state.store(move |s| Ok(s.create_tenant(new)?)).await?;
    Ok((StatusCode::CREATED, Json(views::tenant(&tenant))).into_response())
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/tenants/{id}",
    operation_id = "show_a_tenant",
    summary = "Show a tenant",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::Tenant)),
)]
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::Tenant>, ApiError> {
    let id = path_id("tenant", &id)?;
    own_or_admin(&caller, id)?;
    let tenant = state.store(move |s| Ok(s.tenant(id)?)).await?;
    Ok(Json(views::tenant(&tenant)))
}

#[utoipa::path(
    patch,
    path = "/cumulo/v1/tenants/{id}",
    operation_id = "update_a_tenant",
    summary = "Update a tenant",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "the object's id")),
    request_body = UpdateTenant,
    responses((status = 200, description = "success", body = views::Tenant)),
)]
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<UpdateTenant>,
) -> Result<Json<views::Tenant>, ApiError> {
    let id = path_id("tenant", &id)?;
    caller.require_admin()?;
    let tenant = state
        .store(move |s| {
            let current = s.tenant(id)?;
            let change = TenantChange {
                name: body.name,
                quota: body.quota.map(|q| q.over(current.quota)),
                ..TenantChange::default()
            };
            Ok(s.update_tenant(id, current.version, change)?)
        })
        .await?;
    Ok(Json(views::tenant(&tenant)))
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/tenants/{id}",
    operation_id = "delete_a_tenant",
    summary = "Delete a tenant",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 204, description = "success (no body)")),
)]
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("tenant", &id)?;
    caller.require_admin()?;
    if caller.project == Some(id) {
        return Err(ApiError::Conflict(
            "the project of the token in use cannot be deleted".into(),
        ));
    }
    state.store(move |s| Ok(s.delete_tenant(id)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/tenants/{id}/quota",
    operation_id = "show_a_quota",
    summary = "Show a quota",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::QuotaUsage)),
)]
pub async fn quota(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::QuotaUsage>, ApiError> {
    let id = path_id("tenant", &id)?;
    own_or_admin(&caller, id)?;
    let (tenant, usage) = state
        .store(move |s| Ok((s.tenant(id)?, s.usage(id)?)))
        .await?;
    Ok(Json(views::quota_usage(&tenant, &usage)))
}

#[utoipa::path(
    put,
    path = "/cumulo/v1/tenants/{id}/quota",
    operation_id = "set_a_quota",
    summary = "Set a quota",
    tag = "tenants",
    params(("id" = Uuid, Path, description = "the object's id")),
    request_body = QuotaBody,
    responses((status = 200, description = "success", body = views::QuotaUsage)),
)]
pub async fn set_quota(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<QuotaBody>,
) -> Result<Json<views::QuotaUsage>, ApiError> {
    let id = path_id("tenant", &id)?;
    caller.require_admin()?;
    let (tenant, usage) = state
        .store(move |s| {
            let current = s.tenant(id)?;
            let change = TenantChange {
                quota: Some(body.over(current.quota)),
                ..TenantChange::default()
            };
            let tenant = s.update_tenant(id, current.version, change)?;
            Ok((tenant, s.usage(id)?))
        })
        .await?;
    Ok(Json(views::quota_usage(&tenant, &usage)))
}
