//! Building and sending an instance's START: flavor + image + user data + the tenant's network
//! plan; its meta data names the instance and carries its SSH key (`public-keys`, and the key
//! pair's name as `key-name`). An instance that boots from a volume (one attached to it as
//! [`crate::volumes::ROOT_DEVICE`]) has it as its boot `storage` (`boot`, not `ephemeral`, its
//! size): the node uses the volume's file as its root disk, made from the START's `image` (the
//! volume's image, which the workload names) when the node does not hold it yet; a START for a
//! volume a node holds is pinned to that node.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ssntp::Payload;
use ssntp::payload::{FwType, GroupRequirement, Networking, Requirements, Start, Storage, VmType};

use super::{Engine, TenantNetwork};
use crate::actions;
use crate::cluster::ClusterError;
use crate::images::kernel::{self, KernelError, KernelPlan};
use crate::volumes as rules;
use store::{
    Cnci, CnciState, EventKind, EventOutcome, Flavor, Image, Instance, InstanceChange,
    InstanceState, Scope, StoreError, Volume, Workload,
};

/// What an instance is made from, read once per launch.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub(super) workload: Workload,
    pub(super) flavor: Flavor,
    pub(super) image: Image,
    /// The kernel the image boots directly, if it does ([`kernel::plan`]); why it cannot
    /// boot, if the images it names are not there for the tenant.
    pub(super) kernel: Result<Option<KernelPlan>, KernelError>,
}

/// What the caller of [`Engine::dispatch_known`] knows of the instance already, so that each
/// instance of a launch does not read it again: a store read less per START for each.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Known {
    /// It boots from no volume: a launch from an image made it (a volume is attached as the
    /// root disk only by a launch from a volume).
    pub(super) no_boot_volume: bool,
    /// It is in no server group: its launch named none (only a launch puts an instance in one).
    pub(super) no_server_group: bool,
    /// Its action's `node_start` is started already (recorded with its instance:
    /// [`Engine::starts_at_once`]).
    pub(super) node_start_begun: bool,
}

/// A host name made of the instance's name: letters, digits and dashes, at most 63.
fn hostname(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(63)
        .collect();
    let trimmed = cleaned.trim_matches('-');
    if trimmed.is_empty() {
        "instance".into()
    } else {
        trimmed.to_ascii_lowercase()
    }
}

/// The START of `instance`, with `networking` if its subnet's CNCI is known, booting from
/// `boot` (its boot volume) if it has one.
pub(super) fn start_payload(
    instance: &Instance,
    plan: &Plan,
    networking: Option<Networking>,
    restart: bool,
    boot: Option<&Volume>,
) -> Start {
    let hostname = hostname(&instance.name);
    let mut meta = BTreeMap::new();
    meta.insert("instance-id".to_string(), instance.id.to_string());
    meta.insert("local-hostname".to_string(), hostname.clone());
    meta.insert("hostname".to_string(), hostname);
    // cloud-init's NoCloud reads `public-keys` as a string of key lines (or a list); the
    // node's metadata service names the key as the key pair is named.
    if let Some(key) = &instance.key {
        meta.insert("public-keys".to_string(), key.public_key.clone());
        meta.insert("key-name".to_string(), key.name.clone());
    }
    // A boot volume is the root disk: the node needs room for it only when it makes it.
    let boot_mb = boot.map(|v| v.size_gb.saturating_mul(1024));
    let disk_mb = match boot {
        Some(v) if v.node.is_some() => 0,
        Some(_) => boot_mb.unwrap_or(0),
        None => u32::try_from(plan.flavor.disk_gb.saturating_mul(1024)).unwrap_or(u32::MAX),
    };
    // A restart boots the disks its node keeps: there and nowhere else; a rebuild re-makes the
    // disk on the node it is on; a boot volume's file is on the node that holds it.
    let pinned = if restart || instance.state == InstanceState::Rebuilding {
        instance.node
    } else {
        None
    };
    Start {
        instance_uuid: instance.id,
        tenant_uuid: instance.tenant,
        workload_uuid: instance.workload,
        // A container's root file system boots as a container (on a node with --containers).
        vm_type: if plan.image.kind == store::ImageKind::Container {
            VmType::Container
        } else {
            VmType::Qemu
        },
        fw_type: FwType::Legacy,
        // A kernel image boots with no root image (a blank data disk).
        image: match &plan.kernel {
            Ok(Some(k)) if !k.root => String::new(),
            _ => plan.image.reference.clone(),
        },
        requirements: Requirements {
            vcpus: instance.vcpus,
            mem_mb: u32::try_from(instance.memory_mb).unwrap_or(u32::MAX),
            disk_mb,
            network_node: false,
            node_id: pinned.or(boot.and_then(|v| v.node)),
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        },
        networking,
        storage: boot.map(|v| {
            vec![Storage {
                id: v.id,
                boot: true,
                size_mb: boot_mb.unwrap_or(0),
                ephemeral: false,
            }]
        }),
        user_data: (!plan.workload.user_data.is_empty()).then(|| plan.workload.user_data.clone()),
        meta_data: Some(meta),
        restart,
        kernel: plan
            .kernel
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map(|k| k.boot.clone()),
    }
}

/// The networking of `instance` behind an active CNCI.
pub(super) fn networking(instance: &Instance, cnci: &Cnci) -> Option<Networking> {
    Some(Networking {
        vnic_mac: instance.mac,
        vnic_uuid: instance.id,
        concentrator_uuid: cnci.id,
        concentrator_ip: cnci.ip?,
        subnet: instance.subnet,
        subnet_key: store::net::subnet_key(&instance.subnet),
        private_ip: IpAddr::V4(instance.ip),
        public_ip: false,
        firewall: None,
    })
}

impl Engine {
    /// Reads what instances of `workload` are made from, as seen by the tenant.
    pub(super) fn plan(&self, scope: Scope, workload: uuid::Uuid) -> Result<Plan, ClusterError> {
        let workload = self.store.workload(scope, workload)?;
        let flavor = self.store.flavor(Scope::All, workload.flavor)?;
        let image = self.store.image(scope, workload.image)?;
        let kernel = kernel::plan(self.store.as_ref(), scope, &image)?;
        Ok(Plan {
            workload,
            flavor,
            image,
            kernel,
        })
    }

    /// Sends the START of a pending instance, or, with CNCI networking, makes sure its subnet's
    /// CNCI is coming and leaves the instance pending until it is up. A START that cannot be
    /// queued puts the instance in `error`.
    pub(super) fn dispatch(
        &self,
        instance: Instance,
        plan: &Plan,
        restart: bool,
    ) -> Result<Instance, ClusterError> {
        self.dispatch_known(instance, plan, restart, Known::default())
    }

    /// [`Engine::dispatch`], with what the caller knows of the instance already.
    pub(super) fn dispatch_known(
        &self,
        instance: Instance,
        plan: &Plan,
        restart: bool,
        known: Known,
    ) -> Result<Instance, ClusterError> {
        let boot = match known.no_boot_volume {
            true => None,
            false => rules::boot_volume(self.store.as_ref(), &instance)?,
        };
        // A restart boots the domain its node kept, kernel and all: only a new one needs the
        // kernel its image names now.
        if let Err(why) = &plan.kernel
            && !restart
        {
            return self.undispatched(instance, why);
        }
        if let Some(host) = self.off_host_target(instance.id)? {
            if let Some(volume) = &boot {
                return self.undispatched(
                    instance,
                    &format!(
                        "it boots from volume {}, and off-host hosts keep no volumes (no node of \
                         cumulo's own is ready)",
                        volume.id
                    ),
                );
            }
            if known.node_start_begun {
                // No node of cumulo's own was ready any more when its turn came: off-host starts
                // have no `node_start`, so the one its launch began ends here.
                actions::start_ended(
                    self.store.as_ref(),
                    instance.id,
                    EventOutcome::error(format!(
                        "off_host: no node of cumulo's own was ready; the START went to \
                         off-host host {}",
                        host.name
                    )),
                );
            }
            return self.dispatch_off_host(instance, plan, restart, &host);
        }
        let networking = match self.config.tenant_network {
            TenantNetwork::None => None,
            TenantNetwork::Cnci => {
                let cnci = self.cnci_for(&instance)?;
                match (cnci.state, networking(&instance, &cnci)) {
                    (CnciState::Active, Some(mut net)) => {
                        net.firewall = self.firewall_for(&instance)?;
                        Some(net)
                    }
                    // Sent when the CNCI announces itself.
                    _ => return Ok(instance),
                }
            }
        };
        let cnci = networking.as_ref().map(|n| n.concentrator_uuid);
        let mut start = start_payload(&instance, plan, networking, restart, boot.as_ref());
        // A new instance goes to no disabled node, even one its boot volume pins it to (the
        // scheduler refuses such a START); a restart or a rebuild stays where its disks are.
        if !restart && instance.state != InstanceState::Rebuilding {
            start.requirements.avoid_nodes = self.avoided_nodes();
            let group = match known.no_server_group {
                true => Ok(None),
                false => self.group_requirement(&instance),
            };
            start.requirements.group = match group {
                Ok(group) => group,
                // Not left pending with no START: in error, with the cause.
                Err(e) => {
                    return self.undispatched(
                        instance,
                        &format!("its server group could not be read: {e}"),
                    );
                }
            };
            start.requirements.zone.clone_from(&instance.zone);
        }
        if !known.node_start_begun {
            actions::start_sent(self.store.as_ref(), instance.id);
        }
        let label = self.state().traced.remove(&instance.id);
        // Awaited before it goes: a scheduler's session that ends as it is sent finds it
        // awaited (`Engine::orphaned_starts`), and it is sent again.
        self.state()
            .dispatched
            .insert(instance.id, std::time::SystemTime::now());
        let sent = self.send_maybe_traced(&Payload::Start(Box::new(start)), label);
        if sent.is_err() {
            self.state().dispatched.remove(&instance.id);
        }
        match sent {
            Ok(()) if cnci.is_none() => Ok(instance),
            Ok(()) => {
                let instance = self
                    .transition(Scope::All, instance.id, |_| {
                        Ok(Some((
                            InstanceChange {
                                cnci: Some(cnci),
                                ..InstanceChange::default()
                            },
                            (),
                        )))
                    })?
                    .map_or(instance, |(i, ())| i);
                // Its address joins its groups: the other ports' remote groups grow.
                self.firewalls_member_added(instance.tenant);
                Ok(instance)
            }
            Err(e) => self.undispatched(instance, &e.to_string()),
        }
    }

    /// What the scheduler needs of `instance`'s server group, if it is in one: the policy, the
    /// nodes its other members run on, and those still pending (placed, or about to be, by the
    /// scheduler, which remembers where). Members in error or without a node otherwise hold no
    /// place and are left out.
    fn group_requirement(
        &self,
        instance: &Instance,
    ) -> Result<Option<GroupRequirement>, ClusterError> {
        let Some(group) = self.store.server_group_of(instance.id)? else {
            return Ok(None);
        };
        let mut requirement = GroupRequirement {
            id: group.id,
            policy: group.policy,
            nodes: Vec::new(),
            members: Vec::new(),
        };
        for member in group.members.iter().filter(|m| **m != instance.id) {
            let other = match self.store.instance(Scope::All, *member) {
                Ok(other) => other,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            match (other.node, &other.state) {
                (Some(node), _) => requirement.nodes.push(node),
                (None, InstanceState::Pending) => requirement.members.push(other.id),
                (None, _) => {}
            }
        }
        Ok(Some(requirement))
    }

    /// `instance`'s START could not go, `why`: the instance in `error` (`dispatch_failure`).
    fn undispatched(&self, instance: Instance, why: &str) -> Result<Instance, ClusterError> {
        self.event(
            Some(instance.tenant),
            EventKind::Error,
            format!("START of instance {} not sent: {why}", instance.id),
        );
        actions::start_ended(
            self.store.as_ref(),
            instance.id,
            EventOutcome::error(format!("dispatch_failure: the START was not sent: {why}")),
        );
        Ok(self
            .set_state(
                instance.id,
                InstanceState::Error(format!("dispatch_failure: {why}")),
                None,
            )?
            .unwrap_or(instance))
    }

    /// Sends the START of every instance of the CNCI's subnet that waits for it.
    pub(super) fn release_waiting(&self, cnci: &Cnci) -> Result<(), ClusterError> {
        let mut waiting = Vec::new();
        self.for_each_instance(
            Scope::Tenant(cnci.tenant),
            store::InstanceFilter::default(),
            |i| {
                if i.subnet == cnci.cidr && i.state == InstanceState::Pending && i.cnci.is_none() {
                    waiting.push(i.clone());
                }
            },
        )?;
        for instance in waiting {
            let plan = self.plan(Scope::Tenant(instance.tenant), instance.workload)?;
            self.dispatch(instance, &plan, false)?;
        }
        Ok(())
    }

    /// Puts every instance waiting for the CNCI's subnet in `error`.
    pub(super) fn fail_waiting(&self, cnci: &Cnci, why: &str) -> Result<(), ClusterError> {
        let mut waiting = Vec::new();
        self.for_each_instance(
            Scope::Tenant(cnci.tenant),
            store::InstanceFilter::default(),
            |i| {
                if i.subnet == cnci.cidr && i.state == InstanceState::Pending && i.cnci.is_none() {
                    waiting.push(i.id);
                }
            },
        )?;
        for id in waiting {
            self.set_state(
                id,
                InstanceState::Error(format!("network_failure: {why}")),
                None,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_cleaned() {
        assert_eq!(hostname("web 1"), "web-1");
        assert_eq!(hostname("--"), "instance");
        assert_eq!(hostname("Db_Primary"), "db-primary");
        assert_eq!(hostname(&"x".repeat(100)).len(), 63);
    }
}
