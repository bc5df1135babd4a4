//! The SSNTP client: dials a list of servers in turn (starting at one picked by its UUID, see
//! [`first_server`], and after a drop at the one after the server it had), runs the handshake,
//! reconnects with capped exponential backoff and jitter, and re-announces itself after each
//! connect.

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::conn::{self, Batch, ConnConfig, Dispatch, Ended, FirstFrame, Outbox, SendError};
use super::tls::{self, TlsError, TlsIdentity};
use ssntp::Role;
use ssntp::error::ClientHandshakeError;
use ssntp::frame::Frame;
use ssntp::handshake::{
    ClientAccepted, ClientHandshake, HandshakeConfig, PeerCertificate, UuidBinding,
};
use ssntp::payload::{ClusterConfig, Payload, Reason};
use ssntp::session::{Message, Session};

/// Frames to send first after every (re)connect, before anything else (READY, for an agent).
pub type Announce = Arc<dyn Fn() -> Vec<Payload> + Send + Sync>;

/// Reconnection delays: `initial`, doubling to `max`, each scaled by a random factor in [½, 1].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay (default 0.5 s).
    pub initial: Duration,
    /// The largest delay (default 30 s).
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before attempt `n` (0-based) after a failure.
    pub fn delay(&self, n: u32) -> Duration {
        let base = self.initial.saturating_mul(1u32 << n.min(16)).min(self.max);
        base.mul_f64(0.5 + fastrand::f64() / 2.0)
    }
}

/// How a client connects.
#[derive(Clone)]
pub struct ClientConfig {
    /// CA, certificate and key.
    pub tls: TlsIdentity,
    /// Our UUID (the one bound in our certificate, when it binds one).
    pub uuid: Uuid,
    /// The role to claim (within our certificate's roles).
    pub claim: Role,
    /// Servers as `host:port`, tried in turn from [`first_server`] (and after a session, from
    /// the one after its server); the host is also the TLS server name.
    pub servers: Vec<String>,
    /// Handshake and session limits (the handshake timeout bounds TCP, TLS and SSNTP together).
    pub handshake: HandshakeConfig,
    /// Per-connection limits.
    pub conn: ConnConfig,
    /// Events queued for the application before the reader waits (default 8,192).
    pub event_queue: usize,
    /// Reconnection delays.
    pub backoff: Backoff,
    /// Frames sent first after each connect.
    pub announce: Option<Announce>,
    /// A TCP relay (`host:port`) to reach every server through: TCP goes there, the client
    /// names the server it wants ([`crate::relay`]), and TLS still checks the server's
    /// certificate against its name in `servers` (for a peer that cannot reach the servers
    /// itself, such as a CNCI in its own namespace or VM).
    pub via: Option<String>,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("uuid", &self.uuid)
            .field("claim", &self.claim)
            .field("servers", &self.servers)
            .field("via", &self.via)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// A configuration with the defaults.
    pub fn new(tls: TlsIdentity, uuid: Uuid, claim: Role, servers: Vec<String>) -> ClientConfig {
        ClientConfig {
            tls,
            uuid,
            claim,
            servers,
            handshake: HandshakeConfig::default(),
            conn: ConnConfig::default(),
            event_queue: 8_192,
            backoff: Backoff::default(),
            announce: None,
            via: None,
        }
    }
}

/// Why a client stopped for good (or cannot start).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TLS material is unusable.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// The claim, the servers, or our UUID are wrong.
    #[error("{0}")]
    Config(String),
    /// A handshake failure that retrying cannot fix (CONNECTION_ABORTED, server role).
    #[error("{0}")]
    Handshake(#[from] ClientHandshakeError),
    /// The server closed the session with CONNECTION_ABORTED `replaced`: a session of the same
    /// bound UUID took its place.
    #[error("the server aborted the session: {0}")]
    Aborted(String),
}

/// What the application hears from the client.
#[derive(Debug)]
pub enum ClientEvent {
    /// A session is established (after the announce frames were queued).
    Connected {
        /// The server's UUID.
        server_uuid: Uuid,
        /// The server's roles.
        server_role: Role,
        /// The cluster configuration it sent.
        cluster: ClusterConfig,
    },
    /// The session ended; the client reconnects unless it stops.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// Messages from the server, in order (those that arrived together come as one batch).
    Frames {
        /// The messages.
        messages: Vec<Message>,
        /// When the client read them: how long they waited for the application is
        /// `read_at.elapsed()` when it takes them up (a measure of how far behind it is).
        read_at: Instant,
    },
    /// The client gave up for good.
    Stopped(ClientError),
}

struct Shared {
    uuid: Uuid,
    claim: Role,
    max_frame: u32,
    current: Mutex<Option<Outbox>>,
    stop: CancellationToken,
}

impl Shared {
    fn set(&self, outbox: Option<Outbox>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = outbox;
    }

    fn outbox(&self) -> Option<Outbox> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Sends on the client's current session. Cheap to clone.
#[derive(Clone)]
pub struct ClientHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ClientHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandle")
            .field("uuid", &self.shared.uuid)
            .finish()
    }
}

impl ClientHandle {
    /// Our UUID.
    pub fn uuid(&self) -> Uuid {
        self.shared.uuid
    }

    /// The role we claim.
    pub fn role(&self) -> Role {
        self.shared.claim
    }

    /// Whether a session is established now.
    pub fn is_connected(&self) -> bool {
        self.shared.outbox().is_some_and(|o| !o.is_closed())
    }

    /// Queues a frame on the current session; never waits.
    pub fn send(&self, frame: &Frame) -> Result<(), SendError> {
        // Encoded into the session's queue under the lock, from the frame as it is: neither
        // the outbox nor the frame is cloned.
        let current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        current.as_ref().ok_or(SendError::NotConnected)?.send(frame)
    }

    /// Queues a frame on the current session, taking it; never waits.
    pub fn send_frame(&self, frame: Frame) -> Result<(), SendError> {
        self.send(&frame)
    }

    /// Queues a frame on the current session, waiting while its queue is full.
    pub async fn send_wait(&self, frame: &Frame) -> Result<(), SendError> {
        // Room now (the common case): queued under the lock, as `send` does. Only a full queue
        // takes a clone of the outbox to wait on.
        match self.send(frame) {
            Err(SendError::Busy) => {}
            done => {
                // Yields now and then, as `Outbox::send_wait` does.
                tokio::task::consume_budget().await;
                return done;
            }
        }
        let outbox = self.shared.outbox().ok_or(SendError::NotConnected)?;
        outbox.send_wait(frame).await
    }

    /// Queues a frame of ours carrying `payload`.
    pub fn send_payload(&self, payload: &Payload) -> Result<(), SendError> {
        self.send_frame(Frame::new(self.shared.uuid, payload))
    }

    /// Queues a traced frame of ours carrying `payload`.
    pub fn send_traced(&self, payload: &Payload, label: &str) -> Result<(), SendError> {
        let trace = ssntp::frame::Trace::new(
            label,
            self.shared.uuid,
            self.shared.claim,
            conn::now().unix_ns,
        );
        self.send_frame(Frame::new(self.shared.uuid, payload).with_trace(trace))
    }

    /// The largest frame body the session sends.
    pub fn max_frame(&self) -> u32 {
        self.shared.max_frame
    }

    /// Stops the client: interrupts a dial in progress, closes the session (queued frames are
    /// written first), and does not reconnect.
    pub fn close(&self) {
        self.shared.stop.cancel();
        if let Some(o) = self.shared.outbox() {
            o.close();
        }
    }
}

/// The client. [`Client::start`] spawns its connection loop on the current tokio runtime.
pub struct Client {
    config: ClientConfig,
    connector: TlsConnector,
    shared: Arc<Shared>,
    events: mpsc::Sender<ClientEvent>,
    tracker: TaskTracker,
}

/// A session the handshake established.
struct Established {
    stream: TlsStream<TcpStream>,
    accepted: ClientAccepted,
    leftover: BytesMut,
}

impl Client {
    /// Checks the configuration and starts connecting.
    pub fn start(
        config: ClientConfig,
    ) -> Result<(ClientHandle, mpsc::Receiver<ClientEvent>), ClientError> {
        let own = config.tls.own();
        if !config.claim.is_valid_claim() || !own.roles.contains(config.claim) {
            return Err(ClientError::Config(format!(
                "cannot claim role {} with a certificate for {}",
                config.claim, own.roles
            )));
        }
        if let UuidBinding::Bound(bound) = own.binding
            && bound != config.uuid
        {
            return Err(ClientError::Config(format!(
                "the certificate binds UUID {bound}, not {}",
                config.uuid
            )));
        }
        if config.servers.is_empty() {
            return Err(ClientError::Config("no server to connect to".into()));
        }
        for s in &config.servers {
            server_name(s).map_err(ClientError::Config)?;
        }
        let connector = TlsConnector::from(config.tls.client_config()?);
        let shared = Arc::new(Shared {
            uuid: config.uuid,
            claim: config.claim,
            max_frame: config.handshake.session.max_frame,
            current: Mutex::new(None),
            stop: CancellationToken::new(),
        });
        let (tx, rx) = mpsc::channel(config.event_queue.max(1));
        let handle = ClientHandle {
            shared: shared.clone(),
        };
        let client = Client {
            config,
            connector,
            shared,
            events: tx,
            tracker: TaskTracker::new(),
        };
        tokio::spawn(client.run());
        Ok((handle, rx))
    }

    async fn run(self) {
        let stop = self.shared.stop.clone();
        let mut failures = 0u32;
        let count = self.config.servers.len();
        let mut first = first_server(self.shared.uuid, count);
        'outer: loop {
            for k in 0..count {
                let at = (first + k) % count;
                let server = &self.config.servers[at];
                let attempt = tokio::select! {
                    _ = stop.cancelled() => break 'outer,
                    a = self.connect(server) => a,
                };
                match attempt {
                    Ok(established) => {
                        // After this session, the next server first: a client whose server
                        // died moves on rather than wait for it.
                        first = (at + 1) % count;
                        let began = tokio::time::Instant::now();
                        match self.serve(established).await {
                            // A session that lasted resets the backoff; one that ended at once
                            // counts as a failure, so a server that keeps closing is not hammered.
                            Ok(())
                                if began.elapsed()
                                    >= self.config.handshake.session.idle_timeout =>
                            {
                                failures = 0;
                                break;
                            }
                            Ok(()) => break,
                            Err(fatal) => {
                                let _ = self.events.send(ClientEvent::Stopped(fatal)).await;
                                break 'outer;
                            }
                        }
                    }
                    Err(e) if e.is_retryable() => {
                        tracing::warn!(%server, error = %e, "cannot connect to the server (retrying)")
                    }
                    Err(e) => {
                        let _ = self.events.send(ClientEvent::Stopped(e.into())).await;
                        break 'outer;
                    }
                }
            }
            let delay = self.config.backoff.delay(failures);
            failures = failures.saturating_add(1);
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(delay) => {}
            }
        }
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// TCP, TLS and the SSNTP handshake with one server, within the handshake timeout.
    async fn connect(&self, server: &str) -> Result<Established, ClientHandshakeError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            ClientHandshakeError::Failed(format!("{server}: {what}: {e}"))
        };
        let start = conn::now().instant;
        let deadline = start + self.config.handshake.handshake_timeout;
        let at = tokio::time::Instant::from_std(deadline);
        let name = server_name(server).map_err(|e| failed("server name", &e))?;
        let target = self.config.via.as_deref().unwrap_or(server);
        let mut tcp = match tokio::time::timeout_at(at, TcpStream::connect(target)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => return Err(failed("connect", &e)),
            Err(_) => return Err(ClientHandshakeError::Timeout),
        };
        if self.config.via.is_some() {
            // Which server, for the relay.
            let line = super::relay::request(server);
            match tokio::time::timeout_at(at, tcp.write_all(&line)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(failed("relay request", &e)),
                Err(_) => return Err(ClientHandshakeError::Timeout),
            }
        }
        super::tune(&tcp);
        let mut stream = match tokio::time::timeout_at(at, self.connector.connect(name, tcp)).await
        {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(failed("TLS", &e)),
            Err(_) => return Err(ClientHandshakeError::Timeout),
        };
        let server_cert = tls::peer_of(stream.get_ref().1).unwrap_or(PeerCertificate {
            roles: Role::empty(),
            binding: UuidBinding::Unbound,
        });
        let own_roles = self.config.tls.own().roles;
        let (hs, connect) = ClientHandshake::start(
            (self.shared.uuid, own_roles),
            self.shared.claim,
            server_cert,
            self.config.handshake,
            start,
        )?;
        conn::write_now(&mut stream, &connect, self.shared.max_frame, deadline)
            .await
            .map_err(|e| failed("write CONNECT", &e))?;
        let decoder = self.config.handshake.decoder();
        let mut buf = BytesMut::with_capacity(4096);
        let accepted = match conn::read_first(&mut stream, &mut buf, &decoder, hs.deadline()).await
        {
            FirstFrame::Frame(raw) => hs.handle_frame(conn::now().instant, raw)?,
            FirstFrame::Framing(e) => return Err(e.into()),
            FirstFrame::Timeout => return Err(ClientHandshakeError::Timeout),
            FirstFrame::Io(e) => return Err(failed("read", &e)),
        };
        Ok(Established {
            stream,
            accepted,
            leftover: buf,
        })
    }

    /// Runs an established session until it ends; `Err` when the client must stop.
    async fn serve(&self, established: Established) -> Result<(), ClientError> {
        let Established {
            stream,
            accepted,
            leftover,
        } = established;
        let session = accepted.session;
        let opened = conn::open(
            stream,
            self.shared.max_frame,
            self.config.conn,
            &self.tracker,
        );
        let outbox = opened.outbox().clone();
        if let Some(announce) = &self.config.announce {
            for payload in announce() {
                let _ = outbox.send_frame(Frame::new(self.shared.uuid, &payload));
            }
        }
        self.shared.set(Some(outbox.clone()));
        if self.shared.stop.is_cancelled() {
            // close() came while we were connecting.
            outbox.close();
        }
        let connected = ClientEvent::Connected {
            server_uuid: session.peer_uuid(),
            server_role: session.peer_role(),
            cluster: accepted.cluster,
        };
        if self.events.send(connected).await.is_err() {
            outbox.close();
        }
        let dispatch = ClientDispatch {
            events: self.events.clone(),
            pending: Batch::default(),
        };
        let done = opened.run(
            session,
            leftover,
            self.config.conn.read_buffer,
            None,
            dispatch,
            conn::Mode::Inline,
            &self.tracker,
        );
        let ended = done.await.unwrap_or(Ended::Local);
        self.shared.set(None);
        outbox.close();
        let reason = match &ended {
            Ended::Local => "closed".to_string(),
            Ended::PeerGone(r) | Ended::Violation(r) => r.clone(),
            Ended::ServerClosed { reason, .. } => format!("server closed the session: {reason}"),
        };
        let _ = self.events.send(ClientEvent::Disconnected { reason }).await;
        match ended {
            // Another process holds this identity now: coming back would take it away again.
            Ended::ServerClosed {
                aborted: true,
                reason,
            } if reason == Reason::REPLACED => Err(ClientError::Aborted(reason)),
            // Any other end, "uuid in use" included (our previous session may be a dead
            // connection the server has not timed out yet): reconnect, with backoff.
            _ => Ok(()),
        }
    }
}

/// The TLS server name of `host:port` (a DNS name or an IP address, `[v6]` allowed).
fn server_name(server: &str) -> Result<ServerName<'static>, String> {
    let (host, port) = server
        .rsplit_once(':')
        .ok_or_else(|| format!("{server:?}: not host:port"))?;
    port.parse::<u16>()
        .map_err(|_| format!("{server:?}: bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| format!("{server:?}: {e}"))
}

struct ClientDispatch {
    events: mpsc::Sender<ClientEvent>,
    pending: Batch,
}

impl Dispatch for ClientDispatch {
    fn dispatch(&mut self, _session: &Session, message: Message) -> bool {
        self.pending.push(message);
        true
    }

    async fn flush(&mut self, _session: &Session) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        let messages = self.pending.take();
        let read_at = Instant::now();
        self.events
            .send(ClientEvent::Frames { messages, read_at })
            .await
            .is_ok()
    }
}

/// Where a client with `uuid` starts in a list of `count` servers: spread by UUID, so that the
/// agents given the same list of schedulers share them out rather than all dial the first.
pub fn first_server(uuid: Uuid, count: usize) -> usize {
    if count == 0 {
        return 0;
    }
    (uuid.as_u128() % count as u128) as usize
}

/// One stream of the events of several clients (one per server, for a peer that holds a session
/// with each), each with its client's index; it ends when every client's has.
pub fn merge(clients: Vec<mpsc::Receiver<ClientEvent>>) -> mpsc::Receiver<(usize, ClientEvent)> {
    forward(clients, |_, _| {})
}

/// Forwards each client's events into one channel, with its index, `seen` told of each event
/// before it goes.
fn forward(
    clients: Vec<mpsc::Receiver<ClientEvent>>,
    seen: impl Fn(usize, &ClientEvent) + Clone + Send + 'static,
) -> mpsc::Receiver<(usize, ClientEvent)> {
    let (tx, rx) = mpsc::channel(64);
    for (index, mut events) in clients.into_iter().enumerate() {
        let (tx, seen) = (tx.clone(), seen.clone());
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                seen(index, &event);
                if tx.send((index, event)).await.is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// [`merge`], also telling how long the events it holds for the application have waited
/// ([`Merged::oldest_waiting`]): how far behind the application is.
pub fn merge_timed(clients: Vec<mpsc::Receiver<ClientEvent>>) -> Merged {
    let waiting: Arc<Mutex<Vec<VecDeque<Instant>>>> =
        Arc::new(Mutex::new(vec![VecDeque::new(); clients.len()]));
    let held = waiting.clone();
    let events = forward(clients, move |index, event| {
        // Frames: when the client read them; another event: when it was taken from the client
        // (the frames read after it wait behind it).
        let since = match event {
            ClientEvent::Frames { read_at, .. } => *read_at,
            _ => Instant::now(),
        };
        if let Some(link) = lock(&held).get_mut(index) {
            link.push_back(since);
        }
    });
    Merged { events, waiting }
}

/// The events of several clients in one stream ([`merge_timed`]).
pub struct Merged {
    events: mpsc::Receiver<(usize, ClientEvent)>,
    /// For each client, since when each of its events taken from it and not yet by the
    /// application has waited, oldest first.
    waiting: Arc<Mutex<Vec<VecDeque<Instant>>>>,
}

impl Merged {
    /// The next event, with its client's index; `None` when every client's events ended.
    pub async fn recv(&mut self) -> Option<(usize, ClientEvent)> {
        let event = self.events.recv().await?;
        self.taken(event.0);
        Some(event)
    }

    /// The next event if one waits.
    pub fn try_recv(&mut self) -> Result<(usize, ClientEvent), mpsc::error::TryRecvError> {
        let event = self.events.try_recv()?;
        self.taken(event.0);
        Ok(event)
    }

    /// Since when the oldest event taken from the clients and not yet by the application has
    /// waited (frames: when they were read); `None` when none waits. (The events a client still
    /// holds came after those: a client hands them over in order, and one at a time is taken
    /// from each while the application is behind.)
    pub fn oldest_waiting(&self) -> Option<Instant> {
        lock(&self.waiting)
            .iter()
            .filter_map(|link| link.front().copied())
            .min()
    }

    fn taken(&self, index: usize) {
        if let Some(link) = lock(&self.waiting).get_mut(index) {
            link.pop_front();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter() {
        let b = Backoff::default();
        for n in 0..20 {
            let d = b.delay(n);
            let base = Duration::from_millis(500)
                .saturating_mul(1 << n.min(16))
                .min(b.max);
            assert!(d >= base / 2 && d <= base, "attempt {n}: {d:?}");
        }
        assert!(b.delay(30) <= Duration::from_secs(30));
    }

    #[test]
    fn server_names() {
        assert!(server_name("localhost:8888").is_ok());
        assert!(server_name("127.0.0.1:8888").is_ok());
        assert!(server_name("[::1]:8888").is_ok());
        assert!(server_name("localhost").is_err());
        assert!(server_name("localhost:x").is_err());
    }
}
