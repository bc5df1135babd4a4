//! Volumes: create (a size; blank, or from an image), list (summary and detail), show, update
//! (name, description), delete, and the `os-extend` and (admins) `os-force_detach` actions. A
//! volume is `available` from its creation; the Compute API's `os-volume_attachments` attaches
//! it to a server (`attaching`, `in-use`, `detaching`: [`crate::volumes`]), and its
//! `attachments` show it; a server created from it (or with a new volume made from an image, by
//! Compute's block device mapping) has it as its root disk, `/dev/vda`, until it goes.
//!
//! A volume made from an image (`imageRef`, or `image_id`) records it and is bootable: the image
//! must be one the project may boot, `active`, an uploaded disk image (qcow2 or raw: not an ISO,
//! not a kernel image nor any image registered by reference) that fits in the volume
//! ([`crate::volumes::check_volume_image`]). It is `available` at once: the node that first
//! uses the volume makes its file from the image (ATTACH_VOLUME's `image`, or a START's). Its
//! JSON has Cinder's `volume_image_metadata` (the image's id, name, formats, sizes and
//! checksum, as text).

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{BASE, VolError, VolResult, blocking, url_project};
use crate::api::clock::rfc3339_micro;
use crate::api::extract::{JsonBody, PathParams, QueryParams};
use crate::api::{ApiState, Principal};
use crate::volumes as rules;
use store::{Image, NewVolume, Scope, StoreError, Volume, VolumeChange, VolumeStatus};

/// The images volumes were made from, by id (those that are gone are not there).
type Images = HashMap<Uuid, Image>;

/// The statuses a volume may be deleted in (Cinder's, of those cumulo has).
const DELETABLE: [VolumeStatus; 3] = [
    VolumeStatus::Available,
    VolumeStatus::Error,
    VolumeStatus::ErrorDeleting,
];

/// A volume's self and bookmark links.
fn links(base: &str, v: &Volume) -> Value {
    let href = format!("{base}{BASE}/{}/volumes/{}", v.owner, v.id);
    json!([{"rel": "self", "href": href}, {"rel": "bookmark", "href": href}])
}

/// The summary `GET /volumes` lists.
fn summary(base: &str, v: &Volume) -> Value {
    json!({"id": v.id, "name": v.name, "links": links(base, v)})
}

/// The images `volumes` were made from (read once each; one that is gone is left out).
fn images_of(store: &dyn store::Store, volumes: &[Volume]) -> VolResult<Images> {
    let mut images = Images::new();
    for id in volumes.iter().filter_map(|v| v.image) {
        if images.contains_key(&id) {
            continue;
        }
        match store.image(Scope::All, id) {
            Ok(image) => {
                images.insert(id, image);
            }
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(images)
}

/// Cinder's `volume_image_metadata` of a volume made from `id` (`image`, when it is still
/// there): every value text, as Cinder keeps them.
fn image_metadata(id: Uuid, image: Option<&Image>) -> Value {
    let mut meta = json!({"image_id": id.to_string()});
    if let Some(i) = image {
        meta["image_name"] = json!(i.name);
        meta["disk_format"] = json!(crate::api::image::disk_format(i.kind));
        meta["container_format"] = json!(i.props.container_format.as_deref().unwrap_or("bare"));
        meta["min_disk"] = json!(i.props.min_disk.to_string());
        meta["min_ram"] = json!(i.props.min_ram.to_string());
        if let Some(file) = &i.file {
            meta["size"] = json!(file.size.to_string());
            meta["checksum"] = json!(file.md5);
        }
    }
    meta
}

/// A volume in Cinder's shape (`images`: the images volumes were made from, for
/// `volume_image_metadata`).
pub(super) fn body(base: &str, v: &Volume, images: &Images) -> Value {
    let attachments: Vec<Value> = v
        .attachment
        .iter()
        .map(|a| {
            json!({
                "id": a.id,
                "attachment_id": a.id,
                "volume_id": v.id,
                "server_id": a.instance,
                "device": a.device,
                "host_name": null,
                "attached_at": rfc3339_micro(a.attached),
            })
        })
        .collect();
    let mut body = json!({
        "id": v.id,
        "name": v.name,
        "description": v.description,
        "size": v.size_gb,
        "status": v.status.as_str(),
        "attachments": attachments,
        "availability_zone": "nova",
        "bootable": if v.bootable { "true" } else { "false" },
        "created_at": rfc3339_micro(v.created),
        "updated_at": rfc3339_micro(v.updated),
        "volume_type": null,
        "metadata": {},
        "user_id": null,
        "os-vol-tenant-attr:tenant_id": v.owner,
        "multiattach": false,
        "encrypted": false,
        "replication_status": null,
        "consistencygroup_id": null,
        "snapshot_id": null,
        "source_volid": null,
        "migration_status": null,
        "links": links(base, v),
    });
    if let Some(image) = v.image {
        body["volume_image_metadata"] = image_metadata(image, images.get(&image));
    }
    body
}

/// What the caller reaches by id: admins any volume, members their project's.
fn scope_of(caller: &Principal, project: Uuid) -> Scope {
    if caller.is_admin() {
        Scope::All
    } else {
        Scope::Tenant(project)
    }
}

/// A path's volume id: a text that is not a UUID names no volume.
fn volume_id(id: &str) -> VolResult<Uuid> {
    Uuid::parse_str(id).map_err(|_| VolError::no_volume(id))
}

/// The store's volume, with Cinder's 404 message.
fn find(store: &dyn store::Store, scope: Scope, id: Uuid) -> VolResult<Volume> {
    store.volume(scope, id).map_err(|e| match e {
        store::StoreError::NotFound { .. } => VolError::no_volume(&id.to_string()),
        other => other.into(),
    })
}

fn truthy(text: &str) -> bool {
    matches!(text.to_ascii_lowercase().as_str(), "1" | "true" | "yes")
}

/// `GET /volumes` and `GET /volumes/detail`: the project's volumes (every project's for an
/// admin with `all_tenants`), filtered by `name` and `status`, paged by `limit` and `marker`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
    uri: axum::http::Uri,
    QueryParams(query): QueryParams<HashMap<String, String>>,
) -> VolResult<Json<Value>> {
    let project = url_project(&caller, &project)?;
    let detail = uri.path().ends_with("/detail");
    let all = query.get("all_tenants").is_some_and(|v| truthy(v)) && caller.is_admin();
    let scope = if all {
        Scope::All
    } else {
        Scope::Tenant(project)
    };
    let limit = match query.get("limit").map(String::as_str) {
        None | Some("") => None,
        Some(text) => Some(text.parse::<usize>().map_err(|_| {
            VolError::bad(format!(
                "Invalid input received: limit '{text}' is not an integer"
            ))
        })?),
    };
    let (volumes, images) = blocking(&state, move |store| {
        let volumes = store.volumes(scope)?;
        let images = if detail {
            images_of(store, &volumes)?
        } else {
            Images::new()
        };
        Ok((volumes, images))
    })
    .await?;
    let kept: Vec<Volume> = volumes
        .into_iter()
        .filter(|v| query.get("name").is_none_or(|n| *n == v.name))
        .filter(|v| query.get("status").is_none_or(|s| s == v.status.as_str()))
        .collect();
    let start = match query.get("marker").map(String::as_str) {
        None | Some("") => 0,
        Some(marker) => {
            kept.iter()
                .position(|v| v.id.to_string() == marker)
                .ok_or_else(|| VolError::bad(format!("Marker {marker} could not be found.")))?
                + 1
        }
    };
    let base = &state.config.public_url;
    let page: Vec<Value> = kept
        .iter()
        .skip(start)
        .take(limit.unwrap_or(usize::MAX))
        .map(|v| {
            if detail {
                body(base, v, &images)
            } else {
                summary(base, v)
            }
        })
        .collect();
    Ok(Json(json!({ "volumes": page })))
}

/// `GET /volumes/{id}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, id)): PathParams<(String, String)>,
) -> VolResult<Json<Value>> {
    let project = url_project(&caller, &project)?;
    let id = volume_id(&id)?;
    let scope = scope_of(&caller, project);
    let (v, images) = blocking(&state, move |store| {
        let v = find(store, scope, id)?;
        let images = images_of(store, std::slice::from_ref(&v))?;
        Ok((v, images))
    })
    .await?;
    Ok(Json(
        json!({"volume": body(&state.config.public_url, &v, &images)}),
    ))
}

/// The object under `key` of a request body (400 otherwise).
fn body_object(body: Value, key: &str) -> VolResult<Map<String, Value>> {
    match body {
        Value::Object(mut outer) => match outer.remove(key) {
            Some(Value::Object(inner)) => Ok(inner),
            _ => Err(VolError::bad(format!(
                "Missing required element '{key}' in request body."
            ))),
        },
        _ => Err(VolError::bad("The request body must be a JSON object.")),
    }
}

/// An optional text field (`null`: none).
fn text(object: &Map<String, Value>, key: &str) -> VolResult<Option<String>> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(VolError::bad(format!(
            "Invalid input for field/attribute {key}. Value: {other}. {other} is not a string."
        ))),
    }
}

/// A size in GiB: a whole number from 1, or its text (as Cinder takes it).
fn size(key: &str, value: Option<&Value>) -> VolResult<u32> {
    let bad = |shown: String| {
        VolError::bad(format!(
            "Invalid input for field/attribute {key}. Value: {shown}. It must be a whole number \
             of GiB from 1."
        ))
    };
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Err(VolError::bad(format!(
            "Invalid input received: '{key}' is a required property."
        )));
    };
    let n = match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<u64>().ok()
        }
        _ => None,
    };
    n.and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or_else(|| bad(value.to_string()))
}

/// Refuses what a request asks for that cumulo cannot make yet (a source, a type, a zone,
/// metadata, multi-attach).
fn refuse_unsupported(v: &Map<String, Value>) -> VolResult<()> {
    let given = |key: &str| v.get(key).is_some_and(|x| !x.is_null());
    for (key, what) in [
        ("snapshot_id", "volumes from snapshots"),
        ("source_volid", "volumes from other volumes"),
        ("backup_id", "volumes from backups"),
        ("consistencygroup_id", "consistency groups"),
        ("group_id", "volume groups"),
        ("volume_type", "volume types"),
    ] {
        if given(key) {
            return Err(VolError::bad(format!("{what} are not supported yet")));
        }
    }
    match v.get("availability_zone") {
        None | Some(Value::Null) => {}
        Some(Value::String(z)) if z == "nova" => {}
        Some(other) => {
            return Err(VolError::bad(format!(
                "Availability zone '{}' is invalid.",
                other.as_str().unwrap_or(&other.to_string())
            )));
        }
    }
    match v.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) if m.is_empty() => {}
        Some(_) => return Err(VolError::bad("volume metadata is not supported yet")),
    }
    if v.get("multiattach") == Some(&Value::Bool(true)) {
        return Err(VolError::bad("multi-attach volumes are not supported"));
    }
    Ok(())
}

/// The image a create names (`imageRef`, or `image_id`): an id, or a URL ending in one (400
/// otherwise, in Cinder's words); `None` for none.
fn image_of(v: &Map<String, Value>) -> VolResult<Option<Uuid>> {
    let invalid = || VolError::bad("Invalid image identifier or unable to access requested image.");
    let text = match (text(v, "imageRef")?, text(v, "image_id")?) {
        (None, None) => return Ok(None),
        (Some(t), _) | (None, Some(t)) => t,
    };
    let last = text.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    Uuid::parse_str(last).map(Some).map_err(|_| invalid())
}

/// `POST /volumes`: 202 with the volume, `available` (from an image too: see the module docs).
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
    JsonBody(request): JsonBody<Value>,
) -> VolResult<Response> {
    let project = url_project(&caller, &project)?;
    let v = body_object(request, "volume")?;
    refuse_unsupported(&v)?;
    let new = NewVolume {
        owner: project,
        name: text(&v, "name")?
            .or(text(&v, "display_name")?)
            .unwrap_or_default(),
        description: text(&v, "description")?
            .or(text(&v, "display_description")?)
            .unwrap_or_default(),
        size_gb: size("size", v.get("size"))?,
        image: None,
        bootable: false,
    };
    let image = image_of(&v)?;
    // The defaults: the store applies the project's own quota where one is set.
    let defaults = state.config.volume_limits;
    let (made, images) = blocking(&state, move |store| {
        let mut new = new;
        if let Some(id) = image {
            let image = match store.image(Scope::Tenant(project), id) {
                Ok(i) => i,
                Err(StoreError::NotFound { .. }) => {
                    return Err(VolError::bad(
                        "Invalid image identifier or unable to access requested image.",
                    ));
                }
                Err(e) => return Err(e.into()),
            };
            rules::check_volume_image(&image, new.size_gb, true)
                .map_err(|why| VolError::bad(format!("Invalid input received: {why}")))?;
            new.image = Some(id);
            new.bootable = true;
        }
        let made = store.create_volume(new, defaults)?;
        let images = images_of(store, std::slice::from_ref(&made))?;
        Ok((made, images))
    })
    .await?;
    let body = json!({"volume": body(&state.config.public_url, &made, &images)});
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// `PUT /volumes/{id}`: name and description (`display_name`, `display_description` too).
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, id)): PathParams<(String, String)>,
    JsonBody(request): JsonBody<Value>,
) -> VolResult<Json<Value>> {
    let project = url_project(&caller, &project)?;
    let id = volume_id(&id)?;
    let v = body_object(request, "volume")?;
    match v.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) if m.is_empty() => {}
        Some(_) => return Err(VolError::bad("volume metadata is not supported yet")),
    }
    let change = VolumeChange {
        name: text(&v, "name")?.or(text(&v, "display_name")?),
        description: text(&v, "description")?.or(text(&v, "display_description")?),
        ..VolumeChange::default()
    };
    let scope = scope_of(&caller, project);
    // The defaults: the store applies the project's own quota where one is set.
    let defaults = state.config.volume_limits;
    let (changed, images) = blocking(&state, move |store| {
        find(store, scope, id)?;
        let changed = store.change_volume(scope, id, change, defaults)?;
        let images = images_of(store, std::slice::from_ref(&changed))?;
        Ok((changed, images))
    })
    .await?;
    Ok(Json(
        json!({"volume": body(&state.config.public_url, &changed, &images)}),
    ))
}

/// `DELETE /volumes/{id}`: 202; 400 (Cinder's InvalidVolume) unless `available`, `error` or
/// `error_deleting` and detached. A volume on a node has its data removed there first; when the
/// node cannot remove it (or cannot be reached) the volume stays, `error_deleting`, and a new
/// delete tries again.
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, id)): PathParams<(String, String)>,
) -> VolResult<StatusCode> {
    let project = url_project(&caller, &project)?;
    let id = volume_id(&id)?;
    let scope = scope_of(&caller, project);
    let cluster = state.cluster.clone();
    blocking(&state, move |store| {
        let v = find(store, scope, id)?;
        if !DELETABLE.contains(&v.status) || v.attachment.is_some() {
            return Err(VolError::bad(format!(
                "Invalid volume: Volume status must be available or error and must not be \
                 attached (volume {id} is {}{}).",
                v.status.as_str(),
                if v.attachment.is_some() {
                    ", attached"
                } else {
                    ""
                }
            )));
        }
        rules::remove_volume(store, scope, &v, |node, id| {
            cluster.delete_volume_data(node, id)
        })?;
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

/// `POST /volumes/{id}/action`: `os-extend` (`{"os-extend": {"new_size": N}}`), 202; 400 if
/// not larger or not `available`, 413 over the gigabytes quota. `os-force_detach` (admins):
/// [`force_detach`].
pub async fn action(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, id)): PathParams<(String, String)>,
    JsonBody(request): JsonBody<Value>,
) -> VolResult<StatusCode> {
    let project = url_project(&caller, &project)?;
    let id = volume_id(&id)?;
    let Value::Object(mut actions) = request else {
        return Err(VolError::bad("The request body must be a JSON object."));
    };
    if let Some(args) = actions.remove("os-force_detach") {
        return force_detach(state, caller, project, id, args).await;
    }
    let Some(extend) = actions.remove("os-extend") else {
        let names: Vec<&String> = actions.keys().collect();
        return Err(VolError::bad(format!(
            "There is no such action: {names:?} (only os-extend and os-force_detach are \
             supported)"
        )));
    };
    let Value::Object(extend) = extend else {
        return Err(VolError::bad(
            "os-extend takes an object: {\"new_size\": N}",
        ));
    };
    let new_size = size("new_size", extend.get("new_size"))?;
    let scope = scope_of(&caller, project);
    // The defaults: the store applies the project's own quota where one is set.
    let defaults = state.config.volume_limits;
    blocking(&state, move |store| {
        let v = find(store, scope, id)?;
        if v.status != VolumeStatus::Available {
            return Err(VolError::bad(format!(
                "Invalid volume: Volume {id} status must be available to extend, but current \
                 status is: {}.",
                v.status.as_str()
            )));
        }
        if new_size <= v.size_gb {
            return Err(VolError::bad(format!(
                "Invalid input received: New size for extend must be greater than current \
                 size. (current: {}, extended: {new_size}).",
                v.size_gb
            )));
        }
        let change = VolumeChange {
            expect: Some(VolumeStatus::Available),
            size_gb: Some(new_size),
            ..VolumeChange::default()
        };
        store.change_volume(scope, id, change, defaults)?;
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

/// `{"os-force_detach": {"attachment_id"?, "connector"?}}` (admins only, 403 otherwise): the
/// volume detached from its server whatever its status, the guest's release not awaited (a
/// DETACH_VOLUME with `force` to the server's node: `detaching` until the node reports it gone,
/// or `available` at once for a server on no node); 202. 400 for a volume attached to nothing, or
/// an `attachment_id` that is not its attachment's.
async fn force_detach(
    state: ApiState,
    caller: Principal,
    project: Uuid,
    id: Uuid,
    args: Value,
) -> VolResult<StatusCode> {
    if !caller.is_admin() {
        return Err(VolError::new(
            StatusCode::FORBIDDEN,
            "Policy doesn't allow volume_extension:volume_admin_actions:force_detach to be \
             performed.",
        ));
    }
    let attachment = match &args {
        Value::Null => None,
        Value::Object(a) => match a.get("attachment_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(other) => {
                return Err(VolError::bad(format!(
                    "Invalid input for field/attribute attachment_id. Value: {other}."
                )));
            }
        },
        _ => return Err(VolError::bad("os-force_detach takes an object")),
    };
    let scope = scope_of(&caller, project);
    let by = caller.who();
    let cluster = state.cluster.clone();
    blocking(&state, move |store| {
        let v = find(store, scope, id)?;
        let Some(a) = &v.attachment else {
            return Err(VolError::bad(format!(
                "Invalid volume: volume {id} is {} and attached to nothing.",
                v.status.as_str()
            )));
        };
        if let Some(asked) = attachment
            && asked != a.id.to_string()
        {
            return Err(VolError::bad(format!(
                "Invalid input received: volume {id} has no attachment {asked}."
            )));
        }
        // A root disk stays with its server while the server is: deleting it frees the volume.
        let server_is = match store.instance(Scope::All, a.instance) {
            Ok(_) => true,
            Err(StoreError::NotFound { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        if rules::is_root(&v) && server_is {
            return Err(VolError::bad(format!(
                "Invalid volume: volume {id} is the root disk of server {}: delete the server to \
                 free it.",
                a.instance
            )));
        }
        cluster
            .force_detach_volume(id, &by)
            .map_err(|e| VolError::from(crate::api::ApiError::from(e)))?;
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_whole_numbers_from_one() {
        assert_eq!(size("size", Some(&json!(1))), Ok(1));
        assert_eq!(size("size", Some(&json!("12"))), Ok(12));
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!("1.5"),
            json!("x"),
            json!(""),
            json!(true),
            json!(u64::MAX),
        ] {
            assert!(size("size", Some(&bad)).is_err(), "{bad}");
        }
        assert!(size("size", None).is_err());
        assert!(size("size", Some(&Value::Null)).is_err());
    }

    #[test]
    fn sources_types_and_metadata_are_refused() {
        let refused = |v: Value| refuse_unsupported(v.as_object().unwrap()).is_err();
        assert!(refused(json!({"snapshot_id": "x"})));
        assert!(refused(json!({"volume_type": "ssd"})));
        assert!(refused(json!({"availability_zone": "az2"})));
        assert!(refused(json!({"metadata": {"a": "b"}})));
        assert!(!refused(json!({
            "imageRef": "x", "volume_type": null, "availability_zone": "nova", "metadata": {}
        })));
    }
}
