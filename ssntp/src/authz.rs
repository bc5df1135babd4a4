//! Who may send what after the handshake (PROTOCOL.md §5, rule 3).

use crate::frame::Operand;
use crate::role::Role;

/// Whether a client session with claimed role `role` may send `operand` to the server.
///
/// A session whose claimed role holds several roles (the dual AGENT|NETAGENT) may send what any
/// of them may send.
pub fn client_may_send(role: Role, operand: Operand) -> bool {
    use Operand as O;
    match operand {
        // Any role.
        O::Heartbeat
        | O::TraceReport
        | O::InvalidFrameType
        | O::ProtocolViolation
        | O::DeliveryFailure => true,
        O::Start
        | O::Delete
        | O::Evacuate
        | O::Restore
        | O::Configure
        | O::AttachVolume
        | O::DetachVolume
        | O::InstanceAction
        | O::AssignPublicIp
        | O::ReleasePublicIp
        | O::RefreshCnci => role.contains(Role::CONTROLLER),
        O::Ready
        | O::Full
        | O::Offline
        | O::Maintenance
        | O::Stats
        | O::InstanceDeleted
        | O::InstanceStopped
        | O::TenantAdded
        | O::TenantRemoved
        | O::StartFailure
        | O::DeleteFailure
        | O::AttachVolumeFailure
        | O::DetachVolumeFailure
        | O::InstanceActionFailure => role.intersects(Role::AGENT | Role::NETAGENT),
        O::ConcentratorInstanceAdded
        | O::PublicIpAssigned
        | O::PublicIpUnassigned
        | O::AssignPublicIpFailure
        | O::UnassignPublicIpFailure => role.contains(Role::CNCIAGENT),
        // Nobody, after the handshake.
        O::Connect
        | O::Connected
        | O::NodeConnected
        | O::NodeDisconnected
        | O::ConnectionFailure
        | O::ConnectionAborted
        | O::InvalidConfiguration => false,
        O::Unknown { .. } => false,
    }
}

/// Whether the server may send `operand` to a client after the handshake: everything known but
/// the handshake's own frames. (CONNECTION_FAILURE and CONNECTION_ABORTED end the session.)
pub fn server_may_send(operand: Operand) -> bool {
    operand.is_known() && !matches!(operand, Operand::Connect | Operand::Connected)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of PROTOCOL.md §5 written out row by row, checked against every operand and
    /// every claimable role.
    #[test]
    fn table_matches_the_contract() {
        let controller = [
            "START",
            "DELETE",
            "EVACUATE",
            "RESTORE",
            "CONFIGURE",
            "ATTACH_VOLUME",
            "DETACH_VOLUME",
            "INSTANCE_ACTION",
            "ASSIGN_PUBLIC_IP",
            "RELEASE_PUBLIC_IP",
            "REFRESH_CNCI",
        ];
        let agent = [
            "READY",
            "FULL",
            "OFFLINE",
            "MAINTENANCE",
            "STATS",
            "INSTANCE_DELETED",
            "INSTANCE_STOPPED",
            "TENANT_ADDED",
            "TENANT_REMOVED",
            "START_FAILURE",
            "DELETE_FAILURE",
            "ATTACH_VOLUME_FAILURE",
            "DETACH_VOLUME_FAILURE",
            "INSTANCE_ACTION_FAILURE",
        ];
        let cnci = [
            "CONCENTRATOR_INSTANCE_ADDED",
            "PUBLIC_IP_ASSIGNED",
            "PUBLIC_IP_UNASSIGNED",
            "ASSIGN_PUBLIC_IP_FAILURE",
            "UNASSIGN_PUBLIC_IP_FAILURE",
        ];
        let any = [
            "HEARTBEAT",
            "TRACE_REPORT",
            "INVALID_FRAME_TYPE",
            "PROTOCOL_VIOLATION",
            "DELIVERY_FAILURE",
        ];
        let rows: [(Role, &[&str]); 5] = [
            (Role::CONTROLLER, &controller),
            (Role::AGENT, &agent),
            (Role::NETAGENT, &agent),
            (Role::DUAL, &agent),
            (Role::CNCIAGENT, &cnci),
        ];
        for (role, allowed) in rows {
            for op in Operand::ALL {
                let expect = allowed.contains(&op.name()) || any.contains(&op.name());
                assert_eq!(client_may_send(role, *op), expect, "{role} sending {op}");
            }
            assert!(!client_may_send(role, Operand::from_wire(0, 200)));
        }
    }

    #[test]
    fn nobody_sends_handshake_or_scheduler_frames() {
        for op in [
            Operand::Connect,
            Operand::Connected,
            Operand::NodeConnected,
            Operand::NodeDisconnected,
            Operand::ConnectionFailure,
            Operand::ConnectionAborted,
            Operand::InvalidConfiguration,
        ] {
            assert!(!client_may_send(Role::all(), op), "{op}");
        }
        assert!(!server_may_send(Operand::Connect));
        assert!(!server_may_send(Operand::Connected));
        assert!(server_may_send(Operand::Start));
        assert!(server_may_send(Operand::ConnectionAborted));
        assert!(!server_may_send(Operand::from_wire(9, 9)));
    }
}
