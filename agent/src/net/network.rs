//! [`Network`]: the compute node's tenant networking logic over [`NetOps`].
//!
//! State changes only after the kernel's side succeeded, so a failed `attach` or `detach` can
//! simply be repeated; every step looks at what the kernel has first and makes only what is
//! missing, so repeats are cheap and half-made links are finished or replaced.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use uuid::Uuid;

use super::filter::{self, FilterError, PortFilters};
use super::names::{self, LinkRole, SubnetId, bridge_name, tap_mac, tap_name, tunnel_name};
use super::ops::{Link, LinkKind, NetOps, OpsError, OpsErrorKind, TunnelSpec};
use super::{TunnelChoice, TunnelKind};
use crate::model::NicSpec;

/// What the node's networking is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetConfig {
    /// The node's tunnel end point (its address on the compute network).
    pub node_ip: IpAddr,
    /// The tunnel kind (already resolved: see [`resolve_tunnel`]).
    pub tunnel: TunnelKind,
    /// The VXLAN destination port.
    pub vxlan_port: u16,
    /// Whether the node is to serve the metadata service on its tenant bridges (the daemon
    /// then gives its `NetBackend` one, which turns it on here: [`Network::set_metadata`]).
    pub metadata: bool,
}

/// Tenant networking failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// A kernel operation failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// The subnet key is in use on this node for another (tenant, subnet, CNCI).
    #[error("subnet key {key} is in use for {have:?}, not {want:?}")]
    SubnetConflict {
        /// The key.
        key: u32,
        /// What uses it.
        have: Box<SubnetId>,
        /// What was asked for.
        want: Box<SubnetId>,
    },
    /// The tap name of this instance is taken by another instance's tap (the first 12 hex
    /// digits of two instance UUIDs are equal) or by a link that is not a tap.
    #[error("link {name} is taken by something else")]
    NameTaken {
        /// The link name.
        name: String,
    },
    /// The instance's VNIC is plugged into another subnet: detach it first.
    #[error("instance {instance} is attached to subnet key {key}: detach it first")]
    AttachedElsewhere {
        /// The instance.
        instance: Uuid,
        /// The subnet key it is on.
        key: u32,
    },
    /// `--tunnel gretap` on a kernel without GRE-tap.
    #[error("this kernel has no {0} tunnels")]
    TunnelUnsupported(TunnelKind),
    /// A port filter cannot be made (no index left, an address that is not IPv4).
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// The instance has no VNIC plugged in here to filter.
    #[error("instance {0} has no VNIC on this node")]
    NotAttached(Uuid),
    /// The tunnel end points are not of one address family.
    #[error("the node address {node} and the CNCI address {cnci} are not of one family")]
    AddressFamily {
        /// The node's end point.
        node: IpAddr,
        /// The CNCI's.
        cnci: IpAddr,
    },
}

/// An instance's VNIC on a tenant subnet: what [`Network::attach`] plugs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vnic {
    /// The instance.
    pub instance: Uuid,
    /// The VNIC's MAC: the VM's (its tap gets [`tap_mac`] of it).
    pub mac: [u8; 6],
    /// The subnet.
    pub subnet: SubnetId,
    /// A container's VNIC: a veth pair (its other end [`names::veth_peer_name`]) instead of a
    /// tap.
    pub veth: bool,
}

impl Vnic {
    /// The VNIC of an instance's START.
    pub fn of(instance: Uuid, tenant: Uuid, nic: &NicSpec) -> Vnic {
        Vnic {
            instance,
            veth: false,
            mac: nic.mac,
            subnet: SubnetId {
                tenant,
                subnet: names::Cidr {
                    addr: nic.subnet_addr,
                    prefix: nic.subnet_prefix,
                },
                key: nic.subnet_key,
                cnci: nic.concentrator_uuid,
                cnci_ip: nic.concentrator_ip,
            },
        }
    }

    fn role(&self) -> LinkRole {
        LinkRole::Tap {
            subnet: self.subnet,
            instance: self.instance,
            mac: self.mac,
        }
    }
}

/// What [`Network::attach`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// The instance's tap (the VM's NIC goes there).
    pub tap: String,
    /// The subnet's bridge.
    pub bridge: String,
    /// Whether this is the subnet's first VNIC on this node: send TENANT_ADDED.
    pub first: bool,
}

/// What [`Network::detach`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// The instance.
    pub instance: Uuid,
    /// Its subnet.
    pub subnet: SubnetId,
    /// Whether it was the subnet's last VNIC on this node (tunnel and bridge are gone): send
    /// TENANT_REMOVED.
    pub last: bool,
}

/// What [`Network::rebuild`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// The instances whose VNICs are plugged in, by subnet key.
    pub vnics: BTreeMap<u32, BTreeSet<Uuid>>,
    /// Subnets that had a bridge or tunnel but no VNIC left (a detach cut short): their links
    /// are removed now; send TENANT_REMOVED for each.
    pub removed: Vec<SubnetId>,
    /// Links deleted: half-made (no alias), damaged, or replaced.
    pub deleted: Vec<String>,
    /// Links made to complete a subnet (a lost bridge or tunnel).
    pub created: Vec<String>,
    /// Taps left alone and not tracked: their alias names another (tenant, subnet, CNCI) for
    /// a key that other taps use.
    pub conflicts: Vec<String>,
}

/// Resolves `--tunnel`: `auto` is GRE-tap where the kernel has it, VXLAN otherwise. The probe
/// makes a GRE-tap named `cg-probe` (in the namespace `ops` works in) and deletes it again; a
/// kernel without GRE-tap refuses with EOPNOTSUPP. A fixed kind is probed the same way, so a
/// missing GRE-tap is an error at start, not at the first instance.
pub async fn resolve_tunnel<O: NetOps>(
    ops: &O,
    choice: TunnelChoice,
) -> Result<TunnelKind, NetError> {
    let wanted = match choice {
        TunnelChoice::Fixed(TunnelKind::Vxlan) => return Ok(TunnelKind::Vxlan),
        TunnelChoice::Fixed(TunnelKind::GreTap) | TunnelChoice::Auto => TunnelKind::GreTap,
    };
    const PROBE: &str = "cg-probe";
    let spec = TunnelSpec::GreTap {
        name: PROBE.to_string(),
        key: 0,
        local: IpAddr::from([127, 0, 0, 1]),
        remote: IpAddr::from([127, 0, 0, 2]),
    };
    let mut result = ops.create_tunnel(&spec).await;
    if matches!(&result, Err(e) if e.kind == OpsErrorKind::Exists) {
        // A probe left over from a crash.
        ops.delete(PROBE).await?;
        result = ops.create_tunnel(&spec).await;
    }
    match result {
        Ok(()) => {
            ops.delete(PROBE).await?;
            Ok(wanted)
        }
        Err(e) if e.kind == OpsErrorKind::Unsupported => match choice {
            TunnelChoice::Auto => Ok(TunnelKind::Vxlan),
            TunnelChoice::Fixed(kind) => Err(NetError::TunnelUnsupported(kind)),
        },
        Err(e) => Err(e.into()),
    }
}

struct SubnetState {
    id: SubnetId,
    vnics: BTreeSet<Uuid>,
}

/// The compute node's tenant networking. See the module documentation.
pub struct Network<O> {
    ops: O,
    cfg: NetConfig,
    subnets: BTreeMap<u32, SubnetState>,
    vnics: BTreeMap<Uuid, Vnic>,
    filters: PortFilters,
    metadata: bool,
}

type Links = HashMap<String, Link>;

/// Whether `name` is there as the link `role` wants (right kind, same alias).
enum Found {
    Missing,
    /// The right kind, no alias: made but not finished.
    Bare,
    /// Exactly this.
    Same,
    /// Another kind or another identity.
    Other,
}

fn found(links: &Links, name: &str, kind: &LinkKind, alias: &str) -> Found {
    match links.get(name) {
        None => Found::Missing,
        Some(l) if &l.kind != kind => Found::Other,
        Some(l) => match &l.alias {
            None => Found::Bare,
            Some(a) if a == alias => Found::Same,
            Some(_) => Found::Other,
        },
    }
}

/// Forgets a deleted link in a snapshot (its ports are let go).
fn forget(links: &mut Links, name: &str) {
    links.remove(name);
    for l in links.values_mut() {
        if l.master.as_deref() == Some(name) {
            l.master = None;
        }
    }
}

fn gone(r: Result<(), OpsError>) -> Result<(), OpsError> {
    match r {
        Err(e) if e.kind == OpsErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl<O: NetOps> Network<O> {
    /// A view with nothing in it; [`Network::rebuild`] fills it from the kernel.
    pub fn new(ops: O, cfg: NetConfig) -> Network<O> {
        Network {
            ops,
            cfg,
            subnets: BTreeMap::new(),
            vnics: BTreeMap::new(),
            filters: PortFilters::new(),
            metadata: false,
        }
    }

    /// Whether the ports' filters send requests to 169.254.169.254:80 to the metadata
    /// responder of their bridge (which must then be there: [`super::metadata`]); from the next
    /// filter on.
    pub fn set_metadata(&mut self, on: bool) {
        self.metadata = on;
    }

    /// Filters an attached VNIC's port as `nic` says (anti-spoofing, and its firewall if it
    /// has one), replacing what the port had; one nft transaction. Plug the VNIC in first.
    pub async fn filter(&mut self, instance: Uuid, nic: &NicSpec) -> Result<(), NetError> {
        let vnic = self
            .vnics
            .get(&instance)
            .ok_or(NetError::NotAttached(instance))?;
        let bridge = bridge_name(vnic.subnet.key);
        let spec = filter::port_spec(&tap_name(instance), &bridge, nic, self.metadata)?;
        let planned = self.filters.plan_set(instance, &spec)?;
        if !self.filters.has_zone(&bridge) {
            // The bridge's first filtered port since the agent started.
            self.ops.set_bridge_netfilter(&bridge).await?;
        }
        self.ops.nft(&planned.script).await?;
        planned.commit(&mut self.filters);
        Ok(())
    }

    /// The port filters.
    pub fn filters(&self) -> &PortFilters {
        &self.filters
    }

    /// The operations it works through.
    pub fn ops(&self) -> &O {
        &self.ops
    }

    /// The configuration.
    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    /// The VNICs plugged in, by instance.
    pub fn vnics(&self) -> impl Iterator<Item = &Vnic> {
        self.vnics.values()
    }

    /// The subnets with at least one VNIC on this node.
    pub fn subnets(&self) -> impl Iterator<Item = &SubnetId> {
        self.subnets.values().map(|s| &s.id)
    }

    fn tunnel_role(&self, id: &SubnetId) -> LinkRole {
        LinkRole::Tunnel {
            subnet: *id,
            kind: self.cfg.tunnel,
            local: self.cfg.node_ip,
            port: match self.cfg.tunnel {
                TunnelKind::Vxlan => self.cfg.vxlan_port,
                TunnelKind::GreTap => 0,
            },
        }
    }

    fn tunnel_spec(&self, id: &SubnetId) -> TunnelSpec {
        let name = tunnel_name(self.cfg.tunnel, id.key);
        match self.cfg.tunnel {
            TunnelKind::Vxlan => TunnelSpec::Vxlan {
                name,
                vni: id.key,
                local: self.cfg.node_ip,
                remote: id.cnci_ip,
                port: self.cfg.vxlan_port,
            },
            TunnelKind::GreTap => TunnelSpec::GreTap {
                name,
                key: id.key,
                local: self.cfg.node_ip,
                remote: id.cnci_ip,
            },
        }
    }

    async fn snapshot(&self) -> Result<Links, NetError> {
        Ok(self
            .ops
            .links()
            .await?
            .into_iter()
            .map(|l| (l.name.clone(), l))
            .collect())
    }

    /// Makes sure a link is up and, if it is a port, on `bridge` (learning there as `learn`
    /// says, when given).
    async fn finish(
        &self,
        links: &Links,
        name: &str,
        bridge: Option<(&str, Option<bool>)>,
    ) -> Result<(), NetError> {
        let now = links.get(name);
        if let Some((bridge, learn)) = bridge {
            let joined = now.and_then(|l| l.master.as_deref()) == Some(bridge);
            if !joined {
                self.ops.set_master(name, bridge).await?;
            }
            if let Some(learn) = learn
                && !(joined && now.and_then(|l| l.learning) == Some(learn))
            {
                self.ops.set_learning(name, learn).await?;
            }
        }
        if !now.is_some_and(|l| l.up) {
            self.ops.set_up(name, true).await?;
        }
        Ok(())
    }

    /// Makes sure the subnet's bridge and tunnel are there, named, joined and up; returns the
    /// names of links it made.
    async fn ensure_subnet(
        &self,
        links: &mut Links,
        id: &SubnetId,
    ) -> Result<Vec<String>, NetError> {
        if id.cnci_ip.is_ipv4() != self.cfg.node_ip.is_ipv4() {
            return Err(NetError::AddressFamily {
                node: self.cfg.node_ip,
                cnci: id.cnci_ip,
            });
        }
        let mut made = Vec::new();
        let bridge = bridge_name(id.key);
        let alias = LinkRole::Bridge(*id).alias();
        match found(links, &bridge, &LinkKind::Bridge, &alias) {
            Found::Same => {}
            Found::Bare => self.ops.set_alias(&bridge, &alias).await?,
            f => {
                if matches!(f, Found::Other) {
                    gone(self.ops.delete(&bridge).await)?;
                    forget(links, &bridge);
                }
                self.ops.create_bridge(&bridge).await?;
                self.ops.set_alias(&bridge, &alias).await?;
                made.push(bridge.clone());
            }
        }
        self.finish(links, &bridge, None).await?;

        // A tunnel of the other kind is left from a run with another --tunnel.
        let other_kind = match self.cfg.tunnel {
            TunnelKind::Vxlan => TunnelKind::GreTap,
            TunnelKind::GreTap => TunnelKind::Vxlan,
        };
        let stale = tunnel_name(other_kind, id.key);
        if links.remove(&stale).is_some() {
            gone(self.ops.delete(&stale).await)?;
        }

        let tunnel = tunnel_name(self.cfg.tunnel, id.key);
        let alias = self.tunnel_role(id).alias();
        let kind = LinkKind::of_tunnel(self.cfg.tunnel);
        match found(links, &tunnel, &kind, &alias) {
            Found::Same => {}
            // A bare tunnel may have been made with other end points: make it again.
            f => {
                if !matches!(f, Found::Missing) {
                    gone(self.ops.delete(&tunnel).await)?;
                    links.remove(&tunnel);
                }
                self.ops.create_tunnel(&self.tunnel_spec(id)).await?;
                self.ops.set_alias(&tunnel, &alias).await?;
                made.push(tunnel.clone());
            }
        }
        // No learning on the tunnel port: everything behind it is one destination anyway, and
        // a CNCI that reflects a node's own broadcasts back to it (one VXLAN device for all
        // its nodes, with hairpin) would otherwise teach the bridge that the node's own VMs
        // are behind the tunnel, and cut them off.
        self.finish(links, &tunnel, Some((&bridge, Some(false))))
            .await?;
        Ok(made)
    }

    /// Makes sure the VNIC's tap is there, named, on the bridge and up.
    async fn ensure_tap(&self, links: &mut Links, vnic: &Vnic) -> Result<String, NetError> {
        let tap = tap_name(vnic.instance);
        let bridge = bridge_name(vnic.subnet.key);
        let alias = vnic.role().alias();
        let kind = if vnic.veth {
            LinkKind::Veth
        } else {
            LinkKind::Tun
        };
        let mut state = found(links, &tap, &kind, &alias);
        if matches!(state, Found::Same | Found::Bare)
            && links.get(&tap).and_then(|l| l.mac) != Some(tap_mac(&vnic.mac))
        {
            // The VM would get another MAC than the START's.
            state = match state {
                Found::Same => Found::Other,
                _ => Found::Missing,
            };
            if matches!(state, Found::Missing) {
                gone(self.ops.delete(&tap).await)?;
                links.remove(&tap);
            }
        }
        match state {
            Found::Same => {}
            Found::Bare => self.ops.set_alias(&tap, &alias).await?,
            Found::Other => {
                // Ours, for this very instance (a new MAC or subnet): replace it. Anything
                // else is not ours to delete.
                let same_instance = links
                    .get(&tap)
                    .and_then(|l| l.alias.as_deref())
                    .and_then(LinkRole::parse)
                    .is_some_and(|r| matches!(r, LinkRole::Tap { instance, .. } if instance == vnic.instance));
                if !same_instance {
                    return Err(NetError::NameTaken { name: tap });
                }
                gone(self.ops.delete(&tap).await)?;
                links.remove(&tap);
                self.create_nic(vnic, &tap).await?;
                self.ops.set_alias(&tap, &alias).await?;
            }
            Found::Missing => {
                self.create_nic(vnic, &tap).await?;
                self.ops.set_alias(&tap, &alias).await?;
            }
        }
        self.finish(links, &tap, Some((&bridge, None))).await?;
        Ok(tap)
    }

    /// Makes the node's end of a VNIC, `tap`: a tap, or a container's veth pair.
    async fn create_nic(&self, vnic: &Vnic, tap: &str) -> Result<(), NetError> {
        let mac = tap_mac(&vnic.mac);
        if vnic.veth {
            let peer = names::veth_peer_name(vnic.instance);
            // A peer an earlier try left (its pair is gone with the node's end).
            gone(self.ops.delete(&peer).await)?;
            self.ops.create_veth(tap, &peer, mac).await?;
        } else {
            self.ops.create_tap(tap, mac).await?;
        }
        Ok(())
    }

    /// Plugs an instance's VNIC in: the subnet's bridge and tunnel on first use, then the
    /// instance's tap on the bridge. Repeating it is harmless (and `first` is then false).
    pub async fn attach(&mut self, vnic: &Vnic) -> Result<Attached, NetError> {
        let key = vnic.subnet.key;
        if let Some(s) = self.subnets.get(&key)
            && s.id != vnic.subnet
        {
            return Err(NetError::SubnetConflict {
                key,
                have: Box::new(s.id),
                want: Box::new(vnic.subnet),
            });
        }
        if let Some(old) = self.vnics.get(&vnic.instance)
            && old.subnet.key != key
        {
            // Detaching it here would lose the old subnet's TENANT_REMOVED: the caller does.
            return Err(NetError::AttachedElsewhere {
                instance: vnic.instance,
                key: old.subnet.key,
            });
        }
        let mut links = self.snapshot().await?;
        let made = match self.ensure_subnet(&mut links, &vnic.subnet).await {
            Ok(_) => self.ensure_tap(&mut links, vnic).await,
            Err(e) => Err(e),
        };
        let tap = match made {
            Ok(tap) => tap,
            Err(e) => {
                // Leave no half-made subnet behind that no VNIC uses (and that the CNCI would
                // never hear of); a subnet in use keeps its links.
                if !self.subnets.contains_key(&key) {
                    let _ = self.remove_subnet_links(key).await;
                }
                return Err(e);
            }
        };

        let subnet = self.subnets.entry(key).or_insert_with(|| SubnetState {
            id: vnic.subnet,
            vnics: BTreeSet::new(),
        });
        let first = subnet.vnics.is_empty();
        subnet.vnics.insert(vnic.instance);
        self.vnics.insert(vnic.instance, *vnic);
        Ok(Attached {
            tap,
            bridge: bridge_name(key),
            first,
        })
    }

    /// Unplugs an instance's VNIC: deletes its tap, and after the subnet's last VNIC its tunnel
    /// and bridge. `None` if the instance has no VNIC here (repeats are harmless).
    pub async fn detach(&mut self, instance: Uuid) -> Result<Option<Detached>, NetError> {
        let Some(vnic) = self.vnics.get(&instance).copied() else {
            return Ok(None);
        };
        let key = vnic.subnet.key;
        if let Some(planned) = self.filters.plan_remove(instance) {
            self.ops.nft(&planned.script).await?;
            planned.commit(&mut self.filters);
        }
        gone(self.ops.delete(&tap_name(instance)).await)?;
        let last = self
            .subnets
            .get(&key)
            .is_none_or(|s| s.vnics.iter().all(|i| *i == instance));
        if last {
            self.remove_subnet_links(key).await?;
            self.subnets.remove(&key);
        } else if let Some(s) = self.subnets.get_mut(&key) {
            s.vnics.remove(&instance);
        }
        self.vnics.remove(&instance);
        Ok(Some(Detached {
            instance,
            subnet: vnic.subnet,
            last,
        }))
    }

    async fn remove_subnet_links(&self, key: u32) -> Result<(), NetError> {
        for kind in [TunnelKind::Vxlan, TunnelKind::GreTap] {
            gone(self.ops.delete(&tunnel_name(kind, key)).await)?;
        }
        gone(self.ops.delete(&bridge_name(key)).await)?;
        Ok(())
    }

    /// Detaches every VNIC whose instance `keep` says is gone (the agent's store does not know
    /// it after a restart).
    pub async fn prune(&mut self, keep: impl Fn(Uuid) -> bool) -> Result<Vec<Detached>, NetError> {
        let gone: Vec<Uuid> = self.vnics.keys().copied().filter(|i| !keep(*i)).collect();
        let mut out = Vec::new();
        for instance in gone {
            out.extend(self.detach(instance).await?);
        }
        Ok(out)
    }

    /// Rebuilds the view from the kernel's links and their aliases (after an agent restart) and
    /// repairs what a crash left: links in cumulo's name space without a readable alias are
    /// deleted; a subnet with taps gets back a lost bridge or tunnel (and a tunnel with other
    /// end points is made again); a bridge or tunnel with no tap left is removed and reported.
    pub async fn rebuild(&mut self) -> Result<Rebuilt, NetError> {
        self.subnets.clear();
        self.vnics.clear();
        // The port filters are made afresh with the first change: each instance found again
        // is filtered again as its record says (`Backend::filter_port`).
        self.filters.reset();
        let mut links = self.snapshot().await?;
        let mut out = Rebuilt::default();

        let mut ids: BTreeMap<u32, SubnetId> = BTreeMap::new();
        let mut taps: BTreeMap<u32, Vec<Vnic>> = BTreeMap::new();
        let mut from_tap: BTreeSet<u32> = BTreeSet::new();
        let mut names: Vec<&String> = links.keys().filter(|n| names::is_ours(n)).collect();
        names.sort();
        let mut doomed = Vec::new();
        for name in names {
            let link = &links[name];
            let role = link.alias.as_deref().and_then(LinkRole::parse);
            let right = match &role {
                Some(r @ LinkRole::Tap { .. }) => {
                    matches!(link.kind, LinkKind::Tun | LinkKind::Veth) && &r.name() == name
                }
                Some(r @ LinkRole::Bridge(_)) => link.kind == LinkKind::Bridge && &r.name() == name,
                Some(LinkRole::Tunnel { subnet, kind, .. }) => {
                    link.kind == LinkKind::of_tunnel(*kind)
                        && &tunnel_name(*kind, subnet.key) == name
                }
                None => false,
            };
            match role {
                Some(LinkRole::Tap {
                    subnet,
                    instance,
                    mac,
                }) if right => {
                    // Taps decide a subnet's identity (they are the instances); the first
                    // tap of a key, if taps disagree.
                    if from_tap.insert(subnet.key) {
                        ids.insert(subnet.key, subnet);
                    }
                    taps.entry(subnet.key).or_default().push(Vnic {
                        instance,
                        mac,
                        subnet,
                        veth: link.kind == LinkKind::Veth,
                    });
                }
                Some(role) if right => {
                    ids.entry(role.subnet().key).or_insert(*role.subnet());
                }
                _ => doomed.push(name.clone()),
            }
        }
        for name in doomed {
            gone(self.ops.delete(&name).await)?;
            forget(&mut links, &name);
            out.deleted.push(name);
        }

        for (key, id) in ids {
            let (vnics, odd): (Vec<Vnic>, Vec<Vnic>) = taps
                .remove(&key)
                .unwrap_or_default()
                .into_iter()
                .partition(|v| v.subnet == id);
            out.conflicts
                .extend(odd.iter().map(|v| tap_name(v.instance)));
            if vnics.is_empty() {
                self.remove_subnet_links(key).await?;
                out.removed.push(id);
                continue;
            }
            let made = self.ensure_subnet(&mut links, &id).await?;
            out.created.extend(made);
            for v in &vnics {
                self.finish(
                    &links,
                    &tap_name(v.instance),
                    Some((&bridge_name(key), None)),
                )
                .await?;
            }
            let instances: BTreeSet<Uuid> = vnics.iter().map(|v| v.instance).collect();
            self.vnics.extend(vnics.iter().map(|v| (v.instance, *v)));
            self.subnets.insert(
                key,
                SubnetState {
                    id,
                    vnics: instances.clone(),
                },
            );
            out.vnics.insert(key, instances);
        }
        Ok(out)
    }
}
