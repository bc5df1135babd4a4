//! Ephemeral workloads: their instances hold nothing worth keeping, so when their node is
//! evacuated or lost they start again elsewhere, from the image, rather than waiting there.
//!
//! The rule (`docs/api.md`, "Ephemeral workloads", says the same to users), for instances of an
//! ephemeral workload placed on the node:
//! - running ones (`active`, `paused`, `suspended`, `pending`) become `pending` on no node and get
//!   a fresh START (not a restart, not pinned: the scheduler places it). For a lost node the START
//!   goes at once (the scheduler no longer places on it); for an evacuated one, once the node's
//!   STATS shows it in maintenance (so that the scheduler, which learns it from the node, does
//!   not place the START back there), or after [`EngineConfig::confirm_timeout`] at the latest;
//! - stopped ones (`exited`, `stopping`) become `exited` on no node: a start builds them anew
//!   from the image wherever the scheduler places them;
//! - each gets an `evacuate` action in its actions log and an event naming the old node;
//! - the old node's copy is stale: an evacuated node gets a DELETE (`stop` false) at once; a lost
//!   one gets it when it comes back and its STATS still lists the instance. Until the old node
//!   no longer holds it, whatever that node reports of the instance (STATS, INSTANCE_STOPPED,
//!   INSTANCE_DELETED, START_FAILURE, DELETE_FAILURE) is about the stale copy and never changes
//!   the record.
//!
//! What is remembered of a move is in memory: a controller restarted meanwhile forgets which node
//! holds a stale copy (a deferred START is then given up as `start_lost` by the sweep).
//!
//! [`EngineConfig::confirm_timeout`]: super::EngineConfig::confirm_timeout

use std::collections::HashMap;
use std::time::SystemTime;

use uuid::Uuid;

use super::Engine;
use crate::actions::ActionKind;
use crate::cluster::{Caller, ClusterError};
use store::{
    EventKind, Instance, InstanceChange, InstanceFilter, InstanceState, Scope, StoreError,
};

/// Why an ephemeral instance leaves its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    /// An admin evacuated the node.
    Evacuated,
    /// The node was lost (its session ended, or the scheduler judged it dead).
    Lost,
}

impl Why {
    fn words(self) -> &'static str {
        match self {
            Why::Evacuated => "was evacuated",
            Why::Lost => "was lost",
        }
    }
}

/// Instances of evacuated nodes waiting for their node's STATS in maintenance before their
/// START goes, by node: since when, and which.
pub(super) type Deferred = HashMap<Uuid, (SystemTime, Vec<Uuid>)>;

/// At most this many moved instances are remembered (then the map starts again).
const MAX_RELOCATED: usize = 100_000;

/// Whether an instance in `state` runs (and so starts again elsewhere), is stopped (and so
/// stays stopped, on no node), or neither (left alone).
fn runs(state: &InstanceState) -> Option<bool> {
    match state {
        InstanceState::Active
        | InstanceState::Paused
        | InstanceState::Suspended
        | InstanceState::Pending => Some(true),
        InstanceState::Exited | InstanceState::Stopping => Some(false),
        _ => None,
    }
}

impl Engine {
    /// Moves the ephemeral instances of `node` off it (see the module docs). A lost node's
    /// running ones get their START now; an evacuated node's wait for [`Engine::start_deferred`].
    pub(super) fn relocate_ephemeral(&self, node: Uuid, why: Why) -> Result<(), ClusterError> {
        let mut placed = Vec::new();
        self.for_each_instance(Scope::All, InstanceFilter { node: Some(node) }, |i| {
            if runs(&i.state).is_some() {
                placed.push(i.clone());
            }
        })?;
        let mut ephemeral: HashMap<Uuid, bool> = HashMap::new();
        let mut to_start = Vec::new();
        for instance in placed {
            let is_ephemeral = match ephemeral.get(&instance.workload) {
                Some(known) => *known,
                None => {
                    let known = match self.store.workload(Scope::All, instance.workload) {
                        Ok(w) => w.ephemeral,
                        Err(StoreError::NotFound { .. }) => false,
                        Err(e) => return Err(e.into()),
                    };
                    ephemeral.insert(instance.workload, known);
                    known
                }
            };
            if !is_ephemeral {
                continue;
            }
            if let Some(moved) = self.move_off(&instance, node, why)? {
                to_start.push(moved.id);
            }
        }
        if to_start.is_empty() {
            return Ok(());
        }
        match why {
            Why::Lost => self.start_moved(node, &to_start),
            Why::Evacuated => {
                self.state()
                    .deferred
                    .entry(node)
                    .or_insert_with(|| (SystemTime::now(), Vec::new()))
                    .1
                    .extend(to_start);
                Ok(())
            }
        }
    }

    /// Moves one ephemeral instance off `node` in the store, recording it; `Some` when it runs
    /// and needs its START.
    fn move_off(
        &self,
        instance: &Instance,
        node: Uuid,
        why: Why,
    ) -> Result<Option<Instance>, ClusterError> {
        let Some(run) = runs(&instance.state) else {
            return Ok(None);
        };
        let to = if run {
            InstanceState::Pending
        } else {
            InstanceState::Exited
        };
        // Unless it moved meanwhile (a delete, a report).
        let moved = self.transition(Scope::All, instance.id, |current| {
            let still = current.node == Some(node) && runs(&current.state) == Some(run);
            Ok(still.then(|| {
                (
                    InstanceChange {
                        state: Some(to.clone()),
                        node: Some(None),
                        fault: Some(None),
                        cnci: Some(None),
                        ..InstanceChange::default()
                    },
                    (),
                )
            }))
        });
        let moved = match moved {
            Ok(Some((moved, ()))) => moved,
            Ok(None) | Err(ClusterError::Store(StoreError::NotFound { .. })) => return Ok(None),
            Err(e) => return Err(e),
        };
        {
            let mut state = self.state();
            if state.relocated.len() >= MAX_RELOCATED {
                state.relocated.clear();
            }
            state.relocated.insert(moved.id, node);
            state.unconfirmed.remove(&moved.id);
            state.dispatched.remove(&moved.id);
        }
        let ticket = self.begin_action(moved.id, ActionKind::Evacuate, &Caller::default());
        // An evacuated node removes its copy now; a lost one when it is back and lists it.
        let removed = match why {
            Why::Evacuated => self.send_delete(moved.id, node, false),
            Why::Lost => Ok(()),
        };
        self.finish_action(&ticket, &removed);
        if let Err(e) = &removed {
            tracing::warn!("DELETE of {} on node {node} not sent: {e}", moved.id);
        }
        self.event(
            Some(moved.tenant),
            EventKind::Warning,
            if run {
                format!(
                    "instance {} (ephemeral) starts again elsewhere from its image: its node {node} {}",
                    moved.id,
                    why.words()
                )
            } else {
                format!(
                    "instance {} (ephemeral, stopped) is on no node now: its node {node} {}; a start builds it from its image",
                    moved.id,
                    why.words()
                )
            },
        );
        Ok(run.then_some(moved))
    }

    /// Sends the fresh START of each moved instance that still waits for it (pending on no
    /// node, moved off `node`).
    fn start_moved(&self, node: Uuid, ids: &[Uuid]) -> Result<(), ClusterError> {
        for id in ids {
            let instance = match self.store.instance(Scope::All, *id) {
                Ok(i) => i,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let waits = instance.state == InstanceState::Pending
                && instance.node.is_none()
                && self.state().relocated.get(id) == Some(&node);
            if !waits {
                continue;
            }
            let plan = self.plan(Scope::Tenant(instance.tenant), instance.workload)?;
            self.dispatch(instance, &plan, false)?;
        }
        Ok(())
    }

    /// Sends the deferred STARTs of `node`'s evacuation: its STATS shows it in maintenance, it
    /// was lost, or (with `overdue_at`) it has not shown maintenance within the confirmation
    /// timeout.
    pub(super) fn start_deferred(
        &self,
        node: Uuid,
        overdue_at: Option<SystemTime>,
    ) -> Result<(), ClusterError> {
        let due = {
            let mut state = self.state();
            let is_due = state.deferred.get(&node).is_some_and(|(since, _)| {
                overdue_at.is_none_or(|now| {
                    now.duration_since(*since).unwrap_or_default() >= self.config.confirm_timeout
                })
            });
            if is_due {
                state.deferred.remove(&node)
            } else {
                None
            }
        };
        match due {
            Some((_, ids)) => self.start_moved(node, &ids),
            None => Ok(()),
        }
    }

    /// The deferred STARTs whose node never showed maintenance in time go anyway.
    pub(super) fn sweep_deferred(&self, now: SystemTime) -> Result<(), ClusterError> {
        let nodes: Vec<Uuid> = self.state().deferred.keys().copied().collect();
        for node in nodes {
            self.start_deferred(node, Some(now))?;
        }
        Ok(())
    }

    /// Whether what `from` reports of instance `id` is about a stale copy: `from` is the node
    /// it was moved off (any node, when the sender is not known), or a node other than the one
    /// that the record places it on.
    pub(super) fn stale_report(&self, from: Option<Uuid>, id: Uuid, placed: Option<Uuid>) -> bool {
        let moved_off = self.state().relocated.get(&id).copied();
        match (moved_off, from) {
            (Some(old), Some(from)) if old == from && placed != Some(from) => true,
            (Some(_), None) => true,
            (_, Some(from)) => placed.is_some_and(|p| p != from),
            (None, None) => false,
        }
    }

    /// A STATS of `node` lists moved instance `id`, which the store does not place there: its
    /// stale copy, deleted (again at most every `DELETE_RESEND`). `false` if it is not one.
    pub(super) fn stale_listed(&self, node: Uuid, id: Uuid, placed: Option<Uuid>) -> bool {
        if self.state().relocated.get(&id) != Some(&node) || placed == Some(node) {
            return false;
        }
        if self.delete_due(id, SystemTime::now()) {
            tracing::info!(instance = %id, %node, "DELETE of a moved instance's stale copy");
            if let Err(e) = self.send_delete(id, node, false) {
                tracing::warn!("DELETE of {id} not sent: {e}");
            }
        }
        true
    }

    /// After a STATS of `node` that did not list them: its stale copies are gone.
    pub(super) fn stale_gone(&self, node: Uuid, listed: &[Uuid]) {
        self.state()
            .relocated
            .retain(|id, old| *old != node || listed.contains(id));
    }

    /// The old node confirmed that the stale copy of `id` is gone (INSTANCE_DELETED, or a
    /// DELETE_FAILURE `no_instance`): `true` if `id` was moved off `from` (or off any node
    /// when the sender is not known).
    pub(super) fn stale_removed(&self, from: Option<Uuid>, id: Uuid) -> bool {
        let mut state = self.state();
        let Some(old) = state.relocated.get(&id).copied() else {
            return false;
        };
        if from.is_some_and(|from| from != old) {
            return false;
        }
        state.relocated.remove(&id);
        state.delete_sent.remove(&id);
        true
    }
}
