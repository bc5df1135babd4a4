//! The `resize`, `confirmResize` and `revertResize` server actions (of a SHUTOFF server, on its
//! node: see `crate::resize` for the rule): `resize` `{"flavorRef"}` is 202 (400 for an unknown
//! flavor, the same flavor or a smaller disk; 409 unless SHUTOFF), `confirmResize` 204 and
//! `revertResize` 202 (409 unless VERIFY_RESIZE).

use serde_json::Value;
use uuid::Uuid;

use super::launch::{reference_id, workload_for};
use crate::api::ApiError;
use crate::cluster::{ClusterError, ResizeStep};
use store::{Instance, Scope, Store, StoreError};

/// Parses `{"resize": {"flavorRef": ...}}`'s value: the flavor (other keys are ignored).
pub fn parse(value: &Value) -> Result<Uuid, ApiError> {
    match value.get("flavorRef") {
        Some(r) => reference_id("Flavor", r),
        None => Err(ApiError::BadRequest("resize needs a flavorRef".into())),
    }
}

/// The workload a resize of `instance` to `flavor` moves it to: the project's workload of that
/// flavor with the instance's image and user data (made if it has none, ephemeral as its own).
/// 409 when the instance is not stopped on its node (checked first, so that a refused request
/// makes nothing), 400 for a flavor not seen in `seen` (the caller's flavor scope: an unknown
/// flavor, or a private one the caller's project has no access to).
pub fn target_workload(
    store: &dyn Store,
    instance: &Instance,
    flavor: Uuid,
    seen: Scope,
) -> Result<Uuid, ApiError> {
    let step = ResizeStep::To(instance.workload);
    if !crate::resize::allowed(step, &instance.state, instance.node.is_some()) {
        return Err(ClusterError::InvalidState {
            id: instance.id,
            state: instance.state.name().into(),
            operation: "resize",
        }
        .into());
    }
    match store.flavor(seen, flavor) {
        Ok(_) => {}
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::BadRequest(format!(
                "Flavor {flavor} could not be found."
            )));
        }
        Err(e) => return Err(e.into()),
    }
    let own = store.workload(Scope::All, instance.workload)?;
    workload_for(
        store,
        instance.tenant,
        flavor,
        own.image,
        &own.user_data,
        own.ephemeral,
    )
}
