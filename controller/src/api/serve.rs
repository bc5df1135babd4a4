//! Serving the router on a bound listener: HTTPS through tokio-rustls (client certificates
//! optional), or plain HTTP on a loopback address only; HTTP/1.1 by hyper; graceful shutdown on a
//! cancellation token (in-flight requests finish, idle connections close).
//!
//! Connections are bounded before any TLS work: at most [`MAX_CONNECTIONS`] at once, at most
//! [`ConnectionLimits::per_source`] of them from one source address (an IPv6 source counts by
//! its /64; beyond that a new connection is closed as soon as it is accepted), a deadline on the
//! TLS handshake and one on each request's headers ([`ConnectionLimits`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// The most connections served at once; more wait in the listener's backlog.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long shutdown waits for in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How connections are bounded (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// The most connections open at once from one source address (loopback included).
    pub per_source: usize,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// How long a client may take to send a request's headers.
    pub header_timeout: Duration,
}

impl ConnectionLimits {
    /// 64 connections per address: far more than one client (the `openstack` CLI opens one or
    /// two, a busy automation a handful per thread) or a NAT of a few dozen users needs, and
    /// 1/16 of [`MAX_CONNECTIONS`], so that one address cannot take them all.
    pub const DEFAULT_PER_SOURCE: usize = 64;
    /// A TLS 1.3 handshake is one round trip plus a certificate signature or two: tens of
    /// milliseconds, a second or two over a bad intercontinental link. 5 s leaves room for that
    /// and bounds how long a client that never finishes holds a slot.
    pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
    /// A request's headers are a few hundred bytes (a token is under 1 KiB) sent in one write:
    /// 10 s is generous for any real client and cuts a slow-headers (slowloris) client three
    /// times sooner than the 30 s it used to get.
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            per_source: ConnectionLimits::DEFAULT_PER_SOURCE,
            handshake_timeout: ConnectionLimits::DEFAULT_HANDSHAKE_TIMEOUT,
            header_timeout: ConnectionLimits::DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// The address a request's connection came from, put in every request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Open connections per source address. Memory: one entry per source with a connection open,
/// so at most [`MAX_CONNECTIONS`].
#[derive(Default)]
struct PerSource {
    open: std::sync::Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its source; uncounted when dropped.
struct SourceSlot {
    sources: Arc<PerSource>,
    key: IpAddr,
}

impl PerSource {
    /// Counts a connection from `peer`, or `None` if its source already has `max` open.
    fn take(self: &Arc<Self>, peer: IpAddr, max: usize) -> Option<SourceSlot> {
        let key = super::logins::source_key(peer);
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(SourceSlot {
            sources: self.clone(),
            key,
        })
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut open = self
            .sources
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// Why the API could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Plain HTTP was asked for on an address other hosts can reach.
    #[error("refusing plain HTTP on {0}: give a TLS configuration, or listen on loopback")]
    PlainHttpNotLoopback(SocketAddr),
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// TLS material could not be used.
    #[error("TLS: {0}")]
    Tls(String),
}

/// What the TLS layer learnt from a client certificate, put in every request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCertificate {
    /// The certificate chains to the cluster CA, carries the API admin OID
    /// ([`ssntp::api_admin_oid`]) and no SSNTP role: a cluster admin.
    pub admin: bool,
    /// The SSNTP roles it carries (a node's certificate: AGENT, NETAGENT): what the node image
    /// endpoint ([`crate::images::nodes`]) lets in.
    pub roles: ssntp::Role,
}

/// Refuses plain HTTP on anything but a loopback address.
pub fn check_plain_http(addr: SocketAddr) -> Result<(), ServeError> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(ServeError::PlainHttpNotLoopback(addr))
    }
}

/// A TLS 1.3 server configuration from PEM: the cluster CA (client certificates are optional and,
/// when sent, must chain to it), the server's certificate chain and its key.
pub fn server_tls_config(
    ca_pem: &[u8],
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<Arc<ServerConfig>, ServeError> {
    let tls = |e: &dyn std::fmt::Display| ServeError::Tls(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(der.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    let chain: Vec<_> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| tls(&e))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| tls(&e))?;
    let provider = ssntp_net::tls::provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| tls(&e))?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| tls(&e))?;
    Ok(Arc::new(config))
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then lets in-flight requests
/// finish (for a while). With `tls`, every connection is HTTPS; without, the listener must be on
/// loopback. Connections are bounded by the default [`ConnectionLimits`].
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    serve_with(listener, tls, router, shutdown, ConnectionLimits::default()).await
}

/// As [`serve`], with connections bounded by `limits`.
pub async fn serve_with(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
) -> Result<(), ServeError> {
    let local = listener.local_addr()?;
    if tls.is_none() {
        check_plain_http(local)?;
    }
    let acceptor = tls.map(TlsAcceptor::from);
    let tracker = TaskTracker::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let sources = Arc::new(PerSource::default());
    loop {
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors and the like: back off a little, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(source_slot) = sources.take(peer.ip(), limits.per_source) else {
            // Closed at once (dropped), before any TLS work; its slot is free again.
            tracing::debug!(%peer, "too many connections from this address: closed");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (router, shutdown, acceptor) = (router.clone(), shutdown.clone(), acceptor.clone());
        let header_timeout = limits.header_timeout;
        tracker.spawn(async move {
            let _slots = (slot, source_slot);
            let conn = Conn {
                peer,
                cert: None,
                header_timeout,
            };
            match acceptor {
                None => connection(stream, conn, router, shutdown).await,
                Some(acceptor) => {
                    let accepted =
                        tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream))
                            .await;
                    match accepted {
                        Ok(Ok(tls)) => {
                            let cert = client_certificate(tls.get_ref().1);
                            connection(tls, Conn { cert, ..conn }, router, shutdown).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("API connections still open after the drain timeout");
    }
    Ok(())
}

/// What a verified client certificate proves, if one was sent.
fn client_certificate(state: &rustls::ServerConnection) -> Option<ClientCertificate> {
    let der = state.peer_certificates()?.first()?;
    // An admin's certificate says so (the API admin OID) and carries no SSNTP role; any other
    // certificate the CA signed (a node's, a launcher's libvirt credential) is not a login.
    let (admin, roles) = match ssntp::cert::CertInfo::parse(der) {
        Ok(info) => (info.roles.is_empty() && info.is_api_admin(), info.roles),
        Err(_) => (false, ssntp::Role::empty()),
    };
    Some(ClientCertificate { admin, roles })
}

/// What is known of a connection when it is served.
#[derive(Debug, Clone, Copy)]
struct Conn {
    peer: SocketAddr,
    cert: Option<ClientCertificate>,
    header_timeout: Duration,
}

async fn connection<S>(stream: S, conn: Conn, router: Router, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Conn { peer, cert, .. } = conn;
    let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        let extensions = request.extensions_mut();
        extensions.remove::<ClientCertificate>();
        if let Some(cert) = cert {
            extensions.insert(cert);
        }
        extensions.insert(PeerAddr(peer));
        router.clone().oneshot(request.map(axum::body::Body::new))
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(conn.header_timeout)
        .serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "API connection ended with an error");
            }
        }
        () = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_on_loopback() {
        for ok in ["127.0.0.1:8889", "127.3.4.5:1", "[::1]:8889"] {
            assert!(check_plain_http(ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for refused in [
            "0.0.0.0:8889",
            "10.0.0.1:80",
            "[::]:8889",
            "192.168.1.2:443",
        ] {
            assert!(
                matches!(
                    check_plain_http(refused.parse().unwrap()),
                    Err(ServeError::PlainHttpNotLoopback(_))
                ),
                "{refused}"
            );
        }
    }

    #[test]
    fn sources_are_counted_and_uncounted() {
        let sources = Arc::new(PerSource::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = sources.take(a, 2).unwrap();
        let _second = sources.take(a, 2).unwrap();
        assert!(sources.take(a, 2).is_none());
        let _other = sources.take(b, 2).unwrap();
        drop(first);
        let _again = sources.take(a, 2).unwrap();
        drop((_second, _again, _other));
        assert!(
            sources.open.lock().unwrap().is_empty(),
            "no entry left behind"
        );
    }

    #[tokio::test]
    async fn serve_refuses_plain_http_on_a_wildcard_address() {
        let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let result = serve(listener, None, Router::new(), CancellationToken::new()).await;
        assert!(matches!(result, Err(ServeError::PlainHttpNotLoopback(_))));
    }
}
