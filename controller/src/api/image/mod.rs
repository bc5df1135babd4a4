//! The OpenStack Image v2 subset at `/image`, in Glance's shape: version discovery, the images
//! a project sees (public and community ones, its own, and those shared with it) and lists
//! (filters `visibility` and `member_status`), images made through the API ([`write`]: create,
//! `PATCH`, delete, tags), their data ([`data`]: upload and download), the projects a shared
//! image is shared with ([`members`]) and the schemas ([`schemas`]). Images can also be
//! registered, with data the nodes already have, through the native API (`/cumulo/v1/images`).

mod data;
mod members;
mod schemas;
mod write;

pub(crate) use data::{blobs, keep_data, killed, saving};
pub(crate) use members::listed_by_default;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::clock::rfc3339;
use super::extract::{PathParams, QueryParams, path_id};
use super::table::{Body, Family, RouteTable, os};
use super::{ApiError, ApiState, Principal};
use store::{Image, ImageKind, Page, Scope};

/// The image routes.
pub fn routes() -> Router<ApiState> {
    table().router()
}

/// The image routes, one line each, as they are served and documented (`api/table.rs`).
#[rustfmt::skip]
pub(crate) fn table() -> RouteTable {
    let t = RouteTable::new(Family::Image);
    t.get("/image", versions, os("List API versions", 300).public())
        .get("/image/", versions, os("List API versions", 300).public())
        .get("/image/versions", versions_ok, os("List API versions", 200).public())
        .get("/image/v2", versions, os("List API versions", 300).public())
        .get("/image/v2/", versions, os("List API versions", 300).public())
        .get("/image/v2/images", list, os("List images", 200).errors(&[400]))
        .post("/image/v2/images", write::create, os("Create image", 201).errors(&[409]))
        .get("/image/v2/images/{id}", show, os("Show image", 200))
        .patch("/image/v2/images/{id}", write::patch, os("Update image", 200).request(Body::JsonPatch).errors(&[409, 415]))
        .delete("/image/v2/images/{id}", write::delete, os("Delete image", 204).errors(&[409]))
        .put("/image/v2/images/{id}/file", data::upload, os("Upload binary image data", 204).request(Body::Octets).streamed().errors(&[400, 408, 409, 413, 415, 503]))
        .get("/image/v2/images/{id}/file", data::download, os("Download binary image data", 200).also(&[204]).answer(Body::Octets).streamed())
        .put("/image/v2/images/{id}/tags/{tag}", write::add_tag, os("Add image tag", 204).request(Body::Empty))
        .delete("/image/v2/images/{id}/tags/{tag}", write::remove_tag, os("Delete image tag", 204))
        .get("/image/v2/images/{id}/members", members::list, os("List image members", 200))
        .post("/image/v2/images/{id}/members", members::add, os("Create image member", 200).errors(&[409]))
        .get("/image/v2/images/{id}/members/{member}", members::show, os("Show image member details", 200))
        .put("/image/v2/images/{id}/members/{member}", members::update, os("Update image member", 200))
        .delete("/image/v2/images/{id}/members/{member}", members::remove, os("Delete image member", 204))
        .get("/image/v2/schemas/image", schemas::image, os("Show image schema", 200).public())
        .get("/image/v2/schemas/images", schemas::images, os("Show images schema", 200).public())
        .get("/image/v2/schemas/member", schemas::member, os("Show image member schema", 200).public())
        .get("/image/v2/schemas/members", schemas::members, os("Show image members schema", 200).public())
}

fn versions_body(base: &str) -> Value {
    let version = |id: &str, status: &str| {
        json!({"id": id, "status": status, "links": [
            {"rel": "self", "href": format!("{base}/image/v2/")}
        ]})
    };
    json!({"versions": [version("v2.16", "CURRENT"), version("v2.0", "SUPPORTED")]})
}

async fn versions(State(state): State<ApiState>) -> Response {
    let body = versions_body(&state.config.public_url);
    (StatusCode::MULTIPLE_CHOICES, Json(body)).into_response()
}

async fn versions_ok(State(state): State<ApiState>) -> Json<Value> {
    Json(versions_body(&state.config.public_url))
}

/// Glance's disk format of an image kind.
pub fn disk_format(kind: ImageKind) -> &'static str {
    match kind {
        ImageKind::Qcow2 => "qcow2",
        ImageKind::Raw => "raw",
        ImageKind::Iso => "iso",
        ImageKind::Kernel => "aki",
        ImageKind::Ramdisk => "ari",
        ImageKind::Container => "raw",
    }
}

/// The container format of an image of `kind`.
pub(super) fn container_format(kind: ImageKind) -> &'static str {
    match kind {
        ImageKind::Kernel => "aki",
        ImageKind::Ramdisk => "ari",
        ImageKind::Container => "docker",
        _ => "bare",
    }
}

/// The Image API's view of an image.
pub(crate) fn body(image: &Image) -> Value {
    let file = image.file.as_ref();
    let mut view = json!({
        "id": image.id,
        "name": image.name,
        "status": image.status.as_str(),
        "visibility": image.visibility.as_str(),
        "protected": image.props.protected,
        "os_hidden": false,
        "owner": image.owner,
        "disk_format": disk_format(image.kind),
        "container_format": image.props.container_format.as_deref().unwrap_or(container_format(image.kind)),
        "size": file.map(|f| f.size),
        "virtual_size": null,
        "checksum": file.map(|f| f.md5.clone()),
        "os_hash_algo": file.map(|_| "sha512"),
        "os_hash_value": file.map(|f| f.sha512.clone()),
        "min_disk": image.props.min_disk,
        "min_ram": image.props.min_ram,
        "tags": image.props.tags,
        "created_at": rfc3339(image.created),
        "updated_at": rfc3339(image.updated),
        "self": format!("/v2/images/{}", image.id),
        "file": format!("/v2/images/{}/file", image.id),
        "schema": "/v2/schemas/image",
    });
    // Glance shows the free-form properties beside the fields.
    if let Some(fields) = view.as_object_mut() {
        for (key, value) in &image.props.properties {
            fields.entry(key.clone()).or_insert_with(|| json!(value));
        }
    }
    view
}

#[derive(Debug, Default, Deserialize)]
struct ImageQuery {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    visibility: Option<String>,
    #[serde(default)]
    member_status: Option<String>,
    #[serde(default)]
    os_hidden: Option<String>,
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    marker: Option<String>,
}

/// Whether `id` passes an `id` filter: one id, or `in:a,b,c`.
fn id_matches(filter: &str, id: &str) -> bool {
    match filter.strip_prefix("in:") {
        Some(list) => list.split(',').any(|x| x.trim() == id),
        None => filter == id,
    }
}

/// Glance's `os_hidden` filter (Image API 2.7): `true` lists only hidden images, `false` (the
/// default) the others; any case, anything else is a 400, as Glance answers.
fn hidden_filter(text: Option<&str>) -> Result<bool, ApiError> {
    match text.map(str::to_ascii_lowercase).as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::BadRequest(format!(
            "Invalid value '{other}' for 'os_hidden' filter. Valid values are 'true' or 'false'."
        ))),
    }
}

/// `GET /v2/images`: filters `id` (one, or `in:a,b`), `name` (exact), `visibility` (`public`,
/// `private`, `shared`, `community`, `all`; others' community images only when asked),
/// `member_status` (of the shared images listed: `accepted` when not said, `pending`,
/// `rejected`, `all`) and `os_hidden` (no image is hidden here: `true` lists none); pages by
/// `limit` and `marker`.
async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<ImageQuery>,
) -> Result<Json<Value>, ApiError> {
    // Admins too list as their project does (Glance's listing of a project's images).
    let tenant = caller.project()?;
    let scope = Scope::Tenant(tenant);
    let limit = match query.limit.as_deref() {
        None => Page::MAX_LIMIT as usize,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| ApiError::BadRequest("limit must be a whole number".into()))?
            .clamp(1, Page::MAX_LIMIT as usize),
    };
    let visibility = members::VisibilityFilter::parse(query.visibility.as_deref())?;
    let member_status = members::member_status_filter(query.member_status.as_deref())?;
    let hidden = hidden_filter(query.os_hidden.as_deref())?;
    let (images, memberships) = state
        .store(move |store| {
            let images = store.images(scope)?;
            Ok((images, members::memberships_of(store, tenant)?))
        })
        .await?;
    let images: Vec<Image> = images
        .into_iter()
        // No image is hidden (a create or patch that hides one is refused).
        .filter(|_| !hidden)
        .filter(|i| {
            members::listed(
                i,
                tenant,
                memberships.get(&i.id).copied(),
                visibility,
                member_status,
            )
        })
        .collect();
    let start = match &query.marker {
        None => 0,
        Some(marker) => images
            .iter()
            .position(|i| i.id.to_string() == *marker)
            .map(|i| i + 1)
            .ok_or_else(|| ApiError::BadRequest(format!("marker {marker} not found")))?,
    };
    let matching: Vec<&Image> = images
        .iter()
        .skip(start)
        .filter(|i| query.name.as_ref().is_none_or(|n| *n == i.name))
        .filter(|i| {
            query
                .id
                .as_ref()
                .is_none_or(|f| id_matches(f, &i.id.to_string()))
        })
        .collect();
    let page: Vec<Value> = matching.iter().take(limit).map(|i| body(i)).collect();
    let mut response = json!({
        "images": page,
        "first": "/v2/images",
        "schema": "/v2/schemas/images",
    });
    if matching.len() > limit
        && let Some(last) = matching.get(limit - 1)
    {
        // The next page keeps the listing's filters of words.
        let mut next = format!("/v2/images?limit={limit}&marker={}", last.id);
        for (key, value) in [
            ("visibility", &query.visibility),
            ("member_status", &query.member_status),
        ] {
            if let Some(v) = value
                .as_deref()
                .filter(|v| v.bytes().all(|b| b.is_ascii_alphabetic()))
            {
                next.push_str(&format!("&{key}={v}"));
            }
        }
        response["next"] = json!(next);
    }
    Ok(Json(response))
}

/// `GET /v2/images/{id}`.
async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("image", &id)?;
    let scope = caller.project_scope(true)?;
    let image = state
        .store(move |store| Ok(store.image(scope, id)?))
        .await?;
    Ok(Json(body(&image)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_filters() {
        for (text, hidden) in [(None, false), (Some("false"), false), (Some("True"), true)] {
            assert_eq!(hidden_filter(text).unwrap(), hidden, "{text:?}");
        }
        assert!(matches!(
            hidden_filter(Some("yes")),
            Err(ApiError::BadRequest(_))
        ));
    }

    #[test]
    fn id_filters() {
        assert!(id_matches("a", "a"));
        assert!(id_matches("in:b,a", "a"));
        assert!(!id_matches("in:b,c", "a"));
        assert!(!id_matches("b", "a"));
    }
}
