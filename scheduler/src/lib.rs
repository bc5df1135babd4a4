//! cumulo-scheduler: the cluster's SSNTP server. It places START requests on compute nodes (and
//! CNCIs on network nodes), routes every other frame by role (PROTOCOL.md §8), tells controllers
//! about nodes, and drops nodes that fall silent: nothing at all, not even a HEARTBEAT, for three
//! STATS intervals. It keeps soft state only: after a restart it rebuilds everything from the
//! agents' reconnects and READYs.
//!
//! [`placement`] is pure; [`cluster`] is the owner's state machine (events in, actions out);
//! [`routes`] are the rules the SSNTP readers apply without the owner; [`run`] wires them to an
//! `ssntp_net::Server`. [`config`] parses the command line.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod config;
pub mod http;
pub mod metrics;
pub mod placement;
pub mod routes;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use ssntp::payload::{DeliveryFailureReason, NodeState};
use ssntp::{Role, Uuid};
use ssntp_net::Target;
use ssntp_net::{Server, ServerConfig, ServerError, ServerEvent, ServerHandle, TlsIdentity};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use cluster::{Action, Cluster};

/// How the scheduler runs.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// CA, certificate (with the SCHEDULER role) and key.
    pub tls: TlsIdentity,
    /// The scheduler's UUID (the one its certificate binds, when it binds one).
    pub uuid: Uuid,
    /// Agents' STATS interval, a whole number of seconds: a node that sends nothing at all
    /// (HEARTBEATs count) for [`cluster::DEAD_AFTER_INTERVALS`] of them is dropped. CONNECTED
    /// tells it in `cluster`'s `scheduler.stats_interval_s`, which it replaces.
    pub stats_interval: Duration,
    /// SSNTP limits.
    pub handshake: ssntp::handshake::HandshakeConfig,
    /// The cluster configuration sent in CONNECTED.
    pub cluster: ssntp::payload::ClusterConfig,
    /// Print one summary line a second.
    pub heartbeat: bool,
    /// Per-session queue limits (defaults of `ssntp_net::ConnConfig`).
    pub conn: ssntp_net::ConnConfig,
    /// Each role's read budget (defaults of `ssntp_net::ReadRates`).
    pub read_rates: ssntp_net::ReadRates,
    /// Revoked certificates, from a file read again when it changes (`--crl`).
    pub crl: Option<CrlWatch>,
}

/// The revocation list a scheduler refuses certificates by.
#[derive(Debug, Clone)]
pub struct CrlWatch {
    /// Where it is.
    pub file: ssntp_net::revocation::CrlFile,
    /// What it held at start.
    pub initial: ssntp_net::RevocationList,
    /// How often the file is looked at.
    pub every: Duration,
}

/// A snapshot for the heartbeat line and the metrics endpoint.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// The Prometheus exposition.
    pub metrics: String,
    /// One line: controllers, nodes by state, placements.
    pub line: String,
}

/// Why the scheduler cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The certificate lacks the SCHEDULER role.
    #[error(
        "the certificate's roles ({0}) lack scheduler: make one with `cumulo-cert --role scheduler`"
    )]
    NotAScheduler(Role),
    /// The STATS interval is not a whole number of seconds (CONNECTED tells it in seconds).
    #[error("the STATS interval ({0:?}) must be a whole number of seconds, at least one")]
    StatsInterval(Duration),
    /// The SSNTP server refused its configuration.
    #[error("{0}")]
    Server(#[from] ServerError),
}

/// `interval` in whole seconds, if it is one (and not zero).
pub fn whole_seconds(interval: Duration) -> Option<u32> {
    let secs = u32::try_from(interval.as_secs()).ok()?;
    (secs > 0 && interval.subsec_nanos() == 0).then_some(secs)
}

fn summarize(cluster: &Cluster, handle: &ServerHandle, queue_depth: usize) -> Summary {
    let sessions = handle.sessions();
    let count = |r: Role| {
        sessions
            .iter()
            .filter(|(_, role)| role.intersects(r))
            .count()
    };
    let by_role = [
        ("controller", count(Role::CONTROLLER)),
        ("agent", count(Role::AGENT)),
        ("netagent", count(Role::NETAGENT)),
        ("cnciagent", count(Role::CNCIAGENT)),
    ];
    let state = |s: Option<NodeState>| {
        cluster
            .placement()
            .nodes()
            .filter(|n| n.status == s)
            .count()
    };
    let by_state = [
        ("pending", state(None)),
        ("ready", state(Some(NodeState::Ready))),
        ("full", state(Some(NodeState::Full))),
        ("maintenance", state(Some(NodeState::Maintenance))),
        ("offline", state(Some(NodeState::Offline))),
    ];
    let m = &cluster.metrics;
    let line = format!(
        "controllers {} nodes {} (ready {} full {} maintenance {} offline {} pending {}) placements {} failures {}",
        by_role[0].1,
        cluster.placement().len(),
        by_state[1].1,
        by_state[2].1,
        by_state[3].1,
        by_state[4].1,
        by_state[0].1,
        m.placements(),
        m.failures(),
    );
    Summary {
        metrics: m.render(&by_role, &by_state, &handle.frame_counts(), queue_depth),
        line,
    }
}

/// How many other nodes a START that could not be delivered is tried on.
const START_RETRIES: u8 = 3;

fn apply(handle: &ServerHandle, cluster: &mut Cluster, actions: Vec<Action>) {
    let mut queue: std::collections::VecDeque<(Action, u8)> =
        actions.into_iter().map(|a| (a, 0)).collect();
    while let Some((action, tries)) = queue.pop_front() {
        let result = match &action {
            Action::Send { to, frame } => handle.send(*to, frame).map(|_| 1),
            Action::Forward { from, frame, to } => match (handle.forward(*from, frame, *to), to) {
                // The node did not take it (queue full, or it just left).
                (Ok(0), Target::Session(node)) => {
                    if frame.operand == ssntp::Operand::Start && tries < START_RETRIES {
                        let retry = cluster.start_undelivered(*from, *node, frame.clone());
                        queue.extend(retry.into_iter().map(|a| (a, tries + 1)));
                    } else {
                        let reason = DeliveryFailureReason::NodeUnavailable;
                        handle.delivery_failure(*from, frame, reason, Some(*node));
                    }
                    Ok(0)
                }
                (other, _) => other,
            },
            Action::Fail {
                to,
                frame,
                reason,
                target,
            } => {
                handle.delivery_failure(*to, frame, *reason, *target);
                Ok(1)
            }
            Action::Disconnect { uuid, generation } => {
                handle.disconnect_session(*uuid, *generation);
                Ok(1)
            }
            Action::Configure(config) => {
                handle.set_cluster((**config).clone());
                Ok(1)
            }
            Action::Replay { from, frame, to } => {
                handle.forward(*from, frame, Target::Session(*to))
            }
        };
        if let Err(e) = result {
            tracing::warn!(?action, error = %e, "not delivered");
        }
    }
}

/// One event from the server: the cluster's state changes, its actions are carried out.
fn handle_event(cluster: &mut Cluster, handle: &ServerHandle, event: ServerEvent, now: Instant) {
    let actions = match event {
        ServerEvent::Connected {
            uuid,
            role,
            generation,
        } => cluster.connected(uuid, role, generation, now),
        ServerEvent::Disconnected {
            uuid,
            role,
            generation,
        } => cluster.disconnected(uuid, role, generation),
        ServerEvent::Frames {
            uuid,
            role,
            messages,
            handled,
        } => {
            let actions = messages
                .into_iter()
                .flat_map(|m| cluster.message(uuid, role, m, now, handle))
                .collect();
            apply(handle, cluster, actions);
            // A node's first status: its NODE_CONNECTED is queued, its reader may go on.
            if let Some(handled) = handled {
                handled.done();
            }
            return;
        }
        // Not asked for (the scheduler's routes need messages), but taken as they come.
        ServerEvent::Views { uuid, role, frames } => frames
            .iter()
            .filter_map(|frame| frame.to_message().ok())
            .flat_map(|m| cluster.message(uuid, role, m, now, handle))
            .collect(),
    };
    apply(handle, cluster, actions);
}

/// The periodic check, after the events queued so far: a node whose frames wait in the queue
/// (the main task fell behind: a burst, a stall) is not taken for silent. Events queued while
/// this runs wait for the loop.
fn tick_after_queued(
    cluster: &mut Cluster,
    handle: &ServerHandle,
    events: &mut mpsc::Receiver<ServerEvent>,
    now: Instant,
) {
    for _ in 0..events.len() {
        match events.try_recv() {
            Ok(event) => handle_event(cluster, handle, event, now),
            Err(_) => break,
        }
    }
    let actions = cluster.tick(now, handle);
    apply(handle, cluster, actions);
}

/// Runs the scheduler on `listener` until `shutdown`. `summary` is refreshed every second.
pub async fn run(
    config: SchedulerConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
    summary: Arc<Mutex<Summary>>,
) -> Result<(), SchedulerError> {
    let roles = config.tls.own().roles;
    if !roles.contains(Role::SCHEDULER) {
        return Err(SchedulerError::NotAScheduler(roles));
    }
    let stats_interval_s = whole_seconds(config.stats_interval)
        .ok_or(SchedulerError::StatsInterval(config.stats_interval))?;
    let mut cluster = Cluster::new(config.uuid, stats_interval_s);
    let mut server_config = ServerConfig::new(config.tls.clone(), config.uuid);
    server_config.handshake = config.handshake;
    // Agents are told the interval the scheduler enforces.
    server_config.cluster = cluster.told(config.cluster.clone());
    server_config.conn = config.conn;
    server_config.read_rates = config.read_rates;
    server_config.routes = routes::routes();
    let revocations = config.crl.as_ref().map(|crl| {
        let r = ssntp_net::Revocations::new();
        r.set(crl.initial.clone());
        r
    });
    server_config.revocations = revocations.clone();
    let (server, handle, mut events) = Server::new(server_config)?;
    let server_task = tokio::spawn(server.run(listener, shutdown.clone()));
    if let (Some(crl), Some(revocations)) = (config.crl.clone(), revocations) {
        tokio::spawn(ssntp_net::revocation::watch(
            crl.file,
            revocations,
            handle.clone(),
            crl.every,
            shutdown.clone(),
        ));
    }
    // Once a second: the summary, and the dead-node check (intervals are whole seconds).
    let mut check = tokio::time::interval(Duration::from_secs(1));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            event = events.recv() => {
                let Some(event) = event else { break };
                let now = tokio::time::Instant::now().into_std();
                handle_event(&mut cluster, &handle, event, now);
            }
            _ = check.tick() => {
                let now = tokio::time::Instant::now().into_std();
                tick_after_queued(&mut cluster, &handle, &mut events, now);
                let s = summarize(&cluster, &handle, events.len());
                if config.heartbeat {
                    tracing::info!(target: "heartbeat", "{}", s.line);
                }
                *summary.lock().unwrap_or_else(|p| p.into_inner()) = s;
            }
        }
    }
    // Nobody reads events any more: readers waiting to hand one over end at once.
    drop(events);
    let _ = server_task.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::frame::Frame;
    use ssntp::payload::Payload;
    use ssntp::session::Message;

    #[tokio::test]
    async fn frames_queued_behind_a_stall_count_before_the_silence_check() {
        let pki = testkit::TestPki::new();
        let me = Uuid::from_bytes([0x5c; 16]);
        let config = ServerConfig::new(pki.identity(Role::SCHEDULER, Some(me)), me);
        let (_server, handle, _events) = Server::new(config).unwrap();
        let mut cluster = Cluster::new(me, 5);
        let dead_after = cluster.dead_after();
        let (quiet, busy) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let t0 = Instant::now();
        for node in [quiet, busy] {
            let connected = ServerEvent::Connected {
                uuid: node,
                role: Role::AGENT,
                generation: 0,
            };
            handle_event(&mut cluster, &handle, connected, t0);
        }
        // The busy node's HEARTBEAT came in time but waits in the queue: the main task stalled
        // past the dead-node timeout. The quiet node sent nothing.
        let (tx, mut events) = mpsc::channel(8);
        let heartbeat = Message {
            frame: Frame::new(busy, &Payload::Heartbeat),
            payload: Payload::Heartbeat,
        };
        tx.try_send(ServerEvent::Frames {
            uuid: busy,
            role: Role::AGENT,
            messages: vec![heartbeat],
            handled: None,
        })
        .unwrap();
        let late = t0 + dead_after + Duration::from_secs(1);
        tick_after_queued(&mut cluster, &handle, &mut events, late);
        let left: Vec<Uuid> = cluster.placement().nodes().map(|n| n.uuid).collect();
        assert_eq!(left, vec![busy], "only the silent node is dropped");
        assert_eq!(cluster.metrics.dead_nodes(), 1);
        assert!(events.is_empty());
    }
}
