//! The engine: the controller's side of the cluster. It implements [`Cluster`] for the REST API
//! (launch, stop, start, reboot, delete, nodes, evacuate, restore) by writing the store and sending
//! SSNTP frames to the scheduler, and it drives the instance state machine from what the
//! scheduler forwards (STATS, INSTANCE_STOPPED/DELETED, START_FAILURE, NODE_*, CNCI events).
//!
//! The engine is synchronous and owns no task: [`run()`] drives it from an SSNTP client's events and
//! a sweep timer; tests drive it directly with a recording [`Outbound`] and explicit times.
//!
//! Instance states (the store's [`InstanceState`]):
//! - `pending`: created, START sent (or waiting for the subnet's CNCI); → `active` when a STATS
//!   lists it active; → `error` on a fatal START_FAILURE.
//! - `active` → `stopping` (stop/reboot: DELETE with `stop`) → `exited` on INSTANCE_STOPPED (a
//!   reboot or a start sends START again, `restart` set, possibly to another node).
//! - any → `deleted` (DELETE sent) → the record goes on INSTANCE_DELETED (or a DELETE_FAILURE
//!   `no_instance`, or a STATS of its node without it); → `hung` when not confirmed within
//!   [`EngineConfig::confirm_timeout`].
//! - `active`/`pending`/`stopping` → `missing` when its node disconnects (or it vanishes from its
//!   node's STATS); → `active` again when its node reports it running. Instances of ephemeral
//!   workloads start again elsewhere instead, on an evacuation too (module `relocate`).
//! - `active`/`exited` → `rebuilding` (DELETE, then a START pinned to its node) → `active`
//!   (module `rebuild`); `exited` → `resized` → `exited` (a resize, confirmed or reverted: no frame,
//!   [`crate::resize`]).
//!
//! Instances that a node reports and the store does not know are reported as events once, never
//! adopted or killed, unless this engine removed their record (deleted by the user): those get
//! a DELETE, since their START reached the node after the controller had given it up.
//!
//! Volumes attached to instances: ATTACH_VOLUME / DETACH_VOLUME out, settled by the nodes' STATS
//! or undone by their failures (module `volumes`); instances that boot from a volume, and the
//! volumes that go with their instances (module `boot`).
//!
//! What arrives with its origin (the driver's frames) is checked against it (module `origin`):
//! a node changes only its own instances, a CNCI only itself; what claims more is refused,
//! logged and counted ([`Engine::reports_refused`]).

mod boot;
mod cnci;
pub mod console;
pub mod fault;
pub mod firewall;
mod inbound;
mod launch;
pub mod offhost;
mod origin;
mod public_ip;
mod rebuild;
mod relocate;
mod requests;
pub mod run;
pub mod schedulers;
mod start;
mod stats;
mod sweep;
mod traces;
mod volumes;

impl Engine {
    /// Sends an INSTANCE_ACTION to the instance's node when its state allows the action; the
    /// instance's new state comes with its node's next STATS.
    fn instance_action(
        &self,
        current: Instance,
        action: InstanceAction,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        let operation = match action {
            InstanceAction::Reboot | InstanceAction::RebootHard => "reboot",
            InstanceAction::Pause => "pause",
            InstanceAction::Unpause => "unpause",
            InstanceAction::Suspend => "suspend",
            InstanceAction::Resume => "resume",
            InstanceAction::Other => {
                return Err(ClusterError::Invalid("an unknown action".into()));
            }
        };
        let node = match current.node {
            Some(node) if action_allowed(action, &current.state) => node,
            _ => return Err(invalid(&current, operation)),
        };
        self.require_connected()?;
        let kind = ActionKind::of_instance_action(action)
            .ok_or_else(|| ClusterError::Invalid("an unknown action".into()))?;
        let ticket = self.begin_action(current.id, kind, by);
        let sent = self.send(&Payload::InstanceAction(InstanceActionCommand {
            instance_uuid: current.id,
            workload_agent_uuid: node,
            action,
        }));
        self.finish_action(&ticket, &sent);
        sent?;
        self.event(
            Some(current.tenant),
            EventKind::Info,
            format!("instance {}: {operation} sent to node {node}", current.id),
        );
        Ok(current)
    }

    fn reboot_instance(
        &self,
        scope: Scope,
        current: Instance,
        action: InstanceAction,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        if let Some(host) = self.remote_of(&current)? {
            return self.off_host_change(
                scope,
                &current,
                &host,
                offhost::Step {
                    to: InstanceState::Stopping,
                    from: |s| matches!(s, InstanceState::Active | InstanceState::Exited),
                    action: ActionKind::Reboot,
                    queue: &[(OperationKind::Stop, false), (OperationKind::Start, true)],
                },
                by,
            );
        }
        self.instance_action(current, action, by)
    }
}

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use ssntp::Payload;
use ssntp::payload::{Delete, InstanceAction as InstanceActionCommand, NodeCommand};
use uuid::Uuid;

use crate::actions::{self, ActionKind, ActionTicket};
use crate::cluster::{
    BootVolume, Caller, Cluster, ClusterError, InstanceAction, Launch, Node, NodeStatus, Rebuild,
    ResizeStep, Trace, TraceLabel, action_allowed,
};
use store::{
    EventKind, Flavor, Instance, InstanceChange, InstanceFilter, InstanceState, NewEvent,
    OperationKind, Page, Scope, Store, StoreError,
};

pub use run::run;
pub use schedulers::{Schedulers, Verdict};

/// How tenant instances are networked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TenantNetwork {
    /// No tenant network: STARTs carry no networking (addresses are still allocated and shown).
    #[default]
    None,
    /// One CNCI per tenant subnet, launched on a network node before the subnet's instances.
    Cnci,
}

/// The port agents serve their console endpoint on unless told otherwise (`cumulo-agent
/// --console-listen`'s default).
pub const DEFAULT_CONSOLE_PORT: u16 = 8890;

/// The engine's settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The controller's SSNTP UUID.
    pub uuid: Uuid,
    /// How tenant instances are networked.
    pub tenant_network: TenantNetwork,
    /// The image CNCIs boot from.
    pub cnci_image: String,
    /// How long a DELETE or a stop may go unconfirmed before the instance is `hung` (`missing`
    /// for a stop), and a START before it is `error` (`start_lost`): counted on what the engine
    /// has applied of its schedulers' frames ([`Engine::sweep_heard`]).
    pub confirm_timeout: Duration,
    /// How long a launched CNCI may take to announce itself before it counts as failed; until
    /// then a START refused for want of room (`full_cloud`, `no_net_cn`) is sent again.
    pub cnci_timeout: Duration,
    /// How long a CNCI stays after the last instance of its subnet went.
    pub cnci_linger: Duration,
    /// How many frame traces are kept.
    pub traces: usize,
    /// The share of launched instances whose START is traced without being asked (0 to 1;
    /// label `sampled`).
    pub trace_sample: f64,
    /// The OTLP/HTTP collector the collected traces are exported to, if any.
    pub otlp: Option<crate::otlp::Endpoint>,
    /// The port of the agents' console endpoint ([`console`]).
    pub console_port: u16,
    /// The identity console logs are fetched with (the controller's certificate); `None`: they
    /// are not fetched.
    pub console_tls: Option<ssntp_net::TlsIdentity>,
    /// What issues each CNCI its own certificate, sent in its START ([`crate::cnci_creds`]);
    /// `None`: CNCI STARTs carry none (their network node's `--cnci-cert` serves them).
    pub cnci_creds: Option<std::sync::Arc<crate::cnci_creds::CnciIssuer>>,
}

impl EngineConfig {
    /// The defaults for a controller with this UUID.
    pub fn new(uuid: Uuid) -> EngineConfig {
        EngineConfig {
            uuid,
            tenant_network: TenantNetwork::None,
            cnci_image: "cnci".into(),
            confirm_timeout: Duration::from_secs(60),
            cnci_timeout: Duration::from_secs(120),
            cnci_linger: Duration::from_secs(60),
            traces: 1000,
            trace_sample: 0.0,
            otlp: None,
            console_port: DEFAULT_CONSOLE_PORT,
            console_tls: None,
            cnci_creds: None,
        }
    }
}

/// Why a frame could not be queued for the scheduler: the SSNTP driver's own typed error (no
/// session, the session's queue full, a frame over the size limit), not a string.
pub use ssntp_net::SendError as SendFailure;

/// Where the engine's frames go: the SSNTP client's current session with the scheduler.
pub trait Outbound: Send + Sync {
    /// Queues a frame, without waiting.
    fn send(&self, payload: &Payload) -> Result<(), SendFailure>;
    /// Queues a traced frame (PROTOCOL.md §6: its trace block's first hop is ours), without
    /// waiting. An outbound that cannot trace sends it untraced.
    fn send_traced(&self, payload: &Payload, label: &str) -> Result<(), SendFailure> {
        let _ = label;
        self.send(payload)
    }
    /// Whether a session with the scheduler is up.
    fn connected(&self) -> bool;
}

impl Outbound for ssntp_net::client::ClientHandle {
    fn send(&self, payload: &Payload) -> Result<(), SendFailure> {
        self.send_payload(payload)
    }

    fn send_traced(&self, payload: &Payload, label: &str) -> Result<(), SendFailure> {
        ssntp_net::client::ClientHandle::send_traced(self, payload, label)
    }

    fn connected(&self) -> bool {
        self.is_connected()
    }
}

/// What the engine keeps in memory (rebuilt after a restart from the store and from what the
/// scheduler sends).
#[derive(Default)]
struct State {
    nodes: BTreeMap<Uuid, Node>,
    /// Instances whose START is to be traced, with the trace's label (taken when it goes).
    traced: HashMap<Uuid, TraceLabel>,
    /// What each node's STATS said over the last hour.
    history: HashMap<Uuid, crate::history::History>,
    /// Instances waiting for a confirmation (DELETE or stop), since when.
    unconfirmed: HashMap<Uuid, SystemTime>,
    /// When this engine last sent each deleted instance's DELETE (to send it again, at most
    /// every [`DELETE_RESEND`], while its node still reports it).
    delete_sent: HashMap<Uuid, SystemTime>,
    /// Pending instances whose START went to the scheduler, since when: one that no node has
    /// reported within [`EngineConfig::confirm_timeout`] was lost (a scheduler or an agent that
    /// died with it) and becomes an `error` (`start_lost`).
    dispatched: HashMap<Uuid, SystemTime>,
    /// (node, instance) pairs already reported as unknown.
    strangers: HashSet<(Uuid, Uuid)>,
    /// Instances whose record this engine removed (deleted by the user). A node that reports
    /// one of them later gets its DELETE: a START that no node had reported when the record
    /// went (its delete was forgotten after the confirmation timeout, or it was deleted in
    /// `error` `start_lost`) may still have reached an agent, which then runs a VM that no
    /// record stands for.
    deleted: HashSet<Uuid>,
    /// Subnets (by id) whose last instance went, since when: their CNCI goes after the linger.
    idle_subnets: HashMap<Uuid, SystemTime>,
    /// CNCIs whose START met a cluster with no room for them yet, by CNCI id.
    cnci_retries: HashMap<Uuid, cnci::Retry>,
    /// Ephemeral instances moved off a node that may still hold a stale copy, by instance: that
    /// node (see [`relocate`]).
    relocated: HashMap<Uuid, Uuid>,
    /// Moved instances waiting for their evacuated node's STATS in maintenance.
    deferred: relocate::Deferred,
    /// Rebuilding instances whose START went (see [`rebuild`]).
    rebuild_started: HashSet<Uuid>,
    traces: VecDeque<Trace>,
    /// The schedulers whose sessions opened: the origins of their own frames.
    schedulers: HashSet<Uuid>,
    /// Instances whose START went again after the scheduler that took it was lost (see
    /// [`schedulers`]): a second node that reports one holds a copy to delete.
    resent: HashSet<Uuid>,
    /// Reports refused for claiming what is not their sender's, by frame (see [`origin`]).
    refused: HashMap<&'static str, u64>,
    /// How long the oldest frames waiting for the engine had waited at the last sweep (see
    /// [`Engine::sweep_heard`]).
    behind: Duration,
    /// Floating IPs on their CNCIs (see [`public_ip`]).
    public_ips: public_ip::PublicIps,
    /// Volumes being attached or detached, by volume (see [`volumes`]).
    volume_ops: volumes::Ops,
    /// When the store's volumes were last read for those (see [`volumes`]).
    volume_scan: Option<SystemTime>,
    /// Boot volumes whose node is not known yet, with their instance (see [`boot`]).
    boot_unplaced: HashMap<Uuid, Uuid>,
    /// Volumes going with their instance (`deleting`) whose file is still to be removed (see
    /// [`boot`]).
    volumes_going: HashSet<Uuid>,
}

/// At most this many unknown instances are remembered (then the set starts again).
const MAX_STRANGERS: usize = 100_000;
/// At most this many removed instances are remembered (then the set starts again).
const MAX_DELETED: usize = 100_000;
/// Most traces a TRACE_REPORT gives that are kept.
const TRACE_FRAMES: usize = 64;
/// Most hops of a trace that are kept (a frame has two or three).
const TRACE_HOPS: usize = 16;
/// Most STARTs waiting to go traced at once (a launch past it sends the rest untraced).
const TRACED_MAX: usize = 10_000;
/// The reason of an instance in `error` because its START was lost.
pub const START_LOST: &str = "start_lost";
/// How long a DELETE may go unanswered before a node that still reports the instance gets it
/// again (it was lost with a scheduler, a controller or a connection that died).
const DELETE_RESEND: Duration = Duration::from_secs(10);
/// Retries of a compare-and-swap update that lost a race.
const CAS_RETRIES: usize = 8;

/// The engine. See the module docs.
pub struct Engine {
    store: Arc<dyn Store>,
    out: Arc<dyn Outbound>,
    config: EngineConfig,
    state: Mutex<State>,
    /// Why the controller stopped for good (its SSNTP client gave up, its API failed): set once,
    /// read by the health check and by the daemon, which then exits non-zero.
    gone: std::sync::OnceLock<String>,
    /// Port firewalls given to nodes (see [`firewall`]).
    firewalls: firewall::Firewalls,
    /// Held while an attach picks its device (see [`volumes`]).
    volume_lock: Mutex<()>,
    /// Where collected traces are exported too (OTLP), when set.
    otlp: std::sync::OnceLock<crate::otlp::Exporter>,
    /// The nodes an admin disabled, sorted: every START of a new instance avoids them. Read from
    /// the store when the engine starts and at each sweep (another controller may change them),
    /// and changed at once by this engine's own disable and enable.
    disabled: Mutex<Vec<Uuid>>,
}

impl Engine {
    /// Exports the traces collected from now on with `exporter` too (set once).
    pub fn export_traces(&self, exporter: crate::otlp::Exporter) {
        let _ = self.otlp.set(exporter);
    }

    /// Marks the controller as stopped for good, for `reason` (the first reason stays): the
    /// health check fails from now on, and the daemon exits with it.
    pub fn give_up(&self, reason: String) {
        tracing::error!("{reason}");
        let _ = self.gone.set(reason);
    }

    /// An engine over `store`, sending through `out`. Instances left waiting for a confirmation
    /// by a previous run get their timer started anew.
    pub fn new(
        store: Arc<dyn Store>,
        out: Arc<dyn Outbound>,
        config: EngineConfig,
    ) -> Result<Engine, StoreError> {
        let engine = Engine {
            store,
            out,
            config,
            state: Mutex::new(State::default()),
            gone: std::sync::OnceLock::new(),
            firewalls: firewall::Firewalls::default(),
            volume_lock: Mutex::new(()),
            otlp: std::sync::OnceLock::new(),
            disabled: Mutex::new(Vec::new()),
        };
        engine.refresh_disabled()?;
        let now = SystemTime::now();
        let mut waiting = Vec::new();
        let mut unplaced = Vec::new();
        engine.for_each_instance(Scope::All, InstanceFilter::default(), |i| {
            if matches!(i.state, InstanceState::Deleted | InstanceState::Stopping) {
                waiting.push(i.id);
            }
            if i.state == InstanceState::Pending && i.node.is_none() {
                unplaced.push(i.id);
            }
        })?;
        {
            let mut state = engine.state();
            state
                .unconfirmed
                .extend(waiting.into_iter().map(|id| (id, now)));
            state
                .dispatched
                .extend(unplaced.into_iter().map(|id| (id, now)));
        }
        engine.scan_volumes(now)?;
        Ok(engine)
    }

    /// The store the engine writes.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// How many instances of `flavor` the connected compute nodes could hold at all
    /// ([`crate::capacity`]); `None` when not known.
    fn node_capacity(&self, flavor: &Flavor) -> Option<u64> {
        let state = self.state();
        let nodes: Vec<&Node> = state.nodes.values().collect();
        crate::capacity::capacity(&nodes, flavor)
    }

    /// How many STARTs await a node's report (tests).
    #[cfg(test)]
    pub(crate) fn dispatched_count(&self) -> usize {
        self.state().dispatched.len()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `f` for every instance visible in `scope` that matches `filter`, a page at a time.
    fn for_each_instance(
        &self,
        scope: Scope,
        filter: InstanceFilter,
        mut f: impl FnMut(&Instance),
    ) -> Result<(), StoreError> {
        let mut page = Page::first(Page::MAX_LIMIT);
        loop {
            let paged = self.store.instances(scope, filter, page)?;
            paged.items.iter().for_each(&mut f);
            match paged.next {
                Some(marker) => page.marker = Some(marker),
                None => return Ok(()),
            }
        }
    }

    /// Reads an instance, asks `decide` what to change, and writes the change if its version
    /// did not move meanwhile (reading again and asking again if it did). `Ok(None)`: `decide`
    /// wanted no change.
    fn transition<T>(
        &self,
        scope: Scope,
        id: Uuid,
        mut decide: impl FnMut(&Instance) -> Result<Option<(InstanceChange, T)>, ClusterError>,
    ) -> Result<Option<(Instance, T)>, ClusterError> {
        for _ in 0..CAS_RETRIES {
            let current = self.store.instance(scope, id)?;
            let Some((change, extra)) = decide(&current)? else {
                return Ok(None);
            };
            match self
                .store
                .update_instance(scope, id, current.version, change)
            {
                Ok(updated) => return Ok(Some((updated, extra))),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Conflict(format!("instance {id} keeps changing")).into())
    }

    /// Sets an instance's state if `still` holds for the record as it is when written (checked
    /// again under the compare-and-swap): a change decided on an older read (a node that left,
    /// a timer) never overwrites what happened meanwhile (a DELETE, a STATS).
    fn set_state_if(
        &self,
        id: Uuid,
        state: InstanceState,
        still: impl Fn(&Instance) -> bool,
    ) -> Result<Option<Instance>, ClusterError> {
        let changed = self.transition(Scope::All, id, |i| {
            Ok(still(i).then(|| {
                (
                    InstanceChange {
                        state: Some(state.clone()),
                        fault: error_fault(&state),
                        ..InstanceChange::default()
                    },
                    (),
                )
            }))
        });
        match changed {
            Ok(changed) => Ok(changed.map(|(i, ())| i)),
            Err(ClusterError::Store(StoreError::NotFound { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets an instance's state (and node, when given), whatever it was.
    fn set_state(
        &self,
        id: Uuid,
        state: InstanceState,
        node: Option<Option<Uuid>>,
    ) -> Result<Option<Instance>, ClusterError> {
        Ok(self
            .transition(Scope::All, id, |_| {
                Ok(Some((
                    InstanceChange {
                        state: Some(state.clone()),
                        node,
                        fault: error_fault(&state),
                        ..InstanceChange::default()
                    },
                    (),
                )))
            })?
            .map(|(i, ())| i))
    }

    /// Records an event, logging (not failing) if the store refuses.
    fn event(&self, tenant: Option<Uuid>, kind: EventKind, message: String) {
        match kind {
            EventKind::Info => tracing::info!(tenant = ?tenant, "{message}"),
            EventKind::Warning => tracing::warn!(tenant = ?tenant, "{message}"),
            EventKind::Error => tracing::error!(tenant = ?tenant, "{message}"),
        }
        if let Err(e) = self.store.append_event(NewEvent {
            tenant,
            kind,
            message,
        }) {
            tracing::error!("cannot record an event: {e}");
        }
    }

    fn send(&self, payload: &Payload) -> Result<(), ClusterError> {
        self.out
            .send(payload)
            .map_err(|e| ClusterError::Unavailable(format!("scheduler: {e}")))
    }

    fn require_connected(&self) -> Result<(), ClusterError> {
        if self.out.connected() {
            Ok(())
        } else {
            Err(ClusterError::Unavailable(
                "the controller is not connected to the scheduler".into(),
            ))
        }
    }

    fn send_delete(&self, instance: Uuid, node: Uuid, stop: bool) -> Result<(), ClusterError> {
        self.send(&Payload::Delete(Delete {
            instance_uuid: instance,
            workload_agent_uuid: node,
            stop,
        }))?;
        if !stop {
            self.state().delete_sent.insert(instance, SystemTime::now());
        }
        Ok(())
    }

    /// Whether a deleted instance that its node still reports should get its DELETE again:
    /// none was sent by this engine (a restart, or the scheduler was down), or the last one is
    /// older than [`DELETE_RESEND`].
    fn delete_due(&self, instance: Uuid, now: SystemTime) -> bool {
        self.state()
            .delete_sent
            .get(&instance)
            .is_none_or(|sent| now.duration_since(*sent).unwrap_or_default() >= DELETE_RESEND)
    }

    fn wait_confirmation(&self, id: Uuid) {
        self.state().unconfirmed.insert(id, SystemTime::now());
    }

    /// Removes an instance's record (its delete is confirmed, or it never ran).
    fn forget(&self, instance: &Instance) -> Result<(), ClusterError> {
        {
            let mut state = self.state();
            state.unconfirmed.remove(&instance.id);
            state.delete_sent.remove(&instance.id);
            state.dispatched.remove(&instance.id);
            state.resent.remove(&instance.id);
            if state.deleted.len() >= MAX_DELETED {
                state.deleted.clear();
            }
            state.deleted.insert(instance.id);
        }
        match self.store.delete_instance(Scope::All, instance.id) {
            Ok(()) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.subnet_maybe_idle(instance);
        self.release_volumes(instance, crate::volumes::Release::Gone);
        self.public_ips_instance_gone(instance.id, instance.tenant);
        self.firewalls_instance_gone(instance.id, instance.tenant);
        Ok(())
    }

    /// Records that `by` asked `kind` of `instance`, in a new request, with the controller's
    /// event started: call it once the instance's state allows the operation and before its
    /// command goes out, then [`Engine::finish_action`] with how handing the command on went.
    /// Never fails (a store error is logged); see [`crate::actions`] for the rule.
    pub fn begin_action(&self, instance: Uuid, kind: ActionKind, by: &Caller) -> ActionTicket {
        actions::begin(
            self.store.as_ref(),
            &actions::request_id_of(by),
            instance,
            kind,
            by,
        )
    }

    /// Finishes the controller's event of a begun action: `Success` if `result` is `Ok`, else
    /// `Error` with the error's text.
    pub fn finish_action<T>(&self, ticket: &ActionTicket, result: &Result<T, ClusterError>) {
        actions::finish(self.store.as_ref(), ticket, actions::outcome_of(result));
    }
}

/// The fault that goes with an error state the engine sets itself (`None`: not an error).
fn error_fault(state: &InstanceState) -> Option<Option<store::Fault>> {
    match state {
        InstanceState::Error(reason) => {
            Some(Some(fault::of_state_reason(reason, SystemTime::now())))
        }
        _ => None,
    }
}

fn invalid(instance: &Instance, operation: &'static str) -> ClusterError {
    ClusterError::InvalidState {
        id: instance.id,
        state: instance.state.name().into(),
        operation,
    }
}

impl Engine {
    /// Stop (DELETE with `stop`) an active or exited-on-its-node instance, and start it again
    /// when the stop is confirmed.
    /// Reads the disabled nodes from the store again: another controller over the same store may
    /// have disabled or enabled one (the sweep calls this every second).
    pub(super) fn refresh_disabled(&self) -> Result<(), StoreError> {
        let mut nodes: Vec<Uuid> = self
            .store
            .disabled_nodes()?
            .into_iter()
            .map(|d| d.node)
            .collect();
        nodes.sort_unstable();
        *self.disabled.lock().unwrap_or_else(|e| e.into_inner()) = nodes;
        Ok(())
    }

    /// Adds `id` to the disabled nodes (`disabled`) or takes it out.
    fn set_disabled(&self, id: Uuid, disabled: bool) {
        let mut nodes = self.disabled.lock().unwrap_or_else(|e| e.into_inner());
        match (nodes.binary_search(&id), disabled) {
            (Err(at), true) => nodes.insert(at, id),
            (Ok(at), false) => {
                nodes.remove(at);
            }
            _ => {}
        }
    }

    /// The nodes a START not pinned to a node must avoid.
    fn avoided_nodes(&self) -> Vec<Uuid> {
        self.disabled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn node_command(&self, id: Uuid, evacuate: bool) -> Result<(), ClusterError> {
        let status = self.node(id)?.status;
        if status == NodeStatus::Disconnected {
            return Err(ClusterError::Unavailable(format!(
                "node {id} is not connected"
            )));
        }
        self.require_connected()?;
        let command = NodeCommand {
            workload_agent_uuid: id,
        };
        self.send(&if evacuate {
            Payload::Evacuate(command)
        } else {
            Payload::Restore(command)
        })?;
        self.event(
            None,
            EventKind::Info,
            format!(
                "node {id}: {} requested",
                if evacuate { "evacuation" } else { "restore" }
            ),
        );
        Ok(())
    }
}
