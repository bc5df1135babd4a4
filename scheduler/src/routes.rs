//! The scheduler's forwarding rules (PROTOCOL.md §8).
//!
//! Frames from agents and CNCIs are forwarded by the SSNTP server's readers, so they never wait
//! for the cluster owner; STATS is also handed to the owner, which counts it as a sign of life.
//! Every frame from a controller goes to the owner, which places STARTs and forwards the rest
//! itself: one path per sender keeps each session's order end to end (a DELETE never overtakes
//! the START before it).
//!
//! A node's first status is a barrier: its reader forwards nothing more from that session until
//! the owner has handled the status, and so queued NODE_CONNECTED to the controllers. A
//! controller thus hears of a node before it gets any STATS the node sent after that status (a
//! controller takes figures only from nodes it knows: a STATS that overtook NODE_CONNECTED was
//! lost, and the node had no figures for a whole STATS interval). The readers wait for the owner
//! once per session, at its start.

use ssntp::payload::{Addressee, DeliveryFailureReason};
use ssntp::{Operand, Payload, Role};
use ssntp_net::{Directory, Route, Routes};

/// To the addressed session if it is connected under a role that takes the frame (agent frames
/// need an AGENT or NETAGENT session, CNCI frames a CNCIAGENT one); DELIVERY_FAILURE otherwise.
pub fn to_addressee(payload: &Payload, directory: &dyn Directory) -> Route {
    let (target, cnci) = match payload.addressee() {
        Some(Addressee::Node(node)) => (node, false),
        Some(Addressee::Cnci(cnci)) => (cnci, true),
        None => return Route::Discard,
    };
    let (needs, reason) = if cnci {
        (Role::CNCIAGENT, DeliveryFailureReason::CnciUnavailable)
    } else {
        (
            Role::AGENT | Role::NETAGENT,
            DeliveryFailureReason::NodeUnavailable,
        )
    };
    match directory.role_of(target) {
        Some(role) if role.intersects(needs) => Route::To(target),
        _ => Route::Fail {
            reason,
            target: Some(target),
        },
    }
}

/// Every rule of §8 that the readers can apply alone.
pub fn routes() -> Routes {
    let to_controllers = [
        Operand::TraceReport,
        Operand::InstanceDeleted,
        Operand::InstanceStopped,
        Operand::ConcentratorInstanceAdded,
        Operand::PublicIpAssigned,
        Operand::PublicIpUnassigned,
        Operand::StartFailure,
        Operand::DeleteFailure,
        Operand::AttachVolumeFailure,
        Operand::DetachVolumeFailure,
        Operand::InstanceActionFailure,
        Operand::AssignPublicIpFailure,
        Operand::UnassignPublicIpFailure,
    ];
    // Agents' frames addressed to a CNCI (controllers' addressed frames go through the owner).
    let addressed = [Operand::TenantAdded, Operand::TenantRemoved];
    let statuses = [
        Operand::Ready,
        Operand::Full,
        Operand::Maintenance,
        Operand::Offline,
    ];
    let mut routes = Routes::new()
        .barrier_on_first(statuses)
        .to_role_and_app(Operand::Stats, Role::CONTROLLER);
    for op in to_controllers {
        routes = routes.to_role(op, Role::CONTROLLER);
    }
    for op in addressed {
        routes = routes.dynamic(op, |m, dir| to_addressee(&m.payload, dir));
    }
    // Replies to the scheduler's own frames are logged by the session and go no further.
    for op in [
        Operand::InvalidFrameType,
        Operand::ProtocolViolation,
        Operand::DeliveryFailure,
    ] {
        routes = routes.dynamic(op, |_, _| Route::Discard);
    }
    routes
}
