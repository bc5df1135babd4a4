//! `cumulo-cnci`'s command line (flags, or `CUMULO_CNCI_*` environment variables), parsed once
//! and checked into a [`CnciConfig`]: the TLS files are loaded and the certificate must carry
//! the CNCIAGENT role.

use clap::Parser;
use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp::payload::MacAddr;
use ssntp_net::TlsIdentity;
use ssntp_net::client::Backoff;
use std::net::IpAddr;
use std::path::PathBuf;
use uuid::Uuid;

use super::run::CnciConfig;
use crate::net::{TunnelChoice, VXLAN_PORT};

/// cumulo-cnci: the tenant network's concentrator. Ends the compute nodes' tunnels of its
/// tenant's subnets.
#[derive(Debug, Parser)]
#[command(name = "cumulo-cnci", version, args_override_self = true)]
pub struct Args {
    /// The cluster CA certificate (PEM).
    #[arg(long, env = "CUMULO_CNCI_CA_CERT")]
    pub ca_cert: PathBuf,
    /// The concentrator's certificate (PEM, with the cnciagent role).
    #[arg(long, env = "CUMULO_CNCI_CERT")]
    pub cert: PathBuf,
    /// The concentrator's private key (PEM).
    #[arg(long, env = "CUMULO_CNCI_KEY")]
    pub key: PathBuf,
    /// The scheduler(s), `host:port`, comma-separated: the CNCI holds a session with each (the
    /// agents of every scheduler reach it), each dialled again after a drop.
    #[arg(
        long,
        env = "CUMULO_CNCI_SCHEDULER",
        value_delimiter = ',',
        required = true
    )]
    pub scheduler: Vec<String>,
    /// Reach the schedulers through this TCP relay (`host:port`): what a CNCI in a namespace
    /// or VM of its own uses. Each connection names its scheduler to the relay first, and TLS
    /// still checks each scheduler's certificate against its name in `--scheduler`.
    #[arg(long, env = "CUMULO_CNCI_VIA")]
    pub via: Option<String>,
    /// Tell the network node's agent the public IPs this CNCI holds through its route channel
    /// at `host:port` (the agent's launcher gives it; docs/networking.md), so that the node
    /// routes them here. None: nobody is told.
    #[arg(long, env = "CUMULO_CNCI_ROUTE_VIA")]
    pub route_via: Option<String>,
    /// The cluster's management networks (`a.b.c.d/n`, comma-separated): the tenant subnets
    /// open no connection to them through this concentrator (answers to connections from
    /// them, such as a floating IP's, still pass). The network node's agent gives its compute
    /// network, its own addresses and its `--cnci-protect`.
    #[arg(long, env = "CUMULO_CNCI_PROTECT", value_delimiter = ',')]
    pub protect: Vec<ssntp::payload::Cidr>,
    /// The concentrator's instance UUID (also its SSNTP UUID).
    #[arg(long, env = "CUMULO_CNCI_UUID")]
    pub uuid: Uuid,
    /// The tenant it serves.
    #[arg(long, env = "CUMULO_CNCI_TENANT")]
    pub tenant: Uuid,
    /// Its address on the compute network: the end of the compute nodes' tunnels.
    #[arg(long, env = "CUMULO_CNCI_IP")]
    pub ip: IpAddr,
    /// Its MAC address on the compute network (announced to the controller; default: the MAC
    /// of the link that holds `--ip`).
    #[arg(long, env = "CUMULO_CNCI_MAC")]
    pub mac: Option<MacAddr>,
    /// Tunnel kind: auto (GRE-tap where the kernel has it, VXLAN otherwise), gretap or vxlan.
    /// The compute nodes must use the same.
    #[arg(long, env = "CUMULO_CNCI_TUNNEL", default_value = "auto")]
    pub tunnel: TunnelChoice,
    /// The VXLAN port.
    #[arg(long, env = "CUMULO_CNCI_VXLAN_PORT", default_value_t = VXLAN_PORT)]
    pub vxlan_port: u16,
    /// The MTU DHCP gives the instances (default: the uplink's less the tunnel's overhead, 1450
    /// for VXLAN over a 1500 link).
    #[arg(long, env = "CUMULO_CNCI_MTU", value_parser = clap::value_parser!(u16).range(576..))]
    pub mtu: Option<u16>,
    /// Log format.
    #[arg(
        long,
        env = "CUMULO_CNCI_LOG_FORMAT",
        default_value = "text",
        value_enum
    )]
    pub log_format: support::LogFormat,
}

/// Why the arguments do not make a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// TLS files.
    #[error("{0}")]
    Tls(#[from] ssntp_net::TlsError),
    /// The certificate lacks the CNCIAGENT role.
    #[error("{cert}: the certificate does not carry the cnciagent role (it carries: {has})")]
    MissingRole {
        /// The certificate file.
        cert: PathBuf,
        /// The roles it has.
        has: Role,
    },
    /// A scheduler address that is not `host:port`.
    #[error("--scheduler {0:?}: not host:port")]
    Scheduler(String),
}

impl Args {
    /// Checks the arguments and loads the TLS files they name.
    pub fn into_config(self) -> Result<CnciConfig, ArgsError> {
        let tls = TlsIdentity::load(&self.ca_cert, &self.cert, &self.key)?;
        let has = tls.own().roles;
        if !has.contains(Role::CNCIAGENT) {
            return Err(ArgsError::MissingRole {
                cert: self.cert,
                has,
            });
        }
        for server in self
            .scheduler
            .iter()
            .chain(&self.via)
            .chain(&self.route_via)
        {
            let ok = server
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(ArgsError::Scheduler(server.clone()));
            }
        }
        Ok(CnciConfig {
            tls,
            uuid: self.uuid,
            tenant: self.tenant,
            servers: self.scheduler,
            via: self.via,
            route_via: self.route_via,
            protect: self.protect,
            ip: self.ip,
            mac: self.mac,
            tunnel: self.tunnel,
            vxlan_port: self.vxlan_port,
            mtu: self.mtu,
            handshake: HandshakeConfig::default(),
            backoff: Backoff::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::TunnelKind;

    #[test]
    fn flags_and_defaults() {
        let argv = [
            "cumulo-cnci",
            "--ca-cert",
            "ca.pem",
            "--cert",
            "c.pem",
            "--key",
            "c.key",
            "--scheduler",
            "localhost:8888",
            "--uuid",
            "00000000-0000-0000-0000-0000000000cc",
            "--tenant",
            "00000000-0000-0000-0000-00000000007e",
            "--ip",
            "198.18.0.100",
            "--mac",
            "02:00:c6:12:00:64",
        ];
        let a = Args::try_parse_from(argv).unwrap();
        assert_eq!(a.uuid, Uuid::from_u128(0xcc));
        assert_eq!(a.mac, Some(MacAddr([2, 0, 0xc6, 0x12, 0, 0x64])));
        assert_eq!(a.tunnel, TunnelChoice::Auto);
        assert_eq!(a.vxlan_port, 4789);
        let mut more = argv.to_vec();
        more.extend(["--tunnel", "vxlan", "--vxlan-port", "8472"]);
        let a = Args::try_parse_from(more).unwrap();
        assert_eq!(a.tunnel, TunnelChoice::Fixed(TunnelKind::Vxlan));
        assert_eq!(a.vxlan_port, 8472);
        let a = Args::try_parse_from(&argv[..argv.len() - 2]).unwrap();
        assert_eq!(a.mac, None);
        let mut bad = argv.to_vec();
        bad.extend(["--mac", "nope"]);
        assert!(Args::try_parse_from(bad).is_err());
    }
}
