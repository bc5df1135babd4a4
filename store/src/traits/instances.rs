//! [`InstanceStore`]: instances, the tenant subnets their addresses come from, and the subnets'
//! CNCIs.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::{
    Cnci, CnciChange, Instance, InstanceBrief, InstanceChange, InstanceFilter, NewInstance, Page,
    Paged, Result, Scope, Subnet,
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
    /// The instances of `ids` (any tenant's), in their order: `None` for one there is none of.
    /// The default reads them one by one; a store that can read them together does.
    fn instances_by_id(&self, ids: &[Uuid]) -> Result<Vec<Option<Instance>>> {
        ids.iter()
            .map(|&id| match self.instance(Scope::All, id) {
                Ok(instance) => Ok(Some(instance)),
                Err(crate::StoreError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            })
            .collect()
    }
    /// A page of the instances visible in `scope`, in creation order.
    fn instances(
        &self,
        scope: Scope,
        filter: InstanceFilter,
        page: Page,
    ) -> Result<Paged<Instance>>;
    /// How many writers, each on records of its own (one node's report and another's), the
    /// store serves well at once: 1 where writers queue for one lock (SQLite: they would only
    /// wait for each other), more where each transaction waits for a round trip to a server
    /// that commits the ones arriving together as one (etcd). A caller with such independent
    /// work may run this many at once.
    fn writers_at_once(&self) -> usize {
        1
    }
    /// Runs `f`; its writes through this store on this thread commit together where the store
    /// can (SQLite: one transaction, so one commit for many writes). Each write inside still
    /// succeeds or fails on its own and answers as it would alone, and reads inside see the
    /// writes before them; other threads see them all once `f` has returned, and wait for the
    /// store's write lock meanwhile, so `f` must be short and must not wait for another thread
    /// that uses the store. `Err`: the commit failed, and none of them happened. A batch inside
    /// a batch is part of it. The default (etcd) runs `f` with each write on its own.
    fn batch(&self, f: &mut dyn FnMut()) -> Result<()> {
        f();
        Ok(())
    }
    /// The instances the store places on `node`, in brief, in creation order. The default reads
    /// their whole records; a store that can read less does.
    fn instance_briefs_on(&self, node: Uuid) -> Result<Vec<InstanceBrief>> {
        let mut briefs = Vec::new();
        let filter = InstanceFilter { node: Some(node) };
        let mut page = Page::first(Page::MAX_LIMIT);
        loop {
            let paged = self.instances(Scope::All, filter, page)?;
            briefs.extend(paged.items.iter().map(InstanceBrief::from));
            match paged.next {
                Some(marker) => page.marker = Some(marker),
                None => return Ok(briefs),
            }
        }
    }
    /// How many instances there are in each state, by the state's
    /// [`name`](crate::InstanceState::name); states with none are left out. The default reads
    /// every record; a store that can count does.
    fn instance_counts(&self) -> Result<BTreeMap<&'static str, u64>> {
        let mut counts = BTreeMap::new();
        let mut page = Page::first(Page::MAX_LIMIT);
        loop {
            let paged = self.instances(Scope::All, InstanceFilter::default(), page)?;
            for instance in &paged.items {
                *counts.entry(instance.state.name()).or_insert(0) += 1;
            }
            match paged.next {
                Some(marker) => page.marker = Some(marker),
                None => return Ok(counts),
            }
        }
    }
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
