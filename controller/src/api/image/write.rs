//! Images made and changed through the Image API: `POST /v2/images` (queued, no data yet),
//! `PATCH /v2/images/{id}` (a JSON patch), `DELETE /v2/images/{id}`, and
//! `PUT`/`DELETE /v2/images/{id}/tags/{tag}`.
//!
//! Visibility: `private` (the caller's project owns it: the default), `shared` (its owner and
//! the projects it is shared with: [`super::members`]), `community` (every project sees it and
//! may boot it; listed to others only when they ask), or `public` (no owner: admins only, as
//! Glance's default policy). Disk formats: `qcow2`, `raw`, `iso`, and `aki` and `ari` (a kernel
//! and an initrd to boot directly: [`crate::images::kernel`]); container format `bare` (`aki` and `ari`
//! for those two, as Glance wants). A
//! field Glance keeps for itself (`status`, `size`, `checksum`, `os_hash_value`, ...) cannot be
//! set: 403, as Glance answers. Other keys are free-form string properties.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Map, Value};

use super::super::extract::{PathParams, parse_json, path_id};
use super::super::{ApiError, ApiState, Principal};
use super::body;
use store::{Image, ImageChange, ImageKind, ImageProps, ImageStatus, NewImage, Scope, Visibility};

/// Fields Glance sets itself: never from a request.
const READ_ONLY: [&str; 15] = [
    "id",
    "status",
    "size",
    "virtual_size",
    "checksum",
    "os_hash_algo",
    "os_hash_value",
    "created_at",
    "updated_at",
    "self",
    "file",
    "schema",
    "owner",
    "locations",
    "direct_url",
];
/// The most tags an image has, and free-form properties (Glance's `image_tag_quota` and
/// `image_property_quota`, 128 each).
const MAX_TAGS: usize = 128;
const MAX_PROPERTIES: usize = 128;
/// The longest tag or property value (Glance's 255).
const MAX_TEXT: usize = 255;

fn read_only(key: &str) -> ApiError {
    ApiError::Forbidden(format!("attribute '{key}' is read-only"))
}

fn disk_format(text: &str) -> Result<ImageKind, ApiError> {
    match text {
        "qcow2" => Ok(ImageKind::Qcow2),
        "raw" => Ok(ImageKind::Raw),
        "iso" => Ok(ImageKind::Iso),
        "aki" => Ok(ImageKind::Kernel),
        "ari" => Ok(ImageKind::Ramdisk),
        other => Err(ApiError::BadRequest(format!(
            "disk_format {other} is not one of qcow2, raw, iso, aki, ari"
        ))),
    }
}

/// The kind of an image of disk format `kind` in container format `container`: a `raw` image
/// in a `docker` container is a container's root file system (a tarball, as `docker export`
/// writes one); the other pairs as [`formats_agree`] says.
fn kind_of(kind: ImageKind, container: Option<&str>) -> Result<ImageKind, ApiError> {
    match (kind, container) {
        (ImageKind::Raw | ImageKind::Container, Some("docker")) => Ok(ImageKind::Container),
        (_, Some("docker")) => Err(ApiError::BadRequest(format!(
            "Invalid mix of disk and container formats: disk_format {} with container_format \
             docker (a docker container holds raw data: a root file system tarball)",
            super::disk_format(kind)
        ))),
        // Out of its docker container, a container's data is raw again.
        (ImageKind::Container, other) => {
            formats_agree(ImageKind::Raw, other).map(|()| ImageKind::Raw)
        }
        (kind, other) => formats_agree(kind, other).map(|()| kind),
    }
}

/// Glance's rule for the Amazon kinds: a kernel (`aki`) or ramdisk (`ari`) image has the same
/// container format as its disk format, and those container formats name nothing else.
fn formats_agree(kind: ImageKind, container: Option<&str>) -> Result<(), ApiError> {
    let amazon = |k: ImageKind| match k {
        ImageKind::Kernel => Some("aki"),
        ImageKind::Ramdisk => Some("ari"),
        _ => None,
    };
    // Not said: the image shows the one its disk format implies.
    let Some(container) = container else {
        return Ok(());
    };
    let agree = match amazon(kind) {
        Some(name) => container == name,
        None => container == "bare",
    };
    if agree {
        Ok(())
    } else {
        Err(ApiError::BadRequest(format!(
            "Invalid mix of disk and container formats: disk_format {} with container_format \
             {container} (aki and ari images have the container format of their disk format)",
            super::disk_format(kind)
        )))
    }
}

fn text_of<'a>(key: &str, value: &'a Value) -> Result<&'a str, ApiError> {
    let text = value
        .as_str()
        .ok_or_else(|| ApiError::BadRequest(format!("{key} must be a string")))?;
    if text.len() > MAX_TEXT {
        return Err(ApiError::BadRequest(format!(
            "{key} is longer than {MAX_TEXT} bytes"
        )));
    }
    Ok(text)
}

fn count_of(key: &str, value: &Value) -> Result<u32, ApiError> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ApiError::BadRequest(format!("{key} must be a whole number")))
}

fn tags_of(value: &Value) -> Result<Vec<String>, ApiError> {
    let list = value
        .as_array()
        .ok_or_else(|| ApiError::BadRequest("tags must be a list of strings".into()))?;
    let mut tags: Vec<String> = Vec::new();
    for t in list {
        let t = text_of("a tag", t)?.to_string();
        if !tags.contains(&t) {
            tags.push(t);
        }
    }
    if tags.len() > MAX_TAGS {
        return Err(ApiError::OverLimit(format!(
            "an image has at most {MAX_TAGS} tags"
        )));
    }
    Ok(tags)
}

/// What a request sets: the fields a create or a patch may name.
#[derive(Debug, Default)]
struct Fields {
    name: Option<String>,
    kind: Option<ImageKind>,
    visibility: Option<Visibility>,
    props: ImageProps,
}

/// Applies `key: value` to `fields` (whose `props` start as the image's).
fn set(fields: &mut Fields, key: &str, value: &Value) -> Result<(), ApiError> {
    if READ_ONLY.contains(&key) {
        return Err(read_only(key));
    }
    match key {
        "name" => fields.name = Some(text_of("name", value)?.to_string()),
        "disk_format" => fields.kind = Some(disk_format(text_of("disk_format", value)?)?),
        "container_format" => match text_of("container_format", value)? {
            format @ ("bare" | "aki" | "ari" | "docker") => {
                fields.props.container_format = Some(format.into())
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "container_format {other} is not offered: bare, aki, ari or docker"
                )));
            }
        },
        "visibility" => {
            let text = text_of("visibility", value)?;
            fields.visibility = Some(Visibility::parse(text).ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "visibility {text} is not one of public, private, shared, community"
                ))
            })?)
        }
        "min_disk" => fields.props.min_disk = count_of("min_disk", value)?,
        "min_ram" => fields.props.min_ram = count_of("min_ram", value)?,
        "protected" => {
            fields.props.protected = value
                .as_bool()
                .ok_or_else(|| ApiError::BadRequest("protected must be true or false".into()))?
        }
        "tags" => fields.props.tags = tags_of(value)?,
        "os_hidden" => {
            if value != &Value::Bool(false) {
                return Err(ApiError::BadRequest(
                    "hidden images are not supported".into(),
                ));
            }
        }
        property => {
            let text = text_of(property, value)?.to_string();
            if property.is_empty() || property.len() > MAX_TEXT {
                return Err(ApiError::BadRequest(format!(
                    "property name {property:?} is empty or too long"
                )));
            }
            fields.props.properties.insert(property.to_string(), text);
            if fields.props.properties.len() > MAX_PROPERTIES {
                return Err(ApiError::OverLimit(format!(
                    "an image has at most {MAX_PROPERTIES} properties"
                )));
            }
        }
    }
    Ok(())
}

/// The owner an image of `caller` gets for `visibility`: none for a public one (admins only),
/// else its project.
fn owner_for(caller: &Principal, visibility: Visibility) -> Result<Option<uuid::Uuid>, ApiError> {
    if visibility == Visibility::Public {
        caller
            .require_admin()
            .map_err(|_| ApiError::Forbidden("only admins may make an image public".into()))?;
        Ok(None)
    } else {
        caller.project().map(Some)
    }
}

/// `POST /v2/images`: a queued image (201).
pub(super) async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: Map<String, Value> = parse_json(&bytes)?;
    let mut fields = Fields::default();
    for (key, value) in &request {
        if key == "id" {
            // Glance lets a client choose the id; cumulo chooses it.
            return Err(ApiError::BadRequest(
                "choosing an image's id is not supported".into(),
            ));
        }
        if value.is_null() {
            continue;
        }
        set(&mut fields, key, value)?;
    }
    let name = fields
        .name
        .ok_or_else(|| ApiError::BadRequest("an image needs a name".into()))?;
    let visibility = fields.visibility.unwrap_or(Visibility::Private);
    let owner = owner_for(&caller, visibility)?;
    let kind = kind_of(
        fields.kind.unwrap_or(ImageKind::Raw),
        fields.props.container_format.as_deref(),
    )?;
    let new = NewImage {
        owner,
        name,
        kind,
        reference: String::new(),
    };
    let props = fields.props;
    let image = state
        .store(move |store| Ok(store.create_queued_image(new, visibility, props)?))
        .await?;
    Ok((StatusCode::CREATED, Json(body(&image))))
}

/// The image `id` as the caller may change it (admins: any; others: their project's).
pub(super) async fn owned(
    state: &ApiState,
    caller: &Principal,
    id: uuid::Uuid,
) -> Result<Image, ApiError> {
    let scope = caller.project_scope(true)?;
    let image = state
        .store(move |store| Ok(store.image(scope, id)?))
        .await?;
    if !scope.owns(image.owner) {
        return Err(ApiError::Forbidden(format!(
            "image {id} is not the project's to change"
        )));
    }
    Ok(image)
}

/// The scope the caller changes images in.
fn change_scope(caller: &Principal) -> Result<Scope, ApiError> {
    caller.project_scope(true)
}

/// `PATCH /v2/images/{id}`: a JSON patch (`application/openstack-images-v2.1-json-patch`) of
/// `add`, `replace` and `remove` operations on `/name`, `/visibility`, `/tags`, `/min_disk`,
/// `/min_ram`, `/protected`, `/container_format`, `/disk_format` (while queued) and free-form
/// properties (`remove` only for those).
pub(super) async fn patch(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("image", &id)?;
    let kind = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !kind.starts_with("application/openstack-images-v2.1-json-patch")
        && !kind.starts_with("application/openstack-images-v2.0-json-patch")
    {
        return Err(ApiError::UnsupportedMediaType(format!(
            "a PATCH needs Content-Type application/openstack-images-v2.1-json-patch, not {kind:?}"
        )));
    }
    let ops: Vec<Value> = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("a JSON patch is a list of operations: {e}")))?;
    let image = owned(&state, &caller, id).await?;
    let mut fields = Fields {
        props: image.props.clone(),
        ..Fields::default()
    };
    for op in &ops {
        let verb = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op.get("path").and_then(Value::as_str).unwrap_or("");
        let key = path.strip_prefix('/').unwrap_or("");
        if key.is_empty() || key.contains('/') {
            return Err(ApiError::BadRequest(format!(
                "path {path:?} is not one of an image's fields"
            )));
        }
        match verb {
            "add" | "replace" => {
                let value = op
                    .get("value")
                    .ok_or_else(|| ApiError::BadRequest(format!("{verb} {path} needs a value")))?;
                if key == "disk_format" && image.status != ImageStatus::Queued {
                    return Err(ApiError::Forbidden(
                        "disk_format can change only while the image is queued".into(),
                    ));
                }
                set(&mut fields, key, value)?;
            }
            "remove" => {
                if READ_ONLY.contains(&key) {
                    return Err(read_only(key));
                }
                if fields.props.properties.remove(key).is_none() {
                    return Err(ApiError::Conflict(format!(
                        "the image has no property {key} to remove"
                    )));
                }
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "JSON patch operation {other:?} is not one of add, replace, remove"
                )));
            }
        }
    }
    // The container format says whether raw data is a container's root file system: a
    // change of kind, which (as the disk format) only a queued image may have.
    let kind = kind_of(
        fields.kind.unwrap_or(image.kind),
        fields
            .props
            .container_format
            .as_deref()
            .or(Some(super::container_format(image.kind))),
    )?;
    if kind != image.kind {
        if image.status != ImageStatus::Queued {
            return Err(ApiError::Conflict(
                "disk_format and container_format can change the image's kind only while it is queued"
                    .into(),
            ));
        }
        fields.kind = Some(kind);
    }
    // An image made public loses its owner (admins only); a public one made private, shared
    // or community goes to the caller's project. Between private, shared and community the
    // owner stays (and so do the members, which count only while it is shared).
    let (owner, visibility) = match fields.visibility {
        Some(v) if v != image.visibility => {
            let public = Visibility::Public;
            let owner = if (v == public) != (image.visibility == public) {
                Some(owner_for(&caller, v)?)
            } else {
                None
            };
            (owner, Some(v))
        }
        _ => (None, None),
    };
    let change = ImageChange {
        name: fields.name,
        kind: fields.kind,
        owner,
        visibility,
        props: Some(fields.props),
        ..ImageChange::default()
    };
    let scope = change_scope(&caller)?;
    let image = state
        .store(move |store| Ok(store.change_image(scope, id, change)?))
        .await?;
    Ok(Json(body(&image)))
}

/// `DELETE /v2/images/{id}` (204): refused while protected (403) or used by a workload (409);
/// its data goes when no other image has the same.
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("image", &id)?;
    let image = owned(&state, &caller, id).await?;
    if image.props.protected {
        return Err(ApiError::Forbidden(format!(
            "image {id} is protected: unprotect it first"
        )));
    }
    let scope = change_scope(&caller)?;
    let orphan = state
        .store(move |store| {
            // The workloads the Compute API made for servers of this image go with it, where
            // no instance uses them (those that one uses keep the image: 409).
            for workload in store.workloads(Scope::All)? {
                if workload.image == id && crate::api::compute::is_implicit(&workload) {
                    match store.delete_workload(Scope::All, workload.id) {
                        Ok(()) | Err(store::StoreError::Conflict(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            store.delete_image(scope, id).map_err(|e| match e {
                store::StoreError::Conflict(_) => store::StoreError::Conflict(format!(
                    "image {id} is in use by a server or a workload"
                )),
                other => other,
            })?;
            let hash = image.file.map(|f| f.sha512);
            let shared = hash.as_ref().is_some_and(|h| {
                store.images(Scope::All).is_ok_and(|all| {
                    all.iter()
                        .any(|i| i.file.as_ref().is_some_and(|f| &f.sha512 == h))
                })
            });
            Ok(hash.filter(|_| !shared))
        })
        .await?;
    if let (Some(hash), Some(blobs)) = (orphan, state.config.images.clone()) {
        let removed = tokio::task::spawn_blocking(move || blobs.remove(&hash)).await;
        if !matches!(removed, Ok(Ok(()))) {
            tracing::warn!(image = %id, "the image's data could not be removed");
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn retag(
    state: ApiState,
    caller: Principal,
    id: String,
    tag: String,
    add: bool,
) -> Result<StatusCode, ApiError> {
    let id = path_id("image", &id)?;
    let image = owned(&state, &caller, id).await?;
    let mut props = image.props.clone();
    if add {
        text_of("a tag", &Value::String(tag.clone()))?;
        if !props.tags.contains(&tag) {
            props.tags.push(tag);
        }
        if props.tags.len() > MAX_TAGS {
            return Err(ApiError::OverLimit(format!(
                "an image has at most {MAX_TAGS} tags"
            )));
        }
    } else {
        let before = props.tags.len();
        props.tags.retain(|t| *t != tag);
        if props.tags.len() == before {
            return Err(ApiError::NotFound(format!("image {id} has no tag {tag}")));
        }
    }
    let scope = change_scope(&caller)?;
    let change = ImageChange {
        props: Some(props),
        ..ImageChange::default()
    };
    state
        .store(move |store| Ok(store.change_image(scope, id, change)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v2/images/{id}/tags/{tag}` (204).
pub(super) async fn add_tag(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, tag)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    retag(state, caller, id, tag, true).await
}

/// `DELETE /v2/images/{id}/tags/{tag}` (204; 404 for a tag it does not have).
pub(super) async fn remove_tag(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, tag)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    retag(state, caller, id, tag, false).await
}
