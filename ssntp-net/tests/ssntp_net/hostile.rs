//! Peers that break the rules, over real TLS: the server refuses them and only them.

use ssntp::frame::{DEFAULT_MAX_FRAME, Frame};
use ssntp::payload::*;
use ssntp::{Operand, Payload, Role, Uuid};
use ssntp_net::{Delivery, Routes, ServerEvent};
use std::time::Duration;
use testkit::{RawPeer, TestPki, recv_within};

use crate::net::{T, client, connected, ready_of, server_connected, server_with, u};

fn connect_frame(origin: Uuid, role: Role) -> Frame {
    Frame::new(origin, &Payload::Connect(Connect { role }))
}

async fn reply_operand(peer: &mut RawPeer) -> Operand {
    peer.recv(T)
        .await
        .expect("a reply before the close")
        .operand
}

#[tokio::test]
async fn identity_binding_and_claims_are_enforced_by_the_server() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    // Bound to 0x01, claims to be 0x02.
    let mut liar = RawPeer::connect(&s.addr, &pki.identity(Role::AGENT, Some(u(1))))
        .await
        .unwrap();
    liar.send(&connect_frame(u(2), Role::AGENT)).await.unwrap();
    assert_eq!(reply_operand(&mut liar).await, Operand::ConnectionAborted);
    assert!(liar.closed_within(T).await);
    // An agent certificate claiming CONTROLLER.
    let mut climber = RawPeer::connect(&s.addr, &pki.identity(Role::AGENT, Some(u(3))))
        .await
        .unwrap();
    climber
        .send(&connect_frame(u(3), Role::CONTROLLER))
        .await
        .unwrap();
    assert_eq!(
        reply_operand(&mut climber).await,
        Operand::ConnectionAborted
    );
    // A certificate without roles.
    let mut nobody = RawPeer::connect(&s.addr, &pki.identity(Role::empty(), None))
        .await
        .unwrap();
    nobody
        .send(&connect_frame(u(4), Role::AGENT))
        .await
        .unwrap();
    assert_eq!(reply_operand(&mut nobody).await, Operand::ConnectionAborted);
    // HEARTBEAT first: CONNECTION_FAILURE (may retry).
    let mut early = RawPeer::connect(&s.addr, &pki.identity(Role::AGENT, None))
        .await
        .unwrap();
    early
        .send(&Frame::new(u(5), &Payload::Heartbeat))
        .await
        .unwrap();
    assert_eq!(reply_operand(&mut early).await, Operand::ConnectionFailure);
    // The honest one with the right UUID gets in.
    let mut honest = RawPeer::connect(&s.addr, &pki.identity(Role::AGENT, Some(u(1))))
        .await
        .unwrap();
    honest
        .send(&connect_frame(u(1), Role::AGENT))
        .await
        .unwrap();
    assert_eq!(reply_operand(&mut honest).await, Operand::Connected);
    assert_eq!(server_connected(&mut s).await, (u(1), Role::AGENT));
    assert_eq!(s.handle.sessions(), vec![(u(1), Role::AGENT)]);
}

#[tokio::test]
async fn silence_before_connect_fails_at_the_handshake_timeout() {
    let pki = TestPki::new();
    let s = server_with(&pki, u(0x5c), Routes::new(), |c| {
        c.handshake.handshake_timeout = Duration::from_millis(300);
    })
    .await;
    let mut slow = RawPeer::connect(&s.addr, &pki.identity(Role::AGENT, None))
        .await
        .unwrap();
    let reply = slow.recv(Duration::from_secs(3)).await.expect("an answer");
    assert_eq!(reply.operand, Operand::ConnectionFailure);
    assert!(slow.closed_within(T).await);
}

async fn joined(pki: &TestPki, addr: &str, id: Uuid) -> RawPeer {
    joined_as(pki, addr, id, Role::AGENT).await
}

async fn joined_as(pki: &TestPki, addr: &str, id: Uuid, role: Role) -> RawPeer {
    let mut peer = RawPeer::connect(addr, &pki.identity(role, Some(id)))
        .await
        .unwrap();
    peer.send(&connect_frame(id, role)).await.unwrap();
    assert_eq!(reply_operand(&mut peer).await, Operand::Connected);
    peer
}

#[tokio::test]
async fn oversize_and_truncated_frames_close_only_their_session() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut bystander = client(&pki, Role::AGENT, u(9), &s.addr);
    connected(&mut bystander).await;
    server_connected(&mut s).await;

    // A header announcing 1 MiB + 1: PROTOCOL_VIOLATION, then closed.
    let mut big = joined(&pki, &s.addr, u(1)).await;
    server_connected(&mut s).await;
    let mut header = vec![1u8, 0, 3, 2];
    header.extend_from_slice(&(DEFAULT_MAX_FRAME + 1).to_be_bytes());
    header.extend_from_slice(u(1).as_bytes());
    big.send_bytes(&header).await.unwrap();
    assert_eq!(reply_operand(&mut big).await, Operand::ProtocolViolation);
    assert!(big.closed_within(T).await);
    match recv_within(&mut s.events, T).await {
        ServerEvent::Disconnected { uuid, .. } => assert_eq!(uuid, u(1)),
        other => panic!("{other:?}"),
    }

    // A frame cut short, then the connection closed: that session ends, nothing is delivered.
    let mut cut = joined(&pki, &s.addr, u(2)).await;
    server_connected(&mut s).await;
    let whole = Frame::new(
        u(2),
        &Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: u(7),
        }),
    )
    .to_bytes(DEFAULT_MAX_FRAME)
    .unwrap();
    cut.send_bytes(&whole[..whole.len() - 3]).await.unwrap();
    drop(cut);
    match recv_within(&mut s.events, T).await {
        ServerEvent::Disconnected { uuid, .. } => assert_eq!(uuid, u(2)),
        other => panic!("{other:?}"),
    }

    // Unauthorized and unknown frames: answered, session kept.
    let mut rude = joined(&pki, &s.addr, u(3)).await;
    server_connected(&mut s).await;
    let start = Payload::Start(Box::new(Start {
        instance_uuid: u(7),
        tenant_uuid: u(8),
        workload_uuid: u(8),
        vm_type: VmType::Sim,
        fw_type: FwType::Legacy,
        image: "x".into(),
        requirements: Requirements {
            vcpus: 1,
            mem_mb: 1,
            disk_mb: 1,
            network_node: false,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        },
        networking: None,
        storage: None,
        user_data: None,
        meta_data: None,
        restart: false,
        kernel: None,
    }));
    rude.send(&Frame::new(u(3), &start)).await.unwrap();
    assert_eq!(reply_operand(&mut rude).await, Operand::ProtocolViolation);
    let mut unknown = Frame::new(u(3), &Payload::Heartbeat);
    unknown.operand = Operand::from_wire(3, 42);
    rude.send(&unknown).await.unwrap();
    assert_eq!(reply_operand(&mut rude).await, Operand::InvalidFrameType);
    assert!(s.handle.client_role(u(3)).is_some());

    // The bystander never noticed.
    assert!(bystander.handle.is_connected());
    bystander
        .handle
        .send_payload(&Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: u(1),
        }))
        .unwrap();
    let (from, _) = crate::net::server_frame(&mut s).await;
    assert_eq!(from, u(9));
}

/// PROTOCOL.md §5 rule 5: a HEARTBEAT shows its sender alive. The server's handle tells when a
/// session last received a frame, HEARTBEATs included, though they never reach the application.
#[tokio::test]
async fn heartbeats_show_a_peer_alive_without_reaching_the_application() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut beating = joined(&pki, &s.addr, u(1)).await;
    let generation = match recv_within(&mut s.events, T).await {
        ServerEvent::Connected {
            uuid, generation, ..
        } => {
            assert_eq!(uuid, u(1));
            generation
        }
        other => panic!("{other:?}"),
    };
    let at_connect = s.handle.last_received(u(1), generation).unwrap();
    assert_eq!(s.handle.last_received(u(1), generation + 1), None);
    assert_eq!(s.handle.last_received(u(2), generation), None);
    // HEARTBEATs alone, paced by the poll: each read moves the session's last receive.
    let heartbeat = Frame::new(u(1), &Payload::Heartbeat);
    let mut last = at_connect;
    for _ in 0..3 {
        let deadline = tokio::time::Instant::now() + T;
        loop {
            beating.send(&heartbeat).await.unwrap();
            let seen = s.handle.last_received(u(1), generation).unwrap();
            if seen > last {
                last = seen;
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a HEARTBEAT never showed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // The application heard none of them: the next thing it hears is the next message.
    beating
        .send(&Frame::new(
            u(1),
            &Payload::InstanceDeleted(InstanceEvent {
                instance_uuid: u(7),
            }),
        ))
        .await
        .unwrap();
    match recv_within(&mut s.events, T).await {
        ServerEvent::Frames { uuid, messages, .. } => {
            assert_eq!(uuid, u(1));
            let operands: Vec<Operand> = messages.iter().map(|m| m.frame.operand).collect();
            assert_eq!(operands, vec![Operand::InstanceDeleted]);
        }
        other => panic!("{other:?}"),
    }
    // Once the session has ended there is nothing to tell.
    drop(beating);
    match recv_within(&mut s.events, T).await {
        ServerEvent::Disconnected { uuid, .. } => assert_eq!(uuid, u(1)),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.handle.last_received(u(1), generation), None);
}

#[tokio::test]
async fn a_silent_session_is_closed_at_the_idle_timeout() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |c| {
        c.handshake.session.idle_timeout = Duration::from_millis(400);
    })
    .await;
    let mut quiet = joined(&pki, &s.addr, u(1)).await;
    server_connected(&mut s).await;
    // The server heartbeats, then gives up on a peer that never speaks.
    let mut saw_heartbeat = false;
    loop {
        match quiet.recv(Duration::from_secs(5)).await {
            Some(f) if f.operand == Operand::Heartbeat => saw_heartbeat = true,
            Some(f) => {
                assert_eq!(f.operand, Operand::ConnectionFailure);
                assert_eq!(
                    f.decode_payload().unwrap(),
                    Payload::ConnectionFailure(Reason::new("idle timeout"))
                );
                break;
            }
            None => panic!("closed without saying why"),
        }
    }
    assert!(saw_heartbeat);
    assert!(quiet.closed_within(T).await);
    match recv_within(&mut s.events, T).await {
        ServerEvent::Disconnected { uuid, .. } => assert_eq!(uuid, u(1)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn stalled_handshakes_are_capped_apart_from_sessions() {
    // Peers that connect and say nothing hold a handshake slot each until the handshake
    // timeout; past `max_handshakes` a new connection waits for a slot (`handshake_wait`, 0
    // here: closed at once), and the sessions already up are not touched.
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |c| {
        c.max_handshakes = 2;
        c.handshake_wait = Duration::ZERO;
        c.handshake.handshake_timeout = Duration::from_secs(60);
    })
    .await;
    let mut agent = client(&pki, Role::AGENT, u(1), &s.addr);
    connected(&mut agent).await;
    assert_eq!(server_connected(&mut s).await, (u(1), Role::AGENT));
    // Two stall in the SSNTP handshake (TLS done, no CONNECT) and hold both slots...
    let identity = pki.identity(Role::AGENT, None);
    let mut stalled = Vec::new();
    for _ in 0..2 {
        stalled.push(RawPeer::connect(&s.addr, &identity).await.unwrap());
    }
    // ...so a third connection is closed before its TLS handshake can finish.
    let third = tokio::time::timeout(T, RawPeer::connect(&s.addr, &identity)).await;
    match third {
        Ok(Err(_)) => {}
        Ok(Ok(mut peer)) => assert!(peer.closed_within(T).await, "a third handshake was served"),
        Err(_) => panic!("the third connection was neither refused nor closed"),
    }
    // The session that was up goes on.
    agent
        .handle
        .send_payload(&Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: u(7),
        }))
        .unwrap();
    match recv_within(&mut s.events, T).await {
        ServerEvent::Frames { uuid, .. } => assert_eq!(uuid, u(1)),
        other => panic!("{other:?}"),
    }
    // Once the stalled peers go, their slots serve new clients again.
    drop(stalled);
    let mut late = client(&pki, Role::AGENT, u(2), &s.addr);
    connected(&mut late).await;
    assert_eq!(server_connected(&mut s).await, (u(2), Role::AGENT));
}

#[tokio::test]
async fn a_connection_past_the_handshake_slots_waits_for_one() {
    // One slot, one place to wait: a stalled peer holds the slot, a second connection waits
    // for it (so a third is closed at once), and is served as soon as the slot comes free,
    // instead of being sent away to back off.
    let pki = TestPki::new();
    let s = server_with(&pki, u(0x5d), Routes::new(), |c| {
        c.max_handshakes = 1;
        c.handshake_wait = Duration::from_secs(60);
        c.handshake.handshake_timeout = Duration::from_secs(60);
    })
    .await;
    let identity = pki.identity(Role::AGENT, None);
    let stalled = RawPeer::connect(&s.addr, &identity).await.unwrap();
    // Connected before the third (the server accepts in order), its TLS handshake waits.
    let tcp = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let waiting = {
        let (addr, identity) = (s.addr.clone(), identity.clone());
        tokio::spawn(async move { RawPeer::over(tcp, &addr, &identity).await })
    };
    let third = tokio::time::timeout(T, RawPeer::connect(&s.addr, &identity)).await;
    match third {
        Ok(Err(_)) => {}
        Ok(Ok(mut peer)) => assert!(peer.closed_within(T).await, "a third handshake was served"),
        Err(_) => panic!("the third connection was neither refused nor closed"),
    }
    assert!(
        !waiting.is_finished(),
        "the waiting connection was not kept waiting"
    );
    drop(stalled);
    let served = tokio::time::timeout(T, waiting)
        .await
        .expect("served within T");
    assert!(
        served.unwrap().is_ok(),
        "the waiting connection's TLS handshake failed"
    );
}

/// A DELETE of instance `n`.
fn delete(n: u8) -> Payload {
    Payload::Delete(Delete {
        instance_uuid: u(n),
        workload_agent_uuid: u(0xa),
        stop: false,
    })
}

/// DELETEs of the instances `numbers` from `origin`, encoded one after another.
fn deletes(origin: Uuid, numbers: std::ops::RangeInclusive<u8>) -> Vec<u8> {
    numbers.flat_map(|n| wire(origin, &delete(n))).collect()
}

/// A frame from `origin` carrying `payload`, encoded.
fn wire(origin: Uuid, payload: &Payload) -> bytes::Bytes {
    Frame::new(origin, payload)
        .to_bytes(DEFAULT_MAX_FRAME)
        .unwrap()
}

/// A controller's session (no read budget) has its payloads decoded by a second task beside its
/// reader: the messages still reach the application in the order sent, a bad payload among them
/// is answered with the operand's own failure (PROTOCOL.md §5 rule 4) and the session kept, a
/// HEARTBEAT goes no further, and the frames read last reach the application before the
/// session is reported ended.
#[tokio::test]
async fn a_controller_session_decoded_beside_its_reader_keeps_order_and_rule_4() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut peer = joined_as(&pki, &s.addr, u(1), Role::CONTROLLER).await;
    server_connected(&mut s).await;

    // Missing every key DELETE needs.
    let mut bad = Frame::new(u(1), &delete(2));
    bad.payload = bytes::Bytes::from_static(&[0xa0]);
    let mut burst = Vec::new();
    burst.extend_from_slice(&wire(u(1), &delete(1)));
    burst.extend_from_slice(&bad.to_bytes(DEFAULT_MAX_FRAME).unwrap());
    burst.extend_from_slice(&wire(u(1), &Payload::Heartbeat));
    burst.extend_from_slice(&deletes(u(1), 3..=40));
    peer.send_bytes(&burst).await.unwrap();
    let reply = peer.recv(T).await.expect("the bad DELETE answered");
    assert_eq!(reply.operand, Operand::DeleteFailure);
    match reply.decode_payload().unwrap() {
        Payload::DeleteFailure(f) => {
            assert_eq!(f.reason, DeleteFailureReason::InvalidPayload);
        }
        other => panic!("{other:?}"),
    }

    let mut got = Vec::new();
    while got.len() < 39 {
        match recv_within(&mut s.events, T).await {
            ServerEvent::Frames { uuid, messages, .. } => {
                assert_eq!(uuid, u(1));
                got.extend(messages.into_iter().map(|m| m.payload));
            }
            other => panic!("{other:?}"),
        }
    }
    let sent: Vec<Payload> = std::iter::once(1).chain(3..=40).map(delete).collect();
    assert_eq!(got, sent);
    assert!(s.handle.client_role(u(1)).is_some());

    // The last frames, then the close at once: delivered before the session's end.
    peer.send_bytes(&deletes(u(1), 41..=60)).await.unwrap();
    drop(peer);
    let mut tail = Vec::new();
    loop {
        match recv_within(&mut s.events, T).await {
            ServerEvent::Frames { messages, .. } => {
                tail.extend(messages.into_iter().map(|m| m.payload));
            }
            ServerEvent::Disconnected { uuid, .. } => {
                assert_eq!(uuid, u(1));
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(tail, (41..=60).map(delete).collect::<Vec<_>>());

    // Replies keep the order of the frames they answer, the last a framing error's (rule 1:
    // PROTOCOL_VIOLATION, then close), though the payload's rules run on the second task.
    let mut peer = joined_as(&pki, &s.addr, u(2), Role::CONTROLLER).await;
    server_connected(&mut s).await;
    let mut bad = Frame::new(u(2), &delete(2));
    bad.payload = bytes::Bytes::from_static(&[0xa0]);
    let mut burst = bad.to_bytes(DEFAULT_MAX_FRAME).unwrap().to_vec();
    burst.extend_from_slice(&[1u8, 0, 3, 2]);
    burst.extend_from_slice(&(DEFAULT_MAX_FRAME + 1).to_be_bytes());
    burst.extend_from_slice(u(2).as_bytes());
    peer.send_bytes(&burst).await.unwrap();
    assert_eq!(reply_operand(&mut peer).await, Operand::DeleteFailure);
    assert_eq!(reply_operand(&mut peer).await, Operand::ProtocolViolation);
    assert!(peer.closed_within(T).await);
}

/// The payloads of the views in the server's next events from `uuid` until `n` are taken
/// (each decoded from its view), or until its session ends (`true` then).
async fn viewed(s: &mut crate::net::TestServer, uuid: Uuid, n: usize) -> (Vec<Payload>, bool) {
    let mut got = Vec::new();
    while got.len() < n {
        match recv_within(&mut s.events, T).await {
            ServerEvent::Views {
                uuid: from, frames, ..
            } => {
                assert_eq!(from, uuid);
                for frame in frames.iter() {
                    assert_eq!(frame.origin(), uuid);
                    let payload = frame.payload().expect("a view that passed decodes");
                    assert_eq!(payload.operand(), frame.operand());
                    got.push(payload);
                }
            }
            ServerEvent::Disconnected { uuid: from, .. } if from == uuid => return (got, true),
            other => panic!("{other:?}"),
        }
    }
    (got, false)
}

/// A server run with `Delivery::Views` applies every rule where the frames lie and hands the
/// application each read's frames as views: they come in the order sent, a bad payload among
/// them is answered with the operand's own failure (rule 4), a foreign origin with
/// PROTOCOL_VIOLATION (both sessions kept), a HEARTBEAT goes no further, the frames read last
/// reach the application before the session is reported ended, and a framing error is answered
/// after the frames before it are delivered. A node's session, with its read budget, is served
/// the same way. Forwarding rules need messages: such a server does not start.
#[tokio::test]
async fn a_server_delivering_views_keeps_order_and_every_rule() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |c| {
        c.delivery = Delivery::Views;
    })
    .await;
    let mut peer = joined_as(&pki, &s.addr, u(1), Role::CONTROLLER).await;
    server_connected(&mut s).await;

    let mut bad = Frame::new(u(1), &delete(2));
    bad.payload = bytes::Bytes::from_static(&[0xa0]);
    let foreign = wire(u(9), &delete(2));
    let traced = Frame::new(u(1), &delete(3)).with_trace(ssntp::frame::Trace::new(
        "views",
        u(1),
        Role::CONTROLLER,
        7,
    ));
    let mut burst = Vec::new();
    burst.extend_from_slice(&wire(u(1), &delete(1)));
    burst.extend_from_slice(&bad.to_bytes(DEFAULT_MAX_FRAME).unwrap());
    burst.extend_from_slice(&wire(u(1), &Payload::Heartbeat));
    burst.extend_from_slice(&foreign);
    burst.extend_from_slice(&traced.to_bytes(DEFAULT_MAX_FRAME).unwrap());
    burst.extend_from_slice(&deletes(u(1), 4..=40));
    peer.send_bytes(&burst).await.unwrap();
    let reply = peer.recv(T).await.expect("the bad DELETE answered");
    match reply.decode_payload().unwrap() {
        Payload::DeleteFailure(f) => assert_eq!(f.reason, DeleteFailureReason::InvalidPayload),
        other => panic!("{other:?}"),
    }
    assert_eq!(reply_operand(&mut peer).await, Operand::ProtocolViolation);
    let (got, ended) = viewed(&mut s, u(1), 39).await;
    assert!(!ended);
    let sent: Vec<Payload> = std::iter::once(1).chain(3..=40).map(delete).collect();
    assert_eq!(got, sent);
    assert!(s.handle.client_role(u(1)).is_some());

    // The last frames, then the close at once: delivered before the session's end.
    peer.send_bytes(&deletes(u(1), 41..=60)).await.unwrap();
    drop(peer);
    let (tail, _) = viewed(&mut s, u(1), 20).await;
    assert_eq!(tail, (41..=60).map(delete).collect::<Vec<_>>());
    assert!(
        viewed(&mut s, u(1), usize::MAX).await.1,
        "the session's end"
    );

    // A frame, then a header announcing too large a body, in one write: the frame is
    // delivered, then PROTOCOL_VIOLATION and the close. Before them, a frame of 300 KB, which
    // takes many reads, between two small ones.
    let mut peer = joined_as(&pki, &s.addr, u(2), Role::CONTROLLER).await;
    server_connected(&mut s).await;
    let large = Payload::ProtocolViolation(Reason::new("x".repeat(300 << 10)));
    let mut burst = wire(u(2), &delete(1)).to_vec();
    burst.extend_from_slice(&wire(u(2), &large));
    burst.extend_from_slice(&wire(u(2), &delete(2)));
    peer.send_bytes(&burst).await.unwrap();
    assert_eq!(
        viewed(&mut s, u(2), 3).await,
        (vec![delete(1), large, delete(2)], false)
    );
    let mut burst = wire(u(2), &delete(5)).to_vec();
    burst.extend_from_slice(&[1u8, 0, 3, 2]);
    burst.extend_from_slice(&(DEFAULT_MAX_FRAME + 1).to_be_bytes());
    burst.extend_from_slice(u(2).as_bytes());
    peer.send_bytes(&burst).await.unwrap();
    assert_eq!(reply_operand(&mut peer).await, Operand::ProtocolViolation);
    assert!(peer.closed_within(T).await);
    assert_eq!(
        viewed(&mut s, u(2), usize::MAX).await,
        (vec![delete(5)], true)
    );

    // A node, within its read budget: its events come as views too, a status naming another
    // node refused (PROTOCOL_VIOLATION, session kept).
    let mut node = joined(&pki, &s.addr, u(3)).await;
    server_connected(&mut s).await;
    let deleted = |n: u8| {
        Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: u(n),
        })
    };
    let mut burst = Vec::new();
    for p in [deleted(1), ready_of(u(4)), deleted(2)] {
        burst.extend_from_slice(&wire(u(3), &p));
    }
    node.send_bytes(&burst).await.unwrap();
    assert_eq!(reply_operand(&mut node).await, Operand::ProtocolViolation);
    assert_eq!(
        viewed(&mut s, u(3), 2).await,
        (vec![deleted(1), deleted(2)], false)
    );

    let mut config = ssntp_net::ServerConfig::new(pki.identity(Role::SCHEDULER, Some(u(7))), u(7));
    config.delivery = Delivery::Views;
    config.routes = Routes::new().to_role(Operand::Start, Role::AGENT);
    assert!(matches!(
        ssntp_net::Server::new(config),
        Err(ssntp_net::ServerError::ViewsWithRoutes)
    ));
}
