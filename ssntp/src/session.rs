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
mod tests {
    use super::*;
    use crate::frame::{HEADER_LEN, Hop};
    use crate::payload::*;
    use crate::testutil::{Clock, cbor, map, raw, raw_payload, raw_with};
    use crate::view::Frames;
    use bytes::Bytes;
    use ciborium::Value;

    const SERVER: Uuid = Uuid::from_bytes([0x5c; 16]);
    const PEER: Uuid = Uuid::from_bytes([0x11; 16]);
    const INSTANCE: Uuid = Uuid::from_bytes([0x1a; 16]);

    fn session(side: Side, peer_role: Role, clock: Clock) -> Session {
        let (local, peer) = match side {
            Side::Server => ((SERVER, Role::SCHEDULER), (PEER, peer_role)),
            Side::Client => ((PEER, peer_role), (SERVER, Role::SCHEDULER)),
        };
        Session::new(side, local, peer, SessionConfig::default(), clock.at(0))
    }

    fn rejected(r: Received) -> (Violation, Option<Payload>) {
        match r {
            Received::Rejected { violation, reply } => {
                let reply = reply.map(|f| {
                    assert!([SERVER, PEER].contains(&f.origin), "replies come from us");
                    f.decode_payload().unwrap()
                });
                (violation, reply)
            }
            other => panic!("not rejected: {other:?}"),
        }
    }

    fn ready(node: Uuid) -> Payload {
        Payload::Ready(NodeStatus {
            node_uuid: node,
            hostname: "n".into(),
            mem_total_mb: 1,
            mem_available_mb: 1,
            disk_total_mb: 1,
            disk_available_mb: 1,
            vcpus_total: 1,
            vcpus_available: 1,
            load: 0,
            networks: vec![],
            zone: None,
        })
    }

    #[test]
    fn allowed_frames_are_delivered_typed() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::AGENT, clock);
        let got = s.handle_raw(clock.now(1), raw_payload(PEER, &ready(PEER)));
        let Received::Message(m) = got else {
            panic!("{got:?}")
        };
        assert_eq!(m.payload, ready(PEER));
        assert_eq!(m.frame.origin, PEER);
        assert_eq!(
            s.handle_raw(clock.now(2), raw_payload(PEER, &Payload::Heartbeat)),
            Received::Heartbeat
        );
    }

    #[test]
    fn unknown_operands_get_invalid_frame_type_except_errors() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::CONTROLLER, clock);
        for (ty, op) in [(0, 13), (1, 6), (3, 10), (4, 0), (255, 255)] {
            let (v, reply) = rejected(s.handle_raw(
                clock.now(1),
                raw_with(1, 0, Operand::from_wire(ty, op), PEER, &[1, 2]),
            ));
            assert!(matches!(v, Violation::UnknownOperand(_)));
            assert!(
                matches!(reply, Some(Payload::InvalidFrameType(_))),
                "{ty}/{op}"
            );
            assert!(!v.closes_session());
        }
        let (_, reply) = rejected(s.handle_raw(
            clock.now(1),
            raw_with(1, 0, Operand::from_wire(2, 77), PEER, &[]),
        ));
        assert_eq!(reply, None, "an ERROR is never answered");
    }

    #[test]
    fn frames_outside_the_table_get_protocol_violation_except_errors() {
        let clock = Clock::new();
        let mut agent = session(Side::Server, Role::AGENT, clock);
        let start = raw_with(1, 0, Operand::Start, PEER, &[]);
        let (v, reply) = rejected(agent.handle_raw(clock.now(1), start));
        assert_eq!(
            v,
            Violation::NotAllowed {
                role: Role::AGENT,
                operand: Operand::Start
            }
        );
        assert!(matches!(reply, Some(Payload::ProtocolViolation(_))));
        // An agent sending an ERROR nobody may send: dropped without an answer.
        let aborted = raw_payload(PEER, &Payload::ConnectionAborted(Reason::new("x")));
        let (_, reply) = rejected(agent.handle_raw(clock.now(1), aborted));
        assert_eq!(reply, None);
        // CONNECT after the handshake.
        let connect = raw_payload(PEER, &Payload::Connect(Connect { role: Role::AGENT }));
        assert!(matches!(
            rejected(agent.handle_raw(clock.now(1), connect)).1,
            Some(Payload::ProtocolViolation(_))
        ));
        // A client refuses CONNECTED after the handshake too.
        let mut c = session(Side::Client, Role::AGENT, clock);
        let connected = raw_payload(
            SERVER,
            &Payload::Connected(Box::new(Connected {
                role: Role::SCHEDULER,
                client_uuid: PEER,
                config: ClusterConfig::default(),
            })),
        );
        assert!(matches!(
            rejected(c.handle_raw(clock.now(1), connected)).0,
            Violation::NotAllowed { .. }
        ));
    }

    /// The rules in two steps (`handle_head`, then `decode`, as a staged reader runs them) give
    /// what `handle_raw` gives, frame for frame, the trace stamped alike; only the payload's
    /// rules wait for `decode`.
    #[test]
    fn the_rules_in_two_steps_and_in_place_agree_with_handle_raw() {
        let clock = Clock::new();
        let agree = |role: Role, frames: Vec<(RawFrame, bool)>| {
            let mut one = session(Side::Server, role, clock);
            let mut two = session(Side::Server, role, clock);
            let mut three = session(Side::Server, role, clock);
            for (n, (raw, decoded)) in frames.into_iter().enumerate() {
                let whole = one.handle_raw(clock.now(n as u64), raw.clone());
                // In place, as one read of this frame after another of 100 bytes.
                let mut read = vec![0; 100 + HEADER_LEN];
                raw.header.write((&mut read[100..]).try_into().unwrap());
                read.extend_from_slice(&raw.body);
                let read = Bytes::from(read);
                let body = &read[100 + HEADER_LEN..];
                match three.handle_view(clock.now(n as u64), &raw.header, body, 100 + HEADER_LEN) {
                    Viewed::Passed(entry) => {
                        let frames = Frames::new(read.clone(), vec![entry]).unwrap();
                        let Received::Message(m) = &whole else {
                            panic!("{role}: frame {n} passed in place, not whole: {whole:?}");
                        };
                        let view = frames.get(0).unwrap();
                        assert_eq!(view.to_message().as_ref(), Ok(m), "{role}: frame {n}");
                        assert_eq!(view.operand(), m.frame.operand);
                        assert_eq!(view.origin(), m.frame.origin);
                        assert_eq!(view.trace(), m.frame.trace.as_deref());
                        assert_eq!(view.payload_bytes(), &m.frame.payload[..]);
                    }
                    Viewed::Done(done) => assert_eq!(done, whole, "{role}: frame {n}"),
                }
                let head = two.handle_head(clock.now(n as u64), raw);
                assert_eq!(
                    matches!(head, Head::Undecoded(_)),
                    decoded,
                    "{role}: frame {n}"
                );
                let stepped = match head {
                    Head::Done(received) => *received,
                    Head::Undecoded(frame) => two.decode(frame),
                };
                assert_eq!(stepped, whole, "{role}: frame {n}");
            }
            assert_eq!(one.last_received(), two.last_received());
            assert_eq!(one.last_received(), three.last_received());
        };
        let delete = Payload::Delete(Delete {
            instance_uuid: INSTANCE,
            workload_agent_uuid: PEER,
            stop: false,
        });
        let deleted = Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: INSTANCE,
        });
        let mut unknown = raw_payload(PEER, &Payload::Heartbeat);
        unknown.header.operand = Operand::from_wire(3, 42);
        // (the frame, whether it passes the rules without decoding)
        agree(
            Role::CONTROLLER,
            vec![
                (raw_payload(PEER, &delete), true),
                (
                    raw(&Frame::new(PEER, &delete).with_trace(Trace::new(
                        "l",
                        PEER,
                        Role::CONTROLLER,
                        7,
                    ))),
                    true,
                ),
                // Rule 4: refused by `decode`.
                (raw_with(1, 0, Operand::Delete, PEER, &[0xa0]), true),
                (raw_payload(PEER, &Payload::Heartbeat), true),
                // Refused before: a node's event, a foreign origin, an unknown operand, a
                // trace block that does not fit.
                (raw_payload(PEER, &deleted), false),
                (raw_payload(Uuid::from_bytes([9; 16]), &delete), false),
                (unknown, false),
                (
                    raw_with(0x81, 0, Operand::Delete, PEER, &[0, 5, 0xa0]),
                    false,
                ),
            ],
        );
        // A status naming another node: refused by `decode`.
        let other = Uuid::from_bytes([0x99; 16]);
        agree(
            Role::AGENT,
            vec![
                (raw_payload(PEER, &ready(PEER)), true),
                (raw_payload(PEER, &ready(other)), true),
                (raw_payload(PEER, &deleted), true),
            ],
        );
    }

    #[test]
    fn bad_bodies_get_the_operands_own_failure() {
        let clock = Clock::new();
        let with_instance = cbor(&map(vec![
            ("instance_uuid", Value::Bytes(INSTANCE.as_bytes().to_vec())),
            ("x", Value::from(1)),
        ]));
        let bad_instance = cbor(&map(vec![("instance_uuid", Value::Bytes(vec![1, 2, 3]))]));
        let mut s = session(Side::Server, Role::CONTROLLER, clock);
        let mut reply = |op: Operand, body: &[u8]| {
            rejected(s.handle_raw(clock.now(1), raw_with(1, 0, op, PEER, body))).1
        };
        assert_eq!(
            reply(Operand::Start, &with_instance),
            Some(Payload::StartFailure(StartFailure {
                instance_uuid: INSTANCE,
                node_uuid: None,
                reason: StartFailureReason::InvalidPayload,
                restart: false,
                message: None,
            }))
        );
        for body in [
            &bad_instance[..],
            &[0xff, 0x00],
            &[],
            &cbor(&Value::from(3)),
        ] {
            let Some(Payload::StartFailure(f)) = reply(Operand::Start, body) else {
                panic!()
            };
            assert_eq!(f.instance_uuid, Uuid::nil());
        }
        let Some(Payload::DeleteFailure(f)) = reply(Operand::Delete, &with_instance) else {
            panic!()
        };
        assert_eq!(
            (f.instance_uuid, f.node_uuid, f.reason),
            (INSTANCE, None, DeleteFailureReason::InvalidPayload)
        );
        let Some(Payload::AttachVolumeFailure(f)) = reply(Operand::AttachVolume, &with_instance)
        else {
            panic!()
        };
        assert_eq!((f.instance_uuid, f.volume_uuid), (INSTANCE, Uuid::nil()));
        let Some(Payload::AssignPublicIpFailure(f)) =
            reply(Operand::AssignPublicIp, &with_instance)
        else {
            panic!()
        };
        assert_eq!(
            (f.instance_uuid, f.reason),
            (INSTANCE, PublicIpFailureReason::InvalidPayload)
        );
        assert!(matches!(
            reply(Operand::ReleasePublicIp, &[]),
            Some(Payload::UnassignPublicIpFailure(_))
        ));
        assert!(matches!(
            reply(Operand::Evacuate, &with_instance),
            Some(Payload::ProtocolViolation(_))
        ));
        assert!(matches!(
            reply(Operand::Configure, &[0xa0, 0xa0]),
            Some(Payload::ProtocolViolation(_))
        ));
        // An ERROR with a bad body is dropped without an answer.
        assert_eq!(reply(Operand::DeliveryFailure, &[0xa0]), None);

        // A node answers with its own node UUID.
        let mut agent = session(Side::Client, Role::AGENT, clock);
        let r = rejected(agent.handle_raw(
            clock.now(1),
            raw_with(1, 0, Operand::Start, SERVER, &with_instance),
        ))
        .1;
        let Some(Payload::StartFailure(f)) = r else {
            panic!()
        };
        assert_eq!(f.node_uuid, Some(PEER));
    }

    #[test]
    fn malformed_trace_blocks_are_body_errors() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::CONTROLLER, clock);
        let hops_not_list = cbor(&map(vec![("hops", Value::from(1))]));
        let mut traced = vec![0, hops_not_list.len() as u8];
        traced.extend_from_slice(&hops_not_list);
        for body in [vec![], vec![0], vec![0, 5, 0xa0], vec![0, 1, 0x01], traced] {
            let (v, reply) = rejected(
                s.handle_raw(clock.now(1), raw_with(0x81, 0, Operand::Start, PEER, &body)),
            );
            assert!(matches!(v, Violation::BadTrace { .. }), "{body:?}: {v:?}");
            assert!(matches!(reply, Some(Payload::StartFailure(_))));
        }
    }

    #[test]
    fn a_client_frame_must_carry_the_session_origin() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::AGENT, clock);
        let other = Uuid::from_bytes([0x99; 16]);
        let deleted = Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: INSTANCE,
        });
        let (v, reply) = rejected(s.handle_raw(clock.now(1), raw_payload(other, &deleted)));
        assert!(
            matches!(v, Violation::OriginMismatch { origin, session, .. } if origin == other && session == PEER)
        );
        assert!(matches!(reply, Some(Payload::ProtocolViolation(_))));
        assert!(!v.closes_session());
        assert!(matches!(
            s.handle_raw(clock.now(2), raw_payload(PEER, &deleted)),
            Received::Message(_)
        ));
        // The client side takes forwarded frames from anyone.
        let mut c = session(Side::Client, Role::SERVER, clock);
        assert!(matches!(
            c.handle_raw(clock.now(3), raw_payload(other, &deleted)),
            Received::Message(_)
        ));
    }

    #[test]
    fn node_status_must_name_the_session() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::AGENT, clock);
        let other = Uuid::from_bytes([0x99; 16]);
        let (v, reply) = rejected(s.handle_raw(clock.now(1), raw_payload(PEER, &ready(other))));
        assert!(
            matches!(v, Violation::NodeMismatch { named, session, .. } if named == other && session == PEER)
        );
        assert!(matches!(reply, Some(Payload::ProtocolViolation(_))));
        let Payload::Ready(n) = ready(other) else {
            unreachable!()
        };
        let (v, _) =
            rejected(s.handle_raw(clock.now(1), raw_payload(PEER, &Payload::Full(Some(n)))));
        assert!(matches!(v, Violation::NodeMismatch { .. }));
        assert!(matches!(
            s.handle_raw(clock.now(1), raw_payload(PEER, &Payload::Full(None))),
            Received::Message(_)
        ));
    }

    #[test]
    fn other_minor_versions_are_handled_and_kept() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::AGENT, clock);
        let body = Payload::Heartbeat.encode();
        assert_eq!(
            s.handle_raw(
                clock.now(1),
                raw_with(1, 7, Operand::Heartbeat, PEER, &body)
            ),
            Received::Heartbeat
        );
        let r = s.handle_raw(
            clock.now(1),
            raw_with(
                1,
                7,
                Operand::InstanceDeleted,
                PEER,
                &Payload::InstanceDeleted(InstanceEvent {
                    instance_uuid: INSTANCE,
                })
                .encode(),
            ),
        );
        let Received::Message(m) = r else { panic!() };
        assert_eq!(m.frame.minor, 7);
    }

    #[test]
    fn framing_errors_close_with_protocol_violation() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::AGENT, clock);
        let (v, reply) = s.handle_framing_error(FrameError::TooLarge { length: 5, max: 4 });
        assert!(v.closes_session());
        assert!(matches!(
            reply.unwrap().decode_payload().unwrap(),
            Payload::ProtocolViolation(_)
        ));
    }

    #[test]
    fn received_traces_get_their_rx_stamp() {
        let clock = Clock::new();
        let mut s = session(Side::Client, Role::AGENT, clock);
        let frame = Frame::new(
            SERVER,
            &Payload::Delete(Delete {
                instance_uuid: INSTANCE,
                workload_agent_uuid: PEER,
                stop: false,
            }),
        )
        .with_trace(Trace::new("l", SERVER, Role::SCHEDULER, 7));
        let Received::Message(m) = s.handle_raw(clock.now(3), raw(&frame)) else {
            panic!()
        };
        let trace = m.frame.trace.unwrap();
        assert_eq!(
            trace.hops,
            vec![Hop {
                uuid: SERVER,
                role: Role::SCHEDULER,
                tx_ns: 7,
                rx_ns: clock.now(3).unix_ns
            }]
        );
        let made = s.traced_frame(&Payload::Heartbeat, "x", 42);
        assert_eq!(
            made.trace.unwrap().hops[0],
            Hop {
                uuid: PEER,
                role: Role::AGENT,
                tx_ns: 42,
                rx_ns: 0
            }
        );
    }

    #[test]
    fn client_sees_the_server_close() {
        let clock = Clock::new();
        let mut c = session(Side::Client, Role::AGENT, clock);
        let r = c.handle_raw(
            clock.now(1),
            raw_payload(SERVER, &Payload::ConnectionAborted(Reason::new("replaced"))),
        );
        assert_eq!(
            r,
            Received::PeerClosed {
                aborted: true,
                reason: "replaced".into()
            }
        );
        let r = c.handle_raw(
            clock.now(1),
            raw_with(1, 0, Operand::ConnectionFailure, SERVER, &[0xff]),
        );
        assert_eq!(
            r,
            Received::PeerClosed {
                aborted: false,
                reason: String::new()
            }
        );
    }

    #[test]
    fn liveness_heartbeats_and_idle_timeout() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::AGENT, clock);
        // idle 30 s: heartbeat due 10 s after the last write, idle 30 s after the last receive.
        assert_eq!(s.deadline(), clock.at(10_000));
        assert_eq!(s.poll(clock.at(9_999)), None);
        let Some(Tick::Heartbeat(hb)) = s.poll(clock.at(10_000)) else {
            panic!()
        };
        assert_eq!((hb.operand, hb.origin), (Operand::Heartbeat, SERVER));
        assert_eq!(s.deadline(), clock.at(20_000));
        s.on_write(clock.at(15_000));
        assert_eq!(s.deadline(), clock.at(25_000));
        // Something received pushes the idle deadline: a HEARTBEAT, or a frame refused.
        assert_eq!(s.last_received(), clock.at(0));
        s.handle_raw(clock.now(20_000), raw_payload(PEER, &Payload::Heartbeat));
        assert_eq!(s.last_received(), clock.at(20_000));
        s.handle_raw(clock.now(19_000), raw_payload(PEER, &Payload::Heartbeat));
        assert_eq!(s.last_received(), clock.at(20_000), "never goes back");
        s.on_write(clock.at(45_000));
        assert_eq!(s.deadline(), clock.at(50_000));
        assert_eq!(s.poll(clock.at(49_999)), None);
        let Some(Tick::Idle(Some(err))) = s.poll(clock.at(50_000)) else {
            panic!()
        };
        assert_eq!(
            err.decode_payload().unwrap(),
            Payload::ConnectionFailure(Reason::new("idle timeout"))
        );
        // A client gives up on a silent server without an ERROR (nobody may send one to it).
        let mut c = session(Side::Client, Role::AGENT, clock);
        assert_eq!(c.poll(clock.at(30_000)), Some(Tick::Idle(None)));
    }

    #[test]
    fn a_refused_frame_shows_the_peer_alive_too() {
        let clock = Clock::new();
        let mut s = session(Side::Server, Role::AGENT, clock);
        let r = s.handle_raw(
            clock.now(7_000),
            raw_payload(PEER, &Payload::Configure(Box::default())),
        );
        assert!(matches!(r, Received::Rejected { .. }));
        assert_eq!(s.last_received(), clock.at(7_000));
    }
}
