//! `os-services` as Nova has it at microversion 2.1: each node that runs tenant instances is a
//! `nova-compute` service ([`super::hypervisors`]); `openstack compute service list [--host H]
//! [--service nova-compute]` lists them, `compute service set --disable [--disable-reason R] H
//! nova-compute` and `--enable` disable and enable them.
//!
//! A disabled service is the drain users expect: its node takes no new instance (the controller
//! names it in every START's `avoid_nodes`, which the scheduler honours); what runs there stays,
//! and a stopped server starts there again. Disabled nodes are kept in the store, so they stay
//! disabled across restarts of the controller. Admins only (403 otherwise).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::hypervisors::{Host, hypervisors, name_of, named, reason_of, state_of, status_of};
use crate::api::extract::{JsonBody, PathParams, QueryParams};
use crate::api::{ApiError, ApiState, Principal};

/// The one service binary cumulo's nodes run, as Nova names it.
pub const BINARY: &str = "nova-compute";

/// The query of a service listing.
#[derive(Debug, Default, Deserialize)]
pub struct ServiceQuery {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    binary: Option<String>,
}

fn service(h: &Host) -> Value {
    let n = &h.node;
    let updated = n.last_stats.unwrap_or(n.connected);
    json!({
        "id": n.id,
        "binary": BINARY,
        "host": name_of(n),
        "zone": n.zone,
        "status": status_of(h),
        "state": state_of(n),
        "updated_at": crate::api::clock::nova_micro(updated),
        "disabled_reason": reason_of(h),
    })
}

/// `GET /os-services[?host=H&binary=B]`: one `nova-compute` service per hypervisor, with
/// `updated_at` its latest STATS (or its connection).
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<ServiceQuery>,
) -> Result<Json<Value>, ApiError> {
    let hosts = hypervisors(&state, &caller).await?;
    let services: Vec<Value> = hosts
        .iter()
        .filter(|h| query.host.as_ref().is_none_or(|q| named(&h.node, q)))
        .filter(|_| query.binary.as_ref().is_none_or(|b| b == BINARY))
        .map(service)
        .collect();
    Ok(Json(json!({ "services": services })))
}

/// A body's text field.
fn text<'a>(body: &'a Value, field: &str) -> Result<&'a str, ApiError> {
    body.get(field).and_then(Value::as_str).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "Invalid input for field/attribute {field}: a string is required"
        ))
    })
}

/// The node a body's `host` and `binary` name (404 as Nova's when there is none).
async fn target(state: &ApiState, caller: &Principal, body: &Value) -> Result<Host, ApiError> {
    let host = text(body, "host")?;
    let binary = text(body, "binary")?;
    let hosts = hypervisors(state, caller).await?;
    hosts
        .into_iter()
        .find(|h| binary == BINARY && named(&h.node, host))
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "Compute host {host} with binary {binary} could not be found."
            ))
        })
}

/// Disables (with an optional reason) or enables the node `h`; the service as it is then.
pub(super) async fn set_enabled(
    state: &ApiState,
    h: &Host,
    enable: bool,
    reason: Option<String>,
) -> Result<Option<String>, ApiError> {
    let id = h.node.id;
    state
        .cluster(move |_, cluster| {
            if enable {
                cluster.enable_node(id)?;
                Ok(None)
            } else {
                Ok(cluster.disable_node(id, reason)?.reason)
            }
        })
        .await
}

/// `PUT /os-services/{enable|disable|disable-log-reason}` with `{"host", "binary"}` (and
/// `disabled_reason`, 1 to 255 characters, for the last): 200 with the service's `host`,
/// `binary`, `status` (and `disabled_reason`).
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(action): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let (enable, with_reason) = match action.as_str() {
        "enable" => (true, false),
        "disable" => (false, false),
        "disable-log-reason" => (false, true),
        other => {
            return Err(ApiError::NotFound(format!(
                "Unknown action {other}: enable, disable or disable-log-reason"
            )));
        }
    };
    let reason = if with_reason {
        let reason = text(&body, "disabled_reason")?;
        let count = reason.chars().count();
        if count == 0 || count > store::DisabledNode::MAX_REASON {
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute disabled_reason: 1 to {} characters",
                store::DisabledNode::MAX_REASON
            )));
        }
        Some(reason.to_string())
    } else {
        None
    };
    let h = match target(&state, &caller, &body).await {
        Ok(h) => h,
        // A node that is gone may still be disabled: enabling it by its UUID clears that.
        Err(ApiError::NotFound(why)) if enable => {
            let node = text(&body, "host")?.parse::<uuid::Uuid>();
            let cleared = match node {
                Ok(node) => state.cluster(move |_, c| Ok(c.enable_node(node)?)).await?,
                Err(_) => false,
            };
            if !cleared {
                return Err(ApiError::NotFound(why));
            }
            return Ok(Json(json!({"service": {
                "host": text(&body, "host")?,
                "binary": BINARY,
                "status": "enabled",
            }})));
        }
        Err(e) => return Err(e),
    };
    let reason = set_enabled(&state, &h, enable, reason).await?;
    let mut shown = json!({
        "host": name_of(&h.node),
        "binary": BINARY,
        "status": if enable { "enabled" } else { "disabled" },
    });
    if with_reason {
        shown["disabled_reason"] = json!(reason);
    }
    Ok(Json(json!({ "service": shown })))
}
