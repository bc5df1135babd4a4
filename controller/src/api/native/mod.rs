//! cumulo's native API under `/cumulo/v1` (JSON; errors as `{"error": {...}}`): tenants and
//! quotas, users and roles, flavors, images, workloads, instances and their actions, nodes,
//! CNCIs, events, traces, and an unauthenticated health check. The OpenAPI document (`/openapi.json`) describes
//! every route.
//!
//! Authentication: the same bearer token as the OpenStack routes, or the admin client
//! certificate. Admins see every tenant's objects; members their project's (another tenant's
//! objects are 404). Request bodies must be JSON objects and deny unknown fields and `null`s
//! for optional fields (400). An id in a path that is not a UUID names no object (404), and so
//! does an id in a body that names no object the caller may see (404).

mod catalog;
mod cluster;
mod instances;
mod joins;
pub(crate) mod openapi;
mod tenants;
mod users;
pub(crate) mod views;
mod workloads;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::{delete, get, post};

use super::ApiState;
use super::error::ApiError;

/// The base path.
pub const BASE: &str = "/cumulo/v1";

/// The native routes.
pub fn routes() -> Router<ApiState> {
    let api = Router::new()
        .route("/healthz", get(healthz))
        .route("/tenants", get(tenants::list).post(tenants::create))
        .route(
            "/tenants/{id}",
            get(tenants::show)
                .patch(tenants::update)
                .delete(tenants::delete),
        )
        .route(
            "/tenants/{id}/quota",
            get(tenants::quota).put(tenants::set_quota),
        )
        .route("/users", get(users::list).post(users::create))
        .route(
            "/users/{id}",
            get(users::show).patch(users::update).delete(users::delete),
        )
        .route("/users/{id}/roles", get(users::roles).post(users::grant))
        .route("/users/{id}/roles/{tenant}/{role}", delete(users::revoke))
        .route(
            "/flavors",
            get(catalog::list_flavors).post(catalog::create_flavor),
        )
        .route(
            "/flavors/{id}",
            get(catalog::show_flavor).delete(catalog::delete_flavor),
        )
        .route(
            "/images",
            get(catalog::list_images).post(catalog::create_image),
        )
        .route(
            "/images/{id}",
            get(catalog::show_image).delete(catalog::delete_image),
        )
        .route("/workloads", get(workloads::list).post(workloads::create))
        .route(
            "/workloads/{id}",
            get(workloads::show)
                .patch(workloads::update)
                .delete(workloads::delete),
        )
        .route("/instances", get(instances::list).post(instances::create))
        .route(
            "/instances/{id}",
            get(instances::show).delete(instances::delete),
        )
        .route("/instance-counts", get(instances::counts))
        .route("/instances/{id}/stop", post(instances::stop))
        .route("/instances/{id}/start", post(instances::start))
        .route("/instances/{id}/restart", post(instances::restart))
        .route("/instances/{id}/reboot-hard", post(instances::reboot_hard))
        .route("/instances/{id}/pause", post(instances::pause))
        .route("/instances/{id}/unpause", post(instances::unpause))
        .route("/instances/{id}/suspend", post(instances::suspend))
        .route("/instances/{id}/resume", post(instances::resume))
        .route("/instances/{id}/rebuild", post(instances::rebuild))
        .route("/instances/{id}/resize", post(instances::resize))
        .route(
            "/instances/{id}/confirm-resize",
            post(instances::confirm_resize),
        )
        .route(
            "/instances/{id}/revert-resize",
            post(instances::revert_resize),
        )
        .route("/instances/{id}/actions", get(instances::actions))
        .route("/instances/{id}/console", get(instances::console))
        .route("/nodes", get(cluster::nodes).post(cluster::register))
        .route(
            "/nodes/{id}",
            get(cluster::node).delete(cluster::unregister),
        )
        .route("/nodes/{id}/credentials", post(cluster::renew_credentials))
        .route("/nodes/{id}/revoke", post(joins::revoke))
        .route("/join-tokens", get(joins::tokens).post(joins::create_token))
        .route("/join-tokens/{id}", delete(joins::delete_token))
        .route("/join", post(joins::join))
        .route("/join/ca", get(joins::ca))
        .route("/joined-nodes", get(joins::joined_nodes))
        .route("/nodes/{id}/history", get(cluster::history))
        .route("/nodes/{id}/evacuate", post(cluster::evacuate))
        .route("/nodes/{id}/restore", post(cluster::restore))
        .route("/cncis", get(cluster::cncis))
        .route("/cncis/{id}", get(cluster::cnci))
        .route(
            "/events",
            get(cluster::events).delete(cluster::clear_events),
        )
        .route("/traces", get(cluster::traces));
    Router::new().nest(BASE, api)
}

/// `GET /cumulo/v1/healthz`: whether the store answers and the scheduler is connected; 503 once
/// the controller has stopped for good (its SSNTP client gave up), while it exits.
#[utoipa::path(
    get,
    path = "/cumulo/v1/healthz",
    operation_id = "health",
    summary = "Health",
    tag = "health",
    responses((status = 200, description = "success", body = views::Health)),
    security(()),
)]
async fn healthz(State(state): State<ApiState>) -> Result<Json<views::Health>, ApiError> {
    if let Some(why) = state.cluster.gone_for_good() {
        return Err(ApiError::Unavailable(format!(
            "the controller is stopping: {why}"
        )));
    }
    let scheduler = state.cluster.connected();
    let store = state
        .store(|s| Ok(s.flavors(store::Scope::All).is_ok()))
        .await
        .unwrap_or(false);
    Ok(Json(views::Health {
        status: match store {
            true => views::HealthStatus::Ok,
            false => views::HealthStatus::Degraded,
        },
        store,
        scheduler,
    }))
}
