//! How the store reaches etcd: [`EtcdTransport`] (TLS with a client certificate, or plain HTTP/2
//! when explicitly asked), the endpoints, and the gRPC channel over our own connector.
//!
//! The channel's TLS is ours (rustls, TLS 1.3 only, the cluster CA as the only trust root, the
//! name dialled checked against etcd's certificate), not tonic's. Before the channel is made, one
//! endpoint is dialled and spoken to (the HTTP/2 preface and a SETTINGS frame, answered by etcd's
//! SETTINGS): a TLS or protocol failure is then an error with its cause at once, where the channel
//! alone would only retry until the call timed out.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use ssntp_net::tls::TlsIdentity;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::{Result, StoreError};

/// How an [`EtcdStore`](super::EtcdStore) talks to etcd.
#[derive(Debug, Clone)]
pub enum EtcdTransport {
    /// TLS 1.3: etcd's certificate must chain to the identity's CA and name the host dialled; the
    /// identity's certificate is presented (with etcd's `--client-cert-auth` and auth enabled, its
    /// subject CN is the etcd user: `docs/etcd-store.md`).
    Tls(TlsIdentity),
    /// Plain HTTP/2: for development only (anyone on the path reads and changes the cluster's
    /// state). Never chosen by default: a daemon uses it only when told to.
    Plaintext,
}

impl EtcdTransport {
    /// TLS with the CA, certificate and key in these PEM files.
    pub fn tls_files(
        ca: &std::path::Path,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<EtcdTransport> {
        TlsIdentity::load(ca, cert, key)
            .map(EtcdTransport::Tls)
            .map_err(|e| StoreError::Invalid(format!("etcd TLS: {e}")))
    }

    fn scheme(&self) -> &'static str {
        match self {
            EtcdTransport::Tls(_) => "https",
            EtcdTransport::Plaintext => "http",
        }
    }
}

/// One etcd endpoint: the host as dialled (and named to TLS) and its port.
#[derive(Debug, Clone)]
struct Target {
    host: String,
    port: u16,
}

impl Target {
    /// Parses `host:port`, `[v6]:port`, `http://...` or `https://...` (the scheme must agree with
    /// the transport).
    fn parse(text: &str, transport: &EtcdTransport) -> Result<Target> {
        let bad = |why: &str| StoreError::Invalid(format!("etcd endpoint {text:?}: {why}"));
        let rest = match text.split_once("://") {
            Some((scheme, rest)) if scheme == transport.scheme() => rest,
            Some(("http", _)) => {
                return Err(bad(
                    "http:// with TLS settings (use host:port or https://host:port)",
                ));
            }
            Some(("https", _)) => {
                return Err(bad(
                    "https:// needs TLS settings (the etcd CA, certificate and key)",
                ));
            }
            Some(_) => return Err(bad("unknown scheme (host:port, http:// or https://)")),
            None => text,
        };
        let (host, port) = rest
            .trim_end_matches('/')
            .rsplit_once(':')
            .ok_or_else(|| bad("not host:port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port.parse::<u16>().map_err(|_| bad("bad port"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Target {
            host: host.to_string(),
            port,
        })
    }

    fn authority(&self) -> String {
        match self.host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]:{}", self.port),
            _ => format!("{}:{}", self.host, self.port),
        }
    }
}

/// Something the channel reads and writes: a TCP stream, or TLS over one.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Dials etcd's endpoints, in order, with the transport's security.
#[derive(Clone)]
pub(super) struct Dialer {
    targets: Arc<Vec<Target>>,
    tls: Option<TlsConnector>,
    /// Whether a client certificate is presented.
    presents_cert: bool,
    timeout: Duration,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("targets", &self.targets)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// HTTP/2's connection preface, then an empty SETTINGS frame (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
/// The frame type of SETTINGS.
const SETTINGS: u8 = 4;

impl Dialer {
    pub(super) fn new(
        endpoints: &[String],
        transport: &EtcdTransport,
        timeout: Duration,
    ) -> Result<Dialer> {
        let targets = endpoints
            .iter()
            .map(|e| Target::parse(e, transport))
            .collect::<Result<Vec<_>>>()?;
        let tls = match transport {
            EtcdTransport::Tls(identity) => Some(
                identity
                    .client_config()
                    .map_err(|e| StoreError::Invalid(format!("etcd TLS: {e}")))?,
            ),
            EtcdTransport::Plaintext => None,
        };
        Ok(Dialer::with_config(targets, tls, timeout))
    }

    /// A dialer of `targets` over TLS with `config` (plain text without).
    fn with_config(
        targets: Vec<Target>,
        config: Option<Arc<rustls::ClientConfig>>,
        timeout: Duration,
    ) -> Dialer {
        let presents_cert = config
            .as_ref()
            .is_some_and(|c| c.client_auth_cert_resolver.has_certs());
        let tls = config.map(|config| {
            let mut config = (*config).clone();
            // gRPC is HTTP/2: etcd (Go's gRPC) wants it named in ALPN.
            config.alpn_protocols = vec![b"h2".to_vec()];
            TlsConnector::from(Arc::new(config))
        });
        Dialer {
            targets: Arc::new(targets),
            tls,
            presents_cert,
            timeout,
        }
    }

    /// A TLS dialer of `endpoint` with `config` as it is (tests: a client that presents no
    /// certificate).
    #[cfg(test)]
    pub(super) fn with_tls_config(
        endpoint: &str,
        config: Arc<rustls::ClientConfig>,
        timeout: Duration,
    ) -> Result<Dialer> {
        let target = Target::parse(endpoint, &EtcdTransport::Plaintext)?;
        Ok(Dialer::with_config(vec![target], Some(config), timeout))
    }

    /// The URI the channel names in its requests (the first endpoint; the connector may dial
    /// another).
    pub(super) fn uri(&self) -> String {
        let first = self
            .targets
            .first()
            .map_or_else(String::new, Target::authority);
        format!("http://{first}")
    }

    /// One endpoint, as the transport dials it, within the timeout.
    async fn dial(&self, target: &Target) -> std::result::Result<Box<dyn Io>, String> {
        let authority = target.authority();
        let dial = async {
            let tcp = TcpStream::connect((target.host.as_str(), target.port))
                .await
                .map_err(|e| format!("cannot connect: {e}"))?;
            let _ = tcp.set_nodelay(true);
            let Some(tls) = &self.tls else {
                return Ok::<_, String>(Box::new(tcp) as Box<dyn Io>);
            };
            let name = ServerName::try_from(target.host.clone())
                .map_err(|e| format!("{:?} is not a TLS server name: {e}", target.host))?;
            let stream = tls.connect(name, tcp).await.map_err(|e| {
                format!("TLS handshake failed: {e} ({})", self.hint(&e.to_string()))
            })?;
            Ok(Box::new(stream) as Box<dyn Io>)
        };
        match tokio::time::timeout(self.timeout, dial).await {
            Ok(out) => out.map_err(|e: String| format!("{authority}: {e}")),
            Err(_) => Err(format!(
                "{authority}: no connection within {:?}",
                self.timeout
            )),
        }
    }

    /// The first endpoint that can be dialled; every failure when none can.
    async fn dial_any(&self) -> std::result::Result<Box<dyn Io>, String> {
        let mut failures = Vec::new();
        for target in self.targets.iter() {
            match self.dial(target).await {
                Ok(io) => return Ok(io),
                Err(e) => failures.push(e),
            }
        }
        Err(failures.join("; "))
    }

    /// Dials an endpoint and checks that it answers HTTP/2 over this transport: the cause of
    /// a failure (a certificate refused either way, TLS against plain HTTP or the reverse, no
    /// etcd there) is told at once.
    pub(super) async fn check(&self) -> std::result::Result<(), String> {
        let mut io = self.dial_any().await?;
        let exchange = async {
            io.write_all(PREFACE).await?;
            io.flush().await?;
            let mut head = [0u8; 9];
            io.read_exact(&mut head).await?;
            Ok::<_, std::io::Error>(head)
        };
        let head = match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => {
                return Err(format!(
                    "no HTTP/2 answer within {:?} ({})",
                    self.timeout,
                    self.hint("")
                ));
            }
            Ok(Err(e)) => return Err(format!("{e} ({})", self.hint(&e.to_string()))),
            Ok(Ok(head)) => head,
        };
        if head[3] == SETTINGS {
            return Ok(());
        }
        Err(format!(
            "the answer is not HTTP/2 ({})",
            self.hint("not http/2")
        ))
    }

    /// The connector of the gRPC channel: dials the endpoints in order at each (re)connection.
    pub(super) fn connector(
        &self,
    ) -> impl tower::Service<
        http::Uri,
        Response = TokioIo<Box<dyn Io>>,
        Error = std::io::Error,
        Future = impl Send,
    > + Send
    + Clone
    + 'static {
        let dialer = self.clone();
        tower::service_fn(move |_: http::Uri| {
            let dialer = dialer.clone();
            async move {
                dialer
                    .dial_any()
                    .await
                    .map(TokioIo::new)
                    .map_err(std::io::Error::other)
            }
        })
    }
}

impl Dialer {
    /// What a failure most likely means, from its text and what was tried.
    fn hint(&self, error: &str) -> &'static str {
        let error = error.to_ascii_lowercase();
        let refused = [
            "badcertificate",
            "unknownca",
            "unsupportedcertificate",
            "certificateunknown",
        ];
        if error.contains("certificaterequired")
            || (!self.presents_cert && refused.iter().any(|r| error.contains(r)))
        {
            "etcd requires a client certificate"
        } else if refused.iter().any(|r| error.contains(r)) {
            "etcd refused our client certificate: is it issued by the CA etcd trusts \
             (--trusted-ca-file)?"
        } else if error.contains("unknownissuer") || error.contains("badsignature") {
            "etcd's certificate is not issued by our etcd CA"
        } else if error.contains("notvalidforname") {
            "etcd's certificate does not name the host dialled"
        } else if error.contains("expired") {
            "a certificate has expired"
        } else if self.tls.is_some() {
            "does etcd serve TLS on this port? (etcd --cert-file, --key-file)"
        } else {
            "etcd probably serves TLS on this port: give the etcd CA, certificate and key"
        }
    }
}
