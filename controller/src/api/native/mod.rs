//! cumulo's native API under `/cumulo/v1` (JSON; errors as `{"error": {...}}`): tenants, users
//! and roles, flavors, images, workloads, instances, quotas, nodes, CNCIs, events, traces, and
//! an unauthenticated health check.
//!
//! Authentication: the same bearer token as the OpenStack routes, or the admin client
//! certificate. Admins see every tenant's objects; members their project's. Request bodies deny
//! unknown fields. An id in a path that is not a UUID names no object: 404.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde_json::{Value, json};

use super::ApiState;

/// The native routes.
pub fn routes() -> Router<ApiState> {
    Router::new().route("/cumulo/v1/healthz", get(healthz))
}

/// `GET /cumulo/v1/healthz`: the store answers; whether the scheduler is connected.
async fn healthz(State(state): State<ApiState>) -> Json<Value> {
    let connected = state.cluster.connected();
    let store_ok = state
        .store(|store| Ok(store.flavors().is_ok()))
        .await
        .unwrap_or(false);
    Json(
        json!({"status": if store_ok { "ok" } else { "degraded" }, "store": store_ok, "scheduler": connected}),
    )
}
