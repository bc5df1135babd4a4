//! The node image endpoint: where agents fetch the data of uploaded images, by SHA-512.
//!
//! `GET /v1/images/sha512/{hash}` answers the data kept under `hash` (200 with its
//! `Content-Length`, streamed). It is served over TLS 1.3 with the controller's own certificate,
//! and every client must present a certificate that chains to the cluster CA (the handshake
//! fails otherwise). A client certificate that carries neither the AGENT nor the NETAGENT role
//! (an admin's, another controller's) gets 403; a `hash` that is not a SHA-512, 400; data that
//! is not kept, 404.
//!
//! A node asks for the hash its START names, and the controller put that hash in the START only
//! after checking that the tenant may boot the image: the endpoint needs no notion of tenants.

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rustls::ServerConfig;
use ssntp::Role;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{ImageBlobs, is_sha512};
use crate::api::{ClientCertificate, ConnectionLimits, ServeError, serve_with};

/// The route of an image's data.
pub const ROUTE: &str = "/v1/images/sha512/{hash}";

/// The path of the data whose SHA-512 is `sha512`.
pub fn path(sha512: &str) -> String {
    format!("/v1/images/sha512/{sha512}")
}

/// The roles that may fetch image data: the nodes that boot instances.
pub const NODE_ROLES: Role = Role::DUAL;

/// The endpoint's routes over `blobs`.
pub fn router(blobs: Arc<dyn ImageBlobs>) -> Router {
    Router::new().route(ROUTE, get(fetch)).with_state(blobs)
}

/// Serves the endpoint on `listener` with `tls` (which must require client certificates:
/// [`ssntp_net::tls::TlsIdentity::server_config`]) until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    blobs: Arc<dyn ImageBlobs>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_with(
        listener,
        Some(tls),
        router(blobs),
        shutdown,
        ConnectionLimits::default(),
    )
    .await
}

fn refuse(status: StatusCode, why: String) -> Response {
    (status, why).into_response()
}

async fn fetch(
    State(blobs): State<Arc<dyn ImageBlobs>>,
    cert: Option<Extension<ClientCertificate>>,
    Path(hash): Path<String>,
) -> Response {
    let roles = cert.map_or(Role::empty(), |Extension(c)| c.roles);
    if !roles.intersects(NODE_ROLES) {
        return refuse(
            StatusCode::FORBIDDEN,
            format!(
                "image data is for nodes (AGENT or NETAGENT): this certificate carries {roles}"
            ),
        );
    }
    if !is_sha512(&hash) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "not a SHA-512 (128 lowercase hex digits)".into(),
        );
    }
    let opened = tokio::task::spawn_blocking(move || {
        let file = blobs.open(&hash)?;
        let size = file.metadata()?.len();
        Ok::<_, std::io::Error>((file, size))
    })
    .await;
    let (file, size) = match opened {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return refuse(StatusCode::NOT_FOUND, "no image data with this hash".into());
        }
        Ok(Err(e)) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    super::data_response(file, size)
}
