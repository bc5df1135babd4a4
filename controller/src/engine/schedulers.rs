//! Several schedulers side by side: one SSNTP session with each, and which of them a frame goes
//! to.
//!
//! Each scheduler holds the sessions of the agents that chose it (an agent dials one of its list
//! and moves to the next when its scheduler dies); a CNCI holds a session with every scheduler.
//! A controller holds a session with every scheduler, and [`Schedulers`] is its [`Outbound`]:
//!
//! - a frame for a node (DELETE, EVACUATE, INSTANCE_ACTION, ...) goes to the scheduler that holds
//!   the node's session: the last one that announced it (NODE_CONNECTED) or forwarded its frames;
//!   a frame for a CNCI to the last one that forwarded the CNCI's; when none is known, to the
//!   first connected scheduler (which answers DELIVERY_FAILURE if it cannot deliver);
//! - a START goes to the connected scheduler whose ready nodes have the most free memory (by
//!   their last STATS), a START pinned to a node to the node's scheduler. When a scheduler
//!   answers `full_cloud`, `no_cn` or `no_net_cn` itself, the START goes to the next scheduler
//!   that has not seen it, and only the last refusal reaches the engine;
//! - when a session with a scheduler ends, its nodes are unreachable (until another scheduler
//!   announces them) and the STARTs it took are returned ([`Schedulers::disconnected`]): the
//!   engine sends those that no node has reported again ([`Schedulers::resend`]) and deletes the
//!   second copy should both run ([`Engine::orphaned_starts`]);
//! - a NODE_DISCONNECTED from a scheduler that no longer holds the node (its agent moved to
//!   another scheduler, which announced it first) changes nothing.
//!
//! The STARTs kept for that are bounded: at most [`MAX_STARTS`], each for at most [`KEEP_START`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ssntp::Payload;
use ssntp::payload::{Addressee, NodeState, StartFailureReason};
use uuid::Uuid;

use super::{Engine, Outbound, SendFailure};

/// At most this many STARTs are kept for a retry on another scheduler (then the oldest go).
pub const MAX_STARTS: usize = 65_536;

/// A START is kept this long after it went: by then a node has reported it, or the engine has
/// judged it lost.
pub const KEEP_START: Duration = Duration::from_secs(120);

/// At most this many nodes and CNCIs are remembered with their scheduler (then the table starts
/// again, and learns each from its next frame).
const MAX_HOLDERS: usize = 1 << 20;

/// What to do with a frame a scheduler forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the engine.
    Apply,
    /// Drop it: it was handled here (a START sent to the next scheduler) or is stale.
    Skip,
}

/// A START that went, for a retry elsewhere.
struct Sent {
    start: Payload,
    trace: Option<String>,
    /// The schedulers it went to, the last one first.
    tried: Vec<usize>,
    at: Instant,
}

#[derive(Default)]
struct Table {
    /// Each scheduler's UUID, once its session opened.
    uuids: Vec<Option<Uuid>>,
    /// The scheduler (by index) that holds each node's or CNCI's session.
    holder: HashMap<Uuid, usize>,
    /// Each node's free memory by its last STATS (0 unless it is ready).
    room: HashMap<Uuid, u64>,
    starts: HashMap<Uuid, Sent>,
    /// `starts` by age.
    order: VecDeque<(Instant, Uuid)>,
}

impl Table {
    fn hold(&mut self, id: Uuid, link: usize) {
        if self.holder.len() >= MAX_HOLDERS && !self.holder.contains_key(&id) {
            self.holder.clear();
            self.room.clear();
        }
        self.holder.insert(id, link);
    }

    fn room_of(&self, link: usize) -> u64 {
        if self.uuids.len() < 2 {
            return 0;
        }
        self.holder
            .iter()
            .filter(|(_, l)| **l == link)
            .filter_map(|(id, _)| self.room.get(id))
            .sum()
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, id)) = self.order.front().copied() {
            let full = self.starts.len() >= MAX_STARTS;
            if !full && now.duration_since(at) < KEEP_START {
                break;
            }
            self.order.pop_front();
            if self.starts.get(&id).is_some_and(|s| s.at == at) {
                self.starts.remove(&id);
            }
        }
    }

    fn remember(&mut self, id: Uuid, sent: Sent) {
        self.expire(sent.at);
        self.order.push_back((sent.at, id));
        self.starts.insert(id, sent);
    }
}

/// The controller's sessions with every scheduler, as one [`Outbound`] (see the module docs).
pub struct Schedulers {
    links: Vec<Arc<dyn Outbound>>,
    table: Mutex<Table>,
}

impl Schedulers {
    /// Over one session per scheduler, in the order of the controller's list.
    pub fn new(links: Vec<Arc<dyn Outbound>>) -> Schedulers {
        let table = Table {
            uuids: vec![None; links.len()],
            ..Table::default()
        };
        Schedulers {
            links,
            table: Mutex::new(table),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the table's lock is held (tests).
    #[cfg(test)]
    pub(super) fn table_busy(&self) -> bool {
        self.table.try_lock().is_err()
    }

    /// How many schedulers there are.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The scheduler (by index) that holds `id`'s session, as far as is known.
    pub fn holder(&self, id: Uuid) -> Option<usize> {
        self.table().holder.get(&id).copied()
    }

    /// The session with scheduler `link` opened; the scheduler's UUID is `uuid`.
    pub fn opened(&self, link: usize, uuid: Uuid) {
        if let Some(slot) = self.table().uuids.get_mut(link) {
            *slot = Some(uuid);
        }
    }

    /// The session with scheduler `link` ended: the nodes it held (now unreachable) and the
    /// STARTs it took (to be sent again if no node has reported them).
    pub fn disconnected(&self, link: usize) -> (Vec<Uuid>, Vec<Uuid>) {
        let mut table = self.table();
        let mut nodes = Vec::new();
        table.holder.retain(|id, l| {
            let held = *l == link;
            if held {
                nodes.push(*id);
            }
            !held
        });
        for id in &nodes {
            table.room.remove(id);
        }
        let starts = table
            .starts
            .iter()
            .filter(|(_, s)| s.tried.first() == Some(&link))
            .map(|(id, _)| *id)
            .collect();
        (nodes, starts)
    }

    /// Sends the STARTs of `ids` again, to the schedulers that are connected (each to the one
    /// with the most room): those sent.
    pub fn resend(&self, ids: &[Uuid]) -> Vec<Uuid> {
        let mut sent = Vec::new();
        for id in ids {
            // Sent and remembered under the table's lock, as in `route`.
            let mut table = self.table();
            let Some((start, trace)) = table
                .starts
                .get(id)
                .map(|s| (s.start.clone(), s.trace.clone()))
            else {
                continue;
            };
            match self.send_start(&table, &start, trace.as_deref(), &[]) {
                Ok(link) => {
                    if let Some(s) = table.starts.get_mut(id) {
                        s.tried.insert(0, link);
                    }
                    sent.push(*id);
                }
                Err(e) => tracing::warn!(instance = %id, "START not sent again: {e}"),
            }
        }
        sent
    }

    /// What to do with `payload`, which scheduler `link` forwarded (or made, when `origin` is
    /// the scheduler's own UUID); updates who holds which node.
    pub fn inbound(&self, link: usize, origin: Uuid, payload: &Payload) -> Verdict {
        let mut table = self.table();
        let own = table.uuids.get(link).copied().flatten() == Some(origin);
        if !own {
            // Whoever's frame this is holds its session with this scheduler.
            table.hold(origin, link);
        }
        match payload {
            Payload::NodeConnected(e) => {
                table.hold(e.node_uuid, link);
                Verdict::Apply
            }
            Payload::NodeDisconnected(e) => match table.holder.get(&e.node_uuid).copied() {
                Some(holder) if holder != link => {
                    tracing::debug!(node = %e.node_uuid, "NODE_DISCONNECTED from a scheduler that no longer holds the node: ignored");
                    Verdict::Skip
                }
                _ => {
                    table.holder.remove(&e.node_uuid);
                    table.room.remove(&e.node_uuid);
                    Verdict::Apply
                }
            },
            Payload::Stats(stats) if !own => {
                let free = if stats.status == NodeState::Ready {
                    u64::from(stats.node.mem_available_mb)
                } else {
                    0
                };
                table.room.insert(origin, free);
                Verdict::Apply
            }
            Payload::StartFailure(f)
                if own
                    && matches!(
                        f.reason,
                        StartFailureReason::FullCloud
                            | StartFailureReason::NoCn
                            | StartFailureReason::NoNetCn
                    ) =>
            {
                let id = f.instance_uuid;
                let Some((start, trace, tried)) = table
                    .starts
                    .get(&id)
                    .map(|s| (s.start.clone(), s.trace.clone(), s.tried.clone()))
                else {
                    return Verdict::Apply;
                };
                // Sent and remembered under the table's lock, as in `route`.
                match self.send_start(&table, &start, trace.as_deref(), &tried) {
                    Ok(next) => {
                        tracing::info!(instance = %id, scheduler = link, next, "START refused ({:?}): sent to the next scheduler", f.reason);
                        if let Some(s) = table.starts.get_mut(&id) {
                            s.tried.insert(0, next);
                        }
                        Verdict::Skip
                    }
                    Err(_) => {
                        table.starts.remove(&id);
                        Verdict::Apply
                    }
                }
            }
            Payload::StartFailure(f) => {
                table.starts.remove(&f.instance_uuid);
                Verdict::Apply
            }
            _ => Verdict::Apply,
        }
    }

    /// The connected schedulers not in `tried`, the one with the most room first (a START
    /// pinned to a node: its scheduler first).
    fn candidates(&self, table: &Table, start: &Payload, tried: &[usize]) -> Vec<usize> {
        let pinned = match start {
            Payload::Start(s) => s.requirements.node_id.and_then(|n| table.holder.get(&n)),
            _ => None,
        };
        let mut order: Vec<(bool, u64, usize)> = (0..self.links.len())
            .filter(|l| !tried.contains(l) && self.links[*l].connected())
            .map(|l| (pinned == Some(&l), table.room_of(l), l))
            .collect();
        // Pinned first, then the most room; equal room: the list's order.
        order.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        order.into_iter().map(|(_, _, l)| l).collect()
    }

    /// Sends a START to the first candidate that takes it: that scheduler. The caller holds
    /// the table's lock, and remembers where the START went before it lets go (sending never
    /// waits: a full outbox is a failure).
    fn send_start(
        &self,
        table: &Table,
        start: &Payload,
        trace: Option<&str>,
        tried: &[usize],
    ) -> Result<usize, SendFailure> {
        let mut last = SendFailure::NotConnected;
        for link in self.candidates(table, start, tried) {
            let out = &self.links[link];
            let sent = match trace {
                Some(label) => out.send_traced(start, label),
                None => out.send(start),
            };
            match sent {
                Ok(()) => return Ok(link),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn route(&self, payload: &Payload, trace: Option<&str>) -> Result<(), SendFailure> {
        if let Payload::Start(s) = payload {
            // Chosen, sent and remembered under the table's lock: a scheduler's session that
            // ends meanwhile either finds the START remembered (`disconnected`, whose caller
            // sends it again) or ended before it was chosen (a link is marked disconnected
            // before its end is told), so it was not sent there.
            let mut table = self.table();
            let link = self.send_start(&table, payload, trace, &[])?;
            if self.links.len() < 2 {
                // Nowhere else to send it again.
                return Ok(());
            }
            let sent = Sent {
                start: payload.clone(),
                trace: trace.map(str::to_string),
                tried: vec![link],
                at: Instant::now(),
            };
            table.remember(s.instance_uuid, sent);
            return Ok(());
        }
        let holder = match payload.addressee() {
            Some(Addressee::Node(id) | Addressee::Cnci(id)) => self.holder(id),
            None => None,
        };
        let link = holder
            .filter(|l| self.links[*l].connected())
            .or_else(|| (0..self.links.len()).find(|l| self.links[*l].connected()))
            .ok_or(SendFailure::NotConnected)?;
        match trace {
            Some(label) => self.links[link].send_traced(payload, label),
            None => self.links[link].send(payload),
        }
    }
}

impl Outbound for Schedulers {
    fn send(&self, payload: &Payload) -> Result<(), SendFailure> {
        self.route(payload, None)
    }

    fn send_traced(&self, payload: &Payload, label: &str) -> Result<(), SendFailure> {
        self.route(payload, Some(label))
    }

    fn connected(&self) -> bool {
        self.links.iter().any(|l| l.connected())
    }
}

impl Engine {
    /// Of the instances whose START went to a scheduler whose session ended, those that no
    /// node has reported yet (still pending on no node, their START still awaited): their START
    /// is to go again. Should both STARTs run, the copy that a node reports second is deleted
    /// (`Engine::duplicate_listed`).
    pub fn orphaned_starts(&self, ids: &[Uuid]) -> Vec<Uuid> {
        let mut orphans = Vec::new();
        for id in ids {
            if !self.state().dispatched.contains_key(id) {
                continue;
            }
            match self.store.instance(store::Scope::All, *id) {
                Ok(i) if i.state == store::InstanceState::Pending && i.node.is_none() => {
                    orphans.push(*id)
                }
                _ => {}
            }
        }
        let mut state = self.state();
        if state.resent.len() + orphans.len() > super::MAX_DELETED {
            state.resent.clear();
        }
        state.resent.extend(orphans.iter().copied());
        orphans
    }

    /// A STATS of `node` lists instance `id`, whose START went twice and which the store places
    /// on another node: the second copy, deleted (again at most every `DELETE_RESEND`). `false`
    /// if it is not one.
    pub(super) fn duplicate_listed(&self, node: Uuid, id: Uuid, placed: Option<Uuid>) -> bool {
        if !self.duplicate_of(node, id, placed) {
            return false;
        }
        if self.delete_due(id, std::time::SystemTime::now()) {
            tracing::info!(instance = %id, %node, "DELETE of the second copy of an instance whose START went twice");
            if let Err(e) = self.send_delete(id, node, false) {
                tracing::warn!("DELETE of {id} not sent: {e}");
            }
        }
        true
    }

    /// Whether what `node` says of instance `id` is about the second copy of a START that went
    /// twice: the store places it on another node.
    pub(super) fn duplicate_of(&self, node: Uuid, id: Uuid, placed: Option<Uuid>) -> bool {
        placed.is_some_and(|p| p != node) && self.state().resent.contains(&id)
    }
}
