//! [`Hub`]: the concentrator's end of a tenant's tunnels. For every subnet a bridge and the
//! tunnel end of every compute node that has the subnet's instances (TENANT_ADDED), removed again
//! when the node has none left (TENANT_REMOVED); the subnet's bridge and hub go with its last
//! node.
//!
//! - **VXLAN**: one device per subnet (the kernel allows one per VNI and port in a namespace),
//!   local = the concentrator, no remote, on the subnet's bridge with **hairpin on** (frames from
//!   one node go back out of the same port to another); one all-zeros forwarding entry per
//!   compute node (head-end replication of broadcasts and unknown destinations; known
//!   destinations are learnt by the VXLAN device).
//! - **GRE-tap**: one tunnel per compute node (key = subnet key) on the subnet's bridge.
//!
//! Names: bridge `kb-<key, 8 hex>`, VXLAN hub `kv-<key, 8 hex>`, GRE-tap `kg-<12 hex>` (a hash of
//! the key and the node's address); prefixes unlike the compute node's (`cb-`, `cv-`, `cg-`,
//! `ct-`) so that an agent in the same namespace never takes them for its own.
//!
//! Every step changes the kernel first and the view after; a link or entry that is already
//! there is taken as made, one that is already gone as removed, so a repeated event changes
//! nothing.
//!
//! Restart: the subnet's bridge carries its identity in its alias (`cumulo-cnci/1 bridge
//! t=<tenant> s=<subnet> k=<key>`), a GRE-tap its node (`cumulo-cnci/1 gretap k=<key>
//! n=<node>`); [`Hub::rebuild`] reads them, and the hubs' flood entries, back. The ends found
//! there are known by address only until the node's next TENANT_ADDED names it; a
//! TENANT_REMOVED for an unnamed end removes it by its address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use uuid::Uuid;

use super::ops::{CnciOps, HubSpec};
use crate::net::{Cidr, OpsError, OpsErrorKind, TunnelKind, TunnelSpec};

/// The bridge of a subnet.
pub fn bridge_name(key: u32) -> String {
    format!("kb-{key:08x}")
}

/// The VXLAN hub of a subnet.
pub fn hub_name(key: u32) -> String {
    format!("kv-{key:08x}")
}

/// The GRE-tap tunnel of a subnet to one node: a 48-bit FNV-1a hash of both.
pub fn gretap_name(key: u32, node: IpAddr) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let addr = match node {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    for b in key.to_be_bytes().iter().chain(addr.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("kg-{:012x}", h & 0xffff_ffff_ffff)
}

/// How the hub is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubConfig {
    /// The concentrator's address on the compute network: the local end of every tunnel.
    pub local: IpAddr,
    /// The tunnel kind (the compute nodes must use the same).
    pub tunnel: TunnelKind,
    /// The VXLAN port.
    pub vxlan_port: u16,
}

/// A compute node's subnet, from TENANT_ADDED / TENANT_REMOVED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSubnet {
    /// The compute node.
    pub node: Uuid,
    /// Its tunnel end.
    pub node_ip: IpAddr,
    /// The tenant.
    pub tenant: Uuid,
    /// The subnet.
    pub subnet: Cidr,
    /// The subnet key (VNI, GRE key).
    pub key: u32,
}

impl NodeSubnet {
    /// The fields of a TENANT_ADDED or TENANT_REMOVED.
    pub fn of(e: &ssntp::payload::TenantEvent) -> NodeSubnet {
        NodeSubnet {
            node: e.agent_uuid,
            node_ip: e.agent_ip,
            tenant: e.tenant_uuid,
            subnet: e.tenant_subnet,
            key: e.subnet_key,
        }
    }
}

/// Why an event was not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    /// The kernel refused.
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// The subnet key is in use for another tenant or subnet.
    #[error("subnet key {key:#x} is used by tenant {tenant} for {subnet}")]
    Conflict {
        /// The key.
        key: u32,
        /// The tenant that has it.
        tenant: Uuid,
        /// Its subnet.
        subnet: Cidr,
    },
}

/// What an event changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The node's tunnel end was made (and the subnet's, if it was the first node).
    Added {
        /// The subnet was new.
        first: bool,
    },
    /// The node's tunnel end was removed (and the subnet's, if it was the last node).
    Removed {
        /// The subnet is gone.
        last: bool,
    },
    /// Nothing to do (a repeat).
    Unchanged,
}

#[derive(Debug)]
struct Subnet {
    tenant: Uuid,
    subnet: Cidr,
    /// Compute node → its tunnel end.
    nodes: BTreeMap<Uuid, IpAddr>,
    /// Ends found in the kernel at start whose node has not been named since.
    unnamed: BTreeSet<IpAddr>,
}

impl Subnet {
    fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.unnamed.is_empty()
    }
}

/// The alias of a subnet's bridge.
pub fn bridge_alias(tenant: Uuid, subnet: Cidr, key: u32) -> String {
    format!(
        "cumulo-cnci/1 bridge t={} s={subnet} k={key}",
        tenant.simple()
    )
}

/// The alias of a GRE-tap to a node.
pub fn gretap_alias(key: u32, node: IpAddr) -> String {
    format!("cumulo-cnci/1 gretap k={key} n={node}")
}

/// The `key=value` words of an alias with this role, if it is one.
fn words<'a>(alias: &'a str, role: &str) -> Option<BTreeMap<&'a str, &'a str>> {
    let mut w = alias.split_whitespace();
    if w.next()? != "cumulo-cnci/1" || w.next()? != role {
        return None;
    }
    w.map(|kv| kv.split_once('=')).collect()
}

/// (tenant, subnet, key) from a bridge's alias.
pub fn parse_bridge_alias(alias: &str) -> Option<(Uuid, Cidr, u32)> {
    let w = words(alias, "bridge")?;
    Some((
        w.get("t")?.parse().ok()?,
        w.get("s")?.parse().ok()?,
        w.get("k")?.parse().ok()?,
    ))
}

/// (key, node) from a GRE-tap's alias.
pub fn parse_gretap_alias(alias: &str) -> Option<(u32, IpAddr)> {
    let w = words(alias, "gretap")?;
    Some((w.get("k")?.parse().ok()?, w.get("n")?.parse().ok()?))
}

/// What [`Hub::rebuild`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Subnet key → the addresses of its tunnel ends.
    pub subnets: BTreeMap<u32, BTreeSet<IpAddr>>,
    /// Links deleted: unreadable, or of a subnet with no end left.
    pub deleted: Vec<String>,
}

/// The concentrator's tunnel ends. See the module documentation.
pub struct Hub<O> {
    ops: O,
    config: HubConfig,
    subnets: BTreeMap<u32, Subnet>,
}

/// `Exists` is success for a create.
fn made(r: Result<(), OpsError>) -> Result<(), OpsError> {
    match r {
        Err(e) if e.kind == OpsErrorKind::Exists => Ok(()),
        other => other,
    }
}

/// `NotFound` is success for a removal.
fn gone(r: Result<(), OpsError>) -> Result<(), OpsError> {
    match r {
        Err(e) if e.kind == OpsErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl<O: CnciOps> Hub<O> {
    /// An empty hub.
    pub fn new(ops: O, config: HubConfig) -> Hub<O> {
        Hub {
            ops,
            config,
            subnets: BTreeMap::new(),
        }
    }

    /// Its kernel interface.
    pub fn ops(&self) -> &O {
        &self.ops
    }

    /// Its configuration.
    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// The subnets it serves now: key → subnet.
    pub fn subnets(&self) -> BTreeMap<u32, Cidr> {
        self.subnets.iter().map(|(k, s)| (*k, s.subnet)).collect()
    }

    /// The compute nodes of a subnet, by key.
    pub fn nodes(&self, key: u32) -> Vec<(Uuid, IpAddr)> {
        self.subnets
            .get(&key)
            .map(|s| s.nodes.iter().map(|(u, ip)| (*u, *ip)).collect())
            .unwrap_or_default()
    }

    /// TENANT_ADDED: the node's tunnel end (and the subnet's bridge and hub if it is new).
    pub async fn add(&mut self, n: &NodeSubnet) -> Result<Outcome, HubError> {
        let first = match self.subnets.get(&n.key) {
            Some(s) if s.tenant != n.tenant || s.subnet != n.subnet => {
                return Err(HubError::Conflict {
                    key: n.key,
                    tenant: s.tenant,
                    subnet: s.subnet,
                });
            }
            Some(s) if s.nodes.get(&n.node) == Some(&n.node_ip) => return Ok(Outcome::Unchanged),
            Some(s) if s.unnamed.contains(&n.node_ip) && !s.nodes.contains_key(&n.node) => {
                // An end found at start: now it has its node.
                if let Some(s) = self.subnets.get_mut(&n.key) {
                    s.unnamed.remove(&n.node_ip);
                    s.nodes.insert(n.node, n.node_ip);
                }
                return Ok(Outcome::Unchanged);
            }
            Some(_) => false,
            None => true,
        };
        if first && let Err(e) = self.make_subnet(n.key, n.tenant, n.subnet).await {
            self.unmake_subnet(n.key).await;
            return Err(e.into());
        }
        let moved = self
            .subnets
            .get(&n.key)
            .and_then(|s| s.nodes.get(&n.node).copied());
        if let Some(old) = moved {
            // The node's address changed: its old end goes.
            self.remove_end(n.key, n.node, old).await?;
        }
        if let Err(e) = self.add_end(n.key, n.node_ip).await {
            if first {
                self.unmake_subnet(n.key).await;
            }
            return Err(e.into());
        }
        let subnet = self.subnets.entry(n.key).or_insert_with(|| Subnet {
            tenant: n.tenant,
            subnet: n.subnet,
            nodes: BTreeMap::new(),
            unnamed: BTreeSet::new(),
        });
        subnet.nodes.insert(n.node, n.node_ip);
        Ok(Outcome::Added { first })
    }

    /// TENANT_REMOVED: the node's tunnel end (and the subnet's bridge and hub after its last
    /// node).
    pub async fn remove(&mut self, n: &NodeSubnet) -> Result<Outcome, HubError> {
        let Some(s) = self.subnets.get(&n.key) else {
            return Ok(Outcome::Unchanged);
        };
        let ip = match s.nodes.get(&n.node) {
            Some(ip) => *ip,
            // An end found at start, never named since: by its address.
            None if s.unnamed.contains(&n.node_ip) => n.node_ip,
            None => return Ok(Outcome::Unchanged),
        };
        self.remove_end(n.key, n.node, ip).await?;
        let last = match self.subnets.get_mut(&n.key) {
            Some(s) => {
                if s.nodes.remove(&n.node).is_none() {
                    s.unnamed.remove(&ip);
                }
                s.is_empty()
            }
            None => false,
        };
        if last {
            let hub = hub_name(n.key);
            if self.config.tunnel == TunnelKind::Vxlan {
                gone(self.ops.delete(&hub).await)?;
            }
            gone(self.ops.delete(&bridge_name(n.key)).await)?;
            self.subnets.remove(&n.key);
        }
        Ok(Outcome::Removed { last })
    }

    /// At start: rebuilds the view from the kernel's links (see the module documentation),
    /// repairs a subnet whose hub was lost, and deletes links it cannot read and subnets with no
    /// end left (a restart in the middle of the last TENANT_REMOVED).
    pub async fn rebuild(&mut self) -> Result<Rebuilt, HubError> {
        let links = self.ops.links().await?;
        let mut rebuilt = Rebuilt::default();
        let mut found: BTreeMap<u32, (Uuid, Cidr)> = BTreeMap::new();
        let mut gretaps: Vec<(String, Option<(u32, IpAddr)>)> = Vec::new();
        let mut strays = Vec::new();
        for l in &links {
            let alias = l.alias.as_deref().unwrap_or("");
            if l.name.starts_with("kb-") {
                match parse_bridge_alias(alias) {
                    Some((t, s, k)) if l.name == bridge_name(k) => {
                        found.insert(k, (t, s));
                    }
                    _ => strays.push(l.name.clone()),
                }
            } else if l.name.starts_with("kg-") {
                gretaps.push((l.name.clone(), parse_gretap_alias(alias)));
            }
        }
        // Hubs without a readable bridge go.
        for l in &links {
            let known = found.keys().any(|k| hub_name(*k) == l.name);
            if l.name.starts_with("kv-") && !known {
                strays.push(l.name.clone());
            }
        }
        for (name, end) in &gretaps {
            let known =
                end.is_some_and(|(k, ip)| found.contains_key(&k) && *name == gretap_name(k, ip));
            if !known {
                strays.push(name.clone());
            }
        }
        for name in strays {
            gone(self.ops.delete(&name).await)?;
            rebuilt.deleted.push(name);
        }
        for (key, (tenant, subnet)) in found {
            let ends: BTreeSet<IpAddr> = match self.config.tunnel {
                TunnelKind::Vxlan => match self.ops.flood_list(&hub_name(key)).await {
                    Ok(ends) => ends.into_iter().collect(),
                    Err(e) if e.kind == OpsErrorKind::NotFound => BTreeSet::new(),
                    Err(e) => return Err(e.into()),
                },
                TunnelKind::GreTap => gretaps
                    .iter()
                    .filter_map(|(_, end)| end.filter(|(k, _)| *k == key).map(|(_, ip)| ip))
                    .collect(),
            };
            if ends.is_empty() {
                for name in [hub_name(key), bridge_name(key)] {
                    if links.iter().any(|l| l.name == name) {
                        gone(self.ops.delete(&name).await)?;
                        rebuilt.deleted.push(name);
                    }
                }
                continue;
            }
            // Makes only what is missing (a lost hub), and sets it up again.
            self.make_subnet(key, tenant, subnet).await?;
            rebuilt.subnets.insert(key, ends.clone());
            self.subnets.insert(
                key,
                Subnet {
                    tenant,
                    subnet,
                    nodes: BTreeMap::new(),
                    unnamed: ends,
                },
            );
        }
        Ok(rebuilt)
    }

    async fn make_subnet(&self, key: u32, tenant: Uuid, subnet: Cidr) -> Result<(), OpsError> {
        let bridge = bridge_name(key);
        made(self.ops.create_bridge(&bridge).await)?;
        self.ops
            .set_alias(&bridge, &bridge_alias(tenant, subnet, key))
            .await?;
        // The concentrator's own address on the subnet: the instances' router and DHCP server.
        if let Some(gw) = super::dhcp::gateway(&subnet) {
            made(
                self.ops
                    .add_address(&bridge, IpAddr::V4(gw), subnet.prefix)
                    .await,
            )?;
        }
        self.ops.set_up(&bridge).await?;
        if self.config.tunnel == TunnelKind::Vxlan {
            let hub = HubSpec {
                name: hub_name(key),
                vni: key,
                local: self.config.local,
                port: self.config.vxlan_port,
            };
            made(self.ops.create_hub(&hub).await)?;
            self.ops.set_master(&hub.name, &bridge).await?;
            self.ops.set_hairpin(&hub.name).await?;
            self.ops.set_up(&hub.name).await?;
        }
        Ok(())
    }

    /// Best effort: what a failed first add made goes again.
    async fn unmake_subnet(&self, key: u32) {
        for name in [hub_name(key), bridge_name(key)] {
            if let Err(e) = gone(self.ops.delete(&name).await) {
                tracing::warn!(error = %e, "undoing a half-made subnet");
            }
        }
    }

    async fn add_end(&self, key: u32, node_ip: IpAddr) -> Result<(), OpsError> {
        match self.config.tunnel {
            TunnelKind::Vxlan => self.ops.flood_add(&hub_name(key), node_ip).await,
            TunnelKind::GreTap => {
                let spec = TunnelSpec::GreTap {
                    name: gretap_name(key, node_ip),
                    key,
                    local: self.config.local,
                    remote: node_ip,
                };
                made(self.ops.create_tunnel(&spec).await)?;
                self.ops
                    .set_alias(spec.name(), &gretap_alias(key, node_ip))
                    .await?;
                self.ops.set_master(spec.name(), &bridge_name(key)).await?;
                self.ops.set_up(spec.name()).await
            }
        }
    }

    /// Removes `node`'s end at `ip`, unless another node of the subnet has the same address.
    async fn remove_end(&self, key: u32, node: Uuid, ip: IpAddr) -> Result<(), OpsError> {
        let shared = self
            .subnets
            .get(&key)
            .is_some_and(|s| s.nodes.iter().any(|(u, a)| *u != node && *a == ip));
        if shared {
            return Ok(());
        }
        match self.config.tunnel {
            TunnelKind::Vxlan => gone(self.ops.flood_del(&hub_name(key), ip).await),
            TunnelKind::GreTap => gone(self.ops.delete(&gretap_name(key, ip)).await),
        }
    }
}
