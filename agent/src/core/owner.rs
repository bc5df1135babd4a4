//! The owner task: the one place that holds the node's instances, their reservations and the
//! maintenance flag. It admits or refuses STARTs, routes DELETEs to instance tasks, applies
//! what instance tasks report, and sends every report, in order, through the [`Reporter`].

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior, Sleep};
use uuid::Uuid;

use super::Snapshot;
use super::accounting::{self, report_figure};
use super::instance::{FirewallRefusal, InstanceCommand, Job, Task, Update};
use crate::backend::Backend;
use crate::config::Config;
use crate::host::HostFigures;
use crate::model::{
    Action, ActionRefusal, DeleteRefusal, InstanceEvent, InstanceReport, InstanceSpec,
    InstanceState, NodeReport, Resources, StartRefusal, StopCause, Usage, VolumeRefusal,
    VolumeSpec,
};
use crate::reporter::Reporter;
use crate::store::Store;

/// A command to the node, as the wiring hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// START: admit, create and boot an instance; with `restart`, boot one kept stopped here.
    Start(Box<InstanceSpec>),
    /// DELETE: remove an instance, or (`stop`) power it off and keep it.
    Delete {
        /// The instance.
        instance: Uuid,
        /// Power it off and keep it (INSTANCE_STOPPED) rather than delete it.
        stop: bool,
    },
    /// INSTANCE_ACTION: reboot, pause, suspend, ... an instance.
    Action {
        /// The instance.
        instance: Uuid,
        /// What to do.
        action: Action,
    },
    /// ATTACH_VOLUME: attach a volume to an instance (its `phase` is ignored).
    AttachVolume {
        /// The instance.
        instance: Uuid,
        /// The volume, its device, and how to make it on first use.
        volume: Box<VolumeSpec>,
    },
    /// DETACH_VOLUME: detach a volume from an instance.
    DetachVolume {
        /// The instance.
        instance: Uuid,
        /// The volume.
        volume: Uuid,
        /// Even if the guest does not release it.
        force: bool,
    },
    /// EVACUATE: enter maintenance (persisted) and stop every running instance, keeping it.
    Evacuate,
    /// RESTORE: leave maintenance and boot what the evacuation stopped.
    Restore,
    /// The wiring (re)connected: report the status and stats now.
    Announce,
}

/// What the owner's queue carries.
pub(crate) enum Request {
    Command(Command),
    Snapshot(oneshot::Sender<Snapshot>),
    Shutdown(oneshot::Sender<()>),
    Firewall(Uuid, InstanceCommand),
}

/// One instance as the owner keeps it.
pub(crate) struct Entry {
    pub reserved: Resources,
    pub state: InstanceState,
    pub usage: Usage,
    /// A remove (delete) is queued in its task: a second DELETE is answered by the first.
    pub removing: bool,
    /// The volumes attached to it, as its task last said.
    pub volumes: Vec<Uuid>,
    pub commands: mpsc::Sender<InstanceCommand>,
}

/// The owner's state.
pub(crate) struct Owner<B, R> {
    pub config: Config,
    pub backend: Arc<B>,
    pub reporter: R,
    pub store: Store,
    pub host: HostFigures,
    pub maintenance: bool,
    pub entries: BTreeMap<Uuid, Entry>,
    pub tasks: JoinSet<()>,
    pub updates_tx: mpsc::Sender<Update>,
    pub updates: mpsc::Receiver<Update>,
    last_stats: Option<Instant>,
    /// How many times the backend did not measure its instances within half an interval.
    slow_stats: u64,
    stats_due: Option<Instant>,
}

impl<B: Backend, R: Reporter> Owner<B, R> {
    /// An owner with no instances yet.
    pub(crate) fn new(
        config: Config,
        backend: Arc<B>,
        reporter: R,
        store: Store,
        host: HostFigures,
    ) -> Owner<B, R> {
        let (updates_tx, updates) = mpsc::channel(config.command_queue);
        Owner {
            config,
            backend,
            reporter,
            store,
            host,
            maintenance: false,
            entries: BTreeMap::new(),
            tasks: JoinSet::new(),
            updates_tx,
            updates,
            last_stats: None,
            slow_stats: 0,
            stats_due: None,
        }
    }

    /// Adds an instance and starts its task with `job` (`stopped_by`: why it is powered off,
    /// when it is and that is known).
    pub(crate) fn add(
        &mut self,
        instance: Uuid,
        spec: Option<InstanceSpec>,
        state: InstanceState,
        job: Job,
        stopped_by: Option<StopCause>,
    ) {
        let (commands, rx) = mpsc::channel(self.config.instance_queue);
        let reserved = spec.as_ref().map(|s| s.resources).unwrap_or_default();
        let volumes = spec
            .as_ref()
            .map(InstanceSpec::attached_volumes)
            .unwrap_or_default();
        let removing = matches!(job, Job::Remove(_));
        self.entries.insert(
            instance,
            Entry {
                reserved,
                state,
                usage: Usage::default(),
                removing,
                volumes,
                commands,
            },
        );
        let task = Task {
            instance,
            spec,
            backend: Arc::clone(&self.backend),
            store: self.store.clone(),
            updates: self.updates_tx.clone(),
            stopped_by,
        };
        self.tasks.spawn(task.run(job, rx));
    }

    /// Runs until shut down (or every handle is gone).
    pub(crate) async fn run(mut self, mut requests: mpsc::Receiver<Request>) {
        let period = self.config.stats_interval;
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut flush: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep(period));
        let done = loop {
            if let Some(due) = self.stats_due
                && flush.deadline() != due
            {
                flush.as_mut().reset(due);
            }
            tokio::select! {
                biased;
                Some(update) = self.updates.recv() => self.apply(update).await,
                Some(joined) = self.tasks.join_next() => {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "an instance task failed");
                    }
                }
                request = requests.recv() => match request {
                    Some(Request::Command(c)) => self.command(c).await,
                    Some(Request::Snapshot(reply)) => {
                        let (node, instances) = self.reports();
                        let _ = reply.send(Snapshot { node, instances });
                    }
                    Some(Request::Shutdown(reply)) => break Some(reply),
                    Some(Request::Firewall(instance, command)) => {
                        // A refused command drops its reply: the caller hears why from
                        // `queue`'s refusal, mapped in `Core::set_firewall`.
                        if let Err(e) = self.queue_firewall(instance, command) {
                            tracing::debug!(%instance, ?e, "a firewall update not queued");
                        }
                    }
                    None => break None,
                },
                _ = ticker.tick() => self.tick().await,
                () = &mut flush, if self.stats_due.is_some() => self.report_all(false).await,
            }
        };
        self.stop_tasks().await;
        if let Some(reply) = done {
            let _ = reply.send(());
        }
    }

    /// Lets every instance task finish its current command and end; instances keep running.
    async fn stop_tasks(&mut self) {
        // Dropping the senders ends the tasks once they are idle.
        self.entries.clear();
        loop {
            tokio::select! {
                // Still report what instances do until their tasks end, but no node status:
                // the owner no longer accounts for them.
                Some(update) = self.updates.recv() => match update {
                    Update::State(instance, state) => {
                        let event = InstanceEvent::State { instance, state };
                        self.reporter.event(&event).await;
                    }
                    Update::Event(event) => self.reporter.event(&event).await,
                    Update::Forget(_) | Update::Reserved(..) | Update::Volumes(..) => {}
                },
                joined = self.tasks.join_next() => match joined {
                    Some(Err(e)) => tracing::error!(error = %e, "an instance task failed"),
                    Some(Ok(())) => {}
                    None => break,
                },
            }
        }
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Start(spec) => self.start(*spec).await,
            Command::Delete { instance, stop } => {
                let queued = if stop {
                    self.queue(instance, InstanceCommand::Stop(StopCause::Requested))
                } else {
                    self.remove(instance)
                };
                if let Err(reason) = queued {
                    let event = InstanceEvent::DeleteFailed { instance, reason };
                    self.reporter.event(&event).await;
                }
            }
            Command::Action { instance, action } => {
                if let Err(reason) = self.queue(instance, InstanceCommand::Act(action)) {
                    let reason = match reason {
                        DeleteRefusal::NoInstance => ActionRefusal::NoInstance,
                        DeleteRefusal::Busy | DeleteRefusal::BackendFailure => ActionRefusal::Busy,
                    };
                    let event = InstanceEvent::ActionFailed {
                        instance,
                        action,
                        reason,
                        message: None,
                    };
                    self.reporter.event(&event).await;
                }
            }
            Command::AttachVolume { instance, volume } => {
                let id = volume.id;
                self.volume_command(instance, id, InstanceCommand::Attach(volume))
                    .await;
            }
            Command::DetachVolume {
                instance,
                volume,
                force,
            } => {
                let command = InstanceCommand::Detach { volume, force };
                self.volume_command(instance, volume, command).await;
            }
            Command::Evacuate => self.evacuate().await,
            Command::Restore => self.restore().await,
            Command::Announce => self.report_all(true).await,
        }
    }

    fn admission(&self, spec: &InstanceSpec) -> Result<(), StartRefusal> {
        let wanted = spec.resources;
        if wanted.vcpus == 0 || wanted.mem_mb == 0 {
            return Err(StartRefusal::InvalidData);
        }
        if self.maintenance {
            return Err(StartRefusal::NodeMaintenance);
        }
        // Duplicates before capacity: a repeated START of a running instance must get the
        // non-fatal `already_running`, not `full_cn`, even on a full node.
        if let Some(entry) = self.entries.get(&spec.instance) {
            return Err(if entry.state.is_live() {
                StartRefusal::AlreadyRunning
            } else {
                StartRefusal::InstanceExists
            });
        }
        let available = self.available();
        let limits = &self.config.limits;
        if !accounting::admits(
            available,
            self.entries.len(),
            wanted,
            limits,
            self.config.max_instances,
        ) {
            return Err(StartRefusal::FullCn);
        }
        Ok(())
    }

    /// A START with `restart`: boot the instance kept here, in its task.
    fn restart(&mut self, spec: &InstanceSpec) -> Result<(), StartRefusal> {
        if self.maintenance {
            return Err(StartRefusal::NodeMaintenance);
        }
        let kept = match self.entries.get(&spec.instance) {
            None => return Err(StartRefusal::InstanceMissing),
            Some(entry) if entry.removing => return Err(StartRefusal::InstanceExists),
            Some(entry) => entry.reserved,
        };
        // Other resources than it has: a resize, admitted for what it adds.
        let wanted = spec.resources;
        let resize = (wanted != kept).then_some(wanted);
        if resize.is_some() {
            if wanted.vcpus == 0 || wanted.mem_mb == 0 {
                return Err(StartRefusal::InvalidData);
            }
            let more = Resources {
                vcpus: wanted.vcpus.saturating_sub(kept.vcpus),
                mem_mb: wanted.mem_mb.saturating_sub(kept.mem_mb),
                disk_mb: wanted.disk_mb.saturating_sub(kept.disk_mb),
            };
            let others = self.entries.len().saturating_sub(1);
            let limits = &self.config.limits;
            if !accounting::admits(
                self.available(),
                others,
                more,
                limits,
                self.config.max_instances,
            ) {
                return Err(StartRefusal::FullCn);
            }
        }
        self.queue(spec.instance, InstanceCommand::Boot(resize))
            .map_err(|reason| match reason {
                DeleteRefusal::NoInstance => StartRefusal::InstanceMissing,
                DeleteRefusal::Busy | DeleteRefusal::BackendFailure => StartRefusal::FullCn,
            })
    }

    async fn start(&mut self, spec: InstanceSpec) {
        let instance = spec.instance;
        if spec.restart {
            if let Err(reason) = self.restart(&spec) {
                tracing::info!(%instance, ?reason, "restart refused");
                let message = (reason == StartRefusal::InstanceMissing)
                    .then(|| "the node does not hold this instance".to_string());
                let event = InstanceEvent::StartFailed {
                    instance,
                    reason,
                    restart: true,
                    message,
                };
                self.reporter.event(&event).await;
            }
            return;
        }
        match self.admission(&spec) {
            Ok(()) => {
                self.add(
                    instance,
                    Some(spec),
                    InstanceState::Pending,
                    Job::Launch,
                    None,
                );
                let event = InstanceEvent::State {
                    instance,
                    state: InstanceState::Pending,
                };
                self.reporter.event(&event).await;
                self.mark_changed();
            }
            Err(reason) => {
                tracing::info!(%instance, ?reason, "start refused");
                let event = InstanceEvent::StartFailed {
                    instance,
                    reason,
                    restart: spec.restart,
                    message: None,
                };
                self.reporter.event(&event).await;
            }
        }
        self.report_status().await;
    }

    /// Queues a command in the instance's task.
    fn queue(&mut self, instance: Uuid, command: InstanceCommand) -> Result<(), DeleteRefusal> {
        let entry = self
            .entries
            .get_mut(&instance)
            .ok_or(DeleteRefusal::NoInstance)?;
        match entry.commands.try_send(command) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(DeleteRefusal::Busy),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(DeleteRefusal::NoInstance),
        }
    }

    /// Queues an attach or a detach in the instance's task, answering when it cannot be.
    async fn volume_command(&mut self, instance: Uuid, volume: Uuid, command: InstanceCommand) {
        let detach = matches!(command, InstanceCommand::Detach { .. });
        if let Err(reason) = self.queue(instance, command) {
            let (reason, message) = match reason {
                DeleteRefusal::NoInstance => (VolumeRefusal::NoInstance, None),
                DeleteRefusal::Busy | DeleteRefusal::BackendFailure => (
                    VolumeRefusal::Busy,
                    Some("the instance is busy: its command queue is full".to_string()),
                ),
            };
            let event = InstanceEvent::VolumeFailed {
                instance,
                volume,
                detach,
                reason,
                message,
            };
            self.reporter.event(&event).await;
        }
    }

    /// Queues a firewall update in the instance's task, answering its reply when it cannot be.
    fn queue_firewall(
        &mut self,
        instance: Uuid,
        command: InstanceCommand,
    ) -> Result<(), FirewallRefusal> {
        let Some(entry) = self.entries.get_mut(&instance) else {
            return Err(answer(command, FirewallRefusal::NotFound));
        };
        match entry.commands.try_send(command) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(c)) => Err(answer(c, FirewallRefusal::Busy)),
            Err(mpsc::error::TrySendError::Closed(c)) => Err(answer(c, FirewallRefusal::NotFound)),
        }
    }

    /// Queues a delete in the instance's task (once: a second is answered by the first).
    fn remove(&mut self, instance: Uuid) -> Result<(), DeleteRefusal> {
        if self.entries.get(&instance).is_some_and(|e| e.removing) {
            return Ok(());
        }
        self.queue(instance, InstanceCommand::Remove { stop: None })?;
        if let Some(entry) = self.entries.get_mut(&instance) {
            entry.removing = true;
        }
        Ok(())
    }

    async fn set_maintenance(&mut self, on: bool) {
        self.maintenance = on;
        let store = self.store.clone();
        let result = tokio::task::spawn_blocking(move || store.set_maintenance(on)).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, on, "persisting the maintenance flag"),
            Err(e) => tracing::error!(error = %e, on, "persisting the maintenance flag"),
        }
    }

    async fn evacuate(&mut self) {
        tracing::info!("evacuating");
        self.set_maintenance(true).await;
        self.stop_live(StopCause::Evacuated);
        self.report_status().await;
    }

    /// Queues a stop (power off, keep) of every pending, active or paused instance.
    pub(crate) fn stop_live(&mut self, cause: StopCause) {
        let live: Vec<Uuid> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                !e.removing
                    && matches!(
                        e.state,
                        InstanceState::Pending | InstanceState::Active | InstanceState::Paused
                    )
            })
            .map(|(id, _)| *id)
            .collect();
        for instance in live {
            if let Err(reason) = self.queue(instance, InstanceCommand::Stop(cause)) {
                tracing::error!(%instance, ?reason, "cannot queue a stop");
            }
        }
    }

    /// Leaves maintenance, and boots (in their tasks) the instances an evacuation stopped.
    async fn restore(&mut self) {
        tracing::info!("restoring");
        self.set_maintenance(false).await;
        let all: Vec<Uuid> = self.entries.keys().copied().collect();
        for instance in all {
            if let Err(reason) = self.queue(instance, InstanceCommand::Restore) {
                tracing::error!(%instance, ?reason, "cannot queue a restore");
            }
        }
        self.report_status().await;
    }

    async fn apply(&mut self, update: Update) {
        match update {
            Update::State(instance, state) => {
                if let Some(entry) = self.entries.get_mut(&instance) {
                    entry.state = state;
                    if state == InstanceState::ExitFailed {
                        entry.removing = false;
                    }
                }
                self.reporter
                    .event(&InstanceEvent::State { instance, state })
                    .await;
                self.mark_changed();
            }
            Update::Event(event) => self.reporter.event(&event).await,
            Update::Forget(instance) => {
                self.entries.remove(&instance);
                self.mark_changed();
                self.report_status().await;
            }
            Update::Reserved(instance, resources) => {
                if let Some(entry) = self.entries.get_mut(&instance) {
                    entry.reserved = resources;
                }
                self.mark_changed();
            }
            Update::Volumes(instance, volumes) => {
                if let Some(entry) = self.entries.get_mut(&instance) {
                    entry.volumes = volumes;
                }
                self.mark_changed();
            }
        }
    }

    async fn tick(&mut self) {
        if let crate::host::HostSource::Probe { .. } = self.config.host {
            match self.config.host.sample() {
                Ok(host) => self.host = host,
                Err(e) => tracing::warn!(error = %e, "reading the host's figures"),
            }
        }
        // A backend slow to answer (libvirtd busy probing QEMU, say) must not silence the node:
        // past half an interval the report goes out with the figures measured last time.
        let wait = self.config.stats_interval / 2;
        match tokio::time::timeout(wait, self.backend.stats()).await {
            Ok(measured) => {
                for (instance, usage) in measured {
                    if let Some(entry) = self.entries.get_mut(&instance) {
                        entry.usage = usage;
                    }
                }
            }
            Err(_) => {
                self.slow_stats += 1;
                if self.slow_stats.is_power_of_two() {
                    tracing::warn!(
                        ?wait,
                        times = self.slow_stats,
                        "the backend did not measure its instances in time: last figures reported"
                    );
                }
            }
        }
        self.report_all(true).await;
    }

    /// A stats report is due soon: at once, or `change_report_gap` after the last one.
    fn mark_changed(&mut self) {
        if self.stats_due.is_none() {
            let now = Instant::now();
            let due = self
                .last_stats
                .map_or(now, |last| (last + self.config.change_report_gap).max(now));
            self.stats_due = Some(due);
        }
    }

    fn available(&self) -> accounting::Available {
        accounting::available(
            &self.host,
            self.vcpus_total(),
            self.entries.values().map(|e| (e.reserved, e.usage)),
        )
    }

    fn vcpus_total(&self) -> u32 {
        self.config.vcpus.unwrap_or(self.host.vcpus)
    }

    fn node_report(&self) -> NodeReport {
        let available = self.available();
        NodeReport {
            node: self.config.node,
            hostname: self.config.hostname.clone(),
            zone: self.config.zone.clone(),
            availability: accounting::availability(
                self.maintenance,
                available,
                self.entries.len(),
                &self.config.limits,
                self.config.max_instances,
            ),
            mem_total_mb: report_figure(accounting_i64(self.host.mem_total_mb)),
            mem_available_mb: report_figure(available.mem_mb),
            disk_total_mb: report_figure(accounting_i64(self.host.disk_total_mb)),
            disk_available_mb: report_figure(available.disk_mb),
            vcpus_total: self.vcpus_total(),
            vcpus_available: report_figure(available.vcpus),
            load: self.host.load,
            networks: self.config.networks.clone(),
        }
    }

    fn reports(&self) -> (NodeReport, Vec<InstanceReport>) {
        let instances = self
            .entries
            .iter()
            .map(|(id, e)| InstanceReport {
                instance: *id,
                state: e.state,
                usage: e.usage,
                volumes: e.volumes.clone(),
            })
            .collect();
        (self.node_report(), instances)
    }

    async fn report_status(&mut self) {
        let node = self.node_report();
        self.reporter.status(&node).await;
    }

    /// Stats (and the status first, when `with_status`).
    async fn report_all(&mut self, with_status: bool) {
        let (node, instances) = self.reports();
        if with_status {
            self.reporter.status(&node).await;
        }
        self.reporter.stats(&node, &instances).await;
        self.last_stats = Some(Instant::now());
        self.stats_due = None;
    }
}

fn accounting_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Answers a firewall command's reply with `refusal`; the refusal.
fn answer(command: InstanceCommand, refusal: FirewallRefusal) -> FirewallRefusal {
    if let InstanceCommand::Firewall(_, reply) = command {
        let _ = reply.send(Err(refusal.clone()));
    }
    refusal
}
