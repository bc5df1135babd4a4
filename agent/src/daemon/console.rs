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
mod tests {
    use super::*;
    use crate::backend::Power;
    use crate::backend::fake::FakeBackend;
    use rustls::pki_types::ServerName;
    use ssntp_net::TlsIdentity;
    use ssntp_net::tls::Expected;
    use testkit::TestPki;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn requests_are_parsed() {
        let id = Uuid::from_u128(7);
        let path = format!("/v1/instances/{id}/console");
        let get = &Method::GET;
        assert_eq!(parse_request(get, &path, None), Ok((id, DEFAULT_LINES)));
        assert_eq!(parse_request(get, &path, Some("lines=5")), Ok((id, 5)));
        assert_eq!(parse_request(get, &path, Some("lines=0")), Ok((id, 0)));
        assert_eq!(
            parse_request(get, &path, Some("lines=99999999")),
            Ok((id, MAX_LINES))
        );
        let status = |m: &Method, p: &str, q: Option<&str>| parse_request(m, p, q).unwrap_err().0;
        assert_eq!(
            status(get, &path, Some("lines=-1")),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status(get, &path, Some("lines=x")), StatusCode::BAD_REQUEST);
        assert_eq!(status(get, &path, Some("tail=1")), StatusCode::BAD_REQUEST);
        assert_eq!(
            status(get, "/v1/instances/nope/console", None),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(status(get, "/v1/other", None), StatusCode::NOT_FOUND);
        assert_eq!(
            status(&Method::POST, &path, None),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }

    struct Endpoint {
        addr: std::net::SocketAddr,
        node: Uuid,
        instance: Uuid,
        backend: Arc<FakeBackend>,
        firewalls: Arc<FakeFirewalls>,
        /// Holds `exports/`, where disk copies are made.
        dir: tempfile::TempDir,
        stop: CancellationToken,
        served: tokio::task::JoinHandle<()>,
    }

    /// Records firewall updates; answers with what `answers` holds for the instance (else
    /// `Ok`).
    #[derive(Default)]
    struct FakeFirewalls {
        got: std::sync::Mutex<Vec<(Uuid, Firewall)>>,
        answers: std::sync::Mutex<std::collections::HashMap<Uuid, FirewallRefusal>>,
    }

    impl Firewalls for FakeFirewalls {
        async fn set_firewall(
            &self,
            instance: Uuid,
            firewall: Firewall,
        ) -> Result<(), FirewallRefusal> {
            if let Some(refusal) = self.answers.lock().unwrap().get(&instance) {
                return Err(refusal.clone());
            }
            self.got.lock().unwrap().push((instance, firewall));
            Ok(())
        }
    }

    /// An endpoint over a fake backend with one started instance, with the agent certificate of
    /// `pki` (binding `node`).
    async fn endpoint(pki: &TestPki) -> Endpoint {
        let node = Uuid::new_v4();
        let tls = pki
            .identity(Role::AGENT, Some(node))
            .server_config()
            .unwrap();
        let backend = Arc::new(FakeBackend::new());
        let instance = Uuid::new_v4();
        backend.insert(instance, Power::Off);
        backend.start(instance).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let firewalls = Arc::new(FakeFirewalls::default());
        let dir = tempfile::tempdir().unwrap();
        // What an earlier process left is gone when the endpoint starts.
        std::fs::create_dir(dir.path().join("exports")).unwrap();
        std::fs::write(dir.path().join("exports/left.qcow2"), b"x").unwrap();
        let exports = Arc::new(Exports::open(&dir.path().join("exports")).unwrap());
        let served = tokio::spawn(serve(
            listener,
            tls,
            backend.clone(),
            firewalls.clone(),
            exports,
            stop.clone(),
        ));
        Endpoint {
            addr,
            node,
            instance,
            backend,
            firewalls,
            dir,
            stop,
            served,
        }
    }

    /// One GET as `client`, dialling `name`, expecting the server to be `expected`: the
    /// status line and the body, or why the exchange failed.
    async fn get(
        addr: std::net::SocketAddr,
        client: &TlsIdentity,
        expected: Expected,
        name: &str,
        target: &str,
    ) -> Result<(u16, String), String> {
        let request = format!("GET {target} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
        exchange(addr, client, expected, name, request.into_bytes()).await
    }

    /// One PUT of `body` as `client`.
    async fn put(
        addr: std::net::SocketAddr,
        client: &TlsIdentity,
        expected: Expected,
        target: &str,
        body: &[u8],
    ) -> Result<(u16, String), String> {
        let mut request = format!(
            "PUT {target} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\
             Content-Type: application/cbor\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        exchange(addr, client, expected, "127.0.0.1", request).await
    }

    /// Sends `request` as `client` and reads the whole answer: the status and the body.
    async fn exchange(
        addr: std::net::SocketAddr,
        client: &TlsIdentity,
        expected: Expected,
        name: &str,
        request: Vec<u8>,
    ) -> Result<(u16, String), String> {
        let config = client.client_config_for(expected).unwrap();
        let connector = tokio_rustls::TlsConnector::from(config);
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(&request).await.map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        tls.read_to_end(&mut response)
            .await
            .map_err(|e| e.to_string())?;
        let response = String::from_utf8(response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").ok_or("no header end")?;
        let status = head.split(' ').nth(1).ok_or("no status")?.parse().unwrap();
        Ok((status, body.to_string()))
    }

    impl Endpoint {
        /// The node's certificate as the controller expects it.
        fn agent(&self) -> Expected {
            Expected {
                role: Role::AGENT,
                uuid: Some(self.node),
            }
        }

        /// The status (and body) of a GET of the instance's console, with `query`.
        async fn fetch(
            &self,
            client: &TlsIdentity,
            expected: Expected,
            name: &str,
            query: &str,
        ) -> Result<(u16, String), String> {
            let target = format!("/v1/instances/{}/console{query}", self.instance);
            get(self.addr, client, expected, name, &target).await
        }

        async fn status(
            &self,
            client: &TlsIdentity,
            expected: Expected,
            name: &str,
        ) -> Result<u16, String> {
            self.fetch(client, expected, name, "").await.map(|r| r.0)
        }

        async fn stop(self) {
            self.stop.cancel();
            self.served.await.unwrap();
        }
    }

    #[tokio::test]
    async fn the_controller_reads_a_console_and_other_clients_are_refused() {
        let pki = TestPki::new();
        let e = endpoint(&pki).await;
        let agent = e.agent();
        let controller = pki.identity(Role::CONTROLLER, Some(Uuid::new_v4()));
        let local = "127.0.0.1";
        assert_eq!(
            e.fetch(&controller, agent, local, "").await,
            Ok((200, "Start\n".to_string()))
        );
        assert_eq!(
            e.fetch(&controller, agent, local, "?lines=0").await,
            Ok((200, String::new()))
        );
        assert_eq!(
            e.fetch(&controller, agent, local, "?lines=-3")
                .await
                .map(|r| r.0),
            Ok(400)
        );
        let unknown = format!("/v1/instances/{}/console", Uuid::new_v4());
        assert_eq!(
            get(e.addr, &controller, agent, local, &unknown)
                .await
                .map(|r| r.0),
            Ok(404)
        );
        // A certificate bound to the node's UUID names it whatever address was dialled.
        assert_eq!(e.status(&controller, agent, "10.9.8.7").await, Ok(200));
        // An agent's certificate is not the controller's.
        let other_agent = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
        let refused = e.fetch(&other_agent, agent, local, "").await.unwrap();
        assert_eq!(refused.0, 403, "{refused:?}");
        assert!(refused.1.contains("controller role"), "{refused:?}");
        // A controller certificate of another CA does not get through the handshake.
        // (It trusts our CA, so that only the server's check can refuse it.)
        let theirs = TestPki::new().leaf(Role::CONTROLLER, None);
        let stranger = TlsIdentity::from_pem(
            pki.leaf(Role::CONTROLLER, None).ca_pem.as_bytes(),
            theirs.cert_pem.as_bytes(),
            theirs.key_pem.as_bytes(),
        )
        .unwrap();
        assert!(e.status(&stranger, agent, local).await.is_err());
        e.stop().await;
    }

    #[tokio::test]
    async fn the_controller_removes_volumes() {
        let pki = TestPki::new();
        let e = endpoint(&pki).await;
        let (agent, local) = (e.agent(), "127.0.0.1");
        let controller = pki.identity(Role::CONTROLLER, None);
        let volume = Uuid::new_v4();
        let send = |method: &str, target: String, who: &TlsIdentity| {
            let request =
                format!("{method} {target} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
            let who = who.clone();
            async move {
                exchange(e.addr, &who, agent, local, request.into_bytes())
                    .await
                    .unwrap()
            }
        };
        let path = format!("/v1/volumes/{volume}");
        assert_eq!(
            send("DELETE", path.clone(), &controller).await,
            (204, String::new())
        );
        assert_eq!(e.backend.removed_volumes(), vec![volume]);
        let other = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
        assert_eq!(send("DELETE", path.clone(), &other).await.0, 403);
        assert_eq!(send("GET", path, &controller).await.0, 405);
        let bad = "/v1/volumes/nope".to_string();
        assert_eq!(send("DELETE", bad, &controller).await.0, 400);
        assert_eq!(e.backend.removed_volumes(), vec![volume]);
        e.stop().await;
    }

    #[tokio::test]
    async fn the_controller_copies_a_disk_and_nothing_stays_behind() {
        let pki = TestPki::new();
        let e = endpoint(&pki).await;
        let (agent, local) = (e.agent(), "127.0.0.1");
        let controller = pki.identity(Role::CONTROLLER, None);
        let disk = format!("/v1/instances/{}/disk", e.instance);
        let (status, body) = get(e.addr, &controller, agent, local, &disk).await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body.as_bytes(), FakeBackend::disk_of(e.instance));
        let exports = e.dir.path().join("exports");
        assert_eq!(
            std::fs::read_dir(&exports).unwrap().count(),
            0,
            "no copy kept"
        );
        let status = |target: String, who: &TlsIdentity| {
            let who = who.clone();
            async move { get(e.addr, &who, agent, local, &target).await.unwrap().0 }
        };
        let unknown = format!("/v1/instances/{}/disk", Uuid::new_v4());
        assert_eq!(status(unknown, &controller).await, 404);
        assert_eq!(status(format!("{disk}?x=1"), &controller).await, 400);
        assert_eq!(
            status("/v1/instances/nope/disk".into(), &controller).await,
            400
        );
        let other_agent = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
        assert_eq!(status(disk.clone(), &other_agent).await, 403);
        let post = "POST {disk} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n"
            .replace("{disk}", &disk);
        let posted = exchange(e.addr, &controller, agent, local, post.into_bytes()).await;
        assert_eq!(posted.map(|r| r.0), Ok(405));
        assert_eq!(std::fs::read_dir(&exports).unwrap().count(), 0);
        e.stop().await;
    }

    #[tokio::test]
    async fn the_controller_checks_the_node_it_dials() {
        let pki = TestPki::new();
        let e = endpoint(&pki).await;
        let controller = pki.identity(Role::CONTROLLER, None);
        let local = "127.0.0.1";
        // Another node's UUID.
        let wrong = Expected {
            uuid: Some(Uuid::new_v4()),
            ..e.agent()
        };
        let err = e.status(&controller, wrong, local).await.unwrap_err();
        assert!(err.contains("binds"), "{err}");
        // A role the agent's certificate lacks.
        let scheduler = Expected {
            role: Role::SCHEDULER,
            ..e.agent()
        };
        let err = e.status(&controller, scheduler, local).await.unwrap_err();
        assert!(err.contains("role"), "{err}");
        // No UUID known: the name dialled must be the certificate's.
        let unknown = Expected {
            uuid: None,
            ..e.agent()
        };
        assert_eq!(e.status(&controller, unknown, local).await, Ok(200));
        assert!(e.status(&controller, unknown, "10.9.8.7").await.is_err());
        e.stop().await;
    }

    #[tokio::test]
    async fn connections_beyond_the_bound_are_closed_until_slots_free_up() {
        let pki = TestPki::new();
        let e = endpoint(&pki).await;
        let controller = pki.identity(Role::CONTROLLER, None);
        // Peers that connect and say nothing hold every slot (each for the handshake timeout).
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(tokio::net::TcpStream::connect(e.addr).await.unwrap());
        }
        let reached = async |want_ok: bool| {
            let e = &e;
            let controller = &controller;
            testkit::wait_until(Duration::from_secs(5), "the bound to act", || async move {
                e.status(controller, e.agent(), "127.0.0.1").await.is_ok() == want_ok
            })
            .await;
        };
        reached(false).await;
        drop(idle);
        reached(true).await;
        e.stop().await;
    }

    fn cbor(firewall: &Firewall) -> Vec<u8> {
        let mut out = Vec::new();
        ssntp::payload::cbor::encode_into(firewall, &mut out);
        out
    }

    #[tokio::test]
    async fn the_controller_puts_a_firewall() {
        use ssntp::payload::{FirewallDirection, FirewallRule};
        let pki = TestPki::new();
        let e = endpoint(&pki).await;
        let agent = e.agent();
        let controller = pki.identity(Role::CONTROLLER, None);
        let path = |i: Uuid| format!("/v1/instances/{i}/firewall");
        let firewall = Firewall {
            revision: 4,
            rules: vec![FirewallRule {
                direction: FirewallDirection::Ingress,
                protocol: Some(6),
                port_min: Some(22),
                port_max: Some(22),
                remote: Some(vec!["10.0.0.0/8".parse().unwrap()]),
            }],
        };
        let put_as = async |who: &TlsIdentity, target: &str, body: &[u8]| {
            put(e.addr, who, agent, target, body).await.unwrap()
        };
        assert_eq!(
            put_as(&controller, &path(e.instance), &cbor(&firewall)).await,
            (204, String::new())
        );
        assert_eq!(
            e.firewalls.got.lock().unwrap().clone(),
            vec![(e.instance, firewall.clone())]
        );

        // What the core refuses, as statuses.
        let (gone, bare, broken, busy) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        {
            let mut answers = e.firewalls.answers.lock().unwrap();
            answers.insert(gone, FirewallRefusal::NotFound);
            answers.insert(bare, FirewallRefusal::NoNic);
            answers.insert(
                broken,
                FirewallRefusal::Apply("nft: syntax error\nmore".into()),
            );
            answers.insert(busy, FirewallRefusal::Busy);
        }
        let body = cbor(&firewall);
        assert_eq!(put_as(&controller, &path(gone), &body).await.0, 404);
        assert_eq!(put_as(&controller, &path(bare), &body).await.0, 409);
        assert_eq!(
            put_as(&controller, &path(broken), &body).await,
            (500, "nft: syntax error".to_string())
        );
        assert_eq!(put_as(&controller, &path(busy), &body).await.0, 503);

        // Bodies that are not a good firewall.
        let (status, why) = put_as(&controller, &path(e.instance), b"not cbor").await;
        assert_eq!(status, 400, "{why}");
        let mut backwards = firewall.clone();
        backwards.rules[0].port_min = Some(80);
        let (status, why) = put_as(&controller, &path(e.instance), &cbor(&backwards)).await;
        assert_eq!((status, why.contains("80-22")), (400, true), "{why}");
        let huge = vec![0u8; MAX_BODY_BYTES + 1];
        assert_eq!(put_as(&controller, &path(e.instance), &huge).await.0, 413);
        assert_eq!(e.firewalls.got.lock().unwrap().len(), 1);

        // Other methods, other clients.
        let (status, _) = get(e.addr, &controller, agent, "127.0.0.1", &path(e.instance))
            .await
            .unwrap();
        assert_eq!(status, 405);
        let other_agent = pki.identity(Role::AGENT, Some(Uuid::new_v4()));
        assert_eq!(put_as(&other_agent, &path(e.instance), &body).await.0, 403);
        assert_eq!(e.firewalls.got.lock().unwrap().len(), 1);
        e.stop().await;
    }

    #[test]
    fn routes() {
        let id = Uuid::from_u128(7);
        let fw = format!("/v1/instances/{id}/firewall");
        assert_eq!(route(&Method::PUT, &fw, None), Ok(Route::Firewall(id)));
        let console = format!("/v1/instances/{id}/console");
        assert_eq!(
            route(&Method::GET, &console, None),
            Ok(Route::Console(id, DEFAULT_LINES))
        );
        let status = |m: &Method, p: &str, q: Option<&str>| route(m, p, q).unwrap_err().0;
        assert_eq!(
            status(&Method::POST, &fw, None),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            status(&Method::PUT, &console, None),
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            status(&Method::PUT, "/v1/instances/x/firewall", None),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            status(&Method::PUT, &fw, Some("a=1")),
            StatusCode::BAD_REQUEST
        );
    }
}
