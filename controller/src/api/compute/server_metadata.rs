//! Server metadata, as Nova has it: `GET`, `POST` (merge), `PUT` (replace) `/servers/{id}/metadata`
//! and `GET`, `PUT`, `DELETE` `/servers/{id}/metadata/{key}` (`openstack server set --property`,
//! `server unset --property`, `server create --property`).
//!
//! Items are Nova's: keys of 1 to 255 characters among letters, digits, `-`, `_`, `:`, `.` and
//! space, string values of at most 255 characters (400 otherwise, as Nova's schema), at most 128
//! items (403, Nova's `metadata_items` quota). A change is refused (409) while the server is
//! building, being deleted, stopping, rebuilding or in error, as Nova refuses one outside its
//! active, stopped, paused and suspended states, and on a locked server ([`super::lock`]).
//! Metadata is the record's only: it does not reach the guest (the metadata service serves what
//! the START carried). Admins read and change any project's servers'.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::servers::{lookup, nova_state};
use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{Instance, InstanceChange, InstanceState, Metadata};

fn invalid(why: String) -> ApiError {
    ApiError::BadRequest(format!("Invalid input for field/attribute metadata. {why}"))
}

/// Whether `key` is a metadata key Nova's schema takes.
fn valid_key(key: &str) -> bool {
    let count = key.chars().count();
    (1..=Instance::MAX_METADATA_TEXT).contains(&count)
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.' | ' '))
}

/// The metadata in `value` (a JSON object of strings), checked as Nova's schema checks it: 400
/// for a bad key or value, 403 for more than [`Instance::MAX_METADATA`] items.
pub fn parse(value: &Value) -> Result<Metadata, ApiError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid(format!("Value: {value}. {value} is not of type 'object'")))?;
    let mut metadata = Metadata::new();
    for (key, item) in object {
        if !valid_key(key) {
            return Err(invalid(format!(
                "Additional properties are not allowed ('{key}' was unexpected): keys are 1 to {} letters, digits, '-', '_', ':', '.' or spaces",
                Instance::MAX_METADATA_TEXT
            )));
        }
        let text = item
            .as_str()
            .ok_or_else(|| invalid(format!("Value: {item}. {item} is not of type 'string'")))?;
        if text.chars().count() > Instance::MAX_METADATA_TEXT {
            return Err(invalid(format!(
                "Value: {text}. '{text}' is too long (at most {} characters)",
                Instance::MAX_METADATA_TEXT
            )));
        }
        metadata.insert(key.clone(), text.to_string());
    }
    check_count(&metadata)?;
    Ok(metadata)
}

fn check_count(metadata: &Metadata) -> Result<(), ApiError> {
    if metadata.len() > Instance::MAX_METADATA {
        return Err(ApiError::Forbidden(format!(
            "Maximum number of metadata items exceeds {}",
            Instance::MAX_METADATA
        )));
    }
    Ok(())
}

/// The `metadata` (or `meta`) object of a request body.
fn body_field<'a>(body: &'a Value, field: &str) -> Result<&'a Value, ApiError> {
    body.get(field).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "Invalid input for field/attribute {field}: it is required"
        ))
    })
}

fn as_json(metadata: &Metadata) -> Value {
    Value::Object(
        metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<String, Value>>(),
    )
}

/// Whether a server's metadata may change in `state` (Nova: active, stopped, paused, suspended,
/// with no task under way).
fn changeable(state: &InstanceState) -> bool {
    matches!(
        state,
        InstanceState::Active
            | InstanceState::Exited
            | InstanceState::Paused
            | InstanceState::Suspended
    )
}

/// Applies `edit` to the server's metadata (from what it is now, retried on a race) and keeps
/// the result: the metadata as it is then.
async fn change(
    state: &ApiState,
    caller: &Principal,
    id: Uuid,
    edit: impl Fn(&Metadata) -> Result<Metadata, ApiError> + Send + 'static,
) -> Result<Metadata, ApiError> {
    let scope = caller.project_scope(true)?;
    let admin = caller.is_admin();
    state
        .store(move |store| {
            let changed = super::change::retried(store, scope, id, "its metadata", |current| {
                super::lock::check(current, admin)?;
                if !changeable(&current.state) {
                    let (_, vm_state, task, _) = nova_state(&current.state);
                    // Nova checks the vm_state first, then that no task is under way.
                    let why = match task {
                        Some(task)
                            if matches!(
                                vm_state,
                                "active" | "stopped" | "paused" | "suspended"
                            ) =>
                        {
                            format!("task_state {task}")
                        }
                        _ => format!("vm_state {vm_state}"),
                    };
                    return Err(ApiError::Conflict(format!(
                        "Cannot 'update_metadata' instance {id} while it is in {why}"
                    )));
                }
                let metadata = edit(&current.metadata)?;
                check_count(&metadata)?;
                Ok(InstanceChange {
                    metadata: Some(metadata),
                    ..InstanceChange::default()
                })
            })?;
            Ok(changed.metadata)
        })
        .await
}

/// `GET /servers/{id}/metadata`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    let (instance, _) = lookup(&state, &caller, id).await?;
    Ok(Json(json!({"metadata": as_json(&instance.metadata)})))
}

/// The body's metadata added to the server's (`replace` false: each item replaces the one of its
/// key) or instead of it; 200 with the whole metadata then.
async fn write_all(
    state: ApiState,
    caller: Principal,
    id: String,
    body: Value,
    replace: bool,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    lookup(&state, &caller, id).await?;
    let items = parse(body_field(&body, "metadata")?)?;
    let metadata = change(&state, &caller, id, move |current| {
        let mut all = if replace {
            Metadata::new()
        } else {
            current.clone()
        };
        all.extend(items.clone());
        Ok(all)
    })
    .await?;
    Ok(Json(json!({"metadata": as_json(&metadata)})))
}

/// `POST /servers/{id}/metadata`: the items are added (or replace those of their keys).
pub async fn merge(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    write_all(state, caller, id, body, false).await
}

/// `PUT /servers/{id}/metadata`: the metadata becomes the body's.
pub async fn replace(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    write_all(state, caller, id, body, true).await
}

fn not_found() -> ApiError {
    ApiError::NotFound("Metadata item was not found".into())
}

/// `GET /servers/{id}/metadata/{key}`: `{"meta": {key: value}}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, key)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    let (instance, _) = lookup(&state, &caller, id).await?;
    let value = instance.metadata.get(&key).ok_or_else(not_found)?;
    Ok(Json(json!({"meta": {key: value}})))
}

/// `PUT /servers/{id}/metadata/{key}` with `{"meta": {key: value}}`: 200 with the item.
pub async fn set(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, key)): PathParams<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    lookup(&state, &caller, id).await?;
    let meta = body_field(&body, "meta")?;
    if meta.as_object().is_some_and(|m| m.len() > 1) {
        return Err(ApiError::BadRequest(
            "Request body contains too many items".into(),
        ));
    }
    let item = parse(meta)?;
    let Some((body_key, value)) = item.into_iter().next() else {
        return Err(invalid("the meta object needs one item".into()));
    };
    if body_key != key {
        return Err(ApiError::BadRequest("Request body and URI mismatch".into()));
    }
    let (k, v) = (key.clone(), value.clone());
    change(&state, &caller, id, move |current| {
        let mut all = current.clone();
        all.insert(k.clone(), v.clone());
        Ok(all)
    })
    .await?;
    Ok(Json(json!({"meta": {key: value}})))
}

/// `DELETE /servers/{id}/metadata/{key}`: 204; 404 for a key the server has not.
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, key)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("server", &id)?;
    lookup(&state, &caller, id).await?;
    change(&state, &caller, id, move |current| {
        let mut all = current.clone();
        all.remove(&key).ok_or_else(not_found)?;
        Ok(all)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_checked_as_nova_s_schema_checks_it() {
        let ok = parse(&json!({"role": "web", "a.b:c_d-e f": "", "k": "v".repeat(255)})).unwrap();
        assert_eq!(ok.len(), 3);
        for bad in [
            json!([]),
            json!({"": "v"}),
            json!({"k/slash": "v"}),
            json!({"é": "v"}),
            json!({"k".repeat(256): "v"}),
            json!({"k": "v".repeat(256)}),
            json!({"k": 5}),
            json!({"k": null}),
        ] {
            assert_eq!(parse(&bad).unwrap_err().status().as_u16(), 400, "{bad}");
        }
        let many: Map<String, Value> = (0..=128).map(|n| (format!("k{n}"), json!("v"))).collect();
        assert_eq!(
            parse(&Value::Object(many)).unwrap_err().status().as_u16(),
            403
        );
    }
}
