//! `os-quota-sets`: a project's `volumes` and `gigabytes` limits, with their use
//! (`?usage=true`). The limits are the controller's for every tenant (`ApiConfig::volume_limits`;
//! the tenant model has no place for per-tenant volume quotas yet), so there is no `PUT`. A
//! member reads its own project's (another's is a 403); an admin reads any.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{VolError, VolResult, blocking, url_project};
use crate::api::extract::{PathParams, QueryParams};
use crate::api::{ApiState, Principal};
use store::VolumeLimits;

/// A limit as Cinder writes it (-1: unlimited).
fn limit<T: Into<i64>>(value: Option<T>) -> i64 {
    value.map_or(-1, Into::into)
}

/// The figures, as `(name, limit)`.
fn figures(limits: &VolumeLimits) -> [(&'static str, i64); 2] {
    [
        ("volumes", limit(limits.volumes)),
        (
            "gigabytes",
            limits
                .gigabytes
                .map_or(-1, |g| i64::try_from(g).unwrap_or(i64::MAX)),
        ),
    ]
}

/// The target project a caller may read the quotas of.
fn readable(caller: &Principal, project: Uuid, target: &str) -> VolResult<Uuid> {
    let id = Uuid::parse_str(target).map_err(|_| {
        VolError::new(
            StatusCode::NOT_FOUND,
            format!("Project {target} could not be found."),
        )
    })?;
    if caller.is_admin() || project == id {
        Ok(id)
    } else {
        Err(VolError::new(
            StatusCode::FORBIDDEN,
            "a project's quotas are its members' and admins'",
        ))
    }
}

/// `GET /os-quota-sets/{target}[?usage=true]`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, target)): PathParams<(String, String)>,
    QueryParams(query): QueryParams<HashMap<String, String>>,
) -> VolResult<Json<Value>> {
    let project = url_project(&caller, &project)?;
    let target = readable(&caller, project, &target)?;
    let usage = query
        .get("usage")
        .is_some_and(|u| matches!(u.to_ascii_lowercase().as_str(), "true" | "1" | "yes"));
    let (count, gigabytes) =
        blocking(&state, move |store| Ok(store.tenant_volume_usage(target)?)).await?;
    let mut body = Map::new();
    body.insert("id".into(), json!(target));
    for (name, value) in figures(&state.config.volume_limits) {
        let used = if name == "volumes" {
            u64::from(count)
        } else {
            gigabytes
        };
        let figure = if usage {
            json!({"limit": value, "in_use": used, "reserved": 0, "allocated": 0})
        } else {
            json!(value)
        };
        body.insert(name.into(), figure);
    }
    Ok(Json(json!({"quota_set": body})))
}

/// `GET /os-quota-sets/{target}/defaults`.
pub async fn defaults(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, target)): PathParams<(String, String)>,
) -> VolResult<Json<Value>> {
    let project = url_project(&caller, &project)?;
    let target = readable(&caller, project, &target)?;
    let mut body = Map::new();
    body.insert("id".into(), json!(target));
    for (name, value) in figures(&state.config.volume_limits) {
        body.insert(name.into(), json!(value));
    }
    Ok(Json(json!({"quota_set": body})))
}
