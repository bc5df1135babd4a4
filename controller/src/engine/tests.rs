//! The instance state machine on every event, with a recording outbound and an in-memory store.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use ssntp::payload::{
    ConcentratorAdded, InstanceActionFailure, InstanceActionFailureReason, InstanceEvent,
    InstanceStat, InstanceState as Reported, MacAddr, NodeStatus as Ready, NodeType, StartFailure,
    StartFailureReason,
};

use super::*;
use store::{
    CnciState, ImageKind, NewFlavor, NewImage, NewTenant, NewWorkload, Quota, SqliteStore,
};

/// Records what the engine sends; can be "disconnected".
#[derive(Default)]
struct Recorder {
    sent: Mutex<Vec<Payload>>,
    down: AtomicBool,
}

impl Outbound for Recorder {
    fn send(&self, payload: &Payload) -> Result<(), SendFailure> {
        if self.down.load(Ordering::SeqCst) {
            return Err(SendFailure("not connected".into()));
        }
        self.sent.lock().unwrap().push(payload.clone());
        Ok(())
    }

    fn connected(&self) -> bool {
        !self.down.load(Ordering::SeqCst)
    }
}

impl Recorder {
    fn take(&self) -> Vec<Payload> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

struct World {
    engine: Engine,
    out: Arc<Recorder>,
    tenant: Uuid,
    workload: Uuid,
    _dir: tempfile::TempDir,
}

const NODE: Uuid = Uuid::from_bytes([0xaa; 16]);
const NET_NODE: Uuid = Uuid::from_bytes([0xbb; 16]);
const SCHEDULER: Uuid = Uuid::from_bytes([0x5c; 16]);

fn world_with(network: TenantNetwork, quota: Quota) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let tenant = store
        .create_tenant(NewTenant {
            name: "acme".into(),
            quota,
            subnet_prefix: 24,
        })
        .unwrap();
    let flavor = store
        .create_flavor(NewFlavor {
            name: "small".into(),
            vcpus: 1,
            memory_mb: 256,
            disk_gb: 1,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "tiny".into(),
            kind: ImageKind::Raw,
            reference: "tiny-ref".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: Some(tenant.id),
            name: "web".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: "#cloud-config\n".into(),
            ephemeral: false,
        })
        .unwrap();
    let out = Arc::new(Recorder::default());
    let mut config = EngineConfig::new(Uuid::from_bytes([0xc0; 16]));
    config.tenant_network = network;
    let engine = Engine::new(store, out.clone(), config).unwrap();
    World {
        engine,
        out,
        tenant: tenant.id,
        workload: workload.id,
        _dir: dir,
    }
}

fn world() -> World {
    world_with(TenantNetwork::None, Quota::default())
}

impl World {
    fn launch(&self, count: u32) -> Vec<Instance> {
        self.engine
            .launch(
                Scope::Tenant(self.tenant),
                Launch {
                    tenant: self.tenant,
                    workload: self.workload,
                    name: "web".into(),
                    count,
                },
                &Caller::default(),
            )
            .unwrap()
    }

    fn instance(&self, id: Uuid) -> Instance {
        self.engine.store().instance(Scope::All, id).unwrap()
    }

    fn state(&self, id: Uuid) -> InstanceState {
        self.instance(id).state
    }

    /// Its state and node.
    fn placed(&self, id: Uuid) -> (InstanceState, Option<Uuid>) {
        let i = self.instance(id);
        (i.state, i.node)
    }

    fn gone(&self, id: Uuid) -> bool {
        matches!(
            self.engine.store().instance(Scope::All, id),
            Err(StoreError::NotFound { .. })
        )
    }

    fn node_connected(&self, node: Uuid, node_type: NodeType) {
        self.engine
            .handle(&Payload::NodeConnected(ssntp::payload::NodeEvent {
                node_uuid: node,
                node_type,
            }))
            .unwrap();
    }

    fn stats(&self, node: Uuid, instances: &[(Uuid, Reported)]) {
        self.stats_in(node, ssntp::payload::NodeState::Ready, instances);
    }

    /// A STATS of `node` with the node in `status`.
    fn stats_in(
        &self,
        node: Uuid,
        status: ssntp::payload::NodeState,
        instances: &[(Uuid, Reported)],
    ) {
        self.stats_with(node, status, instances, vec![]);
    }

    /// A STATS of `node` in `status` reporting `networks`.
    fn stats_with(
        &self,
        node: Uuid,
        status: ssntp::payload::NodeState,
        instances: &[(Uuid, Reported)],
        networks: Vec<ssntp::payload::NodeNetwork>,
    ) {
        self.engine
            .handle(&stats_payload(node, status, instances, networks))
            .unwrap();
    }

    fn event(&self, payload: Payload) {
        self.engine.handle(&payload).unwrap();
    }

    /// Launches one instance and makes it active on NODE.
    fn active(&self) -> Uuid {
        self.node_connected(NODE, NodeType::ComputeNode);
        let id = self.launch(1)[0].id;
        self.out.take();
        self.stats(NODE, &[(id, Reported::Active)]);
        assert_eq!(self.state(id), InstanceState::Active);
        id
    }

    fn events(&self) -> Vec<String> {
        self.engine
            .store()
            .events(Scope::All, None, 1000)
            .unwrap()
            .into_iter()
            .map(|e| e.message)
            .collect()
    }
}

/// A STATS of `node` in `status` reporting `instances` and `networks`.
fn stats_payload(
    node: Uuid,
    status: ssntp::payload::NodeState,
    instances: &[(Uuid, Reported)],
    networks: Vec<ssntp::payload::NodeNetwork>,
) -> Payload {
    let stats = ssntp::payload::Stats {
        node: Ready {
            node_uuid: node,
            hostname: "host".into(),
            mem_total_mb: 4096,
            mem_available_mb: 2048,
            disk_total_mb: 10_000,
            disk_available_mb: 5_000,
            vcpus_total: 8,
            vcpus_available: 6,
            load: 12,
            networks,
        },
        status,
        instances: instances
            .iter()
            .map(|(id, state)| InstanceStat {
                instance_uuid: *id,
                state: *state,
                ssh_ip: None,
                ssh_port: None,
                memory_usage_mb: 10,
                disk_usage_mb: 10,
                cpu_usage: None,
            })
            .collect(),
    };
    Payload::Stats(Box::new(stats))
}

fn stopped_event(id: Uuid) -> Payload {
    Payload::InstanceStopped(InstanceEvent { instance_uuid: id })
}

fn deleted_event(id: Uuid) -> Payload {
    Payload::InstanceDeleted(InstanceEvent { instance_uuid: id })
}

fn starts(sent: &[Payload]) -> Vec<&Start> {
    sent.iter()
        .filter_map(|p| match p {
            Payload::Start(s) => Some(&**s),
            _ => None,
        })
        .collect()
}

fn deletes(sent: &[Payload]) -> Vec<&Delete> {
    sent.iter()
        .filter_map(|p| match p {
            Payload::Delete(d) => Some(d),
            _ => None,
        })
        .collect()
}

use ssntp::payload::Start;

#[test]
fn launch_sends_a_start_built_from_the_workload() {
    let w = world();
    let made = w.launch(3);
    assert_eq!(made.len(), 3);
    let sent = w.out.take();
    let starts = starts(&sent);
    assert_eq!(starts.len(), 3);
    let s = starts[0];
    assert_eq!(s.instance_uuid, made[0].id);
    assert_eq!(s.tenant_uuid, w.tenant);
    assert_eq!(s.workload_uuid, w.workload);
    assert_eq!(s.image, "tiny-ref");
    assert_eq!(s.requirements.vcpus, 1);
    assert_eq!(s.requirements.mem_mb, 256);
    assert_eq!(s.requirements.disk_mb, 1024);
    assert!(!s.requirements.network_node);
    assert!(!s.restart);
    assert_eq!(s.user_data.as_deref(), Some("#cloud-config\n"));
    let meta = s.meta_data.as_ref().unwrap();
    assert_eq!(meta["instance-id"], made[0].id.to_string());
    assert_eq!(meta["local-hostname"], "web");
    assert!(s.networking.is_none());
    assert!(made.iter().all(|i| i.state == InstanceState::Pending));
}

#[test]
fn stats_make_pending_instances_active_on_their_node() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    w.stats(NODE, &[(id, Reported::Pending)]);
    assert_eq!(w.state(id), InstanceState::Pending);
    assert_eq!(w.instance(id).node, Some(NODE));
    w.stats(NODE, &[(id, Reported::Active)]);
    assert_eq!(w.state(id), InstanceState::Active);
    let node = w.engine.node(NODE).unwrap();
    assert_eq!(node.instances, 1);
    assert_eq!(node.vcpus_available, 6);
    assert_eq!(node.status, NodeStatus::Ready);
}

#[test]
fn stop_keeps_the_instance_on_its_node_and_start_boots_it_there() {
    let w = world();
    let id = w.active();
    let stopping = w
        .engine
        .stop(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert_eq!(stopping.state, InstanceState::Stopping);
    let sent = w.out.take();
    let d = deletes(&sent);
    assert_eq!(d.len(), 1);
    assert!(d[0].stop);
    assert_eq!(d[0].workload_agent_uuid, NODE);
    // Stopping twice is refused.
    assert!(matches!(
        w.engine
            .stop(Scope::Tenant(w.tenant), id, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    w.event(Payload::InstanceStopped(InstanceEvent {
        instance_uuid: id,
    }));
    let exited = w.instance(id);
    assert_eq!(exited.state, InstanceState::Exited);
    assert_eq!(exited.node, Some(NODE), "kept on its node");
    w.stats(NODE, &[(id, Reported::Exited)]);
    assert_eq!(w.state(id), InstanceState::Exited);
    // No action on a stopped instance: nothing is sent.
    for action in [
        InstanceAction::Pause,
        InstanceAction::Reboot,
        InstanceAction::Resume,
    ] {
        assert!(matches!(
            w.engine
                .act(Scope::Tenant(w.tenant), id, action, &Caller::default()),
            Err(ClusterError::InvalidState { .. })
        ));
    }
    assert!(w.out.take().is_empty());

    let started = w
        .engine
        .start(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert_eq!(started.state, InstanceState::Pending);
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s.len(), 1);
    assert!(s[0].restart);
    assert_eq!(s[0].requirements.node_id, Some(NODE), "pinned to its node");
    w.stats(NODE, &[(id, Reported::Active)]);
    assert_eq!(w.state(id), InstanceState::Active);
}

#[test]
fn a_restart_its_node_cannot_do_leaves_it_stopped_there_with_the_fault() {
    let w = world();
    let id = w.active();
    w.stats(NODE, &[(id, Reported::Exited)]);
    assert_eq!(w.state(id), InstanceState::Exited);
    w.engine
        .start(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    w.out.take();
    let mut failure = StartFailure::new(id, Some(NODE), StartFailureReason::FullCn, true);
    failure = failure.with_message("the node is full");
    w.event(Payload::StartFailure(failure));
    let record = w.instance(id);
    assert_eq!(record.state, InstanceState::Exited);
    assert_eq!(record.node, Some(NODE));
    assert_eq!(record.fault.map(|f| f.reason), Some("full_cn".into()));
    // A node that no longer holds it: an error, placed nowhere.
    w.engine
        .start(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    w.out.take();
    let gone = StartFailure::new(id, Some(NODE), StartFailureReason::InstanceMissing, true);
    w.event(Payload::StartFailure(gone));
    let record = w.instance(id);
    assert_eq!(
        record.state,
        InstanceState::Error("instance_missing".into())
    );
    assert_eq!(record.node, None);
}

#[test]
fn actions_go_to_the_node_and_states_follow_its_stats() {
    let w = world();
    let id = w.active();
    let scope = Scope::Tenant(w.tenant);
    let sent_action = |w: &World| {
        let sent = w.out.take();
        let actions: Vec<_> = sent
            .iter()
            .filter_map(|p| match p {
                Payload::InstanceAction(a) => {
                    Some((a.instance_uuid, a.workload_agent_uuid, a.action))
                }
                _ => None,
            })
            .collect();
        assert_eq!(actions.len(), 1, "{sent:?}");
        actions[0]
    };
    w.engine.reboot(scope, id, &Caller::default()).unwrap();
    assert_eq!(sent_action(&w), (id, NODE, InstanceAction::Reboot));
    w.engine
        .act(scope, id, InstanceAction::RebootHard, &Caller::default())
        .unwrap();
    assert_eq!(sent_action(&w).2, InstanceAction::RebootHard);
    assert_eq!(w.state(id), InstanceState::Active);
    w.engine
        .act(scope, id, InstanceAction::Pause, &Caller::default())
        .unwrap();
    assert_eq!(sent_action(&w).2, InstanceAction::Pause);
    // Unpause before the node says paused: refused, nothing sent.
    assert!(matches!(
        w.engine
            .act(scope, id, InstanceAction::Unpause, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    assert!(w.out.take().is_empty());
    w.stats(NODE, &[(id, Reported::Paused)]);
    assert_eq!(w.state(id), InstanceState::Paused);
    w.engine
        .act(scope, id, InstanceAction::Suspend, &Caller::default())
        .unwrap();
    assert_eq!(sent_action(&w).2, InstanceAction::Suspend);
    w.stats(NODE, &[(id, Reported::Suspended)]);
    assert_eq!(w.state(id), InstanceState::Suspended);
    assert!(matches!(
        w.engine.stop(scope, id, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    w.engine
        .act(scope, id, InstanceAction::Resume, &Caller::default())
        .unwrap();
    assert_eq!(sent_action(&w).2, InstanceAction::Resume);
    w.stats(NODE, &[(id, Reported::Active)]);
    assert_eq!(w.state(id), InstanceState::Active);
    // A failure on the node is told as an event.
    w.event(Payload::InstanceActionFailure(InstanceActionFailure {
        instance_uuid: id,
        node_uuid: Some(NODE),
        action: Some(InstanceAction::Pause),
        reason: InstanceActionFailureReason::BackendFailure,
    }));
    assert!(
        w.events()
            .iter()
            .any(|e| e.contains("pause failed on its node"))
    );
}

#[test]
fn an_instance_that_exits_on_its_own_starts_again_on_its_node() {
    let w = world();
    let id = w.active();
    w.stats(NODE, &[(id, Reported::Exited)]);
    assert_eq!(w.state(id), InstanceState::Exited);
    assert_eq!(w.instance(id).node, Some(NODE));
    assert!(w.events().iter().any(|e| e.contains("exited on its own")));
    w.engine
        .start(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    let sent = w.out.take();
    assert!(deletes(&sent).is_empty());
    let s = starts(&sent);
    assert_eq!(s.len(), 1);
    assert!(s[0].restart);
    assert_eq!(s[0].requirements.node_id, Some(NODE));
}

#[test]
fn delete_is_confirmed_by_the_node() {
    let w = world();
    let id = w.active();
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Deleted);
    let sent = w.out.take();
    let d = deletes(&sent);
    assert!(!d[0].stop);
    // Deleting again is idempotent and sends nothing.
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert!(w.out.take().is_empty());
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: id,
    }));
    assert!(w.gone(id));
}

#[test]
fn a_lost_instance_deleted_is_settled_by_the_next_stats() {
    let w = world();
    let id = w.active();
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    w.stats(NODE, &[]);
    assert!(w.gone(id));
}

/// A DELETE lost with a scheduler that was down (or died) is sent again when the node's STATS
/// still shows the instance (found by the kill -9 fault test: the instance stayed deleted,
/// then hung, and ran on).
#[test]
fn a_lost_delete_is_sent_again_while_the_node_reports_the_instance() {
    let w = world();
    let id = w.active();
    w.out.down.store(true, Ordering::SeqCst);
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Deleted);
    w.out.down.store(false, Ordering::SeqCst);
    assert!(w.out.take().is_empty());
    w.stats(NODE, &[(id, Reported::Active)]);
    let sent = w.out.take();
    assert_eq!(deletes(&sent).len(), 1, "{sent:?}");
    assert_eq!(deletes(&sent)[0].instance_uuid, id);
    // Not again at every STATS.
    w.stats(NODE, &[(id, Reported::Active)]);
    assert!(deletes(&w.out.take()).is_empty());
    // A hung one too, and a restarted engine (which sent nothing yet) sends it at once.
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Hung);
    let again = Engine::new(
        w.engine.store().clone(),
        w.out.clone(),
        EngineConfig::new(Uuid::nil()),
    )
    .unwrap();
    again
        .handle(&stats_payload(
            NODE,
            ssntp::payload::NodeState::Ready,
            &[(id, Reported::Active)],
            vec![],
        ))
        .unwrap();
    assert_eq!(deletes(&w.out.take()).len(), 1);
    again
        .handle(&Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: id,
        }))
        .unwrap();
    assert!(w.gone(id));
}

/// A START lost with a scheduler or an agent that died (found by the kill -9 fault test: the
/// instance stayed pending for ever, and once deleted, hung for ever).
#[test]
fn a_start_no_node_reports_is_lost_and_its_delete_forgotten() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let lost = w.launch(2);
    let (a, b) = (lost[0].id, lost[1].id);
    w.out.take();
    w.engine.sweep(SystemTime::now()).unwrap();
    assert_eq!(w.state(a), InstanceState::Pending);
    w.engine.delete(Scope::All, b, &Caller::default()).unwrap();
    let later = SystemTime::now() + Duration::from_secs(61);
    w.engine.sweep(later).unwrap();
    assert!(
        matches!(w.state(a), InstanceState::Error(ref r) if r.starts_with(START_LOST)),
        "{:?}",
        w.state(a)
    );
    assert!(
        w.gone(b),
        "a deleted instance no node ever had is forgotten"
    );
    let fault = w.instance(a).fault.unwrap();
    assert_eq!(fault.reason, START_LOST);
    assert!(
        fault.message.starts_with("no node reported it within"),
        "{fault:?}"
    );
    // It shows up after all: active, and its fault goes.
    w.stats(NODE, &[(a, Reported::Active)]);
    assert_eq!(w.state(a), InstanceState::Active);
    assert_eq!(w.instance(a).fault, None);
    // A restarted engine times out the pending instances of the last run too.
    let c = w.launch(1)[0].id;
    let again = Engine::new(
        w.engine.store().clone(),
        w.out.clone(),
        EngineConfig::new(Uuid::nil()),
    )
    .unwrap();
    again
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert!(matches!(w.state(c), InstanceState::Error(_)));
}

/// Found by the libvirt kill -9 fault test (cli/tests/faults.rs): an instance deleted while
/// pending, before any node reported it, was forgotten after the confirmation timeout; its
/// START had reached a slow agent, which booted it afterwards, and the VM ran on with no record
/// ("left alone"). A node that reports an instance this engine removed now gets its DELETE.
#[test]
fn a_forgotten_instance_that_a_node_runs_after_all_is_deleted_there() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let ids = w.launch(2);
    let (late, errored) = (ids[0].id, ids[1].id);
    w.engine
        .delete(Scope::All, late, &Caller::default())
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(61);
    w.engine.sweep(later).unwrap();
    assert!(w.gone(late), "deleted and never reported: forgotten");
    // The other's START is given up for lost; the user deletes the `error` instance.
    assert!(matches!(w.state(errored), InstanceState::Error(_)));
    w.engine
        .delete(Scope::All, errored, &Caller::default())
        .unwrap();
    assert!(w.gone(errored));
    w.out.take();
    // Both STARTs got to NODE after all: it runs them.
    w.stats(
        NODE,
        &[(late, Reported::Active), (errored, Reported::Active)],
    );
    let sent = w.out.take();
    let mut deleted: Vec<Uuid> = deletes(&sent).iter().map(|d| d.instance_uuid).collect();
    deleted.sort();
    let mut want = vec![late, errored];
    want.sort();
    assert_eq!(deleted, want);
    assert!(
        deletes(&sent)
            .iter()
            .all(|d| d.workload_agent_uuid == NODE && !d.stop)
    );
    assert!(w.events().iter().any(|e| e.contains("DELETE sent")));
    assert!(!w.events().iter().any(|e| e.contains("does not know")));
    // Not again at once while the node still reports it (again after DELETE_RESEND).
    w.stats(NODE, &[(late, Reported::Active)]);
    assert!(deletes(&w.out.take()).is_empty());
    // Gone from the node: nothing more, and neither is adopted.
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: late,
    }));
    w.stats(NODE, &[]);
    assert!(w.gone(late) && w.gone(errored));
}

#[test]
fn deleting_an_unplaced_instance_waits_to_learn_its_node() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    w.out.take();
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    assert!(w.out.take().is_empty());
    // It lands on NODE after all: the DELETE goes there.
    w.stats(NODE, &[(id, Reported::Active)]);
    let sent = w.out.take();
    assert_eq!(deletes(&sent)[0].workload_agent_uuid, NODE);
    assert_eq!(w.state(id), InstanceState::Deleted);
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: id,
    }));
    assert!(w.gone(id));
}

#[test]
fn deleting_while_pending_and_then_failing_to_start_removes_the_record() {
    let w = world();
    let id = w.launch(1)[0].id;
    w.engine
        .delete(Scope::Tenant(w.tenant), id, &Caller::default())
        .unwrap();
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: id,
        node_uuid: None,
        reason: StartFailureReason::FullCloud,
        restart: false,
        message: None,
    }));
    assert!(w.gone(id));
}

#[test]
fn fatal_start_failures_are_errors_with_the_reason() {
    let w = world();
    let made = w.launch(2);
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: made[0].id,
        node_uuid: Some(NODE),
        reason: StartFailureReason::ImageFailure,
        restart: false,
        message: None,
    }));
    assert_eq!(
        w.state(made[0].id),
        InstanceState::Error("image_failure".into())
    );
    // Not fatal: nothing changes.
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: made[1].id,
        node_uuid: Some(NODE),
        reason: StartFailureReason::AlreadyRunning,
        restart: false,
        message: None,
    }));
    assert_eq!(w.state(made[1].id), InstanceState::Pending);
    // An errored instance is deleted at once, and may be started again.
    w.engine
        .start(Scope::All, made[0].id, &Caller::default())
        .unwrap();
    assert_eq!(w.state(made[0].id), InstanceState::Pending);
    w.event(Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: made[0].id,
        node_uuid: None,
        reason: StartFailureReason::NoCn,
        restart: true,
        message: None,
    }));
    w.engine
        .delete(Scope::All, made[0].id, &Caller::default())
        .unwrap();
    assert!(w.gone(made[0].id));
}

#[test]
fn a_fatal_start_failure_leaves_a_fault_with_its_cause_until_started_again() {
    let w = world();
    let made = w.launch(2);
    let (id, other) = (made[0].id, made[1].id);
    let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_602_611_908);
    let cause = "QEMU could not open /x/seed.iso: Permission denied";
    let failure =
        ssntp::payload::StartFailure::new(id, Some(NODE), StartFailureReason::LaunchFailure, false)
            .with_message(cause);
    w.engine
        .handle_at(&Payload::StartFailure(failure), at)
        .unwrap();
    let failed = w.instance(id);
    assert_eq!(failed.state, InstanceState::Error("launch_failure".into()));
    assert_eq!(
        failed.fault,
        Some(store::Fault {
            reason: "launch_failure".into(),
            message: cause.into(),
            created: at,
        })
    );
    // The event log says it with the cause.
    assert!(
        w.events().contains(&format!(
            "instance {id} failed to start: launch_failure: {cause}"
        )),
        "{:?}",
        w.events()
    );
    // The scheduler's own failure has no message: the controller says what it means.
    w.event(start_failure(other, StartFailureReason::FullCloud));
    let full = w.instance(other).fault.unwrap();
    assert_eq!(
        (full.reason.as_str(), full.message.as_str()),
        ("full_cloud", "no compute node has room for the instance")
    );
    assert!(w.events().contains(&format!(
        "instance {other} failed to start: full_cloud: no compute node has room for the instance"
    )));
    // Started again: pending, no fault; a second failure has its own.
    w.engine.start(Scope::All, id, &Caller::default()).unwrap();
    assert_eq!(w.state(id), InstanceState::Pending);
    assert_eq!(w.instance(id).fault, None);
    w.event(start_failure(id, StartFailureReason::NoCn));
    let again = w.instance(id).fault.unwrap();
    assert_eq!(
        (again.reason.as_str(), again.message.as_str()),
        ("no_cn", "there is no compute node in the cluster")
    );
}

#[test]
fn a_node_that_leaves_makes_its_instances_missing_until_it_reports_them() {
    let w = world();
    let id = w.active();
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    assert_eq!(w.state(id), InstanceState::Missing);
    assert_eq!(
        w.engine.node(NODE).unwrap().status,
        NodeStatus::Disconnected
    );
    // Starting a missing instance elsewhere could run it twice: refused.
    assert!(matches!(
        w.engine.start(Scope::All, id, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(NODE, &[(id, Reported::Active)]);
    assert_eq!(w.state(id), InstanceState::Active);
    assert!(w.events().iter().any(|e| e.contains("is back")));
}

/// A node that comes back without a missing instance (its agent died before it kept a record
/// of it): the instance is exited, not missing for ever (found by the kill -9 fault test).
#[test]
fn a_node_back_without_a_missing_instance_makes_it_exited() {
    let w = world();
    let id = w.active();
    let other = w.active();
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    assert_eq!(w.state(id), InstanceState::Missing);
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(NODE, &[(other, Reported::Active)]);
    assert_eq!(w.state(other), InstanceState::Active);
    assert_eq!(w.state(id), InstanceState::Exited);
    assert_eq!(w.instance(id).node, None);
    assert!(w.events().iter().any(|e| e.contains("not on node")));
}

/// Issue 20: a lost node (the scheduler's dead-node timeout) leaves every instance it holds
/// `missing`; its first STATS once it is back reconciles them.
#[test]
fn a_lost_node_leaves_its_instances_missing_and_its_first_stats_back_reconciles_them() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let ids: Vec<Uuid> = w.launch(5).iter().map(|i| i.id).collect();
    let [running, stopped, exited, booting, vanished] = ids[..] else {
        panic!("five instances")
    };
    let all_active: Vec<(Uuid, Reported)> = ids.iter().map(|id| (*id, Reported::Active)).collect();
    w.stats(NODE, &all_active);
    // One exits on its own before the node is lost: exited, kept on its node.
    let mut before = all_active.clone();
    before[2].1 = Reported::Exited;
    w.stats(NODE, &before);
    assert_eq!(w.state(exited), InstanceState::Exited);
    assert_eq!(w.instance(exited).node, Some(NODE));

    // Lost: every instance it holds is missing, the exited one too (its disks are there).
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    for id in &ids {
        assert_eq!(w.state(*id), InstanceState::Missing);
        assert_eq!(w.instance(*id).node, Some(NODE), "still placed there");
    }
    assert!(matches!(
        w.engine.start(Scope::All, exited, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    // A STATS of the lost session that trails its NODE_DISCONNECTED changes nothing.
    w.stats(NODE, &all_active);
    for id in &ids {
        assert_eq!(w.state(*id), InstanceState::Missing);
    }

    // Back (NODE_CONNECTED first, as the scheduler sends it): its first STATS settles them.
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(
        NODE,
        &[
            (running, Reported::Active),
            (stopped, Reported::Exited),
            (exited, Reported::Exited),
            (booting, Reported::Pending),
        ],
    );
    let now = |id: Uuid| (w.state(id), w.instance(id).node);
    assert_eq!(now(running), (InstanceState::Active, Some(NODE)));
    assert_eq!(now(stopped), (InstanceState::Exited, Some(NODE)));
    assert_eq!(now(exited), (InstanceState::Exited, Some(NODE)));
    assert_eq!(
        now(booting),
        (InstanceState::Missing, Some(NODE)),
        "not settled"
    );
    assert_eq!(now(vanished), (InstanceState::Exited, None), "runs nowhere");
    // A later STATS settles the one that was still booting.
    w.stats(
        NODE,
        &[
            (running, Reported::Active),
            (stopped, Reported::Exited),
            (exited, Reported::Exited),
            (booting, Reported::Active),
        ],
    );
    assert_eq!(now(booting), (InstanceState::Active, Some(NODE)));
    let events = w.events();
    assert!(
        events
            .iter()
            .any(|e| e.contains(&format!("{running} is back")))
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains(&format!("{stopped} is back on node {NODE}, exited")))
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains(&format!("{vanished} is not on node")))
    );
}

#[test]
fn a_dual_node_is_gone_only_when_both_kinds_left() {
    let w = world();
    let id = w.active();
    w.node_connected(NODE, NodeType::NetworkNode);
    let node = w.engine.node(NODE).unwrap();
    assert!(node.kinds.compute && node.kinds.network);
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::NetworkNode,
    }));
    assert_eq!(w.state(id), InstanceState::Active);
    w.event(Payload::NodeDisconnected(ssntp::payload::NodeEvent {
        node_uuid: NODE,
        node_type: NodeType::ComputeNode,
    }));
    assert_eq!(w.state(id), InstanceState::Missing);
}

#[test]
fn an_active_instance_that_vanishes_from_its_node_is_missing() {
    let w = world();
    let id = w.active();
    w.stats(NODE, &[]);
    assert_eq!(w.state(id), InstanceState::Missing);
}

#[test]
fn unconfirmed_deletes_become_hung_and_can_be_removed() {
    let w = world();
    let id = w.active();
    w.engine.delete(Scope::All, id, &Caller::default()).unwrap();
    w.engine.sweep(SystemTime::now()).unwrap();
    assert_eq!(w.state(id), InstanceState::Deleted);
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Hung);
    w.engine.delete(Scope::All, id, &Caller::default()).unwrap();
    assert!(w.gone(id));
    assert!(w.events().iter().any(|e| e.contains("hung")));
}

#[test]
fn unconfirmed_stops_become_missing() {
    let w = world();
    let id = w.active();
    w.engine.stop(Scope::All, id, &Caller::default()).unwrap();
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Missing);
}

#[test]
fn unknown_instances_are_reported_once_and_left_alone() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let stranger = Uuid::from_bytes([0x55; 16]);
    w.stats(NODE, &[(stranger, Reported::Active)]);
    w.stats(NODE, &[(stranger, Reported::Active)]);
    let reports = w
        .events()
        .into_iter()
        .filter(|e| e.contains("does not know"))
        .count();
    assert_eq!(reports, 1);
    assert!(w.out.take().is_empty());
    assert!(w.gone(stranger));
}

#[test]
fn nothing_is_created_while_the_scheduler_is_unreachable() {
    let w = world();
    w.out.down.store(true, Ordering::SeqCst);
    let refused = w.engine.launch(
        Scope::Tenant(w.tenant),
        Launch {
            tenant: w.tenant,
            workload: w.workload,
            name: "x".into(),
            count: 1,
        },
        &Caller::default(),
    );
    assert!(matches!(refused, Err(ClusterError::Unavailable(_))));
    assert!(
        w.engine
            .store()
            .instances(Scope::All, InstanceFilter::default(), Page::first(10))
            .unwrap()
            .items
            .is_empty()
    );
}

#[test]
fn another_tenant_sees_nothing() {
    let w = world();
    let id = w.active();
    let other = Scope::Tenant(Uuid::from_bytes([0x99; 16]));
    for result in [
        w.engine.stop(other, id, &Caller::default()).map(drop),
        w.engine.start(other, id, &Caller::default()).map(drop),
        w.engine.reboot(other, id, &Caller::default()).map(drop),
        w.engine.delete(other, id, &Caller::default()),
    ] {
        assert!(matches!(
            result,
            Err(ClusterError::Store(StoreError::NotFound { .. }))
        ));
    }
    let launch = w.engine.launch(
        other,
        Launch {
            tenant: w.tenant,
            workload: w.workload,
            name: "x".into(),
            count: 1,
        },
        &Caller::default(),
    );
    assert!(matches!(
        launch,
        Err(ClusterError::Store(StoreError::NotFound { .. }))
    ));
    assert_eq!(w.state(id), InstanceState::Active);
}

#[test]
fn a_launch_past_the_quota_keeps_what_fitted() {
    let w = world_with(
        TenantNetwork::None,
        Quota {
            instances: Some(2),
            ..Quota::default()
        },
    );
    let refused = w.engine.launch(
        Scope::Tenant(w.tenant),
        Launch {
            tenant: w.tenant,
            workload: w.workload,
            name: "x".into(),
            count: 3,
        },
        &Caller::default(),
    );
    assert!(matches!(
        refused,
        Err(ClusterError::Store(StoreError::QuotaExceeded { .. }))
    ));
    assert_eq!(starts(&w.out.take()).len(), 2);
}

#[test]
fn bad_launches_are_refused() {
    let w = world();
    for (count, name) in [(0, "x"), (Launch::MAX_COUNT + 1, "x"), (1, "  ")] {
        let refused = w.engine.launch(
            Scope::All,
            Launch {
                tenant: w.tenant,
                workload: w.workload,
                name: name.into(),
                count,
            },
            &Caller::default(),
        );
        assert!(matches!(refused, Err(ClusterError::Invalid(_))));
    }
}

#[test]
fn evacuate_and_restore_go_to_connected_nodes_only() {
    let w = world();
    assert!(matches!(
        w.engine.evacuate(NODE),
        Err(ClusterError::NoNode(_))
    ));
    w.node_connected(NODE, NodeType::ComputeNode);
    w.engine.evacuate(NODE).unwrap();
    w.engine.restore(NODE).unwrap();
    let sent = w.out.take();
    assert!(matches!(&sent[0], Payload::Evacuate(c) if c.workload_agent_uuid == NODE));
    assert!(matches!(&sent[1], Payload::Restore(c) if c.workload_agent_uuid == NODE));
}

#[test]
fn traces_are_kept_in_a_bounded_ring() {
    let w = world();
    let frames = (0..1100)
        .map(|i| ssntp::payload::FrameTrace {
            label: format!("t{i}"),
            operand_type: 0,
            operand: 1,
            start_ns: 10,
            end_ns: 110,
            hops: vec![],
        })
        .collect();
    w.event(Payload::TraceReport(ssntp::payload::TraceReport { frames }));
    let traces = w.engine.traces();
    assert_eq!(traces.len(), 1000);
    assert_eq!(traces.last().unwrap().label, "t1099");
    assert_eq!(traces[0].total_ns, 100);
    assert_eq!(traces[0].frame, "START");
}

// ---- CNCIs --------------------------------------------------------------------------------

fn added(cnci: &store::Cnci) -> Payload {
    Payload::ConcentratorInstanceAdded(ConcentratorAdded {
        instance_uuid: cnci.id,
        tenant_uuid: cnci.tenant,
        concentrator_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)),
        concentrator_mac: MacAddr([2, 0, 10, 0, 0, 7]),
    })
}

#[test]
fn the_first_instance_of_a_subnet_launches_its_cnci_and_waits_for_it() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(2);
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s.len(), 1, "only the CNCI starts first");
    assert!(s[0].requirements.network_node);
    let cncis = w.engine.store().cncis(Scope::All).unwrap();
    assert_eq!(cncis.len(), 1);
    assert_eq!(cncis[0].state, CnciState::Pending);
    assert_eq!(s[0].instance_uuid, cncis[0].id);

    w.event(added(&cncis[0]));
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s.len(), 2);
    let net = s[0].networking.as_ref().unwrap();
    assert_eq!(net.concentrator_uuid, cncis[0].id);
    assert_eq!(net.concentrator_ip, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)));
    assert_eq!(net.vnic_mac, made[0].mac);
    assert_eq!(net.private_ip, IpAddr::V4(made[0].ip));
    assert!(
        sent.iter()
            .any(|p| matches!(p, Payload::RefreshCnci(r) if r.cnci_uuid == cncis[0].id))
    );
    assert_eq!(w.instance(made[0].id).cnci, Some(cncis[0].id));

    // A later instance of the same subnet starts at once.
    w.launch(1);
    let sent = w.out.take();
    assert_eq!(starts(&sent).len(), 1);
    assert!(starts(&sent)[0].networking.is_some());
}

#[test]
fn a_cnci_that_never_comes_fails_its_instances() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(121))
        .unwrap();
    assert_eq!(
        w.engine.store().cncis(Scope::All).unwrap()[0].state,
        CnciState::Failed
    );
    assert!(
        matches!(w.state(made[0].id), InstanceState::Error(r) if r.starts_with("network_failure"))
    );
}

#[test]
fn an_exited_cnci_is_started_again_and_an_idle_one_removed() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.event(added(&cnci));
    w.node_connected(NET_NODE, NodeType::NetworkNode);
    w.stats(NET_NODE, &[(cnci.id, Reported::Active)]);
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().node,
        Some(NET_NODE)
    );
    w.out.take();
    w.event(Payload::InstanceStopped(InstanceEvent {
        instance_uuid: cnci.id,
    }));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Exited
    );
    w.engine.sweep(SystemTime::now()).unwrap();
    let sent = w.out.take();
    let s = starts(&sent);
    assert_eq!(s.len(), 1);
    assert!(s[0].restart && s[0].requirements.network_node);

    // The subnet empties: the CNCI goes after the linger time.
    w.event(added(&cnci));
    w.stats(NET_NODE, &[(cnci.id, Reported::Active)]);
    w.node_connected(NODE, NodeType::ComputeNode);
    w.stats(NODE, &[(made[0].id, Reported::Active)]);
    w.engine
        .delete(Scope::All, made[0].id, &Caller::default())
        .unwrap();
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: made[0].id,
    }));
    assert!(w.gone(made[0].id));
    w.engine.sweep(SystemTime::now()).unwrap();
    assert_eq!(w.engine.store().cncis(Scope::All).unwrap().len(), 1);
    w.out.take();
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert!(w.engine.store().cncis(Scope::All).unwrap().is_empty());
    let sent = w.out.take();
    assert_eq!(deletes(&sent)[0].instance_uuid, cnci.id);
}

#[test]
fn a_restarted_engine_keeps_waiting_for_confirmations() {
    let w = world();
    let id = w.active();
    w.engine.delete(Scope::All, id, &Caller::default()).unwrap();
    let again = Engine::new(
        w.engine.store().clone(),
        w.out.clone(),
        EngineConfig::new(Uuid::nil()),
    )
    .unwrap();
    again
        .sweep(SystemTime::now() + Duration::from_secs(61))
        .unwrap();
    assert_eq!(w.state(id), InstanceState::Hung);
}

fn start_failure(id: Uuid, reason: StartFailureReason) -> Payload {
    Payload::StartFailure(ssntp::payload::StartFailure {
        instance_uuid: id,
        node_uuid: None,
        reason,
        restart: false,
        message: None,
    })
}

/// The STARTs among `sent` of `id`.
fn starts_of(sent: &[Payload], id: Uuid) -> usize {
    starts(sent)
        .iter()
        .filter(|s| s.instance_uuid == id)
        .count()
}

/// A CNCI launched before its network node is READY meets `full_cloud` (or `no_net_cn` before
/// it connects): its START goes again, 200 ms then twice as long each time, and the subnet comes
/// up when one is placed.
#[test]
fn a_cnci_start_without_room_goes_again_with_a_backoff() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    assert_eq!(starts_of(&w.out.take(), cnci.id), 1);
    let t0 = cnci.updated;
    let ms = |n: u64| t0 + Duration::from_millis(n);

    w.engine
        .handle_at(&start_failure(cnci.id, StartFailureReason::NoNetCn), ms(10))
        .unwrap();
    assert_eq!(w.engine.next_cnci_retry(), Some(ms(210)));
    w.engine.sweep(ms(200)).unwrap();
    assert!(w.out.take().is_empty(), "not before 200 ms");
    w.engine.sweep(ms(210)).unwrap();
    assert_eq!(starts_of(&w.out.take(), cnci.id), 1);
    assert_eq!(
        w.engine.next_cnci_retry(),
        None,
        "sent: waiting for its answer"
    );

    w.engine
        .handle_at(
            &start_failure(cnci.id, StartFailureReason::FullCloud),
            ms(220),
        )
        .unwrap();
    assert_eq!(w.engine.next_cnci_retry(), Some(ms(620)), "400 ms");
    w.engine.retry_cncis(ms(619)).unwrap();
    assert!(w.out.take().is_empty());
    w.engine.retry_cncis(ms(620)).unwrap();
    let sent = w.out.take();
    assert_eq!(starts_of(&sent, cnci.id), 1);
    assert!(starts(&sent)[0].requirements.network_node);
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Pending
    );
    assert_eq!(w.state(made[0].id), InstanceState::Pending);

    // Placed this time: it announces itself, and the instance waiting for it starts.
    w.event(added(&cnci));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Active
    );
    let sent = w.out.take();
    assert_eq!(starts_of(&sent, made[0].id), 1);
    assert!(starts(&sent).iter().all(|s| s.instance_uuid != cnci.id));
    assert_eq!(w.engine.next_cnci_retry(), None);
    assert_eq!(
        w.events()
            .iter()
            .filter(|e| e.contains("sent again in"))
            .count(),
        1,
        "one event per CNCI, not one per retry"
    );
}

/// A CNCI that never finds room fails at the CNCI timeout, with the START's reason, and so do
/// the instances waiting for it; the wait between STARTs stops growing at 2 s.
#[test]
fn a_cnci_that_never_finds_room_fails_at_the_timeout() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.out.take();
    let timeout = Duration::from_secs(120);
    let mut now = cnci.updated;
    let mut waits = Vec::new();
    loop {
        w.engine
            .handle_at(&start_failure(cnci.id, StartFailureReason::FullCloud), now)
            .unwrap();
        let Some(due) = w.engine.next_cnci_retry() else {
            break;
        };
        waits.push(due.duration_since(now).unwrap());
        if due.duration_since(cnci.updated).unwrap() >= timeout {
            break;
        }
        w.engine.sweep(due).unwrap();
        assert_eq!(starts_of(&w.out.take(), cnci.id), 1);
        assert_eq!(w.state(made[0].id), InstanceState::Pending);
        now = due;
    }
    assert_eq!(
        &waits[..5],
        &[200, 400, 800, 1600, 2000].map(Duration::from_millis)
    );
    assert!(waits.iter().all(|d| *d <= Duration::from_secs(2)));
    // The sweep at the timeout gives up.
    w.engine.sweep(cnci.updated + timeout).unwrap();
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Failed
    );
    assert!(starts_of(&w.out.take(), cnci.id) == 0);
    assert!(
        matches!(w.state(made[0].id), InstanceState::Error(ref r)
            if r == "network_failure: the subnet's CNCI failed: START failed: full_cloud"),
        "{:?}",
        w.state(made[0].id)
    );
    assert_eq!(w.engine.next_cnci_retry(), None);
}

/// Other reasons fail a CNCI at once, and an ordinary instance's `full_cloud` is an error at
/// once, as before.
#[test]
fn other_start_failures_are_not_retried() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    let made = w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.out.take();
    w.event(start_failure(cnci.id, StartFailureReason::ImageFailure));
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Failed
    );
    assert_eq!(w.engine.next_cnci_retry(), None);
    assert!(
        matches!(w.state(made[0].id), InstanceState::Error(ref r) if r.ends_with("START failed: image_failure"))
    );

    // Past its timeout, even full_cloud fails it at once.
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.engine
        .handle_at(
            &start_failure(cnci.id, StartFailureReason::FullCloud),
            cnci.updated + Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(
        w.engine.store().cnci(Scope::All, cnci.id).unwrap().state,
        CnciState::Failed
    );

    let w = world();
    let id = w.launch(1)[0].id;
    w.event(start_failure(id, StartFailureReason::FullCloud));
    assert_eq!(w.state(id), InstanceState::Error("full_cloud".into()));
    w.engine
        .sweep(SystemTime::now() + Duration::from_secs(1))
        .unwrap();
    assert!(starts(&w.out.take()).len() == 1, "only the first START");
}

/// [`run`] over `engine` with a sweep an hour away: its event sender, its stop, its task.
fn drive(
    engine: &Arc<Engine>,
) -> (
    tokio::sync::mpsc::Sender<ssntp_net::client::ClientEvent>,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let stop = tokio_util::sync::CancellationToken::new();
    let driver = tokio::spawn(run(
        engine.clone(),
        rx,
        Duration::from_secs(3600),
        stop.clone(),
    ));
    (tx, stop, driver)
}

/// The driver sends a CNCI's START again when it is due, not at the next sweep (an hour away
/// here); virtual time.
#[tokio::test(start_paused = true)]
async fn the_driver_sends_a_cnci_start_again_when_due() {
    let w = world_with(TenantNetwork::Cnci, Quota::default());
    w.launch(1);
    let cnci = w.engine.store().cncis(Scope::All).unwrap().remove(0);
    w.out.take();
    let World {
        engine, out, _dir, ..
    } = w;
    let engine = Arc::new(engine);
    let (tx, stop, driver) = drive(&engine);
    // The scheduler's own START_FAILURE: its origin is the scheduler of the session.
    tx.send(origin::connected(SCHEDULER)).await.unwrap();
    let failure = start_failure(cnci.id, StartFailureReason::FullCloud);
    tx.send(origin::frames(SCHEDULER, vec![failure]))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), async {
        while starts_of(&out.take(), cnci.id) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the START went again before the next sweep");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(engine.next_cnci_retry(), None);
    stop.cancel();
    driver.await.unwrap();
}

mod actions;
mod console;
mod ephemeral;
mod origin;
mod rebuild;
mod resize;
