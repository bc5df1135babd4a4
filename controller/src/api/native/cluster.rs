//! The cluster's side: nodes (admin: list, show, evacuate, restore), CNCIs (tenants see their
//! own), events (tenants see their own, after a sequence number; admins clear them) and frame
//! traces (admin).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::views;
use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{NewRemoteHost, Scope, StoreError};

pub async fn nodes(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let nodes = state.cluster(|_, c| Ok(c.nodes())).await?;
    let remote = state.store(|s| Ok(s.remote_hosts()?)).await?;
    let nodes: Vec<Value> = nodes
        .iter()
        .map(views::node)
        .chain(remote.iter().map(views::remote_host))
        .collect();
    Ok(Json(json!({"nodes": nodes})))
}

pub async fn node(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    match state.store(move |s| Ok(s.remote_host(id)?)).await {
        Ok(host) => return Ok(Json(views::remote_host(&host))),
        Err(ApiError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    let node = state.cluster(move |_, c| Ok(c.node(id)?)).await?;
    Ok(Json(views::node(&node)))
}

/// `POST /nodes`: registers an off-host host (its launcher runs beside the controller, in
/// `cumulo-agent --remote` replicas, and reaches it through `libvirt_uri`). On-host nodes
/// register themselves over SSNTP, so `launcher_on_host` must be `false`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterNode {
    name: String,
    launcher_on_host: bool,
    libvirt_uri: String,
}

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
pub async fn renew_credentials(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({
        "node": creds.host,
        "issued": crate::api::clock::rfc3339(creds.issued),
        "not_after": crate::api::clock::rfc3339(creds.not_after),
    })))
}

/// `DELETE /nodes/{id}`: forgets an off-host host with no unfinished operation.
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

pub async fn cncis(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let scope = caller.scope()?;
    let cncis = state.store(move |s| Ok(s.cncis(scope)?)).await?;
    let cncis: Vec<Value> = cncis.iter().map(views::cnci).collect();
    Ok(Json(json!({"cncis": cncis})))
}

pub async fn cnci(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("cnci", &id)?;
    let scope = caller.scope()?;
    let cnci = state.store(move |s| Ok(s.cnci(scope, id)?)).await?;
    Ok(Json(views::cnci(&cnci)))
}

#[derive(Debug, Default, Deserialize)]
pub struct EventQuery {
    #[serde(default)]
    after: Option<u64>,
    #[serde(default)]
    limit: Option<u32>,
}

pub async fn events(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<EventQuery>,
) -> Result<Json<Value>, ApiError> {
    let scope = caller.scope()?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest("limit must be from 1 to 1000".into()));
    }
    let events = state
        .store(move |s| Ok(s.events(scope, query.after, limit)?))
        .await?;
    let events: Vec<Value> = events.iter().map(views::event).collect();
    Ok(Json(json!({"events": events})))
}

pub async fn clear_events(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let deleted = state.store(|s| Ok(s.clear_events(Scope::All)?)).await?;
    Ok(Json(json!({"deleted": deleted})))
}

pub async fn traces(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let traces = state.cluster(|_, c| Ok(c.traces())).await?;
    let traces: Vec<Value> = traces.iter().map(views::trace).collect();
    Ok(Json(json!({"traces": traces})))
}
