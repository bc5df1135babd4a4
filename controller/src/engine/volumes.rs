//! Volumes attached to and detached from instances, the engine's part (the rules are
//! [`crate::volumes`]'s): ATTACH_VOLUME and DETACH_VOLUME out, and what the nodes say back.
//!
//! - An attach or a detach the API asks for changes the volume in the store (`attaching`,
//!   `detaching`), records an `attach_volume` / `detach_volume` action, and sends its frame to
//!   the instance's node; its node event (`node_attach_volume`, `node_detach_volume`) ends with
//!   what the node does.
//! - Success is not acknowledged by a frame: it shows in the node's STATS, whose
//!   `InstanceStat.volumes` lists the volumes attached to each instance now. A volume `attaching`
//!   to an instance that its node's STATS lists with the volume is `in-use`, held by that node
//!   from then on (its `node`, set once); one `detaching` that the STATS lists the instance
//!   without is `available`, detached (its `node` kept: its file stays there). Nothing changes on
//!   mere absence while `attaching`, nor for an instance the STATS does not list.
//! - ATTACH_VOLUME_FAILURE puts the volume back to `available` (detached), DETACH_VOLUME_FAILURE
//!   back to `in-use`; so does a DELIVERY_FAILURE of either frame (the scheduler could not reach
//!   the node), for every command of that kind this engine sent to that node that is still under
//!   way (the DELIVERY_FAILURE names the node, not the volume). The cause goes to the node
//!   event's `traceback` and to the event log.
//! - An instance whose record goes (or that its node removed) releases its volumes.
//!
//! STATS come every few seconds from every node, listing every instance: the store is read only
//! when an attach or a detach under way is settled by it. The engine keeps the commands under way
//! in memory ([`Ops`]), filled from the store when it starts and again every [`RESCAN`] (what
//! another controller sharing the store, or a previous run, started), so that a STATS with no
//! volume under way on its node costs one look at an empty map.

use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::{Duration, SystemTime};

use ssntp::payload::{AttachVolumeFailure, DeliveryFailure, Stats, VolumeCommand};
use ssntp::{Operand, Payload};
use uuid::Uuid;

use super::Engine;
use super::fault::serde_name;
use crate::actions::{self, ActionKind};
use crate::cluster::{Caller, ClusterError};
use crate::volumes as rules;
use store::{
    EventKind, EventOutcome, Instance, Scope, StoreError, Volume, VolumeChange, VolumeLimits,
    VolumeStatus,
};

/// How often the store's volumes are read again for attaches and detaches under way that this
/// engine did not start.
pub(super) const RESCAN: Duration = Duration::from_secs(60);

/// What a command under way does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    /// ATTACH_VOLUME.
    Attach,
    /// DETACH_VOLUME.
    Detach,
}

impl Kind {
    /// The volume's status while it is under way.
    fn status(self) -> VolumeStatus {
        match self {
            Kind::Attach => VolumeStatus::Attaching,
            Kind::Detach => VolumeStatus::Detaching,
        }
    }

    /// Its node event in the instance's action.
    fn event(self) -> &'static str {
        match self {
            Kind::Attach => actions::NODE_ATTACH_VOLUME,
            Kind::Detach => actions::NODE_DETACH_VOLUME,
        }
    }

    /// Its frame.
    fn operand(self) -> Operand {
        match self {
            Kind::Attach => Operand::AttachVolume,
            Kind::Detach => Operand::DetachVolume,
        }
    }

    /// The frame a node answers its failure with.
    fn failure(self) -> Operand {
        match self {
            Kind::Attach => Operand::AttachVolumeFailure,
            Kind::Detach => Operand::DetachVolumeFailure,
        }
    }
}

/// An attach or a detach under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Op {
    kind: Kind,
    /// The instance.
    instance: Uuid,
    /// The volume's tenant.
    tenant: Uuid,
    /// The volume's attachment.
    attachment: Uuid,
    /// The node the command went to (the instance's).
    node: Uuid,
    /// The status the volume goes back to if it fails (`available`, detached, for an attach).
    back: VolumeStatus,
    /// The request of the action that sent it, when this engine sent it.
    request: Option<String>,
    /// Whether this engine sent its frame (a DELIVERY_FAILURE is about one of those).
    sent: bool,
    /// When this engine learnt of it (wall clock).
    since: SystemTime,
}

impl Op {
    /// The command under way that `volume`'s record shows (`attaching` or `detaching`, with an
    /// attachment), sent to `node`.
    fn of_record(volume: &Volume, node: Uuid) -> Option<Op> {
        let kind = match volume.status {
            VolumeStatus::Attaching => Kind::Attach,
            VolumeStatus::Detaching => Kind::Detach,
            _ => return None,
        };
        let a = volume.attachment.as_ref()?;
        Some(Op {
            kind,
            instance: a.instance,
            tenant: volume.owner,
            attachment: a.id,
            node,
            back: match kind {
                Kind::Attach => VolumeStatus::Available,
                Kind::Detach => VolumeStatus::InUse,
            },
            request: None,
            sent: false,
            since: SystemTime::now(),
        })
    }

    /// Whether `volume` is still as this command left it.
    fn matches(&self, volume: &Volume) -> bool {
        volume.status == self.kind.status()
            && volume
                .attachment
                .as_ref()
                .is_some_and(|a| a.id == self.attachment && a.instance == self.instance)
    }
}

/// The commands under way, by volume.
pub(super) type Ops = HashMap<Uuid, Op>;

impl Engine {
    /// See [`crate::cluster::Cluster::attach_volume`].
    pub(super) fn attach_volume_to(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        device: Option<String>,
        by: &Caller,
    ) -> Result<Volume, ClusterError> {
        let (plan, node, size_mb, image, attaching) = {
            // One attach at a time: two attaches to one server must not pick one device.
            let _one = self
                .volume_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let plan = rules::plan_attach(
                self.store.as_ref(),
                scope,
                server,
                volume,
                device.as_deref(),
            )?;
            let node = self.volume_node(&plan.instance, "attach a volume (it is on no node)")?;
            let size_mb = plan.size_mb()?;
            let image = rules::fill_image(self.store.as_ref(), &plan.volume)?;
            self.require_connected()?;
            let attaching =
                rules::begin_attach(self.store.as_ref(), &plan, VolumeStatus::Attaching, None)?;
            (plan, node, size_mb, image, attaching)
        };
        let mut command = VolumeCommand::new(server, volume, node);
        command.size_mb = Some(size_mb);
        command.image = image;
        command.device = Some(plan.device.clone());
        let op = Op::of_record(&attaching, node)
            .ok_or_else(|| ClusterError::Conflict(format!("volume {volume} changed meanwhile")))?;
        self.volume_command(op, volume, Payload::AttachVolume(command), by)?;
        Ok(attaching)
    }

    /// See [`crate::cluster::Cluster::detach_volume`].
    pub(super) fn detach_volume_from(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        by: &Caller,
    ) -> Result<Volume, ClusterError> {
        let (instance, _) = rules::plan_detach(self.store.as_ref(), scope, server, volume)?;
        let node = self.volume_node(&instance, "detach a volume (it is on no node)")?;
        self.require_connected()?;
        let detaching = rules::begin_detach(
            self.store.as_ref(),
            volume,
            VolumeStatus::InUse,
            VolumeStatus::Detaching,
        )?;
        let op = Op::of_record(&detaching, node)
            .ok_or_else(|| ClusterError::Conflict(format!("volume {volume} changed meanwhile")))?;
        let command = VolumeCommand::new(server, volume, node);
        self.volume_command(op, volume, Payload::DetachVolume(command), by)?;
        Ok(detaching)
    }

    /// See [`crate::cluster::Cluster::force_detach_volume`].
    pub(super) fn force_detach(&self, volume: Uuid, by: &Caller) -> Result<Volume, ClusterError> {
        let current = self.store.volume(Scope::All, volume)?;
        let Some(attachment) = current.attachment.clone() else {
            return Err(ClusterError::Conflict(format!(
                "volume {volume} is attached to nothing"
            )));
        };
        let instance = match self.store.instance(Scope::All, attachment.instance) {
            Ok(i) => Some(i),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let node = match &instance {
            Some(i) if self.remote_of(i)?.is_none() => i.node,
            _ => None,
        };
        let (Some(instance), Some(node)) = (instance.clone(), node) else {
            // No node of ours holds the instance: nothing to take the volume from there.
            let released = rules::release(self.store.as_ref(), volume, attachment.instance)?
                .ok_or_else(|| {
                    ClusterError::Conflict(format!("volume {volume} changed meanwhile"))
                })?;
            self.drop_op(volume, Some("the volume was detached by force"));
            if released.status == VolumeStatus::Deleting {
                self.volume_going(&released);
            }
            if let Some(instance) = &instance {
                let ticket = self.begin_action(instance.id, ActionKind::DetachVolume, by);
                self.finish_action::<()>(&ticket, &Ok(()));
            }
            self.event(
                Some(current.owner),
                EventKind::Warning,
                format!(
                    "volume {volume} detached by force from instance {}, which is on no node",
                    attachment.instance
                ),
            );
            return Ok(released);
        };
        self.require_connected()?;
        let detaching = rules::begin_detach(
            self.store.as_ref(),
            volume,
            current.status,
            VolumeStatus::Detaching,
        )?;
        self.drop_op(volume, Some("the volume was detached by force"));
        let mut op = Op::of_record(&detaching, node)
            .ok_or_else(|| ClusterError::Conflict(format!("volume {volume} changed meanwhile")))?;
        op.back = current.status;
        let mut command = VolumeCommand::new(instance.id, volume, node);
        command.force = true;
        self.volume_command(op, volume, Payload::DetachVolume(command), by)?;
        Ok(detaching)
    }

    /// The node that holds `instance`, to send it a volume command: `NotAvailable` for an
    /// off-host instance, `InvalidState` (`operation`) for one on no node.
    fn volume_node(
        &self,
        instance: &Instance,
        operation: &'static str,
    ) -> Result<Uuid, ClusterError> {
        if self.remote_of(instance)?.is_some() {
            return Err(ClusterError::NotAvailable(format!(
                "instance {} is off-host: volumes are attached only to instances on cumulo's nodes",
                instance.id
            )));
        }
        instance.node.ok_or_else(|| ClusterError::InvalidState {
            id: instance.id,
            state: instance.state.name().into(),
            operation,
        })
    }

    /// Records the action of `op` (its volume changed in the store already), keeps `op` under
    /// way and sends `payload`; if it cannot be sent, the volume goes back.
    fn volume_command(
        &self,
        mut op: Op,
        volume: Uuid,
        payload: Payload,
        by: &Caller,
    ) -> Result<(), ClusterError> {
        let action = match op.kind {
            Kind::Attach => ActionKind::AttachVolume,
            Kind::Detach => ActionKind::DetachVolume,
        };
        let ticket = self.begin_action(op.instance, action, by);
        op.request = Some(ticket.request_id.clone());
        op.sent = true;
        self.state().volume_ops.insert(volume, op.clone());
        actions::node_event_started(
            self.store.as_ref(),
            op.instance,
            &ticket.request_id,
            op.kind.event(),
        );
        let sent = self.send(&payload);
        self.finish_action(&ticket, &sent);
        match &sent {
            Ok(()) => self.event(
                Some(op.tenant),
                EventKind::Info,
                format!(
                    "volume {volume}: {} of instance {} sent to node {}",
                    op.kind.operand().name(),
                    op.instance,
                    op.node
                ),
            ),
            Err(e) => {
                if let Err(undo) = self.undo_volume_op(volume, &op, &format!("not sent: {e}")) {
                    tracing::warn!(%volume, "volume not put back after an unsent command: {undo}");
                }
            }
        }
        sent
    }

    /// Forgets the command under way on `volume`, if any; its node event ends with `error`, when
    /// given.
    fn drop_op(&self, volume: Uuid, error: Option<&str>) {
        let Some(op) = self.state().volume_ops.remove(&volume) else {
            return;
        };
        if let Some(error) = error {
            actions::node_event_ended(
                self.store.as_ref(),
                op.instance,
                op.request.as_deref(),
                op.kind.event(),
                EventOutcome::error(error),
            );
        }
    }

    /// Forgets `op` on `volume` if it is still the one kept (a newer command stays).
    fn forget_op(&self, volume: Uuid, op: &Op) {
        let mut state = self.state();
        if state
            .volume_ops
            .get(&volume)
            .is_some_and(|kept| kept.attachment == op.attachment && kept.kind == op.kind)
        {
            state.volume_ops.remove(&volume);
        }
    }

    /// Ends `op` with `change` to its volume: forgotten unless the store failed; when the change
    /// was made (the volume had not moved meanwhile), its node event ends with `outcome` and
    /// true.
    fn end_volume_op(
        &self,
        volume: Uuid,
        op: &Op,
        change: VolumeChange,
        outcome: EventOutcome,
    ) -> Result<bool, ClusterError> {
        // A store that failed keeps the operation for the next try.
        match self
            .store
            .change_volume(Scope::All, volume, change, VolumeLimits::default())
        {
            Ok(_) => self.forget_op(volume, op),
            Err(StoreError::Conflict(_) | StoreError::NotFound { .. }) => {
                self.forget_op(volume, op);
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        }
        actions::node_event_ended(
            self.store.as_ref(),
            op.instance,
            op.request.as_deref(),
            op.kind.event(),
            outcome,
        );
        Ok(true)
    }

    /// Puts `volume` back where it was before `op` (unless it moved since), for `why`: recorded
    /// in its node event and the event log. Whether it was put back.
    fn undo_volume_op(&self, volume: Uuid, op: &Op, why: &str) -> Result<bool, ClusterError> {
        let current = match self.store.volume(Scope::All, volume) {
            Ok(v) => v,
            Err(StoreError::NotFound { .. }) => {
                self.forget_op(volume, op);
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        };
        if !op.matches(&current) {
            self.forget_op(volume, op);
            return Ok(false);
        }
        let change = VolumeChange {
            expect: Some(op.kind.status()),
            status: Some(op.back),
            attachment: (op.back == VolumeStatus::Available).then_some(None),
            ..VolumeChange::default()
        };
        if !self.end_volume_op(volume, op, change, EventOutcome::error(why))? {
            return Ok(false);
        }
        self.event(
            Some(op.tenant),
            EventKind::Error,
            format!(
                "volume {volume}: {} of instance {} on node {} failed: {why}; {} again",
                op.kind.operand().name(),
                op.instance,
                op.node,
                op.back.as_str()
            ),
        );
        Ok(true)
    }

    /// A node's STATS settles the attaches and detaches under way on its instances (see the
    /// module docs).
    pub(super) fn volumes_on_stats(&self, node: Uuid, stats: &Stats) -> Result<(), ClusterError> {
        self.boot_volumes_on_stats(node, stats)?;
        let due: Vec<(Uuid, Op)> = {
            let state = self.state();
            if state.volume_ops.is_empty() {
                return Ok(());
            }
            state
                .volume_ops
                .iter()
                .filter(|(_, op)| op.node == node)
                .map(|(v, op)| (*v, op.clone()))
                .collect()
        };
        if due.is_empty() {
            return Ok(());
        }
        let listed: HashMap<Uuid, &[Uuid]> = stats
            .instances
            .iter()
            .map(|s| (s.instance_uuid, s.volumes.as_slice()))
            .collect();
        for (volume, op) in due {
            let Some(volumes) = listed.get(&op.instance) else {
                continue;
            };
            let done = match op.kind {
                Kind::Attach => volumes.contains(&volume),
                Kind::Detach => !volumes.contains(&volume),
            };
            if done {
                self.volume_op_done(node, volume, &op)?;
            }
        }
        Ok(())
    }

    /// `node` reports `op` on `volume` done: `in-use` on that node, or `available`, detached.
    fn volume_op_done(&self, node: Uuid, volume: Uuid, op: &Op) -> Result<(), ClusterError> {
        let current = match self.store.volume(Scope::All, volume) {
            Ok(v) => v,
            Err(StoreError::NotFound { .. }) => {
                self.forget_op(volume, op);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if !op.matches(&current) {
            self.forget_op(volume, op);
            return Ok(());
        }
        // `matches` holds: the volume has the op's attachment.
        let (change, note) = match (op.kind, &current.attachment) {
            (Kind::Attach, Some(a)) => {
                if let Some(held) = current.node.filter(|held| *held != node) {
                    tracing::warn!(%volume, %node, %held, "a node reports a volume attached whose file another node holds");
                }
                let mut attached = a.clone();
                attached.attached = SystemTime::now();
                (
                    VolumeChange {
                        expect: Some(VolumeStatus::Attaching),
                        status: Some(VolumeStatus::InUse),
                        node: current.node.is_none().then_some(Some(node)),
                        attachment: Some(Some(attached)),
                        ..VolumeChange::default()
                    },
                    format!(
                        "volume {volume} attached to instance {} on node {node} as {}",
                        op.instance, a.device
                    ),
                )
            }
            (Kind::Detach, _) => (
                VolumeChange {
                    expect: Some(VolumeStatus::Detaching),
                    status: Some(VolumeStatus::Available),
                    attachment: Some(None),
                    ..VolumeChange::default()
                },
                format!(
                    "volume {volume} detached from instance {} on node {node}",
                    op.instance
                ),
            ),
            (Kind::Attach, None) => {
                self.forget_op(volume, op);
                return Ok(());
            }
        };
        if self.end_volume_op(volume, op, change, EventOutcome::success())? {
            self.event(Some(op.tenant), EventKind::Info, note);
        }
        Ok(())
    }

    /// An ATTACH_VOLUME_FAILURE or a DETACH_VOLUME_FAILURE (`kind`'s) from `origin`: a node's,
    /// which names that node and is about a volume of an instance the store places on it.
    pub(super) fn on_volume_failure(
        &self,
        origin: Option<Uuid>,
        failure: &AttachVolumeFailure,
        kind: Kind,
    ) -> Result<(), ClusterError> {
        let volume = failure.volume_uuid;
        let from = self.failing_node(origin);
        if let (Some(from), Some(named)) = (from, failure.node_uuid)
            && from != named
        {
            self.refuse(
                kind.failure(),
                from,
                format_args!("the failure of volume {volume} on node {named}"),
            );
            return Ok(());
        }
        let current = match self.store.volume(Scope::All, volume) {
            Ok(v) => v,
            Err(StoreError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let kept = self.state().volume_ops.get(&volume).cloned();
        let op = match kept.filter(|op| op.kind == kind && op.matches(&current)) {
            Some(op) => Some(op),
            None => {
                let node = match current.attachment.as_ref() {
                    Some(a) => match self.store.instance(Scope::All, a.instance) {
                        Ok(i) => i.node,
                        Err(StoreError::NotFound { .. }) => None,
                        Err(e) => return Err(e.into()),
                    },
                    None => None,
                };
                node.and_then(|node| Op::of_record(&current, node))
                    .filter(|op| op.kind == kind)
            }
        };
        let Some(op) = op.filter(|op| op.instance == failure.instance_uuid) else {
            tracing::info!(%volume, instance = %failure.instance_uuid, "{} of a volume not under way ignored: {}",
                kind.failure().name(), serde_name(&failure.reason));
            return Ok(());
        };
        if let Some(from) = from
            && from != op.node
        {
            self.refuse(
                kind.failure(),
                from,
                format_args!(
                    "the failure of volume {volume} of instance {}, which the store places on node {}",
                    op.instance, op.node
                ),
            );
            return Ok(());
        }
        let reason = serde_name(&failure.reason);
        let why = match failure.message.as_deref() {
            Some(message) if !message.is_empty() => format!("{reason}: {message}"),
            _ => reason,
        };
        self.undo_volume_op(volume, &op, &why).map(drop)
    }

    /// A DELIVERY_FAILURE of an ATTACH_VOLUME or a DETACH_VOLUME: each of that kind this engine
    /// sent to the node it names, still under way, goes back. Only the scheduler's own (or one
    /// applied in process) counts.
    pub(super) fn volumes_undelivered(
        &self,
        origin: Option<Uuid>,
        failure: &DeliveryFailure,
    ) -> Result<(), ClusterError> {
        let operand = Operand::from_wire(failure.operand_type, failure.operand);
        let kind = match operand {
            Operand::AttachVolume => Kind::Attach,
            Operand::DetachVolume => Kind::Detach,
            _ => return Ok(()),
        };
        if self.failing_node(origin).is_some() {
            tracing::warn!(
                ?origin,
                "a DELIVERY_FAILURE that is not the scheduler's ignored"
            );
            return Ok(());
        }
        let Some(node) = failure.target_uuid else {
            return Ok(());
        };
        let undelivered: Vec<(Uuid, Op)> = self
            .state()
            .volume_ops
            .iter()
            .filter(|(_, op)| op.sent && op.kind == kind && op.node == node)
            .map(|(v, op)| (*v, op.clone()))
            .collect();
        let why = format!(
            "the scheduler could not deliver {} to node {node}: {}",
            operand.name(),
            serde_name(&failure.reason)
        );
        for (volume, op) in undelivered {
            self.undo_volume_op(volume, &op, &why)?;
        }
        Ok(())
    }

    /// Releases the volumes of `instance`, as `why` says ([`rules::release_instance`]; a store
    /// error is logged).
    pub(super) fn release_volumes(&self, instance: &Instance, why: rules::Release) {
        let released = match rules::release_instance(self.store.as_ref(), instance, why) {
            Ok(released) => released,
            Err(e) => {
                tracing::warn!(instance = %instance.id, "its volumes were not released: {e}");
                return;
            }
        };
        for volume in released {
            self.drop_op(volume.id, Some("the instance went first"));
            self.state().boot_unplaced.remove(&volume.id);
            self.event(
                Some(instance.tenant),
                EventKind::Info,
                format!(
                    "volume {} released: instance {} is gone",
                    volume.id, instance.id
                ),
            );
            if volume.status == VolumeStatus::Deleting {
                self.volume_going(&volume);
            }
        }
    }

    /// Reads the store's volumes again when the last read is [`RESCAN`] old at `now`.
    pub(super) fn sweep_volumes(&self, now: SystemTime) -> Result<(), ClusterError> {
        let due = self
            .state()
            .volume_scan
            .is_none_or(|at| now.duration_since(at).unwrap_or_default() >= RESCAN);
        if due {
            self.scan_volumes(now)?;
        }
        self.sweep_going_volumes()
    }

    /// Learns the attaches and detaches under way from the store (started by a previous run, or
    /// by another controller); forgets those it keeps that are no longer. A volume attached to
    /// an instance that has no record any more is released.
    pub(super) fn scan_volumes(&self, now: SystemTime) -> Result<(), StoreError> {
        let read_at = SystemTime::now();
        let mut found = Ops::new();
        let mut orphans = Vec::new();
        let volumes = self.store.volumes(Scope::All)?;
        self.learn_boot_volumes(&volumes);
        for volume in volumes {
            if !matches!(
                volume.status,
                VolumeStatus::Attaching | VolumeStatus::Detaching
            ) {
                continue;
            }
            let Some(a) = &volume.attachment else {
                continue;
            };
            let node = match self.store.instance(Scope::All, a.instance) {
                Ok(i) => i.node,
                Err(StoreError::NotFound { .. }) => {
                    orphans.push((volume.id, a.instance));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(op) = node.and_then(|node| Op::of_record(&volume, node)) {
                found.insert(volume.id, op);
            }
        }
        {
            let mut state = self.state();
            state.volume_scan = Some(now);
            state
                .volume_ops
                .retain(|id, op| found.contains_key(id) || op.since >= read_at);
            for (id, op) in found {
                let keep = state
                    .volume_ops
                    .get(&id)
                    .is_some_and(|kept| kept.attachment == op.attachment && kept.kind == op.kind);
                if !keep {
                    state.volume_ops.insert(id, op);
                }
            }
        }
        for (volume, instance) in orphans {
            match rules::release(self.store.as_ref(), volume, instance) {
                Ok(Some(v)) => {
                    self.event(
                        Some(v.owner),
                        EventKind::Info,
                        format!("volume {volume} released: instance {instance} is gone"),
                    );
                    if v.status == VolumeStatus::Deleting {
                        self.volume_going(&v);
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(%volume, "volume of a gone instance not released: {e}"),
            }
        }
        Ok(())
    }
}
