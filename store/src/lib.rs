//! The controller's store: one trait per concern ([`IdentityStore`], [`KeypairStore`],
//! [`NetworkStore`],
//! [`CatalogStore`], [`InstanceStore`], [`VolumeStore`], [`EventStore`], [`ActionStore`],
//! [`OperationQueue`];
//! [`Store`] is all of them), implemented by [`SqliteStore`] (embedded, the default) and [`EtcdStore`] (etcd v3,
//! shared by several controllers); [`open()`] picks one from a path or an `etcd://` URL.
//! [`ReservationStore`] stands apart (in memory, or over etcd). `use store::prelude::*` brings
//! every trait into scope.
//!
//! Every operation is one transaction. Tenant-owned objects are read and changed through a
//! [`Scope`]: [`Scope::Tenant`] never sees another tenant's objects (they are `NotFound`), and
//! [`Scope::All`] is for admins and for the controller's own bookkeeping (SSNTP events name only
//! an instance UUID). Mutable records carry a version, and updates are compare-and-swap on it, so
//! an implementation over etcd transactions (compare mod revision, then put) has the same shape.
//!
//! The store is synchronous; async callers use `spawn_blocking`.

mod access;
mod actions;
mod common;
#[cfg(feature = "etcd")]
pub mod etcd;
mod flavor;
mod image;
mod mask;
mod model;
pub mod net;
mod networking;
mod open;
mod queue;
mod reservations;
pub mod sealed;
mod server_group;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(test)]
pub(crate) mod suite;
mod traits;
mod volume;

pub use access::{AppCredential, MAX_DESCRIPTION, NewAppCredential, Role, RoleAssignment};
pub use actions::{ACTIONS_PER_INSTANCE, GONE_INSTANCES_KEPT};
pub use common::DEFAULT_EVENT_CAPACITY;
#[cfg(feature = "cli")]
pub use etcd::EtcdArgs;
#[cfg(feature = "etcd")]
pub use etcd::{EtcdStore, EtcdTransport};
pub use flavor::{ExtraSpecs, Flavor, NewFlavor};
pub use image::*;
pub use mask::{FieldMask, InstanceFacts, InstanceWrite, Placement};
pub use model::*;
pub use networking::{
    DEFAULT_GROUP, Direction, EtherType, FloatingIp, FloatingIpChange, MAX_NET_TEXT,
    MAX_PORT_GROUPS, NetworkQuota, NewFloatingIp, NewSecurityGroup, NewSecurityGroupRule,
    PortGroups, RULE_PROTOCOLS, RuleRemote, SecurityGroup, SecurityGroupChange, SecurityGroupRule,
    ServersNet, check_rule, pool_hosts,
};
#[cfg(feature = "etcd")]
pub use open::open_shared;
pub use open::{EtcdSettings, StoreLocation, open};
pub use queue::*;
pub use reservations::{MemoryReservations, Reservation, ReservationStore};
pub use server_group::{NewServerGroup, SERVER_GROUP_POLICIES, ServerGroup};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use traits::{
    ActionStore, CatalogStore, EventStore, IdentityStore, InstanceStore, KeypairStore,
    NetworkStore, NodeStore, OperationQueue, ServerGroupStore, Store, VolumeStore,
};
pub use volume::*;

/// Every trait of the store, to call their methods on a concrete store (`SqliteStore`,
/// `EtcdStore`): `use store::prelude::*`.
pub mod prelude {
    pub use crate::{
        ActionStore, CatalogStore, EventStore, IdentityStore, InstanceStore, KeypairStore,
        NetworkStore, NodeStore, OperationQueue, ReservationStore, ServerGroupStore, Store,
        VolumeStore,
    };
}

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
    /// The number of a user's key pairs.
    Keypairs,
    /// The number of a tenant's floating IPs.
    FloatingIps,
    /// The number of a tenant's security groups.
    SecurityGroups,
    /// The number of rules over a tenant's security groups.
    SecurityGroupRules,
    /// The number of a tenant's volumes.
    Volumes,
    /// The GiB over all a tenant's volumes.
    Gigabytes,
    /// The number of an image's members.
    ImageMembers,
    /// The number of a user's application credentials.
    AppCredentials,
    /// The number of a tenant's server groups.
    ServerGroups,
    /// The number of a server group's members.
    ServerGroupMembers,
}

impl std::fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuotaKind::Instances => "instances",
            QuotaKind::Vcpus => "vcpus",
            QuotaKind::MemoryMb => "memory (MiB)",
            QuotaKind::Keypairs => "key pairs",
            QuotaKind::FloatingIps => "floating IPs",
            QuotaKind::SecurityGroups => "security groups",
            QuotaKind::SecurityGroupRules => "security group rules",
            QuotaKind::Volumes => "volumes",
            QuotaKind::Gigabytes => "volume gigabytes",
            QuotaKind::ImageMembers => "image members",
            QuotaKind::AppCredentials => "application credentials",
            QuotaKind::ServerGroups => "server groups",
            QuotaKind::ServerGroupMembers => "server group members",
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
    /// The backend refused the caller: its etcd user (the certificate's CN) lacks the
    /// permission for this key range. For a controller a deployment error (its user needs the
    /// controller role: `cumulo-controller etcd-setup`); for a launcher replica, a request outside
    /// what a replica may do.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
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

    /// `Invalid` unless the limit is 1 to [`Page::MAX_LIMIT`].
    pub fn check(&self) -> Result<()> {
        if self.limit == 0 || self.limit > Page::MAX_LIMIT {
            return Err(StoreError::Invalid(format!(
                "page limit must be 1 to {}",
                Page::MAX_LIMIT
            )));
        }
        Ok(())
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
