//! Rebuild: the same instance (UUID, addresses, node) with its disk made anew from an image,
//! with existing frames only.
//!
//! 1. `active` or `exited` on its node → `rebuilding` (with the new workload and name), and a
//!    DELETE (`stop` false) to the node: everything of it there goes.
//! 2. When the node says it is gone (INSTANCE_DELETED, a DELETE_FAILURE `no_instance`, or a STATS
//!    of the node without it), a START (`restart` false: made from the image) pinned to that node
//!    with `node_id`.
//! 3. `active` when the node reports it running; a fatal START_FAILURE makes it `error` (its old
//!    disk is gone), as a START lost for the confirmation timeout does (`start_lost`).
//!
//! Until its START went, what the node reports of its old copy changes nothing. Whether the
//! START went is kept in memory: a controller restarted in between sends it when the node's
//! next STATS does not list the instance.

use uuid::Uuid;

use super::{Engine, invalid};
use crate::actions::{self, ActionKind};
use crate::cluster::{Caller, ClusterError, Rebuild, rebuild_allowed};
use store::{EventKind, EventOutcome, Instance, InstanceChange, InstanceState, Scope, StoreError};

impl Engine {
    /// Step 1 (see the module docs).
    pub(super) fn rebuild_instance(
        &self,
        scope: Scope,
        id: Uuid,
        rebuild: Rebuild,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        let current = self.store.instance(scope, id)?;
        self.refuse_off_host(&current, "rebuild")?;
        let node = match current.node {
            Some(node) if rebuild_allowed(&current.state) => node,
            _ => return Err(invalid(&current, "rebuild")),
        };
        self.require_connected()?;
        // The image must be there for the tenant (and the workload of its size: the store checks).
        let plan = self.plan(Scope::Tenant(current.tenant), rebuild.workload)?;
        // A kernel it names that is not there for the tenant: refused before the disk goes.
        if let Err(why) = &plan.kernel {
            return Err(ClusterError::Invalid(why.clone()));
        }
        let (instance, was) = self
            .transition(scope, id, |i| {
                if !rebuild_allowed(&i.state) || i.node != Some(node) {
                    return Err(invalid(i, "rebuild"));
                }
                Ok(Some((
                    InstanceChange {
                        state: Some(InstanceState::Rebuilding),
                        workload: Some(rebuild.workload),
                        name: rebuild.name.clone(),
                        fault: Some(None),
                        ..InstanceChange::default()
                    },
                    (i.state.clone(), i.workload),
                )))
            })?
            .ok_or_else(|| StoreError::not_found("instance", id))?;
        self.state().rebuild_started.remove(&id);
        let ticket = self.begin_action(id, ActionKind::Rebuild, by);
        let sent = self.send_delete(id, node, false);
        self.finish_action(&ticket, &sent);
        if let Err(e) = sent {
            // Nothing went to the node: back as it was.
            let (state, workload) = was;
            self.transition(Scope::All, id, |i| {
                Ok((i.state == InstanceState::Rebuilding).then(|| {
                    (
                        InstanceChange {
                            state: Some(state.clone()),
                            workload: Some(workload),
                            ..InstanceChange::default()
                        },
                        (),
                    )
                }))
            })?;
            return Err(e);
        }
        self.event(
            Some(instance.tenant),
            EventKind::Info,
            format!(
                "instance {id}: rebuild from image {} on node {node}: its disk is being removed",
                plan.image.name
            ),
        );
        Ok(instance)
    }

    /// Step 2: the node no longer holds the old copy of a rebuilding instance: its START, once.
    pub(super) fn rebuild_removed(&self, record: &Instance) -> Result<(), ClusterError> {
        if record.state != InstanceState::Rebuilding
            || record.node.is_none()
            || !self.state().rebuild_started.insert(record.id)
        {
            return Ok(());
        }
        let plan = self.plan(Scope::Tenant(record.tenant), record.workload)?;
        // Not a restart: made from the image; pinned to its node, as a rebuilding instance is.
        self.dispatch(record.clone(), &plan, false).map(drop)
    }

    /// Whether a rebuilding instance's START went (what its node reports is then the new copy).
    pub(super) fn rebuild_under_way(&self, id: Uuid) -> bool {
        self.state().rebuild_started.contains(&id)
    }

    /// Step 3: its node runs the new copy.
    pub(super) fn rebuilt(&self, id: Uuid) {
        self.state().rebuild_started.remove(&id);
        actions::start_ended(self.store.as_ref(), id, EventOutcome::success());
    }
}
