//! The cluster's side: nodes (admin: list, show, evacuate, restore), CNCIs (tenants see their
//! own), events (tenants see their own, after a sequence number; admins clear them) and frame
//! traces (admin).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::views;
use crate::api::extract::{PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use crate::store::Scope;

pub async fn nodes(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let nodes = state.cluster(|_, c| Ok(c.nodes())).await?;
    let nodes: Vec<Value> = nodes.iter().map(views::node).collect();
    Ok(Json(json!({"nodes": nodes})))
}

pub async fn node(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    let node = state.cluster(move |_, c| Ok(c.node(id)?)).await?;
    Ok(Json(views::node(&node)))
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
