//! `GET /flavors`, `/flavors/detail`, `/flavors/{id}`: the global flavors, in Nova's shape.
//! Every flavor is public. `limit` and `marker` page through them by name.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::BASE;
use crate::api::extract::{PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{Flavor, Page};

fn links(base: &str, id: impl std::fmt::Display) -> Value {
    json!([
        {"rel": "self", "href": format!("{base}{BASE}/flavors/{id}")},
        {"rel": "bookmark", "href": format!("{base}/compute/flavors/{id}")},
    ])
}

/// A flavor's reference inside a server body.
pub fn reference(base: &str, id: impl std::fmt::Display) -> Value {
    json!({"id": id.to_string(), "links": [
        {"rel": "bookmark", "href": format!("{base}/compute/flavors/{id}")}
    ]})
}

fn summary(base: &str, flavor: &Flavor) -> Value {
    json!({"id": flavor.id, "name": flavor.name, "links": links(base, flavor.id)})
}

fn detailed(base: &str, flavor: &Flavor) -> Value {
    json!({
        "id": flavor.id,
        "name": flavor.name,
        "ram": flavor.memory_mb,
        "vcpus": flavor.vcpus,
        "disk": flavor.disk_gb,
        "OS-FLV-EXT-DATA:ephemeral": 0,
        "OS-FLV-DISABLED:disabled": false,
        "os-flavor-access:is_public": true,
        "swap": "",
        "rxtx_factor": 1.0,
        "links": links(base, flavor.id),
    })
}

#[derive(Debug, Default, Deserialize)]
pub struct FlavorQuery {
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    marker: Option<String>,
    #[serde(default, rename = "minRam")]
    min_ram: Option<String>,
    #[serde(default, rename = "minDisk")]
    min_disk: Option<String>,
}

fn number(name: &str, text: &Option<String>) -> Result<Option<u64>, ApiError> {
    text.as_deref()
        .map(|t| {
            t.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("{name} must be a whole number")))
        })
        .transpose()
}

async fn page(state: &ApiState, query: FlavorQuery) -> Result<Vec<Flavor>, ApiError> {
    let limit = number("limit", &query.limit)?
        .unwrap_or(u64::from(Page::MAX_LIMIT))
        .min(u64::from(Page::MAX_LIMIT));
    let min_ram = number("minRam", &query.min_ram)?.unwrap_or(0);
    let min_disk = number("minDisk", &query.min_disk)?.unwrap_or(0);
    let flavors = state.store(|store| Ok(store.flavors()?)).await?;
    let start = match &query.marker {
        None => 0,
        Some(marker) => {
            let index = flavors.iter().position(|f| f.id.to_string() == *marker);
            index
                .map(|i| i + 1)
                .ok_or_else(|| ApiError::BadRequest(format!("marker [{marker}] not found")))?
        }
    };
    Ok(flavors
        .into_iter()
        .skip(start)
        .filter(|f| f.memory_mb >= min_ram && f.disk_gb >= min_disk)
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect())
}

/// `GET /flavors`.
pub async fn list(
    State(state): State<ApiState>,
    _caller: Principal,
    QueryParams(query): QueryParams<FlavorQuery>,
) -> Result<Json<Value>, ApiError> {
    let base = state.config.public_url.clone();
    let flavors = page(&state, query).await?;
    let flavors: Vec<Value> = flavors.iter().map(|f| summary(&base, f)).collect();
    Ok(Json(json!({"flavors": flavors})))
}

/// `GET /flavors/detail`.
pub async fn detail(
    State(state): State<ApiState>,
    _caller: Principal,
    QueryParams(query): QueryParams<FlavorQuery>,
) -> Result<Json<Value>, ApiError> {
    let base = state.config.public_url.clone();
    let flavors = page(&state, query).await?;
    let flavors: Vec<Value> = flavors.iter().map(|f| detailed(&base, f)).collect();
    Ok(Json(json!({"flavors": flavors})))
}

/// `GET /flavors/{id}`.
pub async fn show(
    State(state): State<ApiState>,
    _caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("flavor", &id)?;
    let flavor = state.store(move |store| Ok(store.flavor(id)?)).await?;
    Ok(Json(
        json!({"flavor": detailed(&state.config.public_url, &flavor)}),
    ))
}

/// `GET /flavors/{id}/os-extra_specs`: none.
pub async fn extra_specs(
    State(state): State<ApiState>,
    _caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("flavor", &id)?;
    state.store(move |store| Ok(store.flavor(id)?)).await?;
    Ok(Json(json!({"extra_specs": {}})))
}
