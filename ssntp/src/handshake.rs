//! The handshake (PROTOCOL.md §4) as per-state structs consumed by value, for both sides.
//!
//! Server: [`ServerHandshake`] waits for CONNECT and becomes a [`ServerAccepted`] (a session and
//! the CONNECTED to send) or a [`Rejected`] (the ERROR to send before closing). Client:
//! [`ClientHandshake::start`] yields the CONNECT to send; the server's answer makes a
//! [`ClientAccepted`] or a [`ClientHandshakeError`].

use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::codec::{Decoder, FrameError};
use crate::error::{ClientHandshakeError, HandshakeError};
use crate::frame::{Frame, MINOR, Operand, RawFrame};
use crate::payload::{ClusterConfig, Connect, Connected, Payload, PayloadError};
use crate::role::Role;
use crate::session::{Session, SessionConfig, Side};

/// The UUID a peer certificate binds with its `urn:uuid:` URI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UuidBinding {
    /// No `urn:uuid:` name: any origin is accepted.
    Unbound,
    /// Exactly one: the peer's UUID.
    Bound(Uuid),
    /// More than one (or one that is not a UUID): the certificate cannot be used.
    Ambiguous,
}

/// What the TLS layer learned of the peer's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerCertificate {
    /// The OR of the role OIDs it carries.
    pub roles: Role,
    /// The UUID it binds.
    pub binding: UuidBinding,
}

/// Handshake limits, with the session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeConfig {
    /// How long the server waits for CONNECT, and the client for the answer (default 10 s).
    pub handshake_timeout: Duration,
    /// The established session's limits.
    pub session: SessionConfig,
}

impl Default for HandshakeConfig {
    fn default() -> HandshakeConfig {
        HandshakeConfig {
            handshake_timeout: Duration::from_secs(10),
            session: SessionConfig::default(),
        }
    }
}

impl HandshakeConfig {
    /// The decoder for handshake frames.
    pub fn decoder(&self) -> Decoder {
        Decoder::new(self.session.max_frame)
    }
}

/// The server side, waiting for CONNECT.
#[derive(Debug, Clone)]
pub struct ServerHandshake {
    local_uuid: Uuid,
    local_roles: Role,
    cluster: ClusterConfig,
    peer: PeerCertificate,
    config: HandshakeConfig,
    deadline: Instant,
}

/// The server accepted: the session, and the CONNECTED to send.
#[derive(Debug, Clone)]
pub struct ServerAccepted {
    /// The established session.
    pub session: Session,
    /// CONNECTED.
    pub reply: Frame,
}

/// The server refused: why; [`Rejected::reply`] is the ERROR to send before closing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Why.
    pub error: HandshakeError,
    local_uuid: Uuid,
}

impl Rejected {
    /// CONNECTION_ABORTED or CONNECTION_FAILURE, from the server.
    pub fn reply(&self) -> Frame {
        self.error.reply(self.local_uuid)
    }
}

impl ServerHandshake {
    /// Starts waiting for CONNECT at `now` from a client whose certificate is `peer`.
    pub fn new(
        (local_uuid, local_roles): (Uuid, Role),
        cluster: ClusterConfig,
        peer: PeerCertificate,
        config: HandshakeConfig,
        now: Instant,
    ) -> ServerHandshake {
        ServerHandshake {
            local_uuid,
            local_roles,
            cluster,
            peer,
            config,
            deadline: now + config.handshake_timeout,
        }
    }

    /// When the client's time is up.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    fn reject(&self, error: HandshakeError) -> Rejected {
        Rejected {
            error,
            local_uuid: self.local_uuid,
        }
    }

    /// Refuses the client once the deadline has passed; otherwise keeps waiting.
    pub fn handle_timeout(self, now: Instant) -> Result<ServerHandshake, Rejected> {
        if now >= self.deadline {
            Err(self.reject(HandshakeError::Timeout))
        } else {
            Ok(self)
        }
    }

    /// Refuses a first frame that cannot be framed.
    pub fn handle_framing_error(self, error: FrameError) -> Rejected {
        self.reject(HandshakeError::Framing(error))
    }

    /// Decides on the client's first frame.
    pub fn handle_frame(self, now: Instant, raw: RawFrame) -> Result<ServerAccepted, Rejected> {
        match self.accept(now, raw) {
            Ok(accepted) => Ok(accepted),
            Err(error) => Err(self.reject(error)),
        }
    }

    fn accept(&self, now: Instant, raw: RawFrame) -> Result<ServerAccepted, HandshakeError> {
        if now >= self.deadline {
            return Err(HandshakeError::Timeout);
        }
        if raw.header.minor != MINOR {
            return Err(HandshakeError::Version {
                minor: raw.header.minor,
            });
        }
        if raw.header.operand != Operand::Connect {
            return Err(HandshakeError::NotConnect(raw.header.operand));
        }
        let origin = raw.header.origin;
        let frame = raw
            .into_frame()
            .map_err(|e| HandshakeError::BadConnect(e.to_string()))?;
        let claimed = match frame.decode_payload() {
            Ok(Payload::Connect(Connect { role })) => role,
            Ok(_) => unreachable_payload(),
            Err(PayloadError::Missing) => {
                return Err(HandshakeError::BadConnect("no payload".into()));
            }
            Err(e) => return Err(HandshakeError::BadConnect(e.to_string())),
        };
        if !claimed.is_valid_claim() {
            return Err(HandshakeError::InvalidClaim(claimed));
        }
        if !self.peer.roles.contains(claimed) {
            return Err(HandshakeError::RoleNotInCertificate {
                claimed,
                certificate: self.peer.roles,
            });
        }
        match self.peer.binding {
            UuidBinding::Unbound => {}
            UuidBinding::Bound(bound) if bound == origin => {}
            UuidBinding::Bound(bound) => {
                return Err(HandshakeError::IdentityMismatch { bound, origin });
            }
            UuidBinding::Ambiguous => return Err(HandshakeError::AmbiguousIdentity),
        }
        let session = Session::new(
            Side::Server,
            (self.local_uuid, self.local_roles),
            (origin, claimed),
            self.config.session,
            now,
        );
        let reply = Frame::new(
            self.local_uuid,
            &Payload::Connected(Connected {
                role: self.local_roles,
                client_uuid: origin,
                config: self.cluster.clone(),
            }),
        );
        Ok(ServerAccepted { session, reply })
    }
}

/// `Payload::decode` for CONNECT only ever yields `Payload::Connect`.
#[cold]
fn unreachable_payload() -> Role {
    Role::empty()
}

/// The client side, waiting for the answer to its CONNECT.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    local_uuid: Uuid,
    claim: Role,
    server: PeerCertificate,
    config: HandshakeConfig,
    deadline: Instant,
}

/// The client is connected: the session, the server's UUID and roles, the cluster configuration.
#[derive(Debug, Clone)]
pub struct ClientAccepted {
    /// The established session.
    pub session: Session,
    /// The cluster configuration the server sent.
    pub cluster: ClusterConfig,
}

impl ClientHandshake {
    /// Claims `claim` (which must be a valid claim within `own_roles`, our certificate's roles)
    /// towards a server whose certificate is `server`; returns the state and the CONNECT to send.
    pub fn start(
        (local_uuid, own_roles): (Uuid, Role),
        claim: Role,
        server: PeerCertificate,
        config: HandshakeConfig,
        now: Instant,
    ) -> Result<(ClientHandshake, Frame), ClientHandshakeError> {
        if !claim.is_valid_claim() {
            return Err(ClientHandshakeError::BadClaim {
                claimed: claim,
                why: "not a role a client may claim",
            });
        }
        if !own_roles.contains(claim) {
            return Err(ClientHandshakeError::BadClaim {
                claimed: claim,
                why: "not in our certificate",
            });
        }
        let connect = Frame::new(local_uuid, &Payload::Connect(Connect { role: claim }));
        let state = ClientHandshake {
            local_uuid,
            claim,
            server,
            config,
            deadline: now + config.handshake_timeout,
        };
        Ok((state, connect))
    }

    /// When the server's time is up.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Gives up once the deadline has passed; otherwise keeps waiting.
    pub fn handle_timeout(self, now: Instant) -> Result<ClientHandshake, ClientHandshakeError> {
        if now >= self.deadline {
            Err(ClientHandshakeError::Timeout)
        } else {
            Ok(self)
        }
    }

    /// Decides on the server's answer.
    pub fn handle_frame(
        self,
        now: Instant,
        raw: RawFrame,
    ) -> Result<ClientAccepted, ClientHandshakeError> {
        let operand = raw.header.operand;
        let origin = raw.header.origin;
        let unexpected = |what: String| ClientHandshakeError::Unexpected(what);
        let frame = raw.into_frame().map_err(|e| unexpected(e.to_string()))?;
        let payload = frame
            .decode_payload()
            .map_err(|e| unexpected(format!("{operand}: {e}")));
        let connected = match payload? {
            Payload::Connected(c) => c,
            Payload::ConnectionFailure(r) => return Err(ClientHandshakeError::Failed(r.reason)),
            Payload::ConnectionAborted(r) => return Err(ClientHandshakeError::Aborted(r.reason)),
            other => return Err(unexpected(other.operand().to_string())),
        };
        if !self.server.roles.contains(connected.role)
            || !connected.role.intersects(Role::SERVER | Role::SCHEDULER)
        {
            return Err(ClientHandshakeError::ServerRole {
                claimed: connected.role,
                certificate: self.server.roles,
            });
        }
        match self.server.binding {
            UuidBinding::Bound(bound) if bound != origin => {
                return Err(ClientHandshakeError::ServerIdentity { bound, origin });
            }
            UuidBinding::Ambiguous => {
                return Err(ClientHandshakeError::ServerIdentity {
                    bound: Uuid::nil(),
                    origin,
                });
            }
            _ => {}
        }
        let session = Session::new(
            Side::Client,
            (self.local_uuid, self.claim),
            (origin, connected.role),
            self.config.session,
            now,
        );
        Ok(ClientAccepted {
            session,
            cluster: connected.config,
        })
    }
}
