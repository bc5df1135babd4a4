//! `os-quota-sets`: a project's `volumes` and `gigabytes` limits, with their use
//! (`?usage=true`), the defaults (`/defaults`), and an admin's change (`PUT`). A project has the
//! controller's defaults (`ApiConfig::volume_limits`) until an admin sets its own, which the
//! store keeps per tenant ([`VolumeStore::set_volume_quota`]) and applies to the project's
//! creations and growths from then on. A member reads its own project's (another's is a 403); an
//! admin reads and changes any.
//!
//! A `PUT` takes Cinder's body, `{"quota_set": {"volumes": N, "gigabytes": M}}`, which is what
//! `openstack quota set --volumes N --gigabytes M PROJECT` sends: whole numbers (or their text)
//! from -1 (unlimited) up to [`VolumeLimits::MAX`]. A figure left out keeps its value (a
//! default's, which the project then holds as its own). As Cinder does
//! (`cinder/api/contrib/quotas.py`, `update`): `id` and `tenant_id` are ignored; a figure below
//! what the project holds is a 400 (`Quota volumes limit must be equal or greater than existing
//! resources. ...`); the answer is the new set, without its `id`. A key this server does not
//! keep is a 400 naming it, not silently ignored: Cinder's other quotas (`snapshots`, `backups`,
//! `backup_gigabytes`, `per_volume_gigabytes`, `groups`, and the per-type `volumes_<type>`,
//! `gigabytes_<type>`, `snapshots_<type>`) have nothing here to limit.
//!
//! [`VolumeStore::set_volume_quota`]: store::VolumeStore::set_volume_quota

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{VolError, VolResult, blocking, url_project};
use crate::api::extract::{JsonBody, PathParams, QueryParams};
use crate::api::{ApiState, Principal};
use store::{StoreError, VolumeLimits};

/// The largest figure Cinder takes (its database's `MAX_INT`).
const CINDER_MAX_INT: i64 = 2_147_483_647;

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

/// The project the path names (404 for one that is not a UUID).
fn target_id(target: &str) -> VolResult<Uuid> {
    Uuid::parse_str(target).map_err(|_| {
        VolError::new(
            StatusCode::NOT_FOUND,
            format!("Project {target} could not be found."),
        )
    })
}

/// The target project a caller may read the quotas of.
fn readable(caller: &Principal, project: Uuid, target: &str) -> VolResult<Uuid> {
    let id = target_id(target)?;
    if caller.is_admin() || project == id {
        Ok(id)
    } else {
        Err(VolError::new(
            StatusCode::FORBIDDEN,
            "a project's quotas are its members' and admins'",
        ))
    }
}

/// `GET /os-quota-sets/{target}[?usage=true]`: the project's own quota, or the defaults.
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
    let defaults = state.config.volume_limits;
    let (quota, (count, gigabytes)) = blocking(&state, move |store| {
        let quota = store.volume_quota(target, defaults)?;
        Ok((quota, store.tenant_volume_usage(target)?))
    })
    .await?;
    let mut body = Map::new();
    body.insert("id".into(), json!(target));
    for (name, value) in figures(&quota) {
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

/// `GET /os-quota-sets/{target}/defaults`: the controller's, which every project has until an
/// admin sets its own.
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

/// What a `PUT` asks: each figure given (`Some`), as a limit (`None` inside: unlimited).
#[derive(Debug, Default, PartialEq, Eq)]
struct Asked {
    volumes: Option<Option<u32>>,
    gigabytes: Option<Option<u64>>,
}

impl Asked {
    /// `quota` with the figures asked for.
    fn applied(&self, quota: VolumeLimits) -> VolumeLimits {
        VolumeLimits {
            volumes: self.volumes.unwrap_or(quota.volumes),
            gigabytes: self.gigabytes.unwrap_or(quota.gigabytes),
        }
    }
}

/// A figure of a `PUT`, as Cinder takes it (an integer or its text, from -1 to its `MAX_INT`,
/// in oslo's words otherwise): `None` for -1, unlimited.
fn figure(name: &str, value: &Value) -> VolResult<Option<u64>> {
    let n = value
        .as_i64()
        .or_else(|| value.as_str().and_then(|s| s.trim().parse().ok()))
        .ok_or_else(|| VolError::bad(format!("{name} must be an integer")))?;
    if n < -1 {
        return Err(VolError::bad(format!("{name} must be >= -1")));
    }
    if n > CINDER_MAX_INT {
        return Err(VolError::bad(format!("{name} must be <= {CINDER_MAX_INT}")));
    }
    Ok(u64::try_from(n).ok())
}

/// Reads a `PUT`'s body: `{"quota_set": {...}}` and nothing else, at least one key in it, and
/// no key this server does not keep (all of them named in one 400, as Cinder's `Bad key(s)`).
fn asked(request: Value) -> VolResult<Asked> {
    let Value::Object(mut top) = request else {
        return Err(VolError::bad("the request body must be a JSON object"));
    };
    let set = top.remove("quota_set");
    if let Some(other) = top.keys().next() {
        return Err(VolError::bad(format!(
            "Invalid input for field/attribute {other}: Additional properties are not allowed \
             (only quota_set)."
        )));
    }
    let Some(Value::Object(set)) = set else {
        return Err(VolError::bad(
            "Missing required element quota_set in request body.",
        ));
    };
    if set.is_empty() {
        return Err(VolError::bad(
            "Invalid input for field/attribute quota_set: {} does not have enough properties.",
        ));
    }
    let unknown: Vec<&str> = set
        .keys()
        .map(String::as_str)
        .filter(|k| !matches!(*k, "volumes" | "gigabytes" | "id" | "tenant_id"))
        .collect();
    if !unknown.is_empty() {
        return Err(VolError::bad(format!(
            "Bad key(s) in quota set: {}. This server keeps the volumes and gigabytes quotas \
             only (no snapshots, backups, groups, per-volume or per-type quotas).",
            unknown.join(", ")
        )));
    }
    let mut asked = Asked::default();
    if let Some(v) = set.get("volumes") {
        asked.volumes = Some(figure("volumes", v)?.map(|n| u32::try_from(n).unwrap_or(u32::MAX)));
    }
    if let Some(v) = set.get("gigabytes") {
        asked.gigabytes = Some(figure("gigabytes", v)?);
    }
    Ok(asked)
}

/// `PUT /os-quota-sets/{target}` (admins; 403 otherwise): sets the project's own quota; the
/// answer is the new set.
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, target)): PathParams<(String, String)>,
    JsonBody(request): JsonBody<Value>,
) -> VolResult<Json<Value>> {
    url_project(&caller, &project)?;
    if !caller.is_admin() {
        return Err(VolError::new(
            StatusCode::FORBIDDEN,
            "Policy doesn't allow volume_extension:quotas:update to be performed.",
        ));
    }
    let target = target_id(&target)?;
    let asked = asked(request)?;
    let defaults = state.config.volume_limits;
    let quota = blocking(&state, move |store| {
        let quota = asked.applied(store.volume_quota(target, defaults)?);
        // The store's `Invalid` (past the maxima, below the usage) in its own words.
        store.set_volume_quota(target, quota).map_err(|e| match e {
            StoreError::Invalid(message) => VolError::bad(message),
            other => other.into(),
        })
    })
    .await?;
    let mut body = Map::new();
    for (name, value) in figures(&quota) {
        body.insert(name.into(), json!(value));
    }
    Ok(Json(json!({"quota_set": body})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(r: VolResult<Asked>) -> u16 {
        r.unwrap_err().status.as_u16()
    }

    #[test]
    fn a_put_takes_volumes_and_gigabytes_and_names_what_it_does_not_keep() {
        let asked = asked(json!({"quota_set": {"volumes": 3, "gigabytes": "5", "id": "x"}}));
        assert_eq!(
            asked.unwrap(),
            Asked {
                volumes: Some(Some(3)),
                gigabytes: Some(Some(5)),
            }
        );
        let unlimited = super::asked(json!({"quota_set": {"gigabytes": -1}})).unwrap();
        assert_eq!(unlimited.gigabytes, Some(None));
        assert_eq!(unlimited.volumes, None);
        let quota = VolumeLimits {
            volumes: Some(7),
            gigabytes: Some(9),
        };
        assert_eq!(
            unlimited.applied(quota),
            VolumeLimits {
                volumes: Some(7),
                gigabytes: None,
            }
        );
        let bad = super::asked(json!({"quota_set": {"volumes": 1, "snapshots": 2,
            "volumes_lvm": 3}}))
        .unwrap_err();
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        assert!(
            bad.message.contains("snapshots, volumes_lvm"),
            "{}",
            bad.message
        );
        for body in [
            json!({"quota_set": {"volumes": -2}}),
            json!({"quota_set": {"volumes": 1.5}}),
            json!({"quota_set": {"volumes": true}}),
            json!({"quota_set": {"gigabytes": "many"}}),
            json!({"quota_set": {"gigabytes": 2_147_483_648_i64}}),
            json!({"quota_set": {}}),
            json!({"quota_set": 3}),
            json!({"quota": {"volumes": 1}}),
            json!({"quota_set": {"volumes": 1}, "force": true}),
            json!([]),
        ] {
            assert_eq!(status(super::asked(body.clone())), 400, "{body}");
        }
    }
}
