//! The periodic sweep: confirmations that never came, and the CNCIs' timers.

use std::time::{Duration, Instant, SystemTime};

use uuid::Uuid;

use std::collections::HashMap;

use super::{Engine, START_LOST, State};
use crate::actions;
use crate::cluster::ClusterError;
use store::{EventKind, EventOutcome, Instance, InstanceState, Scope, StoreError};

impl Engine {
    /// Applies the timers at `now`, everything the nodes sent having been applied: see
    /// [`Engine::sweep_heard`].
    pub fn sweep(&self, now: SystemTime) -> Result<(), ClusterError> {
        self.sweep_heard(now, now)
    }

    /// Applies the timers at `now`: a DELETE unconfirmed for [`confirm_timeout`] makes the
    /// instance `hung`, a stop makes it `missing`, a START no node reported makes it `error`
    /// (`start_lost`); CNCI launches time out, exited CNCIs restart, idle ones go.
    ///
    /// `heard` is how far the controller has heard the cluster: what its schedulers sent before
    /// it has been applied (the read time of the oldest frame still waiting, `now` when none
    /// waits). A confirmation is overdue only when none was heard within the timeout: a
    /// controller behind on its frames does not declare lost what waits among them, however
    /// long it takes to catch up.
    ///
    /// The DELETEs and stops, then the STARTs, are each checked for about 125 ms of a sweep
    /// (at least one each), the oldest first; those left wait for the next sweep, the frames
    /// meanwhile go on being applied; one whose check failed goes to the back of the line. Every
    /// part of the sweep runs whatever another met, unless the store failed (its backend down:
    /// each part would wait for it in turn); the answer is the first error.
    ///
    /// [`confirm_timeout`]: super::EngineConfig::confirm_timeout
    pub fn sweep_heard(&self, now: SystemTime, heard: SystemTime) -> Result<(), ClusterError> {
        self.state().behind = now.duration_since(heard).unwrap_or_default();
        self.sweep_within(now, heard, SWEEP_BUDGET)
    }

    /// How long the oldest frames from the schedulers waiting for the engine had waited at the
    /// last sweep: how far behind the cluster the controller is (`/metrics`).
    pub fn frames_behind(&self) -> Duration {
        self.state().behind
    }

    /// [`Engine::sweep_heard`], with `budget` for each of the two checks of confirmations.
    pub(super) fn sweep_within(
        &self,
        now: SystemTime,
        heard: SystemTime,
        budget: Duration,
    ) -> Result<(), ClusterError> {
        let heard = heard.min(now);
        let parts: [&dyn Fn() -> Result<(), ClusterError>; 8] = [
            &|| self.sweep_unconfirmed(heard, Instant::now() + budget),
            &|| Ok(self.refresh_disabled()?),
            &|| self.sweep_lost_starts(heard, Instant::now() + budget),
            &|| self.sweep_deferred(now),
            &|| self.sweep_cncis(now),
            &|| self.sweep_firewalls(),
            &|| self.sweep_volumes(now),
            &|| self.sweep_public_ips(now),
        ];
        let mut errors = FirstError::default();
        for part in parts {
            if let Err(e) = part()
                && errors.keep(e)
            {
                break;
            }
        }
        errors.answer()
    }

    /// DELETEs and stops unconfirmed for the timeout, as far as `heard`, until `until` (at
    /// least one). One that could not be checked waits for the next sweep; the first error is
    /// the answer.
    fn sweep_unconfirmed(&self, heard: SystemTime, until: Instant) -> Result<(), ClusterError> {
        let mut errors = FirstError::default();
        for (n, (id, since)) in self
            .overdue(Awaited::Confirmation, heard)
            .into_iter()
            .enumerate()
        {
            if n > 0 && Instant::now() >= until {
                break;
            }
            if !self.take_if_since(Awaited::Confirmation, id, since) {
                continue;
            }
            let unconfirmed = match self.store.instance(Scope::All, id) {
                Ok(record) => self.unconfirmed(record),
                Err(StoreError::NotFound { .. }) => Ok(()),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = unconfirmed {
                self.await_again(Awaited::Confirmation, id, heard);
                if errors.keep(e) {
                    break;
                }
            }
        }
        errors.answer()
    }

    /// `record`'s DELETE or stop was not confirmed in time: `hung` or `missing` (forgotten, if
    /// it was deleted before any node held it).
    fn unconfirmed(&self, record: Instance) -> Result<(), ClusterError> {
        let id = record.id;
        let (state, what) = match record.state {
            // Never placed anywhere this controller heard of (its START was lost): there is
            // nothing to delete.
            InstanceState::Deleted if record.node.is_none() => {
                self.event(
                    Some(record.tenant),
                    EventKind::Warning,
                    format!(
                        "instance {id}: deleted, and no node reported it within {:?}; forgotten",
                        self.config.confirm_timeout
                    ),
                );
                return self.forget(&record);
            }
            InstanceState::Deleted => (InstanceState::Hung, "delete"),
            InstanceState::Stopping => (InstanceState::Missing, "stop"),
            _ => return Ok(()),
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
        Ok(())
    }

    /// Pending instances whose START no node reported within the confirmation timeout, as far
    /// as `heard`: lost with a scheduler or an agent that died; `error` (`start_lost`), `active`
    /// again if a node reports them after all. Their records are read [`LOST_READ`] at a time,
    /// until `until` (at least one checked, or one read failed); the STARTs not checked stay
    /// awaited, those that could not be go to the back of the line. The first error is the
    /// answer; the store's backend failing ends the check.
    fn sweep_lost_starts(&self, heard: SystemTime, until: Instant) -> Result<(), ClusterError> {
        let overdue = self.overdue(Awaited::Start, heard);
        // STARTs checked and reads failed: at least one before the time is up.
        let mut tried = 0usize;
        let over = |tried: usize| tried > 0 && Instant::now() >= until;
        let mut errors = FirstError::default();
        'reads: for chunk in overdue.chunks(LOST_READ) {
            if over(tried) {
                break;
            }
            let ids: Vec<Uuid> = chunk.iter().map(|&(id, _)| id).collect();
            let records = match self.store.instances_by_id(&ids) {
                Ok(records) => records,
                Err(e) => {
                    tried += 1;
                    for &(id, since) in chunk {
                        if self.take_if_since(Awaited::Start, id, since) {
                            self.await_again(Awaited::Start, id, heard);
                        }
                    }
                    if errors.keep(e.into()) {
                        break;
                    }
                    continue;
                }
            };
            for (&(id, since), record) in chunk.iter().zip(records) {
                if over(tried) {
                    break 'reads;
                }
                if !self.take_if_since(Awaited::Start, id, since) {
                    // Reported, or dispatched again (its own timer runs), since the listing.
                    continue;
                }
                tried += 1;
                let Some(record) = record else { continue };
                if let Err(e) = self.start_lost(record) {
                    self.await_again(Awaited::Start, id, heard);
                    if errors.keep(e) {
                        break 'reads;
                    }
                }
            }
        }
        errors.answer()
    }

    /// What `what` awaits for the timeout as far as `heard`, the oldest first.
    fn overdue(&self, what: Awaited, heard: SystemTime) -> Vec<(Uuid, SystemTime)> {
        let mut overdue: Vec<(Uuid, SystemTime)> = {
            let mut state = self.state();
            what.of(&mut state)
                .iter()
                .filter(|(_, since)| {
                    heard.duration_since(**since).unwrap_or_default() >= self.config.confirm_timeout
                })
                .map(|(id, since)| (*id, *since))
                .collect()
        };
        overdue.sort_by_key(|&(_, since)| since);
        overdue
    }

    /// Takes `id` from the STARTs or the confirmations awaited if it has awaited since `since`
    /// (not awaited again since a sweep listed it); whether it did.
    fn take_if_since(&self, what: Awaited, id: Uuid, since: SystemTime) -> bool {
        let mut state = self.state();
        let awaited = what.of(&mut state);
        if awaited.get(&id) != Some(&since) {
            return false;
        }
        awaited.remove(&id);
        true
    }

    /// `id` awaited again after a check that failed, at the back of the line of those overdue
    /// as far as `heard` (as if awaited since the timeout before it: every one overdue awaited
    /// since then or before), unless it was awaited anew meanwhile (its newer timer stands).
    fn await_again(&self, what: Awaited, id: Uuid, heard: SystemTime) {
        let back = heard
            .checked_sub(self.config.confirm_timeout)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        what.of(&mut self.state()).entry(id).or_insert(back);
    }

    /// `record`'s START was not reported in time: `error` (`start_lost`) if it is still unplaced.
    fn start_lost(&self, record: Instance) -> Result<(), ClusterError> {
        let id = record.id;
        // Unplaced, or a rebuild whose pinned START went.
        let rebuilding = self.rebuild_under_way(id);
        let unplaced = |i: &Instance| {
            (i.state == InstanceState::Pending && i.node.is_none())
                || (i.state == InstanceState::Rebuilding && rebuilding)
        };
        if !unplaced(&record) {
            return Ok(());
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
        Ok(())
    }
}

/// About the longest part of a sweep spent checking each kind of confirmation (the sweep runs
/// between batches of frames, which wait meanwhile; a sweep comes each second by default).
const SWEEP_BUDGET: Duration = Duration::from_millis(125);

/// The first error a sweep met.
#[derive(Default)]
struct FirstError(Option<ClusterError>);

impl FirstError {
    /// Keeps `e` if it is the first; whether what comes next should stop: the store's backend
    /// failed (down, or too slow to answer), and the rest would wait for it in turn.
    fn keep(&mut self, e: ClusterError) -> bool {
        let down = matches!(e, ClusterError::Store(StoreError::Backend(_)));
        self.0.get_or_insert(e);
        down
    }

    fn answer(self) -> Result<(), ClusterError> {
        self.0.map_or(Ok(()), Err)
    }
}

/// How many overdue STARTs' records one read takes.
const LOST_READ: usize = 256;

/// What a sweep times out.
#[derive(Clone, Copy)]
enum Awaited {
    /// A START dispatched, awaiting its node's report.
    Start,
    /// A DELETE or a stop, awaiting its confirmation.
    Confirmation,
}

impl Awaited {
    /// The engine's map of these, each with the time it has been awaited since.
    fn of(self, state: &mut State) -> &mut HashMap<Uuid, SystemTime> {
        match self {
            Awaited::Start => &mut state.dispatched,
            Awaited::Confirmation => &mut state.unconfirmed,
        }
    }
}
