//! A connection's way to a session: the TLS handshake, then CONNECT answered by CONNECTED or
//! refused (PROTOCOL.md §4 steps 1–3), on the handshake thread when there is one.

use bytes::BytesMut;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::shared::Shared;
use crate::conn::{self, FirstFrame};
use crate::handshaker::{Handshaker, Rehomed};
use crate::tls;
use ssntp::Role;
use ssntp::handshake::{
    HandshakeConfig, PeerCertificate, ServerAccepted, ServerHandshake, UuidBinding,
};

/// An established connection: TLS, the CONNECT's outcome (its CONNECTED not sent yet), and what
/// was read past it.
pub(super) type Handshaken = (
    tokio_rustls::server::TlsStream<Rehomed>,
    ServerAccepted,
    BytesMut,
);

/// What a handshake needs of the server: its TLS acceptor, its identity and cluster
/// configuration (in [`Shared`]), and its handshake limits.
pub(super) struct Handshakes {
    pub(super) acceptor: TlsAcceptor,
    pub(super) shared: Arc<Shared>,
    pub(super) config: HandshakeConfig,
}

impl Handshakes {
    /// TLS, then CONNECT → CONNECTED (or the refusal); `None` when there is no session.
    pub(super) async fn handshake(&self, tcp: Rehomed) -> Option<Handshaken> {
        let start = conn::now().instant;
        let deadline = start + self.config.handshake_timeout;
        let tls_deadline = tokio::time::Instant::from_std(deadline);
        let mut stream = match tokio::time::timeout_at(tls_deadline, self.acceptor.accept(tcp))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                if refused_certificate(&e) {
                    // An operator's problem (an expired or foreign certificate), not noise.
                    tracing::info!(error = %e, "TLS handshake failed: peer certificate refused");
                } else {
                    tracing::debug!(error = %e, "TLS handshake failed");
                }
                return None;
            }
            Err(_) => {
                tracing::debug!("TLS handshake timed out");
                return None;
            }
        };
        let peer = tls::peer_of(stream.get_ref().1).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "unreadable peer certificate: no roles");
            PeerCertificate {
                roles: Role::empty(),
                binding: UuidBinding::Unbound,
            }
        });
        let hs = ServerHandshake::new(
            (self.shared.uuid, self.shared.roles),
            self.shared
                .cluster
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            peer,
            self.config,
            start,
        );
        let decoder = self.config.decoder();
        let mut buf = BytesMut::with_capacity(4096);
        let max = self.shared.max_frame;
        let outcome = match conn::read_first(&mut stream, &mut buf, &decoder, hs.deadline()).await {
            FirstFrame::Frame(raw) => hs.handle_frame(conn::now().instant, raw),
            FirstFrame::Framing(e) => Err(hs.handle_framing_error(e)),
            FirstFrame::Timeout => match hs.handle_timeout(deadline) {
                Err(rejected) => Err(rejected),
                Ok(_) => return None, // cannot happen: the deadline is the handshake's own
            },
            FirstFrame::Io(e) => {
                tracing::debug!(error = %e, "closed before CONNECT");
                return None;
            }
        };
        let accepted = match outcome {
            Ok(a) => a,
            Err(rejected) => {
                tracing::info!(error = %rejected.error, "connection refused");
                let _ = conn::write_now(&mut stream, &rejected.reply(), max, deadline).await;
                let _ = stream.shutdown().await;
                return None;
            }
        };
        // CONNECTED goes out through the session's outbox once the session is registered: a
        // peer told it is connected can be reached at once.
        Some((stream, accepted, buf))
    }

    /// [`Handshakes::handshake`] on the handshake thread when there is one: the socket goes there
    /// and comes back established (or not at all).
    pub(super) async fn handshaken(
        self: &Arc<Self>,
        tcp: TcpStream,
        handshaker: Option<&Handshaker>,
    ) -> Option<Handshaken> {
        let Some(h) = handshaker else {
            // The handshake's state (TLS included) is boxed so that it is freed once the
            // session runs: a long-lived connection task keeps only what the session needs.
            return Box::pin(self.handshake(Rehomed::new(tcp))).await;
        };
        let std = tcp.into_std().ok()?;
        let this = self.clone();
        let (mut stream, accepted, buf, std) = h
            .run(async move {
                let there = Rehomed::new(TcpStream::from_std(std).ok()?);
                let (mut stream, accepted, buf) = Box::pin(this.handshake(there)).await?;
                let std = stream.get_mut().0.detach().ok()?;
                Some((stream, accepted, buf, std))
            })
            .await??;
        stream.get_mut().0.attach(std).ok()?;
        Some((stream, accepted, buf))
    }
}

/// Whether a failed TLS accept refused the peer's certificate (expired, not yet valid, not
/// signed by the cluster's CA, ...), as opposed to a peer that spoke no TLS or went away.
fn refused_certificate(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)))
}
