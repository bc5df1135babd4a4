//! What a session's reader does with each message it receives ([`ServerDispatch`]): forward it
//! by the routing rules, or batch it for the application, holding later frames behind a barrier
//! until the application has handled it.

use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::event::{Handled, ServerEvent};
use super::registry::Registry;
use super::shared::{Shared, Target};
use crate::conn::{Batch, Dispatch};
use crate::forward::{Route, Routes};
use ssntp::frame::Operand;
use ssntp::payload::DeliveryFailureReason;
use ssntp::session::{Message, Session};
use ssntp::view::Frames;

/// A session's reader's routing state.
pub(super) struct ServerDispatch {
    pub(super) shared: Arc<Shared>,
    pub(super) routes: Routes,
    pub(super) events: mpsc::Sender<ServerEvent>,
    /// Messages for the application, delivered at the next flush.
    pub(super) pending: Batch,
    /// A read's frames for the application, as views, delivered at the next flush.
    pub(super) views: Option<Frames>,
    /// Whether this session's barrier ([`Routes::barrier_on_first`]) has come.
    pub(super) barrier_seen: bool,
    /// From the barrier until the application has handled it: the messages read after it,
    /// routed at the flush (at most one read's worth).
    pub(super) held: Option<Vec<Message>>,
    /// Frames received and not yet added to the server's counters: a run of one operand, added
    /// when another comes and at each flush (before the application sees them), so that a
    /// session's reader does not touch the counters, shared by every session, for each frame.
    pub(super) uncounted: Option<(Operand, u64)>,
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
            messages: self.pending.take(),
            handled,
        };
        self.events.send(event).await.is_ok()
    }

    /// Counts a frame received with `operand` (see [`ServerDispatch::uncounted`]).
    fn count(&mut self, operand: Operand) {
        match &mut self.uncounted {
            Some((run, n)) if *run == operand => *n += 1,
            uncounted => {
                if let Some((run, n)) = uncounted.replace((operand, 1)) {
                    self.shared.counters.count_in(run, n);
                }
            }
        }
    }
}

impl Dispatch for ServerDispatch {
    fn dispatch(&mut self, session: &Session, message: Message) -> bool {
        self.count(message.frame.operand);
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

    fn dispatch_views(&mut self, _: &Session, frames: Frames) -> bool {
        // Views are delivered only with routes that send every frame to the application.
        for entry in frames.entries() {
            self.count(entry.operand());
        }
        // One read's frames a flush (the reader flushes after each read).
        debug_assert!(self.views.is_none(), "a read's views not flushed");
        self.views = Some(frames);
        true
    }

    async fn flush(&mut self, session: &Session) -> bool {
        if let Some((run, n)) = self.uncounted.take() {
            self.shared.counters.count_in(run, n);
        }
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
        if let Some(frames) = self.views.take() {
            let event = ServerEvent::Views {
                uuid: session.peer_uuid(),
                role: session.peer_role(),
                frames,
            };
            if self.events.send(event).await.is_err() {
                return false;
            }
        }
        self.deliver(session, None).await
    }
}
