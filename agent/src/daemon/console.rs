//! The node endpoint (named the console endpoint for its first resource; `--console-listen`): a
//! small HTTPS server beside the SSNTP session (not part of SSNTP) through which the controller
//! reads an instance's serial console log, changes its port firewall, copies its disk and
//! removes volumes.
//!
//! - `GET /v1/instances/{uuid}/console?lines=N`: `200 text/plain` with the last N lines (default
//!   [`DEFAULT_LINES`], at most [`MAX_LINES`]: more is cut to that; at most
//!   [`console::MAX_BYTES`](crate::backend::console::MAX_BYTES) read from the log's tail); `404`
//!   for an instance this node does not have; `409` for one whose log it cannot read; `400` for a
//!   malformed request.
//! - `PUT /v1/instances/{uuid}/firewall`, body the CBOR [`Firewall`] (`Content-Type:
//!   application/cbor`, at most [`MAX_BODY_BYTES`]: more is `413`): `204` once the instance's
//!   NIC is filtered with it and it is in the instance's record ([`Firewalls::set_firewall`]),
//!   or at once when its revision is not newer than the one in force (nothing changes); `404`
//!   for an instance this node does not have; `409` for one without a tenant NIC; `400` for a
//!   body that does not decode or fails [`Firewall::check`]; `503` when the instance's queue is
//!   full; `500` with the cause in one line when filtering fails.
//! - `GET /v1/instances/{uuid}/disk`: the instance's root disk as one qcow2 file, for a
//!   snapshot ([`super::export`] says how and what else it answers).
//! - `DELETE /v1/volumes/{uuid}`: `204` once the volume's data is gone from the node (or was
//!   never here: the controller deletes a volume that its node holds, and may ask again);
//!   `409` where the node's backend keeps no volumes; `500` with the cause when removing fails.
//! - Other methods on any resource: `405`.
//! - Authentication: TLS 1.3 with the agent's own SSNTP certificate and key; the client must
//!   present a certificate that chains to the cluster CA (else the handshake fails) and carries
//!   the CONTROLLER role (else `403`).
//! - Bounds: [`MAX_CONNECTIONS`] at once (more are closed at once), [`HANDSHAKE_TIMEOUT`] for the
//!   TLS handshake, [`REQUEST_TIMEOUT`] for the whole request (a disk:
//!   [`EXPORT_TIMEOUT`]), headers within hyper's smallest
//!   buffer ([`MAX_HEADER_BYTES`]), one request per connection, a body read only for a `PUT`
//!   and at most [`MAX_BODY_BYTES`] of it.

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use ssntp::Role;
use ssntp::payload::Firewall;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::export::{self, EXPORT_TIMEOUT, Exports};
use crate::backend::console::{DEFAULT_LINES, MAX_LINES};
use crate::backend::{Backend, ConsoleError};
use crate::core::{Core, FirewallRefusal};

/// The port the endpoint listens on unless told otherwise (`--console-listen`).
pub const DEFAULT_PORT: u16 = 8890;
/// The most connections served at once.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may take, from the end of the handshake to the end of the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of request line and headers (hyper's smallest read buffer).
pub const MAX_HEADER_BYTES: usize = 8192;

/// The most bytes of a request body (a `PUT` firewall).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// A response: a status and a text.
type Answer = (StatusCode, String);

/// Where the endpoint's firewall updates go: the core (a test's fake).
pub trait Firewalls: Send + Sync + 'static {
    /// Filters the instance's NIC with a newer firewall and keeps it
    /// ([`Core::set_firewall`]).
    fn set_firewall(
        &self,
        instance: Uuid,
        firewall: Firewall,
    ) -> impl Future<Output = Result<(), FirewallRefusal>> + Send;
}

impl Firewalls for Core {
    async fn set_firewall(
        &self,
        instance: Uuid,
        firewall: Firewall,
    ) -> Result<(), FirewallRefusal> {
        Core::set_firewall(self, instance, firewall).await
    }
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The tail of an instance's console log, this many lines.
    Console(Uuid, usize),
    /// A new firewall for an instance (in the body).
    Firewall(Uuid),
    /// A copy of an instance's disk.
    Disk(Uuid),
    /// Removing a volume's data from the node.
    DeleteVolume(Uuid),
}

/// Routes a request: the console, the firewall or the disk of an instance, or a volume's
/// removal; or the answer to a bad one.
pub fn route(method: &Method, path: &str, query: Option<&str>) -> Result<Route, Answer> {
    if let Some(volume) = path.strip_prefix("/v1/volumes/") {
        return only(method, &Method::DELETE, volume, query).map(Route::DeleteVolume);
    }
    if let Some(instance) = path
        .strip_prefix("/v1/instances/")
        .and_then(|rest| rest.strip_suffix("/disk"))
    {
        return only(method, &Method::GET, instance, query).map(Route::Disk);
    }
    let Some(instance) = path
        .strip_prefix("/v1/instances/")
        .and_then(|rest| rest.strip_suffix("/firewall"))
    else {
        return parse_request(method, path, query).map(|(i, lines)| Route::Console(i, lines));
    };
    only(method, &Method::PUT, instance, query).map(Route::Firewall)
}

/// The instance of a request that takes only method `allowed` and no query.
fn only(
    method: &Method,
    allowed: &Method,
    instance: &str,
    query: Option<&str>,
) -> Result<Uuid, Answer> {
    if method != allowed {
        return Err((
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method}: only {allowed} is served"),
        ));
    }
    let instance: Uuid = instance.parse().map_err(|_| {
        (
            StatusCode::BAD_REQUEST,
            format!("{instance:?} is not a UUID"),
        )
    })?;
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("unknown query parameter {q:?}"),
        ));
    }
    Ok(instance)
}

/// Reads a firewall from a request body (at most [`MAX_BODY_BYTES`]) and checks it.
pub async fn read_firewall<B>(body: B, length: Option<u64>) -> Result<Firewall, Answer>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        )
    };
    if length.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let bytes = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Err(e) => return Err((StatusCode::BAD_REQUEST, format!("reading the body: {e}"))),
    };
    let firewall: Firewall = ssntp::payload::cbor::decode_one(&bytes).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("the body is not a CBOR firewall: {e}"),
        )
    })?;
    firewall
        .check()
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("firewall: {e}")))?;
    Ok(firewall)
}

/// What a request asks for: an instance and a number of lines; or the answer to a bad request.
pub fn parse_request(
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Result<(Uuid, usize), Answer> {
    let bad = |why: String| (StatusCode::BAD_REQUEST, why);
    let instance = path
        .strip_prefix("/v1/instances/")
        .and_then(|rest| rest.strip_suffix("/console"))
        .ok_or_else(|| (StatusCode::NOT_FOUND, format!("no such resource: {path}")))?;
    if method != Method::GET {
        return Err((
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method}: only GET is served"),
        ));
    }
    let instance: Uuid = instance
        .parse()
        .map_err(|_| bad(format!("{instance:?} is not a UUID")))?;
    let mut lines = DEFAULT_LINES;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("lines", n)) => {
                lines = n
                    .parse::<usize>()
                    .map_err(|_| bad(format!("lines={n:?}: not a non-negative integer")))?
                    .min(MAX_LINES);
            }
            _ => return Err(bad(format!("unknown query parameter {pair:?}"))),
        }
    }
    Ok((instance, lines))
}

/// Serves the endpoint on `listener` until `shutdown`, making disk copies in `exports`;
/// connections in flight finish (each is bounded by [`REQUEST_TIMEOUT`], a disk's by
/// [`EXPORT_TIMEOUT`]).
pub async fn serve<B: Backend, F: Firewalls>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    backend: Arc<B>,
    firewalls: Arc<F>,
    exports: Arc<Exports>,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    let tracker = TaskTracker::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors and the like: give the others a moment.
                    tracing::warn!(error = %e, "console endpoint: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "console endpoint: too many connections, one closed");
            continue;
        };
        let (acceptor, backend, firewalls) = (acceptor.clone(), backend.clone(), firewalls.clone());
        let exports = exports.clone();
        tracker.spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    return tracing::debug!(%peer, error = %e, "console: TLS handshake failed");
                }
                Err(_) => return tracing::debug!(%peer, "console: TLS handshake timed out"),
            };
            let controller = match ssntp_net::tls::peer_of(tls.get_ref().1) {
                Ok(cert) => cert.roles.contains(Role::CONTROLLER),
                Err(_) => false,
            };
            if !controller {
                tracing::warn!(%peer, "console: a client without the controller role refused");
            }
            // Set once the request is known to be a disk's (a longer transfer).
            let long = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = long.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (backend, firewalls) = (backend.clone(), firewalls.clone());
                let (exports, flag) = (exports.clone(), flag.clone());
                async move {
                    let served = Served {
                        backend: &*backend,
                        firewalls: &*firewalls,
                        exports: &exports,
                        long: &flag,
                    };
                    Ok::<_, std::convert::Infallible>(served.answer(controller, request).await)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(tls), service);
            let mut conn = std::pin::pin!(conn);
            let done = match tokio::time::timeout(REQUEST_TIMEOUT, conn.as_mut()).await {
                Ok(done) => Some(done),
                Err(_) if long.load(std::sync::atomic::Ordering::Acquire) => {
                    tokio::time::timeout(EXPORT_TIMEOUT.saturating_sub(REQUEST_TIMEOUT), conn)
                        .await
                        .ok()
                }
                Err(_) => None,
            };
            match done {
                Some(Ok(())) => {}
                Some(Err(e)) => tracing::debug!(%peer, error = %e, "console: connection failed"),
                None => tracing::debug!(%peer, "console: request timed out"),
            }
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// What one request is served with.
struct Served<'a, B, F> {
    backend: &'a B,
    firewalls: &'a F,
    exports: &'a Exports,
    /// Set for a disk's request.
    long: &'a std::sync::atomic::AtomicBool,
}

impl<B: Backend, F: Firewalls> Served<'_, B, F> {
    /// The answer to one request.
    async fn answer<Body>(&self, controller: bool, request: Request<Body>) -> Response<export::Body>
    where
        Body: hyper::body::Body,
        Body::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (backend, firewalls) = (self.backend, self.firewalls);
        let (status, text) = if controller {
            match route(
                request.method(),
                request.uri().path(),
                request.uri().query(),
            ) {
                Ok(Route::Disk(instance)) => {
                    self.long.store(true, std::sync::atomic::Ordering::Release);
                    match self.exports.answer(backend, instance).await {
                        Ok(response) => return response,
                        Err(answer) => answer,
                    }
                }
                Ok(Route::Firewall(instance)) => {
                    let length = request
                        .headers()
                        .get(hyper::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    match read_firewall(request.into_body(), length).await {
                        Ok(firewall) => firewall_answer(firewalls, instance, firewall).await,
                        Err(answer) => answer,
                    }
                }
                Ok(Route::DeleteVolume(volume)) => match backend.delete_volume(volume).await {
                    Ok(()) => (StatusCode::NO_CONTENT, String::new()),
                    Err(e @ crate::backend::BackendError::Unsupported(_)) => {
                        (StatusCode::CONFLICT, e.to_string())
                    }
                    Err(e) => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("removing volume {volume}: {e}"),
                    ),
                },
                Ok(Route::Console(instance, lines)) => match backend.console(instance, lines).await
                {
                    Ok(log) => (StatusCode::OK, log),
                    Err(e @ ConsoleError::NotFound) => {
                        (StatusCode::NOT_FOUND, format!("instance {instance}: {e}"))
                    }
                    Err(e @ ConsoleError::OffHost) => (StatusCode::CONFLICT, e.to_string()),
                    Err(e @ ConsoleError::Io(_)) => {
                        (StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
                    }
                },
                Err(answer) => answer,
            }
        } else {
            (
                StatusCode::FORBIDDEN,
                "the client certificate does not carry the controller role".to_string(),
            )
        };
        let text = if status == StatusCode::NO_CONTENT {
            Bytes::new()
        } else {
            Bytes::from(text)
        };
        let mut response = Response::new(Full::new(text).map_err(|never| match never {}).boxed());
        *response.status_mut() = status;
        if status == StatusCode::NO_CONTENT {
            return response;
        }
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

/// The answer to a firewall update (the one place refusals become statuses).
async fn firewall_answer<F: Firewalls>(
    firewalls: &F,
    instance: Uuid,
    firewall: Firewall,
) -> Answer {
    match firewalls.set_firewall(instance, firewall).await {
        Ok(()) => (StatusCode::NO_CONTENT, String::new()),
        Err(e @ FirewallRefusal::NotFound) => {
            (StatusCode::NOT_FOUND, format!("instance {instance}: {e}"))
        }
        Err(e @ FirewallRefusal::NoNic) => {
            (StatusCode::CONFLICT, format!("instance {instance}: {e}"))
        }
        Err(e @ FirewallRefusal::Busy) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(FirewallRefusal::Apply(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            e.lines().next().unwrap_or("filtering failed").to_string(),
        ),
    }
}

#[cfg(test)]
mod tests;
