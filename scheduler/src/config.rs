//! The scheduler's command line (flags, or `CUMULO_SCHEDULER_*` environment variables), parsed
//! once and checked into a [`SchedulerConfig`].

use clap::Parser;
use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp::payload::ClusterConfig;
use ssntp_net::TlsIdentity;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use support::identity::{UuidLock, endpoint_uuid};
use support::units::{parse_positive_duration, parse_size};

use crate::SchedulerConfig;

/// cumulo-scheduler: the SSNTP server that places workloads and routes the cluster's frames.
#[derive(Debug, Parser)]
#[command(name = "cumulo-scheduler", version, args_override_self = true)]
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
    /// Agents' STATS interval, whole seconds (default: the configuration file's
    /// `stats_interval_s`, else 5s). A node that sends nothing at all, not even a HEARTBEAT, for
    /// three intervals is dropped; CONNECTED tells agents the interval.
    #[arg(long, env = "CUMULO_SCHEDULER_STATS_INTERVAL", value_parser = parse_positive_duration)]
    pub stats_interval: Option<Duration>,
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
    #[arg(
        long,
        env = "CUMULO_SCHEDULER_LOG_FORMAT",
        default_value = "text",
        value_enum
    )]
    pub log_format: support::LogFormat,
    /// Print one summary line a second.
    #[arg(long, env = "CUMULO_SCHEDULER_HEARTBEAT")]
    pub heartbeat: bool,
    /// A role's read budget, `ROLE=RATE[/BURST[/FRAME]]` in bytes (K, M, G: powers of 1,024)
    /// or `ROLE=off`, for agent, netagent, cnciagent or controller; repeat for several roles.
    /// Defaults: agent and netagent 16M/64M/512, cnciagent 1M/8M/512, controller off. A peer
    /// sending faster than its budget is read more slowly; nothing is dropped. A session with
    /// no budget is read up to 64 KiB at a time, one with a budget 16 KiB.
    #[arg(long, env = "CUMULO_SCHEDULER_READ_RATE", value_delimiter = ',', value_parser = parse_read_rate)]
    pub read_rate: Vec<String>,
    /// The cluster CA's revocation list (PEM or DER; `cumulo-cert revoke` and the controller
    /// make it): the certificates it revokes are refused, and their live sessions ended. Read
    /// again when the file changes (a list older than the one in force, or not the CA's, is
    /// refused and logged); a file not there yet is an empty list until it appears.
    #[arg(long, env = "CUMULO_SCHEDULER_CRL")]
    pub crl: Option<PathBuf>,
    /// How often the revocation list's file is looked at.
    #[arg(long, env = "CUMULO_SCHEDULER_CRL_RELOAD", default_value = "2s", value_parser = parse_positive_duration)]
    pub crl_reload: Duration,
}

/// Checks one `--read-rate` (applied in [`Args::into_config`]).
fn parse_read_rate(spec: &str) -> Result<String, ssntp_net::RateParseError> {
    ssntp_net::ReadRates::default().set(spec)?;
    Ok(spec.to_string())
}

/// Why the arguments do not make a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// TLS files.
    #[error("{0}")]
    Tls(#[from] ssntp_net::TlsError),
    /// The scheduler's UUID.
    #[error("{0}")]
    Identity(#[from] support::identity::IdentityError),
    /// The cluster configuration file.
    #[error("{path}: {detail}")]
    ClusterConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The STATS interval: not whole seconds, or the flag and the file disagree.
    #[error("{0}")]
    StatsInterval(String),
    /// A `--read-rate` that cannot be read.
    #[error("--read-rate: {0}")]
    ReadRate(#[from] ssntp_net::RateParseError),
    /// The revocation list.
    #[error("--crl: {0}")]
    Crl(#[from] ssntp_net::CrlError),
    /// The certificate lacks the role.
    #[error(
        "{0}: the certificate's roles ({1}) lack scheduler; make one with `cumulo-cert --role scheduler`"
    )]
    Role(PathBuf, Role),
}

/// The STATS interval when neither the flag nor the configuration file names one.
pub const DEFAULT_STATS_INTERVAL: Duration = Duration::from_secs(5);

/// The agents' STATS interval from `--stats-interval` (`flag`) and the configuration file's
/// `[scheduler] stats_interval_s` (`file`): either, the same when both, in whole seconds.
pub fn stats_interval(flag: Option<Duration>, file: Option<u32>) -> Result<Duration, ConfigError> {
    let interval = match (flag, file) {
        (Some(flag), Some(secs)) if flag != Duration::from_secs(u64::from(secs)) => {
            return Err(ConfigError::StatsInterval(format!(
                "--stats-interval {flag:?} and the configuration's stats_interval_s = {secs} disagree"
            )));
        }
        (Some(flag), _) => flag,
        (None, Some(secs)) => Duration::from_secs(u64::from(secs)),
        (None, None) => DEFAULT_STATS_INTERVAL,
    };
    match crate::whole_seconds(interval) {
        Some(_) => Ok(interval),
        None => Err(ConfigError::StatsInterval(format!(
            "the STATS interval ({interval:?}) must be a whole number of seconds, at least one (agents are told it in seconds)"
        ))),
    }
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
        let stats_interval = stats_interval(
            self.stats_interval,
            cluster.scheduler.as_ref().and_then(|s| s.stats_interval_s),
        )?;
        let handshake = HandshakeConfig {
            handshake_timeout: self.handshake_timeout,
            session: ssntp::session::SessionConfig {
                idle_timeout: self.idle_timeout,
                max_frame: self.max_frame,
            },
        };
        let mut read_rates = ssntp_net::ReadRates::default();
        for spec in &self.read_rate {
            read_rates.set(spec)?;
        }
        let crl = match &self.crl {
            None => None,
            Some(path) => {
                let file = ssntp_net::revocation::CrlFile::new(path, &self.ca_cert)?;
                // A file not there yet (the controller makes it when it starts) is an empty
                // list until it appears; a file that is there must be the CA's.
                let initial = if path.exists() {
                    file.load()?
                } else {
                    tracing::warn!(path = %path.display(), "no revocation list yet: nothing is revoked until it appears");
                    ssntp_net::RevocationList::default()
                };
                Some(crate::CrlWatch {
                    file,
                    initial,
                    every: self.crl_reload,
                })
            }
        };
        let config = SchedulerConfig {
            crl,
            read_rates,
            tls,
            uuid,
            stats_interval,
            handshake,
            cluster,
            heartbeat: self.heartbeat,
            conn: ssntp_net::ConnConfig::default(),
        };
        Ok((config, lock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_interval_comes_from_the_flag_or_the_file_in_whole_seconds() {
        let secs = Duration::from_secs;
        assert_eq!(stats_interval(None, None).unwrap(), secs(5));
        assert_eq!(stats_interval(Some(secs(2)), None).unwrap(), secs(2));
        assert_eq!(stats_interval(None, Some(7)).unwrap(), secs(7));
        assert_eq!(stats_interval(Some(secs(7)), Some(7)).unwrap(), secs(7));
        for (flag, file) in [
            (Some(secs(5)), Some(7)),
            (Some(Duration::from_millis(1500)), None),
            (Some(Duration::from_millis(500)), None),
            (None, Some(0)),
        ] {
            assert!(
                matches!(
                    stats_interval(flag, file),
                    Err(ConfigError::StatsInterval(_))
                ),
                "{flag:?} {file:?}"
            );
        }
    }

    #[test]
    fn a_revocation_list_is_loaded_at_start_and_a_bad_one_stops_it_with_the_cause() {
        let pki = testkit::TestPki::new();
        let dir = tempfile::tempdir().unwrap();
        let leaf = pki.leaf(Role::SCHEDULER, Some(ssntp::Uuid::from_bytes([5; 16])));
        let (ca, cert, key) = leaf.write(dir.path(), "scheduler");
        let crl = dir.path().join("crl.pem");
        let parse = |crl: &std::path::Path| {
            Args::try_parse_from([
                "cumulo-scheduler".as_ref(),
                "--ca-cert".as_ref(),
                ca.as_os_str(),
                "--cert".as_ref(),
                cert.as_os_str(),
                "--key".as_ref(),
                key.as_os_str(),
                "--crl".as_ref(),
                crl.as_os_str(),
            ])
            .unwrap()
            .into_config()
        };
        // Not there yet: nothing revoked until it appears.
        let (config, _lock) = parse(&crl).unwrap();
        assert!(config.crl.unwrap().initial.is_empty());
        std::fs::write(&crl, "junk").unwrap();
        let e = parse(&crl).unwrap_err().to_string();
        assert!(e.contains("PEM"), "{e}");
        let revoked = pki.leaf(Role::AGENT, None);
        std::fs::write(&crl, pki.crl(&[&revoked], 4)).unwrap();
        let (config, _lock) = parse(&crl).unwrap();
        let watch = config.crl.unwrap();
        assert_eq!(
            (watch.initial.len(), watch.initial.number()),
            (1, &[4u8][..])
        );
        assert_eq!(watch.every, Duration::from_secs(2));
        // Another CA's list is refused.
        let other = testkit::TestPki::new();
        std::fs::write(&crl, other.crl(&[], 1)).unwrap();
        let e = parse(&crl).unwrap_err().to_string();
        assert!(
            e.contains("not by the CA") || e.contains("signature"),
            "{e}"
        );
    }

    #[test]
    fn read_rates_are_given_per_role_and_bad_ones_are_refused_with_the_form() {
        let args = Args::try_parse_from([
            "cumulo-scheduler",
            "--ca-cert=a",
            "--cert=b",
            "--key=c",
            "--read-rate",
            "agent=1M/4M/256,cnciagent=off",
        ])
        .unwrap();
        assert_eq!(args.read_rate, ["agent=1M/4M/256", "cnciagent=off"]);
        for bad in ["agent", "agent=0", "wizard=1M", "agent=1Q"] {
            let e = Args::try_parse_from([
                "cumulo-scheduler",
                "--ca-cert=a",
                "--cert=b",
                "--key=c",
                "--read-rate",
                bad,
            ])
            .unwrap_err()
            .to_string();
            assert!(e.contains("--read-rate"), "{bad}: {e}");
        }
    }
}
