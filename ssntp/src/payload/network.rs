//! Tenant network payloads: public IPs, tenants joining CNCIs, CNCI announcements and refreshes.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use uuid::Uuid;

use super::cbor;
use super::types::{Cidr, MacAddr};

/// ASSIGN_PUBLIC_IP, RELEASE_PUBLIC_IP: map or unmap a public IP at a tenant's CNCI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicIpCommand {
    /// The CNCI that does the mapping.
    #[serde(with = "cbor::uuid_bytes")]
    pub concentrator_uuid: Uuid,
    /// The tenant.
    #[serde(with = "cbor::uuid_bytes")]
    pub tenant_uuid: Uuid,
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The public address.
    #[serde(with = "cbor::text")]
    pub public_ip: IpAddr,
    /// The instance's private address.
    #[serde(with = "cbor::text")]
    pub private_ip: IpAddr,
    /// The instance's MAC address.
    #[serde(with = "cbor::text")]
    pub vnic_mac: MacAddr,
}

/// PUBLIC_IP_ASSIGNED, PUBLIC_IP_UNASSIGNED.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicIpEvent {
    /// The CNCI that did it.
    #[serde(with = "cbor::uuid_bytes")]
    pub concentrator_uuid: Uuid,
    /// The instance.
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// The public address.
    #[serde(with = "cbor::text")]
    pub public_ip: IpAddr,
    /// The instance's private address.
    #[serde(with = "cbor::text")]
    pub private_ip: IpAddr,
}

/// TENANT_ADDED, TENANT_REMOVED: a compute node's first (last) VNIC on a tenant subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantEvent {
    /// The compute node.
    #[serde(with = "cbor::uuid_bytes")]
    pub agent_uuid: Uuid,
    /// The compute node's tunnel end point.
    #[serde(with = "cbor::text")]
    pub agent_ip: IpAddr,
    /// The tenant.
    #[serde(with = "cbor::uuid_bytes")]
    pub tenant_uuid: Uuid,
    /// The tenant subnet.
    #[serde(with = "cbor::text")]
    pub tenant_subnet: Cidr,
    /// The subnet's CNCI.
    #[serde(with = "cbor::uuid_bytes")]
    pub concentrator_uuid: Uuid,
    /// The CNCI's tunnel end point.
    #[serde(with = "cbor::text")]
    pub concentrator_ip: IpAddr,
    /// The tunnel key of the subnet.
    pub subnet_key: u32,
}

/// CONCENTRATOR_INSTANCE_ADDED: a CNCI is up and serving its subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcentratorAdded {
    /// The CNCI (its instance UUID, also its SSNTP UUID).
    #[serde(with = "cbor::uuid_bytes")]
    pub instance_uuid: Uuid,
    /// Its tenant.
    #[serde(with = "cbor::uuid_bytes")]
    pub tenant_uuid: Uuid,
    /// Its address on the compute network (tunnel end point).
    #[serde(with = "cbor::text")]
    pub concentrator_ip: IpAddr,
    /// Its MAC address on the compute network.
    #[serde(with = "cbor::text")]
    pub concentrator_mac: MacAddr,
}

/// REFRESH_CNCI: the sibling CNCIs of a tenant, so that a CNCI can route between subnets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshCnci {
    /// The CNCI this goes to.
    #[serde(with = "cbor::uuid_bytes")]
    pub cnci_uuid: Uuid,
    /// Every CNCI of the tenant (the receiver included).
    pub cncis: Vec<CnciPeer>,
}

/// One CNCI in REFRESH_CNCI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CnciPeer {
    /// Its address on the compute network.
    #[serde(with = "cbor::text")]
    pub physical_ip: IpAddr,
    /// The tenant subnet it serves.
    #[serde(with = "cbor::text")]
    pub subnet: Cidr,
    /// Its address inside the tenant network.
    #[serde(with = "cbor::text")]
    pub tunnel_ip: IpAddr,
    /// The tunnel key of its subnet.
    pub tunnel_id: u32,
}
