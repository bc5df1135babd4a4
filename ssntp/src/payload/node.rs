//! Node payloads: READY (and READY-shaped FULL/MAINTENANCE/OFFLINE), STATS, NODE_* events.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use uuid::Uuid;

use super::cbor;
use super::types::MacAddr;

/// READY: a node's identity and capacity. Also the optional body of FULL, MAINTENANCE, OFFLINE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// The node's UUID; must equal the session's.
    #[serde(with = "cbor::uuid_bytes")]
    pub node_uuid: Uuid,
    /// The node's host name.
    pub hostname: String,
    /// Memory in all, MiB.
    pub mem_total_mb: u32,
    /// Memory free for instances, MiB.
    pub mem_available_mb: u32,
    /// Disk in all, MiB.
    pub disk_total_mb: u32,
    /// Disk free for instances, MiB.
    pub disk_available_mb: u32,
    /// vCPUs in all.
    pub vcpus_total: u32,
    /// vCPUs free for instances.
    pub vcpus_available: u32,
    /// One-minute load average × 100.
    pub load: u32,
    /// The node's network interfaces.
    pub networks: Vec<NodeNetwork>,
    /// The availability zone the node's admin put it in ([`valid_zone`]); absent (or not a
    /// valid name): [`DEFAULT_ZONE`]. A compatible addition of 2026-12-03.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// The zone of a node that names none (Compute's default zone).
pub const DEFAULT_ZONE: &str = "nova";

/// The longest zone name, in bytes.
pub const MAX_ZONE: usize = 63;

/// Whether `zone` may name an availability zone: 1 to [`MAX_ZONE`] ASCII letters, digits, `-`,
/// `_` or `.`.
pub fn valid_zone(zone: &str) -> bool {
    (1..=MAX_ZONE).contains(&zone.len())
        && zone
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl NodeStatus {
    /// The node's zone: its own if it names a valid one, [`DEFAULT_ZONE`] otherwise.
    pub fn zone_name(&self) -> &str {
        match self.zone.as_deref() {
            Some(zone) if valid_zone(zone) => zone,
            _ => DEFAULT_ZONE,
        }
    }
}

/// One network interface of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeNetwork {
    /// Its IP address.
    #[serde(with = "cbor::text")]
    pub ip: IpAddr,
    /// Its MAC address.
    #[serde(with = "cbor::text")]
    pub mac: MacAddr,
}

/// The status word in STATS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NodeState {
    /// Taking work.
    Ready,
    /// Out of room.
    Full,
    /// In maintenance (evacuated).
    Maintenance,
    /// Going away.
    Offline,
}

/// STATS: every READY field, the node's status, and its instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StatsWire", into = "StatsWire")]
pub struct Stats {
    /// The node's figures, as in READY.
    pub node: NodeStatus,
    /// The node's status.
    pub status: NodeState,
    /// Every instance on the node.
    pub instances: Vec<InstanceStat>,
}

/// STATS as it is on the wire: one flat map.
#[derive(Clone, Serialize, Deserialize)]
struct StatsWire {
    #[serde(with = "cbor::uuid_bytes")]
    node_uuid: Uuid,
    hostname: String,
    mem_total_mb: u32,
    mem_available_mb: u32,
    disk_total_mb: u32,
    disk_available_mb: u32,
    vcpus_total: u32,
    vcpus_available: u32,
    load: u32,
    networks: Vec<NodeNetwork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    zone: Option<String>,
    status: NodeState,
    instances: Vec<InstanceStat>,
}

impl From<StatsWire> for Stats {
    fn from(w: StatsWire) -> Stats {
        Stats {
            node: NodeStatus {
                node_uuid: w.node_uuid,
                hostname: w.hostname,
                mem_total_mb: w.mem_total_mb,
                mem_available_mb: w.mem_available_mb,
                disk_total_mb: w.disk_total_mb,
                disk_available_mb: w.disk_available_mb,
                vcpus_total: w.vcpus_total,
                vcpus_available: w.vcpus_available,
                load: w.load,
                networks: w.networks,
                zone: w.zone,
            },
            status: w.status,
            instances: w.instances,
        }
    }
}

impl From<Stats> for StatsWire {
    fn from(s: Stats) -> StatsWire {
        let n = s.node;
        StatsWire {
            node_uuid: n.node_uuid,
            hostname: n.hostname,
            mem_total_mb: n.mem_total_mb,
            mem_available_mb: n.mem_available_mb,
            disk_total_mb: n.disk_total_mb,
            disk_available_mb: n.disk_available_mb,
            vcpus_total: n.vcpus_total,
            vcpus_available: n.vcpus_available,
            load: n.load,
            networks: n.networks,
            zone: n.zone,
            status: s.status,
            instances: s.instances,
        }
    }
}

/// An instance's state as its agent sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceState {
    /// Being created or booting.
    Pending,
    /// Running.
    Active,
    /// Stopped.
    Exited,
    /// Being stopped.
    Stopping,
    /// Failed to stop.
    ExitFailed,
    /// Frozen in memory (INSTANCE_ACTION `pause`).
    Paused,
    /// Saved to its node's disk (INSTANCE_ACTION `suspend`).
    Suspended,
}

/// One instance in STATS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStat {
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// Its state.
    pub state: InstanceState,
    /// Where to reach it by SSH, if known.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_text"
    )]
    pub ssh_ip: Option<IpAddr>,
    /// The SSH port, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_port: Option<u16>,
    /// Memory in use, MiB.
    pub memory_usage_mb: u32,
    /// Disk in use, MiB.
    pub disk_usage_mb: u32,
    /// CPU use, 0–100 over its vCPUs, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usage: Option<u32>,
    /// The volumes attached to it (a project addition, optional: absent is none).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "cbor::uuid_list"
    )]
    pub volumes: Vec<Uuid>,
}

/// The kind of node in NODE_CONNECTED / NODE_DISCONNECTED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeType {
    /// A compute node (AGENT session).
    ComputeNode,
    /// A network node (NETAGENT session).
    NetworkNode,
}

/// NODE_CONNECTED, NODE_DISCONNECTED: a node arrived at or left the scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvent {
    /// The node.
    #[serde(with = "cbor::uuid_bytes")]
    pub node_uuid: Uuid,
    /// Which list it joined or left.
    pub node_type: NodeType,
}

/// EVACUATE, RESTORE: commands to a whole node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCommand {
    /// The node (agent) to act on.
    #[serde(with = "cbor::uuid_bytes")]
    pub workload_agent_uuid: Uuid,
}
