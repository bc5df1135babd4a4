//! [`NetOps`]: the narrow interface between the networking logic and the kernel's links.

use std::future::Future;
use std::net::IpAddr;

use super::TunnelKind;

/// The kind of a link, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkKind {
    /// A Linux bridge.
    Bridge,
    /// A VXLAN device.
    Vxlan,
    /// A GRE-tap device.
    GreTap,
    /// A tun or tap device.
    Tun,
    /// One end of a veth pair.
    Veth,
    /// Anything else (the kernel's kind name, empty if none).
    Other(String),
}

impl LinkKind {
    /// The kind of a tunnel.
    pub fn of_tunnel(kind: TunnelKind) -> LinkKind {
        match kind {
            TunnelKind::Vxlan => LinkKind::Vxlan,
            TunnelKind::GreTap => LinkKind::GreTap,
        }
    }
}

/// One link of the namespace, as [`NetOps::links`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: LinkKind,
    /// Its alias (IFLA_IFALIAS), if it has one.
    pub alias: Option<String>,
    /// The bridge it is attached to, if any.
    pub master: Option<String>,
    /// Whether it is administratively up.
    pub up: bool,
    /// Its MAC address, if it has one.
    pub mac: Option<[u8; 6]>,
    /// Whether the bridge learns addresses on it, if it is a bridge port.
    pub learning: Option<bool>,
}

/// An overlay tunnel to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelSpec {
    /// `ip link add NAME type vxlan id VNI local LOCAL remote REMOTE dstport PORT`.
    Vxlan {
        /// The link name.
        name: String,
        /// The VXLAN network identifier (the subnet key; 24 bits).
        vni: u32,
        /// The node's end point.
        local: IpAddr,
        /// The CNCI's end point.
        remote: IpAddr,
        /// The UDP destination port.
        port: u16,
    },
    /// `ip link add NAME type gretap key KEY local LOCAL remote REMOTE`.
    GreTap {
        /// The link name.
        name: String,
        /// The GRE key (the subnet key), in and out.
        key: u32,
        /// The node's end point.
        local: IpAddr,
        /// The CNCI's end point.
        remote: IpAddr,
    },
}

impl TunnelSpec {
    /// The link name.
    pub fn name(&self) -> &str {
        match self {
            TunnelSpec::Vxlan { name, .. } | TunnelSpec::GreTap { name, .. } => name,
        }
    }

    /// The tunnel kind.
    pub fn kind(&self) -> TunnelKind {
        match self {
            TunnelSpec::Vxlan { .. } => TunnelKind::Vxlan,
            TunnelSpec::GreTap { .. } => TunnelKind::GreTap,
        }
    }
}

/// Why a [`NetOps`] call failed, as far as the logic above cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpsErrorKind {
    /// No such link (ENODEV).
    NotFound,
    /// A link of that name exists already (EEXIST).
    Exists,
    /// The kernel does not have this kind of link (EOPNOTSUPP).
    Unsupported,
    /// Anything else (permissions, a bad attribute, the netlink socket, a tunnel that cannot
    /// be asked for: an IPv6 GRE-tap, a VNI over 24 bits, mixed address families).
    Other(String),
}

impl std::fmt::Display for OpsErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpsErrorKind::NotFound => f.write_str("no such link"),
            OpsErrorKind::Exists => f.write_str("link exists"),
            OpsErrorKind::Unsupported => f.write_str("not supported"),
            OpsErrorKind::Other(e) => f.write_str(e),
        }
    }
}

/// A failed [`NetOps`] call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{op} {link}: {kind}")]
pub struct OpsError {
    /// The operation (`create bridge`, `delete`, ...).
    pub op: &'static str,
    /// The link it was about.
    pub link: String,
    /// What went wrong.
    pub kind: OpsErrorKind,
}

impl OpsError {
    /// A new error.
    pub fn new(op: &'static str, link: &str, kind: OpsErrorKind) -> OpsError {
        OpsError {
            op,
            link: link.to_string(),
            kind,
        }
    }
}

/// The kernel's links, as the networking logic needs them: everything happens in one network
/// namespace (the one the implementation was made in).
pub trait NetOps: Send + Sync + 'static {
    /// Every link of the namespace.
    fn links(&self) -> impl Future<Output = Result<Vec<Link>, OpsError>> + Send;

    /// Makes a bridge (down).
    fn create_bridge(&self, name: &str) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Makes an overlay tunnel (down).
    fn create_tunnel(&self, spec: &TunnelSpec)
    -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Makes a persistent tap (through `/dev/net/tun`) with this MAC (down).
    fn create_tap(
        &self,
        name: &str,
        mac: [u8; 6],
    ) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Makes a veth pair (down): `name` with this MAC on the node, `peer` beside it (a
    /// container's NIC: its backend moves `peer` into the container's namespace).
    fn create_veth(
        &self,
        name: &str,
        peer: &str,
        mac: [u8; 6],
    ) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Attaches a link to a bridge.
    fn set_master(
        &self,
        name: &str,
        bridge: &str,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Sets whether the bridge a link is on learns addresses from it.
    fn set_learning(
        &self,
        name: &str,
        on: bool,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Makes bridged IPv4 on a bridge pass the inet hooks (`nf_call_iptables 1`), where the
    /// port filters track connections.
    fn set_bridge_netfilter(
        &self,
        bridge: &str,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Sets a link up or down.
    fn set_up(&self, name: &str, up: bool) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Sets a link's alias.
    fn set_alias(
        &self,
        name: &str,
        alias: &str,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Deletes a link.
    fn delete(&self, name: &str) -> impl Future<Output = Result<(), OpsError>> + Send;

    /// Runs an nftables script (`nft -f -`) as one transaction: the port filters
    /// ([`filter`](super::filter)).
    fn nft(&self, script: &str) -> impl Future<Output = Result<(), OpsError>> + Send;
}
