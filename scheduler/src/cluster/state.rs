//! The [`Cluster`] itself: what it keeps of each node and controller, its construction, and what
//! it tells about itself (placement, controllers, configuration, dead time).

use ssntp::frame::Frame;
use ssntp::payload::{ClusterConfig, SchedulerConfig};
use ssntp::{Role, Uuid};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::groups::GroupMemory;
use crate::metrics::Metrics;
use crate::placement::Placement;

/// How many STATS intervals of silence (no frame at all, HEARTBEAT included) make a node lost.
pub const DEAD_AFTER_INTERVALS: u32 = 3;

/// What the scheduler knows of a node's session.
#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) role: Role,
    pub(super) last_seen: Instant,
    pub(super) generation: u64,
    /// Whether its first status (READY, FULL, MAINTENANCE or OFFLINE) came: only then is it
    /// placeable, and only then are controllers told of it (NODE_CONNECTED).
    pub(super) announced: bool,
    /// Its latest STATS, as received: a controller that connects late gets it after the node's
    /// NODE_CONNECTED, and has its figures without waiting a STATS interval.
    pub(super) stats: Option<Frame>,
}

/// The cluster as the scheduler sees it: soft state, rebuilt from the agents after a restart.
#[derive(Debug)]
pub struct Cluster {
    pub(super) uuid: Uuid,
    pub(super) placement: Placement,
    /// Connected controllers, in connection order, with their session generation.
    pub(super) controllers: Vec<(Uuid, u64)>,
    pub(super) nodes: HashMap<Uuid, Session>,
    /// The agents' STATS interval, in whole seconds: what CONNECTED tells them.
    pub(super) stats_interval_s: u32,
    /// [`DEAD_AFTER_INTERVALS`] STATS intervals.
    pub(super) dead_after: Duration,
    pub(super) config: ClusterConfig,
    /// Where members of server groups were placed lately.
    pub(super) groups: GroupMemory,
    /// Counters for the metrics endpoint and the heartbeat line.
    pub metrics: Metrics,
}

impl Cluster {
    /// An empty cluster for the scheduler `uuid`, whose agents send STATS every
    /// `stats_interval_s` seconds: a node that sends nothing for [`DEAD_AFTER_INTERVALS`] of them
    /// is dropped.
    pub fn new(uuid: Uuid, stats_interval_s: u32) -> Cluster {
        Cluster {
            uuid,
            placement: Placement::new(),
            controllers: Vec::new(),
            nodes: HashMap::new(),
            stats_interval_s,
            dead_after: Duration::from_secs(u64::from(stats_interval_s)) * DEAD_AFTER_INTERVALS,
            config: ClusterConfig::default(),
            groups: GroupMemory::default(),
            metrics: Metrics::default(),
        }
    }

    /// The placement state (for inspection).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Connected controllers, in connection order.
    pub fn controllers(&self) -> Vec<Uuid> {
        self.controllers.iter().map(|(c, _)| *c).collect()
    }

    /// The last cluster configuration a controller sent (CONFIGURE), its `scheduler` section the
    /// scheduler's own.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// How long a node may send nothing at all before it is dropped.
    pub fn dead_after(&self) -> Duration {
        self.dead_after
    }

    /// `config` with the scheduler's own STATS interval: what the scheduler enforces is what
    /// CONNECTED tells the agents, whatever a configuration asked.
    pub fn told(&self, mut config: ClusterConfig) -> ClusterConfig {
        let own = self.stats_interval_s;
        let section = config
            .scheduler
            .get_or_insert_with(SchedulerConfig::default);
        if let Some(asked) = section.stats_interval_s
            && asked != own
        {
            tracing::warn!(
                "a configuration asked for STATS every {asked} s; the scheduler keeps {own} s (fixed at its start)"
            );
        }
        section.stats_interval_s = Some(own);
        config
    }
}
