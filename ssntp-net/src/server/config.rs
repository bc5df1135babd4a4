//! How a server is configured ([`ServerConfig`]) and why it cannot start ([`ServerError`]).

use std::time::Duration;
use uuid::Uuid;

use crate::conn::ConnConfig;
use crate::forward::Routes;
use crate::handshaker::HandshakerConfig;
use crate::rate::ReadRates;
use crate::revocation::Revocations;
use crate::tls::{TlsError, TlsIdentity};
use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp::payload::ClusterConfig;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// CA, certificate and key.
    pub tls: TlsIdentity,
    /// Our UUID (the one bound in our certificate, when it binds one).
    pub uuid: Uuid,
    /// The cluster configuration sent in CONNECTED (changed later with
    /// [`ServerHandle::set_cluster`](crate::server::ServerHandle::set_cluster)).
    pub cluster: ClusterConfig,
    /// Handshake and session limits.
    pub handshake: HandshakeConfig,
    /// Per-connection limits.
    pub conn: ConnConfig,
    /// Connections beyond this many are closed at once (default 16,384).
    pub max_connections: usize,
    /// Connections in their TLS or SSNTP handshake at once (default 1,024), so that peers that
    /// connect and stall (each for up to the handshake timeout) cannot take the slots of the
    /// sessions. A connection past that waits for a slot, up to
    /// [`ServerConfig::handshake_wait`], and as many again may wait; one past those is closed at
    /// once. So handshakes hold at most twice this many of [`ServerConfig::max_connections`],
    /// and a reconnect storm is served as fast as handshakes end instead of being sent away to
    /// back off.
    pub max_handshakes: usize,
    /// How long a connection waits for a handshake slot before it is closed (default 2 s).
    pub handshake_wait: Duration,
    /// Events queued for the application before readers wait (default 8,192).
    pub event_queue: usize,
    /// How long a shutdown waits for sessions to drain (default 3 s).
    pub grace: Duration,
    /// Forwarding rules.
    pub routes: Routes,
    /// The read budget of each role's sessions (default [`ReadRates::default`]: none for a
    /// controller, [`ReadRate::NODE`](crate::ReadRate::NODE) for nodes,
    /// [`ReadRate::CNCI`](crate::ReadRate::CNCI) for CNCIs).
    pub read_rates: ReadRates,
    /// Where handshakes run: a thread of their own ([`crate::handshaker`], the default), or
    /// `None`: on the sessions' runtime.
    pub handshakes: Option<HandshakerConfig>,
    /// How the application gets the frames sessions receive (default
    /// [`Delivery::Messages`]).
    pub delivery: Delivery,
    /// Revoked client certificates (default: none): refused at the TLS handshake; the list can
    /// be replaced while the server runs, and
    /// [`ServerHandle::disconnect_revoked`](crate::ServerHandle::disconnect_revoked) ends the
    /// live sessions of certificates a new list revokes.
    pub revocations: Option<Revocations>,
}

impl ServerConfig {
    /// A configuration with the defaults.
    pub fn new(tls: TlsIdentity, uuid: Uuid) -> ServerConfig {
        ServerConfig {
            tls,
            uuid,
            cluster: ClusterConfig::default(),
            handshake: HandshakeConfig::default(),
            conn: ConnConfig::default(),
            max_connections: 16_384,
            max_handshakes: 1_024,
            handshake_wait: Duration::from_secs(2),
            event_queue: 8_192,
            grace: Duration::from_secs(3),
            routes: Routes::new(),
            read_rates: ReadRates::default(),
            handshakes: Some(HandshakerConfig::default()),
            revocations: None,
            delivery: Delivery::Messages,
        }
    }
}

/// How a server hands the application the frames its sessions receive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Delivery {
    /// One message per frame, its payload decoded, in [`ServerEvent::Frames`] (the default).
    ///
    /// [`ServerEvent::Frames`]: crate::ServerEvent::Frames
    #[default]
    Messages,
    /// Each read's frames together, as views of the read's bytes, in [`ServerEvent::Views`]:
    /// every rule applied where the frames lie (a payload is decoded to be checked, and dropped),
    /// nothing built per frame but a small index entry, each payload decoded again only when the
    /// application reads it, on its own task. Every session's reader does it all itself, a
    /// session without a read budget too. For an application that takes every frame itself:
    /// the server refuses to start with routes that have a rule or a barrier.
    ///
    /// [`ServerEvent::Views`]: crate::ServerEvent::Views
    Views,
}

/// Why a server cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The TLS material is unusable.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// Our certificate does not carry a server role.
    #[error("the certificate's roles ({0}) include neither server nor scheduler")]
    NotAServer(Role),
    /// [`Delivery::Views`] with forwarding rules or barriers, which need one message per frame.
    #[error("views of the frames are delivered only with routes that have no rule nor barrier")]
    ViewsWithRoutes,
    /// Our UUID is not the one our certificate binds.
    #[error("the certificate binds UUID {bound}, not {configured}")]
    Identity {
        /// The certificate's.
        bound: Uuid,
        /// The configured one.
        configured: Uuid,
    },
}
