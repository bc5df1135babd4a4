//! The instance actions log, the controller's side (Nova's `os-instance-actions`): what a request
//! that acts on an instance records, and the one entry point that records it.
//!
//! The rule (`docs/api.md` says the same to users):
//! - An action is recorded when the controller accepts a request on an instance, once the
//!   instance's state allowed it: a refused request (unknown instance, wrong state) records
//!   nothing. It starts with the event `controller_<action>`, finished when the controller has
//!   done its part: the command handed on (an SSNTP frame queued for the scheduler, or an
//!   off-host operation queued in the store; a create left waiting for its subnet's CNCI):
//!   `Success`, or `Error` with why it was not.
//! - Every START sent to the scheduler (a create, a start, the start that follows a reboot's
//!   stop) starts the event `node_start` on the instance's newest action (a launch from an
//!   image whose STARTs all go at once, with no CNCI to wait for, a kernel it can boot and no
//!   off-host host, records it started with the action itself, which such a launch records
//!   with each instance's record, in its transaction where the store can: before the START
//!   goes, by up to the launch's whole creation and dispatch; two store writes less per
//!   instance. Such a launch also records its `controller_create` finished `Success` with the
//!   action ([`Part::Done`]), and finishes it again, `Error`, only for an instance whose
//!   dispatch failed or that the launch did not get to dispatch: one store write less per
//!   instance. One whose START then does not go has its `node_start` ended `Error`,
//!   `off_host` for one that went off-host after all). It is
//!   finished `Success` when a node reports the instance running, and `Error` with the cause
//!   when the START could not be sent, a node or the scheduler answered a fatal START_FAILURE,
//!   or no node reported the instance in time (`start_lost`). Off-host starts have no `node_start`: the
//!   off-host launcher writes the outcome to the instance's record, not to the controller.
//! - Recording never fails a request: a store error while recording is logged and the request
//!   goes on.
//!
//! The entry point, for an operation on an instance: [`begin`] after the state check and before
//! the command goes out (so that whatever the controller learns next finds the action), then
//! [`finish`] with the outcome of handing the command on. The engine wraps them as
//! [`Engine::begin_action`](crate::engine::Engine::begin_action) and
//! [`Engine::finish_action`](crate::engine::Engine::finish_action).

use uuid::Uuid;

use crate::cluster::{Caller, ClusterError};
use store::{ActionEnd, ActionStore, ActionTarget, EventOutcome, NewInstanceAction};

/// What a request asked of an instance: the action's name, as Nova names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// A launch (`POST /servers`, `POST /cumulo/v1/instances`).
    Create,
    /// A delete.
    Delete,
    /// A stop.
    Stop,
    /// A start.
    Start,
    /// A reboot (the native API's restart).
    Reboot,
    /// A pause.
    Pause,
    /// An unpause.
    Unpause,
    /// A suspend.
    Suspend,
    /// A resume.
    Resume,
    /// A rebuild.
    Rebuild,
    /// A resize.
    Resize,
    /// A resize confirmed.
    ConfirmResize,
    /// A resize reverted.
    RevertResize,
    /// An evacuation of the instance's node.
    Evacuate,
    /// A volume attached (`os-volume_attachments`).
    AttachVolume,
    /// A volume detached (`os-volume_attachments`, or a volume's `os-force_detach`).
    DetachVolume,
}

impl ActionKind {
    /// The action an INSTANCE_ACTION records (both reboots are `reboot`, as in Nova); `None`
    /// for an action this version does not know.
    pub fn of_instance_action(action: crate::cluster::InstanceAction) -> Option<ActionKind> {
        use crate::cluster::InstanceAction as A;
        Some(match action {
            A::Reboot | A::RebootHard => ActionKind::Reboot,
            A::Pause => ActionKind::Pause,
            A::Unpause => ActionKind::Unpause,
            A::Suspend => ActionKind::Suspend,
            A::Resume => ActionKind::Resume,
            A::Other => return None,
        })
    }

    /// The action's name (`create`, `stop`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Create => "create",
            ActionKind::Delete => "delete",
            ActionKind::Stop => "stop",
            ActionKind::Start => "start",
            ActionKind::Reboot => "reboot",
            ActionKind::Pause => "pause",
            ActionKind::Unpause => "unpause",
            ActionKind::Suspend => "suspend",
            ActionKind::Resume => "resume",
            ActionKind::Rebuild => "rebuild",
            ActionKind::Resize => "resize",
            ActionKind::ConfirmResize => "confirmResize",
            ActionKind::RevertResize => "revertResize",
            ActionKind::Evacuate => "evacuate",
            ActionKind::AttachVolume => "attach_volume",
            ActionKind::DetachVolume => "detach_volume",
        }
    }

    /// The name of the controller's event of this action (`controller_stop`).
    pub fn controller_event(self) -> String {
        format!("controller_{}", self.as_str())
    }
}

/// The event of a START's outcome on a node.
pub const NODE_START: &str = "node_start";

/// The event of an ATTACH_VOLUME's outcome on a node.
pub const NODE_ATTACH_VOLUME: &str = "node_attach_volume";

/// The event of a DETACH_VOLUME's outcome on a node.
pub const NODE_DETACH_VOLUME: &str = "node_detach_volume";

/// A new request identifier, as Nova makes them (`req-<uuid>`).
pub fn new_request_id() -> String {
    format!("req-{}", Uuid::new_v4())
}

/// The request id of the actions `by` starts: its API request's (as Nova records the request's
/// `X-OpenStack-Request-Id`), else a new one.
pub fn request_id_of(by: &Caller) -> String {
    by.request
        .map_or_else(new_request_id, |id| format!("req-{id}"))
}

/// An action begun by [`begin`], to [`finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionTicket {
    /// The instance.
    pub instance: Uuid,
    /// The request identifier.
    pub request_id: String,
    /// The controller's event, to finish.
    event: String,
    /// Whether the action was recorded (a store that failed: finishing it does nothing).
    recorded: bool,
}

/// Records that `by` asked `kind` of `instance` in request `request_id` (several instances of
/// one request share it), with its controller event started. Never fails: a store error is
/// logged, and the ticket then finishes nothing.
pub fn begin(
    store: &dyn ActionStore,
    request_id: &str,
    instance: Uuid,
    kind: ActionKind,
    by: &Caller,
) -> ActionTicket {
    let mut tickets = begin_many(store, request_id, &[instance], kind, by);
    tickets.pop().unwrap_or_else(|| ActionTicket {
        instance,
        request_id: request_id.to_string(),
        event: kind.controller_event(),
        recorded: false,
    })
}

/// [`begin`] for each of `instances` (one request, one kind), through
/// [`store::ActionStore::add_instance_actions`]: a store may record them side by side.
pub fn begin_many(
    store: &dyn ActionStore,
    request_id: &str,
    instances: &[Uuid],
    kind: ActionKind,
    by: &Caller,
) -> Vec<ActionTicket> {
    let new: Vec<NewInstanceAction> = instances
        .iter()
        .map(|&instance| new_action(request_id, instance, kind, by, Part::Open, &[]))
        .collect();
    let recorded = store.add_instance_actions(&new);
    instances
        .iter()
        .zip(recorded)
        .map(|(&instance, recorded)| ticket(request_id, instance, kind, recorded.as_ref()))
        .collect()
}

/// How the controller's event of a new action is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Started, for [`finish`] once the command is handed on.
    Open,
    /// Finished `Success` already: the command is handed on in the same request, soon after,
    /// and [`finish`] is called only if its dispatch fails (an `Error` replaces the `Success`).
    Done,
}

/// The action `kind` of request `request_id` that `by` asked of `instance`, with the
/// controller's event as `part` says and the events `also` started.
pub fn new_action(
    request_id: &str,
    instance: Uuid,
    kind: ActionKind,
    by: &Caller,
    part: Part,
    also: &[&str],
) -> NewInstanceAction {
    let controller = vec![kind.controller_event()];
    let (open, done) = match part {
        Part::Open => (controller, Vec::new()),
        Part::Done => (Vec::new(), controller),
    };
    NewInstanceAction {
        request_id: request_id.to_string(),
        instance,
        action: kind.as_str().to_string(),
        user: by.user,
        project: by.project,
        events: open
            .into_iter()
            .chain(also.iter().map(|e| e.to_string()))
            .collect(),
        done,
    }
}

/// The ticket of the action `kind` of request `request_id` on `instance`, as the store
/// `recorded` it (an error is logged, and the ticket then finishes nothing).
pub fn ticket<T>(
    request_id: &str,
    instance: Uuid,
    kind: ActionKind,
    recorded: Result<T, &store::StoreError>,
) -> ActionTicket {
    if let Err(e) = &recorded {
        tracing::warn!(%instance, request_id, "cannot record the {} action: {e}", kind.as_str());
    }
    ActionTicket {
        instance,
        request_id: request_id.to_string(),
        event: kind.controller_event(),
        recorded: recorded.is_ok(),
    }
}

/// [`finish`] for each ticket with its outcome, through
/// [`store::ActionStore::finish_action_events`]: a store may write them side by side.
pub fn finish_many(store: &dyn ActionStore, ends: &[(&ActionTicket, EventOutcome)]) {
    let recorded: Vec<&(&ActionTicket, EventOutcome)> =
        ends.iter().filter(|(t, _)| t.recorded).collect();
    let asked: Vec<ActionEnd<'_>> = recorded
        .iter()
        .map(|(t, outcome)| ActionEnd {
            instance: t.instance,
            target: ActionTarget::Request(&t.request_id),
            event: &t.event,
            outcome: outcome.clone(),
        })
        .collect();
    for ((ticket, _), done) in recorded.iter().zip(store.finish_action_events(&asked)) {
        if let Err(e) = done {
            tracing::warn!(instance = %ticket.instance, request_id = ticket.request_id, "cannot finish an action's event: {e}");
        }
    }
}

/// What an operation's result says of the controller's part: `Success`, or `Error` with the
/// error's text.
pub fn outcome_of<T>(result: &Result<T, ClusterError>) -> EventOutcome {
    match result {
        Ok(_) => EventOutcome::success(),
        Err(e) => EventOutcome::error(e.to_string()),
    }
}

/// Finishes the controller's event of a begun action with `outcome` (a store error is logged).
pub fn finish(store: &dyn ActionStore, ticket: &ActionTicket, outcome: EventOutcome) {
    if !ticket.recorded {
        return;
    }
    if let Err(e) = store.finish_action_event(
        ticket.instance,
        ActionTarget::Request(&ticket.request_id),
        &ticket.event,
        outcome,
    ) {
        tracing::warn!(instance = %ticket.instance, request_id = ticket.request_id, "cannot finish an action's event: {e}");
    }
}

/// A START of `instance` is about to go to the scheduler: `node_start` starts on its newest
/// action (a store error is logged).
pub fn start_sent(store: &dyn ActionStore, instance: Uuid) {
    if let Err(e) = store.start_action_event(instance, ActionTarget::Newest, NODE_START) {
        tracing::warn!(%instance, "cannot record a START in the instance's actions: {e}");
    }
}

/// How the START of `instance` ended: finishes the newest unfinished `node_start` of its
/// actions, if any (a store error is logged).
pub fn start_ended(store: &dyn ActionStore, instance: Uuid, outcome: EventOutcome) {
    if let Err(e) = store.finish_action_event(instance, ActionTarget::Newest, NODE_START, outcome) {
        tracing::warn!(%instance, "cannot record a START's outcome in the instance's actions: {e}");
    }
}

/// A command about to go to a node for the action of request `request_id`: its node event
/// `event` starts (a store error is logged).
pub fn node_event_started(store: &dyn ActionStore, instance: Uuid, request_id: &str, event: &str) {
    if let Err(e) = store.start_action_event(instance, ActionTarget::Request(request_id), event) {
        tracing::warn!(%instance, request_id, "cannot record {event} in the instance's actions: {e}");
    }
}

/// How a node command ended: finishes its node event `event` on the action of `request_id`, or,
/// when that is not known (the command was sent before a restart, or by another controller), on
/// the newest action with that event unfinished (a store error is logged).
pub fn node_event_ended(
    store: &dyn ActionStore,
    instance: Uuid,
    request_id: Option<&str>,
    event: &str,
    outcome: EventOutcome,
) {
    let target = request_id.map_or(ActionTarget::Newest, ActionTarget::Request);
    if let Err(e) = store.finish_action_event(instance, target, event, outcome) {
        tracing::warn!(%instance, "cannot record how {event} ended in the instance's actions: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_novas() {
        assert_eq!(ActionKind::Reboot.as_str(), "reboot");
        assert_eq!(ActionKind::Stop.controller_event(), "controller_stop");
        let id = new_request_id();
        assert!(id.starts_with("req-"));
        assert!(Uuid::parse_str(&id[4..]).is_ok());
    }
}
