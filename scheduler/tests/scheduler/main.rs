//! cumulo-scheduler over real SSNTP: fake agents and controllers (ssntp clients with test
//! certificates) against the scheduler on loopback. Every wait has a deadline.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use scheduler::SchedulerConfig;
use scheduler::testing::InProcess;
use ssntp::frame::Frame;
use ssntp::payload::*;
use ssntp::session::Message;
use ssntp::{Operand, Payload, Role, Uuid};
use ssntp_net::{Client, ClientConfig, ClientEvent, ClientHandle};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use testkit::{RawPeer, TestPki, recv_within, wait_until};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod announcements;
mod hostile;
mod placement;
mod routing;

const T: Duration = Duration::from_secs(10);
const SCHED: Uuid = Uuid::from_bytes([0x5c; 16]);

fn u(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

struct Sched {
    addr: String,
    stop: CancellationToken,
    done: tokio::task::JoinHandle<Result<(), scheduler::SchedulerError>>,
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
    let mut config = SchedulerConfig::for_tests(pki.identity(Role::SCHEDULER, Some(SCHED)), SCHED);
    tune(&mut config);
    let s = InProcess::start(config, listener).await;
    Sched {
        addr: s.addr,
        stop: s.stop,
        done: s.done,
    }
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
                ClientEvent::Frames { messages: ms, .. } => self.pending.extend(ms),
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
                ClientEvent::Frames { messages: ms, .. } => self.pending.extend(ms),
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
        zone: None,
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
            if let Ok(Some(ClientEvent::Frames { messages: ms, .. })) =
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
        if let Ok(Some(ClientEvent::Frames { messages: ms, .. })) =
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
