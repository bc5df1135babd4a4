//! Nova's names for an instance's state: status, vm_state, task_state, power_state.

use store::InstanceState;

/// Nova's status, vm_state, task_state and power_state of an instance state.
pub fn nova_state(state: &InstanceState) -> (&'static str, &'static str, Option<&'static str>, u8) {
    match state {
        InstanceState::Pending => ("BUILD", "building", Some("spawning"), 0),
        InstanceState::Active => ("ACTIVE", "active", None, 1),
        InstanceState::Stopping => ("ACTIVE", "active", Some("powering-off"), 1),
        InstanceState::Exited => ("SHUTOFF", "stopped", None, 4),
        InstanceState::Deleted => ("DELETED", "deleted", Some("deleting"), 0),
        InstanceState::Hung => ("DELETED", "deleted", None, 0),
        InstanceState::Missing => ("UNKNOWN", "error", None, 0),
        InstanceState::Error(_) => ("ERROR", "error", None, 0),
        InstanceState::Paused => ("PAUSED", "paused", None, 3),
        InstanceState::Suspended => ("SUSPENDED", "suspended", None, 7),
        InstanceState::Rebuilding => ("REBUILD", "active", Some("rebuilding"), 0),
        InstanceState::Resized => ("VERIFY_RESIZE", "resized", None, 4),
    }
}
