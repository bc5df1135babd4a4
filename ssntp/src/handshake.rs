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
use crate::role::Side;
use crate::session::{Session, SessionConfig};

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
    /// Whether the client's certificate binds its UUID (PROTOCOL.md §2). Only such a client may
    /// take the UUID of a live session (§4 step 5): the server checks that against its sessions.
    pub bound: bool,
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
            &Payload::Connected(Box::new(Connected {
                role: self.local_roles,
                client_uuid: origin,
                config: self.cluster.clone(),
            })),
        );
        Ok(ServerAccepted {
            session,
            reply,
            bound: matches!(self.peer.binding, UuidBinding::Bound(_)),
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::DEFAULT_MAX_FRAME;
    use crate::payload::Reason;
    use crate::testutil::{Clock, bytes_with, cbor, map, raw, raw_payload, raw_with};
    use ciborium::Value;

    const SERVER: Uuid = Uuid::from_bytes([0x5c; 16]);
    const CLIENT: Uuid = Uuid::from_bytes([0x11; 16]);

    fn server(peer_roles: Role, binding: UuidBinding, clock: Clock) -> ServerHandshake {
        ServerHandshake::new(
            (SERVER, Role::SCHEDULER),
            ClusterConfig::default(),
            PeerCertificate {
                roles: peer_roles,
                binding,
            },
            HandshakeConfig::default(),
            clock.at(0),
        )
    }

    fn connect(role: Role) -> RawFrame {
        raw_payload(CLIENT, &Payload::Connect(Connect { role }))
    }

    fn connect_body(body: &[u8]) -> RawFrame {
        raw_with(1, 0, Operand::Connect, CLIENT, body)
    }

    /// The outcome in short: `Ok(claimed role)`, or the ERROR operand the server answers with.
    fn outcome(r: Result<ServerAccepted, Rejected>) -> Result<Role, Operand> {
        match r {
            Ok(a) => {
                assert_eq!(a.reply.operand, Operand::Connected);
                assert_eq!(a.reply.origin, SERVER);
                Ok(a.session.peer_role())
            }
            Err(rej) => {
                let reply = rej.reply();
                assert_eq!(reply.origin, SERVER);
                assert!(reply.operand.is_error());
                // The reply carries a readable reason.
                match reply.decode_payload().unwrap() {
                    Payload::ConnectionAborted(r) | Payload::ConnectionFailure(r) => {
                        assert!(!r.reason.is_empty())
                    }
                    other => panic!("unexpected reply {other:?}"),
                }
                Err(reply.operand)
            }
        }
    }

    #[test]
    fn every_valid_claim_within_the_certificate_is_accepted() {
        let clock = Clock::new();
        let cases = [
            (Role::CONTROLLER, Role::CONTROLLER),
            (Role::AGENT, Role::AGENT),
            (Role::NETAGENT, Role::NETAGENT),
            (Role::DUAL, Role::DUAL),
            (Role::DUAL, Role::AGENT),
            (Role::DUAL, Role::NETAGENT),
            (Role::CNCIAGENT, Role::CNCIAGENT),
            (Role::all(), Role::CONTROLLER),
        ];
        for (cert, claim) in cases {
            let hs = server(cert, UuidBinding::Unbound, clock);
            let accepted = hs.handle_frame(clock.at(5), connect(claim)).unwrap();
            let s = &accepted.session;
            assert_eq!(
                (
                    s.side(),
                    s.local_uuid(),
                    s.local_role(),
                    s.peer_uuid(),
                    s.peer_role()
                ),
                (Side::Server, SERVER, Role::SCHEDULER, CLIENT, claim),
                "cert {cert} claim {claim}"
            );
            let Payload::Connected(c) = accepted.reply.decode_payload().unwrap() else {
                panic!("not CONNECTED")
            };
            assert_eq!(c.role, Role::SCHEDULER);
            assert_eq!(c.client_uuid, CLIENT);
            assert_eq!(c.config, ClusterConfig::default());
        }
    }

    #[test]
    fn handshake_outcome_table() {
        let clock = Clock::new();
        let other = Uuid::from_bytes([0x22; 16]);
        let abort = Err(Operand::ConnectionAborted);
        let fail = Err(Operand::ConnectionFailure);
        // (certificate roles, binding, first frame, expected)
        type Case = (
            &'static str,
            Role,
            UuidBinding,
            RawFrame,
            Result<Role, Operand>,
        );
        let cases: Vec<Case> = vec![
            (
                "bound and matching",
                Role::AGENT,
                UuidBinding::Bound(CLIENT),
                connect(Role::AGENT),
                Ok(Role::AGENT),
            ),
            (
                "bound to another",
                Role::AGENT,
                UuidBinding::Bound(other),
                connect(Role::AGENT),
                abort,
            ),
            (
                "two bound UUIDs",
                Role::AGENT,
                UuidBinding::Ambiguous,
                connect(Role::AGENT),
                abort,
            ),
            (
                "claim not in cert",
                Role::AGENT,
                UuidBinding::Unbound,
                connect(Role::CONTROLLER),
                abort,
            ),
            (
                "dual claim, agent cert",
                Role::AGENT,
                UuidBinding::Unbound,
                connect(Role::DUAL),
                abort,
            ),
            (
                "cert without roles",
                Role::empty(),
                UuidBinding::Unbound,
                connect(Role::AGENT),
                abort,
            ),
            (
                "claim scheduler",
                Role::all(),
                UuidBinding::Unbound,
                connect(Role::SCHEDULER),
                abort,
            ),
            (
                "claim server",
                Role::all(),
                UuidBinding::Unbound,
                connect(Role::SERVER),
                abort,
            ),
            (
                "claim nothing",
                Role::all(),
                UuidBinding::Unbound,
                connect(Role::empty()),
                abort,
            ),
            (
                "claim controller|agent",
                Role::all(),
                UuidBinding::Unbound,
                connect(Role::CONTROLLER | Role::AGENT),
                abort,
            ),
            (
                "claim unknown bit",
                Role::all(),
                UuidBinding::Unbound,
                connect(Role::from_bits_retain(0x104)),
                abort,
            ),
            (
                "heartbeat first",
                Role::AGENT,
                UuidBinding::Unbound,
                raw_payload(CLIENT, &Payload::Heartbeat),
                fail,
            ),
            (
                "ready first",
                Role::AGENT,
                UuidBinding::Unbound,
                raw_with(1, 0, Operand::Ready, CLIENT, &[]),
                fail,
            ),
            (
                "unknown operand first",
                Role::AGENT,
                UuidBinding::Unbound,
                raw_with(1, 0, Operand::from_wire(0, 99), CLIENT, &[]),
                fail,
            ),
            (
                "minor 1",
                Role::AGENT,
                UuidBinding::Unbound,
                raw_with(
                    1,
                    1,
                    Operand::Connect,
                    CLIENT,
                    &cbor(&map(vec![("role", Value::from(4))])),
                ),
                fail,
            ),
            (
                "no payload",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&[]),
                fail,
            ),
            (
                "no role key",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&cbor(&map(vec![("rol", Value::from(4))]))),
                fail,
            ),
            (
                "role negative",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&cbor(&map(vec![("role", Value::from(-4))]))),
                fail,
            ),
            (
                "role over u32",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&cbor(&map(vec![("role", Value::from(1u64 << 32))]))),
                fail,
            ),
            (
                "role as text",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&cbor(&map(vec![("role", Value::from("agent"))]))),
                fail,
            ),
            (
                "payload an array",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&cbor(&Value::Array(vec![Value::from(4)]))),
                fail,
            ),
            (
                "bytes after the map",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&[0xa1, 0x64, b'r', b'o', b'l', b'e', 0x04, 0x00]),
                fail,
            ),
            (
                "truncated map",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&[0xa1, 0x64, b'r', b'o']),
                fail,
            ),
            (
                "malformed trace",
                Role::AGENT,
                UuidBinding::Unbound,
                raw_with(0x81, 0, Operand::Connect, CLIENT, &[0, 9, 1]),
                fail,
            ),
            (
                "extra keys ignored",
                Role::AGENT,
                UuidBinding::Unbound,
                connect_body(&cbor(&map(vec![
                    ("x", Value::from(1)),
                    ("role", Value::from(4)),
                ]))),
                Ok(Role::AGENT),
            ),
        ];
        for (name, roles, binding, frame, expected) in cases {
            let got = outcome(server(roles, binding, clock).handle_frame(clock.at(1), frame));
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn framing_errors_and_timeouts_are_connection_failures() {
        let clock = Clock::new();
        let hs = server(Role::AGENT, UuidBinding::Unbound, clock);
        let decoder = HandshakeConfig::default().decoder();
        // A wrong major version and an oversize body never reach handle_frame: the decoder
        // refuses them, and the handshake turns that into CONNECTION_FAILURE.
        for bytes in [
            bytes_with(2, 0, Operand::Connect, CLIENT, &[]),
            bytes_with(1, 0, Operand::Connect, CLIENT, &[]).slice(..8),
        ] {
            let mut buf = bytes::BytesMut::from(&bytes[..]);
            if bytes.len() == 8 {
                // Announce a body of max_frame + 1 bytes.
                buf.extend_from_slice(&[0u8; 16]);
                buf[4..8].copy_from_slice(&(DEFAULT_MAX_FRAME + 1).to_be_bytes());
            }
            let err = decoder.decode(&mut buf).unwrap_err();
            let rej = hs.clone().handle_framing_error(err);
            assert_eq!(rej.reply().operand, Operand::ConnectionFailure);
            assert!(!rej.error.is_abort());
        }
        // Before the deadline the handshake keeps waiting; at the deadline it fails.
        let hs = hs.handle_timeout(clock.at(9_999)).unwrap();
        assert_eq!(hs.deadline(), clock.at(10_000));
        let rej = hs.clone().handle_timeout(clock.at(10_000)).unwrap_err();
        assert_eq!(rej.error, HandshakeError::Timeout);
        assert_eq!(rej.reply().operand, Operand::ConnectionFailure);
        // A CONNECT that arrives too late is refused the same way.
        let late = hs
            .handle_frame(clock.at(10_001), connect(Role::AGENT))
            .unwrap_err();
        assert_eq!(late.error, HandshakeError::Timeout);
    }

    fn client(
        claim: Role,
        server_roles: Role,
        binding: UuidBinding,
        clock: Clock,
    ) -> ClientHandshake {
        let (hs, connect) = ClientHandshake::start(
            (CLIENT, Role::all()),
            claim,
            PeerCertificate {
                roles: server_roles,
                binding,
            },
            HandshakeConfig::default(),
            clock.at(0),
        )
        .unwrap();
        assert_eq!(connect.operand, Operand::Connect);
        assert_eq!(connect.origin, CLIENT);
        assert_eq!(
            connect.decode_payload().unwrap(),
            Payload::Connect(Connect { role: claim })
        );
        hs
    }

    fn connected(role: Role) -> RawFrame {
        raw_payload(
            SERVER,
            &Payload::Connected(Box::new(Connected {
                role,
                client_uuid: CLIENT,
                config: ClusterConfig::default(),
            })),
        )
    }

    #[test]
    fn client_accepts_a_server_role_within_its_certificate() {
        let clock = Clock::new();
        let hs = client(
            Role::DUAL,
            Role::SCHEDULER | Role::SERVER,
            UuidBinding::Bound(SERVER),
            clock,
        );
        let ok = hs
            .handle_frame(clock.at(3), connected(Role::SCHEDULER))
            .unwrap();
        let s = ok.session;
        assert_eq!(
            (
                s.side(),
                s.local_uuid(),
                s.local_role(),
                s.peer_uuid(),
                s.peer_role()
            ),
            (Side::Client, CLIENT, Role::DUAL, SERVER, Role::SCHEDULER)
        );
    }

    #[test]
    fn client_outcome_table() {
        let clock = Clock::new();
        let reason = |r: &str| Reason::new(r);
        type Check = fn(&ClientHandshakeError) -> bool;
        let cases: Vec<(&str, Role, UuidBinding, RawFrame, Check, bool)> = vec![
            (
                "role not in cert",
                Role::SCHEDULER,
                UuidBinding::Unbound,
                connected(Role::SERVER),
                |e| matches!(e, ClientHandshakeError::ServerRole { .. }),
                false,
            ),
            (
                "not a server role",
                Role::all(),
                UuidBinding::Unbound,
                connected(Role::CONTROLLER),
                |e| matches!(e, ClientHandshakeError::ServerRole { .. }),
                false,
            ),
            (
                "another identity",
                Role::SCHEDULER,
                UuidBinding::Bound(CLIENT),
                connected(Role::SCHEDULER),
                |e| matches!(e, ClientHandshakeError::ServerIdentity { .. }),
                false,
            ),
            (
                "ambiguous identity",
                Role::SCHEDULER,
                UuidBinding::Ambiguous,
                connected(Role::SCHEDULER),
                |e| matches!(e, ClientHandshakeError::ServerIdentity { .. }),
                false,
            ),
            (
                "aborted",
                Role::SCHEDULER,
                UuidBinding::Unbound,
                raw_payload(SERVER, &Payload::ConnectionAborted(reason("no"))),
                |e| matches!(e, ClientHandshakeError::Aborted(r) if r == "no"),
                false,
            ),
            (
                "failed",
                Role::SCHEDULER,
                UuidBinding::Unbound,
                raw_payload(SERVER, &Payload::ConnectionFailure(reason("later"))),
                |e| matches!(e, ClientHandshakeError::Failed(r) if r == "later"),
                true,
            ),
            (
                "heartbeat",
                Role::SCHEDULER,
                UuidBinding::Unbound,
                raw_payload(SERVER, &Payload::Heartbeat),
                |e| matches!(e, ClientHandshakeError::Unexpected(_)),
                true,
            ),
            (
                "bad CONNECTED",
                Role::SCHEDULER,
                UuidBinding::Unbound,
                raw_with(1, 0, Operand::Connected, SERVER, &[0xa0]),
                |e| matches!(e, ClientHandshakeError::Unexpected(_)),
                true,
            ),
        ];
        for (name, server_roles, binding, frame, check, retry) in cases {
            let err = client(Role::AGENT, server_roles, binding, clock)
                .handle_frame(clock.at(1), frame)
                .unwrap_err();
            assert!(check(&err), "{name}: {err:?}");
            assert_eq!(err.is_retryable(), retry, "{name}");
        }
        let late = client(Role::AGENT, Role::SCHEDULER, UuidBinding::Unbound, clock);
        assert!(late.clone().handle_timeout(clock.at(9_999)).is_ok());
        assert_eq!(
            late.handle_timeout(clock.at(10_000)).unwrap_err(),
            ClientHandshakeError::Timeout
        );
    }

    #[test]
    fn client_refuses_to_claim_what_it_cannot() {
        let server = PeerCertificate {
            roles: Role::SCHEDULER,
            binding: UuidBinding::Unbound,
        };
        let cfg = HandshakeConfig::default();
        let now = Instant::now();
        for (own, claim) in [
            (Role::AGENT, Role::DUAL),
            (Role::all(), Role::SCHEDULER),
            (Role::all(), Role::empty()),
        ] {
            let err = ClientHandshake::start((CLIENT, own), claim, server, cfg, now).unwrap_err();
            assert!(
                matches!(err, ClientHandshakeError::BadClaim { .. }),
                "{own} {claim}"
            );
            assert!(!err.is_retryable());
        }
        // The CONNECT it sends is the golden one.
        let (_, frame) =
            ClientHandshake::start((CLIENT, Role::DUAL), Role::DUAL, server, cfg, now).unwrap();
        assert_eq!(raw(&frame).header.length, 7);
    }
}
