//! Changing a server and reading its addresses, as Nova does at microversion 2.1:
//! `PUT /servers/{id}` (`openstack server set --name`) and `GET /servers/{id}/ips[/{network}]`.
//!
//! A server's name is the only thing kept that a `PUT` may change: `accessIPv4`/`accessIPv6`
//! are not kept (a non-empty one is a 400, not dropped in silence), `description` needs 2.19
//! (a 400 at 2.1, as Nova's schema says), and anything else is a 400. The name changes the
//! record only: the guest's host name stays what its START said.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::servers::{lookup, shown};
use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::InstanceChange;

/// The longest server name Nova takes.
pub const MAX_NAME: usize = 255;

/// The new name a `PUT /servers/{id}` body asks for, if any.
pub fn requested_name(body: &Value) -> Result<Option<String>, ApiError> {
    let bad = |why: String| ApiError::BadRequest(why);
    let server = body
        .get("server")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("the body needs a \"server\" object".into()))?;
    if let Some(extra) = body
        .as_object()
        .and_then(|b| b.keys().find(|k| *k != "server"))
    {
        return Err(bad(format!(
            "Additional properties are not allowed ('{extra}' was unexpected)"
        )));
    }
    let mut name = None;
    for (key, value) in server {
        match key.as_str() {
            "name" => {
                let text = value
                    .as_str()
                    .ok_or_else(|| bad(format!("Invalid input for field/attribute name. Value: {value}. {value} is not of type 'string'")))?;
                if text.trim().is_empty() || text.chars().count() > MAX_NAME {
                    return Err(bad(format!(
                        "Invalid input for field/attribute name. Value: {text:?}: 1 to {MAX_NAME} characters, not only blanks"
                    )));
                }
                name = Some(text.to_string());
            }
            "accessIPv4" | "accessIPv6" => {
                if !(value.is_null() || value == "") {
                    return Err(bad(format!(
                        "{key}: access addresses are not kept by this server"
                    )));
                }
            }
            "OS-DCF:diskConfig" if value == "MANUAL" || value == "AUTO" => {}
            other => {
                return Err(bad(format!(
                    "Additional properties are not allowed ('{other}' was unexpected)"
                )));
            }
        }
    }
    Ok(name)
}

/// `PUT /servers/{id}`: 200 with the server as it is now.
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    // The server is looked up before its body is read: 404 whatever the body.
    lookup(&state, &caller, id).await?;
    let name = requested_name(&body)?;
    let scope = caller.project_scope(true)?;
    if let Some(name) = name {
        state
            .store(move |store| {
                super::change::retried(store, scope, id, "its name", |_| {
                    Ok(InstanceChange {
                        name: Some(name.clone()),
                        ..InstanceChange::default()
                    })
                })
            })
            .await?;
    }
    Ok(Json(json!({ "server": shown(&state, &caller, id).await? })))
}

/// The server's addresses by network label (`private`: its fixed address, then its floating
/// ones), each `{version, addr}`.
async fn addresses(
    state: &ApiState,
    caller: &Principal,
    id: Uuid,
) -> Result<Map<String, Value>, ApiError> {
    // The detailed view's `addresses`, without its `OS-EXT-IPS` keys.
    let server = shown(state, caller, id).await?;
    let mut map = Map::new();
    if let Some(labels) = server["addresses"].as_object() {
        for (label, list) in labels {
            let bare: Vec<Value> = list
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| json!({"version": a["version"], "addr": a["addr"]}))
                .collect();
            map.insert(label.clone(), Value::Array(bare));
        }
    }
    Ok(map)
}

/// `GET /servers/{id}/ips`.
pub async fn ips(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    let map = addresses(&state, &caller, id).await?;
    Ok(Json(json!({ "addresses": map })))
}

/// `GET /servers/{id}/ips/{network}`: 404 for a label the server has no address on.
pub async fn ips_of(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, network)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    let mut map = addresses(&state, &caller, id).await?;
    let list = map
        .remove(&network)
        .ok_or_else(|| ApiError::NotFound("There is no such network label".into()))?;
    let mut one = Map::new();
    one.insert(network, list);
    Ok(Json(Value::Object(one)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_bodies_are_checked() {
        let name = |body: Value| requested_name(&body);
        assert_eq!(
            name(json!({"server": {"name": "web"}})).unwrap(),
            Some("web".to_string())
        );
        assert_eq!(name(json!({"server": {}})).unwrap(), None);
        assert_eq!(
            name(json!({"server": {"accessIPv4": "", "name": "a"}})).unwrap(),
            Some("a".to_string())
        );
        for bad in [
            json!({}),
            json!({"server": "x"}),
            json!({"server": {"name": ""}}),
            json!({"server": {"name": "   "}}),
            json!({"server": {"name": 7}}),
            json!({"server": {"name": "x".repeat(256)}}),
            json!({"server": {"description": "d"}}),
            json!({"server": {"accessIPv4": "10.0.0.1"}}),
            json!({"server": {"name": "a"}, "extra": 1}),
        ] {
            assert!(
                matches!(name(bad.clone()), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
