//! [`NetworkStore`]: a tenant's security groups and rules, floating IPs, the groups of its ports
//! and its limits on them (see `networking/mod.rs` for how both backends keep them).

use uuid::Uuid;

use crate::{
    FloatingIp, FloatingIpChange, NetworkQuota, NewFloatingIp, NewSecurityGroup,
    NewSecurityGroupRule, PortGroups, Result, SecurityGroup, SecurityGroupChange,
    SecurityGroupRule, ServersNet,
};

/// Tenants' networking objects. Every call is one transaction and acts in one tenant's objects
/// only (another tenant's are `NotFound`). A tenant's `default` group (OpenStack's default
/// rules: egress open, ingress from the group's own ports) is made the first time any of these
/// touches the tenant. A tenant's objects go with it; an instance's port goes with the
/// instance, disassociating its floating IPs.
pub trait NetworkStore: Send + Sync {
    // --- security groups ---
    /// The tenant's groups and their rules, `default` first.
    fn security_groups(&self, tenant: Uuid) -> Result<Vec<SecurityGroup>>;
    /// Makes a group with egress rules for IPv4 and IPv6: `Conflict` for the name `default`,
    /// `Invalid` for a name or description over [`MAX_NET_TEXT`](crate::MAX_NET_TEXT) bytes,
    /// `QuotaExceeded` past the tenant's group (or rule) limit.
    fn create_security_group(&self, new: NewSecurityGroup) -> Result<SecurityGroup>;
    /// Renames a group or changes its description (`Conflict`: renaming `default`, or to it).
    fn update_security_group(
        &self,
        tenant: Uuid,
        id: Uuid,
        change: SecurityGroupChange,
    ) -> Result<SecurityGroup>;
    /// Deletes a group (`Conflict`: the `default` group, or one a port is in); other groups'
    /// rules naming it as their remote go with it.
    fn delete_security_group(&self, tenant: Uuid, id: Uuid) -> Result<()>;
    /// Adds a rule, checked by [`check_rule`](crate::check_rule) (`Invalid`): `Conflict` for
    /// a rule the group has, `NotFound` for a group or remote group the tenant lacks,
    /// `QuotaExceeded` past the tenant's rule limit.
    fn create_security_group_rule(
        &self,
        tenant: Uuid,
        new: NewSecurityGroupRule,
    ) -> Result<SecurityGroupRule>;
    /// Deletes a rule of one of the tenant's groups.
    fn delete_security_group_rule(&self, tenant: Uuid, id: Uuid) -> Result<()>;

    // --- ports ---
    /// The groups of the tenant's ports (one port per instance, its id the instance's).
    fn port_groups(&self, tenant: Uuid) -> Result<PortGroups>;
    /// Sets the groups of an instance's port (`NotFound` for an instance or a group the tenant
    /// does not have); returns them, without duplicates.
    fn set_port_groups(&self, tenant: Uuid, instance: Uuid, groups: &[Uuid]) -> Result<Vec<Uuid>>;
    /// What a page of the tenant's servers shows of their networking, read together: the
    /// tenant's groups, the groups of the ports of `instances` (instances of the tenant that
    /// exist; the groups of no other port are read) and the floating IPs associated with them.
    /// As [`security_groups`](Self::security_groups), [`port_groups`](Self::port_groups) and
    /// [`floating_ips`](Self::floating_ips) would answer for them, in fewer round trips where the
    /// backend has them (etcd: one per 126 servers, and one more when the tenant has associated
    /// floating IPs), and in proportion to the page rather than to the tenant's ports.
    fn servers_networking(&self, tenant: Uuid, instances: &[Uuid]) -> Result<ServersNet>;

    // --- floating IPs ---
    /// The tenant's floating IPs, by address.
    fn floating_ips(&self, tenant: Uuid) -> Result<Vec<FloatingIp>>;
    /// Allocates a floating IP from the pool (no two tenants hold one address): the address
    /// asked for (`Invalid` outside the pool's hosts, `Conflict` if held) or the lowest free one
    /// (`Exhausted`), `QuotaExceeded` past the tenant's limit.
    fn create_floating_ip(&self, new: NewFloatingIp) -> Result<FloatingIp>;
    /// Associates a floating IP with a port of the tenant, or disassociates it (`NotFound` for
    /// a port the tenant lacks, `Invalid` for a fixed address not the port's, `Conflict` when
    /// another of the tenant's floating IPs is on that port).
    fn update_floating_ip(
        &self,
        tenant: Uuid,
        id: Uuid,
        change: FloatingIpChange,
    ) -> Result<FloatingIp>;
    /// Releases a floating IP: its address may be allocated again.
    fn delete_floating_ip(&self, tenant: Uuid, id: Uuid) -> Result<()>;

    // --- quotas ---
    /// The tenant's limits ([`NetworkQuota::DEFAULT`] until set).
    fn network_quota(&self, tenant: Uuid) -> Result<NetworkQuota>;
    /// Sets the tenant's limits (`Invalid` past [`NetworkQuota::MAX`]).
    fn set_network_quota(&self, tenant: Uuid, quota: NetworkQuota) -> Result<NetworkQuota>;
    /// What the tenant holds against its limits.
    fn network_usage(&self, tenant: Uuid) -> Result<NetworkQuota>;
}
