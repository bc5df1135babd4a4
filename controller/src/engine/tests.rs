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
    /// The labels of the traced frames sent, with their operands.
    traced: Mutex<Vec<(ssntp::Operand, String)>>,
    down: AtomicBool,
}

impl Outbound for Recorder {
    fn send(&self, payload: &Payload) -> Result<(), SendFailure> {
        if self.down.load(Ordering::SeqCst) {
            return Err(SendFailure::NotConnected);
        }
        self.sent.lock().unwrap().push(payload.clone());
        Ok(())
    }

    fn send_traced(&self, payload: &Payload, label: &str) -> Result<(), SendFailure> {
        self.send(payload)?;
        self.traced
            .lock()
            .unwrap()
            .push((payload.operand(), label.to_string()));
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
    world_configured(network, quota, |_| {})
}

/// [`world_with`], its engine's configuration changed by `configure` first.
fn world_configured(
    network: TenantNetwork,
    quota: Quota,
    configure: impl FnOnce(&mut EngineConfig),
) -> World {
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
            is_public: true,
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
    configure(&mut config);
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
    /// Another engine over this world's store (a restarted controller, or a second one), its
    /// frames recorded apart.
    fn another_engine(&self) -> Engine {
        Engine::new(
            self.engine.store().clone(),
            Arc::new(Recorder::default()),
            EngineConfig::new(Uuid::from_bytes([0xc1; 16])),
        )
        .unwrap()
    }

    fn launch(&self, count: u32) -> Vec<Instance> {
        self.launch_by(count, &Caller::default())
    }

    /// [`World::launch`] asked by `by`.
    fn launch_by(&self, count: u32, by: &Caller) -> Vec<Instance> {
        self.engine
            .launch(
                Scope::Tenant(self.tenant),
                Launch {
                    tenant: self.tenant,
                    workload: self.workload,
                    name: "web".into(),
                    count,
                    key: None,
                    groups: Vec::new(),
                    metadata: store::Metadata::new(),
                    user: None,
                    server_group: None,
                    reservation: store::Instance::new_reservation(),
                    zone: None,
                },
                by,
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
            zone: None,
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
                volumes: Vec::new(),
            })
            .collect(),
    };
    Payload::Stats(Box::new(stats))
}

/// A STATS of `node` listing `instances`, active, with their volumes.
fn stats_with_volumes(node: Uuid, instances: &[(Uuid, &[Uuid])]) -> Payload {
    let ids: Vec<(Uuid, Reported)> = instances
        .iter()
        .map(|(id, _)| (*id, Reported::Active))
        .collect();
    let mut payload = stats_payload(node, ssntp::payload::NodeState::Ready, &ids, vec![]);
    if let Payload::Stats(stats) = &mut payload {
        for (stat, (_, volumes)) in stats.instances.iter_mut().zip(instances) {
            stat.volumes = volumes.to_vec();
        }
    }
    payload
}

/// The volume `id` as the store has it.
fn volume(w: &World, id: Uuid) -> store::Volume {
    w.engine.store().volume(Scope::All, id).unwrap()
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
fn a_container_images_start_asks_for_a_container() {
    let mut w = world();
    let store = w.engine.store().clone();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "rootfs".into(),
            kind: ImageKind::Container,
            reference: "sha512/00".into(),
        })
        .unwrap();
    let old = store.workload(Scope::All, w.workload).unwrap();
    w.workload = store
        .create_workload(NewWorkload {
            owner: Some(w.tenant),
            name: "box".into(),
            flavor: old.flavor,
            image: image.id,
            user_data: "echo hi".into(),
            ephemeral: false,
        })
        .unwrap()
        .id;
    let made = w.launch(1);
    let sent = w.out.take();
    let s = starts(&sent)[0];
    assert_eq!(s.instance_uuid, made[0].id);
    assert_eq!(s.vm_type, ssntp::payload::VmType::Container);
    assert_eq!(s.image, "sha512/00");
    assert_eq!(s.user_data.as_deref(), Some("echo hi"));
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

/// A STATS's records are read together: each listed instance is reconciled once (one listed
/// twice by its first listing), and one the store places on the node but the report leaves out
/// is missing.
#[test]
fn a_stats_reconciles_each_listed_instance_once_and_the_unlisted_as_absent() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let ids: Vec<Uuid> = w.launch(3).iter().map(|i| i.id).collect();
    w.stats(
        NODE,
        &[
            (ids[0], Reported::Active),
            (ids[1], Reported::Active),
            (ids[0], Reported::Exited),
            (ids[2], Reported::Active),
        ],
    );
    for id in &ids {
        assert_eq!(w.placed(*id), (InstanceState::Active, Some(NODE)));
    }
    w.stats(
        NODE,
        &[(ids[0], Reported::Active), (ids[1], Reported::Active)],
    );
    assert_eq!(w.state(ids[0]), InstanceState::Active);
    assert_eq!(w.state(ids[2]), InstanceState::Missing);
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

fn added(cnci: &store::Cnci) -> Payload {
    Payload::ConcentratorInstanceAdded(ConcentratorAdded {
        instance_uuid: cnci.id,
        tenant_uuid: cnci.tenant,
        concentrator_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)),
        concentrator_mac: MacAddr([2, 0, 10, 0, 0, 7]),
    })
}

/// [`run`] over `engine` (one scheduler) with a sweep an hour away: its event sender, its
/// stop, its task.
fn drive(
    engine: &Arc<Engine>,
) -> (
    tokio::sync::mpsc::Sender<ssntp_net::client::ClientEvent>,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let stop = tokio_util::sync::CancellationToken::new();
    let link: Arc<dyn Outbound> = Arc::new(Recorder::default());
    let driver = tokio::spawn(run(
        engine.clone(),
        Arc::new(Schedulers::new(vec![link])),
        ssntp_net::client::merge_timed(vec![rx]),
        Duration::from_secs(3600),
        stop.clone(),
    ));
    (tx, stop, driver)
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

mod actions;
mod boot;
mod cnci;
mod console;
mod ephemeral;
mod firewall;
mod frames;
mod launches;
mod lost;
mod nodes;
mod origin;
mod public_ip;
mod rebuild;
mod resize;
mod schedulers;
mod volumes;
