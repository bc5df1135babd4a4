//! The periodic sweep: confirmations that never came, and the CNCIs' timers.

use std::time::SystemTime;

use uuid::Uuid;

use super::{Engine, START_LOST};
use crate::actions;
use crate::cluster::ClusterError;
use store::{EventKind, EventOutcome, Instance, InstanceState, Scope, StoreError};

impl Engine {
    /// Applies the timers at `now`: a DELETE unconfirmed for [`confirm_timeout`] makes the
    /// instance `hung`, a stop makes it `missing`; CNCI launches time out, exited CNCIs restart,
    /// idle ones go.
    ///
    /// [`confirm_timeout`]: super::EngineConfig::confirm_timeout
    pub fn sweep(&self, now: SystemTime) -> Result<(), ClusterError> {
        let overdue: Vec<Uuid> = {
            let state = self.state();
            state
                .unconfirmed
                .iter()
                .filter(|(_, since)| {
                    now.duration_since(**since).unwrap_or_default() >= self.config.confirm_timeout
                })
                .map(|(id, _)| *id)
                .collect()
        };
        for id in overdue {
            {
                let mut state = self.state();
                state.unconfirmed.remove(&id);
            }
            let record = match self.store.instance(Scope::All, id) {
                Ok(record) => record,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let (state, what) = match record.state {
                // Never placed anywhere this controller heard of (its START was lost): there
                // is nothing to delete.
                InstanceState::Deleted if record.node.is_none() => {
                    self.event(
                        Some(record.tenant),
                        EventKind::Warning,
                        format!(
                            "instance {id}: deleted, and no node reported it within {:?}; forgotten",
                            self.config.confirm_timeout
                        ),
                    );
                    self.forget(&record)?;
                    continue;
                }
                InstanceState::Deleted => (InstanceState::Hung, "delete"),
                InstanceState::Stopping => (InstanceState::Missing, "stop"),
                _ => continue,
            };
            self.event(
                Some(record.tenant),
                EventKind::Warning,
                format!(
                    "instance {id}: the {what} was not confirmed within {:?}",
                    self.config.confirm_timeout
                ),
            );
            let was = record.state.clone();
            self.set_state_if(id, state, |i| i.state == was)?;
        }
        self.refresh_disabled()?;
        self.sweep_lost_starts(now)?;
        self.sweep_deferred(now)?;
        self.sweep_cncis(now)?;
        self.sweep_firewalls()?;
        self.sweep_volumes(now)?;
        self.sweep_public_ips(now)
    }

    /// Pending instances whose START no node reported within the confirmation timeout: lost
    /// with a scheduler or an agent that died; `error` (`start_lost`), `active` again if a node
    /// reports them after all.
    ///
    /// At most [`LOST_STARTS_PER_SWEEP`] a sweep, the oldest first; the others wait for the next
    /// sweep. The engine's loop applies no frame while a sweep runs, and each is a store read
    /// and write (about 12 ms over etcd): 39,979 in one sweep, as in a load run whose controller
    /// had fallen a minute behind its nodes' reports, held the frames for minutes, and the
    /// reports that would have found most of them active waited behind it.
    ///
    /// Only the time the engine's loop kept up counts (see [`Engine::note_backlog`]): none while
    /// it is behind, and a START sent before it caught up waits the whole timeout from then.
    fn sweep_lost_starts(&self, now: SystemTime) -> Result<(), ClusterError> {
        let Some(keeping_up) = self.keeping_up_since() else {
            return Ok(());
        };
        let overdue: Vec<Uuid> = {
            let mut state = self.state();
            let mut overdue: Vec<(SystemTime, Uuid)> = state
                .dispatched
                .iter()
                .filter(|(_, since)| {
                    let from = (**since).max(keeping_up);
                    now.duration_since(from).unwrap_or_default() >= self.config.confirm_timeout
                })
                .map(|(id, since)| (*since, *id))
                .collect();
            if overdue.len() > LOST_STARTS_PER_SWEEP {
                overdue.select_nth_unstable(LOST_STARTS_PER_SWEEP);
                overdue.truncate(LOST_STARTS_PER_SWEEP);
            }
            overdue.sort_unstable();
            for (_, id) in &overdue {
                state.dispatched.remove(id);
            }
            overdue.into_iter().map(|(_, id)| id).collect()
        };
        for id in overdue {
            let record = match self.store.instance(Scope::All, id) {
                Ok(record) => record,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            // Unplaced, or a rebuild whose pinned START went.
            let rebuilding = self.rebuild_under_way(id);
            let unplaced = |i: &Instance| {
                (i.state == InstanceState::Pending && i.node.is_none())
                    || (i.state == InstanceState::Rebuilding && rebuilding)
            };
            if !unplaced(&record) {
                continue;
            }
            self.event(
                Some(record.tenant),
                EventKind::Error,
                format!(
                    "instance {id}: no node reported it within {:?} of its START; the START was lost",
                    self.config.confirm_timeout
                ),
            );
            let why = format!(
                "{START_LOST}: no node reported it within {:?}",
                self.config.confirm_timeout
            );
            if self
                .set_state_if(id, InstanceState::Error(why.clone()), unplaced)?
                .is_some()
            {
                actions::start_ended(self.store.as_ref(), id, EventOutcome::error(why));
            }
        }
        Ok(())
    }
}

/// The most STARTs one sweep declares lost (see `sweep_lost_starts`).
pub(crate) const LOST_STARTS_PER_SWEEP: usize = 100;
