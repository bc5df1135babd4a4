//! Helpers for the over-SSNTP tests: certificates and arguments, the daemon in process or as
//! the real binary, the real or a fake scheduler, a fake controller.
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

pub(crate) use ::support::identity::IdentityError;
pub(crate) use agent::backend::Backend;
pub(crate) use agent::daemon::cli::Args;
pub(crate) use agent::daemon::{self, DaemonConfig, DaemonError};
pub(crate) use agent::sim::{self, SimBackend, SimConfig};
pub(crate) use agent::wire;
pub(crate) use clap::Parser;
pub(crate) use scheduler::SchedulerConfig;
pub(crate) use scheduler::testing::InProcess;
pub(crate) use ssntp::frame::Frame;
pub(crate) use ssntp::payload::{
    AttachVolume, AttachVolumeFailureReason, Delete, DeleteFailureReason, FwType, InstanceState,
    NodeCommand, NodeState, Requirements, Start, StartFailure, StartFailureReason, Stats, VmType,
};
pub(crate) use ssntp::session::Message;
pub(crate) use ssntp::{Operand, Payload, Role, Uuid};
pub(crate) use ssntp_net::client::Backoff;
pub(crate) use ssntp_net::{
    Client, ClientConfig, ClientEvent, ClientHandle, Server, ServerConfig, ServerEvent,
    ServerHandle,
};
pub(crate) use std::collections::{BTreeMap, VecDeque};
pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::process::{Child, Command, Stdio};
pub(crate) use std::time::Duration;
pub(crate) use testkit::TestPki;
pub(crate) use tokio::net::TcpListener;
pub(crate) use tokio::sync::mpsc;
pub(crate) use tokio::task::JoinHandle;
pub(crate) use tokio::time::Instant;
pub(crate) use tokio_util::sync::CancellationToken;

/// The deadline of every wait (generous: two cores shared with builds).
pub(crate) const T: Duration = Duration::from_secs(30);
pub(crate) const SCHED: Uuid = Uuid::from_bytes([0x5c; 16]);
pub(crate) const CONTROLLER: Uuid = Uuid::from_bytes([0xc1; 16]);

pub(crate) fn u(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

// ---- the agent -------------------------------------------------------------------------------

/// An agent's certificate files.
pub(crate) struct Files {
    pub(crate) ca: PathBuf,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

pub(crate) fn agent_files(pki: &TestPki, roles: Role, uuid: Option<Uuid>, dir: &Path) -> Files {
    let (ca, cert, key) = pki.leaf(roles, uuid).write(dir, "agent");
    Files { ca, cert, key }
}

/// The agent's command line: sim backend, no disk or memory watermarks (the build machine's
/// free disk is below ciao's 80 GB), 64 vCPUs, and `extra`.
pub(crate) fn argv(
    files: &Files,
    scheduler: &str,
    state: &Path,
    network: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut argv: Vec<String> = [
        "--ca-cert",
        files.ca.to_str().unwrap(),
        "--cert",
        files.cert.to_str().unwrap(),
        "--key",
        files.key.to_str().unwrap(),
        "--scheduler",
        scheduler,
        "--network",
        network,
        "--backend",
        "sim",
        "--state-dir",
        state.to_str().unwrap(),
        "--no-disk-limit",
        "--no-mem-limit",
        "--vcpus",
        "64",
        // The node endpoint is tested on its own (`daemon::console`); agents of these tests
        // run in parallel and would all want its one port.
        "--console-listen",
        "off",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv
}

/// The daemon's configuration from that command line, reconnecting quickly.
pub(crate) fn config(files: &Files, scheduler: &str, state: &Path, extra: &[&str]) -> DaemonConfig {
    let mut args = vec!["cumulo-agent".to_string()];
    args.extend(argv(files, scheduler, state, "cn", extra));
    let mut config = Args::try_parse_from(args).unwrap().into_config().unwrap();
    config.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(300),
    };
    config
}

/// An agent running in this process.
pub(crate) struct Agent {
    pub(crate) stop: CancellationToken,
    pub(crate) done: JoinHandle<Result<(), DaemonError>>,
}

pub(crate) fn start_agent(config: DaemonConfig) -> Agent {
    let stop = CancellationToken::new();
    let token = stop.clone();
    let done = tokio::spawn(async move {
        let deadline = Instant::now() + T;
        loop {
            match daemon::run(config.clone(), token.clone()).await {
                // A restart in this process: the previous run closed its lock file, but a child
                // that another test forked meanwhile (to run the binary) holds a copy of the
                // descriptor, and so the lock, until it execs. Separate agent processes never
                // see this: the kernel releases a lock when its holder exits.
                Err(DaemonError::Locked(_))
                | Err(DaemonError::Identity(IdentityError::Locked(_)))
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                ended => {
                    if let Err(e) = &ended {
                        // Shown with the failing test's output: the wait that times out next
                        // says what the test expected.
                        eprintln!("the agent stopped: {e}");
                    }
                    return ended;
                }
            }
        }
    });
    Agent { stop, done }
}

impl Agent {
    /// Stops it as SIGTERM would, and checks that it stopped cleanly.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(T, self.done)
            .await
            .expect("the agent stops in time")
            .unwrap()
            .unwrap();
    }
}

pub(crate) fn start(instance: Uuid, image: &str) -> Start {
    Start {
        instance_uuid: instance,
        tenant_uuid: u(0x7e),
        workload_uuid: u(0x3a),
        vm_type: VmType::Sim,
        fw_type: FwType::Legacy,
        image: image.into(),
        requirements: Requirements {
            vcpus: 1,
            mem_mb: 64,
            disk_mb: 100,
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

pub(crate) fn start_payload(s: Start) -> Payload {
    Payload::Start(Box::new(s))
}

pub(crate) fn delete(instance: Uuid, node: Uuid, stop: bool) -> Payload {
    Payload::Delete(Delete {
        instance_uuid: instance,
        workload_agent_uuid: node,
        stop,
    })
}

pub(crate) fn node_command(node: Uuid) -> NodeCommand {
    NodeCommand {
        workload_agent_uuid: node,
    }
}

/// STATS from `node`, if `m` is one.
pub(crate) fn stats_from(m: &Message, node: Uuid) -> Option<&Stats> {
    match &m.payload {
        Payload::Stats(s) if m.frame.origin == node && s.node.node_uuid == node => Some(s),
        _ => None,
    }
}

pub(crate) fn state_in(stats: &Stats, instance: Uuid) -> Option<InstanceState> {
    stats
        .instances
        .iter()
        .find(|i| i.instance_uuid == instance)
        .map(|i| i.state)
}

pub(crate) fn all_active(stats: &Stats, instances: &[Uuid]) -> bool {
    instances
        .iter()
        .all(|i| state_in(stats, *i) == Some(InstanceState::Active))
}

/// A START_FAILURE from `node`, if `m` is one.
pub(crate) fn start_failure(m: &Message, node: Uuid) -> Option<StartFailure> {
    match &m.payload {
        Payload::StartFailure(f) if m.frame.origin == node => Some(f.clone()),
        _ => None,
    }
}

pub(crate) fn event_from(m: &Message, node: Uuid, operand: Operand, instance: Uuid) -> bool {
    let about = match &m.payload {
        Payload::InstanceDeleted(e) | Payload::InstanceStopped(e) => e.instance_uuid,
        _ => return false,
    };
    m.frame.origin == node && m.frame.operand == operand && about == instance
}

/// Whether a message describes the node as it is now (STATS, a status): a newer one makes it
/// stale.
pub(crate) fn is_snapshot(m: &Message) -> bool {
    matches!(
        m.payload,
        Payload::Stats(_) | Payload::Ready(_) | Payload::Full(_) | Payload::Maintenance(_)
    )
}

/// Takes the first item of `queue` that `check` picks. The items before it that are snapshots
/// are dropped (a wait for a state sees only what comes after the last thing taken); the
/// others (events, failures: one answer each, in any order across instances) stay queued for
/// later waits.
pub(crate) fn take<T, R>(
    queue: &mut VecDeque<T>,
    snapshot: impl Fn(&T) -> bool,
    check: &mut impl FnMut(&T) -> Option<R>,
) -> Option<R> {
    let mut kept = VecDeque::new();
    let mut found = None;
    while let Some(item) = queue.pop_front() {
        if let Some(r) = check(&item) {
            found = Some(r);
            break;
        }
        if !snapshot(&item) {
            kept.push_back(item);
        }
    }
    kept.append(queue);
    *queue = kept;
    found
}

// ---- the real scheduler and a fake controller ------------------------------------------------

pub(crate) struct Sched {
    pub(crate) addr: String,
    pub(crate) stop: CancellationToken,
}

pub(crate) async fn real_scheduler(pki: &TestPki) -> Sched {
    let config = SchedulerConfig::for_tests(pki.identity(Role::SCHEDULER, Some(SCHED)), SCHED);
    let s = InProcess::start(config, None).await;
    Sched {
        addr: s.addr,
        stop: s.stop,
    }
}

/// A controller: an SSNTP client that keeps what it receives.
pub(crate) struct Controller {
    pub(crate) handle: ClientHandle,
    pub(crate) events: mpsc::Receiver<ClientEvent>,
    pub(crate) pending: VecDeque<Message>,
}

pub(crate) async fn controller(pki: &TestPki, addr: &str) -> Controller {
    let config = ClientConfig::new(
        pki.identity(Role::CONTROLLER, Some(CONTROLLER)),
        CONTROLLER,
        Role::CONTROLLER,
        vec![addr.to_string()],
    );
    let (handle, mut events) = Client::start(config).unwrap();
    let deadline = Instant::now() + T;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(ClientEvent::Connected { .. })) => break,
            Ok(Some(ClientEvent::Stopped(e))) => panic!("controller stopped: {e}"),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => panic!("the controller did not connect"),
        }
    }
    Controller {
        handle,
        events,
        pending: VecDeque::new(),
    }
}

impl Controller {
    pub(crate) fn send(&self, p: &Payload) {
        self.handle.send_payload(p).unwrap();
    }

    /// Receives until `check` picks a message, within [`T`] ([`take`] says what becomes of the
    /// ones passed over).
    pub(crate) async fn expect<R>(
        &mut self,
        what: &str,
        check: impl FnMut(&Message) -> Option<R>,
    ) -> R {
        self.expect_within(T, what, check).await
    }

    /// As [`Controller::expect`], within `within`.
    pub(crate) async fn expect_within<R>(
        &mut self,
        within: Duration,
        what: &str,
        mut check: impl FnMut(&Message) -> Option<R>,
    ) -> R {
        let deadline = Instant::now() + within;
        loop {
            if let Some(found) = take(&mut self.pending, is_snapshot, &mut check) {
                return found;
            }
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(ClientEvent::Frames { messages: ms, .. })) => self.pending.extend(ms),
                Ok(Some(ClientEvent::Stopped(e))) => panic!("controller stopped: {e}"),
                Ok(Some(_)) => {}
                Ok(None) => panic!("the controller's client ended"),
                Err(_) => panic!("timed out after {within:?} waiting for {what}"),
            }
        }
    }

    /// Receives until a STATS from `node` satisfies `check`.
    pub(crate) async fn stats(
        &mut self,
        node: Uuid,
        what: &str,
        check: impl Fn(&Stats) -> bool,
    ) -> Stats {
        self.expect(what, |m| stats_from(m, node).filter(|s| check(s)).cloned())
            .await
    }
}

/// A tenant instance's START with `net`, pinned to `node` and sent by `c`: the sim instance of
/// `start(instance, "debian")`.
pub(crate) fn pinned_start(
    instance: Uuid,
    node: Uuid,
    tenant: Uuid,
    net: ssntp::payload::Networking,
) -> Payload {
    let mut s = start(instance, "debian");
    s.tenant_uuid = tenant;
    s.requirements.node_id = Some(node);
    s.networking = Some(net);
    start_payload(s)
}

/// Sends [`pinned_start`] and waits until `node`'s STATS show the instance active.
pub(crate) async fn start_active(
    c: &mut Controller,
    instance: Uuid,
    node: Uuid,
    tenant: Uuid,
    net: ssntp::payload::Networking,
) {
    c.send(&pinned_start(instance, node, tenant, net));
    c.stats(node, "active", |s| {
        state_in(s, instance) == Some(InstanceState::Active)
    })
    .await;
}

// ---- a fake scheduler --------------------------------------------------------------------------

/// What a fake scheduler sees.
pub(crate) enum Seen {
    Connected(Uuid),
    Message(Message),
}

/// An SSNTP server standing in for the scheduler: the test talks to the agent directly.
pub(crate) struct Fake {
    pub(crate) handle: ServerHandle,
    pub(crate) events: mpsc::Receiver<ServerEvent>,
    pub(crate) seen: VecDeque<Seen>,
    pub(crate) stop: CancellationToken,
    pub(crate) done: JoinHandle<()>,
}

pub(crate) async fn fake_scheduler(pki: &TestPki, listener: TcpListener) -> Fake {
    let config = ServerConfig::new(pki.identity(Role::SCHEDULER, Some(SCHED)), SCHED);
    let (server, handle, events) = Server::new(config).unwrap();
    let stop = CancellationToken::new();
    let done = tokio::spawn(server.run(listener, stop.clone()));
    Fake {
        handle,
        events,
        seen: VecDeque::new(),
        stop,
        done,
    }
}

impl Fake {
    pub(crate) fn send(&self, to: Uuid, p: &Payload) {
        self.handle.send_payload(to, p).unwrap();
    }

    /// Receives until `check` picks something, within [`T`] ([`take`] says what becomes of
    /// what it passes over; a connect is a snapshot).
    pub(crate) async fn expect<R>(
        &mut self,
        what: &str,
        mut check: impl FnMut(&Seen) -> Option<R>,
    ) -> R {
        let deadline = Instant::now() + T;
        loop {
            let snapshot = |s: &Seen| match s {
                Seen::Connected(_) => true,
                Seen::Message(m) => is_snapshot(m),
            };
            if let Some(found) = take(&mut self.seen, snapshot, &mut check) {
                return found;
            }
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(ServerEvent::Connected { uuid, .. })) => {
                    self.seen.push_back(Seen::Connected(uuid))
                }
                Ok(Some(ServerEvent::Frames { messages, .. })) => {
                    self.seen.extend(messages.into_iter().map(Seen::Message))
                }
                Ok(Some(ServerEvent::Views { frames, .. })) => self.seen.extend(
                    frames
                        .iter()
                        .map(|f| Seen::Message(f.to_message().expect("a frame that passed"))),
                ),
                Ok(Some(ServerEvent::Disconnected { .. })) => {}
                Ok(None) => panic!("the fake scheduler ended"),
                Err(_) => panic!("timed out after {T:?} waiting for {what}"),
            }
        }
    }

    /// The next message, whatever it is.
    pub(crate) async fn next_message(&mut self) -> Message {
        self.expect("a message", |s| match s {
            Seen::Message(m) => Some(m.clone()),
            Seen::Connected(_) => None,
        })
        .await
    }

    pub(crate) async fn stats(
        &mut self,
        node: Uuid,
        what: &str,
        check: impl Fn(&Stats) -> bool,
    ) -> Stats {
        self.expect(what, |s| match s {
            Seen::Message(m) => stats_from(m, node).filter(|s| check(s)).cloned(),
            Seen::Connected(_) => None,
        })
        .await
    }

    pub(crate) async fn message(
        &mut self,
        what: &str,
        check: impl Fn(&Message) -> bool,
    ) -> Message {
        self.expect(what, |s| match s {
            Seen::Message(m) if check(m) => Some(m.clone()),
            _ => None,
        })
        .await
    }

    pub(crate) async fn shut(self) {
        self.stop.cancel();
        tokio::time::timeout(T, self.done).await.unwrap().unwrap();
    }
}

// ---- the binary --------------------------------------------------------------------------------

/// An agent process; killed (SIGKILL) and reaped when dropped, so that a failing test leaves
/// no agent behind.
pub(crate) struct Process(pub(crate) Child);

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl Process {
    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.0);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Waits (polling, within [`T`]) for it to exit; its exit code.
    pub(crate) async fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + T;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the agent did not exit in time");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

pub(crate) fn agent_binary(args: &[String], log: &Path) -> Process {
    let child = Command::new(env!("CARGO_BIN_EXE_cumulo-agent"))
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Process(child)
}

/// Runs the binary to its end; its exit code and stderr.
pub(crate) fn run_binary(args: &[String]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cumulo-agent"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

// ---- tests -------------------------------------------------------------------------------------
