//! `cumulo-agent`'s command line (flags, or `CUMULO_AGENT_*` environment variables), parsed once
//! and checked into a [`DaemonConfig`]: the TLS files are loaded and the role that `--network`
//! asks for is checked against the certificate here, before anything starts.

use clap::builder::BoolishValueParser;
use clap::{Parser, ValueEnum};
use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp_net::TlsIdentity;
use ssntp_net::client::Backoff;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use support::units::{parse_duration, parse_positive_duration};

use super::DaemonConfig;
use crate::backend::container::ContainerConfig;
use crate::backend::libvirt::cache::Source;
use crate::backend::libvirt::fetch::ImageServer;
use crate::backend::libvirt::{Accel, LibvirtConfig};
use crate::cnci::launch::LaunchConfig;
use crate::config::Limits;
use crate::net::NetArgs;
use crate::sim::SimConfig;

/// What the node does in the cluster's networks, and so the SSNTP role it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Network {
    /// A compute node without tenant networking: claims AGENT.
    None,
    /// A compute node: claims AGENT.
    Cn,
    /// A network node (runs CNCIs): claims NETAGENT.
    Nn,
    /// Both: claims AGENT|NETAGENT.
    Dual,
}

impl Network {
    /// The role claimed in CONNECT.
    pub fn role(self) -> Role {
        match self {
            Network::None | Network::Cn => Role::AGENT,
            Network::Nn => Role::NETAGENT,
            Network::Dual => Role::DUAL,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Cn => "cn",
            Network::Nn => "nn",
            Network::Dual => "dual",
        }
    }
}

/// What runs the instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// Simulated instances (no privileges; for tests and scale runs).
    Sim,
    /// Virtual machines through libvirt.
    Libvirt,
}

/// The accelerator of libvirt domains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AccelArg {
    /// KVM where it really works (usable /dev/kvm, not a nested VM), else TCG.
    Auto,
    /// KVM.
    Kvm,
    /// QEMU's emulation (TCG).
    Tcg,
}

impl AccelArg {
    /// The accelerator this choice means.
    pub fn accel(self) -> Accel {
        match self {
            AccelArg::Auto => Accel::Auto,
            AccelArg::Kvm => Accel::Kvm,
            AccelArg::Tcg => Accel::Tcg,
        }
    }
}

/// cumulo-agent: the launcher. Runs instances on this host for the cluster's scheduler.
#[derive(Debug, Parser)]
#[command(name = "cumulo-agent", version, args_override_self = true)]
pub struct Args {
    /// The cluster CA certificate (PEM).
    #[arg(long, env = "CUMULO_AGENT_CA_CERT")]
    pub ca_cert: PathBuf,
    /// The agent's certificate (PEM, with the roles that --network claims).
    #[arg(long, env = "CUMULO_AGENT_CERT")]
    pub cert: PathBuf,
    /// The agent's private key (PEM).
    #[arg(long, env = "CUMULO_AGENT_KEY")]
    pub key: PathBuf,
    /// The scheduler(s), `host:port`, comma-separated: the agent holds a session with one of
    /// them (picked by its UUID, so that nodes spread over them) and moves to the next when it
    /// drops.
    #[arg(
        long,
        env = "CUMULO_AGENT_SCHEDULER",
        value_delimiter = ',',
        required = true
    )]
    pub scheduler: Vec<String>,
    /// The node's part in the networks: none and cn claim agent, nn netagent, dual both.
    #[arg(long, env = "CUMULO_AGENT_NETWORK", value_enum)]
    pub network: Network,
    /// What runs the instances.
    #[arg(long, env = "CUMULO_AGENT_BACKEND", value_enum)]
    pub backend: BackendKind,
    /// Where instance records, the maintenance flag and the agent's UUID are kept.
    #[arg(long, env = "CUMULO_AGENT_STATE_DIR")]
    pub state_dir: PathBuf,
    /// How often the node's status and STATS are sent.
    #[arg(long, env = "CUMULO_AGENT_STATS_INTERVAL", default_value = "5s", value_parser = parse_positive_duration)]
    pub stats_interval: Duration,
    /// Close the scheduler session when nothing was received for this long; a heartbeat goes
    /// out after a third of it without a write. Keep it at or below the scheduler's.
    #[arg(long, env = "CUMULO_AGENT_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration)]
    pub idle_timeout: Duration,
    /// The shortest time between two STATS sent because instances changed state.
    #[arg(long, env = "CUMULO_AGENT_CHANGE_REPORT_GAP", default_value = "50ms", value_parser = parse_duration)]
    pub change_report_gap: Duration,
    /// Refuse START when disk runs low (FULL below 8,000 MiB, refuse below 4,000 MiB); on
    /// unless `--no-disk-limit`. The environment variable takes true or false.
    #[arg(long, env = "CUMULO_AGENT_DISK_LIMIT", num_args = 0..=1, default_missing_value = "true",
          value_parser = BoolishValueParser::new())]
    pub disk_limit: Option<bool>,
    /// Do not watch disk space (wins over --disk-limit and the environment).
    #[arg(long)]
    pub no_disk_limit: bool,
    /// Refuse START when memory runs low (FULL below 1,000 MiB, refuse below 512 MiB); on
    /// unless `--no-mem-limit`. The environment variable takes true or false.
    #[arg(long, env = "CUMULO_AGENT_MEM_LIMIT", num_args = 0..=1, default_missing_value = "true",
          value_parser = BoolishValueParser::new())]
    pub mem_limit: Option<bool>,
    /// Do not watch memory (wins over --mem-limit and the environment).
    #[arg(long)]
    pub no_mem_limit: bool,
    /// vCPUs to offer instead of the host's count (more than the host has overcommits).
    #[arg(long, env = "CUMULO_AGENT_VCPUS")]
    pub vcpus: Option<u32>,
    /// The host name to report (default: this host's).
    #[arg(long, env = "CUMULO_AGENT_HOSTNAME")]
    pub hostname: Option<String>,
    /// The availability zone this node is in (Compute's `availability_zone`: 1 to 63 letters,
    /// digits, `-`, `_` or `.`; default: `nova`).
    #[arg(long, env = "CUMULO_AGENT_ZONE")]
    pub zone: Option<String>,
    /// sim backend: how long a simulated boot takes.
    #[arg(long, env = "CUMULO_AGENT_SIM_BOOT_DELAY", default_value = "0s", value_parser = parse_duration)]
    pub sim_boot_delay: Duration,
    /// sim backend: where simulated instances are kept, so that they outlive the agent process
    /// as VMs do (default: `sim/` in the state directory).
    #[arg(long, env = "CUMULO_AGENT_SIM_DIR")]
    pub sim_dir: Option<PathBuf>,
    /// libvirt backend: the libvirt URI.
    #[arg(
        long,
        env = "CUMULO_AGENT_LIBVIRT_URI",
        default_value = "qemu:///system"
    )]
    pub libvirt_uri: String,
    /// libvirt backend: the accelerator.
    #[arg(long, env = "CUMULO_AGENT_ACCEL", value_enum, default_value = "auto")]
    pub accel: AccelArg,
    /// libvirt backend: the image store (default: `images/` in the state directory).
    #[arg(long, env = "CUMULO_AGENT_IMAGE_DIR")]
    pub image_dir: Option<PathBuf>,
    /// libvirt backend and containers: the controller's node image endpoint (`host:port`, its
    /// `--image-listen`), where the data of uploaded images is fetched the first time a START
    /// names one. Without it only images already in the image store boot.
    #[arg(long, env = "CUMULO_AGENT_IMAGE_SERVER")]
    pub image_server: Option<String>,
    /// libvirt backend: the most the image cache keeps of fetched image data, MiB (what
    /// instances use is never evicted).
    #[arg(long, env = "CUMULO_AGENT_IMAGE_CACHE_MB", default_value_t = 20480, value_parser = clap::value_parser!(u64).range(1..))]
    pub image_cache_mb: u64,
    /// Run containers beside VMs (a START with `vm_type` `container`): OCI containers through
    /// runc, their images root file system tarballs in the image store (`NAME.tar`,
    /// `NAME.tar.gz`). Root only. docs/containers.md.
    #[arg(long, env = "CUMULO_AGENT_CONTAINERS")]
    pub containers: bool,
    /// The OCI runtime that runs containers (runc, or a path to it).
    #[arg(long, env = "CUMULO_AGENT_CONTAINER_RUNTIME", default_value = "runc")]
    pub container_runtime: PathBuf,
    /// Tenant networking (with `--network cn|dual`, and `--backend libvirt` or a `--node-ip`).
    #[command(flatten)]
    pub net: NetArgs,
    /// Network nodes (`--network nn|dual`): a certificate (PEM, the cnciagent role, no UUID
    /// bound) for the CNCIs whose START carries none of their own. A controller with the CA key
    /// (`--ca-key`) issues every CNCI a certificate bound to its UUID, in its START: this one is
    /// only for controllers without it, and is weaker (one key for every CNCI of the node, in
    /// each one's seed). Not needed to run CNCIs: `--cnci-addresses` is.
    #[arg(long, env = "CUMULO_AGENT_CNCI_CERT")]
    pub cnci_cert: Option<PathBuf>,
    /// The private key (PEM) of `--cnci-cert`.
    #[arg(long, env = "CUMULO_AGENT_CNCI_KEY")]
    pub cnci_key: Option<PathBuf>,
    /// The node's link on the compute network, where it answers ARP for its CNCIs.
    #[arg(long, env = "CUMULO_AGENT_CNCI_UPLINK")]
    pub cnci_uplink: Option<String>,
    /// Network nodes (`--network nn|dual`): the addresses the CNCIs take (IPv4 CIDR; network
    /// nodes need disjoint ranges). With it the CNCIs placed here run as `cumulo-cnci`
    /// processes (or VMs, `--cnci-image`), each in a network namespace of its own, reached
    /// through this node (a veth pair, proxy ARP on `--cnci-uplink`).
    #[arg(long, env = "CUMULO_AGENT_CNCI_ADDRESSES", value_parser = parse_cidr)]
    pub cnci_addresses: Option<crate::net::Cidr>,
    /// The compute network's prefix length (the CNCIs' addresses get it).
    #[arg(long, env = "CUMULO_AGENT_CNCI_PREFIX", default_value_t = 24, value_parser = clap::value_parser!(u8).range(1..=30))]
    pub cnci_prefix: u8,
    /// The `cumulo-cnci` binary (default: the one next to this program).
    #[arg(long, env = "CUMULO_AGENT_CNCI_BINARY")]
    pub cnci_binary: Option<PathBuf>,
    /// Run the CNCIs as VMs booted from this kernel+initrd image of the image store (made by
    /// `scripts/cnci-guest.sh`: the tiny guest with `cumulo-cnci` inside) instead of as
    /// processes. Needs `--backend libvirt`.
    #[arg(long, env = "CUMULO_AGENT_CNCI_IMAGE")]
    pub cnci_image: Option<String>,
    /// With `--cnci-image`: the network namespace (a path such as `/proc/1/ns/net`) that
    /// libvirt's QEMU runs in, where a CNCI VM's tap is made before it moves into the CNCI's
    /// namespace. Default: this agent's own (where libvirtd normally runs too).
    #[arg(long, env = "CUMULO_AGENT_CNCI_TAP_NETNS")]
    pub cnci_tap_netns: Option<PathBuf>,
    /// Network nodes: the floating range (IPv4 CIDR, as the controller's `--floating-range`).
    /// A CNCI here may have an address of it routed to itself on this host (its route channel:
    /// docs/networking.md), never the range's network, broadcast or first host (the gateway).
    #[arg(long, env = "CUMULO_AGENT_FLOATING_RANGE", default_value = "192.168.233.0/24", value_parser = parse_cidr)]
    pub floating_range: crate::net::Cidr,
    /// Network nodes: more management networks (IPv4 CIDRs, comma-separated) that no tenant may
    /// open a connection to through its CNCI, beside the compute network and this node's own
    /// addresses, which are always protected (docs/networking.md).
    #[arg(long, env = "CUMULO_AGENT_CNCI_PROTECT", value_delimiter = ',', value_parser = parse_cidr)]
    pub cnci_protect: Vec<crate::net::Cidr>,
    /// Where the console endpoint listens (HTTPS, for the controller only: see
    /// docs/protocol.md, "The console channel"); `off` or `0` for none. An address that cannot
    /// be bound stops the agent at start, with the cause (the controller would reach whatever
    /// holds it).
    #[arg(long, env = "CUMULO_AGENT_CONSOLE_LISTEN", default_value = "0.0.0.0:8890", value_parser = parse_console_listen)]
    pub console_listen: ConsoleListen,
    /// Log format.
    #[arg(
        long,
        env = "CUMULO_AGENT_LOG_FORMAT",
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
    /// The certificate lacks a role that `--network` claims.
    #[error(
        "{cert}: --network {network} needs the {missing} role, which the certificate does not carry (it carries: {has})"
    )]
    MissingRole {
        /// The certificate file.
        cert: PathBuf,
        /// The `--network` value.
        network: &'static str,
        /// The roles it lacks.
        missing: Role,
        /// The roles it has.
        has: Role,
    },
    /// A scheduler address that is not `host:port`.
    #[error("--scheduler {0:?}: not host:port")]
    Scheduler(String),
    /// The host name is empty.
    #[error("the host name is empty: give one with --hostname")]
    Hostname,
    /// The zone is not a zone name.
    #[error("--zone {0:?}: a zone is 1 to 63 letters, digits, '-', '_' or '.'")]
    Zone(String),
    /// CNCI flags that do not go together.
    #[error("{0}")]
    Cnci(String),
    /// The stats interval is zero.
    #[error("--stats-interval must be longer than zero")]
    StatsInterval,
    /// The image server cannot be dialled as given.
    #[error("{0}")]
    ImageServer(String),
}

/// `--console-listen`: an address, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleListen(pub Option<SocketAddr>);

fn parse_console_listen(s: &str) -> Result<ConsoleListen, String> {
    match s {
        "off" | "0" => Ok(ConsoleListen(None)),
        _ => s
            .parse()
            .map(|a| ConsoleListen(Some(a)))
            .map_err(|_| format!("{s:?}: not ADDRESS:PORT, off or 0")),
    }
}

/// The address the node reports (STATS `networks`) for the console endpoint at `listen`: its
/// own address when it names one, else the local address of the route to the first scheduler
/// (a UDP socket connected there: nothing is sent), of the listener's family when it is IPv4
/// (`0.0.0.0` takes no IPv6 connections).
fn console_address(listen: SocketAddr, schedulers: &[String]) -> Option<IpAddr> {
    if !listen.ip().is_unspecified() {
        return Some(listen.ip());
    }
    let scheduler = schedulers
        .first()?
        .to_socket_addrs()
        .ok()?
        .find(|a| listen.is_ipv6() || a.is_ipv4())?;
    let any: SocketAddr = if scheduler.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = std::net::UdpSocket::bind(any).ok()?;
    socket.connect(scheduler).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// An `ADDR/PREFIX` flag.
fn parse_cidr(s: &str) -> Result<crate::net::Cidr, String> {
    s.parse().map_err(|_| format!("{s:?}: not ADDRESS/PREFIX"))
}

/// This host's name, from the kernel; `None` if it cannot be read.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty()).then(|| name.to_string())
}

impl Args {
    /// Whether the disk watermarks apply.
    pub fn disk_limits(&self) -> bool {
        !self.no_disk_limit && self.disk_limit.unwrap_or(true)
    }

    /// Whether the memory watermarks apply.
    pub fn mem_limits(&self) -> bool {
        !self.no_mem_limit && self.mem_limit.unwrap_or(true)
    }

    /// Checks the arguments and loads the TLS files they name.
    pub fn into_config(self) -> Result<DaemonConfig, ArgsError> {
        // Flags that need nothing read are checked first.
        if let Some(zone) = &self.zone
            && !ssntp::payload::valid_zone(zone)
        {
            return Err(ArgsError::Zone(zone.clone()));
        }
        let tls = TlsIdentity::load(&self.ca_cert, &self.cert, &self.key)?;
        let claim = self.network.role();
        let has = tls.own().roles;
        if !has.contains(claim) {
            return Err(ArgsError::MissingRole {
                cert: self.cert,
                network: self.network.name(),
                missing: claim.difference(has),
                has,
            });
        }
        for server in &self.scheduler {
            let ok = server
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(ArgsError::Scheduler(server.clone()));
            }
        }
        if self.stats_interval.is_zero() {
            return Err(ArgsError::StatsInterval);
        }
        let mut limits = Limits::default();
        limits.disk.enabled = self.disk_limits();
        limits.mem.enabled = self.mem_limits();
        let hostname = match self.hostname {
            Some(h) => h,
            None => host_name().unwrap_or_else(|| "localhost".into()),
        };
        if hostname.trim().is_empty() {
            return Err(ArgsError::Hostname);
        }
        let sim_dir = self.sim_dir.unwrap_or_else(|| self.state_dir.join("sim"));
        let source = match &self.image_server {
            Some(server) => Some(Source(Arc::new(
                ImageServer::new(&tls, server)
                    .map_err(|why| ArgsError::ImageServer(format!("--image-server: {why}")))?,
            ))),
            None => None,
        };
        let containers = self.containers.then(|| ContainerConfig {
            dir: self.state_dir.join("containers"),
            images: self
                .image_dir
                .clone()
                .unwrap_or_else(|| self.state_dir.join("images")),
            runtime: self.container_runtime.clone(),
            source: source.clone(),
            cache_cap: self.image_cache_mb.saturating_mul(1 << 20),
        });
        let libvirt = (self.backend == BackendKind::Libvirt).then(|| {
            let mut l = LibvirtConfig::new(&self.libvirt_uri, self.accel.accel(), &self.state_dir);
            if let Some(dir) = self.image_dir {
                l.images = dir;
            }
            l.image_cache = self.image_cache_mb.saturating_mul(1 << 20);
            l.image_source = source;
            l
        });
        // Tenant networking plumbs VMs, and simulated instances given a node address (their
        // taps real, their guests not); with --network none or nn (no VNICs of instances here)
        // there is nothing to plumb.
        let tenant_net = matches!(self.network, Network::Cn | Network::Dual)
            && (self.backend == BackendKind::Libvirt || self.net.node_ip.is_some());
        let runs_cncis = self.cnci_addresses.is_some() || self.cnci_cert.is_some();
        let cnci = match (runs_cncis, self.network) {
            (false, _) => None,
            (true, Network::None | Network::Cn) => {
                return Err(ArgsError::Cnci(
                    "--cnci-addresses, --cnci-cert: only network nodes (--network nn or dual) run CNCIs"
                        .into(),
                ));
            }
            (true, Network::Nn | Network::Dual) => {
                let missing = |f: &str| ArgsError::Cnci(format!("running CNCIs needs {f}"));
                let shared = match (&self.cnci_cert, &self.cnci_key) {
                    (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
                    (None, None) => None,
                    _ => {
                        return Err(ArgsError::Cnci(
                            "--cnci-cert and --cnci-key go together".into(),
                        ));
                    }
                };
                let uplink = self
                    .cnci_uplink
                    .clone()
                    .ok_or_else(|| missing("--cnci-uplink"))?;
                let addresses = self
                    .cnci_addresses
                    .ok_or_else(|| missing("--cnci-addresses"))?;
                if !addresses.addr.is_ipv4() {
                    return Err(ArgsError::Cnci("--cnci-addresses: IPv4 only".into()));
                }
                if self.cnci_image.is_some() && self.backend != BackendKind::Libvirt {
                    return Err(ArgsError::Cnci(
                        "--cnci-image: CNCIs run as VMs with --backend libvirt only".into(),
                    ));
                }
                let floating = self
                    .floating_range
                    .v4()
                    .ok_or_else(|| ArgsError::Cnci("--floating-range: IPv4 only".into()))?;
                let binary = match &self.cnci_binary {
                    Some(b) => b.clone(),
                    None => std::env::current_exe()
                        .ok()
                        .and_then(|e| e.parent().map(|d| d.join("cumulo-cnci")))
                        .unwrap_or_else(|| PathBuf::from("cumulo-cnci")),
                };
                Some(LaunchConfig {
                    binary,
                    ca_cert: self.ca_cert.clone(),
                    shared,
                    uplink,
                    addresses,
                    prefix: self.cnci_prefix,
                    servers: self.scheduler.clone(),
                    tunnel: self.net.tunnel.to_string(),
                    vxlan_port: self.net.vxlan_port,
                    dir: self.state_dir.join("cnci"),
                    vm_image: self.cnci_image.clone(),
                    tap_netns: self.cnci_tap_netns.clone(),
                    floating,
                    protect: self.cnci_protect.clone(),
                })
            }
        };
        let console = self.console_listen.0;
        let console_address = console.and_then(|listen| console_address(listen, &self.scheduler));
        Ok(DaemonConfig {
            console,
            console_address,
            containers,
            net: tenant_net.then_some(self.net),
            tls,
            claim,
            servers: self.scheduler,
            state_dir: self.state_dir,
            hostname,
            zone: self.zone,
            stats_interval: self.stats_interval,
            change_report_gap: self.change_report_gap,
            limits,
            vcpus: self.vcpus,
            sim: SimConfig {
                boot_delay: self.sim_boot_delay,
                dir: Some(sim_dir),
                ..SimConfig::default()
            },
            libvirt,
            cnci,
            handshake: HandshakeConfig {
                session: ssntp::session::SessionConfig {
                    idle_timeout: self.idle_timeout,
                    ..ssntp::session::SessionConfig::default()
                },
                ..HandshakeConfig::default()
            },
            backoff: Backoff::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Args {
        let mut argv = vec![
            "cumulo-agent",
            "--ca-cert",
            "ca.pem",
            "--cert",
            "agent.pem",
            "--key",
            "agent.key",
            "--scheduler",
            "a:1,b:2",
            "--network",
            "dual",
            "--backend",
            "sim",
            "--state-dir",
            "/tmp/x",
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn the_console_endpoint_is_on_by_default_and_can_be_turned_off() {
        let on = "0.0.0.0:8890".parse().ok();
        assert_eq!(parse(&[]).console_listen, ConsoleListen(on));
        for off in ["off", "0"] {
            assert_eq!(
                parse(&["--console-listen", off]).console_listen,
                ConsoleListen(None)
            );
        }
        let at: SocketAddr = "127.0.0.1:9999".parse().unwrap();
        assert_eq!(
            parse(&["--console-listen", "127.0.0.1:9999"]).console_listen,
            ConsoleListen(Some(at))
        );
        assert!(parse_console_listen("8890").is_err());
        // A named address is reported as it is; an unspecified one as the route to the
        // scheduler's.
        assert_eq!(console_address(at, &[]), Some(at.ip()));
        let any: SocketAddr = "0.0.0.0:8890".parse().unwrap();
        assert_eq!(
            console_address(any, &["127.0.0.1:8888".into()]),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            console_address(any, &["localhost:8888".into()]),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(console_address(any, &[]), None);
    }

    #[test]
    fn a_zone_is_reported_when_it_is_a_zone_name() {
        assert_eq!(parse(&["--zone", "edge-1"]).zone.as_deref(), Some("edge-1"));
        assert_eq!(parse(&[]).zone, None);
        for bad in ["two words", "", "a/b"] {
            let refused = parse(&["--zone", bad]).into_config();
            assert!(matches!(refused, Err(ArgsError::Zone(_))), "{bad:?}");
        }
    }

    #[test]
    fn networks_claim_their_roles() {
        assert_eq!(Network::None.role(), Role::AGENT);
        assert_eq!(Network::Cn.role(), Role::AGENT);
        assert_eq!(Network::Nn.role(), Role::NETAGENT);
        assert_eq!(Network::Dual.role(), Role::AGENT | Role::NETAGENT);
    }

    #[test]
    fn flags_and_defaults() {
        let a = parse(&[]);
        assert_eq!(a.scheduler, vec!["a:1", "b:2"]);
        assert_eq!(a.stats_interval, Duration::from_secs(5));
        assert!(a.disk_limits() && a.mem_limits());
        let a = parse(&["--no-disk-limit", "--mem-limit"]);
        assert!(!a.disk_limits() && a.mem_limits());
        let a = parse(&["--mem-limit", "--no-mem-limit", "--disk-limit=false"]);
        assert!(!a.mem_limits(), "--no-mem-limit wins");
        assert!(!a.disk_limits());
        let a = parse(&["--stats-interval", "250ms", "--sim-boot-delay", "1s"]);
        assert_eq!(a.stats_interval, Duration::from_millis(250));
        assert_eq!(a.sim_boot_delay, Duration::from_secs(1));
        assert!(Args::try_parse_from(["cumulo-agent", "--network", "cloud"]).is_err());
    }

    #[test]
    fn tenant_network_flags() {
        let a = parse(&["--tunnel", "vxlan", "--node-ip", "198.18.0.1"]);
        assert_eq!(a.net.node_ip, Some("198.18.0.1".parse().unwrap()));
        assert_eq!(a.net.vxlan_port, crate::net::VXLAN_PORT);
        assert!(Args::try_parse_from(["cumulo-agent", "--tunnel", "geneve"]).is_err());
    }

    #[test]
    fn libvirt_flags() {
        let a = parse(&[]);
        assert_eq!(a.libvirt_uri, "qemu:///system");
        assert_eq!(a.accel, AccelArg::Auto);
        let a = parse(&[
            "--backend",
            "libvirt",
            "--libvirt-uri",
            "test:///default",
            "--accel",
            "tcg",
            "--image-dir",
            "/srv/images",
        ]);
        assert_eq!(a.backend, BackendKind::Libvirt);
        assert_eq!(a.accel.accel(), Accel::Tcg);
        assert_eq!(a.image_dir, Some(PathBuf::from("/srv/images")));
        assert!(Args::try_parse_from(["cumulo-agent", "--accel", "hvf"]).is_err());
    }
}
