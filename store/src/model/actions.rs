//! The instance actions log's records (Nova's `os-instance-actions`): an action, its events, and
//! the inputs that record or change them.

use std::time::SystemTime;

use uuid::Uuid;

/// How a step of an instance action ended (Nova's event `result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionResult {
    /// It did what it was asked.
    Success,
    /// It failed; the event's `detail` says why.
    Error,
}

impl ActionResult {
    /// The result as Nova writes it: `Success` or `Error`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ActionResult::Success => "Success",
            ActionResult::Error => "Error",
        }
    }
}

/// One step of an instance action (Nova's action event): started, and finished with a result
/// once the controller knows how it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionEvent {
    /// What the step is (`controller_stop`, `node_start`, ...).
    pub name: String,
    /// When it started.
    pub start: SystemTime,
    /// When it finished; `None` while it is under way (or its outcome never became known).
    pub finish: Option<SystemTime>,
    /// How it ended; `None` while unfinished.
    pub result: Option<ActionResult>,
    /// Why it failed, in words (Nova's `traceback`); `None` when it did not fail.
    pub detail: Option<String>,
}

/// One request that acted on an instance (Nova's instance action): who asked what, when, and
/// how its steps went. Kept after the instance's record goes (see
/// [`ActionStore`](crate::ActionStore) for how long).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceAction {
    /// The request's identifier (`req-<uuid>`); one request that acts on several instances (a
    /// launch of several) has one action per instance, all with this identifier.
    pub request_id: String,
    /// The instance acted on.
    pub instance: Uuid,
    /// The instance's tenant (whose members may read the action).
    pub tenant: Uuid,
    /// What was asked: `create`, `delete`, `stop`, `start`, `reboot`, ...
    pub action: String,
    /// Who asked; `None` for the admin client certificate or the controller itself.
    pub user: Option<Uuid>,
    /// The project the asker's token was scoped to; `None` as for `user`.
    pub project: Option<Uuid>,
    /// When it was asked.
    pub start: SystemTime,
    /// When it (or one of its events) last changed.
    pub updated: SystemTime,
    /// `Error` once one of its events failed (Nova's convention), else `None`.
    pub message: Option<String>,
    /// Its steps, in the order they started.
    pub events: Vec<ActionEvent>,
}

/// Input of [`ActionStore::add_instance_action`](crate::ActionStore::add_instance_action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstanceAction {
    /// The request's identifier (`req-<uuid>`; 1 to 255 bytes).
    pub request_id: String,
    /// An instance that has a record.
    pub instance: Uuid,
    /// What was asked (1 to 255 bytes).
    pub action: String,
    /// Who asked.
    pub user: Option<Uuid>,
    /// The asker's project.
    pub project: Option<Uuid>,
    /// Events started with the action (now), unfinished.
    pub events: Vec<String>,
    /// Events started and finished `Success` with the action (now), before `events`: a part
    /// done already when the action is recorded. Finished again, such an event takes the later
    /// outcome ([`ActionStore::finish_action_event`](crate::ActionStore::finish_action_event)).
    pub done: Vec<String>,
}

/// Which action of an instance an event change is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionTarget<'a> {
    /// The action with this request identifier.
    Request(&'a str),
    /// The newest action: for a start, the instance's newest action; for a finish, the newest
    /// action that has an unfinished event of the name given.
    Newest,
}

/// One event to finish, for [`ActionStore::finish_action_events`]: the arguments of
/// [`ActionStore::finish_action_event`].
///
/// [`ActionStore::finish_action_event`]: crate::ActionStore::finish_action_event
/// [`ActionStore::finish_action_events`]: crate::ActionStore::finish_action_events
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionEnd<'a> {
    /// The instance.
    pub instance: Uuid,
    /// Which of its actions.
    pub target: ActionTarget<'a>,
    /// The event's name.
    pub event: &'a str,
    /// How it ended.
    pub outcome: EventOutcome,
}

/// How an event ended: what [`ActionStore::finish_action_event`] writes.
///
/// [`ActionStore::finish_action_event`]: crate::ActionStore::finish_action_event
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventOutcome {
    /// The result.
    pub result: ActionResult,
    /// Why it failed, for an error.
    pub detail: Option<String>,
}

impl EventOutcome {
    /// A success.
    pub fn success() -> EventOutcome {
        EventOutcome {
            result: ActionResult::Success,
            detail: None,
        }
    }

    /// A failure, and why.
    pub fn error(detail: impl Into<String>) -> EventOutcome {
        EventOutcome {
            result: ActionResult::Error,
            detail: Some(detail.into()),
        }
    }
}
