//! [`NetArgs`]: the agent's tenant-networking flags, for the daemon's command line to flatten
//! (`#[command(flatten)] pub net: NetArgs`), and [`NetArgs::network`], which checks them and
//! makes the [`Network`].

use std::net::IpAddr;

use super::network::{NetConfig, NetError, Network, resolve_tunnel};
use super::ops::NetOps;
use super::{TunnelChoice, VXLAN_PORT};

/// Tenant-networking flags (or `CUMULO_AGENT_*` environment variables).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct NetArgs {
    /// Overlay tunnel to the CNCIs: auto (GRE-tap where the kernel has it, VXLAN otherwise),
    /// gretap or vxlan. The CNCIs must use the same kind.
    #[arg(long, env = "CUMULO_AGENT_TUNNEL", default_value = "auto")]
    pub tunnel: TunnelChoice,
    /// This node's address on the compute network: the local end of the tenant tunnels
    /// (needed by compute nodes with tenant networking).
    #[arg(long, env = "CUMULO_AGENT_NODE_IP")]
    pub node_ip: Option<IpAddr>,
    /// The VXLAN destination port.
    #[arg(long, env = "CUMULO_AGENT_VXLAN_PORT", default_value_t = VXLAN_PORT)]
    pub vxlan_port: u16,
    /// Serve no metadata service (169.254.169.254) on the tenant bridges.
    #[arg(long, env = "CUMULO_AGENT_NO_METADATA")]
    pub no_metadata: bool,
}

/// The flags do not make a network.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetArgsError {
    /// No `--node-ip`.
    #[error("tenant networking needs --node-ip (this node's address on the compute network)")]
    NoNodeIp,
    /// The tunnel kind cannot be had here.
    #[error(transparent)]
    Net(#[from] NetError),
}

impl NetArgs {
    /// Resolves `--tunnel` (probing the kernel for `auto`) and makes the node's [`Network`],
    /// empty: call [`Network::rebuild`] (or `NetBackend::rebuild`) next.
    pub async fn network<O: NetOps>(&self, ops: O) -> Result<Network<O>, NetArgsError> {
        let node_ip = self.node_ip.ok_or(NetArgsError::NoNodeIp)?;
        let tunnel = resolve_tunnel(&ops, self.tunnel).await?;
        Ok(Network::new(
            ops,
            NetConfig {
                node_ip,
                tunnel,
                vxlan_port: self.vxlan_port,
                metadata: !self.no_metadata,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{FakeNetOps, TunnelKind};
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        net: NetArgs,
    }

    #[test]
    fn flags_parse_with_defaults() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(
            cli.net,
            NetArgs {
                tunnel: TunnelChoice::Auto,
                node_ip: None,
                vxlan_port: 4789,
                no_metadata: false,
            }
        );
        let cli = Cli::try_parse_from([
            "x",
            "--tunnel",
            "gretap",
            "--node-ip",
            "198.18.0.1",
            "--vxlan-port",
            "8472",
        ])
        .unwrap();
        assert_eq!(cli.net.tunnel, TunnelChoice::Fixed(TunnelKind::GreTap));
        assert_eq!(cli.net.node_ip, Some("198.18.0.1".parse().unwrap()));
        assert_eq!(cli.net.vxlan_port, 8472);
        assert!(Cli::try_parse_from(["x", "--tunnel", "geneve"]).is_err());
    }

    #[tokio::test]
    async fn the_network_needs_a_node_ip_and_a_tunnel_the_kernel_has() {
        let mut args = NetArgs {
            tunnel: TunnelChoice::Auto,
            node_ip: None,
            vxlan_port: 4789,
            no_metadata: false,
        };
        assert_eq!(
            args.network(FakeNetOps::new()).await.err(),
            Some(NetArgsError::NoNodeIp)
        );
        args.node_ip = Some("198.18.0.1".parse().unwrap());
        let net = args.network(FakeNetOps::without_gretap()).await.unwrap();
        assert_eq!(net.config().tunnel, TunnelKind::Vxlan);
        args.tunnel = TunnelChoice::Fixed(TunnelKind::GreTap);
        assert!(matches!(
            args.network(FakeNetOps::without_gretap()).await,
            Err(NetArgsError::Net(NetError::TunnelUnsupported(_)))
        ));
    }
}
