//! The controller's store: one [`Store`] trait, implemented by [`SqliteStore`] (embedded, the
//! default) and [`EtcdStore`] (etcd v3, shared by several controllers); [`open()`] picks one from
//! a path or an `etcd://` URL.
//!
//! Every operation is one transaction. Tenant-owned objects are read and changed through a
//! [`Scope`]: [`Scope::Tenant`] never sees another tenant's objects (they are `NotFound`), and
//! [`Scope::All`] is for admins and for the controller's own bookkeeping (SSNTP events name only
//! an instance UUID). Mutable records carry a version, and updates are compare-and-swap on it, so
//! an implementation over etcd transactions (compare mod revision, then put) has the same shape.
//!
//! The store is synchronous; async callers use `spawn_blocking`.

mod common;
#[cfg(feature = "etcd")]
pub mod etcd;
mod mask;
mod model;
pub mod net;
mod open;
mod queue;
mod reservations;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(test)]
pub(crate) mod suite;

pub use common::DEFAULT_EVENT_CAPACITY;
#[cfg(feature = "etcd")]
pub use etcd::EtcdStore;
pub use mask::{FieldMask, InstanceFacts, InstanceWrite, Placement};
pub use model::*;
pub use open::open;
pub use queue::*;
pub use reservations::{MemoryReservations, Reservation, ReservationStore};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

use std::time::Duration;

use uuid::Uuid;

/// The store's result.
pub type Result<T> = std::result::Result<T, StoreError>;

/// The quota figure that a creation would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// The number of instances.
    Instances,
    /// The vCPUs over all instances.
    Vcpus,
    /// The memory over all instances.
    MemoryMb,
}

impl std::fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuotaKind::Instances => "instances",
            QuotaKind::Vcpus => "vcpus",
            QuotaKind::MemoryMb => "memory (MiB)",
        })
    }
}

/// What went wrong in the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No such object (or not one the scope may see).
    #[error("{kind} {id} not found")]
    NotFound {
        /// The kind of object.
        kind: &'static str,
        /// Its identifier as given.
        id: String,
    },
    /// A stale version, a duplicate name, or an object still in use.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The tenant's quota would be exceeded.
    #[error("quota exceeded: {what} limit is {limit}")]
    QuotaExceeded {
        /// Which figure.
        what: QuotaKind,
        /// Its limit.
        limit: u64,
    },
    /// No subnet or address left to allocate.
    #[error("exhausted: {0}")]
    Exhausted(String),
    /// Input the store refuses (empty name, bad prefix, unknown marker).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The database was written by a newer cumulo: its schema is past what this code knows.
    #[error("database schema version {found} is newer than this controller knows ({known})")]
    SchemaTooNew {
        /// The version in the database.
        found: u32,
        /// The newest version this code knows.
        known: u32,
    },
    /// A write about an operation named a fencing token that is no longer its claim's: another
    /// replica took the operation over, or it is finished. The writer has lost the operation and
    /// must drop its work on it (never retry with the same token).
    #[error("operation {id}: fencing token {token} is stale")]
    Fenced {
        /// The operation.
        id: String,
        /// The stale token.
        token: u64,
    },
    /// The backend's disk is full: nothing was written; retry once space is freed.
    #[error(
        "the store's disk is full, nothing was written (free space under the store and retry): {0}"
    )]
    Full(String),
    /// The backend failed (I/O, corruption, a lock held too long).
    #[error("store backend: {0}")]
    Backend(String),
}

impl StoreError {
    /// A `NotFound` for `kind` and `id`.
    pub fn not_found(kind: &'static str, id: impl ToString) -> StoreError {
        StoreError::NotFound {
            kind,
            id: id.to_string(),
        }
    }
}

/// Whose objects an operation may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Only this tenant's objects (plus public images and workloads, read-only).
    Tenant(Uuid),
    /// Every object.
    All,
}

impl Scope {
    /// Whether an object owned by `owner` is visible (read) in this scope.
    pub fn sees(&self, owner: Option<Uuid>) -> bool {
        match (self, owner) {
            (Scope::All, _) | (Scope::Tenant(_), None) => true,
            (Scope::Tenant(t), Some(o)) => *t == o,
        }
    }

    /// Whether an object owned by `owner` may be changed or deleted in this scope.
    pub fn owns(&self, owner: Option<Uuid>) -> bool {
        match (self, owner) {
            (Scope::All, _) => true,
            (Scope::Tenant(t), Some(o)) => *t == o,
            (Scope::Tenant(_), None) => false,
        }
    }
}

/// A page request: keyset pagination, as OpenStack's `marker` + `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Start after this object (the last one of the previous page); `None` starts at the beginning.
    pub marker: Option<Uuid>,
    /// Most objects to return (1..=[`Page::MAX_LIMIT`]).
    pub limit: u32,
}

impl Page {
    /// The largest page a listing returns.
    pub const MAX_LIMIT: u32 = 1000;

    /// The first page of `limit` objects.
    pub fn first(limit: u32) -> Page {
        Page {
            marker: None,
            limit,
        }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paged<T> {
    /// The objects, in a stable order (instances: creation order).
    pub items: Vec<T>,
    /// The marker of the next page, if there may be more.
    pub next: Option<Uuid>,
}

/// Everything the controller keeps. Every call is one transaction; see the module docs for scopes
/// and versions. Implementations are shared between threads.
pub trait Store: Send + Sync {
    // --- tenants ---
    /// Creates a tenant (`Conflict` on a duplicate name).
    fn create_tenant(&self, new: NewTenant) -> Result<Tenant>;
    /// One tenant.
    fn tenant(&self, id: Uuid) -> Result<Tenant>;
    /// All tenants, by name.
    fn tenants(&self) -> Result<Vec<Tenant>>;
    /// Changes a tenant if its version is still `expected_version`.
    fn update_tenant(
        &self,
        id: Uuid,
        expected_version: u64,
        change: TenantChange,
    ) -> Result<Tenant>;
    /// Deletes a tenant with no instances, subnets or CNCIs left (`Conflict` otherwise); its
    /// private images, workloads and role assignments go with it.
    fn delete_tenant(&self, id: Uuid) -> Result<()>;
    /// What the tenant's instances hold now.
    fn usage(&self, tenant: Uuid) -> Result<Usage>;

    // --- users and roles ---
    /// Creates a user (`Conflict` on a duplicate name).
    fn create_user(&self, new: NewUser) -> Result<User>;
    /// One user.
    fn user(&self, id: Uuid) -> Result<User>;
    /// One user by login name.
    fn user_by_name(&self, name: &str) -> Result<User>;
    /// All users, by name.
    fn users(&self) -> Result<Vec<User>>;
    /// Changes a user if its version is still `expected_version`.
    fn update_user(&self, id: Uuid, expected_version: u64, change: UserChange) -> Result<User>;
    /// Deletes a user and its role assignments.
    fn delete_user(&self, id: Uuid) -> Result<()>;
    /// Gives `user` the `role` in `tenant` (idempotent).
    fn grant_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()>;
    /// Takes the role away (`NotFound` if it was not given).
    fn revoke_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()>;
    /// The roles of a user, in every tenant.
    fn roles_of_user(&self, user: Uuid) -> Result<Vec<RoleAssignment>>;
    /// The roles given in a tenant.
    fn roles_in_tenant(&self, tenant: Uuid) -> Result<Vec<RoleAssignment>>;

    // --- flavors (global) ---
    /// Creates a flavor (`Conflict` on a duplicate name).
    fn create_flavor(&self, new: NewFlavor) -> Result<Flavor>;
    /// One flavor.
    fn flavor(&self, id: Uuid) -> Result<Flavor>;
    /// All flavors, by name.
    fn flavors(&self) -> Result<Vec<Flavor>>;
    /// Deletes a flavor no workload uses (`Conflict` otherwise).
    fn delete_flavor(&self, id: Uuid) -> Result<()>;

    // --- images ---
    /// Creates an image (its owner, if any, must exist).
    fn create_image(&self, new: NewImage) -> Result<Image>;
    /// One image visible in `scope`.
    fn image(&self, scope: Scope, id: Uuid) -> Result<Image>;
    /// The images visible in `scope`, by name.
    fn images(&self, scope: Scope) -> Result<Vec<Image>>;
    /// Deletes an image owned in `scope` that no workload uses.
    fn delete_image(&self, scope: Scope, id: Uuid) -> Result<()>;

    // --- workloads ---
    /// Creates a workload; its flavor must exist and its image be visible to its owner.
    fn create_workload(&self, new: NewWorkload) -> Result<Workload>;
    /// One workload visible in `scope`.
    fn workload(&self, scope: Scope, id: Uuid) -> Result<Workload>;
    /// The workloads visible in `scope`, by name.
    fn workloads(&self, scope: Scope) -> Result<Vec<Workload>>;
    /// Changes a workload owned in `scope` if its version is still `expected_version`.
    fn update_workload(
        &self,
        scope: Scope,
        id: Uuid,
        expected_version: u64,
        change: WorkloadChange,
    ) -> Result<Workload>;
    /// Deletes a workload owned in `scope` that no instance uses.
    fn delete_workload(&self, scope: Scope, id: Uuid) -> Result<()>;

    // --- instances ---
    /// Creates an instance in state `Pending`, in one transaction: checks the tenant's quota
    /// against its current usage plus the workload's flavor, picks the tenant's first subnet with a
    /// free address (carving a new subnet when all are full), and takes the lowest free address
    /// and its MAC. Parallel creations never exceed the quota.
    fn create_instance(&self, new: NewInstance) -> Result<Instance>;
    /// One instance visible in `scope`.
    fn instance(&self, scope: Scope, id: Uuid) -> Result<Instance>;
    /// A page of the instances visible in `scope`, in creation order.
    fn instances(
        &self,
        scope: Scope,
        filter: InstanceFilter,
        page: Page,
    ) -> Result<Paged<Instance>>;
    /// Changes an instance if its version is still `expected_version` (`Conflict` otherwise).
    fn update_instance(
        &self,
        scope: Scope,
        id: Uuid,
        expected_version: u64,
        change: InstanceChange,
    ) -> Result<Instance>;
    /// Removes an instance's record, freeing its address; a subnet left with neither instances
    /// nor a CNCI is freed too.
    fn delete_instance(&self, scope: Scope, id: Uuid) -> Result<()>;

    // --- subnets and CNCIs ---
    /// The subnets visible in `scope`, by address.
    fn subnets(&self, scope: Scope) -> Result<Vec<Subnet>>;
    /// Records the CNCI of a subnet in state `Pending` (`Conflict` if it has one).
    fn create_cnci(&self, subnet: Uuid) -> Result<Cnci>;
    /// One CNCI visible in `scope`.
    fn cnci(&self, scope: Scope, id: Uuid) -> Result<Cnci>;
    /// The CNCIs visible in `scope`.
    fn cncis(&self, scope: Scope) -> Result<Vec<Cnci>>;
    /// Changes a CNCI if its version is still `expected_version`.
    fn update_cnci(&self, id: Uuid, expected_version: u64, change: CnciChange) -> Result<Cnci>;
    /// Removes a CNCI; its subnet goes too if no instance is left in it.
    fn delete_cnci(&self, id: Uuid) -> Result<()>;

    // --- events ---
    /// Appends an event, dropping the oldest beyond the log's capacity.
    fn append_event(&self, new: NewEvent) -> Result<Event>;
    /// The events visible in `scope` (a tenant sees its own only), oldest first, after `after`.
    fn events(&self, scope: Scope, after: Option<u64>, limit: u32) -> Result<Vec<Event>>;
    /// Deletes the events visible in `scope`; returns how many.
    fn clear_events(&self, scope: Scope) -> Result<u64>;

    // --- off-host hosts and their operation queue (see the `queue` records) ---
    /// Records a host reached through a libvirt URI (`Conflict` on a duplicate name).
    fn create_remote_host(&self, new: NewRemoteHost) -> Result<RemoteHost>;
    /// One off-host host.
    fn remote_host(&self, id: Uuid) -> Result<RemoteHost>;
    /// All off-host hosts, by name.
    fn remote_hosts(&self) -> Result<Vec<RemoteHost>>;
    /// Deletes a host with no queued or claimed operation (`Conflict` otherwise); its finished
    /// operations stay.
    fn delete_remote_host(&self, id: Uuid) -> Result<()>;
    /// Queues an operation for an existing host, behind every operation queued before it.
    fn enqueue_operation(&self, new: NewOperation) -> Result<Operation>;
    /// One operation.
    fn operation(&self, id: Uuid) -> Result<Operation>;
    /// The operations that pass `filter`, oldest first.
    fn operations(&self, filter: OperationFilter) -> Result<Vec<Operation>>;
    /// Atomically claims, for `owner` and `lease`, the oldest operation that is queued, or claimed
    /// with its lease run out, and whose instance has no older unfinished operation; `None` when
    /// there is none. The returned operation's `claim` holds the new fencing token, larger than
    /// every token handed out before in the store: each claim goes to exactly one caller.
    fn claim_operation(&self, owner: &str, lease: Duration) -> Result<Option<Operation>> {
        self.claim_operation_on(owner, lease, None)
    }
    /// As [`Store::claim_operation`], taking only operations for `host` when it is given (a
    /// replica serving one off-host host).
    fn claim_operation_on(
        &self,
        owner: &str,
        lease: Duration,
        host: Option<Uuid>,
    ) -> Result<Option<Operation>>;
    /// Extends the claim `token` of operation `id` to `lease` from now ([`StoreError::Fenced`]
    /// if `token` is not its current claim). A claim whose lease ran out but that nobody took
    /// over may still be renewed.
    fn renew_claim(&self, id: Uuid, token: u64, lease: Duration) -> Result<Operation>;
    /// Marks operation `id` done with `result`, if `token` is its current claim
    /// ([`StoreError::Fenced`] otherwise, and for a second completion).
    fn complete_operation(&self, id: Uuid, token: u64, result: &str) -> Result<Operation>;
    /// Marks operation `id` failed with `reason`, if `token` is its current claim
    /// ([`StoreError::Fenced`] otherwise).
    fn fail_operation(&self, id: Uuid, token: u64, reason: &str) -> Result<Operation>;
    /// Stores (replacing) the launcher credentials of an existing off-host host.
    fn put_launcher_creds(&self, creds: LauncherCreds) -> Result<()>;
    /// The launcher credentials of an off-host host (`NotFound` if none were issued).
    fn launcher_creds(&self, host: Uuid) -> Result<LauncherCreds>;
    /// A launcher's report about operation `id`, if `token` is its current claim
    /// ([`StoreError::Fenced`] otherwise), in one transaction: `write` applies to the operation's
    /// instance (the masked fields of an [`InstanceWrite::Update`]; a [`InstanceWrite::Remove`]
    /// of an instance already gone is fine), then `finish`, when given, finishes the operation
    /// (done or failed, with its result). Returns the operation as it is after the write.
    fn fenced_write(
        &self,
        id: Uuid,
        token: u64,
        write: &InstanceWrite,
        finish: Option<(OperationState, &str)>,
    ) -> Result<Operation>;
}
