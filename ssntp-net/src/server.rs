//! The SSNTP server: accepts TLS connections, runs the handshake, keeps a registry of sessions,
//! forwards frames by rule, and hands the application a bounded stream of typed events.

use bytes::BytesMut;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::conn::{self, ConnConfig, Dispatch, FirstFrame, Outbox, ReadRate, SendError};
use super::forward::{Directory, Route, Routes};
use super::handshaker::{Handshaker, HandshakerConfig, Rehomed};
use super::tls::{self, TlsError, TlsIdentity};
use ssntp::Role;
use ssntp::frame::Frame;
use ssntp::handshake::{
    HandshakeConfig, PeerCertificate, ServerAccepted, ServerHandshake, UuidBinding,
};
use ssntp::payload::{ClusterConfig, DeliveryFailure, DeliveryFailureReason, Payload, Reason};
use ssntp::session::{Message, Session};

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// CA, certificate and key.
    pub tls: TlsIdentity,
    /// Our UUID (the one bound in our certificate, when it binds one).
    pub uuid: Uuid,
    /// The cluster configuration sent in CONNECTED (changed later with
    /// [`ServerHandle::set_cluster`]).
    pub cluster: ClusterConfig,
    /// Handshake and session limits.
    pub handshake: HandshakeConfig,
    /// Per-connection limits.
    pub conn: ConnConfig,
    /// Connections beyond this many are closed at once (default 16,384).
    pub max_connections: usize,
    /// Events queued for the application before readers wait (default 8,192).
    pub event_queue: usize,
    /// How long a shutdown waits for sessions to drain (default 3 s).
    pub grace: Duration,
    /// Forwarding rules.
    pub routes: Routes,
    /// The read budget of every session but a controller's (default [`ReadRate::default`];
    /// `None`: unlimited).
    pub peer_read_rate: Option<ReadRate>,
    /// Where handshakes run: a thread of their own ([`super::handshaker`], the default), or
    /// `None`: on the sessions' runtime.
    pub handshakes: Option<HandshakerConfig>,
}

impl ServerConfig {
    /// A configuration with the defaults.
    pub fn new(tls: TlsIdentity, uuid: Uuid) -> ServerConfig {
        ServerConfig {
            tls,
            uuid,
            cluster: ClusterConfig::default(),
            handshake: HandshakeConfig::default(),
            conn: ConnConfig::default(),
            max_connections: 16_384,
            event_queue: 8_192,
            grace: Duration::from_secs(3),
            routes: Routes::new(),
            peer_read_rate: Some(ReadRate::default()),
            handshakes: Some(HandshakerConfig::default()),
        }
    }
}

/// Why a server cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The TLS material is unusable.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// Our certificate does not carry a server role.
    #[error("the certificate's roles ({0}) include neither server nor scheduler")]
    NotAServer(Role),
    /// Our UUID is not the one our certificate binds.
    #[error("the certificate binds UUID {bound}, not {configured}")]
    Identity {
        /// The certificate's.
        bound: Uuid,
        /// The configured one.
        configured: Uuid,
    },
}

/// What the application hears from the server.
#[derive(Debug)]
pub enum ServerEvent {
    /// A session was established.
    Connected {
        /// The peer.
        uuid: Uuid,
        /// Its claimed role.
        role: Role,
        /// Which session of this UUID it is (increasing): events about an older session of
        /// the same UUID may still arrive after this one and must not be taken for it.
        generation: u64,
    },
    /// A session ended (also when replaced by a newer one with the same UUID).
    Disconnected {
        /// The peer.
        uuid: Uuid,
        /// Its claimed role.
        role: Role,
        /// Which session ended (see `Connected`).
        generation: u64,
    },
    /// Messages routed to the application, in the order the peer sent them (those that arrived
    /// together come as one batch).
    Frames {
        /// The sender.
        uuid: Uuid,
        /// Its claimed role.
        role: Role,
        /// The messages.
        messages: Vec<Message>,
        /// Set when the first message is a barrier ([`Routes::barrier_on_first`]): the
        /// session's later frames wait until it is dropped.
        handled: Option<Handled>,
    },
}

/// The application's word that it has handled a barrier ([`Routes::barrier_on_first`]): the
/// session's later frames are routed once this is dropped. Drop it (or call
/// [`Handled::done`]) after acting on the messages and queuing what goes out in answer; the
/// reader waits until then (or until the session closes), so do not keep it longer.
#[derive(Debug)]
pub struct Handled(oneshot::Sender<()>);

impl Handled {
    /// The messages are handled: the session's later frames may be routed.
    pub fn done(self) {
        let _ = self.0.send(());
    }
}

struct Entry {
    role: Role,
    outbox: Outbox,
    generation: u64,
    /// When the session last received a frame (its reader records it).
    received: Arc<conn::Stamp>,
}

/// Frames in and out by operand (known operands only: type × 16 + operand).
struct Counters {
    frames_in: [AtomicU64; 64],
    frames_out: [AtomicU64; 64],
}

impl Counters {
    fn slot(operand: ssntp::frame::Operand) -> Option<usize> {
        let (ty, op) = operand.to_wire();
        (operand.is_known() && op < 16).then(|| usize::from(ty) * 16 + usize::from(op))
    }

    fn count_in(&self, operand: ssntp::frame::Operand) {
        if let Some(i) = Counters::slot(operand) {
            self.frames_in[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn count_out(&self, operand: ssntp::frame::Operand, n: usize) {
        if let Some(i) = Counters::slot(operand) {
            self.frames_out[i].fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

struct Shared {
    /// The cluster configuration sent in CONNECTED.
    cluster: RwLock<ClusterConfig>,
    counters: Counters,
    uuid: Uuid,
    roles: Role,
    max_frame: u32,
    registry: RwLock<Sessions>,
    generation: AtomicU64,
}

/// The live sessions by UUID, and their UUIDs by claimed role: a frame for a role (STATS to the
/// controllers, say) finds its few targets without walking every agent's session.
#[derive(Default)]
struct Sessions {
    by_uuid: HashMap<Uuid, Entry>,
    by_role: HashMap<Role, HashSet<Uuid>>,
}

impl Sessions {
    fn get(&self, uuid: &Uuid) -> Option<&Entry> {
        self.by_uuid.get(uuid)
    }

    fn values(&self) -> impl Iterator<Item = &Entry> {
        self.by_uuid.values()
    }

    fn iter(&self) -> impl Iterator<Item = (&Uuid, &Entry)> {
        self.by_uuid.iter()
    }

    fn insert(&mut self, uuid: Uuid, entry: Entry) -> Option<Entry> {
        let role = entry.role;
        let old = self.by_uuid.insert(uuid, entry);
        if let Some(old) = &old {
            self.unindex(uuid, old.role);
        }
        self.by_role.entry(role).or_default().insert(uuid);
        old
    }

    fn remove(&mut self, uuid: &Uuid) -> Option<Entry> {
        let old = self.by_uuid.remove(uuid)?;
        self.unindex(*uuid, old.role);
        Some(old)
    }

    fn unindex(&mut self, uuid: Uuid, role: Role) {
        if let Some(set) = self.by_role.get_mut(&role) {
            set.remove(&uuid);
            if set.is_empty() {
                self.by_role.remove(&role);
            }
        }
    }

    /// The sessions whose role intersects `role`: one lookup per distinct role claimed.
    fn with_role(&self, role: Role) -> impl Iterator<Item = (&Uuid, &Entry)> {
        self.by_role
            .iter()
            .filter(move |(r, _)| r.intersects(role))
            .flat_map(|(_, uuids)| uuids.iter())
            .filter_map(|u| self.by_uuid.get_key_value(u))
    }
}

struct Registry<'a>(&'a Sessions);

impl Directory for Registry<'_> {
    fn role_of(&self, uuid: Uuid) -> Option<Role> {
        self.0.get(&uuid).map(|e| e.role)
    }
}

impl Shared {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Sessions> {
        self.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Sessions> {
        self.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    fn outbox(&self, uuid: Uuid) -> Option<Outbox> {
        self.read().get(&uuid).map(|e| e.outbox.clone())
    }

    /// The sessions a target names.
    fn targets(&self, target: Target) -> Vec<(Uuid, Outbox)> {
        let registry = self.read();
        match target {
            Target::Role(role) => registry
                .with_role(role)
                .map(|(u, e)| (*u, e.outbox.clone()))
                .collect(),
            Target::Session(uuid) => registry
                .get(&uuid)
                .map(|e| vec![(uuid, e.outbox.clone())])
                .unwrap_or_default(),
        }
    }

    /// Sends `frame` from `from` on to `targets` (never back to `from`): byte for byte, with our
    /// hop appended to its trace. Too large with the hop: DELIVERY_FAILURE `too_large` to `from`.
    fn forward(
        &self,
        from: Uuid,
        frame: &Frame,
        targets: Vec<(Uuid, Outbox)>,
    ) -> Result<usize, SendError> {
        let bytes = match &frame.trace {
            None => frame.to_bytes(self.max_frame),
            Some(trace) => {
                let mut traced = frame.clone();
                let mut trace = trace.clone();
                trace.push_hop(self.uuid, self.roles, conn::now().unix_ns);
                traced.trace = Some(trace);
                traced.to_bytes(self.max_frame)
            }
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                let target = (targets.len() == 1).then(|| targets[0].0);
                self.fail(from, frame, DeliveryFailureReason::TooLarge, target);
                return Err(e.into());
            }
        };
        let mut sent = 0;
        for (uuid, outbox) in targets {
            if uuid == from {
                continue;
            }
            match outbox.send_encoded(bytes.clone()) {
                Ok(()) => sent += 1,
                Err(e) => {
                    tracing::warn!(to = %uuid, operand = %frame.operand, error = %e, "frame not forwarded")
                }
            }
        }
        self.counters.count_out(frame.operand, sent);
        Ok(sent)
    }

    /// DELIVERY_FAILURE to `to` about `frame`.
    fn fail(&self, to: Uuid, frame: &Frame, reason: DeliveryFailureReason, target: Option<Uuid>) {
        let (operand_type, operand) = frame.operand.to_wire();
        let failure = Payload::DeliveryFailure(DeliveryFailure {
            operand_type,
            operand,
            target_uuid: target,
            reason,
        });
        if let Some(outbox) = self.outbox(to)
            && outbox.send(&Frame::new(self.uuid, &failure)).is_ok()
        {
            self.counters
                .count_out(ssntp::frame::Operand::DeliveryFailure, 1);
        }
    }
}

/// Whom a frame is forwarded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Every session whose role intersects this one.
    Role(Role),
    /// One session.
    Session(Uuid),
}

/// Sends to and asks about the server's sessions. Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("uuid", &self.shared.uuid)
            .finish()
    }
}

impl ServerHandle {
    /// The server's UUID.
    pub fn uuid(&self) -> Uuid {
        self.shared.uuid
    }

    /// The server's roles (its certificate's).
    pub fn roles(&self) -> Role {
        self.shared.roles
    }

    /// Queues a frame for one session.
    pub fn send(&self, uuid: Uuid, frame: &Frame) -> Result<(), SendError> {
        let outbox = self.shared.outbox(uuid).ok_or(SendError::NotConnected)?;
        outbox.send(frame)?;
        self.shared.counters.count_out(frame.operand, 1);
        Ok(())
    }

    /// Frames received (after the receiving rules) and sent (made or forwarded), by operand;
    /// operands never seen are left out.
    pub fn frame_counts(&self) -> Vec<(ssntp::frame::Operand, u64, u64)> {
        let c = &self.shared.counters;
        ssntp::frame::Operand::ALL
            .iter()
            .filter_map(|op| {
                let i = Counters::slot(*op)?;
                let fin = c.frames_in[i].load(Ordering::Relaxed);
                let fout = c.frames_out[i].load(Ordering::Relaxed);
                (fin + fout > 0).then_some((*op, fin, fout))
            })
            .collect()
    }

    /// Queues a frame made by the server itself.
    pub fn send_payload(&self, uuid: Uuid, payload: &Payload) -> Result<(), SendError> {
        self.send(uuid, &Frame::new(self.shared.uuid, payload))
    }

    /// Queues a frame for every session whose role intersects `role`; returns how many took it.
    pub fn broadcast(&self, role: Role, frame: &Frame) -> Result<usize, SendError> {
        let bytes = frame.to_bytes(self.shared.max_frame)?;
        let registry = self.shared.read();
        let sent = registry
            .with_role(role)
            .filter(|(_, e)| e.outbox.send_encoded(bytes.clone()).is_ok())
            .count();
        self.shared.counters.count_out(frame.operand, sent);
        Ok(sent)
    }

    /// Forwards a frame received from `from` to `to` (never back to `from`): byte for byte, with
    /// the server's hop appended to its trace. Returns how many sessions took it; a frame its hop
    /// pushes over the size limit goes nowhere and `from` gets DELIVERY_FAILURE `too_large`.
    pub fn forward(&self, from: Uuid, frame: &Frame, to: Target) -> Result<usize, SendError> {
        let targets = self.shared.targets(to);
        self.shared.forward(from, frame, targets)
    }

    /// DELIVERY_FAILURE to `to` about `frame`, which could not reach `target`.
    pub fn delivery_failure(
        &self,
        to: Uuid,
        frame: &Frame,
        reason: DeliveryFailureReason,
        target: Option<Uuid>,
    ) {
        self.shared.fail(to, frame, reason, target);
    }

    /// Replaces the cluster configuration that CONNECTED carries to sessions from now on.
    pub fn set_cluster(&self, cluster: ClusterConfig) {
        *self
            .shared
            .cluster
            .write()
            .unwrap_or_else(|p| p.into_inner()) = cluster;
    }

    /// The claimed role of a connected peer.
    pub fn client_role(&self, uuid: Uuid) -> Option<Role> {
        self.shared.read().get(&uuid).map(|e| e.role)
    }

    /// Every connected peer and its role.
    pub fn sessions(&self) -> Vec<(Uuid, Role)> {
        self.shared
            .read()
            .iter()
            .map(|(u, e)| (*u, e.role))
            .collect()
    }

    /// When the session `generation` of `uuid` last received a frame, if it is still that peer's
    /// session: every frame counts, a HEARTBEAT included (which the application never sees), as
    /// does the CONNECT. The reader records it once per read, before it routes what it read; an
    /// application that judges peers by their silence reads it instead of counting messages.
    pub fn last_received(&self, uuid: Uuid, generation: u64) -> Option<Instant> {
        let registry = self.shared.read();
        let entry = registry.get(&uuid)?;
        (entry.generation == generation).then(|| entry.received.last())
    }

    /// Closes one session of a peer, if it is still the current one (a newer session with the
    /// same UUID is left alone); `false` otherwise.
    pub fn disconnect_session(&self, uuid: Uuid, generation: u64) -> bool {
        let registry = self.shared.read();
        match registry.get(&uuid) {
            Some(e) if e.generation == generation => {
                e.outbox.close();
                true
            }
            _ => false,
        }
    }

    /// Closes a peer's session (after its queued frames); `false` if it is not connected.
    pub fn disconnect(&self, uuid: Uuid) -> bool {
        self.shared.outbox(uuid).map(|o| o.close()).is_some()
    }
}

impl Directory for ServerHandle {
    fn role_of(&self, uuid: Uuid) -> Option<Role> {
        self.client_role(uuid)
    }
}

/// An established connection: TLS, the CONNECT's outcome (its CONNECTED not sent yet), and what
/// was read past it.
type Handshaken = (
    tokio_rustls::server::TlsStream<Rehomed>,
    ServerAccepted,
    BytesMut,
);

/// The server. Build it with [`Server::new`], run it with [`Server::run`].
pub struct Server {
    config: ServerConfig,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    events: mpsc::Sender<ServerEvent>,
}

impl Server {
    /// Checks the configuration; returns the server, a handle, and the application's events.
    pub fn new(
        config: ServerConfig,
    ) -> Result<(Server, ServerHandle, mpsc::Receiver<ServerEvent>), ServerError> {
        let own = config.tls.own();
        if !own.roles.intersects(Role::SERVER | Role::SCHEDULER) {
            return Err(ServerError::NotAServer(own.roles));
        }
        if let UuidBinding::Bound(bound) = own.binding
            && bound != config.uuid
        {
            return Err(ServerError::Identity {
                bound,
                configured: config.uuid,
            });
        }
        let acceptor = TlsAcceptor::from(config.tls.server_config()?);
        let shared = Arc::new(Shared {
            cluster: RwLock::new(config.cluster.clone()),
            counters: Counters {
                frames_in: std::array::from_fn(|_| AtomicU64::new(0)),
                frames_out: std::array::from_fn(|_| AtomicU64::new(0)),
            },
            uuid: config.uuid,
            roles: own.roles,
            max_frame: config.handshake.session.max_frame,
            registry: RwLock::new(Sessions::default()),
            generation: AtomicU64::new(0),
        });
        let (tx, rx) = mpsc::channel(config.event_queue.max(1));
        let handle = ServerHandle {
            shared: shared.clone(),
        };
        Ok((
            Server {
                config,
                acceptor,
                shared,
                events: tx,
            },
            handle,
            rx,
        ))
    }

    /// Accepts on `listener` until `shutdown`; then stops accepting, closes every session
    /// (queued frames are written, TLS is shut down) and waits up to the grace period.
    pub async fn run(self, listener: TcpListener, shutdown: CancellationToken) {
        let tracker = TaskTracker::new();
        let limit = Arc::new(Semaphore::new(self.config.max_connections));
        let handshaker = self.config.handshakes.and_then(|c| {
            Handshaker::start(c)
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "no handshake thread: handshakes run with the sessions");
                })
                .ok()
        });
        let this = Arc::new(self);
        loop {
            let accepted = tokio::select! {
                _ = shutdown.cancelled() => break,
                a = listener.accept() => a,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors and the like: keep serving the sessions we have.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                tracing::warn!("connection limit reached; closing a new connection");
                continue;
            };
            super::tune(&tcp);
            let this = this.clone();
            let inner = tracker.clone();
            let stop = shutdown.clone();
            let handshaker = handshaker.clone();
            tracker.spawn(async move {
                this.connection(tcp, handshaker.as_ref(), &inner, stop)
                    .await;
                drop(permit);
            });
        }
        drop(listener);
        for entry in this.shared.read().values() {
            entry.outbox.close();
        }
        tracker.close();
        let _ = tokio::time::timeout(this.config.grace, tracker.wait()).await;
    }

    /// TLS, then CONNECT → CONNECTED (or the refusal); `None` when there is no session.
    async fn handshake(&self, tcp: Rehomed) -> Option<Handshaken> {
        let start = conn::now().instant;
        let deadline = start + self.config.handshake.handshake_timeout;
        let tls_deadline = tokio::time::Instant::from_std(deadline);
        let mut stream = match tokio::time::timeout_at(tls_deadline, self.acceptor.accept(tcp))
            .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                if refused_certificate(&e) {
                    // An operator's problem (an expired or foreign certificate), not noise.
                    tracing::info!(error = %e, "TLS handshake failed: peer certificate refused");
                } else {
                    tracing::debug!(error = %e, "TLS handshake failed");
                }
                return None;
            }
            Err(_) => {
                tracing::debug!("TLS handshake timed out");
                return None;
            }
        };
        let peer = tls::peer_of(stream.get_ref().1).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "unreadable peer certificate: no roles");
            PeerCertificate {
                roles: Role::empty(),
                binding: UuidBinding::Unbound,
            }
        });
        let hs = ServerHandshake::new(
            (self.shared.uuid, self.shared.roles),
            self.shared
                .cluster
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            peer,
            self.config.handshake,
            start,
        );
        let decoder = self.config.handshake.decoder();
        let mut buf = BytesMut::with_capacity(4096);
        let max = self.shared.max_frame;
        let outcome = match conn::read_first(&mut stream, &mut buf, &decoder, hs.deadline()).await {
            FirstFrame::Frame(raw) => hs.handle_frame(conn::now().instant, raw),
            FirstFrame::Framing(e) => Err(hs.handle_framing_error(e)),
            FirstFrame::Timeout => match hs.handle_timeout(deadline) {
                Err(rejected) => Err(rejected),
                Ok(_) => return None, // cannot happen: the deadline is the handshake's own
            },
            FirstFrame::Io(e) => {
                tracing::debug!(error = %e, "closed before CONNECT");
                return None;
            }
        };
        let accepted = match outcome {
            Ok(a) => a,
            Err(rejected) => {
                tracing::info!(error = %rejected.error, "connection refused");
                let _ = conn::write_now(&mut stream, &rejected.reply(), max, deadline).await;
                let _ = stream.shutdown().await;
                return None;
            }
        };
        // CONNECTED goes out through the session's outbox once the session is registered: a
        // peer told it is connected can be reached at once.
        Some((stream, accepted, buf))
    }

    /// [`Server::handshake`] on the handshake thread when there is one: the socket goes there
    /// and comes back established (or not at all).
    async fn handshaken(
        self: &Arc<Self>,
        tcp: TcpStream,
        handshaker: Option<&Handshaker>,
    ) -> Option<Handshaken> {
        let Some(h) = handshaker else {
            // The handshake's state (TLS included) is boxed so that it is freed once the
            // session runs: a long-lived connection task keeps only what the session needs.
            return Box::pin(self.handshake(Rehomed::new(tcp))).await;
        };
        let std = tcp.into_std().ok()?;
        let this = self.clone();
        let (mut stream, accepted, buf, std) = h
            .run(async move {
                let there = Rehomed::new(TcpStream::from_std(std).ok()?);
                let (mut stream, accepted, buf) = Box::pin(this.handshake(there)).await?;
                let std = stream.get_mut().0.detach().ok()?;
                Some((stream, accepted, buf, std))
            })
            .await??;
        stream.get_mut().0.attach(std).ok()?;
        Some((stream, accepted, buf))
    }

    async fn connection(
        self: &Arc<Self>,
        tcp: TcpStream,
        handshaker: Option<&Handshaker>,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) {
        let Some((stream, accepted, buf)) = self.handshaken(tcp, handshaker).await else {
            return;
        };
        let max = self.shared.max_frame;
        let session = accepted.session;
        let (uuid, role) = (session.peer_uuid(), session.peer_role());
        let opened = conn::open(stream, max, self.config.conn, tracker);
        let Some(generation) = self
            .register(
                uuid,
                role,
                accepted.bound,
                &accepted.reply,
                (opened.outbox(), opened.received()),
            )
            .await
        else {
            // The UUID is a live session's and this certificate binds none: refused, and the
            // live session is left alone (PROTOCOL.md §4 step 5).
            tracing::warn!(%uuid, %role, "refused: a certificate that binds no UUID claimed a live session's");
            let refused = Payload::ConnectionAborted(Reason::new("uuid in use"));
            let _ = opened
                .outbox()
                .send(&Frame::new(self.shared.uuid, &refused));
            // The writer sends what is queued, then closes the connection.
            opened.outbox().close();
            return;
        };
        if self
            .events
            .send(ServerEvent::Connected {
                uuid,
                role,
                generation,
            })
            .await
            .is_err()
        {
            opened.outbox().close();
        }
        let dispatch = ServerDispatch {
            shared: self.shared.clone(),
            routes: self.config.routes.clone(),
            events: self.events.clone(),
            pending: Vec::new(),
            barrier_seen: false,
            held: None,
        };
        let outbox = opened.outbox().clone();
        let mut done = opened.run(
            session,
            buf,
            self.config.conn.read_buffer,
            (!role.contains(Role::CONTROLLER))
                .then_some(self.config.peer_read_rate)
                .flatten(),
            dispatch,
            tracker,
        );
        let ended = tokio::select! {
            e = &mut done => e.ok(),
            _ = shutdown.cancelled() => {
                // Shutting down: queued frames go out, then close_notify; the session then ends.
                outbox.close();
                done.await.ok()
            }
        };
        tracing::debug!(%uuid, %role, ?ended, "session ended");
        if self.deregister(uuid, generation) {
            let _ = self
                .events
                .send(ServerEvent::Disconnected {
                    uuid,
                    role,
                    generation,
                })
                .await;
        }
    }

    /// Adds a session, with `reply` (CONNECTED) first in its outbox before anyone can find it and
    /// queue a frame for it. A live session with the same UUID is told it is replaced, closed, and
    /// reported disconnected first — when the new client's certificate binds that UUID
    /// (`bound`); otherwise nothing is added and `None` is returned (PROTOCOL.md §4 step 5).
    async fn register(
        &self,
        uuid: Uuid,
        role: Role,
        bound: bool,
        reply: &Frame,
        (outbox, received): (&Outbox, Arc<conn::Stamp>),
    ) -> Option<u64> {
        let generation = self.shared.generation.fetch_add(1, Ordering::Relaxed);
        let old = {
            let mut registry = self.shared.write();
            if !bound && registry.get(&uuid).is_some() {
                return None;
            }
            outbox.send(reply).ok()?;
            registry.insert(
                uuid,
                Entry {
                    role,
                    outbox: outbox.clone(),
                    generation,
                    received,
                },
            )
        };
        if let Some(old) = old {
            let replaced = Payload::ConnectionAborted(Reason::new("replaced"));
            let _ = old.outbox.send(&Frame::new(self.shared.uuid, &replaced));
            old.outbox.close();
            let _ = self
                .events
                .send(ServerEvent::Disconnected {
                    uuid,
                    role: old.role,
                    generation: old.generation,
                })
                .await;
        }
        Some(generation)
    }

    /// Removes a session unless a newer one took its place; `true` if it was removed.
    fn deregister(&self, uuid: Uuid, generation: u64) -> bool {
        let mut registry = self.shared.write();
        match registry.get(&uuid) {
            Some(e) if e.generation == generation => {
                registry.remove(&uuid);
                true
            }
            _ => false,
        }
    }
}

struct ServerDispatch {
    shared: Arc<Shared>,
    routes: Routes,
    events: mpsc::Sender<ServerEvent>,
    /// Messages for the application, delivered at the next flush.
    pending: Vec<Message>,
    /// Whether this session's barrier ([`Routes::barrier_on_first`]) has come.
    barrier_seen: bool,
    /// From the barrier until the application has handled it: the messages read after it,
    /// routed at the flush (at most one read's worth).
    held: Option<Vec<Message>>,
}

impl ServerDispatch {
    /// Routes one message: forwarded at once, or held for the application's next batch.
    fn route(&mut self, from: Uuid, message: Message) {
        if !self.routes.has_rule(message.frame.operand) {
            self.pending.push(message);
            return;
        }
        let route = self.routes.route(&message, &Registry(&self.shared.read()));
        let target = match route {
            Route::App => {
                self.pending.push(message);
                return;
            }
            Route::Role(role) => Target::Role(role),
            Route::Tee(role) => {
                let targets = self.shared.targets(Target::Role(role));
                let _ = self.shared.forward(from, &message.frame, targets);
                self.pending.push(message);
                return;
            }
            Route::To(uuid) => Target::Session(uuid),
            Route::Discard => return,
            Route::Fail { reason, target } => {
                self.shared.fail(from, &message.frame, reason, target);
                return;
            }
        };
        let targets = self.shared.targets(target);
        match target {
            Target::Session(uuid) if targets.is_empty() => {
                let reason = DeliveryFailureReason::NodeUnavailable;
                self.shared.fail(from, &message.frame, reason, Some(uuid));
            }
            _ => {
                let _ = self.shared.forward(from, &message.frame, targets);
            }
        }
    }

    /// Hands the application what is pending (with `handled` when it ends a barrier's batch).
    async fn deliver(&mut self, session: &Session, handled: Option<Handled>) -> bool {
        if self.pending.is_empty() && handled.is_none() {
            return true;
        }
        let event = ServerEvent::Frames {
            uuid: session.peer_uuid(),
            role: session.peer_role(),
            messages: std::mem::take(&mut self.pending),
            handled,
        };
        self.events.send(event).await.is_ok()
    }
}

impl Dispatch for ServerDispatch {
    fn dispatch(&mut self, session: &Session, message: Message) -> bool {
        self.shared.counters.count_in(message.frame.operand);
        if let Some(held) = &mut self.held {
            held.push(message);
        } else if !self.barrier_seen && self.routes.is_barrier(message.frame.operand) {
            self.barrier_seen = true;
            self.pending.push(message);
            self.held = Some(Vec::new());
        } else {
            self.route(session.peer_uuid(), message);
        }
        true
    }

    async fn flush(&mut self, session: &Session) -> bool {
        if let Some(held) = self.held.take() {
            let (handled, done) = oneshot::channel();
            if !self.deliver(session, Some(Handled(handled))).await {
                return false;
            }
            // Sent or dropped, the application is done with the barrier's batch.
            let _ = done.await;
            for message in held {
                self.route(session.peer_uuid(), message);
            }
        }
        self.deliver(session, None).await
    }
}

/// Whether a failed TLS accept refused the peer's certificate (expired, not yet valid, not
/// signed by the cluster's CA, ...), as opposed to a peer that spoke no TLS or went away.
fn refused_certificate(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)))
}

#[cfg(test)]
mod sessions_tests {
    use super::*;

    fn entry(role: Role, generation: u64) -> Entry {
        Entry {
            role,
            outbox: Outbox::detached(),
            generation,
            received: Arc::new(conn::Stamp::new(Instant::now())),
        }
    }

    fn with_role(s: &Sessions, role: Role) -> Vec<Uuid> {
        let mut v: Vec<Uuid> = s.with_role(role).map(|(u, _)| *u).collect();
        v.sort();
        v
    }

    #[test]
    fn the_role_index_follows_inserts_replacements_and_removals() {
        let mut s = Sessions::default();
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        assert!(s.insert(a, entry(Role::AGENT, 0)).is_none());
        assert!(
            s.insert(b, entry(Role::AGENT | Role::NETAGENT, 1))
                .is_none()
        );
        assert!(s.insert(c, entry(Role::CONTROLLER, 2)).is_none());
        assert_eq!(with_role(&s, Role::CONTROLLER), vec![c]);
        assert_eq!(with_role(&s, Role::AGENT), vec![a, b]);
        assert_eq!(with_role(&s, Role::NETAGENT | Role::CONTROLLER), vec![b, c]);
        // The same UUID back under another role: indexed under the new role only.
        let old = s.insert(a, entry(Role::CONTROLLER, 3)).unwrap();
        assert_eq!(old.generation, 0);
        assert_eq!(with_role(&s, Role::AGENT), vec![b]);
        assert_eq!(with_role(&s, Role::CONTROLLER), vec![a, c]);
        assert_eq!(s.remove(&c).map(|e| e.generation), Some(2));
        assert!(s.remove(&c).is_none());
        assert_eq!(with_role(&s, Role::CONTROLLER), vec![a]);
        s.remove(&a);
        s.remove(&b);
        assert!(s.by_role.is_empty() && s.by_uuid.is_empty());
    }
}
