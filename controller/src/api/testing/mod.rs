//! Helpers for tests of the API, in this crate and beyond (the end-to-end tests reuse them):
//! [`FakeCluster`], a [`Cluster`] that only writes the store, and [`TestApi`], the API served
//! in-process on a loopback port with a bootstrapped admin.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

mod cli;

pub use cli::{CliAuth, OpenStackCli, find_openstack};

use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{
    ApiConfig, ApiState, Bootstrapped, ServeError, TokenSigner, bootstrap_with, router, serve_with,
};
use crate::actions::{self, ActionKind};
use crate::cluster::{
    BootVolume, Caller, Cluster, ClusterError, InstanceAction, Launch, Node, NodeStatus, Rebuild,
    ResizeStep, Trace, action_allowed, console_allowed, rebuild_allowed,
};
use store::{
    Fault, Instance, InstanceChange, InstanceState, Scope, Store, StoreError, Volume, VolumeStatus,
};

/// The bootstrapped admin's name.
pub const ADMIN_NAME: &str = "admin";
/// The bootstrapped admin's password.
pub const ADMIN_PASSWORD: &str = "admin-secret";
/// The bootstrapped admin's project.
pub const ADMIN_PROJECT: &str = "admin";
/// PBKDF2 rounds in tests (cheap; production uses the default).
pub const TEST_ITERATIONS: u32 = 1000;

/// A cluster that only writes the store: launched instances become active at once (unless
/// turned off), stop makes them exited, delete removes them (releasing their volumes, and
/// deleting those attached with `delete_on_termination`); nodes come from a list. Launches from
/// volumes attach them as the engine does (`in-use`, the root disk). Volumes attach `in-use` and detach `available` at once, under the rules of
/// [`crate::volumes`] (a server on no node takes them too). Each operation records its instance
/// action as the engine does, its controller event finished `Success` (no `node_start`: nothing
/// is sent anywhere).
pub struct FakeCluster {
    store: Arc<dyn Store>,
    auto_active: AtomicBool,
    connected: AtomicBool,
    nodes: Mutex<Vec<Node>>,
    /// Each node's figures, as [`FakeCluster::add_node`] gave them (one sample per call).
    history: Mutex<std::collections::HashMap<Uuid, Vec<crate::history::Sample>>>,
    traces: Mutex<Vec<Trace>>,
    /// The volumes whose data was removed, with their nodes, in order.
    removed_volume_data: Mutex<Vec<(Uuid, Uuid)>>,
}

impl FakeCluster {
    /// A connected fake over `store` with no nodes, activating launched instances.
    pub fn new(store: Arc<dyn Store>) -> FakeCluster {
        FakeCluster {
            store,
            auto_active: AtomicBool::new(true),
            connected: AtomicBool::new(true),
            nodes: Mutex::new(Vec::new()),
            history: Mutex::new(std::collections::HashMap::new()),
            traces: Mutex::new(Vec::new()),
            removed_volume_data: Mutex::new(Vec::new()),
        }
    }

    /// The (node, volume) pairs whose data [`Cluster::delete_volume_data`] removed, in order.
    pub fn removed_volume_data(&self) -> Vec<(Uuid, Uuid)> {
        self.removed_volume_data
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether launched instances become active at once (else they stay pending).
    pub fn set_auto_active(&self, on: bool) {
        self.auto_active.store(on, Ordering::SeqCst);
    }

    /// Whether [`Cluster::connected`] says so; while not, every instance operation fails with
    /// [`ClusterError::Unavailable`], as the engine's do without a scheduler.
    pub fn set_connected(&self, on: bool) {
        self.connected.store(on, Ordering::SeqCst);
    }

    /// Adds (or replaces) a node; its figures become a sample of its history.
    pub fn add_node(&self, node: Node) {
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(node.id)
            .or_default()
            .push(crate::history::Sample {
                at: std::time::SystemTime::now(),
                vcpus_used: node.vcpus_total.saturating_sub(node.vcpus_available),
                vcpus_total: node.vcpus_total,
                mem_used_mb: node.mem_total_mb.saturating_sub(node.mem_available_mb),
                mem_total_mb: node.mem_total_mb,
                load: node.load,
                instances: node.instances,
            });
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        nodes.retain(|n| n.id != node.id);
        nodes.push(node);
    }

    /// Adds a trace.
    pub fn add_trace(&self, trace: Trace) {
        self.traces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(trace);
    }

    /// Sets an instance's state, as an engine does when the cluster reports.
    pub fn set_state(&self, id: Uuid, state: InstanceState) -> Result<Instance, StoreError> {
        let instance = self.store.instance(Scope::All, id)?;
        self.store.update_instance(
            Scope::All,
            id,
            instance.version,
            InstanceChange {
                state: Some(state),
                ..InstanceChange::default()
            },
        )
    }

    /// Puts an instance in `error` with `fault` (its reason is the state's), as a fatal
    /// START_FAILURE does.
    pub fn fail(&self, id: Uuid, fault: Fault) -> Result<Instance, StoreError> {
        let instance = self.store.instance(Scope::All, id)?;
        self.store.update_instance(
            Scope::All,
            id,
            instance.version,
            InstanceChange {
                state: Some(InstanceState::Error(fault.reason.clone())),
                node: Some(None),
                fault: Some(Some(fault)),
                ..InstanceChange::default()
            },
        )
    }

    fn check_connected(&self) -> Result<(), ClusterError> {
        if self.connected.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(ClusterError::Unavailable(
                "the scheduler is not connected".into(),
            ))
        }
    }

    fn transition(
        &self,
        scope: Scope,
        id: Uuid,
        from: &[InstanceState],
        to: InstanceState,
        action: ActionKind,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        self.check_connected()?;
        let instance = self.store.instance(scope, id)?;
        let allowed = from
            .iter()
            .any(|s| std::mem::discriminant(s) == std::mem::discriminant(&instance.state));
        if !allowed {
            return Err(ClusterError::InvalidState {
                id,
                state: format!("{:?}", instance.state).to_lowercase(),
                operation: action.as_str(),
            });
        }
        let change = InstanceChange {
            state: Some(to),
            ..InstanceChange::default()
        };
        let ticket = self.begin(id, action, by);
        let changed = self
            .store
            .update_instance(scope, id, instance.version, change)
            .map_err(ClusterError::from);
        actions::finish(self.store.as_ref(), &ticket, actions::outcome_of(&changed));
        changed
    }

    fn begin(&self, id: Uuid, action: ActionKind, by: &Caller) -> actions::ActionTicket {
        let request_id = actions::request_id_of(by);
        actions::begin(self.store.as_ref(), &request_id, id, action, by)
    }

    /// What every launch checks first: connected, the tenant in `scope`, a count in bounds.
    fn check_launch(&self, scope: Scope, launch: &Launch) -> Result<(), ClusterError> {
        self.check_connected()?;
        if !scope.owns(Some(launch.tenant)) {
            return Err(StoreError::not_found("tenant", launch.tenant).into());
        }
        if launch.count == 0 || launch.count > Launch::MAX_COUNT {
            return Err(ClusterError::Invalid(format!("count {}", launch.count)));
        }
        Ok(())
    }

    /// One instance of `launch` in the store, as the engine makes it.
    fn new_instance(&self, launch: &Launch) -> Result<Instance, ClusterError> {
        Ok(launch.make_instance(self.store.as_ref())?)
    }

    /// A new instance's `create` action, and the instance active (unless turned off).
    fn launched(
        &self,
        instance: Instance,
        request_id: &str,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        let ticket = actions::begin(
            self.store.as_ref(),
            request_id,
            instance.id,
            ActionKind::Create,
            by,
        );
        actions::finish(self.store.as_ref(), &ticket, store::EventOutcome::success());
        Ok(if self.auto_active.load(Ordering::SeqCst) {
            self.set_state(instance.id, InstanceState::Active)?
        } else {
            instance
        })
    }

    /// A new instance of `launch` booted from `volume` (attached as its root disk, `in-use`),
    /// launched as [`FakeCluster::launched`] says.
    fn boot_launched(
        &self,
        launch: &Launch,
        volume: &Volume,
        delete_on_termination: bool,
        request_id: &str,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        let instance = self.new_instance(launch)?;
        crate::volumes::begin_boot(
            self.store.as_ref(),
            volume,
            instance.id,
            delete_on_termination,
        )?;
        self.launched(instance, request_id, by)
    }

    /// Removes the volumes that went with their instance (`deleting`: attached with
    /// `delete_on_termination`), their data first where a node holds it.
    fn remove_going(&self, released: &[Volume]) -> Result<(), ClusterError> {
        for v in released
            .iter()
            .filter(|v| v.status == VolumeStatus::Deleting)
        {
            crate::volumes::remove_volume(self.store.as_ref(), Scope::All, v, |node, id| {
                self.delete_volume_data(node, id)
            })?;
        }
        Ok(())
    }

    fn set_node_status(&self, id: Uuid, status: NodeStatus) -> Result<(), ClusterError> {
        let mut nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let node = nodes
            .iter_mut()
            .find(|n| n.id == id)
            .ok_or(ClusterError::NoNode(id))?;
        node.status = status;
        Ok(())
    }
}

impl Cluster for FakeCluster {
    fn launch(
        &self,
        scope: Scope,
        launch: Launch,
        by: &Caller,
    ) -> Result<Vec<Instance>, ClusterError> {
        self.check_launch(scope, &launch)?;
        if launch.name.trim().is_empty() {
            return Err(ClusterError::Invalid("an empty name".into()));
        }
        // The engine's cap, where nodes were given.
        if !self.nodes().is_empty() {
            let workload = self.store.workload(scope, launch.workload)?;
            let flavor = self.store.flavor(Scope::All, workload.flavor)?;
            if let Some(capacity) = self.capacity(&flavor)?
                && u64::from(launch.count) > capacity
            {
                return Err(ClusterError::OverCapacity {
                    requested: launch.count,
                    capacity,
                });
            }
        }
        let mut made = Vec::new();
        let request_id = actions::request_id_of(by);
        for _ in 0..launch.count {
            let instance = self.new_instance(&launch)?;
            made.push(self.launched(instance, &request_id, by)?);
        }
        Ok(made)
    }

    /// As the engine's: the volume attached to each instance as its root disk (`in-use`), an
    /// existing one (the node that holds it must be one of the fake's, connected) or one made
    /// from the workload's image per instance; nothing is sent anywhere.
    fn launch_from_volume(
        &self,
        scope: Scope,
        launch: Launch,
        boot: BootVolume,
        by: &Caller,
    ) -> Result<Vec<Instance>, ClusterError> {
        self.check_launch(scope, &launch)?;
        let workload = self
            .store
            .workload(Scope::Tenant(launch.tenant), launch.workload)?;
        let request_id = actions::request_id_of(by);
        let mut made = Vec::new();
        match boot {
            BootVolume::Volume {
                id,
                delete_on_termination,
            } => {
                if launch.count != 1 {
                    return Err(ClusterError::Invalid(
                        "Cannot attach one or more volumes to multiple instances".into(),
                    ));
                }
                let volume = crate::volumes::plan_boot(self.store.as_ref(), launch.tenant, id)?;
                if volume.image != Some(workload.image) {
                    return Err(ClusterError::Invalid(format!(
                        "volume {id} was not made from the workload's image"
                    )));
                }
                if let Some(node) = volume.node
                    && !self
                        .nodes()
                        .iter()
                        .any(|n| n.id == node && n.status != NodeStatus::Disconnected)
                {
                    return Err(ClusterError::Conflict(format!(
                        "volume {id} is on node {node} (its file is there), which is not \
                         connected: a server booted from it can only run on that node"
                    )));
                }
                made.push(self.boot_launched(
                    &launch,
                    &volume,
                    delete_on_termination,
                    &request_id,
                    by,
                )?);
            }
            BootVolume::Image {
                size_gb,
                delete_on_termination,
                limits,
            } => {
                for _ in 0..launch.count {
                    let volume = self.store.create_volume(
                        store::NewVolume {
                            owner: launch.tenant,
                            name: String::new(),
                            description: String::new(),
                            size_gb,
                            image: Some(workload.image),
                            bootable: true,
                        },
                        limits,
                    )?;
                    made.push(self.boot_launched(
                        &launch,
                        &volume,
                        delete_on_termination,
                        &request_id,
                        by,
                    )?);
                }
            }
        }
        Ok(made)
    }

    fn capacity(&self, flavor: &store::Flavor) -> Result<Option<u64>, ClusterError> {
        let nodes = self.nodes();
        let nodes: Vec<&Node> = nodes.iter().collect();
        Ok(crate::capacity::capacity(&nodes, flavor))
    }

    fn stop(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<Instance, ClusterError> {
        self.transition(
            scope,
            id,
            &[InstanceState::Active],
            InstanceState::Exited,
            ActionKind::Stop,
            by,
        )
    }

    fn start(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<Instance, ClusterError> {
        let from = [
            InstanceState::Exited,
            InstanceState::Missing,
            InstanceState::Error(String::new()),
        ];
        self.transition(
            scope,
            id,
            &from,
            InstanceState::Active,
            ActionKind::Start,
            by,
        )
    }

    fn act(
        &self,
        scope: Scope,
        id: Uuid,
        action: InstanceAction,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        // As a node would report it after the action.
        let to = match action {
            InstanceAction::Pause => InstanceState::Paused,
            InstanceAction::Suspend => InstanceState::Suspended,
            _ => InstanceState::Active,
        };
        let current = self.store.instance(scope, id)?.state;
        let from: &[InstanceState] = if action_allowed(action, &current) {
            std::slice::from_ref(&current)
        } else {
            &[]
        };
        let kind = ActionKind::of_instance_action(action)
            .ok_or_else(|| ClusterError::Invalid("unknown action".into()))?;
        self.transition(scope, id, from, to, kind, by)
    }

    fn rebuild(
        &self,
        scope: Scope,
        id: Uuid,
        rebuild: Rebuild,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        // Left rebuilding, as until a node reports it running again.
        let current = self.store.instance(scope, id)?.state;
        let from: &[InstanceState] = if rebuild_allowed(&current) {
            std::slice::from_ref(&current)
        } else {
            &[]
        };
        let rebuilding = self.transition(
            scope,
            id,
            from,
            InstanceState::Rebuilding,
            ActionKind::Rebuild,
            by,
        )?;
        let change = InstanceChange {
            workload: Some(rebuild.workload),
            name: rebuild.name,
            ..InstanceChange::default()
        };
        Ok(self
            .store
            .update_instance(scope, id, rebuilding.version, change)?)
    }

    fn resize(
        &self,
        scope: Scope,
        id: Uuid,
        step: ResizeStep,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        self.check_connected()?;
        crate::resize::apply(self.store.as_ref(), scope, id, step, by)
    }

    fn delete(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<(), ClusterError> {
        self.check_connected()?;
        let instance = self.store.instance(scope, id)?;
        let released = crate::volumes::release_instance(
            self.store.as_ref(),
            &instance,
            crate::volumes::Release::Gone,
        )?;
        let ticket = self.begin(id, ActionKind::Delete, by);
        let deleted = self
            .store
            .delete_instance(scope, id)
            .map_err(ClusterError::from);
        actions::finish(self.store.as_ref(), &ticket, actions::outcome_of(&deleted));
        deleted?;
        self.remove_going(&released)
    }

    /// A log of three lines, the last the tiny guest's marker; `Unavailable` while the fake is
    /// disconnected (as an unreachable node).
    fn console(&self, scope: Scope, id: Uuid, lines: usize) -> Result<String, ClusterError> {
        let instance = self.store.instance(scope, id)?;
        if !console_allowed(&instance.state) {
            return Err(ClusterError::InvalidState {
                id,
                state: instance.state.name().to_string(),
                operation: "show its console log (it is on no node)",
            });
        }
        self.check_connected()?;
        let log = [
            format!("fake console of instance {id}"),
            "booting".to_string(),
            format!("CUMULO-GUEST-UP {id}"),
        ];
        let skip = log.len().saturating_sub(lines);
        Ok(log[skip..].iter().map(|line| format!("{line}\n")).collect())
    }

    fn attach_volume(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        device: Option<String>,
        by: &Caller,
    ) -> Result<Volume, ClusterError> {
        self.check_connected()?;
        let plan = crate::volumes::plan_attach(
            self.store.as_ref(),
            scope,
            server,
            volume,
            device.as_deref(),
        )?;
        let ticket = self.begin(server, ActionKind::AttachVolume, by);
        let attached = crate::volumes::begin_attach(
            self.store.as_ref(),
            &plan,
            VolumeStatus::InUse,
            plan.instance.node,
        );
        actions::finish(self.store.as_ref(), &ticket, actions::outcome_of(&attached));
        attached
    }

    fn detach_volume(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        by: &Caller,
    ) -> Result<Volume, ClusterError> {
        self.check_connected()?;
        crate::volumes::plan_detach(self.store.as_ref(), scope, server, volume)?;
        let ticket = self.begin(server, ActionKind::DetachVolume, by);
        let detached = crate::volumes::begin_detach(
            self.store.as_ref(),
            volume,
            VolumeStatus::InUse,
            VolumeStatus::Available,
        );
        actions::finish(self.store.as_ref(), &ticket, actions::outcome_of(&detached));
        detached
    }

    /// Recorded ([`FakeCluster::removed_volume_data`]); `Unavailable` while not connected (a
    /// node that cannot be reached).
    fn delete_volume_data(&self, node: Uuid, volume: Uuid) -> Result<(), ClusterError> {
        self.check_connected()?;
        self.removed_volume_data
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((node, volume));
        Ok(())
    }

    fn force_detach_volume(&self, volume: Uuid, _by: &Caller) -> Result<Volume, ClusterError> {
        self.check_connected()?;
        let current = self.store.volume(Scope::All, volume)?;
        let instance = current.attachment.map(|a| a.instance).ok_or_else(|| {
            ClusterError::Conflict(format!("volume {volume} is attached to nothing"))
        })?;
        let released = crate::volumes::release(self.store.as_ref(), volume, instance)?
            .ok_or_else(|| ClusterError::Conflict(format!("volume {volume} changed meanwhile")))?;
        self.remove_going(std::slice::from_ref(&released))?;
        Ok(released)
    }

    fn nodes(&self) -> Vec<Node> {
        self.nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn node(&self, id: Uuid) -> Result<Node, ClusterError> {
        self.nodes()
            .into_iter()
            .find(|n| n.id == id)
            .ok_or(ClusterError::NoNode(id))
    }

    fn node_history(&self, id: Uuid) -> Result<Vec<crate::history::Sample>, ClusterError> {
        self.node(id)?;
        Ok(self
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
            .unwrap_or_default())
    }

    fn evacuate(&self, id: Uuid) -> Result<(), ClusterError> {
        self.set_node_status(id, NodeStatus::Maintenance)
    }

    fn restore(&self, id: Uuid) -> Result<(), ClusterError> {
        self.set_node_status(id, NodeStatus::Ready)
    }

    fn disable_node(
        &self,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<store::DisabledNode, ClusterError> {
        Ok(self.store.disable_node(id, reason)?)
    }

    fn enable_node(&self, id: Uuid) -> Result<bool, ClusterError> {
        Ok(self.store.enable_node(id)?)
    }

    fn traces(&self) -> Vec<Trace> {
        self.traces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn connected(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }
}

/// The API served in-process on `127.0.0.1:<free port>`, with the dashboard beside it as the
/// daemon serves it, and the admin bootstrapped
/// ([`ADMIN_NAME`], [`ADMIN_PASSWORD`], [`ADMIN_PROJECT`]). Stop it with [`TestApi::stop`].
pub struct TestApi {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its public URL (`http://127.0.0.1:PORT` or `https://...`).
    pub url: String,
    /// Its state (store, cluster, signer).
    pub state: ApiState,
    /// The admin user and project.
    pub admin: Bootstrapped,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ServeError>>,
    /// Where uploaded image data goes (removed with the server).
    _images: tempfile::TempDir,
}

impl TestApi {
    /// Serves the API over `store` and `cluster`, over TLS when `tls` is given.
    pub async fn start(
        store: Arc<dyn Store>,
        cluster: Arc<dyn Cluster>,
        tls: Option<Arc<ServerConfig>>,
    ) -> Result<TestApi, String> {
        TestApi::start_with(store, cluster, tls, |_| {}).await
    }

    /// As [`TestApi::start`], letting `tune` change the configuration first.
    pub async fn start_with(
        store: Arc<dyn Store>,
        cluster: Arc<dyn Cluster>,
        tls: Option<Arc<ServerConfig>>,
        tune: impl FnOnce(&mut ApiConfig),
    ) -> Result<TestApi, String> {
        let signer = TokenSigner::random(super::token::DEFAULT_TTL).map_err(|e| e.to_string())?;
        TestApi::start_signed(store, cluster, tls, signer, tune).await
    }

    /// As [`TestApi::start_with`], signing tokens with `signer`: several APIs given signers
    /// with one key accept each other's tokens, as controllers sharing a key file do.
    pub async fn start_signed(
        store: Arc<dyn Store>,
        cluster: Arc<dyn Cluster>,
        tls: Option<Arc<ServerConfig>>,
        signer: TokenSigner,
        tune: impl FnOnce(&mut ApiConfig),
    ) -> Result<TestApi, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{}", addr.port());
        let mut config = ApiConfig::new(url.clone());
        config.password_iterations = TEST_ITERATIONS;
        let images = tempfile::tempdir().map_err(|e| e.to_string())?;
        config.images = Some(Arc::new(
            crate::images::LocalBlobs::open(images.path()).map_err(|e| e.to_string())?,
        ));
        tune(&mut config);
        let boot_store = store.clone();
        let admin = tokio::task::spawn_blocking(move || {
            bootstrap_with(
                boot_store.as_ref(),
                ADMIN_NAME,
                ADMIN_PASSWORD,
                ADMIN_PROJECT,
                TEST_ITERATIONS,
            )
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let limits = config.connections;
        let state = ApiState::new(store, cluster, signer, config);
        let shutdown = CancellationToken::new();
        let secure = tls.is_some();
        let task = tokio::spawn(serve_with(
            listener,
            tls,
            crate::ui::dashboard(router(state.clone()), secure),
            shutdown.clone(),
            limits,
        ));
        Ok(TestApi {
            addr,
            url,
            state,
            admin,
            shutdown,
            task,
            _images: images,
        })
    }

    /// Stops serving and waits for the server to finish.
    pub async fn stop(self) -> Result<(), String> {
        self.shutdown.cancel();
        self.task
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }
}
