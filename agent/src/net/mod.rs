//! Tenant networking on a compute node: for each (tenant, subnet, CNCI) a local bridge and an
//! overlay tunnel to the CNCI, keyed by the subnet key; a tap per instance on that bridge.
//!
//! - [`NetOps`] is the narrow interface to the kernel: create a bridge, a tunnel (VXLAN or
//!   GRE-tap) or a tap, attach a link to a bridge, set it up or down, set its alias, list links,
//!   delete a link. [`RtNetOps`] implements it over rtnetlink (taps through `/dev/net/tun`), in
//!   the network namespace of the thread that creates it; `FakeNetOps` (`testing` feature) records every call for
//!   tests.
//! - [`Network`] holds the logic above it: [`Network::attach`] makes the subnet's bridge and
//!   tunnel on first use and says when a VNIC is the subnet's first on this node (the agent then
//!   sends TENANT_ADDED); [`Network::detach`] removes the tap and, after the subnet's last VNIC,
//!   the tunnel and bridge (TENANT_REMOVED); [`Network::rebuild`] rebuilds the view from the
//!   kernel's links after a restart and repairs half-made state.
//! - [`filter`] writes the nftables scripts of the port filters (each tap's anti-spoofing and
//!   its port firewall, [`ssntp::payload::Firewall`]) and keeps the port indexes;
//!   [`Network::filter`] applies one ([`NetOps::nft`]), [`Network::detach`] removes it.
//! - [`metadata`] is the metadata service (169.254.169.254) for the node's ports: a responder
//!   per tenant bridge, answering each instance with its own data; [`NetBackend`] registers
//!   each port's instance with it.
//! - [`names`] names the links (a short prefix and an id, within IFNAMSIZ) and writes and reads
//!   the logical identity each link carries in its alias (IFLA_IFALIAS).
//! - [`NetBackend`] wraps any [`Backend`](crate::Backend): it plugs an instance's VNIC in
//!   before the VM is made and unplugs it after the VM is deleted, and hands TENANT_ADDED and
//!   TENANT_REMOVED ([`TenantChange`]) to the SSNTP wiring. [`NetArgs`] are the daemon's flags
//!   (`--tunnel`, `--node-ip`, `--vxlan-port`).
//!
//! What this module does not do (but for the metadata responders): addresses, routes, DHCP, NAT (the CNCI's job), or send
//! frames (the wiring does, from [`TenantChange::payload`]). `docs/networking.md` has the
//! whole picture.

mod args;
mod backend;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod filter;
pub mod metadata;
pub mod names;
mod network;
mod ops;
mod rtnl;
#[cfg(test)]
mod tests;

pub use args::{NetArgs, NetArgsError};
pub use backend::{NetBackend, TenantChange};
#[cfg(any(test, feature = "testing"))]
pub use fake::FakeNetOps;
pub use names::{Cidr, LinkRole, SubnetId, tap_mac, tap_name, veth_peer_name};
pub use network::{
    Attached, Detached, NetConfig, NetError, Network, Rebuilt, Vnic, resolve_tunnel,
};
pub use ops::{Link, LinkKind, NetOps, OpsError, OpsErrorKind, TunnelSpec};
pub use rtnl::RtNetOps;

use std::fmt;
use std::str::FromStr;

/// The kind of overlay tunnel between a compute node and a CNCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// VXLAN (UDP), VNI = the subnet key.
    Vxlan,
    /// GRE-tap (Ethernet over GRE), GRE key = the subnet key: what ciao used.
    GreTap,
}

impl TunnelKind {
    /// The kind's name, as `--tunnel` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::GreTap => "gretap",
        }
    }
}

impl fmt::Display for TunnelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--tunnel auto|gretap|vxlan`: which tunnel kind to use; `auto` picks GRE-tap where the
/// kernel has it and VXLAN otherwise ([`resolve_tunnel`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TunnelChoice {
    /// GRE-tap where the kernel has it, VXLAN otherwise.
    #[default]
    Auto,
    /// Always this kind (an error at start if the kernel lacks it).
    Fixed(TunnelKind),
}

/// Not one of `auto`, `gretap`, `vxlan`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tunnel kind {0:?} (expected auto, gretap or vxlan)")]
pub struct UnknownTunnel(pub String);

impl FromStr for TunnelChoice {
    type Err = UnknownTunnel;

    fn from_str(s: &str) -> Result<TunnelChoice, UnknownTunnel> {
        match s {
            "auto" => Ok(TunnelChoice::Auto),
            "gretap" | "gre" => Ok(TunnelChoice::Fixed(TunnelKind::GreTap)),
            "vxlan" => Ok(TunnelChoice::Fixed(TunnelKind::Vxlan)),
            other => Err(UnknownTunnel(other.to_string())),
        }
    }
}

impl fmt::Display for TunnelChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TunnelChoice::Auto => f.write_str("auto"),
            TunnelChoice::Fixed(kind) => kind.fmt(f),
        }
    }
}

/// The IANA VXLAN port, the default destination port of the tunnels.
pub const VXLAN_PORT: u16 = 4789;

#[cfg(test)]
mod choice_tests {
    use super::*;

    #[test]
    fn tunnel_choice_parses_and_prints() {
        for (text, choice) in [
            ("auto", TunnelChoice::Auto),
            ("gretap", TunnelChoice::Fixed(TunnelKind::GreTap)),
            ("vxlan", TunnelChoice::Fixed(TunnelKind::Vxlan)),
        ] {
            assert_eq!(text.parse::<TunnelChoice>().unwrap(), choice);
            assert_eq!(choice.to_string(), text);
        }
        assert!("geneve".parse::<TunnelChoice>().is_err());
    }
}
