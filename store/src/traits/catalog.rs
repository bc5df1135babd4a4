//! [`CatalogStore`]: what instances are made of — flavors (global), images and workloads (public
//! or private to a tenant).

use uuid::Uuid;

use crate::{
    Flavor, Image, ImageChange, ImageProps, NewFlavor, NewImage, NewWorkload, Result, Scope,
    Workload, WorkloadChange,
};

/// Flavors, images and workloads. Every call is one transaction.
pub trait CatalogStore: Send + Sync {
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
    /// Creates an image (its owner, if any, must exist), active from the start.
    fn create_image(&self, new: NewImage) -> Result<Image>;
    /// Creates an image through the Image API: `queued` (no data yet: `new.reference` may be
    /// empty), with `props`.
    fn create_queued_image(&self, new: NewImage, props: ImageProps) -> Result<Image>;
    /// Changes an image owned in `scope` (`NotFound` for one it does not own; `Conflict` if
    /// `change.expect` is not its status).
    fn change_image(&self, scope: Scope, id: Uuid, change: ImageChange) -> Result<Image>;
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
}
