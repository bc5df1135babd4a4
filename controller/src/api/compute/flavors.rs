//! `GET /flavors`, `/flavors/detail`, `/flavors/{id}`: the global flavors, in Nova's shape.
//! Every flavor is public. `limit` and `marker` page through them by name.
//!
//! Admins create (`POST /flavors`, as `openstack flavor create` sends it: `name`, `ram`,
//! `vcpus`, `disk`, and Nova's optional keys) and delete (`DELETE /flavors/{id}`, 202) them.
//! What cumulo's flavors do not have is refused rather than dropped: a chosen `id` (cumulo
//! chooses a UUID; `auto` or `null` is fine), a private flavor, swap or ephemeral disks
//! (400). A flavor that a workload still uses is not deleted (409: the workload's instances
//! would not start again; Nova keeps a copy in each instance instead).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::BASE;
use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{Flavor, NewFlavor, Page, Scope};

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
    let flavors = state.store(|store| Ok(store.flavors(Scope::All)?)).await?;
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
    let flavor = state
        .store(move |store| Ok(store.flavor(Scope::All, id)?))
        .await?;
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
    state
        .store(move |store| Ok(store.flavor(Scope::All, id)?))
        .await?;
    Ok(Json(json!({"extra_specs": {}})))
}

/// A whole number of a flavor's body, as Nova takes it (a number or its digits), at least `min`.
fn whole(body: &Map<String, Value>, key: &str, min: u64) -> Result<Option<u64>, ApiError> {
    let Some(value) = body.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let n = value
        .as_u64()
        .or_else(|| value.as_str().and_then(|t| t.trim().parse().ok()))
        .ok_or_else(|| ApiError::BadRequest(format!("Invalid input for field/attribute {key}.")))?;
    if n < min {
        return Err(ApiError::BadRequest(format!(
            "Invalid input for field/attribute {key}: it must be at least {min}."
        )));
    }
    Ok(Some(n))
}

/// What a `POST /flavors` body asks for.
fn new_flavor(request: &Value) -> Result<NewFlavor, ApiError> {
    let body = request
        .get("flavor")
        .and_then(Value::as_object)
        .ok_or_else(|| ApiError::BadRequest("the body needs a flavor object".into()))?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.len() <= 255)
        .ok_or_else(|| {
            ApiError::BadRequest(
                "Invalid input for field/attribute name: 1 to 255 characters.".into(),
            )
        })?;
    let required = |key: &str, min: u64| {
        whole(body, key, min)?.ok_or_else(|| {
            ApiError::BadRequest(format!("Invalid input: '{key}' is a required property."))
        })
    };
    let memory_mb = required("ram", 1)?;
    let vcpus = u32::try_from(required("vcpus", 1)?)
        .map_err(|_| ApiError::BadRequest("Invalid input for field/attribute vcpus.".into()))?;
    let disk_gb = required("disk", 0)?;
    match body.get("id") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) if id == "auto" => {}
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "a flavor's id is chosen here (a UUID): leave out id {other}"
            )));
        }
    }
    for key in ["OS-FLV-EXT-DATA:ephemeral", "swap"] {
        if whole(body, key, 0)?.unwrap_or(0) != 0 {
            return Err(ApiError::BadRequest(format!(
                "{key}: flavors here have no ephemeral or swap disk"
            )));
        }
    }
    if body.get("os-flavor-access:is_public") == Some(&Value::Bool(false)) {
        return Err(ApiError::BadRequest(
            "private flavors (os-flavor-access) are not offered: every flavor is public".into(),
        ));
    }
    Ok(NewFlavor {
        name: name.to_string(),
        vcpus,
        memory_mb,
        disk_gb,
        is_public: true,
    })
}

/// `POST /flavors` (admins): 200 with the flavor.
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(request): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let new = new_flavor(&request)?;
    let flavor = state
        .store(move |store| {
            store.create_flavor(new).map_err(|e| match e {
                store::StoreError::Conflict(_) => {
                    ApiError::Conflict("Flavor with that name already exists.".into())
                }
                other => other.into(),
            })
        })
        .await?;
    Ok(Json(
        json!({"flavor": detailed(&state.config.public_url, &flavor)}),
    ))
}

/// `DELETE /flavors/{id}` (admins): 202; 409 while a workload uses it.
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("flavor", &id)?;
    state
        .store(move |store| {
            store.delete_flavor(id).map_err(|e| match e {
                store::StoreError::Conflict(_) => ApiError::Conflict(format!(
                    "Flavor {id} is used by a workload (a server's): it stays until no server \
                     of it is left"
                )),
                other => other.into(),
            })
        })
        .await?;
    Ok(StatusCode::ACCEPTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flavor_body_is_read_as_nova_reads_it() {
        let ok = json!({"flavor": {"name": "m1", "ram": 512, "vcpus": "2", "disk": 0,
            "id": null, "OS-FLV-EXT-DATA:ephemeral": 0, "swap": 0, "rxtx_factor": 1.0,
            "os-flavor-access:is_public": true}});
        assert_eq!(
            new_flavor(&ok).unwrap(),
            NewFlavor {
                name: "m1".into(),
                vcpus: 2,
                memory_mb: 512,
                disk_gb: 0,
                is_public: true,
            }
        );
        for bad in [
            json!({"flavor": {"ram": 512, "vcpus": 1, "disk": 1}}),
            json!({"flavor": {"name": "x", "ram": 0, "vcpus": 1, "disk": 1}}),
            json!({"flavor": {"name": "x", "ram": 512, "vcpus": 1}}),
            json!({"flavor": {"name": "x", "ram": 512, "vcpus": -1, "disk": 1}}),
            json!({"flavor": {"name": "x", "ram": "lots", "vcpus": 1, "disk": 1}}),
            json!({"flavor": {"name": "x", "ram": 512, "vcpus": 1, "disk": 1, "id": "m1.x"}}),
            json!({"flavor": {"name": "x", "ram": 512, "vcpus": 1, "disk": 1, "swap": 512}}),
            json!({"flavor": {"name": "x", "ram": 512, "vcpus": 1, "disk": 1,
                "os-flavor-access:is_public": false}}),
            json!({"name": "x"}),
        ] {
            assert!(
                matches!(new_flavor(&bad), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
