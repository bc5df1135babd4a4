//! An established session, sans-IO: receiving rules, liveness, and frames made by this side.
//!
//! A [`Session`] comes out of a handshake ([`crate::handshake`]). The driver feeds it every raw
//! frame the [`Decoder`](crate::Decoder) yields ([`Session::handle_raw`]), every framing error
//! ([`Session::handle_framing_error`]), tells it when it wrote ([`Session::on_write`]), and
//! asks it at [`Session::deadline`] what liveness requires ([`Session::poll`]).

use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::authz;
use crate::codec::FrameError;
use crate::error::Violation;
use crate::frame::{Frame, Operand, RawFrame, Trace};
use crate::payload::{Payload, Salvage};
use crate::role::Role;

/// Which end of the connection a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The end that dialled and sent CONNECT.
    Client,
    /// The end that accepted and sent CONNECTED.
    Server,
}

/// The time, as the driver reads it: a monotonic instant for timers, wall-clock ns for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time.
    pub instant: Instant,
    /// Nanoseconds since the Unix epoch.
    pub unix_ns: u64,
}

/// A received frame that passed every rule, with its typed payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The frame (trace stamped with our receive time), payload bytes as received.
    pub frame: Frame,
    /// The decoded payload.
    pub payload: Payload,
}

/// What one received frame amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A frame for the application.
    Message(Box<Message>),
    /// A HEARTBEAT: liveness only.
    Heartbeat,
    /// A refused frame: send `reply` if there is one; close if the violation says so.
    Rejected {
        /// What was wrong.
        violation: Violation,
        /// The ERROR to send back.
        reply: Option<Frame>,
    },
    /// The server ended the session (client side): CONNECTION_ABORTED or CONNECTION_FAILURE.
    PeerClosed {
        /// CONNECTION_ABORTED (do not retry) rather than CONNECTION_FAILURE.
        aborted: bool,
        /// The server's reason, when readable.
        reason: String,
    },
}

/// What liveness requires now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tick {
    /// Nothing was written for a third of the idle timeout: send this HEARTBEAT.
    Heartbeat(Frame),
    /// Nothing was received for the idle timeout: send this ERROR, then close.
    Idle(Frame),
}

/// The limits and timers of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// Close a session that received nothing for this long (default 30 s).
    pub idle_timeout: Duration,
    /// The largest frame body accepted or sent (default 1 MiB).
    pub max_frame: u32,
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            idle_timeout: Duration::from_secs(30),
            max_frame: crate::frame::DEFAULT_MAX_FRAME,
        }
    }
}

/// An established SSNTP session, either side.
#[derive(Debug, Clone)]
pub struct Session {
    side: Side,
    local_uuid: Uuid,
    local_role: Role,
    peer_uuid: Uuid,
    peer_role: Role,
    config: SessionConfig,
    last_rx: Instant,
    last_tx: Instant,
}

impl Session {
    /// A session as a handshake establishes it (at `now`, which counts as a receive and a send).
    pub(crate) fn new(
        side: Side,
        (local_uuid, local_role): (Uuid, Role),
        (peer_uuid, peer_role): (Uuid, Role),
        config: SessionConfig,
        now: Instant,
    ) -> Session {
        Session {
            side,
            local_uuid,
            local_role,
            peer_uuid,
            peer_role,
            config,
            last_rx: now,
            last_tx: now,
        }
    }

    /// Which end this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Our UUID on this session.
    pub fn local_uuid(&self) -> Uuid {
        self.local_uuid
    }

    /// Our role on this session (a client's claim; a server's certificate roles).
    pub fn local_role(&self) -> Role {
        self.local_role
    }

    /// The peer's UUID.
    pub fn peer_uuid(&self) -> Uuid {
        self.peer_uuid
    }

    /// The peer's role on this session.
    pub fn peer_role(&self) -> Role {
        self.peer_role
    }

    /// The session's limits.
    pub fn config(&self) -> SessionConfig {
        self.config
    }

    /// An untraced frame from us.
    pub fn frame(&self, payload: &Payload) -> Frame {
        Frame::new(self.local_uuid, payload)
    }

    /// A traced frame from us, its first hop stamped `now_ns`.
    pub fn traced_frame(&self, payload: &Payload, label: &str, now_ns: u64) -> Frame {
        Frame::new(self.local_uuid, payload).with_trace(Trace::new(
            label,
            self.local_uuid,
            self.local_role,
            now_ns,
        ))
    }

    /// Records that we wrote to the peer.
    pub fn on_write(&mut self, now: Instant) {
        self.last_tx = self.last_tx.max(now);
    }

    /// The next instant at which [`Session::poll`] has something to do.
    pub fn deadline(&self) -> Instant {
        (self.last_rx + self.config.idle_timeout).min(self.last_tx + self.heartbeat_interval())
    }

    fn heartbeat_interval(&self) -> Duration {
        self.config.idle_timeout / 3
    }

    /// What liveness requires at `now`, if anything. A heartbeat it returns counts as written.
    pub fn poll(&mut self, now: Instant) -> Option<Tick> {
        if now >= self.last_rx + self.config.idle_timeout {
            let reply = Violation::IdleTimeout.reply(self.local_uuid, self.side);
            return reply.map(Tick::Idle);
        }
        if now >= self.last_tx + self.heartbeat_interval() {
            self.last_tx = now;
            return Some(Tick::Heartbeat(self.frame(&Payload::Heartbeat)));
        }
        None
    }

    /// A stream that cannot be framed: the PROTOCOL_VIOLATION to send before closing.
    pub fn handle_framing_error(&mut self, error: FrameError) -> (Violation, Option<Frame>) {
        let violation = Violation::Framing(error);
        let reply = violation.reply(self.local_uuid, self.side);
        (violation, reply)
    }

    /// Applies the receiving rules to one frame (PROTOCOL.md §5, rules 2–5).
    pub fn handle_raw(&mut self, now: Now, raw: RawFrame) -> Received {
        self.last_rx = self.last_rx.max(now.instant);
        match self.check(now, raw) {
            Ok(received) => received,
            Err(violation) => {
                let reply = violation.reply(self.local_uuid, self.side);
                Received::Rejected { violation, reply }
            }
        }
    }

    fn check(&self, now: Now, raw: RawFrame) -> Result<Received, Violation> {
        let operand = raw.header.operand;
        if !operand.is_known() {
            return Err(Violation::UnknownOperand(operand));
        }
        let allowed = match self.side {
            Side::Server => authz::client_may_send(self.peer_role, operand),
            Side::Client => authz::server_may_send(operand),
        };
        if !allowed {
            return Err(Violation::NotAllowed {
                role: self.peer_role,
                operand,
            });
        }
        if self.side == Side::Client
            && matches!(
                operand,
                Operand::ConnectionAborted | Operand::ConnectionFailure
            )
        {
            let reason = raw
                .into_frame()
                .ok()
                .and_then(|f| f.decode_payload().ok())
                .and_then(|p| match p {
                    Payload::ConnectionAborted(r) | Payload::ConnectionFailure(r) => Some(r.reason),
                    _ => None,
                })
                .unwrap_or_default();
            return Ok(Received::PeerClosed {
                aborted: operand == Operand::ConnectionAborted,
                reason,
            });
        }
        let mut frame = raw.into_frame().map_err(|error| Violation::BadTrace {
            operand,
            error,
            salvage: Salvage::default(),
        })?;
        let payload = frame
            .decode_payload()
            .map_err(|error| Violation::BadPayload {
                operand,
                error,
                salvage: Salvage::read(&frame.payload),
            })?;
        if self.side == Side::Server
            && let Some(named) = payload.node_uuid()
            && named != self.peer_uuid
        {
            return Err(Violation::NodeMismatch {
                operand,
                named,
                session: self.peer_uuid,
            });
        }
        if let Some(trace) = &mut frame.trace {
            trace.stamp_rx(now.unix_ns);
        }
        if payload == Payload::Heartbeat {
            return Ok(Received::Heartbeat);
        }
        Ok(Received::Message(Box::new(Message { frame, payload })))
    }
}
