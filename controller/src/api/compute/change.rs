//! Changing a server's record from what it is now: the read, the change, the compare-and-swap
//! write, retried when another change came first.

use store::{Instance, InstanceChange, Scope, Store, StoreError};
use uuid::Uuid;

use crate::api::ApiError;

/// Retries of a change that lost a race with another change of the record.
const RETRIES: usize = 8;

/// Writes the change `edit` makes of the server `id` (in `scope`) as it is now, again from the
/// new record when another write came first; 409 naming `what` when it kept losing. `edit`'s
/// error ends it.
pub fn retried(
    store: &dyn Store,
    scope: Scope,
    id: Uuid,
    what: &str,
    mut edit: impl FnMut(&Instance) -> Result<InstanceChange, ApiError>,
) -> Result<Instance, ApiError> {
    for _ in 0..RETRIES {
        let current = store.instance(scope, id)?;
        let change = edit(&current)?;
        match store.update_instance(scope, id, current.version, change) {
            Ok(changed) => return Ok(changed),
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Conflict(format!(
        "server {id} kept changing: {what} was not changed"
    )))
}
