//! Locked servers, as Nova has them: the `lock` and `unlock` actions, and the check that every
//! action changing a server makes first.
//!
//! A locked server refuses its project's members every action that changes it (stop, start,
//! reboot, pause, suspend and their undoing, rebuild, resize, delete, volume attachments,
//! metadata changes, here and in the native API): 409 "Instance X is locked". Admins act on
//! locked servers. Who locked it is kept as Nova keeps it (`locked_by`): `owner` when the caller's
//! token is scoped to the server's project, `admin` when an admin locked another project's
//! server; a lock the owner did not take is lifted by an admin only (403 otherwise, Nova's
//! `unlock_override` rule). Renaming, reading, the console and snapshots are not refused, as in
//! Nova. At microversion 2.1 the server's body does not show the lock (2.9 adds `locked`).

use store::{Instance, InstanceChange, LockedBy, Scope, Store};
use uuid::Uuid;

use crate::api::{ApiError, Principal};

/// The 409 Nova answers for an action on a locked server.
pub fn locked(id: Uuid) -> ApiError {
    ApiError::Conflict(format!("Instance {id} is locked"))
}

/// Refuses an action on `instance` when it is locked and `admin` is false.
pub fn check(instance: &Instance, admin: bool) -> Result<(), ApiError> {
    match instance.locked_by {
        Some(_) if !admin => Err(locked(instance.id)),
        _ => Ok(()),
    }
}

/// The instance `id` in `scope`, refused when it is locked and `admin` is false: what an action
/// reads before it acts (in the same blocking task).
pub fn unlocked(
    store: &dyn Store,
    scope: Scope,
    id: Uuid,
    admin: bool,
) -> Result<Instance, ApiError> {
    let instance = store.instance(scope, id)?;
    check(&instance, admin)?;
    Ok(instance)
}

/// Who a lock by `caller` on a server of `tenant` is taken by.
pub fn locker(caller: &Principal, tenant: Uuid) -> LockedBy {
    if caller.project == Some(tenant) {
        LockedBy::Owner
    } else {
        LockedBy::Admin
    }
}

/// Locks (`lock` true) or unlocks the server `id` in `scope` for `caller`.
pub fn set(
    store: &dyn Store,
    caller: &Principal,
    scope: Scope,
    id: Uuid,
    lock: bool,
) -> Result<(), ApiError> {
    super::change::retried(store, scope, id, "its lock", |current| {
        let by = locker(caller, current.tenant);
        let wanted = if lock {
            // Nova's rule: the owner locking a locked server changes nothing (an admin's lock
            // stays the admin's, which the owner may not lift).
            if current.locked_by.is_some() && by == LockedBy::Owner {
                current.locked_by
            } else {
                Some(by)
            }
        } else {
            if current.locked_by.is_some_and(|held| held != by) && !caller.is_admin() {
                return Err(ApiError::Forbidden(
                    "Policy doesn't allow os_compute_api:os-lock-server:unlock:unlock_override to be performed.".into(),
                ));
            }
            None
        };
        Ok(InstanceChange {
            locked_by: Some(wanted),
            ..InstanceChange::default()
        })
    })?;
    Ok(())
}
