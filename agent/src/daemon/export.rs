//! `GET /v1/instances/{uuid}/disk` on the node endpoint ([`super::console`]): the instance's
//! root disk as it is now, one standalone qcow2 file, streamed to the controller, which keeps it
//! as a snapshot image (`createImage`). The backend writes the copy into the endpoint's exports
//! directory (a running instance is paused for the copy: [`Backend::export_disk`]); the file is
//! unlinked as soon as it is open, so nothing is left behind whatever becomes of the transfer,
//! and whatever an earlier process left there is removed when the endpoint starts.
//!
//! Answers: `200 application/octet-stream` with `Content-Length`; `404` for an instance this
//! node does not have; `409` for one whose disk this node cannot export (the sim's, a CNCI's, an
//! off-host one's); `503` when [`MAX_EXPORTS`] copies are under way; `500` with the cause when
//! the copy fails. A transfer may take [`EXPORT_TIMEOUT`] in all.

use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::backend::{Backend, ExportError};

/// The most disk copies made at once (each takes a disk's worth of space while it is sent).
pub const MAX_EXPORTS: usize = 2;
/// How long one disk transfer may take, from the request to the last byte.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A response body: bytes, or the I/O error that cut them.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// Where copies are made, and how many may be under way.
pub struct Exports {
    dir: PathBuf,
    slots: Semaphore,
}

/// Removes a copy's file when dropped (the request done, failed or cancelled).
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Exports {
    /// Copies go to `dir` (made mode 0700 if missing; what is in it is removed).
    pub fn open(dir: &Path) -> std::io::Result<Exports> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir)? {
            let _ = std::fs::remove_file(entry?.path());
        }
        Ok(Exports {
            dir: dir.to_path_buf(),
            slots: Semaphore::new(MAX_EXPORTS),
        })
    }

    /// The answer to `GET /v1/instances/{instance}/disk`: the data, or a status and a text.
    pub async fn answer<B: Backend>(
        &self,
        backend: &B,
        instance: Uuid,
    ) -> Result<Response<Body>, (StatusCode, String)> {
        let Ok(_slot) = self.slots.try_acquire() else {
            return Err((
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{MAX_EXPORTS} disk copies are under way: try again later"),
            ));
        };
        let copy = Removed(
            self.dir
                .join(format!("{instance}.{}.qcow2", Uuid::new_v4())),
        );
        backend
            .export_disk(instance, &copy.0)
            .await
            .map_err(|e| match e {
                ExportError::NotFound => {
                    (StatusCode::NOT_FOUND, format!("instance {instance}: {e}"))
                }
                ExportError::Unsupported(_) => {
                    (StatusCode::CONFLICT, format!("instance {instance}: {e}"))
                }
                ExportError::Failed(_) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            })?;
        let failed = |e: std::io::Error| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the copy: {e}"),
            )
        };
        let file = tokio::fs::File::open(&copy.0).await.map_err(failed)?;
        let size = file.metadata().await.map_err(failed)?.len();
        // Open, the file needs no name: the data goes away with the last reader.
        drop(copy);
        tracing::info!(%instance, size, "disk copy sent");
        let frames = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20).map_ok(Frame::data);
        let mut response = Response::new(StreamBody::new(frames).boxed());
        let h = response.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/octet-stream"),
        );
        h.insert(hyper::header::CONTENT_LENGTH, size.into());
        Ok(response)
    }
}
