//! The receiving rules, liveness, and the frames a session makes.

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
    let Some(Payload::AttachVolumeFailure(f)) = reply(Operand::AttachVolume, &with_instance) else {
        panic!()
    };
    assert_eq!((f.instance_uuid, f.volume_uuid), (INSTANCE, Uuid::nil()));
    let Some(Payload::AssignPublicIpFailure(f)) = reply(Operand::AssignPublicIp, &with_instance)
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
        let (v, reply) =
            rejected(s.handle_raw(clock.now(1), raw_with(0x81, 0, Operand::Start, PEER, &body)));
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
    let (v, _) = rejected(s.handle_raw(clock.now(1), raw_payload(PEER, &Payload::Full(Some(n)))));
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
