//! The native API's JSON shapes of the store's records: one type per shape, serialized as the
//! answer and described by the same type in the OpenAPI document (`ToSchema`), and one function
//! per record that makes it.
//!
//! Every field is always written (`null` where the value is absent), so every field of a view
//! is `required` in the document, the `Option`s nullable too.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::api::clock::rfc3339;
use crate::cluster::NodeStatus;
use store::{ImageKind, Role};

/// A quota's limits (`null`: unlimited).
#[derive(Debug, Serialize, ToSchema)]
pub struct Quota {
    #[schema(required, minimum = 0, maximum = 4_294_967_295_u64)]
    instances: Option<u32>,
    #[schema(required, minimum = 0, maximum = 4_294_967_295_u64)]
    vcpus: Option<u32>,
    #[schema(required, minimum = 0, maximum = 9_223_372_036_854_775_807_u64)]
    memory_mb: Option<u64>,
}

/// A quota's limits.
pub fn quota(q: &store::Quota) -> Quota {
    Quota {
        instances: q.instances,
        vcpus: q.vcpus,
        memory_mb: q.memory_mb,
    }
}

/// A tenant.
#[derive(Debug, Serialize, ToSchema)]
pub struct Tenant {
    id: Uuid,
    name: String,
    quota: Quota,
    #[schema(minimum = 16, maximum = 30)]
    subnet_prefix: u8,
    #[schema(format = DateTime)]
    created: String,
}

/// A tenant.
pub fn tenant(t: &store::Tenant) -> Tenant {
    Tenant {
        id: t.id,
        name: t.name.clone(),
        quota: quota(&t.quota),
        subnet_prefix: t.subnet_prefix,
        created: rfc3339(t.created),
    }
}

/// What a tenant uses.
#[derive(Debug, Serialize, ToSchema)]
pub struct Usage {
    instances: u32,
    vcpus: u32,
    memory_mb: u64,
}

/// A tenant's limits and what it uses.
#[derive(Debug, Serialize, ToSchema)]
pub struct QuotaUsage {
    tenant: Uuid,
    limits: Quota,
    usage: Usage,
}

/// A tenant's limits and what it uses.
pub fn quota_usage(tenant: &store::Tenant, usage: &store::Usage) -> QuotaUsage {
    QuotaUsage {
        tenant: tenant.id,
        limits: quota(&tenant.quota),
        usage: Usage {
            instances: usage.instances,
            vcpus: usage.vcpus,
            memory_mb: usage.memory_mb,
        },
    }
}

/// A user (never its password hash); `roles` only when one user is shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct User {
    id: Uuid,
    name: String,
    #[schema(format = DateTime)]
    created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    roles: Option<Vec<RoleAssignment>>,
}

/// A user (never its password hash).
pub fn user(u: &store::User) -> User {
    User {
        id: u.id,
        name: u.name.clone(),
        created: rfc3339(u.created),
        roles: None,
    }
}

/// A user with its role assignments.
pub fn user_with_roles(u: &store::User, roles: &[store::RoleAssignment]) -> User {
    User {
        roles: Some(roles.iter().map(assignment).collect()),
        ..user(u)
    }
}

/// A role assignment.
#[derive(Debug, Serialize, ToSchema)]
pub struct RoleAssignment {
    user: Uuid,
    tenant: Uuid,
    role: RoleName,
}

/// A role assignment.
pub fn assignment(a: &store::RoleAssignment) -> RoleAssignment {
    RoleAssignment {
        user: a.user,
        tenant: a.tenant,
        role: a.role.into(),
    }
}

/// A role in a tenant.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RoleName {
    Admin,
    Manager,
    Member,
    Reader,
}

impl From<Role> for RoleName {
    fn from(r: Role) -> RoleName {
        match r {
            Role::Admin => RoleName::Admin,
            Role::Manager => RoleName::Manager,
            Role::Member => RoleName::Member,
            Role::Reader => RoleName::Reader,
        }
    }
}

impl From<RoleName> for Role {
    fn from(r: RoleName) -> Role {
        match r {
            RoleName::Admin => Role::Admin,
            RoleName::Manager => Role::Manager,
            RoleName::Member => Role::Member,
            RoleName::Reader => Role::Reader,
        }
    }
}

/// A flavor.
#[derive(Debug, Serialize, ToSchema)]
pub struct Flavor {
    id: Uuid,
    name: String,
    #[schema(minimum = 1)]
    vcpus: u32,
    #[schema(minimum = 1)]
    memory_mb: u64,
    disk_gb: u64,
    /// Whether every project sees it (else only admins and the projects on its access list,
    /// which the Compute API's `os-flavor-access` keeps).
    is_public: bool,
}

/// A flavor.
pub fn flavor(f: &store::Flavor) -> Flavor {
    Flavor {
        id: f.id,
        name: f.name.clone(),
        vcpus: f.vcpus,
        memory_mb: f.memory_mb,
        disk_gb: f.disk_gb,
        is_public: f.is_public,
    }
}

/// An image's disk format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KindName {
    Qcow2,
    Raw,
    Iso,
    Kernel,
    Ramdisk,
    /// A container's root file system (a tarball).
    Container,
}

impl From<ImageKind> for KindName {
    fn from(kind: ImageKind) -> KindName {
        match kind {
            ImageKind::Qcow2 => KindName::Qcow2,
            ImageKind::Raw => KindName::Raw,
            ImageKind::Iso => KindName::Iso,
            ImageKind::Kernel => KindName::Kernel,
            ImageKind::Container => KindName::Container,
            ImageKind::Ramdisk => KindName::Ramdisk,
        }
    }
}

/// An image (`tenant`: its owner, `null` when public).
#[derive(Debug, Serialize, ToSchema)]
pub struct Image {
    id: Uuid,
    name: String,
    kind: KindName,
    reference: String,
    #[schema(required)]
    tenant: Option<Uuid>,
    public: bool,
    #[schema(format = DateTime)]
    created: String,
}

/// An image.
pub fn image(i: &store::Image) -> Image {
    Image {
        id: i.id,
        name: i.name.clone(),
        kind: i.kind.into(),
        reference: i.reference.clone(),
        tenant: i.owner,
        public: i.owner.is_none(),
        created: rfc3339(i.created),
    }
}

/// A workload (`tenant`: its owner, `null` when public).
#[derive(Debug, Serialize, ToSchema)]
pub struct Workload {
    id: Uuid,
    name: String,
    #[schema(required)]
    tenant: Option<Uuid>,
    public: bool,
    flavor: Uuid,
    image: Uuid,
    user_data: String,
    ephemeral: bool,
}

/// A workload.
pub fn workload(w: &store::Workload) -> Workload {
    Workload {
        id: w.id,
        name: w.name.clone(),
        tenant: w.owner,
        public: w.owner.is_none(),
        flavor: w.flavor,
        image: w.image,
        user_data: w.user_data.clone(),
        ephemeral: w.ephemeral,
    }
}

/// Why an instance is in `error` (or stopped after a start failed on its node): the failure's
/// code (a START_FAILURE reason such as `launch_failure`, or the controller's own), its cause in
/// words, and when it happened.
#[derive(Debug, Serialize, ToSchema)]
pub struct Fault {
    reason: String,
    message: String,
    #[schema(format = DateTime)]
    created: String,
}

/// An instance's state, one of [`store::InstanceState::NAMES`].
fn state_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(store::InstanceState::NAMES))
        .build()
}

/// An instance (`error`: the reason of the `error` state, `null` in any other; `fault`: why it
/// failed, `null` when there is nothing to show; `key_name`: the key pair it was created with
/// through the Compute API, `null` for none; `reservation_id`: the reservation id of the create
/// that made it, shared by the instances of one create, `null` for instances made before it was
/// kept).
#[derive(Debug, Serialize, ToSchema)]
pub struct Instance {
    id: Uuid,
    tenant: Uuid,
    workload: Uuid,
    name: String,
    #[schema(schema_with = state_schema)]
    state: &'static str,
    #[schema(required)]
    error: Option<String>,
    vcpus: u32,
    memory_mb: u64,
    #[schema(required)]
    node: Option<Uuid>,
    #[schema(format = "ipv4")]
    ip: String,
    mac: String,
    subnet: String,
    #[schema(required)]
    cnci: Option<Uuid>,
    #[schema(required)]
    fault: Option<Fault>,
    #[schema(required)]
    key_name: Option<String>,
    #[schema(required)]
    reservation_id: Option<String>,
    #[schema(format = DateTime)]
    created: String,
    #[schema(format = DateTime)]
    updated: String,
}

/// An instance.
pub fn instance(i: &store::Instance) -> Instance {
    let error = match &i.state {
        store::InstanceState::Error(reason) => Some(reason.clone()),
        _ => None,
    };
    Instance {
        id: i.id,
        tenant: i.tenant,
        workload: i.workload,
        name: i.name.clone(),
        state: i.state.name(),
        error,
        vcpus: i.vcpus,
        memory_mb: i.memory_mb,
        node: i.node,
        ip: i.ip.to_string(),
        mac: i.mac.to_string(),
        subnet: i.subnet.to_string(),
        cnci: i.cnci,
        fault: crate::engine::fault::shown(i).map(|f| Fault {
            reason: f.reason,
            message: f.message,
            created: rfc3339(f.created),
        }),
        key_name: i.key.as_ref().map(|k| k.name.clone()),
        reservation_id: i.reservation.clone(),
        created: rfc3339(i.created),
        updated: rfc3339(i.updated),
    }
}

/// How a step of an instance action ended.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActionResult {
    Success,
    Error,
}

/// One step of an instance action (`finish`, `result`: `null` while unfinished).
#[derive(Debug, Serialize, ToSchema)]
pub struct ActionEvent {
    name: String,
    #[schema(format = DateTime)]
    start: String,
    #[schema(required, format = DateTime)]
    finish: Option<String>,
    #[schema(required)]
    result: Option<ActionResult>,
    #[schema(required)]
    detail: Option<String>,
}

/// An instance action, with its events.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceAction {
    request_id: String,
    instance: Uuid,
    tenant: Uuid,
    action: String,
    #[schema(required)]
    user: Option<Uuid>,
    #[schema(required)]
    project: Option<Uuid>,
    #[schema(format = DateTime)]
    start: String,
    #[schema(format = DateTime)]
    updated: String,
    #[schema(required)]
    message: Option<String>,
    events: Vec<ActionEvent>,
}

/// An instance action, with its events.
pub fn instance_action(a: &store::InstanceAction) -> InstanceAction {
    let events = a
        .events
        .iter()
        .map(|e| ActionEvent {
            name: e.name.clone(),
            start: rfc3339(e.start),
            finish: e.finish.map(rfc3339),
            result: e.result.map(|r| match r {
                store::ActionResult::Success => ActionResult::Success,
                store::ActionResult::Error => ActionResult::Error,
            }),
            detail: e.detail.clone(),
        })
        .collect();
    InstanceAction {
        request_id: a.request_id.clone(),
        instance: a.instance,
        tenant: a.tenant,
        action: a.action.clone(),
        user: a.user,
        project: a.project,
        start: rfc3339(a.start),
        updated: rfc3339(a.updated),
        message: a.message.clone(),
        events,
    }
}

/// A CNCI's state.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CnciState {
    Pending,
    Active,
    Exited,
    Failed,
}

/// A CNCI (`ip`, `node`: `null` until known).
#[derive(Debug, Serialize, ToSchema)]
pub struct Cnci {
    id: Uuid,
    tenant: Uuid,
    subnet: Uuid,
    cidr: String,
    state: CnciState,
    #[schema(required)]
    ip: Option<String>,
    #[schema(required)]
    node: Option<Uuid>,
    #[schema(format = DateTime)]
    created: String,
    #[schema(format = DateTime)]
    updated: String,
}

/// A CNCI.
pub fn cnci(c: &store::Cnci) -> Cnci {
    Cnci {
        id: c.id,
        tenant: c.tenant,
        subnet: c.subnet,
        cidr: c.cidr.to_string(),
        state: match c.state {
            store::CnciState::Pending => CnciState::Pending,
            store::CnciState::Active => CnciState::Active,
            store::CnciState::Exited => CnciState::Exited,
            store::CnciState::Failed => CnciState::Failed,
        },
        ip: c.ip.map(|ip| ip.to_string()),
        node: c.node,
        created: rfc3339(c.created),
        updated: rfc3339(c.updated),
    }
}

/// An event's kind.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    Info,
    Warning,
    Error,
}

/// An event (`tenant`: `null` for the cluster's own).
#[derive(Debug, Serialize, ToSchema)]
pub struct Event {
    seq: u64,
    #[schema(format = DateTime)]
    time: String,
    #[schema(required)]
    tenant: Option<Uuid>,
    kind: EventKind,
    message: String,
}

/// An event.
pub fn event(e: &store::Event) -> Event {
    Event {
        seq: e.seq,
        time: rfc3339(e.time),
        tenant: e.tenant,
        kind: match e.kind {
            store::EventKind::Info => EventKind::Info,
            store::EventKind::Warning => EventKind::Warning,
            store::EventKind::Error => EventKind::Error,
        },
        message: e.message.clone(),
    }
}

/// A node connected over SSNTP (`last_stats`: `null` before its first STATS).
#[derive(Debug, Serialize, ToSchema)]
pub struct Node {
    id: Uuid,
    compute: bool,
    network: bool,
    status: NodeStatus,
    hostname: String,
    mem_total_mb: u32,
    mem_available_mb: u32,
    disk_total_mb: u32,
    disk_available_mb: u32,
    vcpus_total: u32,
    vcpus_available: u32,
    load: u32,
    instances: u32,
    ips: Vec<String>,
    #[schema(format = DateTime)]
    connected: String,
    #[schema(required, format = DateTime)]
    last_stats: Option<String>,
}

/// One sample of a node's figures.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeSample {
    #[schema(format = DateTime)]
    time: String,
    vcpus_used: u32,
    vcpus_total: u32,
    mem_used_mb: u32,
    mem_total_mb: u32,
    load: u32,
    instances: u32,
}

/// A node's figures over the last hour, oldest first, and the least time between two samples.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeHistory {
    node: Uuid,
    step_seconds: u64,
    samples: Vec<NodeSample>,
}

/// A node's figures over the last hour.
pub fn node_history(node: Uuid, samples: &[crate::history::Sample]) -> NodeHistory {
    NodeHistory {
        node,
        step_seconds: crate::history::STEP.as_secs(),
        samples: samples
            .iter()
            .map(|s| NodeSample {
                time: rfc3339(s.at),
                vcpus_used: s.vcpus_used,
                vcpus_total: s.vcpus_total,
                mem_used_mb: s.mem_used_mb,
                mem_total_mb: s.mem_total_mb,
                load: s.load,
                instances: s.instances,
            })
            .collect(),
    }
}

/// What `status` an off-host host shows.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum OffHost {
    #[serde(rename = "off-host")]
    OffHost,
}

/// An off-host host (its launcher runs beside the controller; `launcher_on_host` is always
/// `false`).
#[derive(Debug, Serialize, ToSchema)]
pub struct RemoteNode {
    id: Uuid,
    name: String,
    hostname: String,
    status: OffHost,
    #[schema(schema_with = always_false)]
    launcher_on_host: bool,
    libvirt_uri: String,
    #[schema(format = DateTime)]
    created: String,
}

/// `false`, the only value (`launcher_on_host` of an off-host host).
pub(crate) fn always_false() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::Boolean)
        .enum_values(Some([false]))
        .build()
}

/// One entry of the node list: a node connected over SSNTP or an off-host host.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum AnyNode {
    Node(Node),
    RemoteNode(RemoteNode),
}

/// A node.
pub fn node(n: &crate::cluster::Node) -> AnyNode {
    AnyNode::Node(Node {
        id: n.id,
        compute: n.kinds.compute,
        network: n.kinds.network,
        status: n.status,
        hostname: n.hostname.clone(),
        mem_total_mb: n.mem_total_mb,
        mem_available_mb: n.mem_available_mb,
        disk_total_mb: n.disk_total_mb,
        disk_available_mb: n.disk_available_mb,
        vcpus_total: n.vcpus_total,
        vcpus_available: n.vcpus_available,
        load: n.load,
        instances: n.instances,
        ips: n.ips.iter().map(ToString::to_string).collect(),
        connected: rfc3339(n.connected),
        last_stats: n.last_stats.map(rfc3339),
    })
}

/// An off-host host.
pub fn remote_host(h: &store::RemoteHost) -> RemoteNode {
    RemoteNode {
        id: h.id,
        name: h.name.clone(),
        // What the node list's columns show for it.
        hostname: h.name.clone(),
        status: OffHost::OffHost,
        launcher_on_host: false,
        libvirt_uri: h.libvirt_uri.clone(),
        created: rfc3339(h.created),
    }
}

/// One hop of a trace: the sender's UUID and role, send and receive times (ns since the epoch).
#[derive(Debug, Serialize, ToSchema)]
pub struct TraceHop {
    uuid: Uuid,
    role: String,
    tx_ns: u64,
    rx_ns: u64,
}

/// A frame trace.
#[derive(Debug, Serialize, ToSchema)]
pub struct Trace {
    label: String,
    frame: String,
    total_ns: u64,
    hops: Vec<TraceHop>,
}

/// A trace.
pub fn trace(t: &crate::cluster::Trace) -> Trace {
    Trace {
        label: t.label.clone(),
        frame: t.frame.clone(),
        total_ns: t.total_ns,
        hops: t
            .hops
            .iter()
            .map(|h| TraceHop {
                uuid: h.uuid,
                role: h.role.clone(),
                tx_ns: h.tx_ns,
                rx_ns: h.rx_ns,
            })
            .collect(),
    }
}

/// `GET /healthz`'s status.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    Ok,
    Degraded,
}

/// `GET /healthz`: whether the store answers and the scheduler is connected.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: HealthStatus,
    pub store: bool,
    pub scheduler: bool,
}

/// A page of instances (`next`: the marker of the next page, `null` on the last).
#[derive(Debug, Serialize, ToSchema)]
pub struct InstancePage {
    pub instances: Vec<Instance>,
    #[schema(required)]
    pub next: Option<Uuid>,
}

/// How many instances are in each state (states with none left out), and in all.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceCounts {
    pub counts: std::collections::BTreeMap<String, u64>,
    pub total: u64,
}

/// The counts of [`store::Store::instance_counts`]' shape.
pub fn instance_counts(counts: std::collections::BTreeMap<&'static str, u64>) -> InstanceCounts {
    InstanceCounts {
        total: counts.values().sum(),
        counts: counts
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }
}

/// The last lines of an instance's serial console log.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConsoleOutput {
    pub output: String,
}

/// How many events `DELETE /events` removed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Cleared {
    pub deleted: u64,
}

/// The validity of an off-host host's new launcher credentials.
#[derive(Debug, Serialize, ToSchema)]
pub struct LauncherCredentials {
    pub node: Uuid,
    #[schema(format = DateTime)]
    pub issued: String,
    #[schema(format = DateTime)]
    pub not_after: String,
}

/// A list answer: `{"<key>": [...]}`.
macro_rules! lists {
    ($($name:ident { $key:ident: $item:ty }),* $(,)?) => {$(
        #[doc = concat!("`{\"", stringify!($key), "\": [...]}`.")]
        #[derive(Debug, Serialize, ToSchema)]
        pub struct $name {
            pub $key: Vec<$item>,
        }
    )*};
}

lists! {
    Tenants { tenants: Tenant },
    Users { users: User },
    Roles { roles: RoleAssignment },
    Flavors { flavors: Flavor },
    Images { images: Image },
    Workloads { workloads: Workload },
    Instances { instances: Instance },
    InstanceActions { actions: InstanceAction },
    Nodes { nodes: AnyNode },
    Cncis { cncis: Cnci },
    Events { events: Event },
    Traces { traces: Trace },
}
