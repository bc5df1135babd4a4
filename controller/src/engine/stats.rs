//! A node's STATS ([`Engine::on_stats`]): its figures in the node table, and each instance it
//! reports (or no longer reports) reconciled with the instance's record.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use ssntp::Operand;
use ssntp::payload::{InstanceState as Reported, NodeState, Stats};
use uuid::Uuid;

use super::Engine;
use crate::actions;
use crate::cluster::{ClusterError, NodeStatus};
use store::{
    CnciChange, EventKind, EventOutcome, Instance, InstanceAction, InstanceBrief, InstanceChange,
    InstanceState, Scope, Starting, StoreError, ToStart,
};

impl Engine {
    /// A node's STATS: its figures, and each instance it reports (or no longer reports)
    /// reconciled with the store. The first STATS of a node that comes back after it was lost
    /// settles its `missing` instances: `active` ones are active again, `exited` ones exited (on
    /// it), absent ones exited with no node; in any other state they stay missing until a later
    /// STATS shows them active or exited. From `origin`, it must describe that node.
    pub(super) fn on_stats(&self, origin: Option<Uuid>, stats: &Stats) -> Result<(), ClusterError> {
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
        // Each instance once: the first listing is the report's.
        let mut seen = HashSet::with_capacity(stats.instances.len());
        let listed: Vec<(Uuid, Reported)> = stats
            .instances
            .iter()
            .filter(|stat| seen.insert(stat.instance_uuid))
            .map(|stat| (stat.instance_uuid, stat.state))
            .collect();
        // Reported running and pending in the store, on this node (its brief, whose version the
        // store checks) or on none yet (the first report after its START): started in one
        // change with its START's `node_start`, many together (etcd: one read and one commit).
        // The store checks that each still starts there (`ToStart::starts`); any other it
        // reads, for the reconciliation below. A copy that may be stale or second (an instance
        // moved off this node, a START sent twice) is read whole first.
        let starters: Vec<ToStart> = {
            let state = self.state();
            listed
                .iter()
                .filter(|&&(_, reported)| reported == Reported::Active)
                .filter_map(|&(id, _)| match known.get(&id) {
                    Some(brief)
                        if brief.node == Some(node) && brief.state == InstanceState::Pending =>
                    {
                        Some(ToStart {
                            id,
                            version: Some(brief.version),
                        })
                    }
                    Some(_) => None,
                    None => (state.relocated.get(&id) != Some(&node)
                        && !state.resent.contains(&id))
                    .then_some(ToStart { id, version: None }),
                })
                .collect()
        };
        let mut records: HashMap<Uuid, Instance> = HashMap::new();
        let mut settled: HashSet<Uuid> = HashSet::with_capacity(starters.len());
        let mut again: Vec<Uuid> = Vec::new();
        let answers = self.store.start_instances_on(
            node,
            &starters,
            actions::NODE_START,
            EventOutcome::success(),
        );
        for (one, answer) in starters.iter().zip(answers) {
            match answer {
                Ok(Starting::Left(record)) => {
                    records.insert(one.id, record);
                }
                // Gone since the listing, or a stranger: as below.
                Err(StoreError::NotFound { .. }) => {}
                Ok(Starting::Started(_, finished)) => {
                    self.start_written(one.id, Ok(finished))?;
                    settled.insert(one.id);
                    // Confirmed: the sweep need not read its record again.
                    self.state().dispatched.remove(&one.id);
                }
                // Kept changing: not known to be this node's to start. Read whole below.
                Err(StoreError::Conflict(_)) if one.version.is_none() => again.push(one.id),
                Err(e) => {
                    self.start_written(one.id, Err(e))?;
                    settled.insert(one.id);
                }
            }
        }
        // The others to reconcile, read together (one round trip per many on etcd).
        let starting: HashSet<Uuid> = starters.iter().map(|one| one.id).collect();
        let wanted: Vec<Uuid> = listed
            .iter()
            .filter(|&&(id, reported)| {
                !starting.contains(&id)
                    && !known.get(&id).is_some_and(|brief| {
                        brief.node == Some(node) && unchanged(&brief.state, reported)
                    })
            })
            .map(|&(id, _)| id)
            .chain(again)
            .collect();
        records.extend(
            self.store
                .instances_by_id(&wanted)?
                .into_iter()
                .flatten()
                .map(|i| (i.id, i)),
        );
        for &(id, reported) in &listed {
            let brief = known.remove(&id);
            if settled.contains(&id) {
                continue;
            }
            let record = match brief {
                Some(brief) if brief.node == Some(node) && unchanged(&brief.state, reported) => {
                    continue;
                }
                Some(_) => match records.get(&id) {
                    Some(record) => record.clone(),
                    // Gone since the listing: as if it had not been listed.
                    None => continue,
                },
                None => match records.get(&id) {
                    Some(record) => record.clone(),
                    None => {
                        self.unknown_instance(origin, node, id, reported)?;
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
            self.reconcile(node, &record, reported)?;
        }
        let listed: Vec<Uuid> = listed.into_iter().map(|(id, _)| id).collect();
        self.stale_gone(node, &listed);
        // Placed here by the store, absent from the node's report.
        let absent: Vec<Uuid> = known.into_keys().collect();
        for record in self.store.instances_by_id(&absent)?.into_iter().flatten() {
            // Moved off it since the listing (another node's report, applied side by side):
            // not this node's to settle.
            if record.node == Some(node) {
                self.absent(node, &record)?;
            }
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
                    // Changed meanwhile: left to the next report, as below.
                    return match self.cnci_exited(&cnci) {
                        Err(ClusterError::Store(StoreError::Conflict(_))) => Ok(()),
                        done => done,
                    };
                }
                if cnci.node != Some(node) {
                    // Changed meanwhile (another node's report, applied side by side): left to
                    // the next report.
                    match self.store.update_cnci(
                        cnci.id,
                        cnci.version,
                        CnciChange {
                            node: Some(Some(node)),
                            ..CnciChange::default()
                        },
                    ) {
                        Ok(_) | Err(StoreError::Conflict(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
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
            // Its START done: the record and the START's `node_start` in one change.
            (InstanceState::Pending, Reported::Active) => {
                return self.started(record.id, record.version, node);
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

    /// Pending instance `id` (its record at `version`) is active on `node`: written as
    /// [`Engine::cas`] does, with its START's `node_start` finished (that one whether or not the
    /// record moved meanwhile).
    fn started(&self, id: Uuid, version: u64, node: Uuid) -> Result<(), ClusterError> {
        let written = self
            .store
            .update_instance_finishing_event(
                id,
                version,
                Starting::change(node),
                actions::NODE_START,
                EventOutcome::success(),
            )
            .map(|(_, finished)| finished);
        self.start_written(id, written)
    }

    /// What the store answered to instance `id`'s start: the event's answer inside the
    /// record's.
    fn start_written(
        &self,
        id: Uuid,
        written: Result<Result<Option<InstanceAction>, StoreError>, StoreError>,
    ) -> Result<(), ClusterError> {
        match written {
            Ok(Ok(_)) => Ok(()),
            // The record written, its event not: logged, as any action's write that fails.
            Ok(Err(e)) => {
                tracing::warn!(instance = %id, "cannot record a START's outcome in the instance's actions: {e}");
                Ok(())
            }
            // Neither written: the event on its own.
            Err(StoreError::Conflict(_) | StoreError::NotFound { .. }) => {
                actions::start_ended(self.store.as_ref(), id, EventOutcome::success());
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `change` if `record` is still current; a record that moved meanwhile is left to
    /// the next report.
    pub(super) fn cas(
        &self,
        record: &Instance,
        change: InstanceChange,
    ) -> Result<(), ClusterError> {
        match self
            .store
            .update_instance(Scope::All, record.id, record.version, change)
        {
            Ok(_) | Err(StoreError::Conflict(_)) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
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
