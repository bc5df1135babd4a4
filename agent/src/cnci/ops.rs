//! [`CnciOps`]: the narrow kernel interface of the concentrator's tunnel end, and
//! [`RtCnciOps`], over rtnetlink.
//!
//! Beyond what a compute node needs ([`NetOps`]: bridges, GRE-tap tunnels, master, up,
//! delete), the concentrator makes a VXLAN device with no remote (a hub for every compute node
//! of a subnet), turns hairpin on for it, and adds or removes one all-zeros forwarding entry per
//! compute node on it (`bridge fdb append 00:00:00:00:00:00 dev DEV dst NODE`: head-end
//! replication of broadcasts and unknown destinations).

use futures_util::TryStreamExt;
use rtnetlink::packet_core::{
    NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST, NetlinkMessage, NetlinkPayload,
};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::{Handle, LinkBridgePort, LinkVxlan};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};

use crate::net::{Link, NetOps, OpsError, OpsErrorKind, RtNetOps, TunnelSpec};

/// A VXLAN device that ends the tunnels of every compute node of one subnet: no remote, the
/// compute nodes are its flood entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSpec {
    /// The link name.
    pub name: String,
    /// The VNI (the subnet key; 24 bits).
    pub vni: u32,
    /// The concentrator's address on the compute network.
    pub local: IpAddr,
    /// The UDP port.
    pub port: u16,
}

/// The concentrator's kernel side. Every call is about one link, by name, in the namespace the
/// implementation was made in.
pub trait CnciOps: Send + Sync + 'static {
    /// Every link of the namespace.
    fn links(&self) -> impl Future<Output = Result<Vec<Link>, OpsError>> + Send;
    /// Sets a link's alias (IFLA_IFALIAS).
    fn set_alias(
        &self,
        name: &str,
        alias: &str,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// The flood destinations of a VXLAN hub (its all-zeros forwarding entries).
    fn flood_list(&self, dev: &str) -> impl Future<Output = Result<Vec<IpAddr>, OpsError>> + Send;
    /// Makes a bridge (down).
    fn create_bridge(&self, name: &str) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Makes a VXLAN hub (down).
    fn create_hub(&self, spec: &HubSpec) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Makes a point-to-point tunnel to one compute node (GRE-tap; down).
    fn create_tunnel(&self, spec: &TunnelSpec)
    -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Attaches a link to a bridge.
    fn set_master(
        &self,
        name: &str,
        bridge: &str,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Turns hairpin on for a bridge port: frames may leave through the port they came in by.
    fn set_hairpin(&self, name: &str) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Sets a link up.
    fn set_up(&self, name: &str) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Adds a flood destination (an all-zeros forwarding entry) to a VXLAN hub; nothing
    /// happens if it is there.
    fn flood_add(
        &self,
        dev: &str,
        dst: IpAddr,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Removes a flood destination from a VXLAN hub (`NotFound` if it is not there).
    fn flood_del(
        &self,
        dev: &str,
        dst: IpAddr,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Deletes a link (`NotFound` if there is none).
    fn delete(&self, name: &str) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Adds an address to a link (`Exists` if it has it).
    fn add_address(
        &self,
        name: &str,
        ip: IpAddr,
        prefix: u8,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Removes an address from a link (`NotFound` if it does not have it).
    fn del_address(
        &self,
        name: &str,
        ip: IpAddr,
        prefix: u8,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// The routes the concentrator made (protocol [`ROUTE_PROTOCOL`]): (destination, via).
    fn routes(
        &self,
    ) -> impl Future<Output = Result<Vec<(Ipv4Addr, u8, Ipv4Addr)>, OpsError>> + Send;
    /// Adds (or replaces) the route to `dst`/`prefix` via `via`, marked as the concentrator's.
    fn add_route(
        &self,
        dst: Ipv4Addr,
        prefix: u8,
        via: Ipv4Addr,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Removes the concentrator's route to `dst`/`prefix` (`NotFound` if there is none).
    fn del_route(
        &self,
        dst: Ipv4Addr,
        prefix: u8,
        via: Ipv4Addr,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
}

/// The route protocol number that marks the concentrator's routes to its sibling subnets (so
/// that a restart finds them).
pub const ROUTE_PROTOCOL: u8 = 0xcc;

/// The RTM_NEWROUTE / RTM_DELROUTE message of a route to a sibling subnet.
pub(crate) fn route_message(
    dst: Ipv4Addr,
    prefix: u8,
    via: Ipv4Addr,
) -> rtnetlink::packet_route::route::RouteMessage {
    rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(dst, prefix)
        .gateway(via)
        .protocol(rtnetlink::packet_route::route::RouteProtocol::Other(
            ROUTE_PROTOCOL,
        ))
        .build()
}

/// The RTM_NEWLINK message of a hub: VNI, local end, port, no remote.
pub(crate) fn hub_message(
    spec: &HubSpec,
) -> Result<rtnetlink::packet_route::link::LinkMessage, OpsError> {
    if spec.vni >= 1 << 24 {
        return Err(OpsError::new(
            "create hub",
            &spec.name,
            OpsErrorKind::Other("a VXLAN VNI has 24 bits".into()),
        ));
    }
    let b = LinkVxlan::new(&spec.name, spec.vni).port(spec.port);
    let b = match spec.local {
        IpAddr::V4(l) => b.local(l),
        IpAddr::V6(l) => b.local6(l),
    };
    Ok(b.build())
}

/// The neighbour message of a flood entry: bridge family, all-zeros MAC, the node as the
/// destination, permanent.
pub(crate) fn flood_message(index: u32, dst: IpAddr) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = AddressFamily::Bridge;
    m.header.ifindex = index;
    m.header.state = NeighbourState::Permanent;
    m.header.flags = NeighbourFlags::Own;
    m.attributes
        .push(NeighbourAttribute::LinkLayerAddress(vec![0; 6]));
    m.attributes
        .push(NeighbourAttribute::Destination(match dst {
            IpAddr::V4(a) => NeighbourAddress::Inet(a),
            IpAddr::V6(a) => NeighbourAddress::Inet6(a),
        }));
    m
}

/// The concentrator's link on the compute network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uplink {
    /// Its name.
    pub name: String,
    /// Its MAC.
    pub mac: Option<[u8; 6]>,
    /// Its MTU.
    pub mtu: Option<u32>,
}

/// The real [`CnciOps`]: [`RtNetOps`] for what it shares with a compute node, its own netlink
/// socket for the rest. Works in the network namespace of the thread that makes it.
#[derive(Clone)]
pub struct RtCnciOps {
    links: RtNetOps,
    handle: Handle,
}

const ENODEV: i32 = 19;
const ENOENT: i32 = 2;
const EEXIST: i32 = 17;
const EOPNOTSUPP: i32 = 95;

fn fail(op: &'static str, link: &str) -> impl FnOnce(rtnetlink::Error) -> OpsError {
    move |e| {
        let kind = match &e {
            rtnetlink::Error::NetlinkError(msg) => match -msg.raw_code() {
                ENODEV | ENOENT => OpsErrorKind::NotFound,
                EEXIST => OpsErrorKind::Exists,
                EOPNOTSUPP => OpsErrorKind::Unsupported,
                _ => OpsErrorKind::Other(msg.to_io().to_string()),
            },
            other => OpsErrorKind::Other(other.to_string()),
        };
        OpsError::new(op, link, kind)
    }
}

impl RtCnciOps {
    /// Opens netlink sockets in the calling thread's network namespace; their connection
    /// tasks run on the current tokio runtime.
    pub fn new() -> Result<RtCnciOps, OpsError> {
        let links = RtNetOps::new()?;
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| OpsError::new("open netlink", "", OpsErrorKind::Other(e.to_string())))?;
        tokio::spawn(conn);
        Ok(RtCnciOps { links, handle })
    }

    async fn index(&self, op: &'static str, name: &str) -> Result<u32, OpsError> {
        let mut found = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute();
        match found.try_next().await.map_err(fail(op, name))? {
            Some(msg) => Ok(msg.header.index),
            None => Err(OpsError::new(op, name, OpsErrorKind::NotFound)),
        }
    }

    /// Sends one neighbour request and waits for its acknowledgement.
    async fn neighbour(
        &self,
        op: &'static str,
        dev: &str,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<(), OpsError> {
        let mut req = NetlinkMessage::from(message);
        req.header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        let mut answers = self.handle.clone().request(req).map_err(fail(op, dev))?;
        while let Some(answer) = futures_util::StreamExt::next(&mut answers).await {
            if let NetlinkPayload::Error(e) = answer.payload {
                return Err(fail(op, dev)(rtnetlink::Error::NetlinkError(e)));
            }
        }
        Ok(())
    }
}

impl RtCnciOps {
    /// The link that holds `ip` (the concentrator's uplink), if a link holds it.
    pub async fn uplink_of(&self, ip: IpAddr) -> Result<Option<Uplink>, OpsError> {
        use rtnetlink::packet_route::link::LinkAttribute;
        const OP: &str = "find the link of";
        let what = ip.to_string();
        let mut addrs = self.handle.address().get().set_address_filter(ip).execute();
        let Some(addr) = addrs.try_next().await.map_err(fail(OP, &what))? else {
            return Ok(None);
        };
        let mut links = self
            .handle
            .link()
            .get()
            .match_index(addr.header.index)
            .execute();
        let Some(link) = links.try_next().await.map_err(fail(OP, &what))? else {
            return Ok(None);
        };
        let mut up = Uplink {
            name: String::new(),
            mac: None,
            mtu: None,
        };
        for a in &link.attributes {
            match a {
                LinkAttribute::IfName(n) => up.name.clone_from(n),
                LinkAttribute::Address(m) => up.mac = <[u8; 6]>::try_from(m.as_slice()).ok(),
                LinkAttribute::Mtu(m) => up.mtu = Some(*m),
                _ => {}
            }
        }
        Ok(Some(up))
    }

    /// The hub's forwarding entries as (MAC, destination), where the destination is an address.
    async fn entries(
        &self,
        op: &'static str,
        dev: &str,
    ) -> Result<Vec<(Vec<u8>, IpAddr)>, OpsError> {
        let index = self.index(op, dev).await?;
        self.handle
            .neighbours()
            .get()
            .set_address_family(AddressFamily::Bridge)
            .execute()
            .try_filter_map(|m| {
                let mut mac = None;
                let mut dst = None;
                for a in &m.attributes {
                    match a {
                        NeighbourAttribute::LinkLayerAddress(l) => mac = Some(l.clone()),
                        // Bridge-family dumps carry the destination as bytes (`Other`).
                        NeighbourAttribute::Destination(d) => dst = address(d),
                        _ => {}
                    }
                }
                let entry = (m.header.ifindex == index).then_some(()).and(mac.zip(dst));
                futures_util::future::ready(Ok(entry))
            })
            .try_collect()
            .await
            .map_err(fail(op, dev))
    }
}

/// A neighbour destination as an address.
fn address(d: &NeighbourAddress) -> Option<IpAddr> {
    match d {
        NeighbourAddress::Inet(a) => Some(IpAddr::V4(*a)),
        NeighbourAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        NeighbourAddress::Other(b) => match b.len() {
            4 => <[u8; 4]>::try_from(b.as_slice()).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(b.as_slice()).ok().map(IpAddr::from),
            _ => None,
        },
        _ => None,
    }
}

impl CnciOps for RtCnciOps {
    async fn links(&self) -> Result<Vec<Link>, OpsError> {
        self.links.links().await
    }

    async fn set_alias(&self, name: &str, alias: &str) -> Result<(), OpsError> {
        self.links.set_alias(name, alias).await
    }

    async fn flood_list(&self, dev: &str) -> Result<Vec<IpAddr>, OpsError> {
        let entries = self.entries("list flood entries", dev).await?;
        Ok(entries
            .into_iter()
            .filter(|(mac, _)| mac.iter().all(|b| *b == 0))
            .map(|(_, dst)| dst)
            .collect())
    }

    async fn create_bridge(&self, name: &str) -> Result<(), OpsError> {
        self.links.create_bridge(name).await
    }

    async fn create_hub(&self, spec: &HubSpec) -> Result<(), OpsError> {
        let msg = hub_message(spec)?;
        self.handle
            .link()
            .add(msg)
            .execute()
            .await
            .map_err(fail("create hub", &spec.name))
    }

    async fn create_tunnel(&self, spec: &TunnelSpec) -> Result<(), OpsError> {
        self.links.create_tunnel(spec).await
    }

    async fn set_master(&self, name: &str, bridge: &str) -> Result<(), OpsError> {
        self.links.set_master(name, bridge).await
    }

    async fn set_hairpin(&self, name: &str) -> Result<(), OpsError> {
        let index = self.index("set hairpin", name).await?;
        let msg = LinkBridgePort::new(index).hairpin(true).build();
        self.handle
            .link()
            .set_port(msg)
            .execute()
            .await
            .map_err(fail("set hairpin", name))
    }

    async fn set_up(&self, name: &str) -> Result<(), OpsError> {
        self.links.set_up(name, true).await
    }

    async fn flood_add(&self, dev: &str, dst: IpAddr) -> Result<(), OpsError> {
        let index = self.index("add flood entry", dev).await?;
        let msg = RouteNetlinkMessage::NewNeighbour(flood_message(index, dst));
        // Append, not exclusive: the all-zeros entry holds one destination per node.
        match self
            .neighbour("add flood entry", dev, msg, NLM_F_CREATE | NLM_F_APPEND)
            .await
        {
            Err(e) if e.kind == OpsErrorKind::Exists => Ok(()),
            other => other,
        }
    }

    async fn flood_del(&self, dev: &str, dst: IpAddr) -> Result<(), OpsError> {
        const OP: &str = "remove flood entry";
        let index = self.index(OP, dev).await?;
        // The hub's entries towards the node: the all-zeros one and the learnt ones.
        let macs: Vec<Vec<u8>> = self
            .entries(OP, dev)
            .await?
            .into_iter()
            .filter(|(_, d)| *d == dst)
            .map(|(mac, _)| mac)
            .collect();
        if macs.is_empty() {
            return Err(OpsError::new(OP, dev, OpsErrorKind::NotFound));
        }
        for mac in macs {
            let mut m = flood_message(index, dst);
            for a in &mut m.attributes {
                if let NeighbourAttribute::LinkLayerAddress(l) = a {
                    l.clone_from(&mac);
                }
            }
            match self
                .neighbour(OP, dev, RouteNetlinkMessage::DelNeighbour(m), 0)
                .await
            {
                Err(e) if e.kind == OpsErrorKind::NotFound => {}
                other => other?,
            }
        }
        Ok(())
    }

    async fn delete(&self, name: &str) -> Result<(), OpsError> {
        self.links.delete(name).await
    }

    async fn add_address(&self, name: &str, ip: IpAddr, prefix: u8) -> Result<(), OpsError> {
        const OP: &str = "add address";
        let index = self.index(OP, name).await?;
        self.handle
            .address()
            .add(index, ip, prefix)
            .execute()
            .await
            .map_err(fail(OP, name))
    }

    async fn routes(&self) -> Result<Vec<(Ipv4Addr, u8, Ipv4Addr)>, OpsError> {
        use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteProtocol};
        let all: Vec<_> = self
            .handle
            .route()
            .get(rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .map_err(fail("list routes", ""))?;
        Ok(all
            .into_iter()
            .filter(|m| m.header.protocol == RouteProtocol::Other(ROUTE_PROTOCOL))
            .filter_map(|m| {
                let mut dst = None;
                let mut via = None;
                for a in &m.attributes {
                    match a {
                        RouteAttribute::Destination(RouteAddress::Inet(d)) => dst = Some(*d),
                        RouteAttribute::Gateway(RouteAddress::Inet(g)) => via = Some(*g),
                        _ => {}
                    }
                }
                Some((dst?, m.header.destination_prefix_length, via?))
            })
            .collect())
    }

    async fn add_route(&self, dst: Ipv4Addr, prefix: u8, via: Ipv4Addr) -> Result<(), OpsError> {
        self.handle
            .route()
            .add(route_message(dst, prefix, via))
            .replace()
            .execute()
            .await
            .map_err(fail("add route", &format!("{dst}/{prefix}")))
    }

    async fn del_route(&self, dst: Ipv4Addr, prefix: u8, via: Ipv4Addr) -> Result<(), OpsError> {
        self.handle
            .route()
            .del(route_message(dst, prefix, via))
            .execute()
            .await
            .map_err(fail("remove route", &format!("{dst}/{prefix}")))
    }

    async fn del_address(&self, name: &str, ip: IpAddr, prefix: u8) -> Result<(), OpsError> {
        const OP: &str = "remove address";
        let index = self.index(OP, name).await?;
        let found = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .set_address_filter(ip)
            .set_prefix_length_filter(prefix)
            .execute()
            .try_next()
            .await
            .map_err(fail(OP, name))?;
        let Some(msg) = found else {
            return Err(OpsError::new(OP, name, OpsErrorKind::NotFound));
        };
        self.handle
            .address()
            .del(msg)
            .execute()
            .await
            .map_err(fail(OP, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVxlan, LinkAttribute, LinkInfo};

    #[test]
    fn a_hub_has_a_vni_a_local_end_a_port_and_no_remote() {
        let spec = HubSpec {
            name: "kv-00007001".into(),
            vni: 0x7001,
            local: "198.18.0.100".parse().unwrap(),
            port: 4789,
        };
        let msg = hub_message(&spec).unwrap();
        let mut vxlan = Vec::new();
        let mut kind = None;
        for attr in &msg.attributes {
            if let LinkAttribute::LinkInfo(infos) = attr {
                for info in infos {
                    match info {
                        LinkInfo::Kind(k) => kind = Some(k.clone()),
                        LinkInfo::Data(InfoData::Vxlan(v)) => vxlan = v.clone(),
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(kind, Some(InfoKind::Vxlan));
        assert!(vxlan.contains(&InfoVxlan::Id(0x7001)), "{vxlan:?}");
        assert!(vxlan.contains(&InfoVxlan::Port(4789)), "{vxlan:?}");
        assert!(
            vxlan.contains(&InfoVxlan::Local("198.18.0.100".parse().unwrap())),
            "{vxlan:?}"
        );
        assert!(
            !vxlan
                .iter()
                .any(|v| matches!(v, InfoVxlan::Group(_) | InfoVxlan::Group6(_))),
            "no remote: {vxlan:?}"
        );
        let mut big = spec;
        big.vni = 1 << 24;
        assert!(hub_message(&big).is_err());
    }

    #[test]
    fn a_flood_entry_is_all_zeros_to_the_node() {
        let m = flood_message(7, "198.18.0.1".parse().unwrap());
        assert_eq!(m.header.family, AddressFamily::Bridge);
        assert_eq!(m.header.ifindex, 7);
        assert_eq!(m.header.state, NeighbourState::Permanent);
        assert!(
            m.attributes
                .contains(&NeighbourAttribute::LinkLayerAddress(vec![0; 6]))
        );
        assert!(
            m.attributes
                .contains(&NeighbourAttribute::Destination(NeighbourAddress::Inet(
                    "198.18.0.1".parse().unwrap()
                )))
        );
    }
}
