//! The protocol's error taxonomy, and the one place that maps each error to its wire ERROR.
//!
//! [`HandshakeError`] covers a server's refusal of a CONNECT (PROTOCOL.md §4);
//! [`ClientHandshakeError`] a client's failure to connect; [`Violation`] a frame refused after
//! the handshake (§5). [`HandshakeError::reply`] and [`Violation::reply`] are the only code that
//! turns errors into ERROR frames.

use uuid::Uuid;

use crate::codec::FrameError;
use crate::frame::{BodyError, Frame, Operand};
use crate::payload::{
    AttachVolumeFailure, AttachVolumeFailureReason, DeleteFailure, DeleteFailureReason,
    InstanceActionFailure, InstanceActionFailureReason, Payload, PayloadError, PublicIpFailure,
    PublicIpFailureReason, Reason, Salvage, StartFailure, StartFailureReason,
};
use crate::role::{Role, Side};

/// Why a server refused a connection during the handshake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// No CONNECT within the handshake timeout.
    #[error("no CONNECT within the handshake timeout")]
    Timeout,
    /// The first frame could not be framed (too large, wrong major version).
    #[error("first frame: {0}")]
    Framing(#[from] FrameError),
    /// The first frame has a minor version this server does not speak in a handshake.
    #[error("unsupported protocol version 1.{minor}")]
    Version {
        /// The minor version received.
        minor: u8,
    },
    /// The first frame is not CONNECT.
    #[error("first frame is {0}, not CONNECT")]
    NotConnect(Operand),
    /// CONNECT without a payload, without `role`, or with a `role` that is not a `u32`.
    #[error("malformed CONNECT: {0}")]
    BadConnect(String),
    /// The claimed role is not one a client may claim.
    #[error("role {0} may not be claimed")]
    InvalidClaim(Role),
    /// The claimed role is not in the client certificate.
    #[error("claimed role {claimed} is not in the certificate's roles {certificate}")]
    RoleNotInCertificate {
        /// What the client claimed.
        claimed: Role,
        /// What its certificate proves.
        certificate: Role,
    },
    /// The certificate binds more than one UUID.
    #[error("the certificate carries more than one urn:uuid name")]
    AmbiguousIdentity,
    /// The CONNECT's origin is not the UUID bound in the certificate.
    #[error("origin {origin} is not the certificate's UUID {bound}")]
    IdentityMismatch {
        /// The UUID in the certificate.
        bound: Uuid,
        /// The CONNECT's origin.
        origin: Uuid,
    },
}

impl HandshakeError {
    /// Whether the client must not retry (CONNECTION_ABORTED rather than CONNECTION_FAILURE).
    pub fn is_abort(&self) -> bool {
        matches!(
            self,
            HandshakeError::InvalidClaim(_)
                | HandshakeError::RoleNotInCertificate { .. }
                | HandshakeError::AmbiguousIdentity
                | HandshakeError::IdentityMismatch { .. }
        )
    }

    /// The ERROR the server answers with before it closes.
    pub fn reply(&self, local_uuid: Uuid) -> Frame {
        let reason = Reason::new(self.to_string());
        let payload = if self.is_abort() {
            Payload::ConnectionAborted(reason)
        } else {
            Payload::ConnectionFailure(reason)
        };
        Frame::new(local_uuid, &payload)
    }
}

/// Why a client could not establish a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientHandshakeError {
    /// The role to claim is not a valid claim, or not in our own certificate.
    #[error("cannot claim role {claimed}: {why}")]
    BadClaim {
        /// The role.
        claimed: Role,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The server answered CONNECTION_FAILURE (retry later).
    #[error("server refused the connection, may retry: {0}")]
    Failed(String),
    /// The server answered CONNECTION_ABORTED: do not retry, unless the reason is
    /// [`Reason::UUID_IN_USE`](crate::payload::Reason::UUID_IN_USE) (the session holding the
    /// UUID may be a dead connection the server will time out).
    #[error("server aborted the connection: {0}")]
    Aborted(String),
    /// The server's claimed role is not in its certificate or is not a server role.
    #[error("server claims role {claimed}, its certificate proves {certificate}")]
    ServerRole {
        /// What it claimed.
        claimed: Role,
        /// What its certificate proves.
        certificate: Role,
    },
    /// The CONNECTED's origin is not the UUID bound in the server's certificate.
    #[error("server origin {origin} is not its certificate's UUID {bound}")]
    ServerIdentity {
        /// The UUID in the certificate.
        bound: Uuid,
        /// The CONNECTED's origin.
        origin: Uuid,
    },
    /// The answer was neither CONNECTED nor a connection ERROR, or did not decode.
    #[error("unexpected answer to CONNECT: {0}")]
    Unexpected(String),
    /// The answer could not be framed.
    #[error("answer to CONNECT: {0}")]
    Framing(#[from] FrameError),
    /// No answer within the handshake timeout.
    #[error("no answer to CONNECT within the handshake timeout")]
    Timeout,
}

impl ClientHandshakeError {
    /// Whether connecting again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientHandshakeError::Aborted(reason) => reason == crate::payload::Reason::UUID_IN_USE,
            ClientHandshakeError::Failed(_)
            | ClientHandshakeError::Unexpected(_)
            | ClientHandshakeError::Framing(_)
            | ClientHandshakeError::Timeout => true,
            _ => false,
        }
    }
}

/// A frame refused after the handshake (PROTOCOL.md §5, rules 1–4, and §7's node UUID rule).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// Rule 1: the stream cannot be framed; the session closes.
    #[error("{0}")]
    Framing(#[from] FrameError),
    /// Rule 2: an unknown frame type or operand.
    #[error("unknown frame type or operand: {0}")]
    UnknownOperand(Operand),
    /// Rule 3: the sender's role may not send this operand.
    #[error("role {role} may not send {operand}")]
    NotAllowed {
        /// The sender's claimed role.
        role: Role,
        /// What it sent.
        operand: Operand,
    },
    /// Rule 4: the trace block is malformed.
    #[error("{operand}: {error}")]
    BadTrace {
        /// The frame's operand.
        operand: Operand,
        /// What is wrong.
        error: BodyError,
        /// What could be read of the body.
        salvage: Salvage,
    },
    /// Rule 4: the payload is not the operand's schema.
    #[error("{operand}: {error}")]
    BadPayload {
        /// The frame's operand.
        operand: Operand,
        /// What is wrong.
        error: PayloadError,
        /// What could be read of the payload.
        salvage: Salvage,
    },
    /// §7: a node status names another node than the session's.
    #[error("{operand} names node {named}, the session is {session}")]
    NodeMismatch {
        /// The frame's operand.
        operand: Operand,
        /// The node the payload names.
        named: Uuid,
        /// The session's peer UUID.
        session: Uuid,
    },
    /// §3: a client's frame carries another origin than the session's UUID (the endpoint that
    /// creates a frame is its origin, and a client creates every frame it sends).
    #[error("{operand} from session {session} claims origin {origin}")]
    OriginMismatch {
        /// The frame's operand.
        operand: Operand,
        /// The origin the frame claims.
        origin: Uuid,
        /// The session's peer UUID.
        session: Uuid,
    },
    /// Liveness: nothing received for the idle timeout; the session closes.
    #[error("idle timeout")]
    IdleTimeout,
}

impl Violation {
    /// Whether the session must close after this.
    pub fn closes_session(&self) -> bool {
        matches!(self, Violation::Framing(_) | Violation::IdleTimeout)
    }

    /// The operand of the refused frame, when there was one.
    fn operand(&self) -> Option<Operand> {
        match self {
            Violation::UnknownOperand(op) => Some(*op),
            Violation::NotAllowed { operand, .. }
            | Violation::BadTrace { operand, .. }
            | Violation::BadPayload { operand, .. }
            | Violation::NodeMismatch { operand, .. }
            | Violation::OriginMismatch { operand, .. } => Some(*operand),
            Violation::Framing(_) | Violation::IdleTimeout => None,
        }
    }

    /// The ERROR to answer with, from the endpoint `local_uuid` on the given side; `None` when
    /// the refused frame is itself an ERROR (an ERROR is never answered with an ERROR).
    pub fn reply(&self, local_uuid: Uuid, side: Side) -> Option<Frame> {
        if self.operand().is_some_and(Operand::is_error) {
            return None;
        }
        // After the handshake nobody may send CONNECTION_FAILURE to the server (§5): a client
        // that gives up on a silent server just closes.
        if matches!(self, Violation::IdleTimeout) && side == Side::Client {
            return None;
        }
        let reason = Reason::new(self.to_string());
        let payload = match self {
            Violation::Framing(_)
            | Violation::NotAllowed { .. }
            | Violation::NodeMismatch { .. }
            | Violation::OriginMismatch { .. } => Payload::ProtocolViolation(reason),
            Violation::IdleTimeout => Payload::ConnectionFailure(reason),
            Violation::UnknownOperand(_) => Payload::InvalidFrameType(reason),
            Violation::BadTrace {
                operand, salvage, ..
            }
            | Violation::BadPayload {
                operand, salvage, ..
            } => {
                // A node answers for itself; the server answers without a node UUID.
                let node = (side == Side::Client).then_some(local_uuid);
                body_failure(*operand, salvage, node).unwrap_or(Payload::ProtocolViolation(reason))
            }
        };
        Some(Frame::new(local_uuid, &payload))
    }
}

/// The operand's own failure for an undecodable body, where it has one.
fn body_failure(operand: Operand, s: &Salvage, node_uuid: Option<Uuid>) -> Option<Payload> {
    let instance_uuid = s.instance_uuid.unwrap_or(Uuid::nil());
    let public_ip = || PublicIpFailure {
        concentrator_uuid: s.concentrator_uuid,
        tenant_uuid: s.tenant_uuid,
        instance_uuid,
        public_ip: None,
        private_ip: None,
        vnic_mac: None,
        reason: PublicIpFailureReason::InvalidPayload,
    };
    let volume = || {
        AttachVolumeFailure::new(
            instance_uuid,
            s.volume_uuid.unwrap_or(Uuid::nil()),
            node_uuid,
            AttachVolumeFailureReason::InvalidPayload,
        )
    };
    Some(match operand {
        Operand::Start => Payload::StartFailure(StartFailure {
            instance_uuid,
            node_uuid,
            reason: StartFailureReason::InvalidPayload,
            restart: false,
            message: None,
        }),
        Operand::Delete => Payload::DeleteFailure(DeleteFailure {
            instance_uuid,
            node_uuid,
            reason: DeleteFailureReason::InvalidPayload,
        }),
        Operand::AttachVolume => Payload::AttachVolumeFailure(volume()),
        Operand::DetachVolume => Payload::DetachVolumeFailure(volume()),
        Operand::InstanceAction => Payload::InstanceActionFailure(InstanceActionFailure {
            instance_uuid,
            node_uuid,
            action: None,
            reason: InstanceActionFailureReason::InvalidPayload,
        }),
        Operand::AssignPublicIp => Payload::AssignPublicIpFailure(public_ip()),
        Operand::ReleasePublicIp => Payload::UnassignPublicIpFailure(public_ip()),
        _ => return None,
    })
}
