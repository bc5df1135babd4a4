//! The cluster's side: nodes (admin: list, show, evacuate, restore), CNCIs (tenants see their
//! own), events (tenants see their own, after a sequence number; admins clear them) and frame
//! traces (admin).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::views;
use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{NewRemoteHost, Scope, StoreError};

#[utoipa::path(
    get,
    path = "/cumulo/v1/nodes",
    operation_id = "list_nodes_(ssntp_nodes_and_off-host_hosts)",
    summary = "List nodes (SSNTP nodes and off-host hosts)",
    tag = "nodes",
    responses((status = 200, description = "success", body = views::Nodes)),
)]
pub async fn nodes(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Nodes>, ApiError> {
    caller.require_admin()?;
    let nodes = state.cluster(|_, c| Ok(c.nodes())).await?;
    let remote = state.store(|s| Ok(s.remote_hosts()?)).await?;
    let nodes = nodes
        .iter()
        .map(views::node)
        .chain(
            remote
                .iter()
                .map(|h| views::AnyNode::RemoteNode(views::remote_host(h))),
        )
        .collect();
    Ok(Json(views::Nodes { nodes }))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/nodes/{id}",
    operation_id = "show_a_node",
    summary = "Show a node",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::AnyNode)),
)]
pub async fn node(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::AnyNode>, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    match state.store(move |s| Ok(s.remote_host(id)?)).await {
        Ok(host) => return Ok(Json(views::AnyNode::RemoteNode(views::remote_host(&host)))),
        Err(ApiError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    let node = state.cluster(move |_, c| Ok(c.node(id)?)).await?;
    Ok(Json(views::node(&node)))
}

/// `GET /nodes/{id}/history`: what a node's STATS said over the last hour (one sample every
/// 30 s at most, oldest first; kept in memory, so empty after a restart until STATS come).
#[utoipa::path(
    get,
    path = "/cumulo/v1/nodes/{id}/history",
    operation_id = "show_a_nodes_figures_over_the_last_hour",
    summary = "Show a node's figures over the last hour",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::NodeHistory)),
)]
pub async fn history(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::NodeHistory>, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    let samples = state.cluster(move |_, c| Ok(c.node_history(id)?)).await?;
    Ok(Json(views::node_history(id, &samples)))
}

/// `POST /nodes`: registers an off-host host (its launcher runs beside the controller, in
/// `cumulo-agent --remote` replicas, and reaches it through `libvirt_uri`). On-host nodes
/// register themselves over SSNTP, so `launcher_on_host` must be `false`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RemoteNodeCreate)]
pub struct RegisterNode {
    name: String,
    #[schema(schema_with = views::always_false)]
    launcher_on_host: bool,
    libvirt_uri: String,
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/nodes",
    operation_id = "register_an_off-host_host",
    summary = "Register an off-host host",
    tag = "nodes",
    request_body = RegisterNode,
    responses((status = 201, description = "success", body = views::RemoteNode)),
)]
pub async fn register(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<RegisterNode>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    if body.launcher_on_host {
        return Err(ApiError::BadRequest(
            "nodes whose launcher runs on the host register themselves over SSNTP; \
             only launcher_on_host: false is registered here"
                .into(),
        ));
    }
    let new = NewRemoteHost {
        name: body.name,
        libvirt_uri: body.libvirt_uri,
    };
    let host = state.store(move |s| Ok(s.create_remote_host(new)?)).await?;
    Ok((StatusCode::CREATED, Json(views::remote_host(&host))).into_response())
}

/// `POST /nodes/{id}/credentials`: issues new launcher credentials for an off-host host now
/// (the key never leaves the store through the API).
#[utoipa::path(
    post,
    path = "/cumulo/v1/nodes/{id}/credentials",
    operation_id = "renew_an_off-host_hosts_launcher_credentials",
    summary = "Renew an off-host host's launcher credentials",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::LauncherCredentials)),
)]
pub async fn renew_credentials(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::LauncherCredentials>, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    let Some(issuer) = state.config.launcher_creds.clone() else {
        return Err(ApiError::Conflict(
            "this controller holds no launcher CA key (--launcher-ca-key)".into(),
        ));
    };
    let creds = state
        .store(move |s| {
            crate::creds::renew(s, &issuer, id, std::time::SystemTime::now()).map_err(|e| match e {
                crate::creds::CredsError::Store(e) => e.into(),
                other => ApiError::Internal(other.to_string()),
            })
        })
        .await?;
    Ok(Json(views::LauncherCredentials {
        node: creds.host,
        issued: crate::api::clock::rfc3339(creds.issued),
        not_after: crate::api::clock::rfc3339(creds.not_after),
    }))
}

/// `DELETE /nodes/{id}`: forgets an off-host host with no unfinished operation.
#[utoipa::path(
    delete,
    path = "/cumulo/v1/nodes/{id}",
    operation_id = "forget_an_off-host_host",
    summary = "Forget an off-host host",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 204, description = "success (no body)")),
)]
pub async fn unregister(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    state
        .store(move |s| match s.delete_remote_host(id) {
            Err(StoreError::NotFound { .. }) => Err(StoreError::not_found("node", id).into()),
            other => Ok(other?),
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/nodes/{id}/evacuate",
    operation_id = "evacuate_a_node",
    summary = "Evacuate a node",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 202, description = "success (no body)")),
)]
pub async fn evacuate(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    state.cluster(move |_, c| Ok(c.evacuate(id)?)).await?;
    Ok(StatusCode::ACCEPTED)
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/nodes/{id}/restore",
    operation_id = "restore_a_node",
    summary = "Restore a node",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 202, description = "success (no body)")),
)]
pub async fn restore(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    state.cluster(move |_, c| Ok(c.restore(id)?)).await?;
    Ok(StatusCode::ACCEPTED)
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/cncis",
    operation_id = "list_cncis",
    summary = "List CNCIs",
    tag = "cncis",
    responses((status = 200, description = "success", body = views::Cncis)),
)]
pub async fn cncis(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Cncis>, ApiError> {
    let scope = caller.scope()?;
    let cncis = state.store(move |s| Ok(s.cncis(scope)?)).await?;
    Ok(Json(views::Cncis {
        cncis: cncis.iter().map(views::cnci).collect(),
    }))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/cncis/{id}",
    operation_id = "show_a_cnci",
    summary = "Show a CNCI",
    tag = "cncis",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::Cnci)),
)]
pub async fn cnci(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::Cnci>, ApiError> {
    let id = path_id("cnci", &id)?;
    let scope = caller.scope()?;
    let cnci = state.store(move |s| Ok(s.cnci(scope, id)?)).await?;
    Ok(Json(views::cnci(&cnci)))
}

/// The query of `GET /events`: at most `limit` (100 unless told) events whose sequence number
/// is over `after`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    #[serde(default)]
    #[param(nullable = false, minimum = 0, maximum = 9_223_372_036_854_775_807_u64)]
    after: Option<u64>,
    #[serde(default)]
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// The newest `last` events (oldest first) instead of a page after `after`.
    #[serde(default)]
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    last: Option<u32>,
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/events",
    operation_id = "list_events",
    summary = "List events",
    tag = "events",
    params(EventQuery),
    responses((status = 200, description = "success", body = views::Events)),
)]
pub async fn events(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<EventQuery>,
) -> Result<Json<views::Events>, ApiError> {
    let scope = caller.scope()?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest("limit must be from 1 to 1000".into()));
    }
    let events = match query.last {
        Some(last) => {
            if !(1..=1000).contains(&last) || query.after.is_some() || query.limit.is_some() {
                return Err(ApiError::BadRequest(
                    "last must be from 1 to 1000, and without after or limit".into(),
                ));
            }
            state
                .store(move |s| Ok(s.recent_events(scope, last)?))
                .await?
        }
        None => {
            state
                .store(move |s| Ok(s.events(scope, query.after, limit)?))
                .await?
        }
    };
    Ok(Json(views::Events {
        events: events.iter().map(views::event).collect(),
    }))
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/events",
    operation_id = "clear_events",
    summary = "Clear events",
    tag = "events",
    responses((status = 200, description = "success", body = views::Cleared)),
)]
pub async fn clear_events(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Cleared>, ApiError> {
    caller.require_admin()?;
    let deleted = state.store(|s| Ok(s.clear_events(Scope::All)?)).await?;
    Ok(Json(views::Cleared { deleted }))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/traces",
    operation_id = "list_traces",
    summary = "List traces",
    tag = "traces",
    responses((status = 200, description = "success", body = views::Traces)),
)]
pub async fn traces(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::Traces>, ApiError> {
    caller.require_admin()?;
    let traces = state.cluster(|_, c| Ok(c.traces())).await?;
    Ok(Json(views::Traces {
        traces: traces.iter().map(views::trace).collect(),
    }))
}
