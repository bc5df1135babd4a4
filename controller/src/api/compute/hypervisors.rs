//! The admin views of the nodes, as Nova shows its compute hosts at microversion 2.1 (what
//! `openstack hypervisor list|show|stats show` read): `os-hypervisors` (list, `detail`, one, its
//! `uptime`, `statistics`, `search`, `servers`), and `os-aggregates` (an empty list: none are
//! kept); `os-services` is [`super::services`]', `os-hosts` [`super::hosts`]'. A node that
//! runs tenant instances (compute or dual-role) is one hypervisor and one `nova-compute`
//! service; network-only nodes run CNCIs and are not shown. Figures are the node's latest
//! STATS; a node that is disconnected is `down`, one that an admin disabled, or that is
//! evacuated or in maintenance, is `disabled`. Admins only (403 otherwise).
//!
//! Hypervisor ids are the nodes' UUIDs (Nova's from 2.53; at 2.1 clients show them as given).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use std::time::SystemTime;

use crate::api::extract::PathParams;
use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::{Node, NodeStatus};
use store::{DisabledNode, InstanceFilter, Page, Scope};

/// A node that runs tenant instances, and whether an admin disabled it.
pub(super) struct Host {
    /// The node.
    pub node: Node,
    /// Its disabled record, if an admin disabled it.
    pub disabled: Option<DisabledNode>,
}

/// `up` unless the node is not connected.
pub(super) fn state_of(n: &Node) -> &'static str {
    if n.status == NodeStatus::Disconnected {
        "down"
    } else {
        "up"
    }
}

/// `disabled` while the node takes no new work: an admin disabled it, or of its own accord
/// (evacuated, in maintenance, going offline).
pub(super) fn status_of(h: &Host) -> &'static str {
    match h.node.status {
        _ if h.disabled.is_some() => "disabled",
        NodeStatus::Maintenance | NodeStatus::Offline => "disabled",
        _ => "enabled",
    }
}

/// Why it is disabled, if an admin said.
pub(super) fn reason_of(h: &Host) -> Option<&str> {
    h.disabled.as_ref().and_then(|d| d.reason.as_deref())
}

/// The host name the node goes by (its UUID until its first STATS).
pub(super) fn name_of(n: &Node) -> String {
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
fn summary(h: &Host) -> Value {
    let n = &h.node;
    json!({
        "id": n.id,
        "hypervisor_hostname": name_of(n),
        "state": state_of(n),
        "status": status_of(h),
    })
}

/// A hypervisor with its figures.
fn detail(h: &Host) -> Value {
    let n = &h.node;
    let mut v = summary(h);
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
        "service": {"host": name_of(n), "id": n.id, "disabled_reason": reason_of(h)},
    });
    if let (Some(map), Value::Object(more)) = (v.as_object_mut(), extra) {
        map.extend(more);
    }
    v
}

/// The nodes that run tenant instances, sorted by host name, with their disabled records.
pub(super) async fn hypervisors(
    state: &ApiState,
    caller: &Principal,
) -> Result<Vec<Host>, ApiError> {
    caller.require_admin()?;
    let (nodes, disabled) = state
        .cluster(|store, c| Ok((c.nodes(), store.disabled_nodes()?)))
        .await?;
    let mut hosts: Vec<Host> = nodes
        .into_iter()
        .filter(|n| n.kinds.compute)
        .map(|node| Host {
            disabled: disabled.iter().find(|d| d.node == node.id).cloned(),
            node,
        })
        .collect();
    hosts.sort_by_key(|h| name_of(&h.node));
    Ok(hosts)
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

/// Whether `host` names the node: its UUID or its host name.
pub(super) fn named(n: &Node, host: &str) -> bool {
    n.id.to_string() == host || (!n.hostname.is_empty() && n.hostname == host)
}

/// The node by UUID or host name (404 `itemNotFound` otherwise).
fn find<'a>(hosts: &'a [Host], id: &str) -> Result<&'a Host, ApiError> {
    hosts
        .iter()
        .find(|h| named(&h.node, id))
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
    let hosts = hypervisors(&state, &caller).await?;
    let h = find(&hosts, &id)?;
    let n = &h.node;
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
    let mut shown = summary(h);
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
    let hosts = hypervisors(&state, &caller).await?;
    let up: Vec<&Node> = hosts
        .iter()
        .map(|h| &h.node)
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

/// The hypervisors whose host name holds `pattern` (Nova's `hypervisor_hostname_pattern`); 404
/// when none does.
fn matching<'a>(hosts: &'a [Host], pattern: &str) -> Result<Vec<&'a Host>, ApiError> {
    let found: Vec<&Host> = hosts
        .iter()
        .filter(|h| name_of(&h.node).contains(pattern))
        .collect();
    if found.is_empty() {
        return Err(ApiError::NotFound(format!(
            "No hypervisor matching '{pattern}' could be found."
        )));
    }
    Ok(found)
}

/// `GET /os-hypervisors/{pattern}/search`: the hypervisors whose host name holds the pattern.
pub async fn search(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(pattern): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let hosts = hypervisors(&state, &caller).await?;
    let found = matching(&hosts, &pattern)?;
    Ok(Json(
        json!({"hypervisors": found.into_iter().map(summary).collect::<Vec<_>>()}),
    ))
}

/// The most servers `os-hypervisors/{pattern}/servers` lists per hypervisor.
const SERVERS_SHOWN: u32 = Page::MAX_LIMIT;

/// `GET /os-hypervisors/{pattern}/servers`: those hypervisors with their servers (`uuid`, `name`;
/// at most 1,000 each); a hypervisor without any has no `servers` key, as Nova's.
pub async fn servers(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(pattern): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let hosts = hypervisors(&state, &caller).await?;
    let found = matching(&hosts, &pattern)?;
    let ids: Vec<uuid::Uuid> = found.iter().map(|h| h.node.id).collect();
    let on = state
        .store(move |store| {
            ids.into_iter()
                .map(|node| {
                    let filter = InstanceFilter { node: Some(node) };
                    let page = Page {
                        marker: None,
                        limit: SERVERS_SHOWN,
                    };
                    Ok(store.instances(Scope::All, filter, page)?.items)
                })
                .collect::<Result<Vec<_>, ApiError>>()
        })
        .await?;
    let list: Vec<Value> = found
        .into_iter()
        .zip(on)
        .map(|(h, instances)| {
            let mut v = summary(h);
            if !instances.is_empty() {
                v["servers"] = instances
                    .iter()
                    .map(|i| json!({"uuid": i.id, "name": i.name}))
                    .collect();
            }
            v
        })
        .collect();
    Ok(Json(json!({ "hypervisors": list })))
}
