//! cumulo-scheduler over real SSNTP: fake agents and controllers (ssntp clients with test
//! certificates) against the scheduler on loopback. Every wait has a deadline.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use scheduler::{SchedulerConfig, Summary};
use ssntp::frame::Frame;
use ssntp::payload::*;
use ssntp::session::Message;
use ssntp::{Operand, Payload, Role, Uuid};
use ssntp_net::{Client, ClientConfig, ClientEvent, ClientHandle};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use testkit::{RawPeer, TestPki, recv_within, wait_until};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod hostile;

const T: Duration = Duration::from_secs(10);
const SCHED: Uuid = Uuid::from_bytes([0x5c; 16]);

fn u(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

struct Sched {
    addr: String,
    stop: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

async fn scheduler(pki: &TestPki, listener: Option<TcpListener>) -> Sched {
    scheduler_with(pki, listener, ssntp_net::ConnConfig::default()).await
}

async fn scheduler_with(
    pki: &TestPki,
    listener: Option<TcpListener>,
    conn: ssntp_net::ConnConfig,
) -> Sched {
    scheduler_tuned(pki, listener, |c| c.conn = conn).await
}

/// The scheduler in process, with `tune` applied to its configuration first.
async fn scheduler_tuned(
    pki: &TestPki,
    listener: Option<TcpListener>,
    tune: impl FnOnce(&mut SchedulerConfig),
) -> Sched {
    let listener = match listener {
        Some(l) => l,
        None => TcpListener::bind("127.0.0.1:0").await.unwrap(),
    };
    let addr = format!("localhost:{}", listener.local_addr().unwrap().port());
    let mut config = SchedulerConfig {
        tls: pki.identity(Role::SCHEDULER, Some(SCHED)),
        uuid: SCHED,
        stats_interval: Duration::from_secs(5),
        handshake: Default::default(),
        cluster: ClusterConfig::default(),
        heartbeat: false,
        conn: Default::default(),
    };
    tune(&mut config);
    let stop = CancellationToken::new();
    let summary = Arc::new(Mutex::new(Summary::default()));
    let s = stop.clone();
    let done = tokio::spawn(async move {
        scheduler::run(config, listener, s, summary).await.unwrap();
    });
    Sched { addr, stop, done }
}

/// An SSNTP peer that records what it receives.
struct Peer {
    handle: ClientHandle,
    events: mpsc::Receiver<ClientEvent>,
    pending: VecDeque<Message>,
}

impl Peer {
    async fn next(&mut self) -> Message {
        loop {
            if let Some(m) = self.pending.pop_front() {
                return m;
            }
            match recv_within(&mut self.events, T).await {
                ClientEvent::Frames(ms) => self.pending.extend(ms),
                ClientEvent::Connected { .. } | ClientEvent::Disconnected { .. } => {}
                ClientEvent::Stopped(e) => panic!("client stopped: {e}"),
            }
        }
    }

    /// The next message that is not a NODE_* event.
    async fn next_work(&mut self) -> Message {
        loop {
            let m = self.next().await;
            if !matches!(
                m.frame.operand,
                Operand::NodeConnected | Operand::NodeDisconnected
            ) {
                return m;
            }
        }
    }

    async fn connected(&mut self) {
        loop {
            match recv_within(&mut self.events, T).await {
                ClientEvent::Connected { .. } => return,
                ClientEvent::Frames(ms) => self.pending.extend(ms),
                ClientEvent::Disconnected { .. } => {}
                ClientEvent::Stopped(e) => panic!("client stopped: {e}"),
            }
        }
    }

    fn send(&self, p: &Payload) {
        self.handle.send_payload(p).unwrap();
    }
}

fn node_status(uuid: Uuid, host: &str, mem: u32) -> NodeStatus {
    NodeStatus {
        node_uuid: uuid,
        hostname: host.into(),
        mem_total_mb: mem,
        mem_available_mb: mem,
        disk_total_mb: 10_000,
        disk_available_mb: 10_000,
        vcpus_total: 16,
        vcpus_available: 16,
        load: 0,
        networks: vec![],
    }
}

async fn peer(
    pki: &TestPki,
    role: Role,
    uuid: Uuid,
    addr: &str,
    ready: Option<NodeStatus>,
) -> Peer {
    let announce = ready.map(Payload::Ready).into_iter().collect();
    peer_announcing(pki, role, uuid, addr, announce).await
}

/// A peer that sends `announce` first on every connect (as the agent's announce hook does).
async fn peer_announcing(
    pki: &TestPki,
    role: Role,
    uuid: Uuid,
    addr: &str,
    announce: Vec<Payload>,
) -> Peer {
    let mut config = ClientConfig::new(
        pki.identity(role, Some(uuid)),
        uuid,
        role,
        vec![addr.to_string()],
    );
    config.backoff.initial = Duration::from_millis(50);
    config.backoff.max = Duration::from_millis(300);
    if !announce.is_empty() {
        config.announce = Some(Arc::new(move || announce.clone()));
    }
    let (handle, events) = Client::start(config).unwrap();
    let mut p = Peer {
        handle,
        events,
        pending: VecDeque::new(),
    };
    p.connected().await;
    p
}

async fn agent(pki: &TestPki, uuid: Uuid, addr: &str, mem: u32) -> Peer {
    let host = format!("host{}", uuid.as_bytes()[0]);
    peer(
        pki,
        Role::AGENT,
        uuid,
        addr,
        Some(node_status(uuid, &host, mem)),
    )
    .await
}

fn start(instance: u8, mem: u32) -> Start {
    Start {
        instance_uuid: u(instance),
        tenant_uuid: u(0x7e),
        workload_uuid: u(0x3a),
        vm_type: VmType::Sim,
        fw_type: FwType::Legacy,
        image: "tiny".into(),
        requirements: Requirements {
            vcpus: 1,
            mem_mb: mem,
            disk_mb: 10,
            network_node: false,
            node_id: None,
            hostname: None,
        },
        networking: None,
        storage: None,
        user_data: None,
        meta_data: None,
        restart: false,
    }
}

/// Waits until the controller has seen `n` NODE_CONNECTED events (so READYs are in).
async fn nodes_seen(c: &mut Peer, n: usize) {
    let mut seen = 0;
    while seen < n {
        let m = c.next().await;
        if m.frame.operand == Operand::NodeConnected {
            seen += 1;
        }
    }
}

/// The START_FAILURE a controller gets for a request, or the agent that got it.
async fn place(
    c: &mut Peer,
    agents: &mut [&mut Peer],
    s: Start,
) -> Result<usize, StartFailureReason> {
    c.send(&Payload::Start(Box::new(s.clone())));
    // Poll the agents and the controller alternately, with deadlines.
    let deadline = tokio::time::Instant::now() + T;
    loop {
        for (i, a) in agents.iter_mut().enumerate() {
            if let Ok(Some(ClientEvent::Frames(ms))) =
                tokio::time::timeout(Duration::from_millis(5), a.events.recv()).await
            {
                a.pending.extend(ms);
            }
            if let Some(pos) = a
                .pending
                .iter()
                .position(|m| m.frame.operand == Operand::Start)
            {
                let m = a.pending.remove(pos).unwrap();
                assert_eq!(m.payload, Payload::Start(Box::new(s.clone())));
                assert_eq!(m.frame.origin, c.handle.uuid(), "origin kept");
                return Ok(i);
            }
        }
        if let Ok(Some(ClientEvent::Frames(ms))) =
            tokio::time::timeout(Duration::from_millis(5), c.events.recv()).await
        {
            c.pending.extend(ms);
        }
        if let Some(pos) = c
            .pending
            .iter()
            .position(|m| m.frame.operand == Operand::StartFailure)
        {
            let m = c.pending.remove(pos).unwrap();
            let Payload::StartFailure(f) = m.payload else {
                unreachable!()
            };
            assert_eq!(
                (f.instance_uuid, f.node_uuid, m.frame.origin),
                (s.instance_uuid, None, SCHED)
            );
            return Err(f.reason);
        }
        assert!(tokio::time::Instant::now() < deadline, "no answer to START");
    }
}

#[tokio::test]
async fn placement_spreads_reserves_pins_and_fails_with_the_right_reason() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    assert_eq!(
        place(&mut c, &mut [], start(1, 100)).await,
        Err(StartFailureReason::NoCn)
    );
    let mut a1 = agent(&pki, u(1), &s.addr, 1000).await;
    let mut a2 = agent(&pki, u(2), &s.addr, 1000).await;
    let mut a3 = agent(&pki, u(3), &s.addr, 1000).await;
    nodes_seen(&mut c, 3).await;
    let mut net = start(2, 1);
    net.requirements.network_node = true;
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], net).await,
        Err(StartFailureReason::NoNetCn)
    );
    // Spread: three identical STARTs over three identical nodes.
    let mut got = Vec::new();
    for i in 0..3 {
        got.push(
            place(&mut c, &mut [&mut a1, &mut a2, &mut a3], start(10 + i, 400))
                .await
                .unwrap(),
        );
    }
    got.sort();
    assert_eq!(got, vec![0, 1, 2]);
    // Reservation: each node has 600 MiB left, so a second round of 400 fits, a third does not.
    for i in 0..3 {
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], start(20 + i, 400))
            .await
            .unwrap();
    }
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], start(30, 400)).await,
        Err(StartFailureReason::FullCloud)
    );
    // A READY gives a node its room back.
    a2.send(&Payload::Ready(node_status(u(2), "host2", 1000)));
    let mut pinned = start(31, 100);
    pinned.requirements.node_id = Some(u(2));
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], pinned).await,
        Ok(1)
    );
    let mut by_host = start(32, 100);
    by_host.requirements.hostname = Some("host2".into());
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], by_host).await,
        Ok(1)
    );
    let mut unknown = start(33, 1);
    unknown.requirements.node_id = Some(u(0x99));
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], unknown).await,
        Err(StartFailureReason::FullCloud)
    );
    // FULL takes a node out.
    a2.send(&Payload::Full(None));
    let mut pinned = start(34, 1);
    pinned.requirements.node_id = Some(u(2));
    assert_eq!(
        place(&mut c, &mut [&mut a1, &mut a2, &mut a3], pinned).await,
        Err(StartFailureReason::FullCloud)
    );
    s.stop.cancel();
}

#[tokio::test]
async fn a_dual_role_node_takes_both_kinds_of_work() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut dual = peer(
        &pki,
        Role::DUAL,
        u(1),
        &s.addr,
        Some(node_status(u(1), "dual", 1000)),
    )
    .await;
    nodes_seen(&mut c, 2).await;
    let mut cnci = start(1, 600);
    cnci.requirements.network_node = true;
    assert_eq!(place(&mut c, &mut [&mut dual], cnci).await, Ok(0));
    // One account for both lists: 400 MiB left.
    assert_eq!(
        place(&mut c, &mut [&mut dual], start(2, 500)).await,
        Err(StartFailureReason::FullCloud)
    );
    assert_eq!(place(&mut c, &mut [&mut dual], start(3, 400)).await, Ok(0));
    s.stop.cancel();
}

#[tokio::test]
async fn frames_are_routed_by_role_and_address() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c1 = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut c2 = peer(&pki, Role::CONTROLLER, u(0xc2), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    let mut cnci = peer(&pki, Role::CNCIAGENT, u(0x20), &s.addr, None).await;
    nodes_seen(&mut c1, 1).await;
    nodes_seen(&mut c2, 1).await;
    // Agent → every controller: STATS, INSTANCE_DELETED, its failures.
    let Payload::Ready(node) = Payload::Ready(node_status(u(1), "host1", 1000)) else {
        unreachable!()
    };
    let stats = Payload::Stats(Box::new(Stats {
        node,
        status: NodeState::Ready,
        instances: vec![],
    }));
    let deleted = Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: u(7),
    });
    let failure = Payload::DeleteFailure(DeleteFailure {
        instance_uuid: u(8),
        node_uuid: Some(u(1)),
        reason: DeleteFailureReason::NoInstance,
    });
    for p in [&stats, &deleted, &failure] {
        a.send(p);
    }
    for c in [&mut c1, &mut c2] {
        for p in [&stats, &deleted, &failure] {
            let m = c.next_work().await;
            assert_eq!((&m.payload, m.frame.origin), (p, u(1)));
        }
    }
    // Controller → agent by workload_agent_uuid.
    let delete = Payload::Delete(Delete {
        instance_uuid: u(7),
        workload_agent_uuid: u(1),
        stop: false,
    });
    c1.send(&delete);
    assert_eq!(a.next_work().await.payload, delete);
    // Controller → CNCI by concentrator_uuid / cnci_uuid; CNCI → controllers.
    let refresh = Payload::RefreshCnci(RefreshCnci {
        cnci_uuid: u(0x20),
        cncis: vec![],
    });
    c2.send(&refresh);
    assert_eq!(cnci.next_work().await.payload, refresh);
    let added = Payload::ConcentratorInstanceAdded(ConcentratorAdded {
        instance_uuid: u(0x20),
        tenant_uuid: u(0x7e),
        concentrator_ip: "10.0.0.5".parse().unwrap(),
        concentrator_mac: "02:00:0a:00:00:05".parse().unwrap(),
    });
    cnci.send(&added);
    assert_eq!(c1.next_work().await.payload, added);
    assert_eq!(c2.next_work().await.payload, added);
    // A DELETE for a node that is not there, or for a CNCI (wrong role): DELIVERY_FAILURE.
    for target in [u(0x99), u(0x20)] {
        c1.send(&Payload::Delete(Delete {
            instance_uuid: u(7),
            workload_agent_uuid: target,
            stop: false,
        }));
        let m = c1.next_work().await;
        let Payload::DeliveryFailure(f) = m.payload else {
            panic!("{:?}", m.payload)
        };
        assert_eq!(
            (f.target_uuid, f.reason, m.frame.origin),
            (Some(target), DeliveryFailureReason::NodeUnavailable, SCHED)
        );
    }
    c1.send(&Payload::RefreshCnci(RefreshCnci {
        cnci_uuid: u(1),
        cncis: vec![],
    }));
    let Payload::DeliveryFailure(f) = c1.next_work().await.payload else {
        panic!()
    };
    assert_eq!(f.reason, DeliveryFailureReason::CnciUnavailable);
    // A malformed START: START_FAILURE invalid_payload to its sender.
    let mut bad = Frame::new(u(0xc1), &Payload::Heartbeat);
    bad.operand = Operand::Start;
    bad.payload = vec![0xa0].into();
    c1.handle.send(&bad).unwrap();
    let Payload::StartFailure(f) = c1.next_work().await.payload else {
        panic!()
    };
    assert_eq!(f.reason, StartFailureReason::InvalidPayload);
    s.stop.cancel();
}

#[tokio::test]
async fn controllers_learn_of_nodes_coming_and_going_and_catch_up_late() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut early = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let dual = peer(
        &pki,
        Role::DUAL,
        u(1),
        &s.addr,
        Some(node_status(u(1), "d", 100)),
    )
    .await;
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let m = early.next().await;
        let Payload::NodeConnected(e) = m.payload else {
            panic!()
        };
        assert_eq!((e.node_uuid, m.frame.origin), (u(1), SCHED));
        kinds.push(e.node_type);
    }
    assert_eq!(kinds, vec![NodeType::ComputeNode, NodeType::NetworkNode]);
    let _agent = agent(&pki, u(2), &s.addr, 100).await;
    let mut late = peer(&pki, Role::CONTROLLER, u(0xc2), &s.addr, None).await;
    let mut caught = Vec::new();
    for _ in 0..3 {
        let Payload::NodeConnected(e) = late.next().await.payload else {
            panic!()
        };
        caught.push((e.node_uuid, e.node_type));
    }
    caught.sort_by_key(|(u, t)| (*u, *t as u8));
    assert_eq!(
        caught,
        vec![
            (u(1), NodeType::ComputeNode),
            (u(1), NodeType::NetworkNode),
            (u(2), NodeType::ComputeNode)
        ]
    );
    dual.handle.close();
    for c in [&mut early, &mut late] {
        let mut gone = 0;
        while gone < 2 {
            if let Payload::NodeDisconnected(e) = c.next().await.payload {
                assert_eq!(e.node_uuid, u(1));
                gone += 1;
            }
        }
    }
    s.stop.cancel();
}

#[tokio::test]
async fn after_a_restart_the_scheduler_rebuilds_from_the_agents() {
    let pki = TestPki::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let s = scheduler(&pki, Some(listener)).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    nodes_seen(&mut c, 1).await;
    assert_eq!(place(&mut c, &mut [&mut a], start(1, 100)).await, Ok(0));
    s.stop.cancel();
    s.done.await.unwrap();
    let s = scheduler(
        &pki,
        Some(TcpListener::bind(("127.0.0.1", port)).await.unwrap()),
    )
    .await;
    // Both reconnect by themselves; the agent re-announces READY, the controller hears of it.
    nodes_seen(&mut c, 1).await;
    assert_eq!(place(&mut c, &mut [&mut a], start(2, 100)).await, Ok(0));
    s.stop.cancel();
}

#[tokio::test]
async fn an_agent_that_stops_reading_does_not_hold_up_the_others() {
    let pki = TestPki::new();
    let conn = ssntp_net::ConnConfig {
        queue_bytes: 32 << 10,
        ..Default::default()
    };
    let s = scheduler_with(&pki, None, conn).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    // The stuck agent: a raw peer that says CONNECT and READY, then never reads again.
    let mut stuck = testkit::RawPeer::connect(&s.addr, &pki.identity(Role::AGENT, Some(u(1))))
        .await
        .unwrap();
    stuck
        .send(&Frame::new(
            u(1),
            &Payload::Connect(Connect { role: Role::AGENT }),
        ))
        .await
        .unwrap();
    assert_eq!(stuck.recv(T).await.unwrap().operand, Operand::Connected);
    let roomy = |uuid, host: &str| NodeStatus {
        disk_total_mb: u32::MAX,
        disk_available_mb: u32::MAX,
        vcpus_total: u32::MAX,
        vcpus_available: u32::MAX,
        ..node_status(uuid, host, u32::MAX)
    };
    stuck
        .send(&Frame::new(u(1), &Payload::Ready(roomy(u(1), "stuck"))))
        .await
        .unwrap();
    let mut fine = peer(&pki, Role::AGENT, u(2), &s.addr, Some(roomy(u(2), "fine"))).await;
    nodes_seen(&mut c, 2).await;
    // Rotation sends every other START to the stuck agent. Once its queue (and the socket
    // buffers) are full, the STARTs it cannot take are placed on the other agent instead: the
    // healthy agent ends up with more than half, and the controller sees no failure.
    let got = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = got.clone();
    let mut events = std::mem::replace(&mut fine.events, mpsc::channel(1).1);
    let drain = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let ClientEvent::Frames(ms) = e {
                let n = ms
                    .iter()
                    .filter(|m| m.frame.operand == Operand::Start)
                    .count() as u32;
                counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    let mut sent: u32 = 0;
    loop {
        assert!(
            sent < 400_000,
            "STARTs the stuck agent could not take were never re-placed"
        );
        for _ in 0..5_000 {
            let mut st = start(0, 1);
            st.instance_uuid = Uuid::from_u128(u128::from(sent) + 1);
            c.handle
                .send_wait(&Frame::new(u(0xc1), &Payload::Start(Box::new(st))))
                .await
                .unwrap();
            sent += 1;
        }
        // Every START is accounted for on the healthy side, at least its half.
        let healthy =
            || std::future::ready(got.load(std::sync::atomic::Ordering::Relaxed) >= sent / 2);
        testkit::wait_until(T, "the healthy agent to keep up", healthy).await;
        if got.load(std::sync::atomic::Ordering::Relaxed) > sent / 2 {
            break;
        }
    }
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), c.events.recv()).await
    {
        if let ClientEvent::Frames(ms) = event {
            assert!(
                ms.iter().all(|m| !m.frame.operand.is_error()),
                "{:?}",
                ms[0].payload
            );
        }
    }
    drain.abort();
    s.stop.cancel();
}

#[tokio::test]
async fn configure_sets_what_later_connections_are_told() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let config = ClusterConfig {
        scheduler: Some(ssntp::payload::SchedulerConfig {
            stats_interval_s: Some(7),
        }),
        ..ClusterConfig::default()
    };
    let config = ClusterConfig {
        controller: Some(ControllerConfig {
            api_port: Some(8443),
            ..Default::default()
        }),
        ..config
    };
    c.send(&Payload::Configure(Box::new(config.clone())));
    // The scheduler keeps the STATS interval it enforces (5 s here): that is what is told.
    let config = ClusterConfig {
        scheduler: Some(ssntp::payload::SchedulerConfig {
            stats_interval_s: Some(5),
        }),
        ..config
    };
    // The next session to connect is told the new configuration in CONNECTED.
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let mut cfg = ClientConfig::new(
            pki.identity(Role::AGENT, Some(u(9))),
            u(9),
            Role::AGENT,
            vec![s.addr.clone()],
        );
        cfg.backoff.initial = Duration::from_millis(50);
        let (handle, mut events) = Client::start(cfg).unwrap();
        let told = loop {
            if let ClientEvent::Connected { cluster, .. } = recv_within(&mut events, T).await {
                break cluster;
            }
        };
        handle.close();
        if told == config {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "CONFIGURE never took effect"
        );
    }
    s.stop.cancel();
}

fn stats_of(node: NodeStatus) -> Payload {
    Payload::Stats(Box::new(Stats {
        node,
        status: NodeState::Ready,
        instances: vec![],
    }))
}

#[tokio::test]
async fn a_node_is_announced_before_the_stats_it_sends_after_its_first_status() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    // As an agent does on connect: its status, then its STATS at once.
    let status = node_status(u(1), "dual", 1000);
    let stats = stats_of(status.clone());
    let announce = vec![Payload::Ready(status), stats.clone()];
    let _dual = peer_announcing(&pki, Role::DUAL, u(1), &s.addr, announce).await;
    // A controller takes figures only from nodes it has heard of: the STATS must not overtake
    // the NODE_CONNECTED its status made, or the node has no figures for a whole interval.
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = c.next().await;
        got.push((m.frame.operand, m.frame.origin));
    }
    assert_eq!(
        got,
        vec![
            (Operand::NodeConnected, SCHED),
            (Operand::NodeConnected, SCHED),
            (Operand::Stats, u(1)),
        ]
    );
    s.stop.cancel();
}

#[tokio::test]
async fn a_late_controller_gets_each_nodes_latest_stats_after_its_node_connected() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut early = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    nodes_seen(&mut early, 1).await;
    let latest = Frame::new(u(1), &stats_of(node_status(u(1), "host1", 900)));
    a.send(&stats_of(node_status(u(1), "host1", 1000)));
    a.handle.send(&latest).unwrap();
    // Then FULL: once a START is refused for it, the scheduler has handled both STATS too.
    a.send(&Payload::Full(None));
    while place(&mut early, &mut [&mut a], start(1, 1)).await.is_ok() {}
    // A controller that connects now (a restarted one) hears of the node and gets its figures
    // at once, not a STATS interval later.
    let mut late = peer(&pki, Role::CONTROLLER, u(0xc2), &s.addr, None).await;
    let m = late.next().await;
    assert_eq!(
        (m.payload, m.frame.origin),
        (
            Payload::NodeConnected(NodeEvent {
                node_uuid: u(1),
                node_type: NodeType::ComputeNode
            }),
            SCHED
        )
    );
    assert_eq!(late.next().await.frame, latest, "as the agent sent it");
    s.stop.cancel();
}

/// An agent speaking raw frames (it sends no HEARTBEAT of its own), past CONNECT and READY.
async fn raw_agent(pki: &TestPki, addr: &str, uuid: Uuid) -> RawPeer {
    let mut p = RawPeer::connect(addr, &pki.identity(Role::AGENT, Some(uuid)))
        .await
        .unwrap();
    p.send(&Frame::new(
        uuid,
        &Payload::Connect(Connect { role: Role::AGENT }),
    ))
    .await
    .unwrap();
    assert_eq!(p.recv(T).await.unwrap().operand, Operand::Connected);
    let ready = Payload::Ready(node_status(uuid, "raw", 1000));
    p.send(&Frame::new(uuid, &ready)).await.unwrap();
    p
}

/// The next NODE_CONNECTED (`true`) or NODE_DISCONNECTED (`false`) a controller hears, and its
/// node.
async fn node_event(c: &mut Peer) -> (bool, Uuid) {
    loop {
        match c.next().await.payload {
            Payload::NodeConnected(e) => return (true, e.node_uuid),
            Payload::NodeDisconnected(e) => return (false, e.node_uuid),
            _ => {}
        }
    }
}

/// Issue 20: a node is lost only when nothing at all came from it for three STATS intervals;
/// HEARTBEATs, which the scheduler never hands to its cluster state, count.
#[tokio::test]
async fn heartbeats_alone_keep_a_node_and_three_silent_intervals_drop_one() {
    let pki = TestPki::new();
    let s = scheduler_tuned(&pki, None, |c| c.stats_interval = Duration::from_secs(1)).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut beating = raw_agent(&pki, &s.addr, u(1)).await;
    assert_eq!(node_event(&mut c).await, (true, u(1)));
    // From now on node 1 sends HEARTBEATs only, every quarter of a second.
    let beats = Arc::new(AtomicU32::new(0));
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (beats, stop) = (beats.clone(), stop.clone());
        async move {
            let heartbeat = Frame::new(u(1), &Payload::Heartbeat);
            let mut pace = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return beating,
                    _ = pace.tick() => {
                        beating.send(&heartbeat).await.unwrap();
                        beats.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });
    wait_until(T, "a second of HEARTBEATs", || {
        let beats = beats.clone();
        async move { beats.load(Ordering::Relaxed) >= 5 }
    })
    .await;
    // Node 2 falls silent after its READY: three intervals later it is dropped, and controllers
    // hear of it. Node 1 has sent nothing but HEARTBEATs for longer than that by then.
    let mut silent = raw_agent(&pki, &s.addr, u(2)).await;
    assert_eq!(node_event(&mut c).await, (true, u(2)));
    assert_eq!(node_event(&mut c).await, (false, u(2)));
    assert!(
        silent.closed_within(T).await,
        "the dropped node's session is closed"
    );
    stop.cancel();
    let mut beating = task.await.unwrap();
    // Node 1 is still there to place on.
    c.send(&Payload::Start(Box::new(start(9, 100))));
    loop {
        let f = beating
            .recv(T)
            .await
            .expect("the kept node's session is open");
        if f.operand == Operand::Start {
            break;
        }
    }
    // Silent from now on, it goes in turn.
    assert_eq!(node_event(&mut c).await, (false, u(1)));
    s.stop.cancel();
}
