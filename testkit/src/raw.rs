//! A raw SSNTP peer: real TLS, then whatever bytes a test wants to send — for the frames a
//! well-behaved endpoint never sends (wrong origin, oversize, truncated, silence).

use bytes::BytesMut;
use ssntp::frame::{DEFAULT_MAX_FRAME, Frame};
use ssntp::{Decoded, Decoder};
use ssntp_net::TlsIdentity;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;

/// A TLS connection that speaks raw bytes.
pub struct RawPeer {
    stream: TlsStream<TcpStream>,
    buf: BytesMut,
}

impl RawPeer {
    /// Connects to `addr` (`host:port`) with `identity`'s certificate; TLS only, no CONNECT.
    pub async fn connect(addr: &str, identity: &TlsIdentity) -> std::io::Result<RawPeer> {
        let tcp = TcpStream::connect(addr).await?;
        RawPeer::over(tcp, addr, identity).await
    }

    /// The TLS handshake over `tcp`, a connection to `addr` already made.
    pub async fn over(
        tcp: TcpStream,
        addr: &str,
        identity: &TlsIdentity,
    ) -> std::io::Result<RawPeer> {
        let connector = TlsConnector::from(identity.client_config().expect("client config"));
        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_string();
        let name = ServerName::try_from(host).expect("server name");
        let stream = connector.connect(name, tcp).await?;
        Ok(RawPeer {
            stream,
            buf: BytesMut::new(),
        })
    }

    /// Writes bytes as they are.
    pub async fn send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Writes a frame.
    pub async fn send(&mut self, frame: &Frame) -> std::io::Result<()> {
        let bytes = frame
            .to_bytes(ssntp::frame::MAX_FRAME_CEILING)
            .expect("encodable");
        self.send_bytes(&bytes).await
    }

    /// The next frame within `within`; `None` if the connection closes (or fails) first.
    pub async fn recv(&mut self, within: Duration) -> Option<Frame> {
        let decoder = Decoder::new(DEFAULT_MAX_FRAME);
        let read = async {
            loop {
                match decoder.decode(&mut self.buf) {
                    Ok(Decoded::Frame(raw)) => return raw.into_frame().ok(),
                    Ok(Decoded::NeedMore(_)) => {}
                    Err(_) => return None,
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(within, read)
            .await
            .expect("nothing within the deadline")
    }

    /// Whether the peer closes the connection within `within` (frames before that are skipped).
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.stream.read_buf(&mut self.buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => self.buf.clear(),
                Err(_) => return false,
            }
        }
    }
}
