//! The [`Server`]: its accept loop under the connection limit, and each connection's life from
//! handshake to registration (PROTOCOL.md §4 step 5), run, and deregistration.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::config::{Delivery, ServerConfig, ServerError};
use super::dispatch::ServerDispatch;
use super::event::ServerEvent;
use super::handle::ServerHandle;
use super::handshake::Handshakes;
use super::registry::{Entry, Sessions};
use super::shared::{Counters, Shared};
use crate::conn::{self, Batch, Mode, Outbox};
use crate::handshaker::Handshaker;
use ssntp::Role;
use ssntp::frame::Frame;
use ssntp::handshake::UuidBinding;
use ssntp::payload::{Payload, Reason};

/// The server. Build it with [`Server::new`], run it with [`Server::run`].
pub struct Server {
    config: ServerConfig,
    handshakes: Arc<Handshakes>,
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
        if config.delivery == Delivery::Views && !config.routes.is_empty() {
            return Err(ServerError::ViewsWithRoutes);
        }
        if let UuidBinding::Bound(bound) = own.binding
            && bound != config.uuid
        {
            return Err(ServerError::Identity {
                bound,
                configured: config.uuid,
            });
        }
        let acceptor = TlsAcceptor::from(
            config
                .tls
                .server_config_revoking(config.revocations.as_ref())?,
        );
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
        let handshakes = Arc::new(Handshakes {
            acceptor,
            shared: shared.clone(),
            config: config.handshake,
        });
        Ok((
            Server {
                config,
                handshakes,
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
        let handshaking = Arc::new(Semaphore::new(self.config.max_handshakes.max(1)));
        // Connections waiting for a handshake slot.
        let waiting = Arc::new(Semaphore::new(self.config.max_handshakes.max(1)));
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
            let slot = match handshaking.clone().try_acquire_owned() {
                Ok(handshake) => Slot::Now(handshake),
                Err(_) => match waiting.clone().try_acquire_owned() {
                    Ok(queued) => Slot::Wait(queued),
                    Err(_) => {
                        tracing::warn!("too many unfinished handshakes; closing a new connection");
                        continue;
                    }
                },
            };
            crate::tune(&tcp);
            let this = this.clone();
            let inner = tracker.clone();
            let stop = shutdown.clone();
            let handshaker = handshaker.clone();
            let handshaking = handshaking.clone();
            tracker.spawn(async move {
                let handshake = match slot {
                    Slot::Now(handshake) => handshake,
                    Slot::Wait(queued) => {
                        let wait = this.config.handshake_wait;
                        let slot = tokio::select! {
                            s = tokio::time::timeout(wait, handshaking.acquire_owned()) => s,
                            _ = stop.cancelled() => return,
                        };
                        drop(queued);
                        match slot {
                            Ok(Ok(handshake)) => handshake,
                            _ => {
                                tracing::warn!(
                                    ?wait,
                                    "no handshake slot came free; closing a new connection"
                                );
                                return;
                            }
                        }
                    }
                };
                this.connection(tcp, handshake, handshaker.as_ref(), &inner, stop)
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

    /// Runs one connection: its handshake (holding `handshake`, one of the
    /// [`ServerConfig::max_handshakes`] slots, until it ends), then its session.
    async fn connection(
        self: &Arc<Self>,
        tcp: TcpStream,
        handshake: tokio::sync::OwnedSemaphorePermit,
        handshaker: Option<&Handshaker>,
        tracker: &TaskTracker,
        shutdown: CancellationToken,
    ) {
        let handshaken = self.handshakes.handshaken(tcp, handshaker).await;
        drop(handshake);
        let Some((stream, accepted, buf)) = handshaken else {
            return;
        };
        let max = self.shared.max_frame;
        let session = accepted.session;
        let (uuid, role) = (session.peer_uuid(), session.peer_role());
        // Its certificate's serial number, so that a later revocation list can end it.
        let serial: Box<[u8]> = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|der| crate::revocation::serial_of(der))
            .unwrap_or_default()
            .into();
        let opened = conn::open(stream, max, self.config.conn, tracker);
        let registered = self
            .register(
                uuid,
                (role, serial),
                accepted.bound,
                &accepted.reply,
                (opened.outbox(), opened.received()),
            )
            .await;
        let generation = match registered {
            Ok(generation) => generation,
            Err(refused) => {
                // Nothing was registered; a live session of the UUID is left alone.
                if let Some(reason) = refused.reason() {
                    tracing::warn!(%uuid, %role, bound = accepted.bound, "refused: {refused}");
                    let refused = Payload::ConnectionAborted(Reason::new(reason));
                    let _ = opened
                        .outbox()
                        .send(&Frame::new(self.shared.uuid, &refused));
                }
                // The writer sends what is queued, then closes the connection.
                opened.outbox().close();
                return;
            }
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
            pending: Batch::default(),
            views: None,
            barrier_seen: false,
            held: None,
            uncounted: None,
        };
        let outbox = opened.outbox().clone();
        let rate = self.config.read_rates.for_role(role);
        // A session without a read budget may send at full speed: its payloads are decoded
        // beside its reader, not by it (`conn::Sink::Staged`), unless the application takes
        // views, which need no decoding beside the reader.
        let mode = match (self.config.delivery, rate) {
            (Delivery::Views, _) => Mode::Views,
            (Delivery::Messages, None) => Mode::Staged,
            (Delivery::Messages, Some(_)) => Mode::Inline,
        };
        let mut done = opened.run(
            session,
            buf,
            read_room(&self.config.conn, rate.as_ref()),
            rate,
            dispatch,
            mode,
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
    /// (`bound`); otherwise nothing is added (PROTOCOL.md §4 step 5). The server's own UUID,
    /// held by the server itself, and the nil UUID, which names no endpoint, are never added.
    async fn register(
        &self,
        uuid: Uuid,
        (role, serial): (Role, Box<[u8]>),
        bound: bool,
        reply: &Frame,
        (outbox, received): (&Outbox, Arc<conn::Stamp>),
    ) -> Result<u64, Refused> {
        if uuid == self.shared.uuid {
            return Err(Refused::ServersOwn);
        }
        if uuid.is_nil() {
            return Err(Refused::Nil);
        }
        let generation = self.shared.generation.fetch_add(1, Ordering::Relaxed);
        let old = {
            let mut registry = self.shared.write();
            if !bound && registry.get(&uuid).is_some() {
                return Err(Refused::LiveSession);
            }
            outbox.send(reply).map_err(|_| Refused::Closed)?;
            registry.insert(
                uuid,
                Entry {
                    role,
                    outbox: outbox.clone(),
                    generation,
                    received,
                    serial,
                },
            )
        };
        if let Some(old) = old {
            let replaced = Payload::ConnectionAborted(Reason::new(Reason::REPLACED));
            let _ = old
                .outbox
                .send_frame(Frame::new(self.shared.uuid, &replaced));
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
        Ok(generation)
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

/// Why a client that passed the handshake gets no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Refused {
    /// A live session holds the UUID and the client's certificate does not bind it.
    #[error("a certificate that binds no UUID claimed a live session's")]
    LiveSession,
    /// The UUID is the server's own, held by the live server itself.
    #[error("a client claimed the server's own UUID")]
    ServersOwn,
    /// The nil UUID stands for "none" in payloads and names no endpoint.
    #[error("a client claimed the nil UUID")]
    Nil,
    /// The connection closed before CONNECTED could be queued: nothing to answer.
    #[error("closed before CONNECTED")]
    Closed,
}

impl Refused {
    /// The reason CONNECTION_ABORTED carries, if there is anyone to tell.
    fn reason(self) -> Option<&'static str> {
        match self {
            Refused::LiveSession => Some(Reason::UUID_IN_USE),
            Refused::ServersOwn => Some(Reason::SERVER_UUID),
            Refused::Nil => Some(Reason::NIL_UUID),
            Refused::Closed => None,
        }
    }
}

/// A new connection's claim on a handshake slot.
enum Slot {
    /// A slot was free.
    Now(tokio::sync::OwnedSemaphorePermit),
    /// A place among the connections waiting for one.
    Wait(tokio::sync::OwnedSemaphorePermit),
}

/// The read buffer of a session whose read budget is `rate`: the larger one for a session
/// without a budget (see [`conn::ConnConfig::unbudgeted_read_buffer`]).
fn read_room(config: &conn::ConnConfig, rate: Option<&crate::rate::ReadRate>) -> usize {
    match rate {
        Some(_) => config.read_buffer,
        None => config.unbudgeted_read_buffer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReadRates;

    #[test]
    fn only_a_session_without_a_read_budget_reads_into_the_larger_buffer() {
        let config = conn::ConnConfig::default();
        let rates = ReadRates::default();
        let controller = rates.for_role(Role::CONTROLLER);
        let agent = rates.for_role(Role::AGENT);
        assert_eq!(
            read_room(&config, controller.as_ref()),
            config.unbudgeted_read_buffer
        );
        assert_eq!(read_room(&config, agent.as_ref()), config.read_buffer);
        assert!(config.unbudgeted_read_buffer > config.read_buffer);
        // With budgets lifted, every session is read as a controller's.
        let unlimited = ReadRates::UNLIMITED.for_role(Role::AGENT);
        assert_eq!(
            read_room(&config, unlimited.as_ref()),
            config.unbudgeted_read_buffer
        );
    }
}
