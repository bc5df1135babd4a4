//! The one domain: `GET /v3/domains` (admins; `?name=`, `?enabled=` filters) and
//! `GET /v3/domains/{id}` (`default` only, for any token; any other id is 404).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{DOMAIN_ID, DOMAIN_NAME, admin_for, list_links};
use crate::api::extract::{PathParams, QueryParams};
use crate::api::{ApiError, ApiState, Principal};

fn domain_body(base: &str) -> Value {
    json!({
        "id": DOMAIN_ID,
        "name": DOMAIN_NAME,
        "description": "The default domain",
        "enabled": true,
        "tags": [],
        "options": {},
        "links": {"self": format!("{base}/v3/domains/{DOMAIN_ID}")},
    })
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct DomainFilter {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    enabled: Option<String>,
}

/// `GET /v3/domains`: the one domain, for admins (Keystone's 403, `identity:list_domains`, for
/// others).
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(filter): QueryParams<DomainFilter>,
) -> Result<Json<Value>, ApiError> {
    admin_for(&caller, "identity:list_domains")?;
    let base = &state.config.public_url;
    let named = filter.name.as_deref().is_none_or(|n| n == DOMAIN_NAME);
    let enabled = filter
        .enabled
        .as_deref()
        .is_none_or(|e| !matches!(e.to_ascii_lowercase().as_str(), "false" | "0" | "no"));
    let domains = if named && enabled {
        vec![domain_body(base)]
    } else {
        Vec::new()
    };
    Ok(Json(
        json!({"domains": domains, "links": list_links(base, "/v3/domains")}),
    ))
}

/// `GET /v3/domains/{id}`: the one domain by its id, `default`; any other id is 404 (a client
/// then looks it up by name, which only admins may list).
pub(super) async fn show(
    State(state): State<ApiState>,
    _caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    if id != DOMAIN_ID {
        return Err(ApiError::NotFound(format!(
            "Could not find domain: {}.",
            id.chars().take(64).collect::<String>()
        )));
    }
    Ok(Json(
        json!({"domain": domain_body(&state.config.public_url)}),
    ))
}
