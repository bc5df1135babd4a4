//! Resize of a stopped instance on its node, as Nova's `resize`, `confirmResize` and
//! `revertResize` (a documented subset; `docs/api.md`, "Instance lifecycle", says the same):
//!
//! - `resize` to a flavor: only `exited` (SHUTOFF) on its node; the instance moves to the
//!   project's workload with that flavor and its own image and user data; its vCPUs and memory
//!   follow, within the quota; a smaller disk, or the same flavor, is refused (400). State
//!   `resized` (Compute `VERIFY_RESIZE`), the workload it had kept for a revert. No frame is sent:
//!   the instance stays powered off on its node.
//! - `confirmResize`: `resized` → `exited` with the new flavor. `revertResize`: back to the
//!   workload (and size) it had, `exited`. As in Nova, the instance stays SHUTOFF.
//! - The next start sends a START with `restart` pinned to the node with the new requirements;
//!   the node applies them when it boots the kept instance.
//!
//! Both the engine and the API's fake cluster apply it with [`apply`]: it only writes the store.

use uuid::Uuid;

use crate::actions::{self, ActionKind};
use crate::cluster::{Caller, ClusterError, ResizeStep};
use store::{Instance, InstanceChange, InstanceState, Scope, Store, StoreError};

/// Whether an instance in `state` (placed on a node when `placed`) can take `step`.
pub fn allowed(step: ResizeStep, state: &InstanceState, placed: bool) -> bool {
    match step {
        ResizeStep::To(_) => *state == InstanceState::Exited && placed,
        ResizeStep::Confirm | ResizeStep::Revert => *state == InstanceState::Resized,
    }
}

/// Applies `step` to instance `id` (see the module docs), recording its action for `by`.
pub fn apply(
    store: &dyn Store,
    scope: Scope,
    id: Uuid,
    step: ResizeStep,
    by: &Caller,
) -> Result<Instance, ClusterError> {
    let current = store.instance(scope, id)?;
    let (kind, operation) = match step {
        ResizeStep::To(_) => (ActionKind::Resize, "resize"),
        ResizeStep::Confirm => (ActionKind::ConfirmResize, "confirm a resize"),
        ResizeStep::Revert => (ActionKind::RevertResize, "revert a resize"),
    };
    if !allowed(step, &current.state, current.node.is_some()) {
        return Err(ClusterError::InvalidState {
            id,
            state: current.state.name().into(),
            operation,
        });
    }
    let change = match step {
        ResizeStep::To(workload) => {
            check_flavors(store, &current, workload)?;
            InstanceChange {
                state: Some(InstanceState::Resized),
                workload: Some(workload),
                resize: true,
                previous_workload: Some(Some(current.workload)),
                ..InstanceChange::default()
            }
        }
        ResizeStep::Confirm => InstanceChange {
            state: Some(InstanceState::Exited),
            previous_workload: Some(None),
            ..InstanceChange::default()
        },
        ResizeStep::Revert => InstanceChange {
            state: Some(InstanceState::Exited),
            workload: current.previous_workload,
            resize: true,
            previous_workload: Some(None),
            ..InstanceChange::default()
        },
    };
    let ticket = actions::begin(store, &actions::request_id_of(by), id, kind, by);
    let changed = store
        .update_instance(scope, id, current.version, change)
        .map_err(ClusterError::from);
    actions::finish(store, &ticket, actions::outcome_of(&changed));
    changed
}

/// A resize to `workload` changes the flavor and never shrinks the disk.
fn check_flavors(
    store: &dyn Store,
    current: &Instance,
    workload: Uuid,
) -> Result<(), ClusterError> {
    let flavor_of = |w: Uuid| -> Result<store::Flavor, StoreError> {
        store.flavor(
            Scope::All,
            store.workload(Scope::Tenant(current.tenant), w)?.flavor,
        )
    };
    let (old, new) = (flavor_of(current.workload)?, flavor_of(workload)?);
    if old.id == new.id {
        return Err(ClusterError::Invalid(format!(
            "the instance has flavor {} already",
            new.name
        )));
    }
    if new.disk_gb < old.disk_gb {
        return Err(ClusterError::Invalid(format!(
            "flavor {} has a smaller disk ({} GB) than the instance's ({} GB): a disk is never shrunk",
            new.name, new.disk_gb, old.disk_gb
        )));
    }
    Ok(())
}
