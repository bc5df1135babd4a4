//! The console endpoint: a small HTTPS server beside the SSNTP session (not part of SSNTP) that
//! serves the tail of an instance's serial console log to the controller.
//!
//! - `GET /v1/instances/{uuid}/console?lines=N`: `200 text/plain` with the last N lines (default
//!   [`DEFAULT_LINES`], at most [`MAX_LINES`]: more is cut to that; at most
//!   [`console::MAX_BYTES`](crate::backend::console::MAX_BYTES) read from the log's tail); `404`
//!   for an instance this node does not have; `409` for one whose log it cannot read; `400` for a
//!   malformed request.
//! - Authentication: TLS 1.3 with the agent's own SSNTP certificate and key; the client must
//!   present a certificate that chains to the cluster CA (else the handshake fails) and carries
//!   the CONTROLLER role (else `403`).
//! - Bounds: [`MAX_CONNECTIONS`] at once (more are closed at once), [`HANDSHAKE_TIMEOUT`] for the
//!   TLS handshake, [`REQUEST_TIMEOUT`] for the whole request, headers within hyper's smallest
//!   buffer ([`MAX_HEADER_BYTES`]), one request per connection, the body never read.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use ssntp::Role;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::backend::console::{DEFAULT_LINES, MAX_LINES};
use crate::backend::{Backend, ConsoleError};

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

/// A response: a status and a text.
type Answer = (StatusCode, String);

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

/// Serves the endpoint on `listener` until `shutdown`; connections in flight finish (each is
/// bounded by [`REQUEST_TIMEOUT`]).
pub async fn serve<B: Backend>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    backend: Arc<B>,
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
        let (acceptor, backend) = (acceptor.clone(), backend.clone());
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
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let backend = backend.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(answer(&*backend, controller, &request).await)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .max_buf_size(MAX_HEADER_BYTES)
                .serve_connection(TokioIo::new(tls), service);
            match tokio::time::timeout(REQUEST_TIMEOUT, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "console: connection failed"),
                Err(_) => tracing::debug!(%peer, "console: request timed out"),
            }
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// The answer to one request.
async fn answer<B: Backend>(
    backend: &B,
    controller: bool,
    request: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (status, text) = if controller {
        match parse_request(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        ) {
            Ok((instance, lines)) => match backend.console(instance, lines).await {
                Ok(log) => (StatusCode::OK, log),
                Err(e @ ConsoleError::NotFound) => {
                    (StatusCode::NOT_FOUND, format!("instance {instance}: {e}"))
                }
                Err(e @ ConsoleError::OffHost) => (StatusCode::CONFLICT, e.to_string()),
                Err(e @ ConsoleError::Io(_)) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            },
            Err(answer) => answer,
        }
    } else {
        (
            StatusCode::FORBIDDEN,
            "the client certificate does not carry the controller role".to_string(),
        )
    };
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
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
        stop: CancellationToken,
        served: tokio::task::JoinHandle<()>,
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
        let served = tokio::spawn(serve(listener, tls, backend, stop.clone()));
        Endpoint {
            addr,
            node,
            instance,
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
        let config = client.client_config_for(expected).unwrap();
        let connector = tokio_rustls::TlsConnector::from(config);
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let request = format!("GET {target} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
        tls.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
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
}
