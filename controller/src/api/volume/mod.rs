//! The OpenStack Block Storage v3 (Cinder) subset at `/volume`, as `openstack volume
//! create/list/show/set/delete` and `openstack quota show` and `quota set` use it (through
//! openstacksdk). Errors
//! in Cinder's shape, keyed by the fault: `{"itemNotFound": {"code": 404, "message": "..."}}`.
//!
//! - version documents at `/volume/` and `/volume/v3/` (microversions [`MIN_VERSION`] to
//!   [`MAX_VERSION`]; an `OpenStack-API-Version: volume X` outside them is a 406);
//! - volumes ([`volumes`]) under `/volume/v3/{project_id}`: `available` from their creation,
//!   attached to servers through the Compute API's `os-volume_attachments` (their `status` and
//!   `attachments` show it), detached by force by admins (`os-force_detach`); one made from an
//!   image (`imageRef`) is bootable, its file made from the image by the node that first uses
//!   it;
//! - quotas ([`quotas`]): `volumes` and `gigabytes`, the controller's [`VolumeLimits`]
//!   (`ApiConfig::volume_limits`) for every tenant until an admin sets the tenant's own (`PUT`),
//!   which the store keeps and applies in place of them.
//!
//! The `{project_id}` of the URL must be the token's project (Cinder's 400 "Malformed request
//! url" otherwise). Another project's volume is a 404 to a member; admins reach any volume by id,
//! and list every project's with `all_tenants`.
//!
//! [`VolumeLimits`]: store::VolumeLimits

mod quotas;
mod volumes;

use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use super::table::{Family, RouteTable, os, own};
use super::{ApiError, ApiState, Principal};
use store::{QuotaKind, StoreError};

/// The base path of version 3 (the project id follows).
pub const BASE: &str = "/volume/v3";

/// The oldest microversion served.
pub const MIN_VERSION: (u32, u32) = (3, 0);

/// The newest microversion served: 3.0, since none of the later microversions' changes is
/// implemented.
pub const MAX_VERSION: (u32, u32) = (3, 0);

/// The header that carries a microversion.
const VERSION_HEADER: &str = "openstack-api-version";

/// The routes, with Cinder's error shape and microversion check.
pub fn routes() -> Router<ApiState> {
    table()
        .router()
        .layer(middleware::map_response(cinder_errors))
        .layer(middleware::from_fn(microversion))
}

/// The block storage routes, one line each, as they are served and documented
/// (`api/table.rs`).
#[rustfmt::skip]
pub(crate) fn table() -> RouteTable {
    let t = RouteTable::new(Family::Volume);
    t.get("/volume", versions, os("List All Api Versions", 300).public())
        .get("/volume/", versions, os("List All Api Versions", 300).public())
        .get(BASE, version, os("Show API v3 details", 200).public())
        .get("/volume/v3/", version, os("Show API v3 details", 200).public())
        .get("/volume/v3/{project}/volumes", volumes::list, os("List accessible volumes", 200).errors(&[400]))
        .post("/volume/v3/{project}/volumes", volumes::create, os("Create a volume", 202).errors(&[409, 503]))
        .get("/volume/v3/{project}/volumes/detail", volumes::list, os("List accessible volumes with details", 200).errors(&[400]))
        .get("/volume/v3/{project}/volumes/{id}", volumes::show, os("Show a volume's details", 200).errors(&[400]))
        .put("/volume/v3/{project}/volumes/{id}", volumes::update, os("Update a volume", 200))
        .delete("/volume/v3/{project}/volumes/{id}", volumes::delete, os("Delete a volume", 202).errors(&[400]))
        .post("/volume/v3/{project}/volumes/{id}/action", volumes::action, own("Volume actions", 202).actions(VOLUME_ACTIONS).errors(&[503]))
        .get("/volume/v3/{project}/os-quota-sets/{target}", quotas::show, os("Show quotas for a project", 200).errors(&[400]))
        .put("/volume/v3/{project}/os-quota-sets/{target}", quotas::update, os("Update quotas for a project", 200))
        .get("/volume/v3/{project}/os-quota-sets/{target}/defaults", quotas::defaults, os("Get default quotas for a project", 200).errors(&[400]))
}

/// The API reference's names of the actions of `POST /volumes/{id}/action`.
const VOLUME_ACTIONS: &[&str] = &["Extend a volume size", "Force detach a volume"];

/// A Block Storage API error: an HTTP status and a message, in Cinder's fault shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolError {
    status: StatusCode,
    message: String,
}

impl VolError {
    /// An error of `status`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> VolError {
        VolError {
            status,
            message: message.into(),
        }
    }

    /// A 400.
    pub fn bad(message: impl Into<String>) -> VolError {
        VolError::new(StatusCode::BAD_REQUEST, message)
    }

    /// A 404 for volume `id`.
    pub fn no_volume(id: &str) -> VolError {
        VolError::new(
            StatusCode::NOT_FOUND,
            format!("Volume {id} could not be found."),
        )
    }

    /// Cinder's fault name for the status.
    fn key(&self) -> &'static str {
        match self.status.as_u16() {
            400 => "badRequest",
            401 => "unauthorized",
            403 => "forbidden",
            404 => "itemNotFound",
            405 => "badMethod",
            406 => "notAcceptable",
            409 => "conflictingRequest",
            413 | 429 => "overLimit",
            415 => "badMediaType",
            503 => "serviceUnavailable",
            _ => "computeFault",
        }
    }
}

impl From<ApiError> for VolError {
    fn from(error: ApiError) -> VolError {
        if let ApiError::Internal(detail) = &error {
            tracing::error!(%detail, "internal error answering a block storage request");
        }
        VolError::new(error.status(), error.public_message())
    }
}

impl From<StoreError> for VolError {
    fn from(error: StoreError) -> VolError {
        match error {
            StoreError::QuotaExceeded {
                what: QuotaKind::Volumes,
                limit,
            } => VolError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "VolumeLimitExceeded: Maximum number of volumes allowed ({limit}) exceeded \
                     for quota 'volumes'."
                ),
            ),
            StoreError::QuotaExceeded {
                what: QuotaKind::Gigabytes,
                limit,
            } => VolError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "VolumeSizeExceedsAvailableQuota: Requested volume or snapshot exceeds \
                     allowed gigabytes quota. Quota is {limit}G."
                ),
            ),
            StoreError::Invalid(message) => VolError::bad(format!("Invalid input: {message}")),
            // A volume in a state that forbids the request: Cinder's InvalidVolume, a 400.
            StoreError::Conflict(message) => VolError::bad(format!("Invalid volume: {message}")),
            other => ApiError::from(other).into(),
        }
    }
}

impl IntoResponse for VolError {
    fn into_response(self) -> Response {
        let body = json!({ self.key(): {"code": self.status.as_u16(), "message": self.message} });
        let mut response = (self.status, Json(body)).into_response();
        response.extensions_mut().insert(Rendered);
        response
    }
}

/// Marks a response already in Cinder's shape.
#[derive(Debug, Clone, Copy)]
struct Rendered;

/// Re-renders the errors of extractors (authentication, bodies, paths) in Cinder's shape.
async fn cinder_errors(response: Response) -> Response {
    super::error::rerender::<Rendered>(response, |e| VolError::from(e).into_response())
}

/// A handler's result.
pub type VolResult<T> = Result<T, VolError>;

/// A microversion as written (`3.0`).
fn version_text((major, minor): (u32, u32)) -> String {
    format!("{major}.{minor}")
}

/// The microversion a request asks for: `None` for none (the minimum), `latest` the maximum.
fn asked_version(header: Option<&HeaderValue>) -> Result<(u32, u32), VolError> {
    let Some(text) = header.and_then(|h| h.to_str().ok()) else {
        return Ok(MIN_VERSION);
    };
    // `volume 3.0`, possibly among other services' (`compute 2.1, volume 3.0`).
    let Some(asked) = text.split(',').find_map(|part| {
        let mut words = part.split_whitespace();
        match (words.next(), words.next()) {
            (Some(service), Some(v)) if service.eq_ignore_ascii_case("volume") => Some(v),
            _ => None,
        }
    }) else {
        return Ok(MIN_VERSION);
    };
    if asked.eq_ignore_ascii_case("latest") {
        return Ok(MAX_VERSION);
    }
    let parsed = asked
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| VolError::bad(format!("Invalid API version request string {asked}.")))?;
    if parsed < MIN_VERSION || parsed > MAX_VERSION {
        return Err(VolError::new(
            StatusCode::NOT_ACCEPTABLE,
            format!(
                "Version {asked} is not supported by the API. Minimum is {} and maximum is {}.",
                version_text(MIN_VERSION),
                version_text(MAX_VERSION)
            ),
        ));
    }
    Ok(parsed)
}

/// Refuses microversions outside [`MIN_VERSION`]..=[`MAX_VERSION`] (406), and says which one
/// answered.
async fn microversion(request: Request, next: Next) -> Response {
    let version = match asked_version(request.headers().get(VERSION_HEADER)) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let mut response = next.run(request).await;
    if let Ok(value) = HeaderValue::from_str(&format!("volume {}", version_text(version))) {
        response.headers_mut().insert(VERSION_HEADER, value);
    }
    response.headers_mut().insert(
        axum::http::header::VARY,
        HeaderValue::from_static("OpenStack-API-Version"),
    );
    response
}

fn version_body(base: &str) -> Value {
    json!({
        "id": "v3.0",
        "status": "CURRENT",
        "version": version_text(MAX_VERSION),
        "min_version": version_text(MIN_VERSION),
        "updated": "2024-01-01T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{base}{BASE}/")}],
        "media-types": [{
            "base": "application/json",
            "type": "application/vnd.openstack.volume+json;version=3",
        }],
    })
}

/// `GET /volume/`: 300, the one version.
async fn versions(State(state): State<ApiState>) -> Response {
    let body = json!({"versions": [version_body(&state.config.public_url)]});
    (StatusCode::MULTIPLE_CHOICES, Json(body)).into_response()
}

/// `GET /volume/v3/`.
async fn version(State(state): State<ApiState>) -> Json<Value> {
    Json(json!({"versions": [version_body(&state.config.public_url)]}))
}

/// The project the URL names, which must be the caller's (a certificate login, which has no
/// project, is an admin's and takes the URL's).
fn url_project(caller: &Principal, project: &str) -> VolResult<Uuid> {
    let malformed = || VolError::bad("Malformed request url");
    let id = Uuid::parse_str(project).map_err(|_| malformed())?;
    match caller.project {
        Some(own) if own == id => Ok(id),
        Some(_) => Err(malformed()),
        None if caller.is_admin() => Ok(id),
        None => Err(VolError::new(
            StatusCode::FORBIDDEN,
            "this needs a project-scoped token",
        )),
    }
}

/// Runs `f` with the store on the blocking pool.
async fn blocking<T, F>(state: &ApiState, f: F) -> VolResult<T>
where
    T: Send + 'static,
    F: FnOnce(&dyn store::Store) -> VolResult<T> + Send + 'static,
{
    let store = state.store.clone();
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| VolError::from(ApiError::Internal(format!("store task failed: {e}"))))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microversions_are_read_and_bounded() {
        let v = |s: &str| asked_version(Some(&HeaderValue::from_str(s).unwrap()));
        assert_eq!(asked_version(None), Ok((3, 0)));
        assert_eq!(v("volume 3.0"), Ok((3, 0)));
        assert_eq!(v("volume latest"), Ok(MAX_VERSION));
        assert_eq!(v("compute 2.90"), Ok((3, 0)));
        assert_eq!(v("volume 3.70").unwrap_err().status.as_u16(), 406);
        assert_eq!(v("volume 2.0").unwrap_err().status.as_u16(), 406);
        assert_eq!(v("volume x").unwrap_err().status.as_u16(), 400);
    }

    #[test]
    fn quota_errors_are_413_over_limit() {
        let e = VolError::from(StoreError::QuotaExceeded {
            what: QuotaKind::Gigabytes,
            limit: 5,
        });
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(e.key(), "overLimit");
        assert!(e.message.contains("gigabytes"), "{}", e.message);
    }
}
