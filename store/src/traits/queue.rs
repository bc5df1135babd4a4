//! [`OperationQueue`]: off-host hosts ([`RemoteHost`]) and the queue of [`Operation`]s for them:
//! what the controller enqueues and `cumulo-agent --remote` replicas claim, renew, finish and
//! report on under a fencing token.
//!
//! [`OperationQueue::fenced_write`] writes an instance's record, yet it lives here: it is a
//! launcher's report under an operation's claim (refused once the claim is stale), and may finish
//! the operation in the same transaction. A replica therefore needs this trait only.

use std::time::Duration;

use uuid::Uuid;

use crate::{
    FencedWrite, InstanceWrite, LauncherCreds, NewOperation, NewRemoteHost, Operation,
    OperationFilter, OperationState, RemoteHost, Result,
};

/// Off-host hosts, their operations and claims, fenced writes, launcher credentials. Every call
/// is one transaction.
pub trait OperationQueue: Send + Sync {
    // --- off-host hosts ---
    /// Records a host reached through a libvirt URI (`Conflict` on a duplicate name).
    fn create_remote_host(&self, new: NewRemoteHost) -> Result<RemoteHost>;
    /// One off-host host.
    fn remote_host(&self, id: Uuid) -> Result<RemoteHost>;
    /// All off-host hosts, by name.
    fn remote_hosts(&self) -> Result<Vec<RemoteHost>>;
    /// Deletes a host with no queued or claimed operation (`Conflict` otherwise); its finished
    /// operations stay.
    fn delete_remote_host(&self, id: Uuid) -> Result<()>;

    // --- operations and claims ---
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
    /// As [`OperationQueue::claim_operation`], taking only operations for `host` when it is
    /// given (a replica serving one off-host host).
    fn claim_operation_on(
        &self,
        owner: &str,
        lease: Duration,
        host: Option<Uuid>,
    ) -> Result<Option<Operation>> {
        Ok(self
            .claim_operations_on(owner, lease, host, 1)?
            .into_iter()
            .next())
    }
    /// Claims up to `max` operations (at least one, at most [`MAX_CLAIM_BATCH`](crate::MAX_CLAIM_BATCH)) in one
    /// transaction, each as [`OperationQueue::claim_operation_on`] would (free, and the first
    /// unfinished one of its instance, so no two are of one instance); empty when none is free.
    /// With `max` 1 it takes the oldest. With more, it takes them from the oldest free ones, yet
    /// a backend may pick a run among the first few batches' worth rather than the very first,
    /// to keep replicas that claim at the same moment from racing for the same operations (an
    /// operation further back waits at most until the head of the queue drains). The operations
    /// of one batch may share a token (etcd: the revision of the commit): a token fences one
    /// operation, and each operation's token is larger than every one it had before.
    fn claim_operations_on(
        &self,
        owner: &str,
        lease: Duration,
        host: Option<Uuid>,
        max: usize,
    ) -> Result<Vec<Operation>>;
    /// How many operations for `host` are unfinished (queued or claimed): a cheap count, for
    /// monitoring a queue as it drains.
    fn unfinished_operations(&self, host: Uuid) -> Result<usize>;
    /// Extends the claim `token` of operation `id` to `lease` from now
    /// ([`StoreError::Fenced`](crate::StoreError::Fenced) if `token` is not its current claim).
    /// A claim whose lease ran out but that nobody took over may still be renewed.
    fn renew_claim(&self, id: Uuid, token: u64, lease: Duration) -> Result<Operation>;
    /// Marks operation `id` done with `result`, if `token` is its current claim
    /// ([`StoreError::Fenced`](crate::StoreError::Fenced) otherwise, and for a second
    /// completion).
    fn complete_operation(&self, id: Uuid, token: u64, result: &str) -> Result<Operation>;
    /// Marks operation `id` failed with `reason`, if `token` is its current claim
    /// ([`StoreError::Fenced`](crate::StoreError::Fenced) otherwise).
    fn fail_operation(&self, id: Uuid, token: u64, reason: &str) -> Result<Operation>;
    /// A launcher's report about operation `id`, if `token` is its current claim
    /// ([`StoreError::Fenced`](crate::StoreError::Fenced) otherwise), in one transaction: `write`
    /// applies to the operation's instance (the masked fields of an [`InstanceWrite::Update`]; a
    /// [`InstanceWrite::Remove`] of an instance already gone is fine), then `finish`, when given,
    /// finishes the operation (done or failed, with its result). Returns the operation as it is
    /// after the write.
    fn fenced_write(
        &self,
        id: Uuid,
        token: u64,
        write: &InstanceWrite,
        finish: Option<(OperationState, &str)>,
    ) -> Result<Operation>;

    /// Several launchers' reports ([`OperationQueue::fenced_write`] each), one result per
    /// report in order; each report is refused or written on its own (a stale token fences only
    /// its own). A backend may commit several in one transaction (etcd: those that update an
    /// instance or write nothing to it, up to [`MAX_FENCED_BATCH`](crate::MAX_FENCED_BATCH) at a
    /// time; a removal goes alone, for it changes the tenant's network record that other
    /// instances share); by default, one transaction each.
    fn fenced_writes(&self, reports: &[FencedWrite]) -> Vec<Result<Operation>> {
        reports
            .iter()
            .map(|r| self.fenced_write(r.id, r.token, &r.write, r.finish()))
            .collect()
    }

    // --- launcher credentials ---
    /// Stores (replacing) the launcher credentials of an existing off-host host.
    fn put_launcher_creds(&self, creds: LauncherCreds) -> Result<()>;
    /// The launcher credentials of an off-host host (`NotFound` if none were issued).
    fn launcher_creds(&self, host: Uuid) -> Result<LauncherCreds>;
}
