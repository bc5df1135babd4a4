//! Fetching an instance's serial console log from its node's console endpoint: HTTPS beside
//! SSNTP, not part of it (docs/protocol.md, "The console channel").
//!
//! The node is dialled at the first address it reported (STATS `networks`) on
//! [`EngineConfig::console_port`](super::EngineConfig::console_port), with the controller's own
//! certificate; the node's certificate must chain to the cluster CA, carry the AGENT role and,
//! when it binds a UUID, bind the node's ([`ssntp_net::tls::Expected`]). Bounded:
//! [`CONNECT_TIMEOUT`] to connect, [`TOTAL_TIMEOUT`] in all, at most [`MAX_RESPONSE`] bytes of
//! answer.

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use ssntp::Role;
use ssntp_net::TlsIdentity;
use ssntp_net::tls::Expected;
use std::net::SocketAddr;
use std::time::Duration;
use uuid::Uuid;

use super::Engine;
use crate::cluster::{ClusterError, NodeEndpoint, console_allowed};

use store::Scope;

/// How long connecting to a node may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a whole fetch may take.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of answer body taken (the node sends at most 1 MiB of log).
pub const MAX_RESPONSE: usize = 1024 * 1024 + 64 * 1024;

impl Engine {
    /// The node endpoint of instance `id` (its node, the address to dial, the TLS identity to
    /// dial it with), for `operation` on an instance that `allowed` lets it be done in.
    fn endpoint_of(
        &self,
        scope: Scope,
        id: Uuid,
        operation: &'static str,
        allowed: fn(&store::InstanceState) -> bool,
        off_host: &str,
    ) -> Result<NodeEndpoint, ClusterError> {
        let instance = self.store.instance(scope, id)?;
        if self.remote_of(&instance)?.is_some() {
            return Err(ClusterError::NotAvailable(off_host.to_string()));
        }
        let node = match instance.node {
            Some(node) if allowed(&instance.state) => node,
            _ => {
                return Err(ClusterError::InvalidState {
                    id,
                    state: instance.state.name().to_string(),
                    operation,
                });
            }
        };
        self.node_endpoint(node)
    }

    /// The node endpoint of node `node`, as [`Engine::endpoint_of`] finds an instance's.
    fn node_endpoint(&self, node: Uuid) -> Result<NodeEndpoint, ClusterError> {
        let Some(tls) = &self.config.console_tls else {
            return Err(ClusterError::Unavailable(
                "this controller reaches no node endpoints (no TLS identity for them)".into(),
            ));
        };
        let ip = self
            .state()
            .nodes
            .get(&node)
            .and_then(|n| n.ips.first().copied())
            .ok_or_else(|| {
                ClusterError::Unavailable(format!(
                    "node {node} reported no address for its endpoint"
                ))
            })?;
        Ok(NodeEndpoint {
            node,
            addr: SocketAddr::new(ip, self.config.console_port),
            tls: tls.clone(),
        })
    }

    /// [`Cluster::delete_volume_data`](crate::cluster::Cluster::delete_volume_data).
    pub(super) fn remove_volume_data(&self, node: Uuid, volume: Uuid) -> Result<(), ClusterError> {
        let endpoint = self.node_endpoint(node)?;
        let request = async {
            let (mut sender, _driver) = dial(&endpoint.tls, node, endpoint.addr).await?;
            let request = hyper::Request::delete(format!("/v1/volumes/{volume}"))
                .header(hyper::header::HOST, endpoint.addr.to_string())
                .body(Empty::<Bytes>::new())
                .map_err(|e| format!("request: {e}"))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("HTTP: {e}"))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), 64 * 1024)
                .collect()
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
                .unwrap_or_default();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("answered {status}: {body}"))
            }
        };
        let bounded = async {
            tokio::time::timeout(TOTAL_TIMEOUT, request)
                .await
                .map_err(|_| format!("no answer within {TOTAL_TIMEOUT:?}"))?
        };
        let result = match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle.block_on(bounded),
            Err(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| ClusterError::Unavailable(format!("a runtime for the call: {e}")))?
                .block_on(bounded),
        };
        result.map_err(|why| {
            ClusterError::Unavailable(format!(
                "removing volume {volume} from node {node} at {}: {why}",
                endpoint.addr
            ))
        })
    }

    /// [`Cluster::disk_source`](crate::cluster::Cluster::disk_source).
    pub(super) fn disk_endpoint(
        &self,
        scope: Scope,
        id: Uuid,
    ) -> Result<NodeEndpoint, ClusterError> {
        self.endpoint_of(
            scope,
            id,
            "make an image of it (it must be active, stopped, paused or suspended on a node)",
            snapshot_allowed,
            "off-host instances cannot be snapshotted",
        )
    }

    /// [`Cluster::console`](crate::cluster::Cluster::console).
    pub(super) fn console_log(
        &self,
        scope: Scope,
        id: Uuid,
        lines: usize,
    ) -> Result<String, ClusterError> {
        let NodeEndpoint { node, addr, tls } = self.endpoint_of(
            scope,
            id,
            "show its console log (it is on no node)",
            console_allowed,
            "console log not available for off-host instances",
        )?;
        let fetch = fetch(&tls, node, addr, id, lines);
        let result = match tokio::runtime::Handle::try_current() {
            // Called from a blocking thread of the controller's runtime (the API's
            // spawn_blocking), as the trait asks.
            Ok(handle) => handle.block_on(fetch),
            Err(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| ClusterError::Unavailable(format!("a runtime for the fetch: {e}")))?
                .block_on(fetch),
        };
        result.map_err(|e| match e {
            Fetch::Refused(status, text) if status == hyper::StatusCode::NOT_FOUND => {
                ClusterError::Unavailable(format!(
                    "node {node} does not have instance {id} ({text})"
                ))
            }
            Fetch::Refused(status, text) if status == hyper::StatusCode::CONFLICT => {
                ClusterError::NotAvailable(text)
            }
            Fetch::Refused(status, text) => ClusterError::Unavailable(format!(
                "node {node} at {addr} answered {status}: {text}"
            )),
            Fetch::Failed(why) => {
                ClusterError::Unavailable(format!("node {node} at {addr}: {why}"))
            }
        })
    }
}

/// Whether an instance in `state` may have its disk copied (a snapshot): on a node, active,
/// stopped, paused or suspended (Nova's ACTIVE, SHUTOFF, PAUSED, SUSPENDED).
pub fn snapshot_allowed(state: &store::InstanceState) -> bool {
    use store::InstanceState as S;
    matches!(state, S::Active | S::Exited | S::Paused | S::Suspended)
}

/// `GET /v1/instances/{id}/disk` from the node `endpoint`: the response once its head is in (a
/// 200's body is the disk, to be read within [`DISK_TIMEOUT`]), or why there is none. The
/// connection lives as long as the body.
pub async fn fetch_disk(
    endpoint: &NodeEndpoint,
    id: Uuid,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let exchange = async {
        let (mut sender, _driver) = dial(&endpoint.tls, endpoint.node, endpoint.addr).await?;
        let request = hyper::Request::get(format!("/v1/instances/{id}/disk"))
            .header(hyper::header::HOST, endpoint.addr.to_string())
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("request: {e}"))?;
        sender
            .send_request(request)
            .await
            .map_err(|e| format!("HTTP: {e}"))
    };
    tokio::time::timeout(DISK_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {DISK_TIMEOUT:?}"))?
}

/// How long a node may take to copy a disk and start sending it, and then to send it.
pub const DISK_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Why a fetch failed.
#[derive(Debug)]
enum Fetch {
    /// The node answered, not with the log.
    Refused(hyper::StatusCode, String),
    /// No answer: the cause.
    Failed(String),
}

impl From<String> for Fetch {
    fn from(why: String) -> Fetch {
        Fetch::Failed(why)
    }
}

/// An HTTP/1.1 connection to the endpoint of node `node` at `addr`: TLS with the controller's
/// certificate, the node's checked to chain to the CA, carry the AGENT role and, when it binds a
/// UUID, bind `node`'s; within [`CONNECT_TIMEOUT`] to connect. The returned task drives the
/// connection: abort it when done.
pub(super) async fn dial<B>(
    tls: &TlsIdentity,
    node: Uuid,
    addr: SocketAddr,
) -> Result<
    (
        hyper::client::conn::http1::SendRequest<B>,
        tokio::task::JoinHandle<()>,
    ),
    String,
>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let expected = Expected {
        role: Role::AGENT,
        uuid: Some(node),
    };
    let config = tls.client_config_for(expected).map_err(|e| e.to_string())?;
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::from(addr.ip()), tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, driver))
}

/// `GET /v1/instances/{id}/console?lines=N` from the node `node` at `addr`.
async fn fetch(
    tls: &TlsIdentity,
    node: Uuid,
    addr: SocketAddr,
    id: Uuid,
    lines: usize,
) -> Result<String, Fetch> {
    let exchange = async move {
        let (mut sender, driver) = dial(tls, node, addr).await?;
        let request = hyper::Request::get(format!("/v1/instances/{id}/console?lines={lines}"))
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("HTTP: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        driver.abort();
        let text = String::from_utf8_lossy(&body).into_owned();
        if status == hyper::StatusCode::OK {
            Ok(text)
        } else {
            Err(Fetch::Refused(status, text))
        }
    };
    tokio::time::timeout(TOTAL_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {TOTAL_TIMEOUT:?}"))?
}
