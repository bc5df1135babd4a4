//! The SSNTP [`Reporter`]: the core's reports become frames (through [`crate::wire`]) queued on
//! the SSNTP client's current session. It never holds the core up for long:
//!
//! - status and STATS are queued without waiting; with no session, or a full session queue,
//!   they are dropped: the next interval, or the next connect, sends fresh ones;
//! - instance events (START_FAILURE, INSTANCE_DELETED, INSTANCE_STOPPED, ...) wait at most
//!   [`EVENT_WAIT`] for room in a full session queue. With no session they are kept in a bounded
//!   backlog ([`BACKLOG`] events; past that the oldest are dropped) and sent first on the next
//!   connect. ciao's launcher dropped them; here they are kept because the agent has no session
//!   yet when, starting up, it reports the instances it lost while it was away;
//! - the latest status (READY, FULL or MAINTENANCE) is kept, and sent first on every connect,
//!   before the backlog and before the core's fresh announce.
//!
//! [`Outbound`] holds the latest status and the backlog; the client's announce hook and the
//! daemon's connect handling share it with the reporter.

use ssntp::Payload;
use ssntp::frame::Frame;
use ssntp_net::{ClientHandle, SendError};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use uuid::Uuid;

use crate::model::{InstanceEvent, InstanceReport, InstanceState, NodeReport};
use crate::reporter::Reporter;
use crate::wire;

/// How long an instance event waits for room in a full session queue before it is dropped.
pub const EVENT_WAIT: Duration = Duration::from_secs(1);

/// How many instance events are kept while there is no session.
pub const BACKLOG: usize = 1_024;

#[derive(Debug, Default)]
struct State {
    latest: Option<Payload>,
    backlog: VecDeque<Payload>,
    /// Events dropped from a full backlog since the last connect.
    overflow: u64,
}

impl State {
    /// Keeps an event for the next session; past [`BACKLOG`] events, the oldest goes.
    fn keep(&mut self, payload: Payload) {
        if self.backlog.len() >= BACKLOG {
            self.backlog.pop_front();
            self.overflow += 1;
        }
        self.backlog.push_back(payload);
    }
}

/// What goes out first on the next connect: the latest status, then the events kept while
/// disconnected. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Outbound(Arc<Mutex<State>>);

impl Outbound {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The frames to send first on a new session (for the client's announce hook): the latest
    /// status, then the backlog, which is emptied.
    pub fn announce(&self) -> Vec<Payload> {
        let mut state = self.lock();
        if state.overflow > 0 {
            tracing::warn!(
                dropped = state.overflow,
                "instance events dropped while disconnected"
            );
            state.overflow = 0;
        }
        let mut out = Vec::with_capacity(state.backlog.len() + 1);
        out.extend(state.latest.clone());
        out.extend(state.backlog.drain(..));
        out
    }

    /// The latest status reported, if any.
    pub fn latest(&self) -> Option<Payload> {
        self.lock().latest.clone()
    }

    /// How many events wait for a session.
    pub fn backlog(&self) -> usize {
        self.lock().backlog.len()
    }

    /// Sends what the backlog holds on `client`'s session, in order, as far as it goes (what is
    /// not taken stays for the next report or connect).
    pub fn flush(&self, client: &ClientHandle) {
        if let Err(e) = flush(&mut self.lock(), client) {
            tracing::debug!(error = %e, "backlog kept for later");
        }
    }
}

/// Sends the backlog in order; stops (keeping the rest) at the first frame not taken.
fn flush(state: &mut State, client: &ClientHandle) -> Result<(), SendError> {
    while let Some(payload) = state.backlog.front() {
        match client.send_payload(payload) {
            Ok(()) => {}
            Err(SendError::Encode(e)) => {
                tracing::error!(operand = %payload.operand(), error = %e, "event not sent")
            }
            Err(e) => return Err(e),
        }
        state.backlog.pop_front();
    }
    Ok(())
}

/// The wall clock in ns since the Unix epoch (trace times).
pub(super) fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Sends the core's reports as SSNTP frames.
pub struct SsntpReporter {
    client: ClientHandle,
    node: Uuid,
    outbound: Outbound,
    /// Traced STARTs waiting for their outcome (the daemon keeps them as they arrive).
    traces: super::traces::Traces,
    /// Frames dropped because the session's queue was full.
    busy_drops: u64,
}

impl SsntpReporter {
    /// A reporter sending on `client`'s sessions as node `node`, sharing `outbound` with the
    /// client's announce hook, reporting the traced STARTs `traces` keeps when their outcome
    /// comes.
    pub fn new(
        client: ClientHandle,
        node: Uuid,
        outbound: Outbound,
        traces: super::traces::Traces,
    ) -> SsntpReporter {
        SsntpReporter {
            client,
            node,
            outbound,
            traces,
            busy_drops: 0,
        }
    }

    fn dropped(&mut self, payload: &Payload, error: &SendError) {
        match error {
            SendError::NotConnected => {
                tracing::debug!(operand = %payload.operand(), "not connected: report dropped");
            }
            SendError::Busy => {
                self.busy_drops += 1;
                if self.busy_drops.is_power_of_two() {
                    tracing::warn!(
                        operand = %payload.operand(),
                        dropped = self.busy_drops,
                        "the scheduler is not reading: reports dropped"
                    );
                }
            }
            SendError::Encode(e) => {
                tracing::error!(operand = %payload.operand(), error = %e, "report not sent");
            }
        }
    }

    /// Queues a status or STATS without waiting (after the backlog, if a session is back).
    fn send_now(&mut self, payload: &Payload) {
        let result = {
            let mut state = self.outbound.lock();
            flush(&mut state, &self.client).and_then(|()| self.client.send_payload(payload))
        };
        if let Err(e) = result {
            self.dropped(payload, &e);
        }
    }

    /// Queues an event after the backlog ([`EventSender::send`]).
    async fn send_event(&mut self, payload: Payload) {
        if let Err((payload, e)) = self.events().send_inner(payload).await {
            self.dropped(&payload, &e);
        }
    }

    fn events(&self) -> EventSender {
        EventSender {
            client: self.client.clone(),
            node: self.node,
            outbound: self.outbound.clone(),
        }
    }
}

/// Sends events (frames that must not be lost to a short disconnection) the way
/// [`SsntpReporter`] sends instance events: after the backlog, into the backlog while there is
/// no session. The daemon uses it for TENANT_ADDED and TENANT_REMOVED.
#[derive(Clone)]
pub struct EventSender {
    client: ClientHandle,
    node: Uuid,
    outbound: Outbound,
}

impl EventSender {
    /// A sender on `client`'s sessions as node `node`, sharing `outbound` (and so its backlog)
    /// with the [`SsntpReporter`].
    pub fn new(client: ClientHandle, node: Uuid, outbound: Outbound) -> EventSender {
        EventSender {
            client,
            node,
            outbound,
        }
    }

    /// Queues an event after the backlog. While disconnected, or while the backlog cannot be
    /// sent, it joins the backlog (order kept); when only its own frame finds the queue full,
    /// it waits at most [`EVENT_WAIT`] for room, and is dropped (with a warning) after that.
    pub async fn send(&self, payload: Payload) {
        if let Err((payload, e)) = self.send_inner(payload).await {
            tracing::warn!(operand = %payload.operand(), error = %e, "event not sent");
        }
    }

    async fn send_inner(&self, payload: Payload) -> Result<(), (Payload, SendError)> {
        let frame = Frame::new(self.node, &payload);
        {
            let mut state = self.outbound.lock();
            let result = match flush(&mut state, &self.client) {
                Ok(()) => self.client.send(&frame),
                Err(_) => Err(SendError::NotConnected),
            };
            match result {
                Ok(()) => return Ok(()),
                Err(SendError::NotConnected) => {
                    state.keep(payload);
                    return Ok(());
                }
                Err(SendError::Busy) => {}
                Err(e) => return Err((payload, e)),
            }
        }
        let waited = tokio::time::timeout(EVENT_WAIT, self.client.send_wait(&frame)).await;
        match waited.unwrap_or(Err(SendError::Busy)) {
            Ok(()) => Ok(()),
            Err(e) => Err((payload, e)),
        }
    }
}

impl Reporter for SsntpReporter {
    async fn status(&mut self, node: &NodeReport) {
        let payload = wire::status_payload(node);
        self.send_now(&payload);
        self.outbound.lock().latest = Some(payload);
    }

    async fn stats(&mut self, node: &NodeReport, instances: &[InstanceReport]) {
        self.send_now(&wire::stats_payload(node, instances));
    }

    async fn event(&mut self, event: &InstanceEvent) {
        if let Some(payload) = wire::event_payload(event, self.node) {
            self.send_event(payload).await;
        }
        // A START's outcome: the first state past admission (running, or stopped), or its
        // failure. Sent like a STATS: never kept for a later session, never waited for.
        let started = match event {
            InstanceEvent::State { instance, state } if *state != InstanceState::Pending => {
                Some(*instance)
            }
            InstanceEvent::StartFailed { instance, .. } => Some(*instance),
            _ => None,
        };
        if let Some(instance) = started
            && let Some(report) = self.traces.done(instance, unix_ns())
        {
            self.send_now(&Payload::TraceReport(report));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::payload::{InstanceEvent as Event, NodeStatus};

    fn stopped(n: u128) -> Payload {
        Payload::InstanceStopped(Event {
            instance_uuid: Uuid::from_u128(n),
        })
    }

    #[test]
    fn the_latest_status_then_the_newest_events_in_order_once() {
        let outbound = Outbound::default();
        assert!(outbound.announce().is_empty());
        let ready = Payload::Ready(NodeStatus {
            node_uuid: Uuid::from_u128(1),
            hostname: "n".into(),
            mem_total_mb: 1,
            mem_available_mb: 1,
            disk_total_mb: 1,
            disk_available_mb: 1,
            vcpus_total: 1,
            vcpus_available: 1,
            load: 0,
            networks: vec![],
            zone: None,
        });
        outbound.lock().latest = Some(ready.clone());
        let extra = 5;
        for n in 0..(BACKLOG as u128 + extra) {
            outbound.lock().keep(stopped(n));
        }
        assert_eq!(outbound.backlog(), BACKLOG);
        let first = outbound.announce();
        assert_eq!(first.len(), BACKLOG + 1);
        assert_eq!(first[0], ready, "the status first");
        assert_eq!(first[1], stopped(extra), "the oldest events went");
        assert_eq!(first[BACKLOG], stopped(BACKLOG as u128 + extra - 1));
        assert_eq!(outbound.backlog(), 0);
        assert_eq!(
            outbound.announce(),
            vec![ready],
            "events go once; the status every time"
        );
    }
}
