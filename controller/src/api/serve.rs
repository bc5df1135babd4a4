//! Serving the router on a bound listener: HTTPS through tokio-rustls (client certificates
//! optional), or plain HTTP on a loopback address only; HTTP/1.1 by hyper; graceful shutdown on a
//! cancellation token (in-flight requests finish, idle connections close).

use std::net::SocketAddr;
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

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most connections served at once; more wait in the listener's backlog.
const MAX_CONNECTIONS: usize = 1024;
/// How long shutdown waits for in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

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
/// loopback.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let local = listener.local_addr()?;
    if tls.is_none() {
        check_plain_http(local)?;
    }
    let acceptor = tls.map(TlsAcceptor::from);
    let tracker = TaskTracker::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
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
        let _ = stream.set_nodelay(true);
        let (router, shutdown, acceptor) = (router.clone(), shutdown.clone(), acceptor.clone());
        tracker.spawn(async move {
            let _slot = slot;
            match acceptor {
                None => connection(stream, None, router, shutdown).await,
                Some(acceptor) => {
                    let accepted =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    match accepted {
                        Ok(Ok(tls)) => {
                            let cert = client_certificate(tls.get_ref().1);
                            connection(tls, cert, router, shutdown).await;
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
    let admin = match ssntp::cert::CertInfo::parse(der) {
        Ok(info) => info.roles.is_empty() && info.is_api_admin(),
        Err(_) => false,
    };
    Some(ClientCertificate { admin })
}

async fn connection<S>(
    stream: S,
    cert: Option<ClientCertificate>,
    router: Router,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
        request.extensions_mut().remove::<ClientCertificate>();
        if let Some(cert) = cert {
            request.extensions_mut().insert(cert);
        }
        router.clone().oneshot(request.map(axum::body::Body::new))
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
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

    #[tokio::test]
    async fn serve_refuses_plain_http_on_a_wildcard_address() {
        let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let result = serve(listener, None, Router::new(), CancellationToken::new()).await;
        assert!(matches!(result, Err(ServeError::PlainHttpNotLoopback(_))));
    }
}
