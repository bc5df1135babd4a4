//! What both implementations of [`ActionStore`](crate::ActionStore) share: the bounds, the input
//! checks, the event changes (applied in memory to an instance's actions, oldest first, after
//! which the backend writes back the one action that changed), and the JSON shape of an event
//! (SQLite keeps an action's events as a JSON array in a column; etcd keeps the whole action as
//! one JSON record).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::common::{from_millis, millis};
use crate::{
    ActionEvent, ActionResult, ActionTarget, EventOutcome, InstanceAction, NewInstanceAction,
    Result, StoreError,
};

/// How many actions an instance keeps (the oldest go first).
pub const ACTIONS_PER_INSTANCE: usize = 100;

/// How many gone instances (their records removed) keep their actions; the actions of older
/// gone instances are dropped.
pub const GONE_INSTANCES_KEPT: u64 = 1000;

/// The message of an action one of whose events failed (Nova's).
const ERROR_MESSAGE: &str = "Error";

/// `Invalid` unless `text` is 1 to 255 bytes and not blank.
fn check_text(what: &str, text: &str) -> Result<()> {
    if text.trim().is_empty() || text.len() > 255 {
        return Err(StoreError::Invalid(format!(
            "an action's {what} must be 1 to 255 bytes and not blank"
        )));
    }
    Ok(())
}

/// Checks a new action's texts.
pub(crate) fn check_new(new: &NewInstanceAction) -> Result<()> {
    check_text("request id", &new.request_id)?;
    check_text("name", &new.action)?;
    new.done
        .iter()
        .chain(&new.events)
        .try_for_each(|e| check_text("event", e))
}

/// Checks an event name.
pub(crate) fn check_event(name: &str) -> Result<()> {
    check_text("event", name)
}

/// The action `new` describes, for `tenant`, started at `now`.
pub(crate) fn new_action(
    new: NewInstanceAction,
    tenant: uuid::Uuid,
    now: SystemTime,
) -> InstanceAction {
    InstanceAction {
        request_id: new.request_id,
        instance: new.instance,
        tenant,
        action: new.action,
        user: new.user,
        project: new.project,
        start: now,
        updated: now,
        message: None,
        events: (new.done.into_iter().map(|n| done_event(n, now)))
            .chain(new.events.into_iter().map(|n| open_event(n, now)))
            .collect(),
    }
}

fn done_event(name: String, now: SystemTime) -> ActionEvent {
    ActionEvent {
        finish: Some(now),
        result: Some(ActionResult::Success),
        ..open_event(name, now)
    }
}

fn open_event(name: String, now: SystemTime) -> ActionEvent {
    ActionEvent {
        name,
        start: now,
        finish: None,
        result: None,
        detail: None,
    }
}

/// Each of `action`'s events by name, with its result, in order (what tests compare).
#[cfg(test)]
pub(crate) fn results(action: &InstanceAction) -> Vec<(&str, Option<ActionResult>)> {
    action
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.result))
        .collect()
}

/// The `Conflict` of a request identifier used twice on one instance.
pub(crate) fn duplicate(new: &NewInstanceAction) -> StoreError {
    StoreError::Conflict(format!(
        "instance {} has an action {:?} already",
        new.instance, new.request_id
    ))
}

/// Whether `action` has an unfinished event named `event`.
fn has_open(action: &InstanceAction, event: &str) -> bool {
    action
        .events
        .iter()
        .any(|e| e.name == event && e.finish.is_none())
}

/// Starts `event` at `now` on the `target` action of `actions` (oldest first): the index of that
/// action and whether it changed; `None` when there is no such action.
pub(crate) fn start_event(
    actions: &mut [InstanceAction],
    target: ActionTarget<'_>,
    event: &str,
    now: SystemTime,
) -> Option<(usize, bool)> {
    let at = match target {
        ActionTarget::Request(id) => actions.iter().position(|a| a.request_id == id)?,
        ActionTarget::Newest => actions.len().checked_sub(1)?,
    };
    let action = &mut actions[at];
    if has_open(action, event) {
        return Some((at, false));
    }
    action.events.push(open_event(event.to_string(), now));
    action.updated = now;
    Some((at, true))
}

/// Finishes `event` at `now` with `outcome` on the `target` action of `actions` (oldest first):
/// the index of the action that changed; `None` when there is no such action. On an action
/// found by its request id, an event with none of its name open is the newest of its name,
/// finished again (a part recorded done with its action that then failed), or, when it has
/// none, one started and finished now.
pub(crate) fn finish_event(
    actions: &mut [InstanceAction],
    target: ActionTarget<'_>,
    event: &str,
    outcome: EventOutcome,
    now: SystemTime,
) -> Option<usize> {
    let at = match target {
        ActionTarget::Request(id) => actions.iter().position(|a| a.request_id == id)?,
        ActionTarget::Newest => actions.iter().rposition(|a| has_open(a, event))?,
    };
    let action = &mut actions[at];
    let open = action
        .events
        .iter()
        .rposition(|e| e.name == event && e.finish.is_none());
    let named = || action.events.iter().rposition(|e| e.name == event);
    let index = match open.or_else(named) {
        Some(index) => index,
        None => {
            action.events.push(open_event(event.to_string(), now));
            action.events.len() - 1
        }
    };
    if outcome.result == ActionResult::Error {
        action.message = Some(ERROR_MESSAGE.to_string());
    }
    let ev = &mut action.events[index];
    ev.finish = Some(now);
    ev.result = Some(outcome.result);
    ev.detail = outcome.detail;
    action.updated = now;
    Some(at)
}

/// An event as JSON. Times are milliseconds since the Unix epoch, as everywhere in the stores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EventRec {
    name: String,
    start_ms: i64,
    finish_ms: Option<i64>,
    /// `Success` or `Error`.
    result: Option<String>,
    detail: Option<String>,
}

impl From<&ActionEvent> for EventRec {
    fn from(e: &ActionEvent) -> EventRec {
        EventRec {
            name: e.name.clone(),
            start_ms: millis(e.start),
            finish_ms: e.finish.map(millis),
            result: e.result.map(|r| r.as_str().to_string()),
            detail: e.detail.clone(),
        }
    }
}

impl EventRec {
    /// The event this record holds.
    pub(crate) fn model(&self) -> Result<ActionEvent> {
        let result = match self.result.as_deref() {
            None => None,
            Some("Success") => Some(ActionResult::Success),
            Some("Error") => Some(ActionResult::Error),
            Some(other) => {
                return Err(StoreError::Backend(format!(
                    "unknown action event result {other:?}"
                )));
            }
        };
        Ok(ActionEvent {
            name: self.name.clone(),
            start: from_millis(self.start_ms),
            finish: self.finish_ms.map(from_millis),
            result,
            detail: self.detail.clone(),
        })
    }
}

/// Events as the JSON array SQLite keeps.
#[cfg(feature = "sqlite")]
pub(crate) fn events_json(events: &[ActionEvent]) -> Result<String> {
    let recs: Vec<EventRec> = events.iter().map(EventRec::from).collect();
    serde_json::to_string(&recs).map_err(|e| StoreError::Backend(format!("encoding events: {e}")))
}

/// Events from the JSON array SQLite keeps.
#[cfg(feature = "sqlite")]
pub(crate) fn events_from_json(text: &str) -> Result<Vec<ActionEvent>> {
    let recs: Vec<EventRec> = serde_json::from_str(text)
        .map_err(|e| StoreError::Backend(format!("bad action events: {e}")))?;
    recs.iter().map(EventRec::model).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};
    use uuid::Uuid;

    fn action(request_id: &str, events: &[&str]) -> InstanceAction {
        new_action(
            NewInstanceAction {
                request_id: request_id.into(),
                instance: Uuid::nil(),
                action: "start".into(),
                user: None,
                project: None,
                events: events.iter().map(|e| e.to_string()).collect(),
                done: Vec::new(),
            },
            Uuid::nil(),
            UNIX_EPOCH,
        )
    }

    #[test]
    fn the_newest_open_event_is_finished() {
        let later = UNIX_EPOCH + Duration::from_secs(5);
        let mut actions = vec![action("a", &["node_start"]), action("b", &["x"])];
        // "b" is newer but has no open node_start: "a" is the one.
        let at = finish_event(
            &mut actions,
            ActionTarget::Newest,
            "node_start",
            EventOutcome::error("boom"),
            later,
        );
        assert_eq!(at, Some(0));
        assert_eq!(actions[0].message.as_deref(), Some("Error"));
        assert_eq!(actions[0].events[0].finish, Some(later));
        assert_eq!(actions[0].events[0].detail.as_deref(), Some("boom"));
        // Nothing open any more.
        assert_eq!(
            finish_event(
                &mut actions,
                ActionTarget::Newest,
                "node_start",
                EventOutcome::success(),
                later
            ),
            None
        );
    }

    #[test]
    fn a_request_gets_a_finished_event_it_did_not_have() {
        let mut actions = vec![action("a", &[])];
        let at = finish_event(
            &mut actions,
            ActionTarget::Request("a"),
            "controller_stop",
            EventOutcome::success(),
            UNIX_EPOCH,
        );
        assert_eq!(at, Some(0));
        assert_eq!(actions[0].events.len(), 1);
        assert_eq!(actions[0].events[0].result, Some(ActionResult::Success));
        assert_eq!(actions[0].message, None);
        assert_eq!(
            start_event(&mut actions, ActionTarget::Newest, "node_start", UNIX_EPOCH),
            Some((0, true))
        );
        assert_eq!(
            start_event(&mut actions, ActionTarget::Newest, "node_start", UNIX_EPOCH),
            Some((0, false)),
            "already open"
        );
        assert_eq!(
            start_event(&mut [], ActionTarget::Newest, "node_start", UNIX_EPOCH),
            None
        );
    }

    #[test]
    fn a_part_done_with_its_action_takes_a_later_outcome() {
        let later = UNIX_EPOCH + Duration::from_secs(5);
        let made = new_action(
            NewInstanceAction {
                request_id: "a".into(),
                instance: Uuid::nil(),
                action: "create".into(),
                user: None,
                project: None,
                events: vec!["node_start".into()],
                done: vec!["controller_create".into()],
            },
            Uuid::nil(),
            UNIX_EPOCH,
        );
        // Done first, finished at once; then the open one.
        assert_eq!(
            results(&made),
            [
                ("controller_create", Some(ActionResult::Success)),
                ("node_start", None)
            ]
        );
        assert_eq!(made.events[0].finish, Some(UNIX_EPOCH));
        assert_eq!(made.message, None);
        let mut actions = vec![made];
        // Finished again by its request id: the same event, the later outcome; no second one.
        let at = finish_event(
            &mut actions,
            ActionTarget::Request("a"),
            "controller_create",
            EventOutcome::error("not sent"),
            later,
        );
        assert_eq!(at, Some(0));
        assert_eq!(actions[0].events.len(), 2);
        assert_eq!(actions[0].events[0].result, Some(ActionResult::Error));
        assert_eq!(actions[0].events[0].finish, Some(later));
        assert_eq!(actions[0].events[0].detail.as_deref(), Some("not sent"));
        assert_eq!(actions[0].message.as_deref(), Some("Error"));
        // By "newest", only an open event is finished: a done one is not found that way.
        assert_eq!(
            finish_event(
                &mut actions,
                ActionTarget::Newest,
                "controller_create",
                EventOutcome::success(),
                later
            ),
            None
        );
    }

    #[test]
    fn texts_are_checked() {
        let mut new = NewInstanceAction {
            request_id: "req-1".into(),
            instance: Uuid::nil(),
            action: "stop".into(),
            user: None,
            project: None,
            events: vec!["controller_stop".into()],
            done: vec!["controller_create".into()],
        };
        assert!(check_new(&new).is_ok());
        new.events.push(" ".into());
        assert!(matches!(check_new(&new), Err(StoreError::Invalid(_))));
        new.events.pop();
        new.done.push("".into());
        assert!(matches!(check_new(&new), Err(StoreError::Invalid(_))));
        new.done.pop();
        new.request_id = "r".repeat(256);
        assert!(matches!(check_new(&new), Err(StoreError::Invalid(_))));
    }
}
