//! What the agent does with a frame from the scheduler, decided in one pure function.
//!
//! | frame | what the agent does |
//! |---|---|
//! | START | the core admits it (or answers START_FAILURE) |
//! | START whose `networking.firewall` fails its check (too many rules or prefixes, IPv6, a backwards port range) | START_FAILURE `invalid_data`, with the cause |
//! | DELETE, EVACUATE, RESTORE for this node | to the core |
//! | DELETE for another node | DELETE_FAILURE `invalid_data` (the controller learns at once that the frame went astray, rather than waiting on an instance that will never go) |
//! | EVACUATE, RESTORE for another node | ignored with a warning (they have no failure frame) |
//! | ATTACH_VOLUME, DETACH_VOLUME for this node | to the core |
//! | ATTACH_VOLUME, DETACH_VOLUME for another node | ATTACH_VOLUME_FAILURE, DETACH_VOLUME_FAILURE `invalid_data` |
//! | INSTANCE_ACTION for this node | to the core |
//! | INSTANCE_ACTION for another node, or an action this version does not know | INSTANCE_ACTION_FAILURE `invalid_data` |
//! | CONFIGURE | logged: a running agent does not change its configuration yet |
//! | DELIVERY_FAILURE and ERRORs from the scheduler | logged |
//! | anything else | logged and dropped |
//!
//! Malformed frames never get here: the SSNTP session answers them (START_FAILURE or
//! DELETE_FAILURE `invalid_payload`, with this node's UUID) and drops them.

use ssntp::Payload;
use ssntp::payload::{
    AttachVolumeFailure, AttachVolumeFailureReason, DeleteFailure, DeleteFailureReason,
    InstanceActionFailure, InstanceActionFailureReason, StartFailure, StartFailureReason,
};
use uuid::Uuid;

use crate::core::Command;
use crate::wire;

/// What to do with one inbound payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// Hand the command to the core.
    Command(Command),
    /// Answer the sender with this payload, without the core.
    Reply(Payload),
    /// Nothing to do but log (at warning level when `warn`).
    Log {
        /// Why nothing is done.
        what: &'static str,
        /// Whether it deserves a warning.
        warn: bool,
    },
}

/// Decides what the agent whose UUID is `node` does with `payload`.
pub fn inbound(payload: &Payload, node: Uuid) -> Inbound {
    let elsewhere = |target: Uuid| target != node;
    let bad_start = |s: &ssntp::payload::Start| {
        let firewall = s.networking.as_ref().and_then(|n| n.firewall.as_ref());
        if let Some(Err(e)) = firewall.map(|f| f.check()) {
            return Some(format!("networking.firewall: {e}"));
        }
        let kernel = s.kernel.as_ref().map(|k| k.check());
        kernel.and_then(Result::err).map(|e| format!("kernel: {e}"))
    };
    match payload {
        Payload::Start(s) if let Some(message) = bad_start(s) => {
            Inbound::Reply(Payload::StartFailure(StartFailure {
                instance_uuid: s.instance_uuid,
                node_uuid: Some(node),
                reason: StartFailureReason::InvalidData,
                restart: s.restart,
                message: Some(message),
            }))
        }
        Payload::Delete(d) if elsewhere(d.workload_agent_uuid) => {
            Inbound::Reply(Payload::DeleteFailure(DeleteFailure {
                instance_uuid: d.instance_uuid,
                node_uuid: Some(node),
                reason: DeleteFailureReason::InvalidData,
            }))
        }
        Payload::Evacuate(c) | Payload::Restore(c) if elsewhere(c.workload_agent_uuid) => {
            Inbound::Log {
                what: "a node command for another node: ignored",
                warn: true,
            }
        }
        Payload::AttachVolume(a) | Payload::DetachVolume(a) if elsewhere(a.workload_agent_uuid) => {
            let failure = AttachVolumeFailure::new(
                a.instance_uuid,
                a.volume_uuid,
                Some(node),
                AttachVolumeFailureReason::InvalidData,
            )
            .with_message(format!(
                "this is node {node}, not {}",
                a.workload_agent_uuid
            ));
            Inbound::Reply(if matches!(payload, Payload::AttachVolume(_)) {
                Payload::AttachVolumeFailure(failure)
            } else {
                Payload::DetachVolumeFailure(failure)
            })
        }
        Payload::InstanceAction(a)
            if elsewhere(a.workload_agent_uuid) || wire::action(a.action).is_none() =>
        {
            Inbound::Reply(Payload::InstanceActionFailure(InstanceActionFailure {
                instance_uuid: a.instance_uuid,
                node_uuid: Some(node),
                action: Some(a.action),
                reason: InstanceActionFailureReason::InvalidData,
            }))
        }
        Payload::Configure(_) => Inbound::Log {
            what: "CONFIGURE: a running agent does not apply cluster configuration changes yet",
            warn: false,
        },
        Payload::DeliveryFailure(_) => Inbound::Log {
            what: "the scheduler could not deliver a frame of ours",
            warn: true,
        },
        Payload::InvalidFrameType(_) | Payload::ProtocolViolation(_) => Inbound::Log {
            what: "the scheduler refused a frame of ours",
            warn: true,
        },
        other => match wire::command(other) {
            Some(command) => Inbound::Command(command),
            None => Inbound::Log {
                what: "a frame the agent does not act on: dropped",
                warn: false,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::payload::{AttachVolume, Delete, NodeCommand, Reason};

    const ME: Uuid = Uuid::from_u128(1);
    const OTHER: Uuid = Uuid::from_u128(2);
    const INSTANCE: Uuid = Uuid::from_u128(3);

    fn delete(to: Uuid, stop: bool) -> Payload {
        Payload::Delete(Delete {
            instance_uuid: INSTANCE,
            workload_agent_uuid: to,
            stop,
        })
    }

    #[test]
    fn commands_for_this_node_go_to_the_core() {
        assert_eq!(
            inbound(&delete(ME, true), ME),
            Inbound::Command(Command::Delete {
                instance: INSTANCE,
                stop: true
            })
        );
        let me = NodeCommand {
            workload_agent_uuid: ME,
        };
        assert_eq!(
            inbound(&Payload::Evacuate(me.clone()), ME),
            Inbound::Command(Command::Evacuate)
        );
        assert_eq!(
            inbound(&Payload::Restore(me), ME),
            Inbound::Command(Command::Restore)
        );
    }

    #[test]
    fn commands_for_another_node_are_refused_or_ignored() {
        let Inbound::Reply(Payload::DeleteFailure(f)) = inbound(&delete(OTHER, false), ME) else {
            panic!("a DELETE for another node is answered");
        };
        assert_eq!(
            (f.instance_uuid, f.node_uuid, f.reason),
            (INSTANCE, Some(ME), DeleteFailureReason::InvalidData)
        );
        let other = NodeCommand {
            workload_agent_uuid: OTHER,
        };
        for p in [Payload::Evacuate(other.clone()), Payload::Restore(other)] {
            assert!(matches!(inbound(&p, ME), Inbound::Log { warn: true, .. }));
        }
    }

    #[test]
    fn volumes_go_to_the_core_unless_for_another_node_and_the_rest_is_logged() {
        let attach = Payload::AttachVolume(AttachVolume {
            size_mb: Some(1024),
            device: Some("vdc".into()),
            ..AttachVolume::new(INSTANCE, OTHER, ME)
        });
        let Inbound::Command(Command::AttachVolume { instance, volume }) = inbound(&attach, ME)
        else {
            panic!("an ATTACH_VOLUME for this node goes to the core")
        };
        assert_eq!(
            (instance, volume.id, volume.size_mb),
            (INSTANCE, OTHER, 1024)
        );
        assert_eq!(volume.device, "vdc");
        let detach = Payload::DetachVolume(AttachVolume {
            force: true,
            ..AttachVolume::new(INSTANCE, OTHER, ME)
        });
        assert_eq!(
            inbound(&detach, ME),
            Inbound::Command(Command::DetachVolume {
                instance: INSTANCE,
                volume: OTHER,
                force: true
            })
        );
        let astray = Payload::AttachVolume(AttachVolume::new(INSTANCE, OTHER, OTHER));
        let Inbound::Reply(Payload::AttachVolumeFailure(f)) = inbound(&astray, ME) else {
            panic!("an ATTACH_VOLUME for another node is refused")
        };
        assert_eq!(f.reason, AttachVolumeFailureReason::InvalidData);
        assert_eq!(f.node_uuid, Some(ME));
        let astray = Payload::DetachVolume(AttachVolume::new(INSTANCE, OTHER, OTHER));
        let Inbound::Reply(Payload::DetachVolumeFailure(f)) = inbound(&astray, ME) else {
            panic!("a DETACH_VOLUME is answered with its own failure")
        };
        assert_eq!(f.reason, AttachVolumeFailureReason::InvalidData);
        let violation = Payload::ProtocolViolation(Reason::new("no"));
        assert!(matches!(inbound(&violation, ME), Inbound::Log { .. }));
        assert!(matches!(
            inbound(&Payload::Heartbeat, ME),
            Inbound::Log { warn: false, .. }
        ));
    }

    #[test]
    fn a_start_with_a_bad_firewall_is_refused_with_the_cause() {
        use ssntp::payload::{Firewall, FirewallDirection, FirewallRule};
        let mut start = crate::wire::tests::start();
        let backwards = FirewallRule {
            direction: FirewallDirection::Ingress,
            protocol: Some(6),
            port_min: Some(80),
            port_max: Some(79),
            remote: None,
        };
        start.networking.as_mut().unwrap().firewall = Some(Firewall {
            revision: 1,
            rules: vec![backwards],
        });
        let Inbound::Reply(Payload::StartFailure(f)) =
            inbound(&Payload::Start(Box::new(start.clone())), ME)
        else {
            panic!("not refused");
        };
        assert_eq!(f.reason, StartFailureReason::InvalidData);
        assert_eq!(f.node_uuid, Some(ME));
        assert!(f.message.unwrap().contains("80-79"));
        // A good one goes to the core.
        start.networking.as_mut().unwrap().firewall = Some(Firewall {
            revision: 1,
            rules: Vec::new(),
        });
        assert!(matches!(
            inbound(&Payload::Start(Box::new(start)), ME),
            Inbound::Command(Command::Start(_))
        ));
    }

    #[test]
    fn a_start_with_a_bad_kernel_command_line_is_refused_with_the_cause() {
        let mut start = crate::wire::tests::start();
        start.kernel = Some(ssntp::payload::KernelBoot {
            kernel: "sha512/00".into(),
            initrd: None,
            cmdline: Some("quiet\nroot=/dev/sda".into()),
        });
        let Inbound::Reply(Payload::StartFailure(f)) =
            inbound(&Payload::Start(Box::new(start.clone())), ME)
        else {
            panic!("not refused");
        };
        assert_eq!(f.reason, StartFailureReason::InvalidData);
        assert!(f.message.unwrap().contains("control character"));
        start.kernel.as_mut().unwrap().cmdline = Some("quiet".into());
        let Inbound::Command(Command::Start(spec)) = inbound(&Payload::Start(Box::new(start)), ME)
        else {
            panic!("a good one goes to the core");
        };
        assert_eq!(spec.kernel.unwrap().cmdline.as_deref(), Some("quiet"));
    }
}
