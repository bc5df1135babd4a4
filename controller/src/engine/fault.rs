//! Why an instance is in `error`, in words: the [`Fault`] the engine stores with it.
//!
//! A START_FAILURE from an agent may carry the cause as its `message` (libvirt's error made
//! readable: `QEMU could not open /x/seed.iso: Permission denied`); the scheduler's own
//! failures (`no_cn`, `full_cloud`, ...) carry none, and the controller says what they mean.
//! The engine's own errors (`dispatch_failure: ...`, `start_lost: ...`) are `code: text` in the
//! state's reason, and their fault is read from it.

use std::time::SystemTime;

use ssntp::payload::{StartFailure, StartFailureReason};

use store::{Fault, Instance, InstanceState};

/// What a START_FAILURE reason means, for the user (when the failure says nothing more).
pub fn describe(reason: StartFailureReason) -> &'static str {
    reason.meaning()
}

/// The fault of a fatal START_FAILURE that arrived at `now` (`reason`: its reason's wire name).
pub fn of_start_failure(failure: &StartFailure, reason: &str, now: SystemTime) -> Fault {
    let message = failure
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| describe(failure.reason));
    Fault {
        reason: reason.to_string(),
        message: message.to_string(),
        created: now,
    }
}

/// The fault that an instance shows: in `error`, the one kept with it, or (an error recorded
/// before faults were kept) one read from its state's reason; stopped (`exited`), the one kept
/// with it when a start failed on its node; `None` otherwise.
pub fn shown(instance: &Instance) -> Option<Fault> {
    match &instance.state {
        InstanceState::Exited => instance.fault.clone(),
        InstanceState::Error(reason) => Some(
            instance
                .fault
                .clone()
                .unwrap_or_else(|| of_state_reason(reason, instance.updated)),
        ),
        _ => None,
    }
}

/// The fault of an error state the engine decided itself: its reason is `code: text` (the
/// engine's own errors), a START_FAILURE reason alone (an error recorded before faults were
/// kept), or any other text, which is then the message too.
pub fn of_state_reason(reason: &str, now: SystemTime) -> Fault {
    let (code, message) = match reason.split_once(": ") {
        Some((code, text)) if !code.is_empty() && !code.contains(' ') => (code, text.to_string()),
        _ => {
            let known = match serde_json::from_value(serde_json::Value::from(reason)) {
                Ok(StartFailureReason::Other) | Err(_) => None,
                Ok(reason) => Some(describe(reason)),
            };
            let message = match reason {
                "dispatch_failure" => Some("the start request could not be sent to the scheduler"),
                super::START_LOST => Some("no node reported the instance after its start request"),
                _ => known,
            };
            (reason, message.unwrap_or(reason).to_string())
        }
    };
    Fault {
        reason: code.to_string(),
        message,
        created: now,
    }
}

/// The wire name of a serde enum value (`image_failure`): a failure's reason as the frames
/// name it.
pub(super) fn serde_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn an_agents_message_wins_and_the_schedulers_failures_are_described() {
        let now = SystemTime::UNIX_EPOCH;
        let agent = StartFailure::new(
            Uuid::nil(),
            Some(Uuid::nil()),
            StartFailureReason::LaunchFailure,
            false,
        )
        .with_message("QEMU could not open /x: Permission denied");
        let f = of_start_failure(&agent, "launch_failure", now);
        assert_eq!(
            (f.reason.as_str(), f.message.as_str(), f.created),
            (
                "launch_failure",
                "QEMU could not open /x: Permission denied",
                now
            )
        );
        let scheduler = StartFailure::new(Uuid::nil(), None, StartFailureReason::FullCloud, false);
        let f = of_start_failure(&scheduler, "full_cloud", now);
        assert_eq!(f.message, "no compute node has room for the instance");
        // A blank message says nothing: the reason is described instead.
        let blank = scheduler.clone().with_message("  ");
        assert_eq!(
            of_start_failure(&blank, "full_cloud", now).message,
            f.message
        );
    }

    #[test]
    fn the_engines_own_reasons_split_into_code_and_text() {
        let now = SystemTime::UNIX_EPOCH;
        let f = of_state_reason("dispatch_failure: scheduler: not connected", now);
        assert_eq!(
            (f.reason.as_str(), f.message.as_str()),
            ("dispatch_failure", "scheduler: not connected")
        );
        let f = of_state_reason("start_lost", now);
        assert_eq!(
            (f.reason.as_str(), f.message.as_str()),
            (
                "start_lost",
                "no node reported the instance after its start request"
            )
        );
        // Text of no known shape is the message as it is.
        let f = of_state_reason("no room at all: none", now);
        assert_eq!(
            (f.reason.as_str(), f.message.as_str()),
            ("no room at all: none", "no room at all: none")
        );
        // A START_FAILURE reason alone (an error recorded before faults were kept).
        let f = of_state_reason("image_failure", now);
        assert_eq!(f.message, "the image is missing or broken");
    }
}
