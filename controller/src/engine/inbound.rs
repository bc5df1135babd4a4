//! What the scheduler forwards to the controller, applied to the store and the node table.

use std::collections::HashMap;
use std::time::SystemTime;

use ssntp::payload::{
    DeleteFailure, DeleteFailureReason, DeliveryFailure, InstanceState as Reported, NodeEvent,
    NodeState, NodeType, StartFailure, StartFailureReason, Stats,
};
use ssntp::{Operand, Payload};
use uuid::Uuid;

use super::Engine;
use super::fault::serde_name;
use crate::actions;
use crate::cluster::{ClusterError, Node, NodeKinds, NodeStatus};
use store::{
    CnciChange, EventKind, EventOutcome, Instance, InstanceBrief, InstanceChange, InstanceFilter,
    InstanceState, Scope, StoreError,
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

    /// A node's STATS: its figures, and each instance it reports (or no longer reports)
    /// reconciled with the store. The first STATS of a node that comes back after it was lost
    /// settles its `missing` instances: `active` ones are active again, `exited` ones exited (on
    /// it), absent ones exited with no node; in any other state they stay missing until a later
    /// STATS shows them active or exited. From `origin`, it must describe that node.
    fn on_stats(&self, origin: Option<Uuid>, stats: &Stats) -> Result<(), ClusterError> {
        let node = stats.node.node_uuid;
        if let Some(from) = origin
            && from != node
        {
            self.refuse(
                Operand::Stats,
                from,
                format_args!("the STATS of node {node}"),
            );
            return Ok(());
        }
        {
            let mut state = self.state();
            if let Some(n) = state.nodes.get_mut(&node) {
                if n.status == NodeStatus::Disconnected {
                    // A lost node's last frames can trail its NODE_DISCONNECTED (forwarded as
                    // the scheduler judged it dead). It is back when the scheduler says so
                    // (NODE_CONNECTED, which comes before its STATS): until then its instances
                    // stay missing.
                    tracing::debug!(%node, "STATS of a disconnected node ignored");
                    return Ok(());
                }
                let s = &stats.node;
                n.hostname.clone_from(&s.hostname);
                s.zone_name().clone_into(&mut n.zone);
                n.mem_total_mb = s.mem_total_mb;
                n.mem_available_mb = s.mem_available_mb;
                n.disk_total_mb = s.disk_total_mb;
                n.disk_available_mb = s.disk_available_mb;
                n.vcpus_total = s.vcpus_total;
                n.vcpus_available = s.vcpus_available;
                n.load = s.load;
                n.instances = u32::try_from(stats.instances.len()).unwrap_or(u32::MAX);
                n.ips = s.networks.iter().map(|net| net.ip).collect();
                n.last_stats = Some(SystemTime::now());
                n.status = match stats.status {
                    NodeState::Ready => NodeStatus::Ready,
                    NodeState::Full => NodeStatus::Full,
                    NodeState::Maintenance => NodeStatus::Maintenance,
                    NodeState::Offline => NodeStatus::Offline,
                };
                let sample = crate::history::Sample {
                    at: SystemTime::now(),
                    vcpus_used: s.vcpus_total.saturating_sub(s.vcpus_available),
                    vcpus_total: s.vcpus_total,
                    mem_used_mb: s.mem_total_mb.saturating_sub(s.mem_available_mb),
                    mem_total_mb: s.mem_total_mb,
                    load: s.load,
                    instances: n.instances,
                };
                state.history.entry(node).or_default().record(sample);
            }
        }
        if stats.status == NodeState::Maintenance {
            // The scheduler places nothing here now: what its evacuation moved may start.
            self.start_deferred(node, None)?;
        }
        // One store transaction for the whole report (where the store has them: SQLite): one
        // commit, not two per instance that became active, and the records read under the
        // write lock, so that no other writer moves them between read and write.
        let mut reconciled = Ok(());
        self.store
            .batch(&mut || reconciled = self.reconcile_listed(origin, node, stats))?;
        reconciled?;
        self.volumes_on_stats(node, stats)
    }

    /// [`Engine::on_stats`]'s instances: each listed one reconciled with its record, each one
    /// placed on `node` and not listed handled as absent.
    fn reconcile_listed(
        &self,
        origin: Option<Uuid>,
        node: Uuid,
        stats: &Stats,
    ) -> Result<(), ClusterError> {
        // What the store places on this node (in brief), then what the node says. Most of a
        // STATS repeats what the store holds (a running instance reported running on the node
        // that holds it): only the others are read whole and reconciled.
        let mut known: HashMap<Uuid, InstanceBrief> = self
            .store
            .instance_briefs_on(node)?
            .into_iter()
            .map(|b| (b.id, b))
            .collect();
        // The records to reconcile, read together (one round trip per many on etcd).
        let wanted: Vec<Uuid> = stats
            .instances
            .iter()
            .filter(|stat| {
                !known.get(&stat.instance_uuid).is_some_and(|brief| {
                    brief.node == Some(node) && unchanged(&brief.state, stat.state)
                })
            })
            .map(|stat| stat.instance_uuid)
            .collect();
        let records: HashMap<Uuid, Instance> = self
            .store
            .instances_by_id(&wanted)?
            .into_iter()
            .flatten()
            .map(|i| (i.id, i))
            .collect();
        let mut seen = std::collections::HashSet::with_capacity(stats.instances.len());
        for stat in &stats.instances {
            // An instance listed twice in one report: the first listing is the report's.
            if !seen.insert(stat.instance_uuid) {
                continue;
            }
            let record = match known.remove(&stat.instance_uuid) {
                Some(brief) if brief.node == Some(node) && unchanged(&brief.state, stat.state) => {
                    continue;
                }
                Some(brief) => match records.get(&brief.id) {
                    Some(record) => record.clone(),
                    // Gone since the listing: as if it had not been listed.
                    None => continue,
                },
                None => match records.get(&stat.instance_uuid) {
                    Some(record) => record.clone(),
                    None => {
                        self.unknown_instance(origin, node, stat.instance_uuid, stat.state)?;
                        continue;
                    }
                },
            };
            if self.stale_listed(node, record.id, record.node)
                || self.duplicate_listed(node, record.id, record.node)
            {
                continue;
            }
            if origin.is_some() && self.foreign(Operand::Stats, node, &record) {
                continue;
            }
            self.reconcile(node, &record, stat.state)?;
        }
        let listed: Vec<Uuid> = stats.instances.iter().map(|s| s.instance_uuid).collect();
        self.stale_gone(node, &listed);
        // Placed here by the store, absent from the node's report.
        let absent: Vec<Uuid> = known.into_keys().collect();
        for record in self.store.instances_by_id(&absent)?.into_iter().flatten() {
            self.absent(node, &record)?;
        }
        Ok(())
    }

    /// A node reports an instance the store does not have: a CNCI, or a stranger (reported once).
    /// From `origin` (the node), a CNCI the store places on another node is left alone.
    fn unknown_instance(
        &self,
        origin: Option<Uuid>,
        node: Uuid,
        id: Uuid,
        reported: Reported,
    ) -> Result<(), ClusterError> {
        match self.store.cnci(Scope::All, id) {
            Ok(cnci) => {
                if origin.is_some() && self.foreign_cnci(Operand::Stats, node, &cnci) {
                    return Ok(());
                }
                if reported == Reported::Exited {
                    return self.cnci_exited(&cnci);
                }
                if cnci.node != Some(node) {
                    self.store.update_cnci(
                        cnci.id,
                        cnci.version,
                        CnciChange {
                            node: Some(Some(node)),
                            ..CnciChange::default()
                        },
                    )?;
                }
                return Ok(());
            }
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // Deleted here, yet a node runs it: its START got there after all (after the record
        // went). Nothing stands for it but the node's VM: delete it (again at most every
        // DELETE_RESEND while the node still reports it).
        if self.state().deleted.contains(&id) {
            if self.delete_due(id, SystemTime::now()) {
                self.event(
                    None,
                    EventKind::Warning,
                    format!(
                        "node {node} runs instance {id}, which was deleted before any node reported it; DELETE sent"
                    ),
                );
                if let Err(e) = self.send_delete(id, node, false) {
                    tracing::warn!("DELETE of {id} not sent: {e}");
                }
            }
            return Ok(());
        }
        let first = {
            let mut state = self.state();
            if state.strangers.len() >= super::MAX_STRANGERS {
                state.strangers.clear();
            }
            state.strangers.insert((node, id))
        };
        if first {
            self.event(
                None,
                EventKind::Warning,
                format!(
                    "node {node} runs instance {id}, which this controller does not know; left alone"
                ),
            );
        }
        Ok(())
    }

    /// Brings a record in line with what its node reports ([`unchanged`]: the pairs that need
    /// nothing, when the record places the instance on the reporting node).
    fn reconcile(
        &self,
        node: Uuid,
        record: &Instance,
        reported: Reported,
    ) -> Result<(), ClusterError> {
        let here = Some(node);
        if record.node.is_some_and(|n| n != node)
            && !matches!(record.state, InstanceState::Deleted | InstanceState::Hung)
        {
            // The store places it on another node: this node's copy is not the instance.
            tracing::debug!(instance = %record.id, %node, "a copy on a node that does not hold it; ignored");
            return Ok(());
        }
        let change = |state: InstanceState| InstanceChange {
            state: Some(state),
            node: Some(here),
            ..InstanceChange::default()
        };
        let (change, note) = match (&record.state, reported) {
            // The rebuild's new copy runs; before its START, what is reported is the old one.
            (InstanceState::Rebuilding, Reported::Active) if self.rebuild_under_way(record.id) => {
                self.rebuilt(record.id);
                (
                    change(InstanceState::Active),
                    Some(format!("instance {} rebuilt on node {node}", record.id)),
                )
            }
            (InstanceState::Rebuilding, _) => return Ok(()),
            (InstanceState::Pending, Reported::Active) => {
                actions::start_ended(self.store.as_ref(), record.id, EventOutcome::success());
                (change(InstanceState::Active), None)
            }
            (InstanceState::Pending, _) if record.node != here => (
                InstanceChange {
                    node: Some(here),
                    ..InstanceChange::default()
                },
                None,
            ),
            // Its START was given up for lost, yet here it is.
            (InstanceState::Error(reason), Reported::Active)
                if reason.starts_with(super::START_LOST) =>
            {
                (
                    change(InstanceState::Active),
                    Some(format!(
                        "instance {} is on node {node} after all",
                        record.id
                    )),
                )
            }
            (InstanceState::Missing, Reported::Active) => (
                change(InstanceState::Active),
                Some(format!("instance {} is back on node {node}", record.id)),
            ),
            (InstanceState::Missing, Reported::Exited) => (
                change(InstanceState::Exited),
                Some(format!(
                    "instance {} is back on node {node}, exited",
                    record.id
                )),
            ),
            (InstanceState::Missing, Reported::Paused) => (
                change(InstanceState::Paused),
                Some(format!(
                    "instance {} is back on node {node}, paused",
                    record.id
                )),
            ),
            (InstanceState::Missing, Reported::Suspended) => (
                change(InstanceState::Suspended),
                Some(format!(
                    "instance {} is back on node {node}, suspended",
                    record.id
                )),
            ),
            (InstanceState::Active | InstanceState::Paused, Reported::Exited) => (
                change(InstanceState::Exited),
                Some(format!("instance {} exited on its own", record.id)),
            ),
            // An INSTANCE_ACTION done: paused, suspended, or back to running.
            (InstanceState::Active, Reported::Paused) => (change(InstanceState::Paused), None),
            (InstanceState::Active | InstanceState::Paused, Reported::Suspended) => {
                (change(InstanceState::Suspended), None)
            }
            (InstanceState::Paused | InstanceState::Suspended, Reported::Active) => {
                (change(InstanceState::Active), None)
            }
            // Booted by its node (a RESTORE boots what an EVACUATE stopped).
            (InstanceState::Exited, Reported::Active) if record.node == here => (
                change(InstanceState::Active),
                Some(format!("instance {} runs again on node {node}", record.id)),
            ),
            // Deleted before anyone knew where it ran: now the DELETE can go.
            (InstanceState::Deleted | InstanceState::Hung, _) if record.node != here => {
                self.send_delete(record.id, node, false)?;
                (
                    InstanceChange {
                        node: Some(here),
                        ..InstanceChange::default()
                    },
                    None,
                )
            }
            // Deleted (or hung), and its node still has it: the DELETE was lost (a scheduler
            // or controller that died, a scheduler that was down when it was asked). Again.
            (InstanceState::Deleted | InstanceState::Hung, _) => {
                if self.delete_due(record.id, SystemTime::now()) {
                    tracing::info!(instance = %record.id, %node, "DELETE sent again: the node still reports the instance");
                    if let Err(e) = self.send_delete(record.id, node, false) {
                        tracing::warn!("DELETE of {} not sent: {e}", record.id);
                    }
                }
                return Ok(());
            }
            _ => return Ok(()),
        };
        if let Some(note) = note {
            self.event(Some(record.tenant), EventKind::Info, note);
        }
        self.cas(record, change)
    }

    /// An instance the store places on `node` that the node no longer reports.
    fn absent(&self, node: Uuid, record: &Instance) -> Result<(), ClusterError> {
        match record.state {
            // Its INSTANCE_DELETED was lost: the delete is done.
            InstanceState::Deleted | InstanceState::Hung => self.forget(record),
            // Its old copy is gone: the rebuild's START (unless it went already).
            InstanceState::Rebuilding if !self.rebuild_under_way(record.id) => {
                self.rebuild_removed(record)
            }
            InstanceState::Active
            | InstanceState::Stopping
            | InstanceState::Paused
            | InstanceState::Suspended => {
                self.event(
                    Some(record.tenant),
                    EventKind::Warning,
                    format!(
                        "instance {} ({}) vanished from node {node}",
                        record.id,
                        record.state.name()
                    ),
                );
                self.cas(
                    record,
                    InstanceChange {
                        state: Some(InstanceState::Missing),
                        ..InstanceChange::default()
                    },
                )
            }
            // Its node is back without it (the agent died before it kept a record of it, or
            // the VM is gone): it runs nowhere. Exited, so that a `start` can boot it again.
            InstanceState::Missing => {
                self.event(
                    Some(record.tenant),
                    EventKind::Warning,
                    format!(
                        "instance {} is not on node {node} any more: exited",
                        record.id
                    ),
                );
                self.cas(
                    record,
                    InstanceChange {
                        state: Some(InstanceState::Exited),
                        node: Some(None),
                        ..InstanceChange::default()
                    },
                )
            }
            // Its node does not hold it (an agent that removed it, or found nothing of it
            // after a restart): its disk is gone; a start builds it anew from its image.
            InstanceState::Exited => self.cas(
                record,
                InstanceChange {
                    node: Some(None),
                    ..InstanceChange::default()
                },
            ),
            _ => Ok(()),
        }
    }

    /// Writes `change` if `record` is still current; a record that moved meanwhile is left to
    /// the next report.
    fn cas(&self, record: &Instance, change: InstanceChange) -> Result<(), ClusterError> {
        match self
            .store
            .update_instance(Scope::All, record.id, record.version, change)
        {
            Ok(_) | Err(StoreError::Conflict(_)) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
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
        // Powered off and kept on its node: it stays placed there for a start.
        self.set_state(id, InstanceState::Exited, None).map(drop)
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
        self.event(
            Some(record.tenant),
            EventKind::Warning,
            format!(
                "instance {id} was deleted by its node while {}",
                record.state.name()
            ),
        );
        self.state().unconfirmed.remove(&id);
        // Removed from its node, with whatever was attached to it there.
        self.release_volumes(&record);
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

/// Whether a record in `state`, placed on the node that reports it `reported`, is already in line
/// with the report: [`Engine::reconcile`] would change nothing and do nothing.
fn unchanged(state: &InstanceState, reported: Reported) -> bool {
    matches!(
        (state, reported),
        (InstanceState::Active, Reported::Active)
            | (InstanceState::Exited, Reported::Exited)
            | (InstanceState::Paused, Reported::Paused)
            | (InstanceState::Suspended, Reported::Suspended)
    )
}
