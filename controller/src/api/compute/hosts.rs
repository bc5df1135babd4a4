//! `os-hosts` as Nova has it at microversion 2.1 (it went with 2.43): each node that runs tenant
//! instances is a `compute` host in zone `nova` ([`super::hypervisors`]). `GET /os-hosts` lists
//! them, `GET /os-hosts/{host}` gives its resources (`(total)` and `(used_now)` from its latest
//! STATS), `PUT /os-hosts/{host}` with `{"status": "enable"|"disable"}` enables or disables it as
//! `os-services` does ([`super::services`]); `maintenance_mode` is not served (400). Admins only.
//! Also `os-availability-zone/detail`: the one zone, `nova`, with its hosts.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::hypervisors::{Host, hypervisors, name_of, named};
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiError, ApiState, Principal};

/// `GET /os-hosts`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let hosts = hypervisors(&state, &caller).await?;
    let list: Vec<Value> = hosts
        .iter()
        .map(|h| json!({"host_name": name_of(&h.node), "service": "compute", "zone": h.node.zone}))
        .collect();
    Ok(Json(json!({ "hosts": list })))
}

async fn find(state: &ApiState, caller: &Principal, host: &str) -> Result<Host, ApiError> {
    hypervisors(state, caller)
        .await?
        .into_iter()
        .find(|h| named(&h.node, host))
        .ok_or_else(|| ApiError::NotFound(format!("Compute host {host} could not be found.")))
}

/// `GET /os-hosts/{host}`: its resources, `(total)` and `(used_now)`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(host): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let h = find(&state, &caller, &host).await?;
    let n = &h.node;
    let name = name_of(n);
    let row = |project: &str, cpu: u32, mem: u32, disk: u32| {
        json!({"resource": {
            "host": name,
            "project": project,
            "cpu": cpu,
            "memory_mb": mem,
            "disk_gb": disk / 1024,
        }})
    };
    Ok(Json(json!({"host": [
        row("(total)", n.vcpus_total, n.mem_total_mb, n.disk_total_mb),
        row(
            "(used_now)",
            n.vcpus_total.saturating_sub(n.vcpus_available),
            n.mem_total_mb.saturating_sub(n.mem_available_mb),
            n.disk_total_mb.saturating_sub(n.disk_available_mb),
        ),
    ]})))
}

/// `PUT /os-hosts/{host}` with `{"status": "enable"|"disable"}`: 200 `{"host", "status"}`.
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(host): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let object = body.as_object().filter(|o| !o.is_empty()).ok_or_else(|| {
        ApiError::BadRequest("the body needs a \"status\" of enable or disable".into())
    })?;
    for key in object.keys() {
        if key != "status" {
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute {key}: only status (enable, disable) is served; maintenance mode is not"
            )));
        }
    }
    let enable = match object.get("status").and_then(Value::as_str) {
        Some("enable") => true,
        Some("disable") => false,
        _ => {
            return Err(ApiError::BadRequest(
                "Invalid input for field/attribute status: enable or disable".into(),
            ));
        }
    };
    let h = find(&state, &caller, &host).await?;
    super::services::set_enabled(&state, &h, enable, None).await?;
    Ok(Json(json!({
        "host": name_of(&h.node),
        "status": if enable { "enabled" } else { "disabled" },
    })))
}

/// The zones of the compute nodes `nodes`, by name; the default zone alone when there are none.
fn zones_of<'n>(
    nodes: impl Iterator<Item = &'n crate::cluster::Node>,
) -> std::collections::BTreeMap<String, Vec<&'n crate::cluster::Node>> {
    let mut zones: std::collections::BTreeMap<String, Vec<_>> = std::collections::BTreeMap::new();
    for n in nodes.filter(|n| n.kinds.compute) {
        zones.entry(n.zone.clone()).or_default().push(n);
    }
    if zones.is_empty() {
        zones.insert(ssntp::payload::DEFAULT_ZONE.into(), Vec::new());
    }
    zones
}

/// `GET /os-availability-zone` (`openstack availability zone list --compute`): the zones the
/// compute nodes are in (each agent's `--zone`, `nova` by default), available while one of
/// their nodes is connected; `nova` alone while there are no nodes.
pub async fn zones(
    State(state): State<ApiState>,
    _caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let nodes = state.cluster(|_, cluster| Ok(cluster.nodes())).await?;
    let info: Vec<Value> = zones_of(nodes.iter())
        .into_iter()
        .map(|(zone, nodes)| {
            let up = nodes.is_empty()
                || nodes
                    .iter()
                    .any(|n| n.status != crate::cluster::NodeStatus::Disconnected);
            json!({"zoneName": zone, "zoneState": {"available": up}, "hosts": null})
        })
        .collect();
    Ok(Json(json!({ "availabilityZoneInfo": info })))
}

/// `GET /os-availability-zone/detail` (admins; `openstack availability zone list --long`): each
/// zone with its hosts' `nova-compute` services (`available` while connected, `active` while
/// enabled).
pub async fn zones_detail(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let hosts = hypervisors(&state, &caller).await?;
    let by_zone = zones_of(hosts.iter().map(|h| &h.node));
    let info: Vec<Value> = by_zone
        .into_iter()
        .map(|(zone, nodes)| {
            let mut map = serde_json::Map::new();
            for n in &nodes {
                let Some(h) = hosts.iter().find(|h| h.node.id == n.id) else {
                    continue;
                };
                map.insert(
                    name_of(n),
                    json!({"nova-compute": {
                        "available": n.status != crate::cluster::NodeStatus::Disconnected,
                        "active": super::hypervisors::status_of(h) == "enabled",
                        "updated_at": crate::api::clock::nova_micro(n.last_stats.unwrap_or(n.connected)),
                    }}),
                );
            }
            let up = nodes.is_empty()
                || nodes
                    .iter()
                    .any(|n| n.status != crate::cluster::NodeStatus::Disconnected);
            json!({"zoneName": zone, "zoneState": {"available": up}, "hosts": Value::Object(map)})
        })
        .collect();
    Ok(Json(json!({ "availabilityZoneInfo": info })))
}
