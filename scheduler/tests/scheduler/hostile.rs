//! Hostile SSNTP peers against the scheduler (issue 12): slowloris handshakes, floods of
//! frames, maximum-size frames, operands the sender's role may not send, spoofed origins and
//! node UUIDs, reconnect storms. Each attack is checked for what the scheduler must do with it
//! (cut it at the deadline, answer it, drop it, never forward it), and
//! `honest_starts_keep_flowing_under_attack` measures the honest peers' START latency quiet and
//! with every attack running at once (figures printed, not asserted: `docs/reliability.md`).

use super::*;
use ssntp_net::TlsIdentity;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use testkit::RawPeer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The attacked scheduler's frame limit (small, so that maximum-size floods are quick).
const MAX_FRAME: u32 = 64 << 10;
/// The attacked scheduler's handshake deadline.
const HANDSHAKE: Duration = Duration::from_millis(500);

async fn attacked(pki: &TestPki) -> Sched {
    scheduler_tuned(pki, None, |c| {
        c.handshake.handshake_timeout = HANDSHAKE;
        c.handshake.session.max_frame = MAX_FRAME;
        // For the figures: the agents' read budget to measure the attacks against (the default
        // otherwise), e.g. `CUMULO_HOSTILE_AGENT_READ_RATE=512K/4M/512` or `off`.
        if let Ok(spec) = std::env::var("CUMULO_HOSTILE_AGENT_READ_RATE") {
            c.read_rates.set(&format!("agent={spec}")).unwrap();
        }
    })
    .await
}

fn port(s: &Sched) -> String {
    let (_, port) = s.addr.rsplit_once(':').unwrap();
    format!("127.0.0.1:{port}")
}

/// A raw peer past CONNECT / CONNECTED under `role` and `uuid`.
async fn raw(pki: &TestPki, addr: &str, role: Role, uuid: Uuid) -> RawPeer {
    raw_as(&pki.identity(role, Some(uuid)), addr, role, uuid).await
}

/// As [`raw`], with a certificate made beforehand.
async fn raw_as(identity: &TlsIdentity, addr: &str, role: Role, uuid: Uuid) -> RawPeer {
    let mut p = RawPeer::connect(addr, identity).await.unwrap();
    p.send(&Frame::new(uuid, &Payload::Connect(Connect { role })))
        .await
        .unwrap();
    assert_eq!(p.recv(T).await.unwrap().operand, Operand::Connected);
    p
}

/// The next frame that is not a HEARTBEAT (`None`: the connection closed).
async fn answer(p: &mut RawPeer) -> Option<Frame> {
    loop {
        let f = p.recv(T).await?;
        if f.operand != Operand::Heartbeat {
            return Some(f);
        }
    }
}

/// A frame with `operand` and `body` as they are, from `origin`.
fn forged(origin: Uuid, operand: Operand, body: Vec<u8>) -> Frame {
    let mut f = Frame::new(origin, &Payload::Heartbeat);
    f.operand = operand;
    f.payload = body.into();
    f
}

/// Whether the server closes a plain TCP connection within [`T`].
async fn tcp_closed(tcp: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + T;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

fn delete(instance: Uuid, node: Uuid) -> Payload {
    Payload::Delete(Delete {
        instance_uuid: instance,
        workload_agent_uuid: node,
        stop: false,
    })
}

#[tokio::test]
async fn slowloris_handshakes_are_cut_at_the_deadline() {
    let pki = TestPki::new();
    let s = attacked(&pki).await;
    // Part of a TLS record header, then nothing: TLS never completes.
    let mut stalled = Vec::new();
    for _ in 0..100 {
        let mut tcp = TcpStream::connect(port(&s)).await.unwrap();
        tcp.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
        stalled.push(tcp);
    }
    // A dribbler: a record header announcing 16 KiB, then one byte every 20 ms.
    let mut dribbler = TcpStream::connect(port(&s)).await.unwrap();
    dribbler
        .write_all(&[0x16, 0x03, 0x01, 0x40, 0x00])
        .await
        .unwrap();
    let dribbling = tokio::spawn(async move {
        let mut sent = 0u32;
        while dribbler.write_all(&[0]).await.is_ok() && sent < 10_000 {
            sent += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        sent
    });
    // TLS completed, then no CONNECT.
    let mut silent = Vec::new();
    for i in 0..20 {
        let id = pki.identity(Role::AGENT, Some(u(0x40 + i)));
        silent.push(RawPeer::connect(&s.addr, &id).await.unwrap());
    }
    // Honest peers connect and work meanwhile.
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    nodes_seen(&mut c, 1).await;
    assert_eq!(place(&mut c, &mut [&mut a], start(1, 10)).await, Ok(0));
    for tcp in &mut stalled {
        assert!(tcp_closed(tcp).await, "a stalled TLS handshake was kept");
    }
    for p in &mut silent {
        let f = answer(p)
            .await
            .expect("CONNECTION_FAILURE before the close");
        assert_eq!(f.operand, Operand::ConnectionFailure);
        assert!(
            p.closed_within(T).await,
            "a session without CONNECT was kept"
        );
    }
    let dribbled = tokio::time::timeout(T, dribbling).await.unwrap().unwrap();
    assert!(dribbled < 10_000, "the dribbler was never cut off");
    assert_eq!(place(&mut c, &mut [&mut a], start(2, 10)).await, Ok(0));
    s.stop.cancel();
}

#[tokio::test]
async fn a_hostile_session_is_answered_and_never_forwarded() {
    let pki = TestPki::new();
    let s = attacked(&pki).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    nodes_seen(&mut c, 1).await;
    let evil = u(0x66);
    let mut h = raw(&pki, &s.addr, Role::AGENT, evil).await;
    // Operands an agent may not send: answered with PROTOCOL_VIOLATION, never forwarded.
    let forbidden = [
        Payload::Start(Box::new(start(9, 1))),
        delete(u(9), u(1)),
        Payload::RefreshCnci(RefreshCnci {
            cnci_uuid: u(0x20),
            cncis: vec![],
        }),
    ];
    for p in &forbidden {
        h.send(&Frame::new(evil, p)).await.unwrap();
        let f = answer(&mut h).await.expect("an answer");
        assert_eq!(f.operand, Operand::ProtocolViolation, "{p:?}");
    }
    // Another node's UUID in READY / STATS: PROTOCOL_VIOLATION, the other node untouched.
    h.send(&Frame::new(
        evil,
        &Payload::Ready(node_status(u(1), "host1", 0)),
    ))
    .await
    .unwrap();
    assert_eq!(
        answer(&mut h).await.unwrap().operand,
        Operand::ProtocolViolation
    );
    // Another node's UUID as the origin of an event: PROTOCOL_VIOLATION, not forwarded.
    let spoofed = Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: u(9),
    });
    h.send(&Frame::new(u(1), &spoofed)).await.unwrap();
    assert_eq!(
        answer(&mut h).await.unwrap().operand,
        Operand::ProtocolViolation
    );
    // A frame of exactly the limit is read (and dropped: START from an agent); the session
    // stays. One byte more: PROTOCOL_VIOLATION, then the session is closed.
    let body = vec![0xa0; MAX_FRAME as usize];
    h.send(&forged(evil, Operand::Start, body)).await.unwrap();
    assert_eq!(
        answer(&mut h).await.unwrap().operand,
        Operand::ProtocolViolation
    );
    // The node is still placeable: its account was not changed by the spoofed READY.
    assert_eq!(place(&mut c, &mut [&mut a], start(3, 900)).await, Ok(0));
    let body = vec![0xa0; MAX_FRAME as usize + 1];
    h.send(&forged(evil, Operand::Start, body)).await.unwrap();
    assert_eq!(
        answer(&mut h).await.unwrap().operand,
        Operand::ProtocolViolation
    );
    assert!(
        h.closed_within(T).await,
        "an oversize frame left the session open"
    );
    // Nothing of it reached the honest peers: the honest agent's own event is the next thing
    // the controller sees (per-session order, and the hostile frames were handled first).
    let marker = Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: u(3),
    });
    a.send(&marker);
    let m = c.next_work().await;
    assert_eq!((m.payload, m.frame.origin), (marker, u(1)));
    s.stop.cancel();
}

#[tokio::test]
async fn a_reconnect_storm_leaves_one_session_per_uuid() {
    let pki = TestPki::new();
    let s = attacked(&pki).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    // The same agent UUID connecting 50 times in a row: each CONNECT replaces the last session.
    let mut last = None;
    for _ in 0..50 {
        let mut p = raw(&pki, &s.addr, Role::AGENT, u(0x70)).await;
        p.send(&Frame::new(
            u(0x70),
            &Payload::Ready(node_status(u(0x70), "storm", 1000)),
        ))
        .await
        .unwrap();
        if let Some(mut old) = last.replace(p) {
            let f = answer(&mut old).await;
            assert!(
                f.as_ref()
                    .is_none_or(|f| f.operand == Operand::ConnectionAborted),
                "{f:?}"
            );
        }
    }
    // 100 more connect and vanish without a word.
    for i in 0..100u8 {
        drop(
            raw(
                &pki,
                &s.addr,
                Role::AGENT,
                Uuid::from_u128(0x7100 + u128::from(i)),
            )
            .await,
        );
    }
    // What stays: the storm's last session, placeable, and an honest agent besides.
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    let mut pinned = start(5, 10);
    pinned.requirements.node_id = Some(u(1));
    assert_eq!(place(&mut c, &mut [&mut a], pinned).await, Ok(0));
    let mut storm = last.unwrap();
    let mut pinned = start(6, 10);
    pinned.requirements.node_id = Some(u(0x70));
    c.send(&Payload::Start(Box::new(pinned)));
    let f = answer(&mut storm).await.expect("the START");
    assert_eq!(f.operand, Operand::Start);
    s.stop.cancel();
}

/// What the honest side sees: STARTs reaching the honest agents (`arrived`, from their drains)
/// and START_FAILUREs reaching the controller (`failed`, from its watcher).
struct Honest {
    arrived: mpsc::UnboundedReceiver<(Uuid, Instant)>,
    failed: mpsc::UnboundedReceiver<StartFailure>,
}

impl Honest {
    /// Where the START for `instance` went: the time an honest agent had it, or the failure.
    async fn outcome(&mut self, instance: Uuid) -> Result<Instant, StartFailureReason> {
        let got = tokio::time::timeout(T, async {
            tokio::select! {
                a = self.arrived.recv() => a.map(Ok),
                f = self.failed.recv() => f.map(Err),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to START {instance} within {T:?}"))
        .expect("the honest side's channels stay open");
        match got {
            Ok((uuid, at)) => {
                assert_eq!(uuid, instance, "STARTs arrive in order, none lost");
                Ok(at)
            }
            Err(f) => {
                assert_eq!(f.instance_uuid, instance, "the failure is this START's");
                Err(f.reason)
            }
        }
    }

    /// Waits until each honest agent in `nodes` takes a START pinned to it: the scheduler
    /// announces a node when it connects, and places on it once its READY is in, so until then a
    /// START meets `full_cloud` and is tried again.
    async fn placeable(&mut self, c: &Peer, nodes: &[Uuid]) {
        let deadline = Instant::now() + T;
        let mut probe = 0xf000u128;
        for node in nodes {
            loop {
                probe += 1;
                let mut st = start(0, 1);
                st.instance_uuid = Uuid::from_u128(probe);
                st.requirements.node_id = Some(*node);
                c.send(&Payload::Start(Box::new(st)));
                match self.outcome(Uuid::from_u128(probe)).await {
                    Ok(_) => break,
                    Err(StartFailureReason::FullCloud) => {
                        assert!(Instant::now() < deadline, "{node} never became placeable");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(other) => panic!("a probe START failed: {other:?}"),
                }
            }
        }
    }

    /// Latency of STARTs sent one after the other by `c` (at least `n`, for at least `min`),
    /// each timed until an honest agent has it; none may fail.
    async fn start_latencies(
        &mut self,
        c: &Peer,
        first: u128,
        n: u128,
        min: Duration,
    ) -> Vec<Duration> {
        let mut out = Vec::new();
        let began = Instant::now();
        for i in first.. {
            if i >= first + n && began.elapsed() >= min {
                break;
            }
            let mut st = start(0, 1);
            st.instance_uuid = Uuid::from_u128(i);
            let sent = Instant::now();
            c.send(&Payload::Start(Box::new(st)));
            match self.outcome(Uuid::from_u128(i)).await {
                Ok(at) => out.push(at - sent),
                Err(reason) => panic!("an honest START failed: {reason:?}"),
            }
        }
        out.sort();
        out
    }
}

fn pct(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// The attacks [`attack`] can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// STARTs from an agent session that never reads its answers.
    Forbidden,
    /// Frames of the maximum size.
    MaxSize,
    /// HEARTBEATs as fast as they go.
    Heartbeats,
    /// Events with another node's origin.
    Spoofed,
    /// Connect (TLS and CONNECT) and drop, over and over, 16 UUIDs.
    Storm,
    /// 200 half-open TLS handshakes, reopened as the server cuts them.
    Slowloris,
}

const ALL: [Kind; 6] = [
    Kind::Forbidden,
    Kind::MaxSize,
    Kind::Heartbeats,
    Kind::Spoofed,
    Kind::Storm,
    Kind::Slowloris,
];

/// Makes a flood's frame from the flooder's UUID.
type MakeFrame = fn(Uuid) -> Frame;

/// The attackers' runtime: two threads at nice 19 (`CUMULO_ATTACKER_NICE` to change it). On
/// this 2-core machine they stand in for other machines: at the same priority their own TLS and
/// encryption work would take the CPU the scheduler needs, which real remote attackers do not.
fn attackers_runtime() -> tokio::runtime::Runtime {
    let nice = std::env::var("CUMULO_ATTACKER_NICE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(19);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(move || {
            if nice != 0 {
                let _ = support::thread::nice_this_thread(nice);
            }
        })
        .enable_all()
        .build()
        .unwrap()
}

/// The `kinds` of attack at once on `rt`, for as long as `stop` is false. Returns the
/// attackers' tasks.
fn attack(
    rt: &tokio::runtime::Handle,
    pki: &TestPki,
    s: &Sched,
    kinds: &[Kind],
    stop: Arc<AtomicBool>,
    (frames, connects): (Arc<AtomicU64>, Arc<AtomicU64>),
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    // Floods from sessions that never read: forbidden STARTs, maximum-size frames, HEARTBEATs,
    // spoofed events.
    let floods: [(Kind, u8, MakeFrame); 4] = [
        (Kind::Forbidden, 0x81, |o| {
            Frame::new(o, &Payload::Start(Box::new(start(9, 1))))
        }),
        (Kind::MaxSize, 0x82, |o| {
            forged(o, Operand::Start, vec![0xa0; MAX_FRAME as usize])
        }),
        (Kind::Heartbeats, 0x83, |o| {
            Frame::new(o, &Payload::Heartbeat)
        }),
        (Kind::Spoofed, 0x84, |_| {
            Frame::new(
                u(1),
                &Payload::InstanceDeleted(InstanceEvent {
                    instance_uuid: u(9),
                }),
            )
        }),
    ];
    for (kind, id, make) in floods {
        if !kinds.contains(&kind) {
            continue;
        }
        let identity = pki.identity(Role::AGENT, Some(u(id)));
        let (addr, stop, frames) = (s.addr.clone(), stop.clone(), frames.clone());
        tasks.push(rt.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut p = raw_as(&identity, &addr, Role::AGENT, u(id)).await;
                let frame = make(u(id));
                while !stop.load(Ordering::Relaxed) && p.send(&frame).await.is_ok() {
                    frames.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    if kinds.contains(&Kind::Storm) {
        tasks.push(storm(rt, pki, s, stop.clone(), connects));
    }
    if kinds.contains(&Kind::Slowloris) {
        tasks.push(slowloris(rt, s, stop));
    }
    tasks
}

/// A reconnect storm over 16 UUIDs.
fn storm(
    rt: &tokio::runtime::Handle,
    pki: &TestPki,
    s: &Sched,
    stop: Arc<AtomicBool>,
    connects: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let storm: Vec<(Uuid, TlsIdentity)> = (0..16u128)
        .map(|i| {
            let uuid = Uuid::from_u128(0x9000 + i);
            (uuid, pki.identity(Role::AGENT, Some(uuid)))
        })
        .collect();
    let addr = s.addr.clone();
    let rt2 = rt.clone();
    rt.spawn(async move {
        // Four loops at once, each over its quarter of the UUIDs.
        let loops: Vec<_> = storm
            .chunks(4)
            .map(|quarter| {
                let (quarter, addr) = (quarter.to_vec(), addr.clone());
                let (stop, connects) = (stop.clone(), connects.clone());
                rt2.spawn(async move {
                    for (uuid, identity) in quarter.iter().cycle() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let Ok(mut p) = RawPeer::connect(&addr, identity).await else {
                            continue;
                        };
                        let connect =
                            Frame::new(*uuid, &Payload::Connect(Connect { role: Role::AGENT }));
                        if p.send(&connect).await.is_ok() && p.recv(T).await.is_some() {
                            connects.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for l in loops {
            let _ = l.await;
        }
    })
}

/// Slowloris: 200 half-open TLS handshakes, reopened as the server cuts them.
fn slowloris(
    rt: &tokio::runtime::Handle,
    s: &Sched,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let addr = port(s);
    rt.spawn(async move {
        let mut open = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            open.retain(|t: &tokio::task::JoinHandle<()>| !t.is_finished());
            while open.len() < 200 {
                let addr = addr.clone();
                open.push(tokio::spawn(async move {
                    if let Ok(mut tcp) = TcpStream::connect(addr).await {
                        let _ = tcp.write_all(&[0x16, 0x03]).await;
                        tcp_closed(&mut tcp).await;
                    }
                }));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for t in open {
            t.abort();
        }
    })
}

/// Honest START latencies quiet and under the `kinds` of attack at once (at least `n` STARTs
/// each, under attack for at least `min`); printed.
async fn under_attack(n: u128, min: Duration, kinds: &[Kind]) {
    let pki = TestPki::new();
    let s = attacked(&pki).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let roomy = |uuid| NodeStatus {
        disk_total_mb: u32::MAX,
        disk_available_mb: u32::MAX,
        vcpus_total: u32::MAX,
        vcpus_available: u32::MAX,
        ..node_status(uuid, "honest", u32::MAX)
    };
    let (tx, arrived) = mpsc::unbounded_channel();
    for id in [1, 2] {
        let mut a = peer(&pki, Role::AGENT, u(id), &s.addr, Some(roomy(u(id)))).await;
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(e) = a.events.recv().await {
                if let ClientEvent::Frames { messages: ms, .. } = e {
                    for m in ms {
                        if let Payload::Start(st) = m.payload {
                            let _ = tx.send((st.instance_uuid, Instant::now()));
                        }
                    }
                }
            }
        });
    }
    nodes_seen(&mut c, 2).await;
    // The controller's own events, counted: a spoofed event reaching it is a failure.
    let spoofed = Arc::new(AtomicU64::new(0));
    let mut events = std::mem::replace(&mut c.events, mpsc::channel(1).1);
    let seen = spoofed.clone();
    let (failures, failed) = mpsc::unbounded_channel();
    let watch = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let ClientEvent::Frames { messages: ms, .. } = e {
                for m in &ms {
                    if let Payload::StartFailure(f) = &m.payload {
                        let _ = failures.send(f.clone());
                    }
                }
                let n = ms
                    .iter()
                    .filter(|m| m.frame.operand == Operand::InstanceDeleted)
                    .count();
                seen.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    });
    let mut honest = Honest { arrived, failed };
    honest.placeable(&c, &[u(1), u(2)]).await;
    let quiet = honest.start_latencies(&c, 1, n, Duration::ZERO).await;
    let stop = Arc::new(AtomicBool::new(false));
    let frames = Arc::new(AtomicU64::new(0));
    let rt = attackers_runtime();
    let connects = Arc::new(AtomicU64::new(0));
    let counters = (frames.clone(), connects.clone());
    let attackers = attack(rt.handle(), &pki, &s, kinds, stop.clone(), counters);
    // Let the floods get going before timing.
    let flooding = kinds.iter().any(|k| {
        matches!(
            k,
            Kind::Forbidden | Kind::MaxSize | Kind::Heartbeats | Kind::Spoofed
        )
    });
    testkit::wait_until(T, "the floods to start", || {
        std::future::ready(!flooding || frames.load(Ordering::Relaxed) > 100)
    })
    .await;
    let began = Instant::now();
    let loud = honest.start_latencies(&c, 1_000_000, n, min).await;
    let hostile = frames.load(Ordering::Relaxed);
    let reconnects = connects.load(Ordering::Relaxed);
    let secs = began.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in attackers {
        t.abort();
    }
    rt.shutdown_background();
    eprintln!(
        "{kinds:?}: honest START latency over {n}: quiet p50 {:?} p99 {:?}; under attack p50 {:?} p99 {:?} \
         (p99 ratio {:.2}); {hostile} hostile frames, {:.0}/s; {reconnects} reconnects, {:.0}/s",
        pct(&quiet, 50),
        pct(&quiet, 99),
        pct(&loud, 50),
        pct(&loud, 99),
        pct(&loud, 99).as_secs_f64() / pct(&quiet, 99).as_secs_f64(),
        hostile as f64 / secs,
        reconnects as f64 / secs,
    );
    assert_eq!(
        spoofed.load(Ordering::Relaxed),
        0,
        "a spoofed event was forwarded"
    );
    watch.abort();
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_starts_keep_flowing_under_attack() {
    under_attack(200, Duration::ZERO, &ALL).await;
}

/// The figure for `docs/reliability.md`: `cargo test -p scheduler --test scheduler --release
/// hostile_figures -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand"]
async fn hostile_figures() {
    let min = Duration::from_secs(5);
    for kind in ALL {
        under_attack(2_000, min, &[kind]).await;
    }
    under_attack(2_000, min, &ALL).await;
}
