//! The networked layer over real TLS on loopback: handshakes, round trips, forwarding, liveness,
//! reconnection, relays (who may hold a session: `identity`). No sleeps: every wait has a deadline.

use ssntp::frame::Trace;
use ssntp::payload::*;
use ssntp::{Operand, Payload, Role, Uuid};
use ssntp_net::{
    Client, ClientConfig, ClientEvent, ClientHandle, Route, Routes, SendError, Server,
    ServerConfig, ServerEvent, ServerHandle,
};
use std::time::Duration;
use testkit::{TestPki, recv_within, wait_until};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(crate) const T: Duration = Duration::from_secs(10);

pub(crate) struct TestServer {
    pub handle: ServerHandle,
    pub events: mpsc::Receiver<ServerEvent>,
    pub addr: String,
    pub stop: CancellationToken,
    pub done: tokio::task::JoinHandle<()>,
    /// Messages received in a batch and not yet looked at.
    pub pending: std::collections::VecDeque<(Uuid, ssntp::session::Message)>,
}

pub(crate) async fn server_with(
    pki: &TestPki,
    uuid: Uuid,
    routes: Routes,
    tune: impl FnOnce(&mut ServerConfig),
) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    server_on(pki, uuid, routes, listener, tune)
}

pub(crate) fn server_on(
    pki: &TestPki,
    uuid: Uuid,
    routes: Routes,
    listener: TcpListener,
    tune: impl FnOnce(&mut ServerConfig),
) -> TestServer {
    let addr = format!("localhost:{}", listener.local_addr().unwrap().port());
    let mut config = ServerConfig::new(pki.identity(Role::SCHEDULER, Some(uuid)), uuid);
    config.routes = routes;
    tune(&mut config);
    let (server, handle, events) = Server::new(config).unwrap();
    let stop = CancellationToken::new();
    let done = tokio::spawn(server.run(listener, stop.clone()));
    TestServer {
        handle,
        events,
        addr,
        stop,
        done,
        pending: Default::default(),
    }
}

pub(crate) struct TestClient {
    pub handle: ClientHandle,
    pub events: mpsc::Receiver<ClientEvent>,
    /// Messages received in a batch and not yet looked at.
    pub pending: std::collections::VecDeque<ssntp::session::Message>,
}

pub(crate) fn client_with(
    pki: &TestPki,
    cert_roles: Role,
    claim: Role,
    uuid: Uuid,
    addr: &str,
    tune: impl FnOnce(&mut ClientConfig),
) -> TestClient {
    let mut config = ClientConfig::new(
        pki.identity(cert_roles, Some(uuid)),
        uuid,
        claim,
        vec![addr.to_string()],
    );
    config.backoff.initial = Duration::from_millis(50);
    config.backoff.max = Duration::from_millis(400);
    tune(&mut config);
    let (handle, events) = Client::start(config).unwrap();
    TestClient {
        handle,
        events,
        pending: Default::default(),
    }
}

pub(crate) fn client(pki: &TestPki, role: Role, uuid: Uuid, addr: &str) -> TestClient {
    client_with(pki, role, role, uuid, addr, |_| {})
}

pub(crate) async fn connected(c: &mut TestClient) -> (Uuid, Role) {
    loop {
        match recv_within(&mut c.events, T).await {
            ClientEvent::Connected {
                server_uuid,
                server_role,
                ..
            } => return (server_uuid, server_role),
            ClientEvent::Disconnected { .. } => continue,
            other => panic!("expected Connected, got {other:?}"),
        }
    }
}

pub(crate) async fn server_connected(s: &mut TestServer) -> (Uuid, Role) {
    match recv_within(&mut s.events, T).await {
        ServerEvent::Connected { uuid, role, .. } => (uuid, role),
        other => panic!("expected Connected, got {other:?}"),
    }
}

pub(crate) async fn server_frame(s: &mut TestServer) -> (Uuid, Box<ssntp::session::Message>) {
    loop {
        if let Some((uuid, m)) = s.pending.pop_front() {
            return (uuid, Box::new(m));
        }
        match recv_within(&mut s.events, T).await {
            ServerEvent::Frames { uuid, messages, .. } => {
                s.pending.extend(messages.into_iter().map(|m| (uuid, m)))
            }
            // A server run with `Delivery::Views`: each frame becomes the message it would
            // have been.
            ServerEvent::Views { uuid, frames, .. } => s.pending.extend(
                frames
                    .iter()
                    .map(|f| (uuid, f.to_message().expect("a frame that passed decodes"))),
            ),
            ServerEvent::Connected { .. } | ServerEvent::Disconnected { .. } => continue,
        }
    }
}

pub(crate) async fn client_frame(c: &mut TestClient) -> Box<ssntp::session::Message> {
    loop {
        if let Some(m) = c.pending.pop_front() {
            return Box::new(m);
        }
        match recv_within(&mut c.events, T).await {
            ClientEvent::Frames { messages, .. } => c.pending.extend(messages),
            ClientEvent::Connected { .. } => continue,
            other => panic!("expected a frame, got {other:?}"),
        }
    }
}

/// A READY from `node`, with a little of everything.
pub(crate) fn ready_of(node: Uuid) -> Payload {
    Payload::Ready(NodeStatus {
        node_uuid: node,
        hostname: "a".into(),
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

pub(crate) fn u(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

pub(crate) fn instance_deleted(n: u8) -> Payload {
    Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: u(n),
    })
}

#[tokio::test]
async fn every_role_connects_and_the_server_knows_it() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let cases = [
        (Role::CONTROLLER, Role::CONTROLLER),
        (Role::AGENT, Role::AGENT),
        (Role::NETAGENT, Role::NETAGENT),
        (Role::DUAL, Role::DUAL),
        (Role::DUAL, Role::AGENT),
        (Role::CNCIAGENT, Role::CNCIAGENT),
    ];
    let mut clients = Vec::new();
    for (i, (cert, claim)) in cases.into_iter().enumerate() {
        let id = u(i as u8 + 1);
        let mut c = client_with(&pki, cert, claim, id, &s.addr, |_| {});
        assert_eq!(connected(&mut c).await, (u(0x5c), Role::SCHEDULER));
        assert_eq!(server_connected(&mut s).await, (id, claim));
        assert_eq!(s.handle.client_role(id), Some(claim));
        assert!(c.handle.is_connected());
        clients.push(c);
    }
    assert_eq!(s.handle.client_role(u(4)), Some(Role::DUAL));
    assert_eq!(s.handle.sessions().len(), 6);
}

#[tokio::test]
async fn frames_of_every_type_round_trip() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut agent = client(&pki, Role::AGENT, u(1), &s.addr);
    connected(&mut agent).await;
    server_connected(&mut s).await;
    // EVENT and ERROR from the agent, STATUS too.
    let sent = [
        instance_deleted(9),
        Payload::DeleteFailure(DeleteFailure {
            instance_uuid: u(9),
            node_uuid: Some(u(1)),
            reason: DeleteFailureReason::NoInstance,
        }),
        Payload::Full(None),
    ];
    for p in &sent {
        agent.handle.send_payload(p).unwrap();
    }
    for p in &sent {
        let (from, m) = server_frame(&mut s).await;
        assert_eq!((from, &m.payload, m.frame.origin), (u(1), p, u(1)));
    }
    // A COMMAND from the server.
    let delete = Payload::Delete(Delete {
        instance_uuid: u(9),
        workload_agent_uuid: u(1),
        stop: true,
    });
    s.handle.send_payload(u(1), &delete).unwrap();
    let m = client_frame(&mut agent).await;
    assert_eq!((m.payload.clone(), m.frame.origin), (delete, u(0x5c)));
}

#[tokio::test]
async fn ten_thousand_frames_arrive_in_order() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut agent = client_with(&pki, Role::AGENT, Role::AGENT, u(1), &s.addr, |c| {
        c.conn.queue_frames = 20_000
    });
    connected(&mut agent).await;
    server_connected(&mut s).await;
    for i in 0..10_000u32 {
        let p = Payload::TraceReport(TraceReport {
            frames: vec![FrameTrace {
                label: i.to_string(),
                operand_type: 0,
                operand: 0,
                start_ns: 0,
                end_ns: 0,
                hops: vec![],
            }],
        });
        agent.handle.send_payload(&p).unwrap();
    }
    for i in 0..10_000u32 {
        let (_, m) = server_frame(&mut s).await;
        let Payload::TraceReport(r) = m.payload else {
            panic!()
        };
        assert_eq!(r.frames[0].label, i.to_string());
    }
}

#[tokio::test]
async fn every_frame_received_is_counted_once_by_operand_when_the_application_sees_it() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let mut agent = client(&pki, Role::AGENT, u(1), &s.addr);
    connected(&mut agent).await;
    server_connected(&mut s).await;
    // Runs of one operand and single frames between them, as a session counts them in runs.
    let stopped = Payload::InstanceStopped(InstanceEvent {
        instance_uuid: u(2),
    });
    let report = Payload::TraceReport(TraceReport { frames: vec![] });
    let pattern = [
        &instance_deleted(3),
        &instance_deleted(3),
        &instance_deleted(3),
        &stopped,
        &report,
        &report,
        &instance_deleted(3),
        &stopped,
    ];
    let rounds = 500;
    for _ in 0..rounds {
        for p in pattern {
            agent.handle.send_payload(p).unwrap();
        }
    }
    for _ in 0..rounds * pattern.len() {
        server_frame(&mut s).await;
    }
    // Counted before the application was handed the frames: nothing left to wait for.
    let counts = s.handle.frame_counts();
    let received = |op: Operand| {
        counts
            .iter()
            .find(|(o, _, _)| *o == op)
            .map_or(0, |(_, fin, _)| *fin)
    };
    assert_eq!(received(Operand::InstanceDeleted), 4 * rounds as u64);
    assert_eq!(received(Operand::InstanceStopped), 2 * rounds as u64);
    assert_eq!(received(Operand::TraceReport), 2 * rounds as u64);
}

#[tokio::test]
async fn forwarding_reaches_the_right_sessions_only() {
    let pki = TestPki::new();
    let routes = Routes::new()
        .to_role(Operand::InstanceDeleted, Role::CONTROLLER)
        .dynamic(Operand::Delete, |m, dir| match &m.payload {
            Payload::Delete(d) => match dir.role_of(d.workload_agent_uuid) {
                Some(r) if r.intersects(Role::AGENT | Role::NETAGENT) => {
                    Route::To(d.workload_agent_uuid)
                }
                _ => Route::Fail {
                    reason: DeliveryFailureReason::NodeUnavailable,
                    target: Some(d.workload_agent_uuid),
                },
            },
            _ => Route::Discard,
        });
    let mut s = server_with(&pki, u(0x5c), routes, |_| {}).await;
    let mut c1 = client(&pki, Role::CONTROLLER, u(0xc1), &s.addr);
    let mut c2 = client(&pki, Role::CONTROLLER, u(0xc2), &s.addr);
    let mut a1 = client(&pki, Role::AGENT, u(0xa1), &s.addr);
    let mut a2 = client(&pki, Role::AGENT, u(0xa2), &s.addr);
    for c in [&mut c1, &mut c2, &mut a1, &mut a2] {
        connected(c).await;
    }
    for _ in 0..4 {
        server_connected(&mut s).await;
    }
    // Static: an agent's INSTANCE_DELETED reaches both controllers, origin kept, not the agents.
    a1.handle.send_payload(&instance_deleted(7)).unwrap();
    for c in [&mut c1, &mut c2] {
        let m = client_frame(c).await;
        assert_eq!(
            (m.frame.origin, m.payload.clone()),
            (u(0xa1), instance_deleted(7))
        );
    }
    // Dynamic: DELETE goes to its agent only.
    let delete = Payload::Delete(Delete {
        instance_uuid: u(7),
        workload_agent_uuid: u(0xa2),
        stop: false,
    });
    c1.handle.send_payload(&delete).unwrap();
    let m = client_frame(&mut a2).await;
    assert_eq!((m.frame.origin, m.payload.clone()), (u(0xc1), delete));
    // To an unknown target: DELIVERY_FAILURE to the sender.
    let lost = Payload::Delete(Delete {
        instance_uuid: u(7),
        workload_agent_uuid: u(0xee),
        stop: false,
    });
    c2.handle.send_payload(&lost).unwrap();
    let m = client_frame(&mut c2).await;
    let Payload::DeliveryFailure(f) = m.payload else {
        panic!("{:?}", m.payload)
    };
    assert_eq!(
        (f.operand_type, f.operand, f.target_uuid, f.reason),
        (0, 4, Some(u(0xee)), DeliveryFailureReason::NodeUnavailable)
    );
    // Nothing else arrived anywhere: a marker from the server is the next frame everyone gets.
    for (id, c) in [(u(0xc1), &mut c1), (u(0xa1), &mut a1), (u(0xa2), &mut a2)] {
        s.handle
            .send_payload(
                id,
                &Payload::NodeConnected(NodeEvent {
                    node_uuid: id,
                    node_type: NodeType::ComputeNode,
                }),
            )
            .unwrap();
        let m = client_frame(c).await;
        assert_eq!(m.frame.operand, Operand::NodeConnected, "{id}");
    }
}

#[tokio::test]
async fn frames_after_a_barrier_wait_until_the_application_has_handled_it() {
    let pki = TestPki::new();
    let routes = Routes::new()
        .barrier_on_first([Operand::Ready])
        .to_role(Operand::InstanceDeleted, Role::CONTROLLER);
    let mut s = server_with(&pki, u(0x5c), routes, |_| {}).await;
    let mut c = client(&pki, Role::CONTROLLER, u(0xc1), &s.addr);
    let mut a = client(&pki, Role::AGENT, u(0xa1), &s.addr);
    connected(&mut c).await;
    connected(&mut a).await;
    server_connected(&mut s).await;
    server_connected(&mut s).await;
    let ready = ready_of(u(0xa1));
    let marker = Payload::NodeConnected(NodeEvent {
        node_uuid: u(0xa1),
        node_type: NodeType::ComputeNode,
    });
    // The first READY is a barrier: what the application sends before it lets go (here a
    // marker) reaches the controller before what the agent sent after the READY. The second
    // READY is not.
    for (round, barrier) in [(1, true), (2, false)] {
        a.handle.send_payload(&ready).unwrap();
        a.handle.send_payload(&instance_deleted(round)).unwrap();
        let handled = match recv_within(&mut s.events, T).await {
            ServerEvent::Frames {
                uuid,
                messages,
                handled,
                ..
            } => {
                assert_eq!((uuid, &messages[0].payload), (u(0xa1), &ready));
                handled
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(handled.is_some(), barrier, "round {round}");
        if let Some(handled) = handled {
            s.handle.send_payload(u(0xc1), &marker).unwrap();
            handled.done();
            assert_eq!(client_frame(&mut c).await.payload, marker);
        }
        let m = client_frame(&mut c).await;
        assert_eq!(
            (m.frame.origin, m.payload.clone()),
            (u(0xa1), instance_deleted(round))
        );
    }
}

#[tokio::test]
async fn a_traced_frame_carries_one_hop_per_sender() {
    let pki = TestPki::new();
    let routes = Routes::new().to_role(Operand::InstanceDeleted, Role::CONTROLLER);
    let mut s = server_with(&pki, u(0x5c), routes, |_| {}).await;
    let mut c = client(&pki, Role::CONTROLLER, u(0xc1), &s.addr);
    let mut a = client(&pki, Role::AGENT, u(0xa1), &s.addr);
    connected(&mut c).await;
    connected(&mut a).await;
    server_connected(&mut s).await;
    server_connected(&mut s).await;
    a.handle.send_traced(&instance_deleted(3), "t").unwrap();
    let m = client_frame(&mut c).await;
    let trace: Trace = *m.frame.trace.clone().unwrap();
    assert_eq!(trace.label, "t");
    let hops: Vec<_> = trace.hops.iter().map(|h| (h.uuid, h.role)).collect();
    assert_eq!(
        hops,
        vec![(u(0xa1), Role::AGENT), (u(0x5c), Role::SCHEDULER)]
    );
    assert!(
        trace.hops.iter().all(|h| h.rx_ns >= h.tx_ns && h.tx_ns > 0),
        "{trace:?}"
    );
    assert_eq!(m.payload, instance_deleted(3));
    // PROTOCOL.md §6: a hop is a sender, so agent → scheduler → controller makes two hops (the
    // issue's "three hops" counted the receiver too); both are stamped on receipt.
}

#[tokio::test]
async fn server_stop_and_restart_bring_clients_back_with_the_same_uuid() {
    let pki = TestPki::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let s = server_on(&pki, u(0x5c), Routes::new(), listener, |_| {});
    let mut clients: Vec<TestClient> = (1..=5)
        .map(|i| client(&pki, Role::AGENT, u(i), &s.addr))
        .collect();
    for c in &mut clients {
        connected(c).await;
    }
    s.stop.cancel();
    for c in &mut clients {
        match recv_within(&mut c.events, Duration::from_secs(3)).await {
            ClientEvent::Disconnected { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    s.done.await.unwrap();
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let s2 = server_on(&pki, u(0x5c), Routes::new(), listener, |_| {});
    for c in &mut clients {
        connected(c).await;
    }
    wait_until(T, "five sessions", || async {
        s2.handle.sessions().len() == 5
    })
    .await;
    let mut ids: Vec<Uuid> = s2.handle.sessions().into_iter().map(|(u, _)| u).collect();
    ids.sort();
    assert_eq!(ids, (1..=5).map(u).collect::<Vec<_>>());
}

#[tokio::test]
async fn idle_sessions_are_closed_and_busy_peers_get_busy() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |c| {
        c.handshake.session.idle_timeout = Duration::from_millis(600);
    })
    .await;
    // A client with heartbeats keeps its session past several idle timeouts...
    let mut live = client_with(&pki, Role::AGENT, Role::AGENT, u(1), &s.addr, |c| {
        c.handshake.session.idle_timeout = Duration::from_millis(600);
        c.conn.queue_frames = 4;
    });
    connected(&mut live).await;
    server_connected(&mut s).await;
    let start = tokio::time::Instant::now();
    wait_until(T, "two idle timeouts", || async move {
        start.elapsed() > Duration::from_millis(1500)
    })
    .await;
    assert!(live.handle.is_connected());
    assert!(s.handle.client_role(u(1)).is_some());
    // ...and a full queue answers Busy instead of growing.
    let big = Payload::TraceReport(TraceReport {
        frames: vec![FrameTrace {
            label: "x".repeat(60_000),
            operand_type: 0,
            operand: 0,
            start_ns: 0,
            end_ns: 0,
            hops: vec![],
        }],
    });
    let mut busy = false;
    for _ in 0..10_000 {
        if live.handle.send_payload(&big) == Err(SendError::Busy) {
            busy = true;
            break;
        }
    }
    assert!(busy, "the queue never filled");
}

#[tokio::test]
async fn a_session_whose_application_is_behind_still_heartbeats() {
    // The client's application takes nothing: its reader waits to hand a frame on, for several
    // idle timeouts. The client still heartbeats, so the server keeps it (PROTOCOL.md §5 rule 5);
    // then the application catches up and gets every frame, in order, on the same session.
    let pki = TestPki::new();
    let idle = Duration::from_millis(900);
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |c| {
        c.handshake.session.idle_timeout = idle;
    })
    .await;
    let mut slow = client_with(&pki, Role::AGENT, Role::AGENT, u(1), &s.addr, |c| {
        c.handshake.session.idle_timeout = idle;
        c.event_queue = 1;
    });
    connected(&mut slow).await;
    server_connected(&mut s).await;
    // The first frame fills the application's queue; the second is read and waits behind it.
    s.handle.send_payload(u(1), &instance_deleted(1)).unwrap();
    let queue = &slow.events;
    wait_until(
        T,
        "the first frame queued",
        || async move { queue.len() == 1 },
    )
    .await;
    s.handle.send_payload(u(1), &instance_deleted(2)).unwrap();
    let start = tokio::time::Instant::now();
    wait_until(T, "three idle timeouts", || async move {
        start.elapsed() > idle * 3
    })
    .await;
    assert!(
        s.handle.client_role(u(1)).is_some(),
        "the server dropped it"
    );
    assert!(s.events.try_recv().is_err(), "the server saw an event");
    for n in 1..=3 {
        if n == 3 {
            s.handle.send_payload(u(1), &instance_deleted(3)).unwrap();
        }
        let m = client_frame(&mut slow).await;
        assert_eq!(m.frame.decode_payload().unwrap(), instance_deleted(n));
    }
    assert!(slow.handle.is_connected());
}

#[tokio::test]
async fn close_interrupts_a_dial_in_progress() {
    let pki = TestPki::new();
    // A server that accepts TCP and then says nothing: the TLS handshake hangs.
    let mute = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("localhost:{}", mute.local_addr().unwrap().port());
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = mute.accept().await {
            held.push(tcp);
        }
    });
    let mut c = client_with(&pki, Role::AGENT, Role::AGENT, u(1), &addr, |c| {
        c.handshake.handshake_timeout = Duration::from_secs(60);
    });
    // The client is stuck in its dial; close() ends it: its event stream closes.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), c.events.recv())
            .await
            .is_err()
    );
    c.handle.close();
    let end = tokio::time::timeout(Duration::from_secs(3), async {
        while c.events.recv().await.is_some() {}
    })
    .await;
    assert!(end.is_ok(), "the client did not stop");
    assert!(!c.handle.is_connected());
    held.abort();
}

#[tokio::test]
async fn a_client_reaches_the_server_through_a_relay_and_still_checks_its_name() {
    let pki = TestPki::new();
    let mut s = server_with(&pki, u(0x5c), Routes::new(), |_| {}).await;
    let port = s.addr.rsplit_once(':').unwrap().1.to_string();
    let wrong_name = format!("elsewhere.invalid:{port}");
    let relay = CountingRelay::named(&s.addr, &["localhost:1", &wrong_name]).await;
    let relay = relay.addr;
    // The name the certificate carries, on a port nothing listens on: TCP goes to the relay.
    let mut c = client_with(&pki, Role::AGENT, Role::AGENT, u(1), "localhost:1", |c| {
        c.via = Some(relay.clone());
    });
    assert_eq!(connected(&mut c).await, (u(0x5c), Role::SCHEDULER));
    assert_eq!(server_connected(&mut s).await, (u(1), Role::AGENT));
    // A name the server's certificate does not carry is refused, relay or not.
    let wrong = client_with(&pki, Role::AGENT, Role::AGENT, u(2), &wrong_name, |c| {
        c.via = Some(relay.clone())
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(800), s.events.recv())
            .await
            .is_err(),
        "a server under another name got a session"
    );
    assert!(!wrong.handle.is_connected());
    wrong.handle.close();
    c.handle.close();
}

#[tokio::test]
async fn clients_spread_over_their_servers_and_move_to_the_next_when_one_dies() {
    let pki = TestPki::new();
    let (a, b) = (u(0xa0), u(0xb0));
    let mut servers = vec![
        server_with(&pki, a, Routes::new(), |_| {}).await,
        server_with(&pki, b, Routes::new(), |_| {}).await,
    ];
    let list: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    let ids = [a, b];
    // Four agents with the same list: each starts where its UUID says, and so both serve some.
    let mut agents = Vec::new();
    for n in 1..=4u8 {
        let all = list.clone();
        let mut c = client_with(&pki, Role::AGENT, Role::AGENT, u(n), &list[0], |c| {
            c.servers = all
        });
        let (server, _) = connected(&mut c).await;
        assert_eq!(
            server,
            ids[ssntp_net::client::first_server(u(n), 2)],
            "agent {n}"
        );
        agents.push((n, c, server));
    }
    let on_a = agents.iter().filter(|(_, _, s)| *s == a).count();
    assert!(
        on_a > 0 && on_a < 4,
        "{on_a} of 4 agents on the first server"
    );
    // The first server dies: its agents go to the other one; the others stay.
    let dead = servers.remove(0);
    dead.stop.cancel();
    dead.done.await.unwrap();
    for (n, c, server) in &mut agents {
        if *server == a {
            assert_eq!(connected(c).await.0, b, "agent {n} moved");
        }
    }
    let survivor = &servers[0];
    wait_until(T, "all four agents on the second server", || async {
        survivor.handle.sessions().len() == 4
    })
    .await;
}

/// A TCP relay to `server` that counts the connections it was asked for: a plain one
/// ([`CountingRelay::start`]), or one that reads a relay request first and relays those that
/// ask for one of `names` (all to `server`, [`CountingRelay::named`]).
pub(crate) struct CountingRelay {
    pub(crate) addr: String,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingRelay {
    pub(crate) async fn start(server: &str) -> CountingRelay {
        CountingRelay::relay(server, None).await
    }

    pub(crate) async fn named(server: &str, names: &[&str]) -> CountingRelay {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        CountingRelay::relay(server, Some(names)).await
    }

    async fn relay(server: &str, names: Option<Vec<String>>) -> CountingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (count, server) = (accepted.clone(), server.to_string());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (server, names) = (server.clone(), names.clone());
                tokio::spawn(async move {
                    if let Some(names) = names
                        && ssntp_net::relay::read_request(&mut inbound, &names)
                            .await
                            .is_err()
                    {
                        return;
                    }
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&server).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        CountingRelay { addr, accepted }
    }

    fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) async fn wait_for_connections(&self, n: usize) {
        wait_until(T, &format!("{n} connections through the relay"), || async {
            self.connections() >= n
        })
        .await;
    }
}

/// `config` dialling `addr`, trying again within 50-100 ms.
pub(crate) fn fast_backoff(mut config: ClientConfig, addr: &str) -> ClientConfig {
    config.servers = vec![addr.to_string()];
    config.backoff.initial = Duration::from_millis(50);
    config.backoff.max = Duration::from_millis(100);
    config
}
