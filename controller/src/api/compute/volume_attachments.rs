//! `/servers/{id}/os-volume_attachments`: a server's block volumes (`openstack server add
//! volume`, `server remove volume`, `server volume list`), in Nova's 2.1 shape: an attachment's
//! `id` is its volume's id (as below Nova's microversion 2.89), `device` the path the guest sees
//! it at (`/dev/vdb`).
//!
//! - `POST`: `{"volumeAttachment": {"volumeId", "device"?, "tag"?, "delete_on_termination"?}}`
//!   attaches a volume of the server's project (200 with the attachment; the volume `attaching`
//!   until the server's node reports it attached, then `in-use`). `device` is `/dev/vdb` to
//!   `/dev/vdz` (or `null`, or `auto`: the first free one); `tag` and `delete_on_termination`
//!   are taken and not kept (a deleted server's volumes are detached, never deleted). The rules
//!   and their 400s, 404s and 409s are [`crate::volumes`]'s (as Nova's: 400 for a volume that
//!   is not available, 409 for a server whose state cannot take it).
//! - `GET` lists the volumes attached to (or being attached to, or detached from) the server,
//!   by device; `GET .../{volume_id}` shows one (404 when it is not the server's).
//! - `DELETE .../{volume_id}`: detaches an `in-use` volume (202; `detaching` until the node
//!   reports it gone, then `available`); 404 for a volume not attached to the server, 400 for
//!   its root disk (a server booted from a volume has it as `/dev/vda`: Nova's "Cannot detach a
//!   root device volume"), 409 for one not `in-use`.
//!
//! Who: a project's members on its servers; admins read any project's servers' attachments, and
//! attach and detach in their token's project only, as for the other server actions.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::ClusterError;
use crate::volumes::device_name;
use store::{Scope, StoreError, Volume};

/// A volume's attachment in Nova's shape (`None` for a volume attached to nothing).
fn attachment(volume: &Volume) -> Option<Value> {
    volume.attachment.as_ref().map(|a| {
        json!({
            "id": volume.id,
            "serverId": a.instance,
            "volumeId": volume.id,
            "device": a.device,
        })
    })
}

/// The volume named in a path: a text that is not a UUID names none (404).
fn volume_id(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text)
        .map_err(|_| ApiError::NotFound(format!("Volume {text} could not be found.")))
}

/// A 404 for a volume that is not attached to the server.
fn not_attached(volume: Uuid, server: Uuid) -> ApiError {
    ApiError::NotFound(format!(
        "Volume {volume} is not attached to server {server}."
    ))
}

/// What an attach asks for: the volume and the device (`vdc`; `None`: the first free).
#[derive(Debug, Clone, PartialEq, Eq)]
struct AttachRequest {
    volume: Uuid,
    device: Option<String>,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest(message.into())
}

/// Reads an attach's body (400 for what it may not hold).
fn parse_attach(body: Value) -> Result<AttachRequest, ApiError> {
    let Value::Object(mut outer) = body else {
        return Err(bad("The request body must be a JSON object."));
    };
    let Some(Value::Object(inner)) = outer.remove("volumeAttachment") else {
        return Err(bad(
            "Invalid input: 'volumeAttachment' is a required object.",
        ));
    };
    if let Some(key) = outer.keys().next() {
        return Err(bad(format!(
            "Invalid input: additional properties are not allowed ('{key}' was unexpected)"
        )));
    }
    parse_attachment(&inner)
}

fn parse_attachment(inner: &Map<String, Value>) -> Result<AttachRequest, ApiError> {
    for key in inner.keys() {
        if !matches!(
            key.as_str(),
            "volumeId" | "device" | "tag" | "delete_on_termination"
        ) {
            return Err(bad(format!(
                "Invalid input for field/attribute volumeAttachment: additional properties are \
                 not allowed ('{key}' was unexpected)"
            )));
        }
    }
    let volume = match inner.get("volumeId") {
        Some(Value::String(text)) => Uuid::parse_str(text).map_err(|_| {
            bad(format!(
                "Invalid input for field/attribute volumeId. Value: {text}. '{text}' is not a \
                 'uuid'"
            ))
        })?,
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute volumeId. Value: {other}. It is not a string"
            )));
        }
        None => return Err(bad("Invalid input: 'volumeId' is a required property")),
    };
    let device = match inner.get("device") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text == "auto" => None,
        Some(Value::String(text)) => Some(device_name(text).ok_or_else(|| {
            bad(format!(
                "The supplied device path ({text}) is invalid: it must be /dev/vdb to /dev/vdz."
            ))
        })?),
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute device. Value: {other}. It is not a string"
            )));
        }
    };
    match inner.get("tag") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute tag. Value: {other}. It is not a string"
            )));
        }
    }
    match inner.get("delete_on_termination") {
        None | Some(Value::Null | Value::Bool(_)) => {}
        Some(other) => {
            return Err(bad(format!(
                "Invalid input for field/attribute delete_on_termination. Value: {other}. It is \
                 not a boolean"
            )));
        }
    }
    Ok(AttachRequest { volume, device })
}

/// A whole number from 0 in a query (400 otherwise).
fn count(query: &HashMap<String, String>, key: &str) -> Result<Option<usize>, ApiError> {
    match query.get(key).map(String::as_str) {
        None | Some("") => Ok(None),
        Some(text) => text.parse::<usize>().map(Some).map_err(|_| {
            bad(format!(
                "Invalid input for query parameters {key}. Value: {text}."
            ))
        }),
    }
}

/// `GET /servers/{id}/os-volume_attachments`: `{"volumeAttachments": [...]}`, by device;
/// `limit` and `offset`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    QueryParams(query): QueryParams<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let server = path_id("server", &id)?;
    let scope = caller.project_scope(true)?;
    let (limit, offset) = (count(&query, "limit")?, count(&query, "offset")?);
    let volumes = state
        .store(move |store| {
            let instance = store.instance(scope, server)?;
            Ok(crate::volumes::attached_to(store, &instance)?)
        })
        .await?;
    let shown: Vec<Value> = volumes
        .iter()
        .filter_map(attachment)
        .skip(offset.unwrap_or(0))
        .take(limit.unwrap_or(usize::MAX))
        .collect();
    Ok(Json(json!({"volumeAttachments": shown})))
}

/// `GET /servers/{id}/os-volume_attachments/{volume_id}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, volume)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let server = path_id("server", &id)?;
    let volume = volume_id(&volume)?;
    let scope = caller.project_scope(true)?;
    let found = state
        .store(move |store| {
            let instance = store.instance(scope, server)?;
            match store.volume(Scope::Tenant(instance.tenant), volume) {
                Ok(v) => Ok(v),
                Err(store::StoreError::NotFound { .. }) => Err(not_attached(volume, server)),
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    match found.attachment.as_ref() {
        Some(a) if a.instance == server => {
            Ok(Json(json!({"volumeAttachment": attachment(&found)})))
        }
        _ => Err(not_attached(volume, server)),
    }
}

/// `POST /servers/{id}/os-volume_attachments`: 200 with the attachment.
pub async fn attach(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let server = path_id("server", &id)?;
    let scope = caller.project_scope(false)?;
    let request = parse_attach(body)?;
    let (by, admin) = (caller.who(), caller.is_admin());
    let attached = state
        .cluster(move |store, cluster| {
            super::lock::unlocked(store, scope, server, admin)?;
            cluster
                .attach_volume(scope, server, request.volume, request.device, &by)
                .map_err(|e| match e {
                    // Nova's words for a volume the project does not see.
                    ClusterError::Store(StoreError::NotFound { kind: "volume", id }) => {
                        ApiError::NotFound(format!("Volume {id} could not be found."))
                    }
                    other => other.into(),
                })
        })
        .await?;
    Ok(Json(json!({"volumeAttachment": attachment(&attached)})))
}

/// `DELETE /servers/{id}/os-volume_attachments/{volume_id}`: 202.
pub async fn detach(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, volume)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let server = path_id("server", &id)?;
    let volume = volume_id(&volume)?;
    let scope = caller.project_scope(false)?;
    let (by, admin) = (caller.who(), caller.is_admin());
    state
        .cluster(move |store, cluster| {
            super::lock::unlocked(store, scope, server, admin)?;
            Ok(cluster.detach_volume(scope, server, volume, &by)?)
        })
        .await?;
    Ok(StatusCode::ACCEPTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_bodies_are_read() {
        let v = Uuid::new_v4();
        let parsed = |body: Value| parse_attach(body);
        assert_eq!(
            parsed(json!({"volumeAttachment": {"volumeId": v}})).unwrap(),
            AttachRequest {
                volume: v,
                device: None
            }
        );
        assert_eq!(
            parsed(json!({"volumeAttachment": {
                "volumeId": v, "device": "/dev/vdc", "tag": "data", "delete_on_termination": true
            }}))
            .unwrap()
            .device
            .as_deref(),
            Some("vdc")
        );
        for none in [json!(null), json!("auto")] {
            let body = json!({"volumeAttachment": {"volumeId": v, "device": none}});
            assert_eq!(parsed(body).unwrap().device, None);
        }
        for bad in [
            json!([]),
            json!({}),
            json!({"volumeAttachment": {}}),
            json!({"volumeAttachment": {"volumeId": "x"}}),
            json!({"volumeAttachment": {"volumeId": 7}}),
            json!({"volumeAttachment": {"volumeId": v, "device": "/dev/sda"}}),
            json!({"volumeAttachment": {"volumeId": v, "device": "/dev/vda"}}),
            json!({"volumeAttachment": {"volumeId": v, "device": 1}}),
            json!({"volumeAttachment": {"volumeId": v, "tag": 1}}),
            json!({"volumeAttachment": {"volumeId": v, "delete_on_termination": "yes"}}),
            json!({"volumeAttachment": {"volumeId": v, "other": 1}}),
            json!({"volumeAttachment": {"volumeId": v}, "other": 1}),
        ] {
            let error = parsed(bad.clone()).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
