//! [`InstanceStore`]: instances, the tenant subnets their addresses come from, and the subnets'
//! CNCIs.

use uuid::Uuid;

use crate::{
    Cnci, CnciChange, Instance, InstanceChange, InstanceFilter, NewInstance, Page, Paged, Result,
    Scope, Subnet,
};

/// Instances, subnets and CNCIs. Every call is one transaction.
pub trait InstanceStore: Send + Sync {
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
    /// nor a CNCI is freed too. Its actions stay, for a while (see
    /// [`ActionStore`](crate::ActionStore)).
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
}
