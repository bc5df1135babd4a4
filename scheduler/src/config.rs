//! The scheduler's command line (flags, or `CUMULO_SCHEDULER_*` environment variables), parsed
//! once and checked into a [`SchedulerConfig`].

use clap::Parser;
use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp::net::TlsIdentity;
use ssntp::net::identity::{UuidLock, endpoint_uuid};
use ssntp::payload::ClusterConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::SchedulerConfig;

/// A duration: `30s`, `500ms`, `2m`, `1h`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: not a duration (e.g. 30s, 500ms)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !(0.0..=1e9).contains(&secs) {
        return Err(format!("{s:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration that must not be zero (intervals and timeouts).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be more than zero")),
        d => Ok(d),
    }
}

/// A size in bytes: `1MiB`, `512KiB`, `16MiB`, or bare bytes.
pub fn parse_size(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: not a size (e.g. 1MiB)"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use KiB or MiB)")),
    };
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{s:?}: too large"))?;
    if bytes == 0 || bytes > u64::from(ssntp::frame::MAX_FRAME_CEILING) {
        return Err(format!("{s:?}: must be between 1 byte and 16MiB"));
    }
    Ok(bytes as u32)
}

/// cumulo-scheduler: the SSNTP server that places workloads and routes the cluster's frames.
#[derive(Debug, Parser)]
#[command(name = "cumulo-scheduler", version)]
pub struct Args {
    /// The cluster CA certificate (PEM).
    #[arg(long, env = "CUMULO_SCHEDULER_CA_CERT")]
    pub ca_cert: PathBuf,
    /// The scheduler's certificate (PEM, with the scheduler role).
    #[arg(long, env = "CUMULO_SCHEDULER_CERT")]
    pub cert: PathBuf,
    /// The scheduler's private key (PEM).
    #[arg(long, env = "CUMULO_SCHEDULER_KEY")]
    pub key: PathBuf,
    /// Where to listen for SSNTP.
    #[arg(long, env = "CUMULO_SCHEDULER_LISTEN", default_value = "0.0.0.0:8888")]
    pub listen: SocketAddr,
    /// Where to keep the scheduler's UUID when its certificate binds none.
    #[arg(long, env = "CUMULO_SCHEDULER_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The cluster configuration sent to every endpoint (TOML).
    #[arg(long, env = "CUMULO_SCHEDULER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Agents' STATS interval; a node silent for three is dropped.
    #[arg(long, env = "CUMULO_SCHEDULER_STATS_INTERVAL", default_value = "5s", value_parser = parse_positive_duration)]
    pub stats_interval: Duration,
    /// Close sessions silent for this long.
    #[arg(long, env = "CUMULO_SCHEDULER_IDLE_TIMEOUT", default_value = "30s", value_parser = parse_positive_duration)]
    pub idle_timeout: Duration,
    /// How long a client has to send CONNECT.
    #[arg(long, env = "CUMULO_SCHEDULER_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub handshake_timeout: Duration,
    /// The largest frame body accepted.
    #[arg(long, env = "CUMULO_SCHEDULER_MAX_FRAME", default_value = "1MiB", value_parser = parse_size)]
    pub max_frame: u32,
    /// Serve Prometheus metrics (plain HTTP) on this address.
    #[arg(long, env = "CUMULO_SCHEDULER_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Log format.
    #[arg(long, env = "CUMULO_SCHEDULER_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// Print one summary line a second.
    #[arg(long, env = "CUMULO_SCHEDULER_HEARTBEAT")]
    pub heartbeat: bool,
}

/// Why the arguments do not make a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// TLS files.
    #[error("{0}")]
    Tls(#[from] ssntp::net::TlsError),
    /// The scheduler's UUID.
    #[error("{0}")]
    Identity(#[from] ssntp::net::identity::IdentityError),
    /// The cluster configuration file.
    #[error("{path}: {detail}")]
    ClusterConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The certificate lacks the role.
    #[error(
        "{0}: the certificate's roles ({1}) lack scheduler; make one with `cumulo-cert --role scheduler`"
    )]
    Role(PathBuf, Role),
}

impl Args {
    /// Checks the arguments and loads what they name.
    pub fn into_config(self) -> Result<(SchedulerConfig, Option<UuidLock>), ConfigError> {
        let tls = TlsIdentity::load(&self.ca_cert, &self.cert, &self.key)?;
        let own = tls.own();
        if !own.roles.contains(Role::SCHEDULER) {
            return Err(ConfigError::Role(self.cert, own.roles));
        }
        let (uuid, lock) = endpoint_uuid(&own, self.state_dir.as_deref(), Role::SCHEDULER)?;
        let cluster = match &self.config {
            None => ClusterConfig::default(),
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| ConfigError::ClusterConfig {
                        path: path.clone(),
                        detail: e.to_string(),
                    })?;
                toml::from_str(&text).map_err(|e| ConfigError::ClusterConfig {
                    path: path.clone(),
                    detail: e.to_string().lines().next().unwrap_or_default().to_string(),
                })?
            }
        };
        let handshake = HandshakeConfig {
            handshake_timeout: self.handshake_timeout,
            session: ssntp::session::SessionConfig {
                idle_timeout: self.idle_timeout,
                max_frame: self.max_frame,
            },
        };
        let config = SchedulerConfig {
            tls,
            uuid,
            stats_interval: self.stats_interval,
            handshake,
            cluster,
            heartbeat: self.heartbeat,
            conn: ssntp::net::ConnConfig::default(),
        };
        Ok((config, lock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_positive_duration("0s").is_err());
        assert!(parse_positive_duration("0").is_err());
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("17MiB").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("1GiB").is_err());
    }
}
