//! A flavor's extra specs, as Nova's `os-extra_specs`: `GET` (everyone who sees the flavor) and
//! `POST` (admins: set, the others kept) `/flavors/{id}/os-extra_specs`; `GET`, `PUT` and
//! `DELETE` (admins for both) `/flavors/{id}/os-extra_specs/{key}`. `openstack flavor set
//! --property`, `flavor unset --property`, `flavor create --property`, and `flavor show`'s
//! `properties`.
//!
//! Specs are Nova's: keys of 1 to 255 letters, digits, `-`, `_`, `:`, `.` and spaces, values
//! strings or numbers (kept as their text) of at most 255 characters (400 otherwise), and here
//! at most [`Flavor::MAX_EXTRA_SPECS`] a flavor (400 past it). Writes answer with what they were
//! given, as Nova's do. Specs are kept and shown; nothing in cumulo acts on them.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::flavors::{flavor_id, lookup, seen_by, store_error};
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiError, ApiState, Principal};
use store::{ExtraSpecs, Flavor, StoreError};

fn invalid(field: &str, why: String) -> ApiError {
    ApiError::BadRequest(format!("Invalid input for field/attribute {field}. {why}"))
}

/// The specs in `value` (a JSON object of strings and numbers), checked as Nova's schema checks
/// them; `field` names it in a 400.
fn parse(field: &str, value: &Value) -> Result<ExtraSpecs, ApiError> {
    let object = value.as_object().ok_or_else(|| {
        invalid(
            field,
            format!("Value: {value}. {value} is not of type 'object'"),
        )
    })?;
    let mut specs = ExtraSpecs::new();
    for (key, item) in object {
        if !Flavor::is_spec_key(key) {
            return Err(invalid(
                field,
                format!(
                    "Additional properties are not allowed ('{key}' was unexpected): keys are 1 \
                     to {} letters, digits, '-', '_', ':', '.' or spaces",
                    Flavor::MAX_EXTRA_SPEC_TEXT
                ),
            ));
        }
        let text = match item {
            Value::String(text) => text.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(invalid(
                    field,
                    format!("Value: {other}. {other} is not of type 'string', 'number'"),
                ));
            }
        };
        if text.chars().count() > Flavor::MAX_EXTRA_SPEC_TEXT {
            return Err(invalid(
                field,
                format!(
                    "Value: {text}. '{text}' is too long (at most {} characters)",
                    Flavor::MAX_EXTRA_SPEC_TEXT
                ),
            ));
        }
        specs.insert(key.clone(), text);
    }
    Ok(specs)
}

fn as_json(specs: &ExtraSpecs) -> Value {
    Value::Object(
        specs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<Map<String, Value>>(),
    )
}

/// Nova's 404 for a key a flavor has not.
fn no_key(id: Uuid, key: &str) -> ApiError {
    ApiError::NotFound(format!("Flavor {id} has no extra specs with key {key}."))
}

/// Sets `specs` on flavor `id` (an admin's write: every flavor is seen).
async fn set(state: &ApiState, id: Uuid, specs: ExtraSpecs) -> Result<(), ApiError> {
    state
        .store(move |store| {
            store
                .set_flavor_extra_specs(id, specs)
                .map_err(store_error(id))
        })
        .await?;
    Ok(())
}

/// `GET /flavors/{id}/os-extra_specs`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = flavor_id(&id)?;
    let flavor = lookup(&state, seen_by(&caller)?, id).await?;
    Ok(Json(json!({"extra_specs": as_json(&flavor.extra_specs)})))
}

/// `POST /flavors/{id}/os-extra_specs` (admins) `{"extra_specs": {...}}`: 200 with them.
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = flavor_id(&id)?;
    let object = body
        .as_object()
        .ok_or_else(|| ApiError::BadRequest("the body must be a JSON object".into()))?;
    let given = object.get("extra_specs").ok_or_else(|| {
        ApiError::BadRequest("Invalid input: 'extra_specs' is a required property".into())
    })?;
    if let Some(other) = object.keys().find(|k| *k != "extra_specs") {
        return Err(ApiError::BadRequest(format!(
            "Invalid input: Additional properties are not allowed ('{other}' was unexpected)"
        )));
    }
    let specs = parse("extra_specs", given)?;
    set(&state, id, specs).await?;
    Ok(Json(json!({"extra_specs": given})))
}

/// `GET /flavors/{id}/os-extra_specs/{key}`: `{key: value}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, key)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let id = flavor_id(&id)?;
    let flavor = lookup(&state, seen_by(&caller)?, id).await?;
    let value = flavor
        .extra_specs
        .get(&key)
        .ok_or_else(|| no_key(id, &key))?;
    Ok(Json(json!({ key: value })))
}

/// `PUT /flavors/{id}/os-extra_specs/{key}` (admins) `{key: value}`: 200 with it. The body holds
/// one spec, the one the path names (400 "Request body and URI mismatch" otherwise).
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, key)): PathParams<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = flavor_id(&id)?;
    let count = body.as_object().map_or(0, Map::len);
    if count != 1 {
        return Err(ApiError::BadRequest(format!(
            "Invalid input for field/attribute {key}. The body must hold exactly one extra \
             spec: it holds {count}"
        )));
    }
    let specs = parse(&key, &body)?;
    if !specs.contains_key(&key) {
        return Err(ApiError::BadRequest("Request body and URI mismatch".into()));
    }
    set(&state, id, specs).await?;
    Ok(Json(body))
}

/// `DELETE /flavors/{id}/os-extra_specs/{key}` (admins): 200, no body (Nova's).
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, key)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = flavor_id(&id)?;
    state
        .store(move |store| {
            store
                .delete_flavor_extra_spec(id, &key)
                .map_err(|e| match e {
                    StoreError::NotFound {
                        kind: "extra spec", ..
                    } => no_key(id, &key),
                    other => store_error(id)(other),
                })
        })
        .await?;
    Ok(StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_read_as_nova_reads_them() {
        let specs = parse(
            "extra_specs",
            &json!({"hw:cpu_policy": "dedicated", "n": 2, "f": 1.5, "a b.c-d_e": ""}),
        )
        .unwrap();
        assert_eq!(specs["n"], "2");
        assert_eq!(specs["f"], "1.5");
        assert_eq!(specs.len(), 4);
        for bad in [
            json!([]),
            json!({"k/1": "v"}),
            json!({"": "v"}),
            json!({"k": null}),
            json!({"k": true}),
            json!({"k": {"x": 1}}),
            json!({"k": "v".repeat(256)}),
            json!({ "k".repeat(256): "v" }),
        ] {
            assert!(
                matches!(parse("extra_specs", &bad), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
