//! Launches ([`Cluster::launch`](crate::cluster::Cluster::launch) and
//! [`Cluster::launch_from_volume`](crate::cluster::Cluster::launch_from_volume)): the checks,
//! the instances made in the store, their STARTs.
//!
//! A launch from a volume attaches the volume to each instance as its root disk
//! ([`rules::ROOT_DEVICE`], `in-use` at once) between the instance's creation and its START, so
//! that the START ([`super::start`]) finds it: an existing volume (one instance), or a new one
//! per instance made from the workload's image (named as Nova names them: empty). Whatever
//! fails between the creations undoes them (the volume made, the instance record), so that a
//! refused launch leaves nothing behind; a quota reached part-way stops the launch and keeps
//! what was launched before it, as for a launch from an image.

use super::start::{Known, Plan};
use super::{Engine, TenantNetwork};
use crate::actions::{self, ActionKind};
use crate::cluster::{BootVolume, Caller, ClusterError, Launch, NodeStatus};
use crate::volumes as rules;
use store::{EventKind, Instance, NewVolume, Scope, StoreError, Volume};

/// How a launch's `create` actions are recorded.
pub(super) enum Begun {
    /// With the instances (a launch from an image): in order, each instance's ticket;
    /// `at_once` ([`Engine::starts_at_once`]): its `node_start` begun with it, and its
    /// controller's event recorded done ([`actions::Part::Done`]).
    WithInstances {
        /// Its STARTs go at once.
        at_once: bool,
        /// Each instance's action, in the order of the instances.
        tickets: Vec<actions::ActionTicket>,
    },
    /// Not yet (a launch from a volume): when its STARTs are dispatched.
    NotYet,
}

impl Engine {
    /// The checks every launch passes (its count, its name, its tenant, a scheduler to send to,
    /// room in the cluster) and what its instances are made from.
    pub(super) fn launch_plan(&self, scope: Scope, launch: &Launch) -> Result<Plan, ClusterError> {
        if launch.count == 0 || launch.count > Launch::MAX_COUNT {
            return Err(ClusterError::Invalid(format!(
                "count must be 1 to {}",
                Launch::MAX_COUNT
            )));
        }
        if launch.name.trim().is_empty() {
            return Err(ClusterError::Invalid("an instance needs a name".into()));
        }
        if !scope.owns(Some(launch.tenant)) {
            return Err(StoreError::not_found("tenant", launch.tenant).into());
        }
        let on_host_only = self.store.remote_hosts()?.is_empty();
        if on_host_only {
            self.require_connected()?;
        }
        let plan = self.plan(Scope::Tenant(launch.tenant), launch.workload)?;
        if on_host_only
            && let Some(capacity) = self.node_capacity(&plan.flavor)
            && u64::from(launch.count) > capacity
        {
            return Err(ClusterError::OverCapacity {
                requested: launch.count,
                capacity,
            });
        }
        Ok(plan)
    }

    /// One instance of `launch` in the store ([`Launch::make_instance`]).
    pub(super) fn new_instance(&self, launch: &Launch) -> Result<Instance, StoreError> {
        launch.make_instance(self.store.as_ref())
    }

    /// Whether the STARTs of `launch`, from an image, go as soon as their instances are made:
    /// no CNCI to wait for, an image a node can boot and no off-host host to go to (any id asks
    /// the same).
    pub(super) fn starts_at_once(&self, launch: &Launch, plan: &Plan) -> bool {
        self.config.tenant_network == TenantNetwork::None
            && plan.kernel.is_ok()
            && matches!(self.off_host_target(launch.workload), Ok(None))
    }

    /// Sends the STARTs of the instances `created` for `launch` (each with its `create` action,
    /// recorded already or now as `begun` says), then says how the launch went: `failure` (what
    /// stopped it part-way) once they are sent.
    pub(super) fn dispatch_launched(
        &self,
        launch: &Launch,
        plan: &Plan,
        created: Vec<Instance>,
        failure: Option<ClusterError>,
        by: &Caller,
        begun: Begun,
    ) -> Result<Vec<Instance>, ClusterError> {
        let from_image = matches!(begun, Begun::WithInstances { .. });
        let ids: Vec<uuid::Uuid> = created.iter().map(|i| i.id).collect();
        // A launch whose STARTs all go at once ([`Engine::starts_at_once`]) began each
        // instance's `node_start` with its action. Whatever then keeps a START from going
        // finishes it (below, and in `dispatch_known`).
        let (at_once, tickets) = match begun {
            Begun::WithInstances { at_once, tickets } => (at_once, tickets),
            Begun::NotYet => {
                // In one store transaction (one commit per launch, not one per instance).
                let request_id = actions::request_id_of(by);
                let mut tickets = Vec::new();
                let recorded = self.store.batch(&mut || {
                    tickets = actions::begin_many(
                        self.store.as_ref(),
                        &request_id,
                        &ids,
                        ActionKind::Create,
                        by,
                    );
                });
                if let Err(e) = recorded {
                    tracing::warn!(
                        "the actions of launch \"{}\" were not recorded: {e}",
                        launch.name
                    );
                    // A batch that could not begin ran nothing: every START still goes.
                    if tickets.len() < ids.len() {
                        tickets = ids
                            .iter()
                            .map(|&id| {
                                actions::ticket::<()>(&request_id, id, ActionKind::Create, Err(&e))
                            })
                            .collect();
                    }
                }
                (false, tickets)
            }
        };
        let known = Known {
            no_boot_volume: from_image,
            no_server_group: launch.server_group.is_none(),
            node_start_begun: at_once,
        };
        let mut launched = Vec::with_capacity(created.len());
        // The actions end in one store transaction. The dispatches before write on their own:
        // the records they make (a CNCI, an instance's CNCI) are committed before the answer to
        // their START can come back, and the store's write lock is not held while they read.
        // (On etcd, which has no batch, the store keeps several of each in flight instead.)
        self.mark_traced(&created, by);
        let mut outcome = Ok(());
        let mut dispatched_all = Vec::with_capacity(created.len());
        for (instance, ticket) in created.into_iter().zip(&tickets) {
            let dispatched = self.dispatch_known(instance, plan, false, known);
            let failed = dispatched.is_err();
            dispatched_all.push((ticket, dispatched));
            if failed {
                break;
            }
        }
        // What was not sent (a dispatch that failed, or one deferred) goes untraced.
        self.unmark_traced(&ids);
        if at_once {
            self.unsent_starts_ended(&ids, &dispatched_all);
        }
        let ends = controller_ends(at_once, &tickets, &dispatched_all);
        let ended = self
            .store
            .batch(&mut || actions::finish_many(self.store.as_ref(), &ends));
        if let Err(e) = ended {
            tracing::warn!(
                "the ends of launch \"{}\"'s actions were not recorded: {e}",
                launch.name
            );
        }
        for (_, dispatched) in dispatched_all {
            match dispatched {
                Ok(instance) => launched.push(instance),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        outcome?;
        match failure {
            Some(e) if launched.is_empty() => Err(e),
            Some(e) => {
                self.event(
                    Some(launch.tenant),
                    EventKind::Warning,
                    format!(
                        "launch of {} \"{}\" stopped after {}: {e}",
                        launch.count,
                        launch.name,
                        launched.len()
                    ),
                );
                Err(e)
            }
            None => Ok(launched),
        }
    }

    /// The `node_start` begun with the actions of a launch whose STARTs go at once, finished
    /// `Error` for each instance whose START did not go: a dispatch that failed (unless it
    /// finished it already), and every instance after it, which the launch did not dispatch.
    fn unsent_starts_ended(
        &self,
        ids: &[uuid::Uuid],
        dispatched: &[(&actions::ActionTicket, Result<Instance, ClusterError>)],
    ) {
        let mut why = None;
        for (ticket, outcome) in dispatched {
            if let Err(e) = outcome {
                let text = format!("dispatch_failure: the START was not sent: {e}");
                actions::start_ended(
                    self.store.as_ref(),
                    ticket.instance,
                    store::EventOutcome::error(text),
                );
                why = Some(e.to_string());
            }
        }
        let why = why.unwrap_or_else(|| "its action was not recorded".into());
        for &id in ids.iter().skip(dispatched.len()) {
            actions::start_ended(
                self.store.as_ref(),
                id,
                store::EventOutcome::error(format!(
                    "dispatch_failure: the launch stopped before this START was sent: {why}"
                )),
            );
        }
    }

    /// See [`crate::cluster::Cluster::launch_from_volume`].
    pub(super) fn launch_booted(
        &self,
        scope: Scope,
        launch: Launch,
        boot: BootVolume,
        by: &Caller,
    ) -> Result<Vec<Instance>, ClusterError> {
        let plan = self.launch_plan(scope, &launch)?;
        // Off-host hosts take the instances only while no node of cumulo's own is ready (any id
        // asks the same).
        if self.off_host_target(launch.workload)?.is_some() {
            return Err(ClusterError::NotAvailable(
                "no compute node of cumulo's own is ready, and a server booted from a volume \
                 runs only on those (off-host hosts keep no volumes)"
                    .into(),
            ));
        }
        let mut created = Vec::new();
        let mut failure = None;
        match boot {
            BootVolume::Volume {
                id,
                delete_on_termination,
            } => {
                if launch.count != 1 {
                    return Err(ClusterError::Invalid(
                        "Cannot attach one or more volumes to multiple instances".into(),
                    ));
                }
                let volume = rules::plan_boot(self.store.as_ref(), launch.tenant, id)?;
                if volume.image != Some(plan.image.id) {
                    return Err(ClusterError::Invalid(format!(
                        "volume {id} was made from image {}, not from the workload's image {}",
                        volume
                            .image
                            .map_or_else(|| "(none)".into(), |i| i.to_string()),
                        plan.image.id
                    )));
                }
                self.require_volume_node(&volume)?;
                let instance = self.new_instance(&launch)?;
                self.boot_from(&volume, instance, delete_on_termination, false)
                    .map(|i| created.push(i))?;
            }
            BootVolume::Image {
                size_gb,
                delete_on_termination,
                limits,
            } => {
                rules::check_volume_image(&plan.image, size_gb, false)
                    .map_err(ClusterError::Invalid)?;
                for _ in 0..launch.count {
                    let volume = match self.store.create_volume(
                        NewVolume {
                            owner: launch.tenant,
                            name: String::new(),
                            description: String::new(),
                            size_gb,
                            image: Some(plan.image.id),
                            bootable: true,
                        },
                        limits,
                    ) {
                        Ok(v) => v,
                        Err(e) => {
                            failure = Some(e.into());
                            break;
                        }
                    };
                    let made = match self.new_instance(&launch) {
                        Ok(instance) => {
                            self.boot_from(&volume, instance, delete_on_termination, true)
                        }
                        Err(e) => {
                            self.drop_new_volume(&volume);
                            Err(e.into())
                        }
                    };
                    match made {
                        Ok(instance) => created.push(instance),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
        }
        self.dispatch_launched(&launch, &plan, created, failure, by, Begun::NotYet)
    }

    /// `Conflict` when `volume`'s file is on a node that is not connected: a server booted from
    /// it can run only there.
    fn require_volume_node(&self, volume: &Volume) -> Result<(), ClusterError> {
        let Some(node) = volume.node else {
            return Ok(());
        };
        if self.avoided_nodes().contains(&node) {
            return Err(ClusterError::Conflict(format!(
                "volume {} is on node {node} (its file is there), which an admin disabled: a \
                 server booted from it can only run on that node; enable the node first",
                volume.id
            )));
        }
        let connected = self
            .state()
            .nodes
            .get(&node)
            .is_some_and(|n| n.kinds.compute && n.status != NodeStatus::Disconnected);
        if connected {
            Ok(())
        } else {
            Err(ClusterError::Conflict(format!(
                "volume {} is on node {node} (its file is there), which is not connected: a \
                 server booted from it can only run on that node",
                volume.id
            )))
        }
    }

    /// Attaches `volume` to the new `instance` as its root disk; if it cannot, the instance's
    /// record goes (and the volume too when it was made for it: `made`).
    fn boot_from(
        &self,
        volume: &Volume,
        instance: Instance,
        delete_on_termination: bool,
        made: bool,
    ) -> Result<Instance, ClusterError> {
        match rules::begin_boot(
            self.store.as_ref(),
            volume,
            instance.id,
            delete_on_termination,
        ) {
            Ok(attached) => {
                if attached.node.is_none() {
                    self.state().boot_unplaced.insert(attached.id, instance.id);
                }
                Ok(instance)
            }
            Err(e) => {
                if let Err(undo) = self.store.delete_instance(Scope::All, instance.id) {
                    tracing::warn!(instance = %instance.id, "a launch's instance not removed after its volume failed: {undo}");
                }
                if made {
                    self.drop_new_volume(volume);
                }
                Err(e)
            }
        }
    }

    /// Removes a volume a launch made and could not use (it is on no node: a record only).
    fn drop_new_volume(&self, volume: &Volume) {
        if let Err(e) = self.store.delete_volume(Scope::All, volume.id) {
            tracing::warn!(volume = %volume.id, "a launch's new volume not removed: {e}");
        }
    }
}

/// How the controller's part of each action of a launch ended, to record: the outcome of each
/// dispatch (only those that failed when the STARTs went at once: the others' part was
/// recorded done with their actions), and `Error` for each instance after a failed dispatch,
/// which the launch did not dispatch.
pub(super) fn controller_ends<'t>(
    at_once: bool,
    tickets: &'t [actions::ActionTicket],
    dispatched: &[(&'t actions::ActionTicket, Result<Instance, ClusterError>)],
) -> Vec<(&'t actions::ActionTicket, store::EventOutcome)> {
    let failed = dispatched.iter().find_map(|(_, d)| d.as_ref().err());
    let not_sent = failed.map(|e| {
        store::EventOutcome::error(format!(
            "the launch stopped before this START was sent: {e}"
        ))
    });
    let handed_on = dispatched
        .iter()
        .filter(|(_, d)| !at_once || d.is_err())
        .map(|(ticket, d)| (*ticket, actions::outcome_of(d)));
    let left = tickets
        .iter()
        .skip(dispatched.len())
        .filter_map(|ticket| Some((ticket, not_sent.clone()?)));
    handed_on.chain(left).collect()
}
