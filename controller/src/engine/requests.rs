//! What the API asks of the cluster: the engine's [`Cluster`] implementation (launches,
//! deletes, actions, nodes, CNCIs, events and traces as the REST handlers see them).

use super::*;
use launch::Begun;

impl Cluster for Engine {
    fn launch(
        &self,
        scope: Scope,
        launch: Launch,
        by: &Caller,
    ) -> Result<Vec<Instance>, ClusterError> {
        let plan = self.launch_plan(scope, &launch)?;
        // Each instance's `create` action is recorded with it (in its transaction where the
        // store can). When the STARTs go at once, `node_start` is begun with it and the
        // controller's part recorded done: only a START that then does not go writes the
        // action again (one store write per instance less).
        let request_id = actions::request_id_of(by);
        let at_once = self.starts_at_once(&launch, &plan);
        let (part, also): (_, &[&str]) = match at_once {
            true => (actions::Part::Done, &[actions::NODE_START]),
            false => (actions::Part::Open, &[]),
        };
        let action =
            actions::new_action(&request_id, Uuid::nil(), ActionKind::Create, by, part, also);
        let mut created = Vec::with_capacity(launch.count as usize);
        let mut tickets = Vec::with_capacity(launch.count as usize);
        let mut failure = None;
        // The records in one store transaction (one commit for the launch), committed before
        // any START goes: an instance is never started without its record.
        let committed = self.store.batch(&mut || {
            let (made, stopped) = launch.make_instances_with(self.store.as_ref(), action.clone());
            for (instance, recorded) in made {
                tickets.push(actions::ticket(
                    &request_id,
                    instance.id,
                    ActionKind::Create,
                    recorded.as_ref(),
                ));
                created.push(instance);
            }
            failure = stopped.map(ClusterError::from);
        });
        if let Err(e) = committed {
            created.clear();
            tickets.clear();
            failure = Some(e.into());
        }
        let begun = Begun::WithInstances { at_once, tickets };
        self.dispatch_launched(&launch, &plan, created, failure, by, begun)
    }

    fn launch_from_volume(
        &self,
        scope: Scope,
        launch: Launch,
        boot: BootVolume,
        by: &Caller,
    ) -> Result<Vec<Instance>, ClusterError> {
        self.launch_booted(scope, launch, boot, by)
    }

    fn capacity(&self, flavor: &Flavor) -> Result<Option<u64>, ClusterError> {
        Ok(match self.store.remote_hosts()?.is_empty() {
            true => self.node_capacity(flavor),
            false => None,
        })
    }

    fn stop(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<Instance, ClusterError> {
        let current = self.store.instance(scope, id)?;
        if let Some(host) = self.remote_of(&current)? {
            return self.off_host_change(
                scope,
                &current,
                &host,
                offhost::Step {
                    to: InstanceState::Stopping,
                    from: |s| *s == InstanceState::Active,
                    action: ActionKind::Stop,
                    queue: &[(OperationKind::Stop, false)],
                },
                by,
            );
        }
        self.require_connected()?;
        let (instance, node) = self
            .transition(scope, id, |i| match (&i.state, i.node) {
                (InstanceState::Active, Some(node)) => Ok(Some((
                    InstanceChange {
                        state: Some(InstanceState::Stopping),
                        ..InstanceChange::default()
                    },
                    node,
                ))),
                _ => Err(invalid(i, "stop")),
            })?
            .ok_or_else(|| StoreError::not_found("instance", id))?;
        self.wait_confirmation(id);
        let ticket = self.begin_action(id, ActionKind::Stop, by);
        let sent = self.send_delete(id, node, true);
        self.finish_action(&ticket, &sent);
        sent?;
        Ok(instance)
    }

    fn start(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<Instance, ClusterError> {
        let current = self.store.instance(scope, id)?;
        if let Some(host) = self.remote_of(&current)? {
            // Stopped and kept on its off-host host: boot it there (a START with `restart`).
            return self.off_host_change(
                scope,
                &current,
                &host,
                offhost::Step {
                    to: InstanceState::Pending,
                    from: |s| *s == InstanceState::Exited,
                    action: ActionKind::Start,
                    queue: &[(OperationKind::Start, true)],
                },
                by,
            );
        }
        if self.store.remote_hosts()?.is_empty() {
            self.require_connected()?;
        }
        // Stopped and kept on its node: boot it there, from its disks (a START with `restart`,
        // pinned to that node). If the node cannot, the start fails and the instance stays
        // stopped there, with the fault: never a new VM elsewhere. On no node (failed, or its
        // node no longer holds it): nothing is kept anywhere; a new VM from its image.
        let startable = |i: &Instance| {
            matches!(
                (&i.state, i.node),
                (InstanceState::Exited, _) | (InstanceState::Error(_), None)
            )
        };
        if !startable(&current) {
            return Err(invalid(&current, "start"));
        }
        let kept = current.node.is_some();
        let plan = self.plan(Scope::Tenant(current.tenant), current.workload)?;
        let (instance, ()) = self
            .transition(scope, id, |i| {
                if !startable(i) || i.node.is_some() != kept {
                    return Err(invalid(i, "start"));
                }
                Ok(Some((
                    InstanceChange {
                        state: Some(InstanceState::Pending),
                        fault: Some(None),
                        cnci: if kept { None } else { Some(None) },
                        ..InstanceChange::default()
                    },
                    (),
                )))
            })?
            .ok_or_else(|| StoreError::not_found("instance", id))?;
        let ticket = self.begin_action(id, ActionKind::Start, by);
        let dispatched = self.dispatch(instance, &plan, kept);
        self.finish_action(&ticket, &dispatched);
        dispatched
    }

    fn act(
        &self,
        scope: Scope,
        id: Uuid,
        action: InstanceAction,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        let current = self.store.instance(scope, id)?;
        if matches!(action, InstanceAction::Reboot | InstanceAction::RebootHard) {
            return self.reboot_instance(scope, current, action, by);
        }
        self.refuse_off_host(&current, action.name())?;
        self.instance_action(current, action, by)
    }

    fn rebuild(
        &self,
        scope: Scope,
        id: Uuid,
        rebuild: Rebuild,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        self.rebuild_instance(scope, id, rebuild, by)
    }

    fn resize(
        &self,
        scope: Scope,
        id: Uuid,
        step: ResizeStep,
        by: &Caller,
    ) -> Result<Instance, ClusterError> {
        let current = self.store.instance(scope, id)?;
        self.refuse_off_host(&current, "resize")?;
        crate::resize::apply(self.store.as_ref(), scope, id, step, by)
    }

    fn delete(&self, scope: Scope, id: Uuid, by: &Caller) -> Result<(), ClusterError> {
        let current = self.store.instance(scope, id)?;
        match (&current.state, current.node) {
            // Never ran anywhere, or a delete that was never confirmed: the record goes now.
            (InstanceState::Error(_) | InstanceState::Exited, None) | (InstanceState::Hung, _) => {
                if current.state == InstanceState::Hung {
                    self.event(
                        Some(current.tenant),
                        EventKind::Warning,
                        format!(
                            "instance {id} removed without its node's confirmation (it was hung)"
                        ),
                    );
                }
                let ticket = self.begin_action(id, ActionKind::Delete, by);
                let forgotten = self.forget(&current);
                self.finish_action(&ticket, &forgotten);
                forgotten
            }
            (InstanceState::Deleted, _) => Ok(()),
            _ if self.remote_of(&current)?.is_some() => {
                let host = self
                    .remote_of(&current)?
                    .ok_or_else(|| StoreError::not_found("node", id))?;
                self.off_host_change(
                    scope,
                    &current,
                    &host,
                    offhost::Step {
                        to: InstanceState::Deleted,
                        from: |_| true,
                        action: ActionKind::Delete,
                        queue: &[(OperationKind::Delete, false)],
                    },
                    by,
                )?;
                Ok(())
            }
            _ => {
                let (instance, ()) = self
                    .transition(scope, id, |_| {
                        Ok(Some((
                            InstanceChange {
                                state: Some(InstanceState::Deleted),
                                ..InstanceChange::default()
                            },
                            (),
                        )))
                    })?
                    .ok_or_else(|| StoreError::not_found("instance", id))?;
                self.wait_confirmation(id);
                let ticket = self.begin_action(id, ActionKind::Delete, by);
                // Not placed yet: the DELETE goes when a STATS shows where it landed (or its
                // START fails and the record goes).
                let mut sent = Ok(());
                if let Some(node) = instance.node {
                    // A scheduler that is down now: the sweep marks the instance hung, and the
                    // node's next STATS (or its absence from it) settles it.
                    sent = self.send_delete(id, node, false);
                    if let Err(e) = &sent {
                        tracing::warn!("DELETE of {id} not sent: {e}");
                    }
                }
                self.finish_action(&ticket, &sent);
                Ok(())
            }
        }
    }

    fn console(&self, scope: Scope, id: Uuid, lines: usize) -> Result<String, ClusterError> {
        self.console_log(scope, id, lines)
    }

    fn disk_source(
        &self,
        scope: Scope,
        id: Uuid,
    ) -> Result<crate::cluster::NodeEndpoint, ClusterError> {
        self.disk_endpoint(scope, id)
    }

    fn delete_volume_data(&self, node: Uuid, volume: Uuid) -> Result<(), ClusterError> {
        self.remove_volume_data(node, volume)
    }

    fn attach_volume(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        device: Option<String>,
        by: &Caller,
    ) -> Result<store::Volume, ClusterError> {
        self.attach_volume_to(scope, server, volume, device, by)
    }

    fn detach_volume(
        &self,
        scope: Scope,
        server: Uuid,
        volume: Uuid,
        by: &Caller,
    ) -> Result<store::Volume, ClusterError> {
        self.detach_volume_from(scope, server, volume, by)
    }

    fn force_detach_volume(
        &self,
        volume: Uuid,
        by: &Caller,
    ) -> Result<store::Volume, ClusterError> {
        self.force_detach(volume, by)
    }

    fn nodes(&self) -> Vec<Node> {
        self.state().nodes.values().cloned().collect()
    }

    fn node(&self, id: Uuid) -> Result<Node, ClusterError> {
        self.state()
            .nodes
            .get(&id)
            .cloned()
            .ok_or(ClusterError::NoNode(id))
    }

    fn node_history(&self, id: Uuid) -> Result<Vec<crate::history::Sample>, ClusterError> {
        let state = self.state();
        if !state.nodes.contains_key(&id) {
            return Err(ClusterError::NoNode(id));
        }
        Ok(state
            .history
            .get(&id)
            .map(|h| h.samples(SystemTime::now()))
            .unwrap_or_default())
    }

    fn evacuate(&self, id: Uuid) -> Result<(), ClusterError> {
        self.node_command(id, true)?;
        self.relocate_ephemeral(id, relocate::Why::Evacuated)
    }

    fn restore(&self, id: Uuid) -> Result<(), ClusterError> {
        self.node_command(id, false)
    }

    fn disable_node(
        &self,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<store::DisabledNode, ClusterError> {
        let disabled = self.store.disable_node(id, reason)?;
        self.set_disabled(id, true);
        self.event(None, EventKind::Info, format!("node {id}: disabled"));
        Ok(disabled)
    }

    fn enable_node(&self, id: Uuid) -> Result<bool, ClusterError> {
        let was = self.store.enable_node(id)?;
        self.set_disabled(id, false);
        if was {
            self.event(None, EventKind::Info, format!("node {id}: enabled"));
        }
        Ok(was)
    }

    fn traces(&self) -> Vec<Trace> {
        self.state().traces.iter().cloned().collect()
    }

    fn connected(&self) -> bool {
        self.out.connected()
    }

    fn gone_for_good(&self) -> Option<String> {
        self.gone.get().cloned()
    }

    fn reports_refused(&self) -> Vec<(&'static str, u64)> {
        Engine::reports_refused(self)
    }

    fn frames_behind(&self) -> Option<std::time::Duration> {
        Some(Engine::frames_behind(self))
    }

    fn floating_ips_changed(&self, tenant: Uuid) {
        if let Err(e) = self.reconcile_public_ips(tenant, SystemTime::now()) {
            // The next change, or the CNCI's next announcement, tries again.
            tracing::warn!(error = %e, %tenant, "floating IPs not sent to their CNCIs");
        }
    }

    fn security_groups_changed(&self, tenant: Uuid) {
        if let Err(e) = self.reconcile_firewalls(tenant) {
            // The sweep tries again.
            tracing::warn!(error = %e, %tenant, "firewalls not sent to their nodes");
        }
    }

    fn floating_ip_status(
        &self,
        address: std::net::Ipv4Addr,
        port: Option<Uuid>,
    ) -> crate::cluster::FloatingStatus {
        self.public_ip_status(address, port)
    }
}
