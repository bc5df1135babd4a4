//! `cumulo-controller`'s command line (flags, or `CUMULO_CONTROLLER_*` environment variables),
//! parsed once and checked into a [`DaemonConfig`] plus the API's settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ssntp_net::TlsIdentity;
use store::Quota;
use support::units::parse_positive_duration;

use crate::api::ApiConfig;
use crate::daemon::DaemonConfig;
use crate::engine::TenantNetwork;

/// How tenant instances are networked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NetworkMode {
    /// No tenant network (addresses are allocated and shown, nothing is plumbed).
    None,
    /// One CNCI per tenant subnet on a network node.
    Cnci,
}

/// Parses `--floating-range`: an IPv4 block from /8 to /30 that does not overlap the tenant
/// subnets' pool (172.16.0.0/12).
pub fn parse_floating_range(text: &str) -> Result<ssntp::payload::Cidr, String> {
    let cidr: ssntp::payload::Cidr = text
        .parse()
        .map_err(|_| format!("{text}: not an address block such as 192.168.233.0/24"))?;
    let (base, _, _) = store::pool_hosts(cidr).map_err(|e| e.to_string())?;
    let pool = ipnet::Ipv4Net::new(store::net::POOL_BASE, store::net::POOL_PREFIX)
        .map_err(|e| e.to_string())?;
    let asked = ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(base), cidr.prefix)
        .map_err(|e| e.to_string())?;
    if pool.contains(&asked.network()) || asked.contains(&pool.network()) {
        return Err(format!(
            "{text} overlaps {pool}, where the tenant subnets are carved from"
        ));
    }
    Ok(store::net::cidr(base, cidr.prefix))
}

/// Parses `--default-quota`: `unlimited`, or `KEY=VALUE` pairs (`instances`, `vcpus`,
/// `memory_mb`; a number or `unlimited`), comma-separated, over [`ApiConfig::DEFAULT_QUOTA`].
pub fn parse_quota(text: &str) -> Result<Quota, String> {
    let mut quota = ApiConfig::DEFAULT_QUOTA;
    if text.trim() == "unlimited" {
        return Ok(Quota::default());
    }
    fn limit<T: std::str::FromStr>(key: &str, value: &str) -> Result<Option<T>, String> {
        match value {
            "unlimited" => Ok(None),
            n => n.parse().map(Some).map_err(|_| {
                format!("{key}={n}: not a whole number of the limit's range, nor `unlimited`")
            }),
        }
    }
    for pair in text.split(',').map(str::trim) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}`: expected KEY=VALUE or `unlimited`"))?;
        let (key, value) = (key.trim(), value.trim());
        match key {
            "instances" => quota.instances = limit(key, value)?,
            "vcpus" => quota.vcpus = limit(key, value)?,
            "memory_mb" => quota.memory_mb = limit(key, value)?,
            other => {
                return Err(format!(
                    "unknown limit `{other}`: instances, vcpus or memory_mb"
                ));
            }
        }
    }
    Ok(quota)
}

/// Parses `--api-connections-per-source`: 1 to [`crate::api::MAX_CONNECTIONS`].
fn parse_connections_per_source(text: &str) -> Result<usize, String> {
    let max = crate::api::MAX_CONNECTIONS;
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("`{text}`: a whole number from 1 to {max}")),
    }
}

/// cumulo-controller: the REST API and the cluster's state; an SSNTP client of the scheduler.
#[derive(Debug, Parser)]
#[command(name = "cumulo-controller", version, args_override_self = true)]
pub struct Args {
    /// The cluster CA certificate (PEM).
    #[arg(long, env = "CUMULO_CONTROLLER_CA_CERT")]
    pub ca_cert: PathBuf,
    /// The controller's certificate (PEM, with the controller role).
    #[arg(long, env = "CUMULO_CONTROLLER_CERT")]
    pub cert: PathBuf,
    /// The controller's private key (PEM).
    #[arg(long, env = "CUMULO_CONTROLLER_KEY")]
    pub key: PathBuf,
    /// The scheduler(s), `host:port`, comma-separated: the controller holds a session with each
    /// (each dialled again after a drop) and sends each frame to the one it belongs to.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_SCHEDULER",
        value_delimiter = ',',
        required = true
    )]
    pub scheduler: Vec<String>,
    /// Where the controller keeps its UUID, token key and (by default) its database.
    #[arg(long, env = "CUMULO_CONTROLLER_STATE_DIR")]
    pub state_dir: PathBuf,
    /// The store: an SQLite database file (default: controller.db in the state directory), or
    /// `etcd://host:port[,host:port...][/prefix]` for a store shared by several controllers.
    #[arg(long, env = "CUMULO_CONTROLLER_STORE")]
    pub store: Option<String>,
    /// How an etcd store is reached (TLS flags: docs/etcd-store.md).
    #[command(flatten)]
    pub etcd: store::EtcdArgs,
    /// Where the REST API listens. Plain HTTP only on a loopback address; elsewhere give
    /// --api-cert and --api-key.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_API_LISTEN",
        default_value = "127.0.0.1:8889"
    )]
    pub api_listen: SocketAddr,
    /// The API's HTTPS certificate (PEM; e.g. the controller's certificate from cumulo-cert).
    #[arg(long, env = "CUMULO_CONTROLLER_API_CERT", requires = "api_key")]
    pub api_cert: Option<PathBuf>,
    /// The API's HTTPS private key (PEM).
    #[arg(long, env = "CUMULO_CONTROLLER_API_KEY", requires = "api_cert")]
    pub api_key: Option<PathBuf>,
    /// The URL clients reach the API at (service catalog, version documents); default from
    /// --api-listen.
    #[arg(long, env = "CUMULO_CONTROLLER_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The first admin user, made (with the admin project) if no user exists.
    #[arg(long, env = "CUMULO_CONTROLLER_ADMIN_USER", default_value = "admin")]
    pub admin_user: String,
    /// The admin project.
    #[arg(long, env = "CUMULO_CONTROLLER_ADMIN_PROJECT", default_value = "admin")]
    pub admin_project: String,
    /// A file holding the first admin's password (default: made up and written to
    /// admin-password in the state directory, mode 0600).
    #[arg(long, env = "CUMULO_CONTROLLER_ADMIN_PASSWORD_FILE")]
    pub admin_password_file: Option<PathBuf>,
    /// The limits of a tenant created through the API without them (each limit the request
    /// leaves out): `instances=N,vcpus=N,memory_mb=MIB`, any of the three, one left out keeping
    /// the built-in default (Nova's: 10 instances, 20 vCPUs, 51200 MiB) and `KEY=unlimited`
    /// lifting it; `unlimited` alone lifts all three. Addresses are bounded by the instance
    /// limit (one each). The admin project made at start-up is unlimited whatever this says.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_DEFAULT_QUOTA",
        default_value = "instances=10,vcpus=20,memory_mb=51200",
        value_parser = parse_quota
    )]
    pub default_quota: Quota,
    /// The floating-IP pool: the subnet of the Networking API's external network (`public`),
    /// an IPv4 block from /8 to /30 outside 172.16.0.0/12 (the tenant subnets'); its first host
    /// is the gateway, never handed out. Floating IPs are recorded and associated, not yet
    /// routed (docs/api.md).
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_FLOATING_RANGE",
        default_value = "192.168.233.0/24",
        value_parser = parse_floating_range
    )]
    pub floating_range: ssntp::payload::Cidr,
    /// Login attempts a minute for one user name, known or not (0: no limit). An attempt with
    /// the right password does not count; over the limit, 429 with Retry-After.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_LOGIN_ATTEMPTS_PER_USER",
        default_value_t = crate::api::LoginLimits::DEFAULT_PER_USER
    )]
    pub login_attempts_per_user: u32,
    /// Login attempts a minute from one source address (IPv6: one /64; 0: no limit). An attempt
    /// with the right password does not count; over the limit, 429 with Retry-After.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_LOGIN_ATTEMPTS_PER_SOURCE",
        default_value_t = crate::api::LoginLimits::DEFAULT_PER_SOURCE
    )]
    pub login_attempts_per_source: u32,
    /// The most API connections open at once from one source address (IPv6: one /64); more
    /// are closed as soon as they are accepted. Of 1024 in all.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_API_CONNECTIONS_PER_SOURCE",
        default_value_t = crate::api::ConnectionLimits::DEFAULT_PER_SOURCE,
        value_parser = parse_connections_per_source
    )]
    pub api_connections_per_source: usize,
    /// Where nodes fetch the data of uploaded images (`GET /v1/images/sha512/{hash}`, mutual
    /// TLS with this controller's certificate; only AGENT and NETAGENT certificates are served).
    /// Give its address to the agents (`cumulo-agent --image-server`). Off when not given.
    #[arg(long, env = "CUMULO_CONTROLLER_IMAGE_LISTEN")]
    pub image_listen: Option<SocketAddr>,
    /// How long a token is valid.
    #[arg(long, env = "CUMULO_CONTROLLER_TOKEN_TTL", default_value = "1h", value_parser = parse_positive_duration)]
    pub token_ttl: Duration,
    /// How tenant instances are networked.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_TENANT_NETWORK",
        value_enum,
        default_value = "none"
    )]
    pub tenant_network: NetworkMode,
    /// The image CNCIs boot from.
    #[arg(long, env = "CUMULO_CONTROLLER_CNCI_IMAGE", default_value = "cnci")]
    pub cnci_image: String,
    /// The share of launched instances whose START is traced without being asked (0 to 1; 0.01:
    /// one in a hundred), under the label `sampled`; a request asks with `X-Cumulo-Trace`.
    #[arg(long, env = "CUMULO_CONTROLLER_TRACE_SAMPLE_RATE", default_value = "0", value_parser = parse_share)]
    pub trace_sample_rate: f64,
    /// Export the collected traces as OpenTelemetry spans to this OTLP/HTTP collector
    /// (`http://host[:port]`, port 4318 unless given; docs/traces.md).
    #[arg(long, env = "CUMULO_CONTROLLER_OTLP_ENDPOINT", value_parser = crate::otlp::Endpoint::parse)]
    pub otlp_endpoint: Option<crate::otlp::Endpoint>,
    /// How long a start, delete or stop may go unconfirmed by its node (then the instance is in
    /// error, hung or missing), counted on what the controller has applied of its schedulers'
    /// frames.
    #[arg(long, env = "CUMULO_CONTROLLER_CONFIRM_TIMEOUT", default_value = "60s", value_parser = parse_positive_duration)]
    pub confirm_timeout: Duration,
    /// Close the scheduler session when nothing was received for this long; a heartbeat goes
    /// out after a third of it without a write. Keep it at or below the scheduler's.
    #[arg(long, env = "CUMULO_CONTROLLER_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration)]
    pub idle_timeout: Duration,
    /// How long a launched CNCI may take to announce itself; its START is sent again (200 ms,
    /// doubling to 2 s, apart) while the cluster answers `full_cloud` or `no_net_cn` until then.
    #[arg(long, env = "CUMULO_CONTROLLER_CNCI_TIMEOUT", default_value = "120s", value_parser = parse_positive_duration)]
    pub cnci_timeout: Duration,
    /// How long a CNCI stays after its subnet empties.
    #[arg(long, env = "CUMULO_CONTROLLER_CNCI_LINGER", default_value = "60s", value_parser = parse_positive_duration)]
    pub cnci_linger: Duration,
    /// The port of the agents' console endpoints (their `--console-listen`), dialled at each
    /// node's reported address to fetch console logs.
    #[arg(long, env = "CUMULO_CONTROLLER_AGENT_CONSOLE_PORT", default_value_t = crate::engine::DEFAULT_CONSOLE_PORT)]
    pub agent_console_port: u16,
    /// The CA key (PEM) of `--ca-cert`: with it the controller issues each CNCI its own
    /// certificate (CNCIAGENT, its UUID bound, `--cnci-cert-lifetime`) in its START, and issues
    /// and renews short-lived TLS client certificates for the off-host launchers, their keys
    /// sealed for each host (the hosts' keys: `cumulo-controller launcher-key`). Also `--ca-key`.
    #[arg(
        long,
        visible_alias = "ca-key",
        env = "CUMULO_CONTROLLER_LAUNCHER_CA_KEY"
    )]
    pub launcher_ca_key: Option<PathBuf>,
    /// With the CA key: where the revocation list of the certificates of the hosts removed with
    /// `cumulo node remove` is written (give the scheduler the same file, `--crl`) [default:
    /// crl.pem in the state directory].
    #[arg(long, env = "CUMULO_CONTROLLER_CRL")]
    pub crl: Option<PathBuf>,
    /// How long a CNCI's own certificate is valid. A CNCI whose certificate expired exits when
    /// its SSNTP session ends (it could not connect again) and is started again with a new one.
    #[arg(long, env = "CUMULO_CONTROLLER_CNCI_CERT_LIFETIME", default_value = "24h", value_parser = parse_positive_duration)]
    pub cnci_cert_lifetime: Duration,
    /// How long a launcher certificate is valid (renewed in its last third).
    #[arg(long, env = "CUMULO_CONTROLLER_LAUNCHER_CERT_LIFETIME", default_value = "1h", value_parser = parse_positive_duration)]
    pub launcher_cert_lifetime: Duration,
    /// Log format: text or json.
    #[arg(
        long,
        env = "CUMULO_CONTROLLER_LOG_FORMAT",
        default_value = "text",
        value_enum
    )]
    pub log_format: support::LogFormat,
}

/// The API's settings from the command line.
#[derive(Debug, Clone)]
pub struct ApiArgs {
    /// Where it listens.
    pub listen: SocketAddr,
    /// HTTPS certificate and key, if any.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The URL clients reach it at.
    pub public_url: String,
    /// The first admin user and project.
    pub admin_user: String,
    /// The admin project.
    pub admin_project: String,
    /// The first admin's password file (made up if absent).
    pub admin_password_file: Option<PathBuf>,
    /// Token lifetime.
    pub token_ttl: Duration,
    /// A new tenant's limits unless its request gives them.
    pub default_quota: Quota,
    /// The floating-IP pool.
    pub floating_range: ssntp::payload::Cidr,
    /// Login rate limits and the hashing pool.
    pub login: crate::api::LoginLimits,
    /// Connection limits.
    pub connections: crate::api::ConnectionLimits,
    /// Where the node image endpoint listens, if anywhere.
    pub image_listen: Option<SocketAddr>,
}

/// A configuration the controller cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TLS files.
    #[error("{0}")]
    Tls(#[from] ssntp_net::tls::TlsError),
    /// Plain HTTP on a non-loopback address.
    #[error(
        "--api-listen {0} is not a loopback address: plain HTTP is refused there; give --api-cert and --api-key"
    )]
    PlainHttp(SocketAddr),
    /// The launcher CA cannot be used.
    #[error("--launcher-ca-key: {0}")]
    LauncherCa(String),
    /// The store's settings (the etcd TLS flags).
    #[error("--store: {0}")]
    Store(store::StoreError),
}

impl Args {
    /// Loads the TLS files and checks the settings.
    pub fn into_config(self) -> Result<(DaemonConfig, ApiArgs), ConfigError> {
        let tls = TlsIdentity::load(&self.ca_cert, &self.cert, &self.key)?;
        if self.api_cert.is_none() && !self.api_listen.ip().is_loopback() {
            return Err(ConfigError::PlainHttp(self.api_listen));
        }
        let mut daemon = DaemonConfig::new(tls, self.scheduler.clone(), self.state_dir.clone());
        if let Some(store) = self.store.clone() {
            daemon.store = store;
        }
        daemon.etcd = self
            .etcd
            .transport(&daemon.store)
            .map_err(ConfigError::Store)?;
        daemon.engine.tenant_network = match self.tenant_network {
            NetworkMode::None => TenantNetwork::None,
            NetworkMode::Cnci => TenantNetwork::Cnci,
        };
        daemon.engine.cnci_image = self.cnci_image;
        daemon.engine.confirm_timeout = self.confirm_timeout;
        daemon.engine.trace_sample = self.trace_sample_rate;
        daemon.engine.otlp = self.otlp_endpoint;
        daemon.handshake.session.idle_timeout = self.idle_timeout;
        daemon.engine.cnci_timeout = self.cnci_timeout;
        daemon.engine.cnci_linger = self.cnci_linger;
        daemon.engine.console_port = self.agent_console_port;
        if let Some(key) = &self.launcher_ca_key {
            let read = |p: &PathBuf| {
                std::fs::read_to_string(p)
                    .map_err(|e| ConfigError::LauncherCa(format!("{}: {e}", p.display())))
            };
            let (ca_pem, ca_key_pem) = (read(&self.ca_cert)?, read(key)?);
            let issuer = crate::creds::CredsIssuer::from_pem(
                &ca_pem,
                &ca_key_pem,
                self.launcher_cert_lifetime,
            )
            .map_err(|e| ConfigError::LauncherCa(e.to_string()))?;
            daemon.launcher_creds = Some(std::sync::Arc::new(issuer));
            let cncis = crate::cnci_creds::CnciIssuer::from_pem(
                &ca_pem,
                &ca_key_pem,
                self.cnci_cert_lifetime,
            )
            .map_err(|e| ConfigError::LauncherCa(e.to_string()))?;
            daemon.engine.cnci_creds = Some(std::sync::Arc::new(cncis));
            let crl = self
                .crl
                .clone()
                .unwrap_or_else(|| self.state_dir.join("crl.pem"));
            let joins = crate::join::JoinIssuer::from_pem(
                &ca_pem,
                &ca_key_pem,
                &crl,
                self.scheduler.clone(),
            )
            .map_err(|e| ConfigError::LauncherCa(e.to_string()))?
            .with_image_server(self.image_listen.map(|a| a.to_string()))
            .with_cluster(
                self.store.as_deref().unwrap_or_default(),
                match self.tenant_network {
                    NetworkMode::None => "none",
                    NetworkMode::Cnci => "cnci",
                },
            );
            daemon.joins = Some(std::sync::Arc::new(joins));
        }
        let scheme = if self.api_cert.is_some() {
            "https"
        } else {
            "http"
        };
        let public_url = self
            .public_url
            .unwrap_or_else(|| format!("{scheme}://{}", self.api_listen))
            .trim_end_matches('/')
            .to_string();
        let api = ApiArgs {
            listen: self.api_listen,
            tls: self.api_cert.zip(self.api_key),
            public_url,
            admin_user: self.admin_user,
            admin_project: self.admin_project,
            admin_password_file: self.admin_password_file,
            token_ttl: self.token_ttl,
            default_quota: self.default_quota,
            floating_range: self.floating_range,
            login: crate::api::LoginLimits {
                per_user: self.login_attempts_per_user,
                per_source: self.login_attempts_per_source,
                ..crate::api::LoginLimits::default()
            },
            connections: crate::api::ConnectionLimits {
                per_source: self.api_connections_per_source,
                ..crate::api::ConnectionLimits::default()
            },
            image_listen: self.image_listen,
        };
        Ok((daemon, api))
    }
}

/// A share from 0 to 1.
fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?}: a share from 0 to 1 (0.01: one in a hundred)"
        )),
    }
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn default_quotas_parse_over_novas_defaults() {
        assert_eq!(
            parse_quota("instances=10,vcpus=20,memory_mb=51200"),
            Ok(ApiConfig::DEFAULT_QUOTA)
        );
        assert_eq!(
            parse_quota("instances=50, memory_mb=unlimited"),
            Ok(Quota {
                instances: Some(50),
                vcpus: Some(20),
                memory_mb: None,
            })
        );
        assert_eq!(parse_quota("unlimited"), Ok(Quota::default()));
        let parsed = |extra: &[&str]| {
            let mut argv = vec![
                "cumulo-controller",
                "--ca-cert=ca.pem",
                "--cert=c.pem",
                "--key=c.key",
                "--scheduler=127.0.0.1:8888",
                "--state-dir=state",
            ];
            argv.extend(extra);
            Args::try_parse_from(argv).unwrap().default_quota
        };
        assert_eq!(parsed(&[]), ApiConfig::DEFAULT_QUOTA);
        assert_eq!(parsed(&["--default-quota=unlimited"]), Quota::default());
        for bad in [
            "",
            "instances",
            "instances=-1",
            "instances=ten",
            "instances=5000000000",
            "disk=5",
            "unlimited,instances=1",
        ] {
            assert!(parse_quota(bad).is_err(), "{bad}");
        }
    }
}
