//! An image's data: `PUT /v2/images/{id}/file` (upload, streamed to the image store while it is
//! hashed, never held in memory) and `GET /v2/images/{id}/file` (download, streamed).
//!
//! An upload takes a `queued` image to `saving`, then to `active` with its size, MD5
//! (`checksum`) and SHA-512 (`os_hash_value`) once the whole body is kept; a body cut short,
//! one over the size cap (413), or one whose chunks stop coming for [`CHUNK_TIMEOUT`] (408)
//! leaves the image `queued` again and nothing in the store. A second upload to an image that
//! is not `queued` is a 409. The body must be `application/octet-stream` (415 otherwise).

use axum::body::Body;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use futures_util::StreamExt;
use md5::Digest as _;
use md5::Md5;
use std::sync::Arc;
use std::time::Duration;

use super::super::extract::{PathParams, path_id};
use super::super::{ApiError, ApiState, Principal};
use crate::images::ImageBlobs;
use store::{ImageChange, ImageFile, ImageStatus, Scope};
use uuid::Uuid;

/// How long an upload may wait for its next chunk.
pub const CHUNK_TIMEOUT: Duration = Duration::from_secs(60);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The controller's image store (503 without one).
pub(crate) fn blobs(state: &ApiState) -> Result<Arc<dyn ImageBlobs>, ApiError> {
    state
        .config
        .images
        .clone()
        .ok_or_else(|| ApiError::Unavailable("this controller keeps no image data".into()))
}

fn io_fault(e: std::io::Error) -> ApiError {
    ApiError::Internal(format!("the image store: {e}"))
}

/// How much of an upload is hashed and written at a time.
const BATCH: usize = 1 << 20;

/// An upload's hashes and staging file, between batches.
struct Hashing {
    sha: ring::digest::Context,
    md5: Md5,
    out: std::fs::File,
}

impl Hashing {
    /// Takes in `data`: both hashes and the write run at once, on the blocking pool (hashing
    /// one after the other on the request's task held uploads to about a quarter of a file
    /// copy).
    async fn take(self, data: Bytes) -> std::io::Result<Hashing> {
        use std::io::Write;
        let Hashing {
            mut sha,
            mut md5,
            mut out,
        } = self;
        let (d1, d2) = (data.clone(), data.clone());
        let joined = |e: tokio::task::JoinError| std::io::Error::other(e.to_string());
        let (sha, md5, out) = tokio::join!(
            tokio::task::spawn_blocking(move || {
                sha.update(&d1);
                sha
            }),
            tokio::task::spawn_blocking(move || {
                md5.update(&d2);
                md5
            }),
            tokio::task::spawn_blocking(move || out.write_all(&data).map(|()| out)),
        );
        Ok(Hashing {
            sha: sha.map_err(joined)?,
            md5: md5.map_err(joined)?,
            out: out.map_err(joined)??,
        })
    }
}

/// Receives `body` into a staging file of `blobs`: its path and what it was.
async fn receive(
    body: Body,
    blobs: &Arc<dyn ImageBlobs>,
    cap: u64,
) -> Result<(std::path::PathBuf, ImageFile), (Option<std::path::PathBuf>, ApiError)> {
    let store = blobs.clone();
    let (path, file) = tokio::task::spawn_blocking(move || store.stage())
        .await
        .map_err(|e| (None, ApiError::Internal(e.to_string())))?
        .map_err(|e| (None, io_fault(e)))?;
    let fail = |e: ApiError| (Some(path.clone()), e);
    let mut hashing = Hashing {
        sha: ring::digest::Context::new(&ring::digest::SHA512),
        md5: Md5::new(),
        out: file,
    };
    let mut size = 0u64;
    let mut batch = BytesMut::with_capacity(BATCH);
    let mut stream = body.into_data_stream();
    loop {
        let next = tokio::time::timeout(CHUNK_TIMEOUT, stream.next())
            .await
            .map_err(|_| {
                fail(ApiError::RequestTimeout(format!(
                    "no image data came for {} s",
                    CHUNK_TIMEOUT.as_secs()
                )))
            })?;
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| {
            fail(ApiError::BadRequest(format!(
                "the upload was cut short: {e}"
            )))
        })?;
        size += chunk.len() as u64;
        if size > cap {
            return Err(fail(ApiError::PayloadTooLarge(format!(
                "an image is at most {cap} bytes"
            ))));
        }
        batch.extend_from_slice(&chunk);
        if batch.len() >= BATCH {
            hashing = hashing
                .take(batch.split().freeze())
                .await
                .map_err(|e| fail(io_fault(e)))?;
        }
    }
    let Hashing { sha, md5, out } = hashing
        .take(batch.freeze())
        .await
        .map_err(|e| fail(io_fault(e)))?;
    tokio::task::spawn_blocking(move || out.sync_all())
        .await
        .map_err(|e| fail(ApiError::Internal(e.to_string())))?
        .map_err(|e| fail(io_fault(e)))?;
    let file = ImageFile {
        size,
        md5: hex(&md5.finalize()),
        sha512: hex(sha.finish().as_ref()),
    };
    Ok((path, file))
}

/// `PUT /v2/images/{id}/file` (204).
pub(super) async fn upload(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let id = path_id("image", &id)?;
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !kind.starts_with("application/octet-stream") {
        return Err(ApiError::UnsupportedMediaType(format!(
            "image data must be sent as application/octet-stream, not {kind:?}"
        )));
    }
    let blobs = blobs(&state)?;
    let scope = caller.project_scope(true)?;
    let image = super::write::owned(&state, &caller, id).await?;
    saving(&state, scope, id).await.map_err(|e| match e {
        ApiError::Conflict(_) => ApiError::Conflict(format!(
            "image {id} is {}: data goes only to a queued image",
            image.status.as_str()
        )),
        other => other,
    })?;
    keep_data(&state, &blobs, scope, id, body, ImageStatus::Queued)
        .await
        .map(|_| StatusCode::NO_CONTENT)
}

/// Moves image `id` from `expect` to `status`, with its data's `file` (and the reference
/// nodes fetch it by) when given.
async fn change(
    state: &ApiState,
    scope: Scope,
    id: Uuid,
    expect: ImageStatus,
    status: ImageStatus,
    file: Option<ImageFile>,
) -> Result<(), ApiError> {
    let reference = file.as_ref().map(|f| format!("sha512/{}", f.sha512));
    let change = ImageChange {
        expect: Some(expect),
        status: Some(status),
        file: file.map(Some),
        reference,
        ..ImageChange::default()
    };
    state
        .store(move |store| Ok(store.change_image(scope, id, change)?))
        .await
        .map(drop)
}

/// Takes queued image `id` to `saving` (409 if it is not queued): its data is coming.
pub(crate) async fn saving(state: &ApiState, scope: Scope, id: Uuid) -> Result<(), ApiError> {
    change(
        state,
        scope,
        id,
        ImageStatus::Queued,
        ImageStatus::Saving,
        None,
    )
    .await
}

/// Takes image `id` from `saving` to `killed` (nothing if it is not saving): its data will not
/// come.
pub(crate) async fn killed(state: &ApiState, scope: Scope, id: Uuid) {
    let _ = change(
        state,
        scope,
        id,
        ImageStatus::Saving,
        ImageStatus::Killed,
        None,
    )
    .await;
}

/// Receives `body` as the data of image `id`, which is `saving`: the image is `active` with it
/// once it is kept; on any failure nothing is kept and the image is `failed` (`queued` again
/// for an upload, which may be tried again; `killed` for a snapshot).
pub(crate) async fn keep_data(
    state: &ApiState,
    blobs: &Arc<dyn ImageBlobs>,
    scope: Scope,
    id: Uuid,
    body: Body,
    failed: ImageStatus,
) -> Result<ImageFile, ApiError> {
    let received = receive(body, blobs, state.config.image_size_cap).await;
    let (path, file) = match received {
        Ok(done) => done,
        Err((path, e)) => {
            if let Some(path) = path {
                let _ = std::fs::remove_file(path);
            }
            let _ = change(state, scope, id, ImageStatus::Saving, failed, None).await;
            return Err(e);
        }
    };
    let (hash, store) = (file.sha512.clone(), blobs.clone());
    let kept = tokio::task::spawn_blocking(move || store.keep(&path, &hash)).await;
    if !matches!(kept, Ok(Ok(()))) {
        let _ = change(state, scope, id, ImageStatus::Saving, failed, None).await;
        return Err(ApiError::Internal(format!(
            "keeping image {id}'s data failed: {kept:?}"
        )));
    }
    tracing::info!(image = %id, size = file.size, "image data kept");
    change(
        state,
        scope,
        id,
        ImageStatus::Saving,
        ImageStatus::Active,
        Some(file.clone()),
    )
    .await?;
    Ok(file)
}

/// `GET /v2/images/{id}/file`: the data (200, `Content-MD5` the checksum), or 204 for an image
/// without any.
pub(super) async fn download(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Response, ApiError> {
    let id = path_id("image", &id)?;
    let scope = caller.project_scope(true)?;
    let image = state
        .store(move |store| Ok(store.image(scope, id)?))
        .await?;
    let Some(file) = image.file.filter(|_| image.status == ImageStatus::Active) else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let blobs = blobs(&state)?;
    let hash = file.sha512.clone();
    let data = tokio::task::spawn_blocking(move || blobs.open(&hash))
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
        .map_err(io_fault)?;
    let mut response = crate::images::data_response(data, file.size);
    let h = response.headers_mut();
    if let Ok(md5) = HeaderValue::from_str(&file.md5) {
        h.insert("content-md5", md5);
    }
    Ok(response)
}
