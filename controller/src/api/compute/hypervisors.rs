//! The admin views of the nodes, as Nova shows its compute hosts at microversion 2.1 (what
//! `openstack hypervisor list|show|stats show` and `openstack compute service list` read):
//! `os-hypervisors` (list, `detail`, one, its `uptime`, `statistics`), `os-services` (list), and
//! `os-aggregates` (an empty list: none are kept). A node that
//! runs tenant instances (compute or dual-role) is one hypervisor and one `nova-compute`
//! service; network-only nodes run CNCIs and are not shown. Figures are the node's latest
//! STATS; a node that is disconnected is `down`, one that is evacuated or in maintenance is
//! `disabled`. Admins only (403 otherwise).
//!
//! Hypervisor ids are the nodes' UUIDs (Nova's from 2.53; at 2.1 clients show them as given).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use std::time::SystemTime;

use crate::api::extract::PathParams;
use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::{Node, NodeStatus};

/// `up` unless the node is not connected.
fn state_of(n: &Node) -> &'static str {
    if n.status == NodeStatus::Disconnected {
        "down"
    } else {
        "up"
    }
}

/// `disabled` while the node takes no new work of its own accord (evacuated, in maintenance,
/// going offline).
fn status_of(n: &Node) -> &'static str {
    match n.status {
        NodeStatus::Maintenance | NodeStatus::Offline => "disabled",
        _ => "enabled",
    }
}

fn name_of(n: &Node) -> String {
    if n.hostname.is_empty() {
        n.id.to_string()
    } else {
        n.hostname.clone()
    }
}

fn mb_to_gb(mb: u32) -> u64 {
    u64::from(mb) / 1024
}

/// A hypervisor in the list (`id`, `hypervisor_hostname`, `state`, `status`).
fn summary(n: &Node) -> Value {
    json!({
        "id": n.id,
        "hypervisor_hostname": name_of(n),
        "state": state_of(n),
        "status": status_of(n),
    })
}

/// A hypervisor with its figures.
fn detail(n: &Node) -> Value {
    let mut v = summary(n);
    let used_mem = n.mem_total_mb.saturating_sub(n.mem_available_mb);
    let used_vcpus = n.vcpus_total.saturating_sub(n.vcpus_available);
    let used_disk = n.disk_total_mb.saturating_sub(n.disk_available_mb);
    let extra = json!({
        "hypervisor_type": "QEMU",
        "hypervisor_version": 0,
        "host_ip": n.ips.first().map(ToString::to_string),
        "vcpus": n.vcpus_total,
        "vcpus_used": used_vcpus,
        "memory_mb": n.mem_total_mb,
        "memory_mb_used": used_mem,
        "free_ram_mb": n.mem_available_mb,
        "local_gb": mb_to_gb(n.disk_total_mb),
        "local_gb_used": mb_to_gb(used_disk),
        "free_disk_gb": mb_to_gb(n.disk_available_mb),
        "disk_available_least": mb_to_gb(n.disk_available_mb),
        "current_workload": 0,
        "running_vms": n.instances,
        "cpu_info": "{}",
        "service": {"host": name_of(n), "id": n.id, "disabled_reason": null},
    });
    if let (Some(map), Value::Object(more)) = (v.as_object_mut(), extra) {
        map.extend(more);
    }
    v
}

/// The nodes that run tenant instances, sorted by host name.
async fn hypervisors(state: &ApiState, caller: &Principal) -> Result<Vec<Node>, ApiError> {
    caller.require_admin()?;
    let mut nodes: Vec<Node> = state
        .cluster(|_, c| Ok(c.nodes()))
        .await?
        .into_iter()
        .filter(|n| n.kinds.compute)
        .collect();
    nodes.sort_by_key(name_of);
    Ok(nodes)
}

/// `GET /os-hypervisors`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let nodes = hypervisors(&state, &caller).await?;
    Ok(Json(
        json!({"hypervisors": nodes.iter().map(summary).collect::<Vec<_>>()}),
    ))
}

/// `GET /os-hypervisors/detail`.
pub async fn list_detail(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let nodes = hypervisors(&state, &caller).await?;
    Ok(Json(
        json!({"hypervisors": nodes.iter().map(detail).collect::<Vec<_>>()}),
    ))
}

/// `GET /os-hypervisors/{id}`: by UUID or host name (404 `itemNotFound` otherwise).
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let nodes = hypervisors(&state, &caller).await?;
    Ok(Json(json!({"hypervisor": detail(find(&nodes, &id)?)})))
}

/// The node by UUID or host name (404 `itemNotFound` otherwise).
fn find<'a>(nodes: &'a [Node], id: &str) -> Result<&'a Node, ApiError> {
    nodes
        .iter()
        .find(|n| n.id.to_string() == id || n.hostname == id)
        .ok_or_else(|| ApiError::NotFound(format!("Hypervisor with ID {id} could not be found.")))
}

/// `GET /os-hypervisors/{id}/uptime`: how long the node has been connected, in the shape of
/// `uptime(1)`'s line that clients parse (`HH:MM:SS up D days, HH:MM, 0 users, load average:
/// L, L, L`; the load is the node's latest one-minute figure).
pub async fn uptime(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let nodes = hypervisors(&state, &caller).await?;
    let n = find(&nodes, &id)?;
    let now = SystemTime::now();
    let up = now
        .duration_since(n.connected)
        .unwrap_or_default()
        .as_secs();
    let clock = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        % 86_400;
    let load = f64::from(n.load) / 100.0;
    let line = format!(
        " {:02}:{:02}:{:02} up {} days, {:02}:{:02}, 0 users, load average: {load:.2}, {load:.2}, {load:.2}",
        clock / 3600,
        clock / 60 % 60,
        clock % 60,
        up / 86_400,
        up / 3600 % 24,
        up / 60 % 60,
    );
    let mut shown = summary(n);
    if let Some(map) = shown.as_object_mut() {
        map.insert("uptime".into(), json!(line));
    }
    Ok(Json(json!({ "hypervisor": shown })))
}

/// `GET /os-aggregates`: host aggregates are not kept; the list is empty.
pub async fn aggregates(caller: Principal) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    Ok(Json(json!({"aggregates": []})))
}

/// `GET /os-hypervisors/statistics`: the sums over the nodes that are up.
pub async fn statistics(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let nodes = hypervisors(&state, &caller).await?;
    let up: Vec<&Node> = nodes
        .iter()
        .filter(|n| n.status != NodeStatus::Disconnected)
        .collect();
    let sum = |f: fn(&Node) -> u64| up.iter().map(|n| f(n)).sum::<u64>();
    let vcpus = sum(|n| u64::from(n.vcpus_total));
    let vcpus_free = sum(|n| u64::from(n.vcpus_available));
    let memory = sum(|n| u64::from(n.mem_total_mb));
    let memory_free = sum(|n| u64::from(n.mem_available_mb));
    let disk = sum(|n| mb_to_gb(n.disk_total_mb));
    let disk_free = sum(|n| mb_to_gb(n.disk_available_mb));
    Ok(Json(json!({"hypervisor_statistics": {
        "count": up.len(),
        "vcpus": vcpus,
        "vcpus_used": vcpus.saturating_sub(vcpus_free),
        "memory_mb": memory,
        "memory_mb_used": memory.saturating_sub(memory_free),
        "free_ram_mb": memory_free,
        "local_gb": disk,
        "local_gb_used": disk.saturating_sub(disk_free),
        "free_disk_gb": disk_free,
        "disk_available_least": disk_free,
        "current_workload": 0,
        "running_vms": sum(|n| u64::from(n.instances)),
    }})))
}

/// `GET /os-services`: one `nova-compute` service per hypervisor, with `updated_at` its latest
/// STATS (or its connection).
pub async fn services(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let nodes = hypervisors(&state, &caller).await?;
    let services: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let updated = n.last_stats.unwrap_or(n.connected);
            json!({
                "id": n.id,
                "binary": "nova-compute",
                "host": name_of(n),
                "zone": "nova",
                "status": status_of(n),
                "state": state_of(n),
                "updated_at": crate::api::clock::nova_micro(updated),
                "disabled_reason": null,
            })
        })
        .collect();
    Ok(Json(json!({ "services": services })))
}
