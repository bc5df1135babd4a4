//! What the REST API asks of the cluster: the operations that change instances and nodes, which
//! need both the store and the scheduler, behind one narrow trait.
//!
//! The SSNTP-backed implementation is the controller's engine; tests of the API may use a fake
//! that only writes the store. Reads that need no cluster (tenants, flavors, images, workloads,
//! instances, CNCIs, events, quotas) go to the [`Store`](store::Store) directly.
//!
//! The trait is synchronous: every call is a few store transactions and a non-blocking queueing
//! of frames. Async callers use `spawn_blocking`.

use std::net::{IpAddr, Ipv4Addr};
use std::time::SystemTime;
use uuid::Uuid;

use store::{
    Flavor, Instance, InstanceKey, InstanceState, Scope, StoreError, Volume, VolumeLimits,
};

/// How the store took an instance's action: the action as recorded, or why not.
pub type Recorded = Result<store::InstanceAction, StoreError>;

/// What a launch asks for: `count` instances of a workload in a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The tenant the instances belong to (must be the scope's tenant unless the scope is `All`).
    pub tenant: Uuid,
    /// A workload the tenant can see.
    pub workload: Uuid,
    /// The instances' name (every instance of the launch gets it, as OpenStack does).
    pub name: String,
    /// How many (1..=[`Launch::MAX_COUNT`]).
    pub count: u32,
    /// The SSH key every instance of the launch gets (its `public-keys` meta data), if any.
    pub key: Option<InstanceKey>,
    /// The security groups of every instance's port (the tenant's, checked by the caller);
    /// empty: the tenant's `default` group. Set before the instances' STARTs go, so that each
    /// carries its port's firewall.
    pub groups: Vec<Uuid>,
    /// The user metadata every instance of the launch gets ([`store::Instance::check_metadata`]).
    pub metadata: store::Metadata,
    /// The user who asks for it, if a user does (the instances' `user_id`).
    pub user: Option<Uuid>,
    /// The server group every instance of the launch joins (the tenant's, checked by the
    /// caller), before its START goes, so that the START carries the group's placement.
    pub server_group: Option<Uuid>,
    /// The availability zone every instance of the launch must run in, if one was asked for
    /// (one the cluster's nodes are in, checked by the caller).
    pub zone: Option<String>,
    /// The reservation id every instance of the launch keeps (Nova's `reservation_id`:
    /// [`store::Instance::new_reservation`] makes one).
    pub reservation: String,
}

impl Launch {
    /// The most instances one launch may ask for.
    pub const MAX_COUNT: u32 = 1000;

    /// One instance of the launch in `store` (quota-checked), with its port's security groups,
    /// in its server group. An instance that cannot join its server group (deleted since the
    /// caller checked it, or full) is deleted again and the error returned; a security group
    /// deleted since leaves the port in `default`.
    pub fn make_instance(&self, store: &dyn store::Store) -> Result<Instance, store::StoreError> {
        self.make(store, None).map(|(instance, _)| instance)
    }

    /// [`Launch::make_instance`], with its first action `action` recorded (its `instance` is
    /// ignored): in the instance's own transaction where the store can, after it has joined
    /// its server group when the launch names one. Second of the pair: how the action's record
    /// went.
    pub fn make_instance_with(
        &self,
        store: &dyn store::Store,
        action: store::NewInstanceAction,
    ) -> Result<(Instance, Recorded), StoreError> {
        let (instance, recorded) = self.make(store, Some(action))?;
        let recorded = recorded
            .unwrap_or_else(|| Err(StoreError::Backend("the action was not recorded".into())));
        Ok((instance, recorded))
    }

    /// Every instance of the launch (`count`), each as [`Launch::make_instance_with`] makes one,
    /// in order, stopping at the first that cannot be made: those made, and why it stopped. A
    /// launch that joins no server group has its instances made together where the store can
    /// ([`store::ActionStore::create_instances_with_action`]: etcd, several to a transaction).
    pub fn make_instances_with(
        &self,
        store: &dyn store::Store,
        action: store::NewInstanceAction,
    ) -> (Vec<(Instance, Recorded)>, Option<StoreError>) {
        if self.server_group.is_some() {
            let mut made = Vec::with_capacity(self.count as usize);
            for _ in 0..self.count {
                match self.make_instance_with(store, action.clone()) {
                    Ok(pair) => made.push(pair),
                    Err(e) => return (made, Some(e)),
                }
            }
            return (made, None);
        }
        let (made, stopped) =
            store.create_instances_with_action(&self.new_instance(), self.count, &action);
        for (instance, _) in &made {
            self.join_security_groups(store, instance);
        }
        (made, stopped)
    }

    /// What the store makes for each instance of the launch.
    fn new_instance(&self) -> store::NewInstance {
        store::NewInstance {
            tenant: self.tenant,
            workload: self.workload,
            name: self.name.clone(),
            key: self.key.clone(),
            metadata: self.metadata.clone(),
            user: self.user,
            reservation: Some(self.reservation.clone()),
            zone: self.zone.clone(),
        }
    }

    /// A new instance's port into the launch's security groups (none asked: `default`, as
    /// made); one deleted since leaves the port in `default`.
    fn join_security_groups(&self, store: &dyn store::Store, instance: &Instance) {
        if !self.groups.is_empty()
            && let Err(e) = store.set_port_groups(self.tenant, instance.id, &self.groups)
        {
            tracing::warn!(instance = %instance.id, error = %e,
                "the instance's security groups could not be set");
        }
    }

    fn make(
        &self,
        store: &dyn store::Store,
        action: Option<store::NewInstanceAction>,
    ) -> Result<(Instance, Option<Recorded>), StoreError> {
        let new = self.new_instance();
        // An instance that must join a group is undone if it cannot: its action waits for that.
        let (instance, mut recorded, later) = match action {
            Some(action) if self.server_group.is_none() => {
                let (instance, recorded) = store.create_instance_with_action(new, action)?;
                (instance, Some(recorded), None)
            }
            later => (store.create_instance(new)?, None, later),
        };
        self.join_security_groups(store, &instance);
        if let Some(group) = self.server_group
            && let Err(e) =
                store.add_server_group_member(Scope::Tenant(self.tenant), group, instance.id)
        {
            if let Err(undo) = store.delete_instance(Scope::All, instance.id) {
                tracing::warn!(instance = %instance.id, error = %undo,
                    "an instance that could not join its server group was not deleted");
            }
            return Err(e);
        }
        if let Some(action) = later {
            recorded = Some(store.add_instance_action(store::NewInstanceAction {
                instance: instance.id,
                ..action
            }));
        }
        Ok((instance, recorded))
    }
}

/// The volume a launch's instances boot from ([`Cluster::launch_from_volume`]; Compute's block
/// device mapping with `destination_type: volume`, `boot_index: 0`): their root disk, attached as
/// `/dev/vda` ([`crate::volumes::ROOT_DEVICE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootVolume {
    /// An existing volume of the launch's tenant (`source_type: volume`): `available` and
    /// bootable (made from an image, whose image the launch's workload names). One instance only.
    Volume {
        /// The volume.
        id: Uuid,
        /// Whether it is deleted with the instance rather than detached.
        delete_on_termination: bool,
    },
    /// A new volume for each instance (`source_type: image`), made from the launch's workload's
    /// image and named as Nova names them (empty).
    Image {
        /// Its size, GiB.
        size_gb: u32,
        /// Whether it is deleted with its instance rather than detached.
        delete_on_termination: bool,
        /// The tenant's volume limits, checked as each volume is made.
        limits: VolumeLimits,
    },
}

/// A trace's label, as a request names it (`X-Cumulo-Trace`, `cumulo instance create
/// --trace`): 1 to [`TraceLabel::MAX`] printable ASCII characters. Kept inline (no allocation)
/// so that a [`Caller`] stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceLabel {
    len: u8,
    bytes: [u8; TraceLabel::MAX],
}

impl TraceLabel {
    /// The longest label, in bytes.
    pub const MAX: usize = 48;

    /// `text` as a label, if it is one (1 to [`TraceLabel::MAX`] printable ASCII characters,
    /// spaces allowed inside).
    pub fn new(text: &str) -> Option<TraceLabel> {
        let text = text.trim();
        let ok = !text.is_empty()
            && text.len() <= TraceLabel::MAX
            && text.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
        if !ok {
            return None;
        }
        let mut bytes = [0u8; TraceLabel::MAX];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Some(TraceLabel {
            len: u8::try_from(text.len()).ok()?,
            bytes,
        })
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl std::fmt::Debug for TraceLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// Who asks the cluster to act on instances: recorded with the instance actions the request
/// starts (see [`crate::actions`]). `Caller::default()` is nobody in particular: the admin
/// client certificate, or the controller itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Caller {
    /// The user, for a token login.
    pub user: Option<Uuid>,
    /// The project the user's token is scoped to.
    pub project: Option<Uuid>,
    /// The API request that asks (`req-` and this UUID, its `X-OpenStack-Request-Id`): the
    /// instance actions it starts take that request id.
    pub request: Option<Uuid>,
    /// The label of the trace the request asked for: the STARTs it sends are traced.
    pub trace: Option<TraceLabel>,
}

/// Why a cluster operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The store refused (not found, quota, conflict, invalid input) or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The instance is in a state that does not allow the operation (stop an exited instance).
    #[error("instance {id} is {state}: cannot {operation}")]
    InvalidState {
        /// The instance.
        id: Uuid,
        /// Its state, as text.
        state: String,
        /// What was asked.
        operation: &'static str,
    },
    /// No such node.
    #[error("node {0} not found")]
    NoNode(Uuid),
    /// The request is not acceptable (a count of 0, an empty name).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The scheduler is not connected or the controller's outbound queue is full, or a node
    /// cannot be reached: try again.
    #[error("cluster unavailable: {0}")]
    Unavailable(String),
    /// A launch asks for more instances than the connected compute nodes could hold at all
    /// (their total memory, disk and vCPUs, from their STATS): refused before any is created.
    #[error(
        "Quota exceeded for instances: requested {requested}, but the cluster's nodes can hold \
         at most {capacity} of this size"
    )]
    OverCapacity {
        /// How many were asked for.
        requested: u32,
        /// How many the nodes could hold.
        capacity: u64,
    },
    /// What was asked cannot be done for this instance at all (an off-host instance's console
    /// log).
    #[error("{0}")]
    NotAvailable(String),
    /// What was asked conflicts with the state of an object other than the instance (a volume
    /// that is not available, pinned to another node, a device in use).
    #[error("{0}")]
    Conflict(String),
}

/// What a node is to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NodeKinds {
    /// It runs tenant instances (NODE_CONNECTED `compute_node`).
    pub compute: bool,
    /// It runs CNCIs (NODE_CONNECTED `network_node`). Both: a dual-role node.
    pub network: bool,
}

/// A node's status as the controller knows it (in the native API: `as_str`'s lower-case text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    /// Connected and taking work.
    Ready,
    /// Connected, out of room.
    Full,
    /// Connected, evacuated or in maintenance.
    Maintenance,
    /// Connected, going away.
    Offline,
    /// Not connected (it was, earlier).
    Disconnected,
}

impl NodeStatus {
    /// The status as lower-case text (`ready`, `full`, `maintenance`, `offline`, `disconnected`).
    pub fn as_str(&self) -> &'static str {
        match self {
            NodeStatus::Ready => "ready",
            NodeStatus::Full => "full",
            NodeStatus::Maintenance => "maintenance",
            NodeStatus::Offline => "offline",
            NodeStatus::Disconnected => "disconnected",
        }
    }
}

/// One node (compute, network or dual), from NODE_CONNECTED/DISCONNECTED and its latest STATS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its UUID (its SSNTP session's).
    pub id: Uuid,
    /// What it is.
    pub kinds: NodeKinds,
    /// Its status.
    pub status: NodeStatus,
    /// Its host name (empty until its first STATS).
    pub hostname: String,
    /// Its availability zone ([`ssntp::payload::DEFAULT_ZONE`] until its first STATS, or when
    /// it names none).
    pub zone: String,
    /// Memory in all, MiB.
    pub mem_total_mb: u32,
    /// Memory free, MiB.
    pub mem_available_mb: u32,
    /// Disk in all, MiB.
    pub disk_total_mb: u32,
    /// Disk free, MiB.
    pub disk_available_mb: u32,
    /// vCPUs in all.
    pub vcpus_total: u32,
    /// vCPUs free.
    pub vcpus_available: u32,
    /// One-minute load × 100.
    pub load: u32,
    /// Instances it reported in its latest STATS.
    pub instances: u32,
    /// Its addresses.
    pub ips: Vec<IpAddr>,
    /// When it (last) connected.
    pub connected: SystemTime,
    /// When its latest STATS arrived.
    pub last_stats: Option<SystemTime>,
}

/// One finished frame trace (TRACE_REPORT), kept in a bounded ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The trace's label.
    pub label: String,
    /// The frame's type byte and operand, as text (`COMMAND START`).
    pub frame: String,
    /// Nanoseconds from the creator's send to the final consumer.
    pub total_ns: u64,
    /// Each hop: the sender's UUID, role, and send/receive times (ns since the epoch).
    pub hops: Vec<TraceHop>,
}

/// One hop of a [`Trace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHop {
    /// The sender's UUID.
    pub uuid: Uuid,
    /// The sender's role, as text.
    pub role: String,
    /// When it was sent, ns since the epoch.
    pub tx_ns: u64,
    /// When the next hop received it, ns since the epoch (0 if unknown).
    pub rx_ns: u64,
}

pub use ssntp::payload::Action as InstanceAction;

/// What a rebuild asks for: the instance re-made on its node from `workload` (its own, or one
/// of the same flavor with another image or other user data), optionally renamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    /// The workload to re-make the instance from.
    pub workload: Uuid,
    /// A new name.
    pub name: Option<String>,
}

/// A step of a resize (of a stopped instance, on its node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeStep {
    /// To this workload (the instance's image and user data with another flavor).
    To(Uuid),
    /// Keep the new flavor.
    Confirm,
    /// Back to the flavor it had.
    Revert,
}

/// Whether an instance in `state` can be rebuilt: active or stopped (on its node).
pub fn rebuild_allowed(state: &InstanceState) -> bool {
    matches!(state, InstanceState::Active | InstanceState::Exited)
}

/// Whether an instance in `state` can take `action`: reboots and pause when active, unpause
/// when paused, suspend when active or paused, resume when suspended.
pub fn action_allowed(action: InstanceAction, state: &InstanceState) -> bool {
    matches!(
        (action, state),
        (
            InstanceAction::Reboot | InstanceAction::RebootHard | InstanceAction::Pause,
            InstanceState::Active
        ) | (InstanceAction::Unpause, InstanceState::Paused)
            | (
                InstanceAction::Suspend,
                InstanceState::Active | InstanceState::Paused
            )
            | (InstanceAction::Resume, InstanceState::Suspended)
    )
}

/// The most console log lines one request may ask for (the node serves at most this many, and
/// at most 1 MiB of its log's tail).
pub const CONSOLE_MAX_LINES: usize = 10_000;

/// Whether an instance in `state` may have its console log fetched, when it is on a node: a
/// node holds it (pending there, active, stopping, exited, paused or suspended).
pub fn console_allowed(state: &InstanceState) -> bool {
    matches!(
        state,
        InstanceState::Pending
            | InstanceState::Active
            | InstanceState::Stopping
            | InstanceState::Exited
            | InstanceState::Paused
            | InstanceState::Suspended
    )
}

/// A node's endpoint, as the controller dials it.
#[derive(Clone)]
pub struct NodeEndpoint {
    /// The node (its certificate must bind it, when it binds a UUID).
    pub node: Uuid,
    /// Where its endpoint listens.
    pub addr: std::net::SocketAddr,
    /// The controller's identity to dial with.
    pub tls: ssntp_net::TlsIdentity,
}

impl std::fmt::Debug for NodeEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeEndpoint")
            .field("node", &self.node)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// The cluster operations the API needs. See the module docs.
pub trait Cluster: Send + Sync {
    /// Creates `count` instances (each quota-checked, in state `pending`) and sends their STARTs.
    /// A quota or address exhaustion part-way keeps the instances created before it and fails.
    /// Each instance gets a `create` action for `by`, all with one request identifier.
    fn launch(
        &self,
        scope: Scope,
        launch: Launch,
        by: &Caller,
    ) -> Result<Vec<Instance>, ClusterError>;
    /// Launches as [`Cluster::launch`] does, each instance booting from a volume (`boot`): the
    /// volume attached to it as `/dev/vda` (`in-use` from the start, its `node` set when the node
    /// reports it), its START carrying the volume as its boot `storage` and the volume's image
    /// (the launch's workload's), pinned to the node that holds the volume's file, if one does
    /// (`Conflict` when that node is not connected). An existing volume takes one instance
    /// (`Invalid` for more); an image makes one volume per instance (a volume quota reached
    /// part-way stops the launch as the instance quota does). A cluster that cannot is
    /// `NotAvailable`.
    fn launch_from_volume(
        &self,
        scope: Scope,
        launch: Launch,
        boot: BootVolume,
        by: &Caller,
    ) -> Result<Vec<Instance>, ClusterError> {
        let _ = (scope, launch, boot, by);
        Err(ClusterError::NotAvailable(
            "this cluster cannot boot servers from volumes".into(),
        ))
    }
    /// How many instances of `flavor` the cluster could hold at all, empty or not (what
    /// [`Cluster::launch`] refuses beyond, with [`ClusterError::OverCapacity`]); `None` when it
    /// does not know (no compute node has reported its size, or off-host hosts take instances).
    fn capacity(&self, flavor: &Flavor) -> Result<Option<u64>, ClusterError> {
        let _ = flavor;
        Ok(None)
    }
    /// Stops an active instance (state `stopping`, then `exited` when the node confirms); a
    /// `stop` action for `by`.
    fn stop(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<Instance, ClusterError>;
    /// Starts an exited instance again: on the node that keeps it (from its disks), or, if
    /// it is on no node (failed, never placed), wherever the scheduler places it; a `start`
    /// action for `by`.
    fn start(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<Instance, ClusterError>;
    /// Reboots an active instance on its node (an orderly reboot; same disks); a `reboot`
    /// action for `by`.
    fn reboot(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<Instance, ClusterError> {
        self.act(scope, id, InstanceAction::Reboot, by)
    }
    /// Carries out an action on an instance on its node (reboot, hard reboot, pause, unpause,
    /// suspend, resume), when its state allows it ([`action_allowed`]); its new state shows
    /// once its node reports it. An action of its name for `by`.
    fn act(
        &self,
        scope: Scope,
        id: Uuid,
        action: InstanceAction,
        by: &Caller,
    ) -> Result<Instance, ClusterError>;
    /// Rebuilds an active or stopped instance on its node (state `rebuilding`): its disk removed
    /// (DELETE, `stop` false), then made anew from the workload's image (a START pinned to the
    /// node); `active` once the node reports it running. A `rebuild` action for `by`.
    fn rebuild(
        &self,
        scope: Scope,
        id: Uuid,
        rebuild: Rebuild,
        by: &Caller,
    ) -> Result<Instance, ClusterError>;
    /// Resizes a stopped instance on its node (see [`crate::resize`]): no frame is sent; its
    /// next start boots it with the new resources. A `resize`, `confirmResize` or
    /// `revertResize` action for `by`.
    fn resize(
        &self,
        scope: Scope,
        id: Uuid,
        step: ResizeStep,
        by: &Caller,
    ) -> Result<Instance, ClusterError>;
    /// Deletes an instance: state `deleted` until its node confirms (`hung` if it never does);
    /// an instance on no node (never placed, or failed) goes at once. A `delete` action for
    /// `by` (none when the instance is being deleted already).
    fn delete(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<(), ClusterError>;
    /// The last `lines` lines (at most [`CONSOLE_MAX_LINES`]) of the instance's serial console
    /// log, fetched from its node (on a node and [`console_allowed`], else `InvalidState`): blocking, for at
    /// most a few seconds; `Unavailable` with the cause when the node cannot be reached,
    /// `NotAvailable` for an off-host instance.
    fn console(&self, scope: Scope, id: Uuid, lines: usize) -> Result<String, ClusterError>;
    /// Where the disk of instance `id` is copied from now, for a snapshot (`createImage`): its
    /// node's endpoint. `InvalidState` unless it is active, stopped, paused or suspended on a
    /// node; a cluster without node endpoints says so.
    fn disk_source(&self, scope: Scope, id: Uuid) -> Result<NodeEndpoint, ClusterError> {
        let _ = (scope, id);
        Err(ClusterError::NotAvailable(
            "this cluster cannot copy instance disks".into(),
        ))
    }
    /// Attaches volume `volume` (of the server's tenant) to server `server` (visible in `scope`)
    /// as `device` (`vdb`..`vdz`, as [`crate::volumes::device_name`] gives it; `None`: the first
    /// free), under the rules of [`crate::volumes`]: the volume `attaching` with its new
    /// attachment, ATTACH_VOLUME sent to the server's node, `in-use` when the node's STATS lists
    /// it. An `attach_volume` action for `by`.
    fn attach_volume(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        device: Option<String>,
        by: &Caller,
    ) -> Result<Volume, ClusterError>;
    /// Detaches volume `volume`, `in-use`, from server `server` (visible in `scope`): the volume
    /// `detaching`, DETACH_VOLUME sent to the server's node, `available` when the node's STATS no
    /// longer lists it. A `detach_volume` action for `by`.
    fn detach_volume(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        by: &Caller,
    ) -> Result<Volume, ClusterError>;
    /// Detaches volume `volume` (any tenant's) from whatever it is attached to, in any status
    /// (an admin's recovery, Cinder's `os-force_detach`): a DETACH_VOLUME with `force` to the
    /// server's node (`detaching` until its STATS no longer lists it), or at once `available`
    /// when the server is on no node or gone. `Conflict` for a volume attached to nothing.
    fn force_detach_volume(&self, volume: Uuid, by: &Caller) -> Result<Volume, ClusterError>;
    /// Removes volume `volume`'s data from node `node`, the node that holds it (the node
    /// endpoint's `DELETE /v1/volumes/{id}`), before the volume's record goes. Blocking: called
    /// from a blocking thread. A cluster that keeps no volume data on nodes has nothing to do.
    fn delete_volume_data(&self, node: Uuid, volume: Uuid) -> Result<(), ClusterError> {
        let _ = (node, volume);
        Ok(())
    }
    /// Every node known since the controller started, by UUID.
    fn nodes(&self) -> Vec<Node>;
    /// One node.
    fn node(&self, id: Uuid) -> Result<Node, ClusterError>;
    /// What node `id`'s STATS said over the last hour, oldest first ([`crate::history`]); none
    /// for a cluster that keeps no history.
    fn node_history(&self, id: Uuid) -> Result<Vec<crate::history::Sample>, ClusterError> {
        self.node(id).map(|_| Vec::new())
    }
    /// Asks a node to evacuate (its instances stop and start elsewhere; it takes no new work).
    fn evacuate(&self, id: Uuid) -> Result<(), ClusterError>;
    /// Asks an evacuated node to take work again.
    fn restore(&self, id: Uuid) -> Result<(), ClusterError>;
    /// Disables a node (Compute's `os-services` disable): from now on no new instance is placed
    /// there (STARTs name it in `avoid_nodes`); what runs there stays, and starts again there.
    fn disable_node(
        &self,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<store::DisabledNode, ClusterError>;
    /// Enables a disabled node again: `true` if it was disabled.
    fn enable_node(&self, id: Uuid) -> Result<bool, ClusterError>;
    /// The most recent frame traces, newest last.
    fn traces(&self) -> Vec<Trace>;
    /// Whether the controller has a session with the scheduler now.
    fn connected(&self) -> bool;
    /// Why the controller stopped for good (its SSNTP client gave up: no session will come
    /// back), if it did: it is about to exit, and its health check fails meanwhile.
    fn gone_for_good(&self) -> Option<String> {
        None
    }
    /// Reports from nodes and CNCIs refused since the start for claiming what is not their
    /// sender's (an instance placed on another node, another CNCI), by frame name; none
    /// unless the cluster checks them.
    fn reports_refused(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// How long the oldest frames from the schedulers waiting to be applied had waited when last
    /// looked at (each second): how far behind the cluster the controller is; none for a
    /// cluster without frames.
    fn frames_behind(&self) -> Option<std::time::Duration> {
        None
    }
    /// The tenant's floating IPs changed in the store (allocated, associated, disassociated,
    /// released): the cluster brings its CNCIs' mappings in line, without waiting for them.
    /// Nothing happens where the cluster maps none (a fake).
    fn floating_ips_changed(&self, _tenant: Uuid) {}
    /// The tenant's security groups, their rules or its ports' groups changed in the store: the
    /// cluster gives the nodes of its ports their new firewalls, without waiting for them.
    /// Nothing happens where the cluster enforces none (a fake).
    fn security_groups_changed(&self, _tenant: Uuid) {}
    /// Where the mapping of the floating IP `address`, associated with the port of instance
    /// `port`, stands on its CNCI.
    fn floating_ip_status(&self, _address: Ipv4Addr, _port: Option<Uuid>) -> FloatingStatus {
        FloatingStatus::Down
    }
}

/// A floating IP's status, as Neutron names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatingStatus {
    /// Not associated, or its CNCI has not mapped it (yet).
    Down,
    /// Its CNCI maps it to its port's address.
    Active,
    /// Its CNCI refused to map it.
    Error,
}

impl FloatingStatus {
    /// `DOWN`, `ACTIVE` or `ERROR`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FloatingStatus::Down => "DOWN",
            FloatingStatus::Active => "ACTIVE",
            FloatingStatus::Error => "ERROR",
        }
    }
}
