//! The one mapping between the agent's domain and SSNTP payloads (PROTOCOL.md §7), pure, so
//! that the SSNTP wiring is a thin adapter: payloads in → [`Command`]s; [`NodeReport`]s,
//! [`InstanceReport`]s and [`InstanceEvent`]s → payloads out.
//!
//! | domain | payload |
//! |---|---|
//! | [`Availability::Ready`] / `Full` / `Maintenance` | READY / FULL / MAINTENANCE, each with the READY-shaped figures |
//! | a node report with its instances | STATS |
//! | [`InstanceEvent::StartFailed`] | START_FAILURE |
//! | [`InstanceEvent::DeleteFailed`] | DELETE_FAILURE |
//! | [`InstanceEvent::ActionFailed`] | INSTANCE_ACTION_FAILURE |
//! | [`InstanceEvent::VolumeFailed`] | ATTACH_VOLUME_FAILURE, DETACH_VOLUME_FAILURE |
//! | [`InstanceEvent::Deleted`] | INSTANCE_DELETED |
//! | [`InstanceEvent::Stopped`] | INSTANCE_STOPPED |
//! | [`InstanceEvent::State`] | nothing (STATS carries states) |

use std::collections::BTreeMap;

use ssntp::Payload;
use ssntp::payload::{
    Action as WireAction, AttachVolumeFailure, AttachVolumeFailureReason, Delete, DeleteFailure,
    DeleteFailureReason, FwType, InstanceActionFailure, InstanceActionFailureReason,
    InstanceEvent as WireInstanceEvent, InstanceStat, InstanceState as WireState, MacAddr,
    NodeNetwork, NodeState, NodeStatus, Start, StartFailure, StartFailureReason, Stats, VmType,
};
use uuid::Uuid;

use crate::core::Command;
use crate::model::{
    Action, ActionRefusal, Availability, DeleteRefusal, DiskSpec, Firmware, InstanceEvent,
    InstanceReport, InstanceRole, InstanceSpec, InstanceState, NicSpec, NodeReport, Resources,
    StartRefusal, VmKind, VolumePhase, VolumeRefusal, VolumeSpec,
};

/// The instance spec a START asks for.
pub fn spec_from_start(start: &Start) -> InstanceSpec {
    InstanceSpec {
        instance: start.instance_uuid,
        tenant: start.tenant_uuid,
        workload: start.workload_uuid,
        kind: match start.vm_type {
            VmType::Qemu => VmKind::Qemu,
            VmType::Container => VmKind::Container,
            VmType::Sim => VmKind::Sim,
        },
        role: if start.is_cnci() {
            InstanceRole::Cnci
        } else {
            InstanceRole::Workload
        },
        firmware: match start.fw_type {
            FwType::Efi => Firmware::Efi,
            FwType::Legacy => Firmware::Legacy,
        },
        image: start.image.clone(),
        resources: Resources {
            vcpus: start.requirements.vcpus,
            mem_mb: start.requirements.mem_mb,
            disk_mb: start.requirements.disk_mb,
        },
        nic: start.networking.as_ref().map(|n| NicSpec {
            mac: n.vnic_mac.0,
            vnic_uuid: n.vnic_uuid,
            concentrator_uuid: n.concentrator_uuid,
            concentrator_ip: n.concentrator_ip,
            subnet_addr: n.subnet.addr,
            subnet_prefix: n.subnet.prefix,
            subnet_key: n.subnet_key,
            private_ip: n.private_ip,
            public_ip: n.public_ip,
            firewall: n.firewall.clone(),
        }),
        disks: start
            .storage
            .iter()
            .flatten()
            .map(|s| DiskSpec {
                id: s.id,
                boot: s.boot,
                size_mb: s.size_mb,
                ephemeral: s.ephemeral,
            })
            .collect(),
        volumes: Vec::new(),
        user_data: start.user_data.clone(),
        meta_data: kept_meta_data(start),
        restart: start.restart,
        kernel: start.kernel.clone(),
    }
}

/// A START's meta data as the agent keeps it: without a CNCI's credentials
/// ([`ssntp::payload::CNCI_CERT_KEY`], [`ssntp::payload::CNCI_KEY_KEY`]), which go to the CNCI
/// alone (`crate::cnci::launch::take_credentials`) and are never kept in a record, logged, or
/// put in a guest's meta data.
fn kept_meta_data(start: &Start) -> BTreeMap<String, String> {
    let mut meta = start.meta_data.clone().unwrap_or_default();
    meta.remove(ssntp::payload::CNCI_CERT_KEY);
    meta.remove(ssntp::payload::CNCI_KEY_KEY);
    meta
}

/// An INSTANCE_ACTION's action in the agent's terms (`None` for one this version does not
/// know).
pub fn action(action: WireAction) -> Option<Action> {
    Some(match action {
        WireAction::Reboot => Action::Reboot,
        WireAction::RebootHard => Action::RebootHard,
        WireAction::Pause => Action::Pause,
        WireAction::Unpause => Action::Unpause,
        WireAction::Suspend => Action::Suspend,
        WireAction::Resume => Action::Resume,
        WireAction::Other => return None,
    })
}

/// An action as INSTANCE_ACTION(_FAILURE) writes it.
pub fn wire_action(action: Action) -> WireAction {
    match action {
        Action::Reboot => WireAction::Reboot,
        Action::RebootHard => WireAction::RebootHard,
        Action::Pause => WireAction::Pause,
        Action::Unpause => WireAction::Unpause,
        Action::Suspend => WireAction::Suspend,
        Action::Resume => WireAction::Resume,
    }
}

/// The command a payload asks the agent for: START, DELETE, INSTANCE_ACTION, ATTACH_VOLUME,
/// DETACH_VOLUME, EVACUATE, RESTORE; `None` for payloads the core does not act on (and actions it does not know).
pub fn command(payload: &Payload) -> Option<Command> {
    match payload {
        Payload::Start(start) => Some(Command::Start(Box::new(spec_from_start(start)))),
        Payload::Delete(Delete {
            instance_uuid,
            stop,
            ..
        }) => Some(Command::Delete {
            instance: *instance_uuid,
            stop: *stop,
        }),
        Payload::InstanceAction(a) => Some(Command::Action {
            instance: a.instance_uuid,
            action: action(a.action)?,
        }),
        Payload::AttachVolume(a) => Some(Command::AttachVolume {
            instance: a.instance_uuid,
            volume: Box::new(VolumeSpec {
                id: a.volume_uuid,
                device: a.device.clone().unwrap_or_default(),
                size_mb: a.size_mb.unwrap_or(0),
                image: a.image.clone(),
                phase: VolumePhase::Attaching,
            }),
        }),
        Payload::DetachVolume(d) => Some(Command::DetachVolume {
            instance: d.instance_uuid,
            volume: d.volume_uuid,
            force: d.force,
        }),
        Payload::Evacuate(_) => Some(Command::Evacuate),
        Payload::Restore(_) => Some(Command::Restore),
        _ => None,
    }
}

/// The READY-shaped figures of a node report.
pub fn node_status(node: &NodeReport) -> NodeStatus {
    NodeStatus {
        node_uuid: node.node,
        hostname: node.hostname.clone(),
        zone: node.zone.clone(),
        mem_total_mb: node.mem_total_mb,
        mem_available_mb: node.mem_available_mb,
        disk_total_mb: node.disk_total_mb,
        disk_available_mb: node.disk_available_mb,
        vcpus_total: node.vcpus_total,
        vcpus_available: node.vcpus_available,
        load: node.load,
        networks: node
            .networks
            .iter()
            .map(|a| NodeNetwork {
                ip: a.ip,
                mac: MacAddr(a.mac),
            })
            .collect(),
    }
}

/// READY, FULL or MAINTENANCE, as the node's availability says, with its figures.
pub fn status_payload(node: &NodeReport) -> Payload {
    let status = node_status(node);
    match node.availability {
        Availability::Ready => Payload::Ready(status),
        Availability::Full => Payload::Full(Some(status)),
        Availability::Maintenance => Payload::Maintenance(Some(status)),
    }
}

/// An instance state as STATS writes it.
pub fn instance_state(state: InstanceState) -> WireState {
    match state {
        InstanceState::Pending => WireState::Pending,
        InstanceState::Active => WireState::Active,
        InstanceState::Stopping => WireState::Stopping,
        InstanceState::Exited => WireState::Exited,
        InstanceState::ExitFailed => WireState::ExitFailed,
        InstanceState::Paused => WireState::Paused,
        InstanceState::Suspended => WireState::Suspended,
    }
}

/// STATS: the node's figures and status, and every instance.
pub fn stats_payload(node: &NodeReport, instances: &[InstanceReport]) -> Payload {
    Payload::Stats(Box::new(Stats {
        node: node_status(node),
        status: match node.availability {
            Availability::Ready => NodeState::Ready,
            Availability::Full => NodeState::Full,
            Availability::Maintenance => NodeState::Maintenance,
        },
        instances: instances
            .iter()
            .map(|i| InstanceStat {
                instance_uuid: i.instance,
                state: instance_state(i.state),
                ssh_ip: None,
                ssh_port: None,
                memory_usage_mb: i.usage.mem_mb,
                disk_usage_mb: i.usage.disk_mb,
                cpu_usage: i.usage.cpu_percent,
                volumes: i.volumes.clone(),
            })
            .collect(),
    }))
}

/// The START_FAILURE reason of a refusal.
pub fn start_failure_reason(reason: StartRefusal) -> StartFailureReason {
    match reason {
        StartRefusal::NodeMaintenance => StartFailureReason::NodeMaintenance,
        StartRefusal::FullCn => StartFailureReason::FullCn,
        StartRefusal::AlreadyRunning => StartFailureReason::AlreadyRunning,
        StartRefusal::InstanceExists => StartFailureReason::InstanceExists,
        StartRefusal::ImageFailure => StartFailureReason::ImageFailure,
        StartRefusal::LaunchFailure => StartFailureReason::LaunchFailure,
        StartRefusal::NetworkFailure => StartFailureReason::NetworkFailure,
        StartRefusal::InvalidData => StartFailureReason::InvalidData,
        StartRefusal::InstanceMissing => StartFailureReason::InstanceMissing,
    }
}

/// The INSTANCE_ACTION_FAILURE reason of a refusal (a full queue is a backend failure: the
/// node could not carry it out now).
pub fn action_failure_reason(reason: ActionRefusal) -> InstanceActionFailureReason {
    match reason {
        ActionRefusal::NoInstance => InstanceActionFailureReason::NoInstance,
        ActionRefusal::InvalidState => InstanceActionFailureReason::InvalidState,
        ActionRefusal::BackendFailure | ActionRefusal::Busy => {
            InstanceActionFailureReason::BackendFailure
        }
    }
}

/// The ATTACH_VOLUME_FAILURE (DETACH_VOLUME_FAILURE) reason of a refusal (a full queue is an
/// attach failure: the node could not carry it out now; the message says so).
pub fn volume_failure_reason(reason: VolumeRefusal) -> AttachVolumeFailureReason {
    match reason {
        VolumeRefusal::NoInstance => AttachVolumeFailureReason::NoInstance,
        VolumeRefusal::InvalidState => AttachVolumeFailureReason::StateFailure,
        VolumeRefusal::InvalidData => AttachVolumeFailureReason::InvalidData,
        VolumeRefusal::BackendFailure | VolumeRefusal::Busy => {
            AttachVolumeFailureReason::AttachFailure
        }
        VolumeRefusal::Unsupported => AttachVolumeFailureReason::NotSupported,
    }
}

/// The DELETE_FAILURE reason of a refusal. The protocol has no reason for a backend failure
/// or a full queue: they are `other`, which receivers read as a failure to retry later.
pub fn delete_failure_reason(reason: DeleteRefusal) -> DeleteFailureReason {
    match reason {
        DeleteRefusal::NoInstance => DeleteFailureReason::NoInstance,
        DeleteRefusal::BackendFailure | DeleteRefusal::Busy => DeleteFailureReason::Other,
    }
}

/// The frame an instance event becomes (`node`: this node's UUID), if any.
pub fn event_payload(event: &InstanceEvent, node: Uuid) -> Option<Payload> {
    match *event {
        InstanceEvent::State { .. } => None,
        InstanceEvent::StartFailed {
            instance,
            reason,
            restart,
            ref message,
        } => {
            let failure =
                StartFailure::new(instance, Some(node), start_failure_reason(reason), restart);
            Some(Payload::StartFailure(match message {
                Some(message) => failure.with_message(message.as_str()),
                None => failure,
            }))
        }
        InstanceEvent::DeleteFailed { instance, reason } => {
            Some(Payload::DeleteFailure(DeleteFailure {
                instance_uuid: instance,
                node_uuid: Some(node),
                reason: delete_failure_reason(reason),
            }))
        }
        InstanceEvent::ActionFailed {
            instance,
            action,
            reason,
            ..
        } => Some(Payload::InstanceActionFailure(InstanceActionFailure {
            instance_uuid: instance,
            node_uuid: Some(node),
            action: Some(wire_action(action)),
            reason: action_failure_reason(reason),
        })),
        InstanceEvent::VolumeFailed {
            instance,
            volume,
            detach,
            reason,
            ref message,
        } => {
            let mut failure = AttachVolumeFailure::new(
                instance,
                volume,
                Some(node),
                volume_failure_reason(reason),
            );
            if let Some(message) = message {
                failure = failure.with_message(message.as_str());
            }
            Some(if detach {
                Payload::DetachVolumeFailure(failure)
            } else {
                Payload::AttachVolumeFailure(failure)
            })
        }
        InstanceEvent::Deleted { instance } => Some(Payload::InstanceDeleted(WireInstanceEvent {
            instance_uuid: instance,
        })),
        InstanceEvent::Stopped { instance, .. } => {
            Some(Payload::InstanceStopped(WireInstanceEvent {
                instance_uuid: instance,
            }))
        }
    }
}

/// The answer to a command the core refused as busy (its queue full), if it has one: a START
/// gets START_FAILURE `full_cn` (the node cannot take it now), a DELETE gets DELETE_FAILURE
/// `other` (try again).
pub fn busy_reply(command: &Command, node: Uuid) -> Option<Payload> {
    let event = match command {
        Command::Start(spec) => InstanceEvent::StartFailed {
            instance: spec.instance,
            reason: StartRefusal::FullCn,
            restart: spec.restart,
            message: Some("the node is busy: its command queue is full".into()),
        },
        Command::Delete { instance, .. } => InstanceEvent::DeleteFailed {
            instance: *instance,
            reason: DeleteRefusal::Busy,
        },
        Command::Action { instance, action } => InstanceEvent::ActionFailed {
            instance: *instance,
            action: *action,
            reason: ActionRefusal::Busy,
            message: None,
        },
        Command::AttachVolume { instance, volume } => InstanceEvent::VolumeFailed {
            instance: *instance,
            volume: volume.id,
            detach: false,
            reason: VolumeRefusal::Busy,
            message: Some("the node is busy: its command queue is full".into()),
        },
        Command::DetachVolume {
            instance, volume, ..
        } => InstanceEvent::VolumeFailed {
            instance: *instance,
            volume: *volume,
            detach: true,
            reason: VolumeRefusal::Busy,
            message: Some("the node is busy: its command queue is full".into()),
        },
        Command::Evacuate | Command::Restore | Command::Announce => return None,
    };
    event_payload(&event, node)
}

#[cfg(test)]
pub(crate) mod tests;
