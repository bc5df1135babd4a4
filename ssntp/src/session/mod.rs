//! An established session, sans-IO: receiving rules, liveness, and frames made by this side.
//!
//! A [`Session`] comes out of a handshake ([`crate::handshake`]). The driver feeds it every raw
//! frame the [`Decoder`](crate::Decoder) yields ([`Session::handle_raw`]; or in two steps,
//! [`Session::handle_head`] and then [`Session::decode`], perhaps on another task), every
//! framing error ([`Session::handle_framing_error`]), tells it when it wrote
//! ([`Session::on_write`]), and asks it at [`Session::deadline`] what liveness requires
//! ([`Session::poll`]).

use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::authz;
use crate::codec::FrameError;
use crate::error::Violation;
use bytes::Buf;

use crate::frame::{Frame, Header, Operand, RawFrame, Trace, read_trace};
use crate::payload::{Payload, PayloadError, Salvage};
use crate::role::Role;
pub use crate::role::Side;
use crate::view::{Entry, FrameView};

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
    /// A frame for the application. Not boxed: one per frame received, it goes by value from the
    /// decoder to the application's batch without an allocation of its own.
    Message(Message),
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
    /// Nothing was received for the idle timeout: send this ERROR (the server side only), then
    /// close.
    Idle(Option<Frame>),
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

    /// When a frame last came from the peer (the CONNECT counts): every frame shows it alive, a
    /// HEARTBEAT and a refused frame included (PROTOCOL.md §5 rule 5).
    pub fn last_received(&self) -> Instant {
        self.last_rx
    }

    /// Records that we wrote to the peer.
    pub fn on_write(&mut self, now: Instant) {
        self.last_tx = self.last_tx.max(now);
    }

    /// The next instant at which [`Session::poll`] has something to do.
    pub fn deadline(&self) -> Instant {
        (self.last_rx + self.config.idle_timeout).min(self.last_tx + self.heartbeat_interval())
    }

    /// When a HEARTBEAT is due if nothing more is written after `written` (a write the session
    /// has not recorded): for a caller that cannot [`Session::poll`] the session meanwhile (its
    /// reader waiting for the application) and sends [`Session::heartbeat`] itself.
    pub fn heartbeat_due(&self, written: Instant) -> Instant {
        self.last_tx.max(written) + self.heartbeat_interval()
    }

    /// A HEARTBEAT from us.
    pub fn heartbeat(&self) -> Frame {
        self.frame(&Payload::Heartbeat)
    }

    fn heartbeat_interval(&self) -> Duration {
        self.config.idle_timeout / 3
    }

    /// What liveness requires at `now`, if anything. A heartbeat it returns counts as written.
    pub fn poll(&mut self, now: Instant) -> Option<Tick> {
        if now >= self.last_rx + self.config.idle_timeout {
            return Some(Tick::Idle(
                Violation::IdleTimeout.reply(self.local_uuid, self.side),
            ));
        }
        if now >= self.last_tx + self.heartbeat_interval() {
            self.last_tx = now;
            return Some(Tick::Heartbeat(self.heartbeat()));
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
        self.check_head(now, raw, |received| received, |frame| self.decode(frame))
    }

    /// Applies the receiving rules that need no decoding to one frame (rules 2 and 3, the
    /// origin, the trace block): a frame that passes them is handed back [`Head::Undecoded`],
    /// for [`Session::decode`] to finish (the payload's rules), on this task or another.
    pub fn handle_head(&mut self, now: Now, raw: RawFrame) -> Head {
        self.last_rx = self.last_rx.max(now.instant);
        self.check_head(
            now,
            raw,
            |received| Head::Done(Box::new(received)),
            Head::Undecoded,
        )
    }

    /// The refusal of a frame: the violation, and the ERROR that answers it.
    fn refuse(&self, violation: Violation) -> Received {
        let reply = violation.reply(self.local_uuid, self.side);
        Received::Rejected { violation, reply }
    }

    /// The rules before the payload's, in order: a refusal (or the server's close) goes to
    /// `done`, a frame that passes to `passed`. Generic so that the caller that decodes at once
    /// builds its message in place, as the fused rules did (a frame returned in an enum and
    /// moved on cost the receive path 5 ns a frame).
    fn check_head<T>(
        &self,
        now: Now,
        raw: RawFrame,
        done: impl FnOnce(Received) -> T,
        passed: impl FnOnce(Frame) -> T,
    ) -> T {
        let RawFrame { header, mut body } = raw;
        match self.head_rules(now, &header, &body) {
            Err(received) => done(*received),
            Ok((trace, payload_at)) => {
                if payload_at > 0 {
                    body.advance(payload_at);
                }
                passed(Frame {
                    operand: header.operand,
                    minor: header.minor,
                    origin: header.origin,
                    trace,
                    payload: body,
                })
            }
        }
    }

    /// The rules before the payload's on a frame's header and body, read in place: the trace
    /// (stamped) and where the payload starts in `body`, or what the frame amounts to instead
    /// (a refusal, or the server's close; boxed, as they are rare).
    fn head_rules(
        &self,
        now: Now,
        header: &Header,
        body: &[u8],
    ) -> Result<(Option<Box<Trace>>, usize), Box<Received>> {
        let operand = header.operand;
        if !operand.is_known() {
            return Err(Box::new(self.refuse(Violation::UnknownOperand(operand))));
        }
        let allowed = match self.side {
            Side::Server => authz::client_may_send(self.peer_role, operand),
            Side::Client => authz::server_may_send(operand),
        };
        if !allowed {
            return Err(Box::new(self.refuse(Violation::NotAllowed {
                role: self.peer_role,
                operand,
            })));
        }
        if self.side == Side::Server && header.origin != self.peer_uuid {
            return Err(Box::new(self.refuse(Violation::OriginMismatch {
                operand,
                origin: header.origin,
                session: self.peer_uuid,
            })));
        }
        if self.side == Side::Client
            && matches!(
                operand,
                Operand::ConnectionAborted | Operand::ConnectionFailure
            )
        {
            let reason = read_trace(header.traced, body)
                .ok()
                .and_then(|(_, at)| Payload::decode(operand, &body[at..]).ok())
                .and_then(|p| match p {
                    Payload::ConnectionAborted(r) | Payload::ConnectionFailure(r) => Some(r.reason),
                    _ => None,
                })
                .unwrap_or_default();
            return Err(Box::new(Received::PeerClosed {
                aborted: operand == Operand::ConnectionAborted,
                reason,
            }));
        }
        let (mut trace, payload_at) = read_trace(header.traced, body).map_err(|error| {
            Box::new(self.refuse(Violation::BadTrace {
                operand,
                error,
                salvage: Salvage::default(),
            }))
        })?;
        if let Some(trace) = &mut trace {
            trace.stamp_rx(now.unix_ns);
        }
        Ok((trace, payload_at))
    }

    /// The payload's rules (rule 4, and the node a status names) for a frame that passed
    /// [`Session::handle_head`]: its message, a HEARTBEAT, or its refusal. The message is built
    /// once, in the value returned: a frame and a message passed on through `Result`s were
    /// copied each time, right after being written (a third of the rules' time, with nothing to
    /// decode).
    pub fn decode(&self, frame: Frame) -> Received {
        fn bytes(frame: &Frame) -> &[u8] {
            &frame.payload
        }
        let operand = frame.operand;
        self.payload_rules(
            operand,
            frame,
            bytes,
            |r| r,
            |frame, payload| Received::Message(Message { frame, payload }),
        )
    }

    /// Applies every receiving rule to one frame read in place: `body` is its body, found at
    /// `at` in the read's bytes (where [`Frames`](crate::view::Frames) will find its payload).
    /// What passes is a [`Viewed::Passed`] index entry; nothing is copied nor kept of the
    /// payload. The payload is decoded once to check it (rule 4), and dropped: a consumer decodes
    /// it again, on its own task, only if it reads it
    /// ([`FrameView::payload`](crate::view::FrameView::payload)). The payload's one exception to
    /// being decoded once, where it is received: the price of building nothing per frame.
    pub fn handle_view(&mut self, now: Now, header: &Header, body: &[u8], at: usize) -> Viewed {
        self.last_rx = self.last_rx.max(now.instant);
        let (trace, payload_at) = match self.head_rules(now, header, body) {
            Ok(passed) => passed,
            Err(received) => return Viewed::Done(*received),
        };
        let operand = header.operand;
        fn bytes<'a>(payload: &'a &[u8]) -> &'a [u8] {
            payload
        }
        let payload = &body[payload_at..];
        self.payload_rules(operand, payload, bytes, Viewed::Done, |_, _| {
            Viewed::Passed(Entry::new(header, trace, at + payload_at..at + body.len()))
        })
    }

    /// The payload's rules on the payload bytes of `frame`: a refusal, or a HEARTBEAT, go to
    /// `done` (as what the frame amounts to), the frame and a payload that passes to `passed`.
    /// The frame goes through by value, so that a message is built once, in the value returned
    /// (a payload returned in a `Result` and moved on cost the receive path a few ns a frame).
    fn payload_rules<F, T>(
        &self,
        operand: Operand,
        frame: F,
        bytes: impl Fn(&F) -> &[u8],
        done: impl FnOnce(Received) -> T,
        passed: impl FnOnce(F, Payload) -> T,
    ) -> T {
        let payload = match Payload::decode(operand, bytes(&frame)) {
            Ok(payload) => payload,
            Err(error) => {
                return done(self.refuse(Violation::BadPayload {
                    operand,
                    error,
                    salvage: Salvage::read(bytes(&frame)),
                }));
            }
        };
        if self.side == Side::Server
            && let Some(named) = payload.node_uuid()
            && named != self.peer_uuid
        {
            return done(self.refuse(Violation::NodeMismatch {
                operand,
                named,
                session: self.peer_uuid,
            }));
        }
        if matches!(payload, Payload::Heartbeat) {
            return done(Received::Heartbeat);
        }
        passed(frame, payload)
    }
}

impl FrameView<'_> {
    /// The frame and its payload decoded, as [`Session::decode`] would have made them.
    pub fn to_message(&self) -> Result<Message, PayloadError> {
        Ok(Message {
            payload: self.payload()?,
            frame: self.to_frame(),
        })
    }
}

/// What the receiving rules made of one frame read in place ([`Session::handle_view`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewed {
    /// It passed every rule: where it lies in the read's bytes.
    Passed(Entry),
    /// What it amounts to otherwise: a HEARTBEAT, a refusal, or the server's close.
    Done(Received),
}

/// A frame after the rules that need no decoding ([`Session::handle_head`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// What the frame amounts to already: refused, or the server's close (boxed: a `Head` per
    /// frame may wait in a vector, and refusals are rare).
    Done(Box<Received>),
    /// Passed so far: its trace split off and stamped, its payload still to decode
    /// ([`Session::decode`]).
    Undecoded(Frame),
}

#[cfg(test)]
mod tests;
