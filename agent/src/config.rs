//! The core's configuration: node identity, where host figures come from, the state
//! directory, reporting intervals, the admission watermarks and the queue bounds.
//!
//! The binary builds one from its flags (`--state-dir`, `--stats-interval`,
//! `--disk-limit/--no-disk-limit`, `--mem-limit/--no-mem-limit`), validates it once and passes
//! it down.

use std::path::PathBuf;
use std::time::Duration;
use uuid::Uuid;

use crate::host::HostSource;
use crate::model::NodeAddress;

/// A configuration the core cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The stats interval is zero.
    #[error("the stats interval must be longer than zero")]
    ZeroStatsInterval,
    /// A queue bound is zero.
    #[error("the {0} queue must hold at least one command")]
    ZeroQueue(&'static str),
    /// A watermark refuses START above the level it reports FULL at.
    #[error("{0}: the refuse watermark must not be above the full watermark")]
    Watermarks(&'static str),
    /// The host name is empty.
    #[error("the host name is empty")]
    NoHostname,
}

/// One resource's watermarks.
///
/// The node reports FULL while what is available is below `full_below`, and refuses a START
/// (`full_cn`) that would leave less than `refuse_below`. Keeping `refuse_below` under
/// `full_below` gives hysteresis: the scheduler stops placing on a FULL node before the node
/// has to refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// Whether the limit applies at all (`--no-mem-limit` and friends turn it off).
    pub enabled: bool,
    /// Report FULL below this much available.
    pub full_below: u64,
    /// Refuse a START that would leave less than this.
    pub refuse_below: u64,
}

/// The three resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory, MiB (defaults: FULL below 1,000, refuse below 512, as ciao did).
    pub mem: Limit,
    /// Disk, MiB (defaults: FULL below 8,000, refuse below 4,000; ciao used ten times more).
    pub disk: Limit,
    /// vCPUs not reserved (defaults: FULL when none is left, refuse a START that needs more
    /// than are left). Raise the configured vCPU count to overcommit.
    pub vcpus: Limit,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            mem: Limit {
                enabled: true,
                full_below: 1_000,
                refuse_below: 512,
            },
            // ciao used 80,000 / 40,000 MB, which marks a developer's machine with 58 GB free
            // FULL; 8 GB / 4 GB keeps the same hysteresis at a scale small hosts have.
            disk: Limit {
                enabled: true,
                full_below: 8_000,
                refuse_below: 4_000,
            },
            vcpus: Limit {
                enabled: true,
                full_below: 1,
                refuse_below: 0,
            },
        }
    }
}

/// Everything the core needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The node's UUID (its SSNTP UUID, bound in its certificate).
    pub node: Uuid,
    /// The node's host name.
    pub hostname: String,
    /// The node's availability zone (`None`: the default one).
    pub zone: Option<String>,
    /// The node's network interfaces, as reported.
    pub networks: Vec<NodeAddress>,
    /// Where memory, disk and vCPU figures come from.
    pub host: HostSource,
    /// Override of the host's vCPU count (to overcommit, or to pin a figure); `None` uses the
    /// host's.
    pub vcpus: Option<u32>,
    /// Where instance records and the maintenance flag live.
    pub state_dir: PathBuf,
    /// How often the node's status and stats are reported.
    pub stats_interval: Duration,
    /// The shortest time between two stats reports made because an instance changed state
    /// (changes within it are coalesced into one report).
    pub change_report_gap: Duration,
    /// The admission watermarks.
    pub limits: Limits,
    /// At most this many instances (FULL at it, START refused past it).
    pub max_instances: u32,
    /// Bound of the core's command queue (a full queue makes commands fail with `Busy`).
    pub command_queue: usize,
    /// Bound of each instance's command queue.
    pub instance_queue: usize,
}

impl Config {
    /// A configuration with the defaults: stats every 5 s, change reports at most every 50 ms,
    /// ciao's watermarks, 4,096 instances, queues of 1,024 commands (core) and 4 (instance).
    pub fn new(
        node: Uuid,
        hostname: impl Into<String>,
        host: HostSource,
        state_dir: PathBuf,
    ) -> Config {
        Config {
            node,
            hostname: hostname.into(),
            zone: None,
            networks: Vec::new(),
            host,
            vcpus: None,
            state_dir,
            stats_interval: Duration::from_secs(5),
            change_report_gap: Duration::from_millis(50),
            limits: Limits::default(),
            max_instances: 4_096,
            command_queue: 1_024,
            instance_queue: 4,
        }
    }

    /// Checks the configuration once, before the core starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.stats_interval.is_zero() {
            return Err(ConfigError::ZeroStatsInterval);
        }
        if self.command_queue == 0 {
            return Err(ConfigError::ZeroQueue("command"));
        }
        if self.instance_queue == 0 {
            return Err(ConfigError::ZeroQueue("instance"));
        }
        if self.hostname.is_empty() {
            return Err(ConfigError::NoHostname);
        }
        for (name, limit) in [
            ("memory", self.limits.mem),
            ("disk", self.limits.disk),
            ("vcpus", self.limits.vcpus),
        ] {
            if limit.refuse_below > limit.full_below {
                return Err(ConfigError::Watermarks(name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::HostFigures;

    fn config() -> Config {
        let host = HostSource::Fixed(HostFigures {
            mem_total_mb: 1,
            mem_available_mb: 1,
            disk_total_mb: 1,
            disk_available_mb: 1,
            vcpus: 1,
            load: 0,
        });
        Config::new(Uuid::nil(), "node", host, PathBuf::from("/nonexistent"))
    }

    #[test]
    fn defaults_validate() {
        assert_eq!(config().validate(), Ok(()));
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut c = config();
        c.stats_interval = Duration::ZERO;
        assert_eq!(c.validate(), Err(ConfigError::ZeroStatsInterval));
        let mut c = config();
        c.instance_queue = 0;
        assert_eq!(c.validate(), Err(ConfigError::ZeroQueue("instance")));
        let mut c = config();
        c.limits.disk.refuse_below = c.limits.disk.full_below + 1;
        assert_eq!(c.validate(), Err(ConfigError::Watermarks("disk")));
        let mut c = config();
        c.hostname.clear();
        assert_eq!(c.validate(), Err(ConfigError::NoHostname));
    }
}
