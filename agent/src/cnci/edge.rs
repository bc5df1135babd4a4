//! [`Edge`]: what the concentrator does beyond ending tunnels, for every subnet the [`Hub`]
//! serves: a DHCP server on the subnet's bridge ([`super::dhcp`]), outbound NAT of the subnet,
//! and the public IPs (ASSIGN/RELEASE_PUBLIC_IP: a 1:1 mapping in [`NatOps`] and the public
//! address on the uplink, so that the compute network's ARP finds it).
//!
//! REFRESH_CNCI ([`Edge::refresh`]) routes the tenant's other subnets via their concentrators'
//! addresses on the compute network (routes marked with [`super::ops::ROUTE_PROTOCOL`], so that a
//! restart finds them) and exempts them from NAT.
//!
//! [`Edge::reconcile`] follows the hub after every event: a subnet that appeared gets its DHCP
//! server and NAT entry, one that went loses them. Public IPs are checked against what the
//! concentrator holds: the same mapping again is a success (a repeated command), a public or
//! private address already mapped otherwise is `assign_failure`; releasing a mapping that is
//! not there is a success too (the release of a lost answer's retry), one that maps the public
//! address to another private one is `release_failure`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use tokio_util::sync::CancellationToken;

use ssntp::payload::{PublicIpCommand, PublicIpFailureReason, RefreshCnci};

use super::dhcp::{self, Plan};
use super::hub::Hub;
use super::nat::NatOps;
use super::ops::CnciOps;
use crate::net::{Cidr, OpsError, OpsErrorKind};

/// How the edge is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeConfig {
    /// The uplink (the link holding the concentrator's address), if it has one: no NAT and no
    /// public IPs without it.
    pub uplink: Option<String>,
    /// The concentrator's address on the compute network: outbound NAT's source.
    pub uplink_ip: Ipv4Addr,
    /// The MTU DHCP gives the instances.
    pub mtu: u16,
    /// Whether to serve DHCP (off in unit tests, where the bridges are not real).
    pub dhcp: bool,
    /// The cluster's management networks, which the tenant subnets may not open connections to
    /// (`--protect`).
    pub protect: Vec<Cidr>,
}

struct Served {
    subnet: Cidr,
    dhcp: Option<CancellationToken>,
    nat: bool,
}

/// See the module documentation.
pub struct Edge<N> {
    nat: N,
    config: EdgeConfig,
    served: BTreeMap<u32, Served>,
    /// Public → private.
    public: BTreeMap<Ipv4Addr, Ipv4Addr>,
    /// The tenant's other subnets (network, prefix) → their concentrator.
    siblings: BTreeMap<(Ipv4Addr, u8), Ipv4Addr>,
    nat_ready: bool,
}

/// The most sibling concentrators a REFRESH_CNCI is taken with.
pub const MAX_SIBLINGS: usize = 4096;

impl<N: NatOps> Edge<N> {
    /// Nothing served yet.
    pub fn new(nat: N, config: EdgeConfig) -> Edge<N> {
        Edge {
            nat,
            config,
            served: BTreeMap::new(),
            public: BTreeMap::new(),
            siblings: BTreeMap::new(),
            nat_ready: false,
        }
    }

    /// The public mappings now (public → private).
    pub fn public(&self) -> &BTreeMap<Ipv4Addr, Ipv4Addr> {
        &self.public
    }

    /// The sibling subnets routed now: (network, prefix) → their concentrator.
    pub fn siblings(&self) -> &BTreeMap<(Ipv4Addr, u8), Ipv4Addr> {
        &self.siblings
    }

    /// The subnets served now (key → subnet).
    pub fn subnets(&self) -> BTreeMap<u32, Cidr> {
        self.served.iter().map(|(k, s)| (*k, s.subnet)).collect()
    }

    /// Sets up NAT (keeping the public IPs a previous run mapped, whose addresses go on the
    /// uplink again). Without an uplink there is nothing to set up.
    pub async fn start<O: CnciOps>(&mut self, ops: &O) -> Result<(), OpsError> {
        for (net, prefix, via) in ops.routes().await? {
            self.siblings.insert((net, prefix), via);
        }
        let Some(uplink) = self.config.uplink.clone() else {
            tracing::warn!("no uplink: no outbound NAT and no public IPs");
            return Ok(());
        };
        let kept = self.nat.setup(&uplink, self.config.uplink_ip).await?;
        self.nat_ready = true;
        for (public, private) in kept {
            made(ops.add_address(&uplink, IpAddr::V4(public), 32).await)?;
            self.public.insert(public, private);
        }
        if !self.public.is_empty() {
            tracing::info!(public = ?self.public, "public IPs kept from the previous run");
        }
        self.nat.set_siblings(&self.sibling_cidrs()).await?;
        self.nat.set_protected(&self.config.protect).await
    }

    fn sibling_cidrs(&self) -> Vec<Cidr> {
        self.siblings
            .keys()
            .map(|(net, prefix)| Cidr {
                addr: IpAddr::V4(*net),
                prefix: *prefix,
            })
            .collect()
    }

    /// REFRESH_CNCI: routes to the tenant's other subnets via their concentrators, none to the
    /// ones no longer listed. Entries for its own address or subnets, and IPv6 ones, are
    /// skipped.
    pub async fn refresh<O: CnciOps>(&mut self, ops: &O, r: &RefreshCnci) -> Result<(), OpsError> {
        let own: Vec<(Ipv4Addr, u8)> = self
            .served
            .values()
            .filter_map(|s| network(&s.subnet))
            .collect();
        let mut want = BTreeMap::new();
        for peer in r.cncis.iter().take(MAX_SIBLINGS) {
            let (Some(net), IpAddr::V4(via)) = (network(&peer.subnet), peer.physical_ip) else {
                continue;
            };
            if via == self.config.uplink_ip || own.contains(&net) || via.is_unspecified() {
                continue;
            }
            want.insert(net, via);
        }
        let stale: Vec<_> = self
            .siblings
            .iter()
            .filter(|(k, v)| want.get(*k) != Some(*v))
            .map(|(k, v)| (*k, *v))
            .collect();
        for ((net, prefix), via) in stale {
            gone_ok(ops.del_route(net, prefix, via).await)?;
            self.siblings.remove(&(net, prefix));
        }
        for ((net, prefix), via) in want {
            if self.siblings.get(&(net, prefix)) != Some(&via) {
                ops.add_route(net, prefix, via).await?;
                self.siblings.insert((net, prefix), via);
            }
        }
        if self.nat_ready {
            self.nat.set_siblings(&self.sibling_cidrs()).await?;
        }
        Ok(())
    }

    /// Follows the hub's subnets: DHCP and NAT for the new ones, none for the gone ones.
    pub async fn reconcile<O: CnciOps>(&mut self, hub: &Hub<O>) {
        let now = hub.subnets();
        let gone: Vec<u32> = self
            .served
            .keys()
            .filter(|k| !now.contains_key(k))
            .copied()
            .collect();
        for key in gone {
            let Some(s) = self.served.remove(&key) else {
                continue;
            };
            if let Some(stop) = s.dhcp {
                stop.cancel();
            }
            if s.nat
                && let Err(e) = gone_ok(self.nat.del_subnet(s.subnet).await)
            {
                tracing::warn!(subnet = %s.subnet, error = %e, "NAT entry not removed");
            }
            tracing::info!(key, subnet = %s.subnet, "subnet no longer served");
        }
        for (key, subnet) in now {
            if self.served.contains_key(&key) {
                continue;
            }
            let bridge = super::hub::bridge_name(key);
            let dhcp = match Plan::of(&subnet, self.config.mtu) {
                Some(plan) if self.config.dhcp => {
                    let stop = CancellationToken::new();
                    match dhcp::serve(&bridge, plan, stop.clone()) {
                        Ok(()) => Some(stop),
                        Err(e) => {
                            tracing::error!(error = %e, "no DHCP on this subnet");
                            None
                        }
                    }
                }
                _ => None,
            };
            let nat = self.nat_ready
                && match self.nat.add_subnet(subnet).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(%subnet, error = %e, "no outbound NAT for this subnet");
                        false
                    }
                };
            tracing::info!(key, %subnet, dhcp = dhcp.is_some(), nat, "subnet served");
            self.served.insert(key, Served { subnet, dhcp, nat });
        }
    }

    /// ASSIGN_PUBLIC_IP.
    pub async fn assign<O: CnciOps>(
        &mut self,
        ops: &O,
        c: &PublicIpCommand,
    ) -> Result<(), PublicIpFailureReason> {
        let (public, private) = addresses(c)?;
        let uplink = self.uplink(PublicIpFailureReason::AssignFailure)?;
        match self.public.get(&public) {
            Some(p) if *p == private => return Ok(()),
            Some(p) => {
                tracing::warn!(%public, mapped_to = %p, "public IP already mapped");
                return Err(PublicIpFailureReason::AssignFailure);
            }
            None => {}
        }
        if let Some((other, _)) = self.public.iter().find(|(_, p)| **p == private) {
            tracing::warn!(%private, public = %other, "private IP already has a public IP");
            return Err(PublicIpFailureReason::AssignFailure);
        }
        if let Err(e) = self.nat.map(public, private).await {
            tracing::error!(%public, %private, error = %e, "public IP not mapped");
            return Err(PublicIpFailureReason::AssignFailure);
        }
        if let Err(e) = made(ops.add_address(&uplink, IpAddr::V4(public), 32).await) {
            tracing::error!(%public, error = %e, "public IP not put on the uplink");
            if let Err(e) = self.nat.unmap(public, private).await {
                tracing::warn!(%public, error = %e, "undoing the mapping");
            }
            return Err(PublicIpFailureReason::AssignFailure);
        }
        self.public.insert(public, private);
        Ok(())
    }

    /// RELEASE_PUBLIC_IP.
    pub async fn release<O: CnciOps>(
        &mut self,
        ops: &O,
        c: &PublicIpCommand,
    ) -> Result<(), PublicIpFailureReason> {
        let (public, private) = addresses(c)?;
        let uplink = self.uplink(PublicIpFailureReason::ReleaseFailure)?;
        match self.public.get(&public) {
            None => return Ok(()),
            Some(p) if *p != private => {
                tracing::warn!(%public, mapped_to = %p, asked = %private, "public IP mapped to another address");
                return Err(PublicIpFailureReason::ReleaseFailure);
            }
            Some(_) => {}
        }
        if let Err(e) = gone_ok(self.nat.unmap(public, private).await) {
            tracing::error!(%public, error = %e, "public IP not unmapped");
            return Err(PublicIpFailureReason::ReleaseFailure);
        }
        self.public.remove(&public);
        if let Err(e) = gone_ok(ops.del_address(&uplink, IpAddr::V4(public), 32).await) {
            tracing::warn!(%public, error = %e, "public IP still on the uplink");
        }
        Ok(())
    }

    /// The uplink, when NAT is set up; `reason` otherwise.
    fn uplink(&self, reason: PublicIpFailureReason) -> Result<String, PublicIpFailureReason> {
        match (&self.config.uplink, self.nat_ready) {
            (Some(u), true) => Ok(u.clone()),
            _ => {
                tracing::warn!("no NAT here: public IPs cannot be mapped");
                Err(reason)
            }
        }
    }

    /// Stops every DHCP server.
    pub fn stop(&mut self) {
        for s in self.served.values() {
            if let Some(stop) = &s.dhcp {
                stop.cancel();
            }
        }
    }
}

/// The network address and prefix of an IPv4 subnet.
fn network(c: &Cidr) -> Option<(Ipv4Addr, u8)> {
    c.v4().map(|n| (n.network(), n.prefix_len()))
}

/// The command's addresses, both IPv4 and the public one a unicast address.
fn addresses(c: &PublicIpCommand) -> Result<(Ipv4Addr, Ipv4Addr), PublicIpFailureReason> {
    match (c.public_ip, c.private_ip) {
        (IpAddr::V4(public), IpAddr::V4(private))
            if !public.is_unspecified()
                && !public.is_broadcast()
                && !public.is_multicast()
                && !public.is_loopback()
                && !private.is_unspecified() =>
        {
            Ok((public, private))
        }
        _ => Err(PublicIpFailureReason::InvalidData),
    }
}

fn made(r: Result<(), OpsError>) -> Result<(), OpsError> {
    match r {
        Err(e) if e.kind == OpsErrorKind::Exists => Ok(()),
        other => other,
    }
}

fn gone_ok(r: Result<(), OpsError>) -> Result<(), OpsError> {
    match r {
        Err(e) if e.kind == OpsErrorKind::NotFound => Ok(()),
        other => other,
    }
}
