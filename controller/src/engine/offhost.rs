//! Off-host hosts (issue 11): hosts registered with `launcher_on_host: false` are driven through
//! the store's operation queue, not through the scheduler. The engine places an instance there,
//! enqueues a start, stop or delete for it, and the `cumulo-agent --remote` replica that claims
//! the operation writes the instance's state back itself (a fenced, field-masked write), so
//! nothing here waits for a confirmation.
//!
//! Placement rule: a start goes off-host when at least one off-host host is registered and no
//! on-host compute node is connected and ready (or the scheduler is not connected at all); the
//! host is picked by the instance's UUID modulo the number of off-host hosts (by name), which
//! spreads instances without any shared counter. An instance placed off-host stays there (its
//! `node` is the off-host host's id) until it is stopped or deleted.

use ssntp::payload::Start;
use uuid::Uuid;

use super::Engine;
use super::start::{Plan, start_payload};
use crate::actions::ActionKind;
use crate::cluster::{Caller, ClusterError, NodeStatus};
use store::{
    Instance, InstanceChange, InstanceState, NewOperation, OperationKind, RemoteHost, Scope,
    StoreError,
};

/// The START an off-host operation carries (the SSNTP payload's own CBOR; a stop or a delete
/// carries it too, so that the replica can rebuild the instance's record).
pub fn operation_payload(start: &Start) -> Result<Vec<u8>, ClusterError> {
    Ok(ssntp::Payload::Start(Box::new(start.clone())).encode())
}

/// A change of an off-host instance: its new state, the states it may come from, the action it
/// is (recorded, and named in errors) and the operations to queue (kind, START's `restart`).
pub(super) struct Step {
    pub(super) to: InstanceState,
    pub(super) from: fn(&InstanceState) -> bool,
    pub(super) action: ActionKind,
    pub(super) queue: &'static [(OperationKind, bool)],
}

impl Engine {
    /// The off-host host a start of `instance` goes to under the placement rule (module docs).
    /// The hosts are read only when no node of cumulo's own is ready: a store read less for
    /// every START while one is.
    pub(super) fn off_host_target(
        &self,
        instance: Uuid,
    ) -> Result<Option<RemoteHost>, ClusterError> {
        let on_host_ready = self.out.connected()
            && self
                .state()
                .nodes
                .values()
                .any(|n| n.kinds.compute && n.status == NodeStatus::Ready);
        if on_host_ready {
            return Ok(None);
        }
        let hosts = self.store.remote_hosts()?;
        if hosts.is_empty() {
            return Ok(None);
        }
        let len = u128::try_from(hosts.len()).unwrap_or(1);
        let at = usize::try_from(instance.as_u128() % len).unwrap_or(0);
        Ok(hosts.get(at).cloned())
    }

    /// `Invalid` for an off-host instance: only stop, start, reboot and delete reach one.
    pub(super) fn refuse_off_host(
        &self,
        instance: &Instance,
        what: &str,
    ) -> Result<(), ClusterError> {
        match self.remote_of(instance)? {
            Some(_) => Err(ClusterError::Invalid(format!(
                "an off-host instance cannot {what}: stop, start, reboot and delete it"
            ))),
            None => Ok(()),
        }
    }

    /// The off-host host `instance` is placed on, if it is placed on one.
    pub(super) fn remote_of(
        &self,
        instance: &Instance,
    ) -> Result<Option<RemoteHost>, ClusterError> {
        let Some(node) = instance.node else {
            return Ok(None);
        };
        match self.store.remote_host(node) {
            Ok(host) => Ok(Some(host)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Queues `kind` for `instance` on `host`.
    pub(super) fn enqueue(
        &self,
        host: Uuid,
        instance: &Instance,
        kind: OperationKind,
        restart: bool,
    ) -> Result<(), ClusterError> {
        let plan = self.plan(Scope::Tenant(instance.tenant), instance.workload)?;
        let start = start_payload(instance, &plan, None, restart, None);
        self.store.enqueue_operation(NewOperation {
            host,
            instance: instance.id,
            kind,
            payload: operation_payload(&start)?,
        })?;
        Ok(())
    }

    /// Places a pending instance on off-host `host` and queues its start.
    pub(super) fn dispatch_off_host(
        &self,
        instance: Instance,
        plan: &Plan,
        restart: bool,
        host: &RemoteHost,
    ) -> Result<Instance, ClusterError> {
        let placed = self
            .transition(Scope::All, instance.id, |_| {
                Ok(Some((
                    InstanceChange {
                        node: Some(Some(host.id)),
                        ..InstanceChange::default()
                    },
                    (),
                )))
            })?
            .map_or(instance, |(i, ())| i);
        let start = start_payload(&placed, plan, None, restart, None);
        self.store.enqueue_operation(NewOperation {
            host: host.id,
            instance: placed.id,
            kind: OperationKind::Start,
            payload: operation_payload(&start)?,
        })?;
        Ok(placed)
    }

    /// Moves an off-host instance as `step` says and queues its operations in order, recording
    /// the step's action for `by`.
    pub(super) fn off_host_change(
        &self,
        scope: Scope,
        current: &Instance,
        host: &RemoteHost,
        step: Step,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        let Step {
            to: state,
            from: allowed,
            action,
            queue: kinds,
        } = step;
        let (instance, ()) = self
            .transition(scope, current.id, |i| {
                if allowed(&i.state) && i.node == Some(host.id) {
                    Ok(Some((
                        InstanceChange {
                            state: Some(state.clone()),
                            ..InstanceChange::default()
                        },
                        (),
                    )))
                } else {
                    Err(super::invalid(i, action.as_str()))
                }
            })?
            .ok_or_else(|| StoreError::not_found("instance", current.id))?;
        let ticket = self.begin_action(current.id, action, by);
        let queued = kinds
            .iter()
            .try_for_each(|(kind, restart)| self.enqueue(host.id, &instance, *kind, *restart));
        self.finish_action(&ticket, &queued);
        queued?;
        Ok(instance)
    }
}
