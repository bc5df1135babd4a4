//! The periodic sweep: confirmations that never came, and the CNCIs' timers.

use std::time::SystemTime;

use uuid::Uuid;

use super::Engine;
use crate::cluster::ClusterError;
use crate::store::{EventKind, InstanceState, Scope, StoreError};

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
                state.restart_after_stop.remove(&id);
            }
            let record = match self.store.instance(Scope::All, id) {
                Ok(record) => record,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let (state, what) = match record.state {
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
            self.set_state(id, state, None)?;
        }
        self.sweep_cncis(now)
    }
}
