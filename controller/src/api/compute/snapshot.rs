//! The `createImage` server action (`openstack server image create`): `{"createImage": {"name":
//! ..., "metadata": {...}}}` → `202` with `Location` naming the new image
//! (`/image/v2/images/{id}`; Compute 2.1 has no body for it).
//!
//! The image is made at once, `saving`, private to the server's project, `qcow2`, with the
//! properties `image_type: snapshot` and `instance_uuid`, and the request's metadata as further
//! properties. Then, in the background, the controller asks the server's node for a copy of its
//! root disk (the node endpoint's `GET /v1/instances/{id}/disk`: a running server is paused
//! for the copy) and keeps it in the image store as it arrives, hashed as an upload is: the
//! image is `active` once it is all there, `killed` if the copy fails (the cause in the
//! controller's log). A server that is not active, stopped, paused or suspended on a node is a
//! 409; an unknown one 404; a bad body 400.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

use crate::api::{ApiError, ApiState, Principal};
use store::{ImageKind, ImageProps, ImageStatus, NewImage, Visibility};

/// The longest name or metadata key or value (Nova's 255).
const MAX_TEXT: usize = 255;
/// The most metadata items (Nova's default `metadata_items` quota).
const MAX_METADATA: usize = 128;

/// What a `createImage` asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// The image's name.
    pub name: String,
    /// Its extra properties.
    pub metadata: BTreeMap<String, String>,
}

/// Parses `createImage`'s value.
pub fn parse(args: &Value) -> Result<Request, ApiError> {
    let bad = |why: &str| ApiError::BadRequest(format!("createImage: {why}"));
    let object = args
        .as_object()
        .ok_or_else(|| bad("the action's value must be an object"))?;
    if let Some(key) = object.keys().find(|k| *k != "name" && *k != "metadata") {
        return Err(bad(&format!("unknown field {key:?}")));
    }
    let name = match object.get("name") {
        Some(Value::String(name)) if !name.trim().is_empty() && name.len() <= MAX_TEXT => {
            name.clone()
        }
        _ => return Err(bad("name must be a non-empty string of at most 255 bytes")),
    };
    let mut metadata = BTreeMap::new();
    match object.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(items)) => {
            if items.len() > MAX_METADATA {
                return Err(ApiError::OverLimit(format!(
                    "createImage: at most {MAX_METADATA} metadata items"
                )));
            }
            for (key, value) in items {
                let Some(value) = value.as_str() else {
                    return Err(bad(&format!("metadata {key:?} must be a string")));
                };
                if key.is_empty() || key.len() > MAX_TEXT || value.len() > MAX_TEXT {
                    return Err(bad(&format!(
                        "metadata {key:?}: keys of 1 to 255 bytes, values of at most 255"
                    )));
                }
                metadata.insert(key.clone(), value.to_string());
            }
        }
        Some(_) => return Err(bad("metadata must be an object of strings")),
    }
    Ok(Request { name, metadata })
}

/// `POST /servers/{id}/action` with `createImage` (its value is `args`).
pub async fn create_image(
    state: ApiState,
    caller: Principal,
    id: Uuid,
    args: &Value,
) -> Result<Response, ApiError> {
    let request = parse(args)?;
    let blobs = crate::api::image::blobs(&state)?;
    let scope = caller.project_scope(false)?;
    let source = state
        .cluster(move |_, cluster| Ok(cluster.disk_source(scope, id)?))
        .await?;
    let project = caller.project()?;
    // A server that booted a kernel: its disk boots with the same kernel.
    let kernel_props = state
        .store(move |store| {
            let instance = store.instance(scope, id)?;
            let workload = store.workload(scope, instance.workload)?;
            // An image the project no longer sees leaves nothing to keep.
            match store.image(scope, workload.image) {
                Ok(image) => Ok(crate::images::kernel::snapshot_properties(&image)),
                Err(store::StoreError::NotFound { .. }) => Ok(Default::default()),
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    let mut properties = kernel_props;
    properties.extend(request.metadata);
    let mut props = ImageProps {
        container_format: Some("bare".into()),
        properties,
        ..ImageProps::default()
    };
    props
        .properties
        .insert("image_type".into(), "snapshot".into());
    props
        .properties
        .insert("instance_uuid".into(), id.to_string());
    let new = NewImage {
        owner: Some(project),
        name: request.name,
        kind: ImageKind::Qcow2,
        reference: String::new(),
    };
    let image = state
        .store(move |store| Ok(store.create_queued_image(new, Visibility::Private, props)?))
        .await?;
    let image_scope = caller.project_scope(true)?;
    crate::api::image::saving(&state, image_scope, image.id).await?;
    let (task_state, image_id) = (state.clone(), image.id);
    tokio::spawn(async move {
        let state = task_state;
        let copied = match crate::engine::console::fetch_disk(&source, id).await {
            Ok(response) if response.status() == hyper::StatusCode::OK => {
                let body = axum::body::Body::new(response.into_body());
                crate::api::image::keep_data(
                    &state,
                    &blobs,
                    image_scope,
                    image_id,
                    body,
                    ImageStatus::Killed,
                )
                .await
                .map(drop)
                .map_err(|e| e.to_string())
            }
            Ok(response) => {
                let status = response.status();
                let text = http_body_util::BodyExt::collect(http_body_util::Limited::new(
                    response.into_body(),
                    4096,
                ))
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
                Err(format!("node {} answered {status}: {text}", source.node))
            }
            Err(why) => Err(format!("node {} at {}: {why}", source.node, source.addr)),
        };
        match copied {
            Ok(()) => tracing::info!(server = %id, image = %image_id, "snapshot kept"),
            Err(why) => {
                tracing::warn!(server = %id, image = %image_id, error = %why, "snapshot failed");
                crate::api::image::killed(&state, image_scope, image_id).await;
            }
        }
    });
    let location = format!("{}/image/v2/images/{}", state.config.public_url, image.id);
    let mut response = StatusCode::ACCEPTED.into_response();
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_parsed_as_nova_takes_them() {
        let got = parse(&json!({"name": "snap", "metadata": {"a": "b"}})).unwrap();
        assert_eq!(got.name, "snap");
        assert_eq!(got.metadata.get("a").map(String::as_str), Some("b"));
        assert!(parse(&json!({"name": "snap"})).unwrap().metadata.is_empty());
        for bad in [
            json!(null),
            json!({}),
            json!({"name": ""}),
            json!({"name": 5}),
            json!({"name": "x".repeat(256)}),
            json!({"name": "s", "metadata": []}),
            json!({"name": "s", "metadata": {"a": 1}}),
            json!({"name": "s", "other": 1}),
        ] {
            assert_eq!(
                parse(&bad).err().map(|e| e.status().as_u16()),
                Some(400),
                "{bad}"
            );
        }
        let many: serde_json::Map<String, Value> =
            (0..129).map(|i| (format!("k{i}"), json!("v"))).collect();
        assert_eq!(
            parse(&json!({"name": "s", "metadata": many}))
                .err()
                .map(|e| e.status().as_u16()),
            Some(403)
        );
    }
}
