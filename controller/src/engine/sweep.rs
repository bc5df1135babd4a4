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
    fn sweep_lost_starts(&self, now: SystemTime) -> Result<(), ClusterError> {
        let overdue: Vec<Uuid> = {
            let mut state = self.state();
            let overdue: Vec<Uuid> = state
                .dispatched
                .iter()
                .filter(|(_, since)| {
                    now.duration_since(**since).unwrap_or_default() >= self.config.confirm_timeout
                })
                .map(|(id, _)| *id)
                .collect();
            for id in &overdue {
                state.dispatched.remove(id);
            }
            overdue
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
