//! `GET /flavors`, `/flavors/detail`, `/flavors/{id}`: the global flavors, in Nova's shape.
//! `limit` and `marker` page through them by name.
//!
//! Who sees a flavor ([`seen_by`]): an admin every one; anyone else the public flavors and the
//! private ones (`os-flavor-access:is_public` false) whose access list has their project. A
//! flavor not seen is `404` ("Flavor X could not be found."), here and in every other read of a
//! flavor on a caller's behalf. The lists are Nova's: a member's holds what it sees (`is_public`
//! is ignored); an admin's holds, by `is_public`, the public flavors and the private ones its
//! project has access to (absent or true), only the private ones (false), or all (`none`).
//!
//! Admins create (`POST /flavors`, as `openstack flavor create` sends it: `name`, `ram`,
//! `vcpus`, `disk`, and Nova's optional keys, `os-flavor-access:is_public` among them) and
//! delete (`DELETE /flavors/{id}`, 202) them. What cumulo's flavors do not have is refused
//! rather than dropped: a chosen `id` (cumulo chooses a UUID; `auto` or `null` is fine), swap or
//! ephemeral disks (400). A flavor that a workload still uses is not deleted (409: the
//! workload's instances would not start again; Nova keeps a copy in each instance instead).
//! Extra specs: [`super::flavor_specs`]; access lists: [`super::flavor_access`].

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::BASE;
use crate::api::extract::{JsonBody, PathParams, QueryParams};
use crate::api::{ApiError, ApiState, Principal};
use store::{Flavor, NewFlavor, Page, Scope, StoreError};
use uuid::Uuid;

/// The scope in which `caller` sees flavors: [`Scope::All`] for an admin, else its project's
/// (the store then shows public flavors and the private ones with the project on their access
/// list). The one rule for every read of a flavor on a caller's behalf: the Compute flavor
/// routes, server create and resize, and the native API's flavors, workloads, instance launch
/// and resize.
pub(crate) fn seen_by(caller: &Principal) -> Result<Scope, ApiError> {
    caller.scope()
}

/// Nova's 404 for a flavor not seen.
pub(super) fn not_found(id: impl std::fmt::Display) -> ApiError {
    ApiError::NotFound(format!("Flavor {id} could not be found."))
}

/// A flavor id of a path (a 404 as Nova's for text that is not one).
pub(super) fn flavor_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| not_found(text))
}

/// A store error with a flavor's `NotFound` as Nova's 404.
pub(super) fn store_error(id: Uuid) -> impl Fn(StoreError) -> ApiError {
    move |e| match e {
        StoreError::NotFound { kind: "flavor", .. } => not_found(id),
        other => other.into(),
    }
}

/// Flavor `id` as `scope` sees it.
pub(super) async fn lookup(state: &ApiState, scope: Scope, id: Uuid) -> Result<Flavor, ApiError> {
    state
        .store(move |store| store.flavor(scope, id).map_err(store_error(id)))
        .await
}

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
        "os-flavor-access:is_public": flavor.is_public,
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
    #[serde(default)]
    is_public: Option<String>,
}

/// A boolean as Nova reads one (oslo's strict reading of text; case is ignored).
pub(super) fn boolean(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
        "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
        _ => None,
    }
}

/// Which flavors a listing for `caller` holds: those seen in a scope, with only the public
/// (`Some(true)`) or only the private (`Some(false)`) of them. A member's: what it sees, whatever
/// `is_public` says. An admin's, by `is_public`: absent or true, the public flavors and the
/// private ones its project has access to (public only without a project); `none`, every
/// flavor; false, the private ones; anything else a 400.
fn listing(caller: &Principal, is_public: Option<&str>) -> Result<(Scope, Option<bool>), ApiError> {
    if !caller.is_admin() {
        return Ok((seen_by(caller)?, None));
    }
    let own = match caller.project {
        Some(project) => (Scope::Tenant(project), None),
        None => (Scope::All, Some(true)),
    };
    match is_public {
        None => Ok(own),
        Some(text) if text.trim().eq_ignore_ascii_case("none") => Ok((Scope::All, None)),
        Some(text) => match boolean(text) {
            Some(true) => Ok(own),
            Some(false) => Ok((Scope::All, Some(false))),
            None => Err(ApiError::BadRequest(format!(
                "Invalid is_public filter [{text}]"
            ))),
        },
    }
}

fn number(name: &str, text: &Option<String>) -> Result<Option<u64>, ApiError> {
    text.as_deref()
        .map(|t| {
            t.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("{name} must be a whole number")))
        })
        .transpose()
}

async fn page(
    state: &ApiState,
    caller: &Principal,
    query: FlavorQuery,
) -> Result<Vec<Flavor>, ApiError> {
    let (scope, public) = listing(caller, query.is_public.as_deref())?;
    let limit = number("limit", &query.limit)?
        .unwrap_or(u64::from(Page::MAX_LIMIT))
        .min(u64::from(Page::MAX_LIMIT));
    let min_ram = number("minRam", &query.min_ram)?.unwrap_or(0);
    let min_disk = number("minDisk", &query.min_disk)?.unwrap_or(0);
    let flavors: Vec<Flavor> = state
        .store(move |store| Ok(store.flavors(scope)?))
        .await?
        .into_iter()
        .filter(|f| public.is_none_or(|p| f.is_public == p))
        .collect();
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
    caller: Principal,
    QueryParams(query): QueryParams<FlavorQuery>,
) -> Result<Json<Value>, ApiError> {
    let base = state.config.public_url.clone();
    let flavors = page(&state, &caller, query).await?;
    let flavors: Vec<Value> = flavors.iter().map(|f| summary(&base, f)).collect();
    Ok(Json(json!({"flavors": flavors})))
}

/// `GET /flavors/detail`.
pub async fn detail(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<FlavorQuery>,
) -> Result<Json<Value>, ApiError> {
    let base = state.config.public_url.clone();
    let flavors = page(&state, &caller, query).await?;
    let flavors: Vec<Value> = flavors.iter().map(|f| detailed(&base, f)).collect();
    Ok(Json(json!({"flavors": flavors})))
}

/// `GET /flavors/{id}`: 404 for a flavor the caller does not see.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = flavor_id(&id)?;
    let flavor = lookup(&state, seen_by(&caller)?, id).await?;
    Ok(Json(
        json!({"flavor": detailed(&state.config.public_url, &flavor)}),
    ))
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
    let is_public = match body.get("os-flavor-access:is_public") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => other.as_str().and_then(boolean).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "Invalid input for field/attribute os-flavor-access:is_public. Value: {other}. \
                 It is not a boolean."
            ))
        })?,
    };
    Ok(NewFlavor {
        name: name.to_string(),
        vcpus,
        memory_mb,
        disk_gb,
        is_public,
    })
}

/// `POST /flavors` (admins): 200 with the flavor (a private one with an empty access list: its
/// creator's project is not put on it, as Nova does not).
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
                StoreError::Conflict(_) => {
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

/// `DELETE /flavors/{id}` (admins): 202, its extra specs and access list going with it; 409
/// while a workload uses it.
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = flavor_id(&id)?;
    state
        .store(move |store| {
            store.delete_flavor(id).map_err(|e| match e {
                StoreError::Conflict(_) => ApiError::Conflict(format!(
                    "Flavor {id} is used by a workload (a server's): it stays until no server \
                     of it is left"
                )),
                other => store_error(id)(other),
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
                "os-flavor-access:is_public": "maybe"}}),
            json!({"flavor": {"name": "x", "ram": 512, "vcpus": 1, "disk": 1,
                "os-flavor-access:is_public": null}}),
            json!({"name": "x"}),
        ] {
            assert!(
                matches!(new_flavor(&bad), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn private_flavors_are_asked_for_as_nova_takes_booleans() {
        for (value, public) in [
            (json!(false), false),
            (json!("False"), false),
            (json!("no"), false),
            (json!(true), true),
            (json!("1"), true),
        ] {
            let body = json!({"flavor": {"name": "p", "ram": 64, "vcpus": 1, "disk": 0,
                "os-flavor-access:is_public": value}});
            assert_eq!(new_flavor(&body).unwrap().is_public, public, "{value}");
        }
        let plain = json!({"flavor": {"name": "p", "ram": 64, "vcpus": 1, "disk": 0}});
        assert!(new_flavor(&plain).unwrap().is_public);
    }

    #[test]
    fn the_listing_follows_is_public_for_admins_only() {
        let project = Uuid::new_v4();
        let caller = |admin: bool, project: Option<Uuid>| Principal {
            user: None,
            project,
            roles: if admin {
                vec![store::Role::Admin]
            } else {
                vec![store::Role::Member]
            },
            claims: None,
            app_credential: None,
            request: None,
            trace: None,
        };
        let member = caller(false, Some(project));
        for asked in [None, Some("none"), Some("false"), Some("bogus")] {
            assert_eq!(
                listing(&member, asked).unwrap(),
                (Scope::Tenant(project), None)
            );
        }
        let admin = caller(true, Some(project));
        assert_eq!(
            listing(&admin, None).unwrap(),
            (Scope::Tenant(project), None)
        );
        assert_eq!(
            listing(&admin, Some("True")).unwrap(),
            (Scope::Tenant(project), None)
        );
        assert_eq!(listing(&admin, Some("None")).unwrap(), (Scope::All, None));
        assert_eq!(
            listing(&admin, Some("false")).unwrap(),
            (Scope::All, Some(false))
        );
        assert!(matches!(
            listing(&admin, Some("bogus")),
            Err(ApiError::BadRequest(m)) if m == "Invalid is_public filter [bogus]"
        ));
        let certificate = caller(true, None);
        assert_eq!(
            listing(&certificate, None).unwrap(),
            (Scope::All, Some(true))
        );
    }
}
