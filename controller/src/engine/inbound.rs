//! What the scheduler forwards to the controller, applied to the store and the node table.

use std::time::SystemTime;

use ssntp::payload::{
    DeleteFailure, DeleteFailureReason, DeliveryFailure, NodeEvent, NodeType, StartFailure,
    StartFailureReason,
};
use ssntp::{Operand, Payload};
use uuid::Uuid;

use super::Engine;
use super::fault::serde_name;
use crate::actions;
use crate::cluster::{ClusterError, Node, NodeKinds, NodeStatus};
use store::{
    EventKind, EventOutcome, InstanceChange, InstanceFilter, InstanceState, Scope, StoreError,
};

impl Engine {
    /// Applies one frame from the scheduler. Errors are about the store; the frame is dropped.
    pub fn handle(&self, payload: &Payload) -> Result<(), ClusterError> {
        self.handle_at(payload, SystemTime::now())
    }

    /// [`Engine::handle`], for a frame that arrived at `now` (the time the timers it starts
    /// count from).
    pub fn handle_at(&self, payload: &Payload, now: SystemTime) -> Result<(), ClusterError> {
        self.apply(None, payload, now)
    }

    /// [`Engine::handle_at`] for a frame whose creator (its header's origin: the node, for what
    /// a node reports) is `origin`: a node's report of an instance that the store places on
    /// another node (or that was moved off it) is about a stale copy and changes nothing, and
    /// what a node or a CNCI claims beyond its own is refused (see the `origin` module).
    pub fn handle_from(
        &self,
        origin: Uuid,
        payload: &Payload,
        now: SystemTime,
    ) -> Result<(), ClusterError> {
        self.apply(Some(origin), payload, now)
    }

    fn apply(
        &self,
        origin: Option<Uuid>,
        payload: &Payload,
        now: SystemTime,
    ) -> Result<(), ClusterError> {
        match payload {
            Payload::Stats(stats) => self.on_stats(origin, stats),
            Payload::InstanceStopped(e) => self.on_stopped(origin, e.instance_uuid),
            Payload::InstanceDeleted(e) => self.on_deleted(origin, e.instance_uuid),
            Payload::StartFailure(f) => self.on_start_failure(origin, f, now),
            Payload::DeleteFailure(f) => self.on_delete_failure(origin, f),
            Payload::DeliveryFailure(f) => {
                self.on_delivery_failure(f);
                self.volumes_undelivered(origin, f)
            }
            Payload::AttachVolumeFailure(f) => {
                self.on_volume_failure(origin, f, super::volumes::Kind::Attach)
            }
            Payload::DetachVolumeFailure(f) => {
                self.on_volume_failure(origin, f, super::volumes::Kind::Detach)
            }
            Payload::NodeConnected(e) => {
                self.on_node(e, true);
                Ok(())
            }
            Payload::NodeDisconnected(e) => {
                self.on_node(e, false);
                self.node_gone(e.node_uuid)
            }
            Payload::ConcentratorInstanceAdded(added) => self.cnci_added(origin, added),
            Payload::TraceReport(report) => {
                self.on_traces(report);
                Ok(())
            }
            Payload::PublicIpAssigned(e) => self.on_public_ip_event(origin, e, true),
            Payload::PublicIpUnassigned(e) => self.on_public_ip_event(origin, e, false),
            Payload::AssignPublicIpFailure(f) => self.on_public_ip_failure(origin, f, true),
            Payload::UnassignPublicIpFailure(f) => self.on_public_ip_failure(origin, f, false),
            Payload::InstanceActionFailure(f) => {
                let tenant = self
                    .store
                    .instance(Scope::All, f.instance_uuid)
                    .ok()
                    .map(|i| i.tenant);
                self.event(
                    tenant,
                    EventKind::Error,
                    format!(
                        "instance {}: {} failed on its node: {}",
                        f.instance_uuid,
                        f.action.map_or("action", |a| a.name()),
                        serde_name(&f.reason)
                    ),
                );
                Ok(())
            }
            other => {
                tracing::debug!("ignored from the scheduler: {}", other.operand().name());
                Ok(())
            }
        }
    }

    /// The controller's session with the scheduler ended: every node is unknown until the
    /// scheduler sends NODE_CONNECTED again on the next session.
    pub fn scheduler_disconnected(&self) {
        for node in self.state().nodes.values_mut() {
            node.status = NodeStatus::Disconnected;
            node.kinds = NodeKinds::default();
        }
    }

    /// The session with the scheduler that held `nodes` ended: they are unknown until a
    /// scheduler (that one again, or the one their agents move to) announces them.
    pub fn nodes_unreachable(&self, nodes: &[Uuid]) {
        let mut state = self.state();
        for id in nodes {
            if let Some(node) = state.nodes.get_mut(id) {
                node.status = NodeStatus::Disconnected;
                node.kinds = NodeKinds::default();
            }
        }
    }

    fn on_node(&self, event: &NodeEvent, connected: bool) {
        let mut state = self.state();
        let node = state.nodes.entry(event.node_uuid).or_insert_with(|| Node {
            id: event.node_uuid,
            kinds: NodeKinds::default(),
            status: NodeStatus::Disconnected,
            hostname: String::new(),
            mem_total_mb: 0,
            mem_available_mb: 0,
            disk_total_mb: 0,
            disk_available_mb: 0,
            vcpus_total: 0,
            vcpus_available: 0,
            load: 0,
            instances: 0,
            ips: Vec::new(),
            connected: SystemTime::now(),
            last_stats: None,
            zone: ssntp::payload::DEFAULT_ZONE.into(),
        });
        let was_connected = node.kinds != NodeKinds::default();
        match event.node_type {
            NodeType::ComputeNode => node.kinds.compute = connected,
            NodeType::NetworkNode => node.kinds.network = connected,
        }
        if node.kinds == NodeKinds::default() {
            node.status = NodeStatus::Disconnected;
        } else if !was_connected {
            node.status = NodeStatus::Ready;
            node.connected = SystemTime::now();
        }
    }

    /// After NODE_DISCONNECTED: if the node is gone altogether (it closed its session, or the
    /// scheduler lost it: nothing from it for three STATS intervals), what it holds is missing,
    /// the instances it keeps exited included (they are on its disks), until its first STATS
    /// after it comes back ([`Engine::reconcile`], [`Engine::absent`]).
    fn node_gone(&self, node: Uuid) -> Result<(), ClusterError> {
        let gone = self
            .state()
            .nodes
            .get(&node)
            .is_none_or(|n| n.status == NodeStatus::Disconnected);
        if !gone {
            return Ok(());
        }
        // Ephemeral instances start again elsewhere (with those its evacuation left waiting).
        self.start_deferred(node, None)?;
        self.relocate_ephemeral(node, super::relocate::Why::Lost)?;
        let held = |state: &InstanceState| {
            matches!(
                state,
                InstanceState::Active
                    | InstanceState::Pending
                    | InstanceState::Stopping
                    | InstanceState::Exited
                    | InstanceState::Paused
                    | InstanceState::Suspended
                    | InstanceState::Rebuilding
            )
        };
        let mut affected = Vec::new();
        self.for_each_instance(Scope::All, InstanceFilter { node: Some(node) }, |i| {
            if held(&i.state) {
                affected.push((i.id, i.tenant));
            }
        })?;
        for (id, tenant) in &affected {
            // Unless a DELETE (or anything else) moved it since it was read.
            let moved = self.set_state_if(*id, InstanceState::Missing, |i| {
                i.node == Some(node) && held(&i.state)
            })?;
            if moved.is_none() {
                continue;
            }
            self.event(
                Some(*tenant),
                EventKind::Warning,
                format!("instance {id} is missing: its node {node} disconnected"),
            );
        }
        Ok(())
    }

    fn on_stopped(&self, from: Option<Uuid>, id: Uuid) -> Result<(), ClusterError> {
        let record = match self.store.instance(Scope::All, id) {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => {
                return self.cnci_gone(Operand::InstanceStopped, from, id);
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(from) = from
            && self.duplicate_of(from, id, record.node)
        {
            tracing::debug!(instance = %id, node = %from, "INSTANCE_STOPPED of a second copy: nothing to change");
            return Ok(());
        }
        if let Some(from) = from
            && self.foreign(Operand::InstanceStopped, from, &record)
        {
            return Ok(());
        }
        if self.stale_report(from, id, record.node) {
            tracing::debug!(instance = %id, "INSTANCE_STOPPED of a stale copy ignored");
            return Ok(());
        }
        self.state().unconfirmed.remove(&id);
        if record.state == InstanceState::Deleted || record.state == InstanceState::Hung {
            // Deleted while it stopped: the stop removed it from its node.
            return self.forget(&record);
        }
        // Powered off and kept on its node: it stays placed there for a start. One on no node
        // whose START was on its way (a node that made it, then died before the boot, reports
        // it stopped after its restart, maybe before any STATS lists it) is placed on the node
        // that says it keeps it.
        // (The node is checked again in the change: another controller may have placed it.)
        let stopped = self.transition(Scope::All, id, |now| {
            let node = match (from, now.node) {
                (Some(from), None) => Some(Some(from)),
                _ => None,
            };
            Ok(Some((
                InstanceChange {
                    state: Some(InstanceState::Exited),
                    node,
                    ..InstanceChange::default()
                },
                now.state == InstanceState::Pending,
            )))
        })?;
        if let Some((_, true)) = stopped {
            // Its START ended with it powered off before it booted.
            actions::start_ended(
                self.store.as_ref(),
                id,
                EventOutcome::error(
                    "its node lost it as it booted (the agent restarted); kept there, stopped",
                ),
            );
        }
        Ok(())
    }

    fn on_deleted(&self, from: Option<Uuid>, id: Uuid) -> Result<(), ClusterError> {
        if self.stale_removed(from, id) {
            return Ok(());
        }
        let record = match self.store.instance(Scope::All, id) {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => {
                // A removed instance's late VM is gone now.
                self.state().delete_sent.remove(&id);
                return self.cnci_gone(Operand::InstanceDeleted, from, id);
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(from) = from
            && self.duplicate_of(from, id, record.node)
        {
            tracing::debug!(instance = %id, node = %from, "INSTANCE_DELETED of a second copy: nothing to change");
            return Ok(());
        }
        if let Some(from) = from
            && self.foreign(Operand::InstanceDeleted, from, &record)
        {
            return Ok(());
        }
        if matches!(record.state, InstanceState::Deleted | InstanceState::Hung) {
            return self.forget(&record);
        }
        if self.stale_report(from, id, record.node) {
            tracing::debug!(instance = %id, "INSTANCE_DELETED of a stale copy ignored");
            return Ok(());
        }
        if record.state == InstanceState::Rebuilding {
            return self.rebuild_removed(&record);
        }
        if record.state == InstanceState::Pending
            && record.node.is_none()
            && from.is_some()
            && self.state().resent.contains(&id)
        {
            // Its START went twice (its scheduler was lost): one node's copy is gone, the other
            // may run. Still pending: the other node's report places it, or the sweep gives the
            // START up for lost.
            tracing::info!(instance = %id, node = ?from, "INSTANCE_DELETED of one copy of a START sent twice; the other may run");
            return Ok(());
        }
        self.event(
            Some(record.tenant),
            EventKind::Warning,
            format!(
                "instance {id} was deleted by its node while {}",
                record.state.name()
            ),
        );
        self.state().unconfirmed.remove(&id);
        // Removed from its node, with the data volumes attached to it there; its boot volume
        // stays its own (a start boots it from the volume again).
        self.release_volumes(&record, crate::volumes::Release::Removed);
        if record.state == InstanceState::Pending {
            actions::start_ended(
                self.store.as_ref(),
                id,
                EventOutcome::error("its node lost it before it was made (the agent restarted)"),
            );
        }
        self.set_state(id, InstanceState::Exited, Some(None))
            .map(drop)
    }

    /// INSTANCE_STOPPED/DELETED (`frame`, from node `from`) of something that is not an
    /// instance record: a CNCI, or noise.
    fn cnci_gone(&self, frame: Operand, from: Option<Uuid>, id: Uuid) -> Result<(), ClusterError> {
        match self.store.cnci(Scope::All, id) {
            Ok(cnci) if from.is_some_and(|from| self.foreign_cnci(frame, from, &cnci)) => Ok(()),
            Ok(cnci) => self.cnci_exited(&cnci),
            Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A START_FAILURE from `origin`: the scheduler's own, or a node's (which names that node
    /// and may fail only its own instances).
    fn on_start_failure(
        &self,
        origin: Option<Uuid>,
        failure: &StartFailure,
        now: SystemTime,
    ) -> Result<(), ClusterError> {
        let id = failure.instance_uuid;
        let reason = serde_name(&failure.reason);
        let from = self.failing_node(origin);
        if let Some(from) = from
            && failure.node_uuid != Some(from)
        {
            self.refuse(
                Operand::StartFailure,
                from,
                format_args!(
                    "the START_FAILURE of instance {id} on {}",
                    super::origin::placement(failure.node_uuid)
                ),
            );
            return Ok(());
        }
        let record = match self.store.instance(Scope::All, id) {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => {
                if let Ok(cnci) = self.store.cnci(Scope::All, id)
                    && !from
                        .is_some_and(|from| self.foreign_cnci(Operand::StartFailure, from, &cnci))
                {
                    self.cnci_start_failed(&cnci, failure, now);
                }
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(from) = from
            && self.duplicate_of(from, id, record.node)
        {
            tracing::info!("the second START of {id} failed on node {from}: {reason}; ignored");
            return Ok(());
        }
        if let Some(from) = from
            && self.foreign(Operand::StartFailure, from, &record)
        {
            return Ok(());
        }
        if !failure.reason.is_fatal() {
            tracing::info!("START of {id}: {reason} (not fatal)");
            return Ok(());
        }
        if failure.node_uuid.is_some() && self.stale_report(failure.node_uuid, id, record.node) {
            tracing::info!("START of {id} failed on a node it was moved off: {reason}; ignored");
            return Ok(());
        }
        self.state().rebuild_started.remove(&id);
        let fault = super::fault::of_start_failure(failure, &reason, now);
        actions::start_ended(
            self.store.as_ref(),
            id,
            EventOutcome::error(format!("{}: {}", fault.reason, fault.message)),
        );
        if matches!(record.state, InstanceState::Deleted | InstanceState::Hung) {
            return self.forget(&record);
        }
        self.event(
            Some(record.tenant),
            EventKind::Error,
            format!("instance {id} failed to start: {reason}: {}", fault.message),
        );
        // A restart of an instance kept on its node that the node could not boot (or the
        // scheduler could not deliver there): still stopped and kept there, with the fault.
        // Only a node that no longer holds it makes it an error.
        if failure.restart
            && record.state == InstanceState::Pending
            && record.node.is_some()
            && failure.reason != StartFailureReason::InstanceMissing
        {
            return self.cas(
                &record,
                InstanceChange {
                    state: Some(InstanceState::Exited),
                    fault: Some(Some(fault)),
                    ..InstanceChange::default()
                },
            );
        }
        self.cas(
            &record,
            InstanceChange {
                state: Some(InstanceState::Error(reason)),
                node: Some(None),
                fault: Some(Some(fault)),
                ..InstanceChange::default()
            },
        )
    }

    /// A DELETE_FAILURE from `origin`, the node it names (in process: the node it names).
    fn on_delete_failure(
        &self,
        origin: Option<Uuid>,
        failure: &DeleteFailure,
    ) -> Result<(), ClusterError> {
        let from = match (origin, failure.node_uuid) {
            (Some(origin), Some(named)) if origin != named => {
                self.refuse(
                    Operand::DeleteFailure,
                    origin,
                    format_args!(
                        "the DELETE_FAILURE of instance {} on node {named}",
                        failure.instance_uuid
                    ),
                );
                return Ok(());
            }
            (Some(origin), _) => Some(origin),
            (None, named) => named,
        };
        if failure.reason != DeleteFailureReason::NoInstance {
            tracing::warn!(
                "DELETE of {} failed: {}",
                failure.instance_uuid,
                serde_name(&failure.reason)
            );
            return Ok(());
        }
        if self.stale_removed(from, failure.instance_uuid) {
            return Ok(());
        }
        let record = match self.store.instance(Scope::All, failure.instance_uuid) {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if let Some(origin) = origin
            && self.foreign(Operand::DeleteFailure, origin, &record)
        {
            return Ok(());
        }
        match record.state {
            // Not there: nothing left to delete or stop.
            InstanceState::Deleted | InstanceState::Hung => self.forget(&record),
            InstanceState::Stopping => self.on_stopped(from, record.id),
            InstanceState::Rebuilding => self.rebuild_removed(&record),
            _ => Ok(()),
        }
    }

    fn on_delivery_failure(&self, failure: &DeliveryFailure) {
        self.event(
            None,
            EventKind::Warning,
            format!(
                "the scheduler could not deliver {} to {}: {}",
                ssntp::Operand::from_wire(failure.operand_type, failure.operand).name(),
                failure
                    .target_uuid
                    .map_or_else(|| "?".to_string(), |u| u.to_string()),
                serde_name(&failure.reason)
            ),
        );
    }
}
