//! The controller's node image endpoint as an [`ImageSource`]: `GET
//! /v1/images/sha512/{hash}` over TLS 1.3, this node's certificate presented (the controller
//! serves only AGENT and NETAGENT certificates), the controller's checked to chain to the
//! cluster CA, carry the CONTROLLER role and name the host dialled.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use ssntp::Role;
use ssntp_net::tls::{Expected, TlsIdentity};

use super::cache::{Download, ImageSource};

/// How long connecting (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server may take to answer the request (its headers).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of an error answer's body read (for the message).
const MAX_ERROR_BODY: usize = 1024;

/// The node image endpoint of a controller.
#[derive(Debug)]
pub struct ImageServer {
    /// `host:port`, as given.
    addr: String,
    host: ServerName<'static>,
    tls: Arc<ClientConfig>,
}

impl ImageServer {
    /// The endpoint at `addr` (`host:port`; `[v6]:port`), dialled with `tls`.
    pub fn new(tls: &TlsIdentity, addr: &str) -> Result<ImageServer, String> {
        let (host, _port) = addr
            .rsplit_once(':')
            .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
            .ok_or_else(|| format!("{addr:?} is not host:port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = ServerName::try_from(host.to_string()).map_err(|e| format!("{addr:?}: {e}"))?;
        let expected = Expected {
            role: Role::CONTROLLER,
            uuid: None,
        };
        let tls = tls.client_config_for(expected).map_err(|e| e.to_string())?;
        Ok(ImageServer {
            addr: addr.to_string(),
            host,
            tls,
        })
    }

    async fn get(&self, sha512: &str) -> Result<Download, String> {
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&self.addr))
            .await
            .map_err(|_| format!("no connection to {} within {CONNECT_TIMEOUT:?}", self.addr))?
            .map_err(|e| format!("connecting to {}: {e}", self.addr))?;
        let _ = tcp.set_nodelay(true);
        let stream = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_rustls::TlsConnector::from(self.tls.clone()).connect(self.host.clone(), tcp),
        )
        .await
        .map_err(|_| {
            format!(
                "no TLS handshake with {} within {CONNECT_TIMEOUT:?}",
                self.addr
            )
        })?
        .map_err(|e| format!("TLS with {}: {e}", self.addr))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP with {}: {e}", self.addr))?;
        // The connection ends with the response's body (the sender is dropped below).
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let request = hyper::Request::get(format!("/v1/images/sha512/{sha512}"))
            .header(hyper::header::HOST, &self.addr)
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("request: {e}"))?;
        let response = tokio::time::timeout(ANSWER_TIMEOUT, sender.send_request(request))
            .await
            .map_err(|_| format!("no answer from {} within {ANSWER_TIMEOUT:?}", self.addr))?
            .map_err(|e| format!("HTTP with {}: {e}", self.addr))?;
        drop(sender);
        let status = response.status();
        if status != hyper::StatusCode::OK {
            let text = Limited::new(response.into_body(), MAX_ERROR_BODY)
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            return Err(format!(
                "the image server {} answered {status}: {text}",
                self.addr
            ));
        }
        let size = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        Ok(Download {
            size,
            body: response.into_body().map_err(|e| e.to_string()).boxed(),
        })
    }
}

impl ImageSource for ImageServer {
    fn fetch<'a>(
        &'a self,
        sha512: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Download, String>> + Send + 'a>> {
        Box::pin(self.get(sha512))
    }
}
