//! Handshake payloads (CONNECT, CONNECTED) and the cluster configuration (CONFIGURE).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::cbor;
use super::types::Cidr;
use crate::Role;

/// CONNECT: the role the client claims for this session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connect {
    /// The claimed role; a subset of the client certificate's roles.
    #[serde(with = "cbor::role_bits")]
    pub role: Role,
}

/// CONNECTED: the server's roles, the client's UUID as the server saw it, the cluster configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connected {
    /// The roles of the server's certificate.
    #[serde(with = "cbor::role_bits")]
    pub role: Role,
    /// The client's UUID (the CONNECT's origin).
    #[serde(with = "cbor::uuid_bytes")]
    pub client_uuid: Uuid,
    /// The cluster configuration (may be empty).
    #[serde(default)]
    pub config: ClusterConfig,
}

/// The cluster configuration: sent in CONNECTED, set with CONFIGURE. Every key is optional.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Settings the scheduler applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SchedulerConfig>,
    /// Settings for controllers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<ControllerConfig>,
    /// Settings for launchers (agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<LauncherConfig>,
}

/// Scheduler settings in the cluster configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SchedulerConfig {
    /// Seconds between agents' STATS; a node silent for three intervals is dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats_interval_s: Option<u32>,
}

/// Controller settings in the cluster configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ControllerConfig {
    /// The TCP port of the REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_port: Option<u16>,
    /// vCPUs of a CNCI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnci_vcpus: Option<u32>,
    /// Memory of a CNCI, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnci_mem_mb: Option<u32>,
    /// Disk of a CNCI, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnci_disk_mb: Option<u32>,
    /// The network CNCIs' management addresses come from.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "cbor::opt_text"
    )]
    pub cnci_net: Option<Cidr>,
    /// The administrator's SSH public key, given to every instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_ssh_key: Option<String>,
}

/// Launcher settings in the cluster configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LauncherConfig {
    /// Networks that carry tenant traffic between nodes.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "cbor::text_list"
    )]
    pub compute_net: Vec<Cidr>,
    /// Networks that carry management traffic.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "cbor::text_list"
    )]
    pub mgmt_net: Vec<Cidr>,
    /// Whether agents refuse START when disk runs low.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_limit: Option<bool>,
    /// Whether agents refuse START when memory runs low.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_limit: Option<bool>,
}
