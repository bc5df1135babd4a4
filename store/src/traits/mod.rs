//! The store's traits, one per concern, and [`Store`], which is all of them.
//!
//! | trait | holds |
//! |---|---|
//! | [`IdentityStore`] | tenants and their usage, users, role assignments |
//! | [`KeypairStore`] | users' SSH key pairs (public halves) |
//! | [`NetworkStore`] | security groups and rules, floating IPs, ports' groups, network quotas |
//! | [`CatalogStore`] | flavors, images, workloads |
//! | [`InstanceStore`] | instances, tenant subnets, CNCIs |
//! | [`VolumeStore`] | tenants' block storage volumes and their attachments |
//! | [`EventStore`] | the bounded event log |
//! | [`ActionStore`] | the instance actions log (who asked what of an instance, and how it went) |
//! | [`OperationQueue`] | off-host hosts, their operations and claims, fenced writes, launcher creds |
//! | [`NodeStore`] | the nodes an admin disabled |
//! | [`ServerGroupStore`] | tenants' server groups and their members |
//!
//! [`ReservationStore`](crate::ReservationStore) stands apart: it is not part of [`Store`]
//! (SQLite does not implement it).
//!
//! [`SqliteStore`](crate::SqliteStore) and [`EtcdStore`](crate::EtcdStore) implement every
//! concern, each in the file of that concern (`sqlite/catalog.rs`, `etcd/catalog.rs`, ...).
//! Code that needs one concern takes that trait (`&dyn OperationQueue`); code that needs several
//! takes a [`Store`], which converts to any of them (`Arc<dyn Store>` to
//! `Arc<dyn OperationQueue>`). Calling a method on a concrete store needs its trait in scope:
//! `use store::prelude::*`.

pub(crate) mod actions;
mod catalog;
mod events;
mod identity;
mod instances;
mod keypairs;
mod networking;
mod nodes;
mod queue;
mod server_groups;
mod volumes;

pub use actions::ActionStore;
pub use catalog::CatalogStore;
pub use events::EventStore;
pub use identity::IdentityStore;
pub use instances::InstanceStore;
pub use keypairs::KeypairStore;
pub use networking::NetworkStore;
pub use nodes::NodeStore;
pub use queue::OperationQueue;
pub use server_groups::ServerGroupStore;
pub use volumes::VolumeStore;

/// Everything the controller keeps: every concern's trait. Every call is one transaction (inside
/// a [`batch`](InstanceStore::batch), all-or-nothing on its own within the batch's one); see the
/// crate docs for scopes and versions. Implementations are shared between threads.
///
/// Implemented for every type that implements all the concerns: implement those, never this.
pub trait Store:
    IdentityStore
    + KeypairStore
    + NetworkStore
    + CatalogStore
    + InstanceStore
    + VolumeStore
    + EventStore
    + ActionStore
    + OperationQueue
    + NodeStore
    + ServerGroupStore
{
}

impl<T> Store for T where
    T: IdentityStore
        + KeypairStore
        + NetworkStore
        + CatalogStore
        + InstanceStore
        + VolumeStore
        + EventStore
        + ActionStore
        + OperationQueue
        + NodeStore
        + ServerGroupStore
        + ?Sized
{
}
