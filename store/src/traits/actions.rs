//! [`ActionStore`]: the instance actions log (Nova's `os-instance-actions`): who asked what of an
//! instance, when, and how each step went.

use uuid::Uuid;

use crate::{
    ActionEnd, EventOutcome, Instance, InstanceAction, InstanceChange, InstanceStore, NewInstance,
    NewInstanceAction, Result, Scope, Starting, ToStart,
};

/// The instance actions log. Every call is one transaction.
///
/// Bounds: an instance keeps its newest [`ACTIONS_PER_INSTANCE`] actions (the oldest go as new
/// ones come). Actions outlive the instance's record: when the record goes (deleted, in any way),
/// an instance that has actions joins the list of gone instances, and the actions of the oldest
/// gone instances are dropped so that those of at most [`GONE_INSTANCES_KEPT`] gone instances
/// remain. A gone instance's actions are read like a live one's, by its tenant or an admin.
///
/// [`ACTIONS_PER_INSTANCE`]: crate::ACTIONS_PER_INSTANCE
/// [`GONE_INSTANCES_KEPT`]: crate::GONE_INSTANCES_KEPT
pub trait ActionStore: InstanceStore + Send + Sync {
    /// Records an action on an instance that has a record (`NotFound` otherwise), for the
    /// instance's tenant, started now with `new.done` started and finished `Success` and `new.events` started
    /// (unfinished). `Conflict` if the
    /// instance has an action with this request identifier already; `Invalid` for an empty or
    /// over-long request identifier, action or event name.
    fn add_instance_action(&self, new: NewInstanceAction) -> Result<InstanceAction>;
    /// [`ActionStore::add_instance_action`] for each of `new` (each its own transaction),
    /// answered in order. The default records them one after the other; a store whose
    /// transactions each wait for a round trip to a server (etcd) keeps several in flight, which
    /// the server commits together.
    fn add_instance_actions(&self, new: &[NewInstanceAction]) -> Vec<Result<InstanceAction>> {
        new.iter()
            .map(|n| self.add_instance_action(n.clone()))
            .collect()
    }
    /// [`InstanceStore::create_instance`] of `new`, with its first action `action` recorded
    /// (`action.instance` is ignored: the new instance's), in the instance's transaction where
    /// the store can (etcd: one read and one commit fewer). The instance is made even when its
    /// action cannot be recorded: that one's error is the second of the pair. The default
    /// records it after the instance, in a transaction of its own.
    fn create_instance_with_action(
        &self,
        new: NewInstance,
        action: NewInstanceAction,
    ) -> Result<(Instance, Result<InstanceAction>)> {
        let instance = self.create_instance(new)?;
        let recorded = self.add_instance_action(NewInstanceAction {
            instance: instance.id,
            ..action
        });
        Ok((instance, recorded))
    }
    /// [`ActionStore::create_instance_with_action`] for `count` instances of `new`, in order,
    /// stopping at the first that cannot be made (its tenant's quota reached, say): those made,
    /// each with how its action's record went, and why it stopped (`None`: all were made). The
    /// default makes them one after the other; etcd makes several in one transaction (the
    /// tenant's networking record read and written once for them).
    #[allow(clippy::type_complexity)]
    fn create_instances_with_action(
        &self,
        new: &NewInstance,
        count: u32,
        action: &NewInstanceAction,
    ) -> (
        Vec<(Instance, Result<InstanceAction>)>,
        Option<crate::StoreError>,
    ) {
        one_after_another(self, new, count, action)
    }
    /// Starts event `event` (now, unfinished) of the instance's `target` action, unless it has an
    /// unfinished event of that name already. `None` when the instance has no such action.
    fn start_action_event(
        &self,
        instance: Uuid,
        target: crate::ActionTarget<'_>,
        event: &str,
    ) -> Result<Option<InstanceAction>>;
    /// Finishes (now, with `outcome`) the newest unfinished event named `event` of the instance's
    /// `target` action; for [`ActionTarget::Request`](crate::ActionTarget::Request), an action
    /// with no such unfinished event gets the event, started and finished now. An error outcome
    /// sets the action's message to `Error`. `None` when the instance has no such action.
    fn finish_action_event(
        &self,
        instance: Uuid,
        target: crate::ActionTarget<'_>,
        event: &str,
        outcome: EventOutcome,
    ) -> Result<Option<InstanceAction>>;
    /// [`ActionStore::finish_action_event`] for each of `ends` (each its own transaction),
    /// answered in order; as [`ActionStore::add_instance_actions`], a store may keep several in
    /// flight.
    fn finish_action_events(&self, ends: &[ActionEnd<'_>]) -> Vec<Result<Option<InstanceAction>>> {
        ends.iter()
            .map(|e| self.finish_action_event(e.instance, e.target, e.event, e.outcome.clone()))
            .collect()
    }
    /// [`InstanceStore::update_instance`] of instance `instance` (in any tenant), then
    /// [`ActionStore::finish_action_event`] of the newest unfinished `event` of its actions with
    /// `outcome` (its [`ActionTarget::Newest`](crate::ActionTarget::Newest)): one change where
    /// the store can make it one (etcd: one read and one commit, not two of each). An error
    /// (`Conflict`, `NotFound`, ...) means that neither was written. The second of the pair is
    /// the event's: the default writes one after the other, and its event's write can then fail
    /// after the record was changed.
    fn update_instance_finishing_event(
        &self,
        instance: Uuid,
        expected_version: u64,
        change: InstanceChange,
        event: &str,
        outcome: EventOutcome,
    ) -> Result<(Instance, Result<Option<InstanceAction>>)> {
        let updated = self.update_instance(Scope::All, instance, expected_version, change)?;
        let finished =
            self.finish_action_event(instance, crate::ActionTarget::Newest, event, outcome);
        Ok((updated, finished))
    }
    /// Instances `asked`, reported running on `node`: each that [`ToStart::starts`] is written
    /// active there with its newest unfinished `event` finished with `outcome`, as
    /// [`ActionStore::update_instance_finishing_event`] writes one (the record's version checked
    /// against the one just read); each other is read and left. Answered in order: `NotFound` for
    /// one with no record; `Conflict` when the record kept changing between read and write (then
    /// neither was written). The default starts one after another, reading a record again (up to
    /// three times) when its write met a change made since its read; a store may read and write
    /// many in one change (etcd: one round trip to read them, one to commit).
    fn start_instances_on(
        &self,
        node: Uuid,
        asked: &[ToStart],
        event: &str,
        outcome: EventOutcome,
    ) -> Vec<Result<Starting>> {
        if let Err(e) = crate::actions::check_event(event) {
            return asked.iter().map(|_| Err(e.clone())).collect();
        }
        asked
            .iter()
            .map(|one| {
                // A record changed between read and write (another node's report starting it)
                // is read again: a few tries, then the conflict is the answer.
                let mut tries = 0;
                loop {
                    let record = self.instance(Scope::All, one.id)?;
                    if !one.starts(&record, node) {
                        return Ok(Starting::Left(record));
                    }
                    match self.update_instance_finishing_event(
                        one.id,
                        record.version,
                        Starting::change(node),
                        event,
                        outcome.clone(),
                    ) {
                        Ok((started, finished)) => return Ok(Starting::Started(started, finished)),
                        Err(crate::StoreError::Conflict(_)) if tries < START_TRIES => tries += 1,
                        Err(e) => return Err(e),
                    }
                }
            })
            .collect()
    }
    /// The instance's actions visible in `scope`, newest first. `NotFound` when the instance has
    /// neither a record nor an action visible in `scope`; an empty list for one that has a
    /// record and no action.
    fn instance_actions(&self, scope: Scope, instance: Uuid) -> Result<Vec<InstanceAction>>;
    /// One action of the instance, by request identifier, if visible in `scope`. `NotFound` of
    /// kind `instance` when the instance has neither a record nor an action visible in `scope`,
    /// of kind `instance action` when it has but not this one.
    fn instance_action(
        &self,
        scope: Scope,
        instance: Uuid,
        request_id: &str,
    ) -> Result<InstanceAction>;
}

/// How many more times the default [`ActionStore::start_instances_on`] reads a record again
/// after its write met a change made since its read.
const START_TRIES: u32 = 3;

/// [`ActionStore::create_instances_with_action`] as the default makes them: one instance, with
/// its action, after another.
#[allow(clippy::type_complexity)]
pub(crate) fn one_after_another<S: ActionStore + ?Sized>(
    store: &S,
    new: &NewInstance,
    count: u32,
    action: &NewInstanceAction,
) -> (
    Vec<(Instance, Result<InstanceAction>)>,
    Option<crate::StoreError>,
) {
    let mut made = Vec::with_capacity(count as usize);
    for _ in 0..count {
        match store.create_instance_with_action(new.clone(), action.clone()) {
            Ok(pair) => made.push(pair),
            Err(e) => return (made, Some(e)),
        }
    }
    (made, None)
}
