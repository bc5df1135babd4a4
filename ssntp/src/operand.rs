//! Frame types and operands (PROTOCOL.md §3 and §5), frozen numbers with an `Unknown` case.

use std::fmt;

/// The four SSNTP frame types (header byte 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    /// A request to do something.
    Command = 0,
    /// A report of an endpoint's own state.
    Status = 1,
    /// A failure report.
    Error = 2,
    /// A notification that something happened.
    Event = 3,
}

impl FrameType {
    /// The frame type of a wire byte, if it is one of the four.
    pub fn from_wire(b: u8) -> Option<FrameType> {
        Some(match b {
            0 => FrameType::Command,
            1 => FrameType::Status,
            2 => FrameType::Error,
            3 => FrameType::Event,
            _ => return None,
        })
    }
}

macro_rules! operands {
    ($( $ty:ident { $( $(#[$doc:meta])* $name:ident = $code:literal => $text:literal ),* $(,)? } )*) => {
        /// Every SSNTP operand, with its frame type implied (`Unknown` for anything else).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Operand {
            $( $( $(#[$doc])* $name, )* )*
            /// A (type, operand) pair this version does not know.
            Unknown {
                /// The type byte.
                frame_type: u8,
                /// The operand byte.
                operand: u8,
            },
        }

        impl Operand {
            /// Every known operand, in table order.
            pub const ALL: &'static [Operand] = &[ $( $( Operand::$name, )* )* ];

            /// The operand for a (type, operand) byte pair.
            pub fn from_wire(frame_type: u8, operand: u8) -> Operand {
                match (FrameType::from_wire(frame_type), operand) {
                    $( $( (Some(FrameType::$ty), $code) => Operand::$name, )* )*
                    _ => Operand::Unknown { frame_type, operand },
                }
            }

            /// The (type, operand) bytes of this operand.
            pub fn to_wire(self) -> (u8, u8) {
                match self {
                    $( $( Operand::$name => (FrameType::$ty as u8, $code), )* )*
                    Operand::Unknown { frame_type, operand } => (frame_type, operand),
                }
            }

            /// The frame type, `None` for an unknown type byte.
            pub fn frame_type(self) -> Option<FrameType> {
                FrameType::from_wire(self.to_wire().0)
            }

            /// The operand's name as the contract writes it (`START_FAILURE`).
            pub fn name(self) -> &'static str {
                match self {
                    $( $( Operand::$name => $text, )* )*
                    Operand::Unknown { .. } => "UNKNOWN",
                }
            }
        }
    };
}

operands! {
    Command {
        /// Handshake: the client's first frame.
        Connect = 0 => "CONNECT",
        /// Start an instance.
        Start = 1 => "START",
        /// Node and instance statistics.
        Stats = 2 => "STATS",
        /// Put a node in maintenance and stop its instances.
        Evacuate = 3 => "EVACUATE",
        /// Delete an instance, or (`stop`) power it off and keep it on its node.
        Delete = 4 => "DELETE",
        /// Map a public IP to an instance (to a CNCI).
        AssignPublicIp = 5 => "ASSIGN_PUBLIC_IP",
        /// Unmap a public IP (to a CNCI).
        ReleasePublicIp = 6 => "RELEASE_PUBLIC_IP",
        /// Cluster configuration (to the scheduler).
        Configure = 7 => "CONFIGURE",
        /// Attach a volume to an instance.
        AttachVolume = 8 => "ATTACH_VOLUME",
        /// Take a node out of maintenance.
        Restore = 9 => "RESTORE",
        /// The list of sibling CNCIs of a tenant (to a CNCI).
        RefreshCnci = 10 => "REFRESH_CNCI",
        /// Reboot, pause, unpause, suspend or resume a running instance (to its node).
        InstanceAction = 11 => "INSTANCE_ACTION",
        /// Detach a volume from an instance (to its node).
        DetachVolume = 12 => "DETACH_VOLUME",
    }
    Status {
        /// Handshake: the server's answer.
        Connected = 0 => "CONNECTED",
        /// A node is ready for work (with its capacity).
        Ready = 1 => "READY",
        /// A node is full.
        Full = 2 => "FULL",
        /// A node is offline.
        Offline = 3 => "OFFLINE",
        /// A node is in maintenance.
        Maintenance = 4 => "MAINTENANCE",
        /// Liveness, no payload.
        Heartbeat = 5 => "HEARTBEAT",
    }
    Event {
        /// A compute node joined a tenant subnet (to the CNCI).
        TenantAdded = 0 => "TENANT_ADDED",
        /// A compute node left a tenant subnet (to the CNCI).
        TenantRemoved = 1 => "TENANT_REMOVED",
        /// An instance was deleted.
        InstanceDeleted = 2 => "INSTANCE_DELETED",
        /// A CNCI is up.
        ConcentratorInstanceAdded = 3 => "CONCENTRATOR_INSTANCE_ADDED",
        /// A public IP was mapped.
        PublicIpAssigned = 4 => "PUBLIC_IP_ASSIGNED",
        /// A public IP was unmapped.
        PublicIpUnassigned = 5 => "PUBLIC_IP_UNASSIGNED",
        /// Traces of frames.
        TraceReport = 6 => "TRACE_REPORT",
        /// A node connected to the scheduler.
        NodeConnected = 7 => "NODE_CONNECTED",
        /// A node left the scheduler.
        NodeDisconnected = 8 => "NODE_DISCONNECTED",
        /// An instance stopped.
        InstanceStopped = 9 => "INSTANCE_STOPPED",
    }
    Error {
        /// The receiver does not know the frame's type or operand.
        InvalidFrameType = 0 => "INVALID_FRAME_TYPE",
        /// An instance did not start.
        StartFailure = 1 => "START_FAILURE",
        /// The handshake failed; the client may retry.
        ConnectionFailure = 2 => "CONNECTION_FAILURE",
        /// An instance could not be deleted.
        DeleteFailure = 3 => "DELETE_FAILURE",
        /// The connection was refused or replaced; the client must not retry.
        ConnectionAborted = 4 => "CONNECTION_ABORTED",
        /// A bad cluster configuration.
        InvalidConfiguration = 5 => "INVALID_CONFIGURATION",
        /// A volume could not be attached.
        AttachVolumeFailure = 6 => "ATTACH_VOLUME_FAILURE",
        /// A public IP could not be assigned.
        AssignPublicIpFailure = 7 => "ASSIGN_PUBLIC_IP_FAILURE",
        /// A public IP could not be released.
        UnassignPublicIpFailure = 8 => "UNASSIGN_PUBLIC_IP_FAILURE",
        /// The peer broke a rule of the protocol.
        ProtocolViolation = 9 => "PROTOCOL_VIOLATION",
        /// The scheduler could not deliver a routed frame.
        DeliveryFailure = 10 => "DELIVERY_FAILURE",
        /// An action on an instance failed.
        InstanceActionFailure = 11 => "INSTANCE_ACTION_FAILURE",
        /// A volume could not be detached.
        DetachVolumeFailure = 12 => "DETACH_VOLUME_FAILURE",
    }
}

impl Operand {
    /// Whether this is a known operand.
    pub fn is_known(self) -> bool {
        !matches!(self, Operand::Unknown { .. })
    }

    /// Whether the frame type is ERROR (known operand or not).
    pub fn is_error(self) -> bool {
        self.to_wire().0 == FrameType::Error as u8
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Unknown {
                frame_type,
                operand,
            } => {
                write!(f, "UNKNOWN(type {frame_type}, operand {operand})")
            }
            known => f.write_str(known.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_frozen() {
        assert_eq!(Operand::Connect.to_wire(), (0, 0));
        assert_eq!(Operand::RefreshCnci.to_wire(), (0, 10));
        assert_eq!(Operand::Heartbeat.to_wire(), (1, 5));
        assert_eq!(Operand::InstanceStopped.to_wire(), (3, 9));
        assert_eq!(Operand::DeliveryFailure.to_wire(), (2, 10));
        assert_eq!(Operand::ProtocolViolation.to_wire(), (2, 9));
        assert_eq!(Operand::InstanceAction.to_wire(), (0, 11));
        assert_eq!(Operand::DetachVolume.to_wire(), (0, 12));
        assert_eq!(Operand::InstanceActionFailure.to_wire(), (2, 11));
        assert_eq!(Operand::DetachVolumeFailure.to_wire(), (2, 12));
        assert_eq!(Operand::ALL.len(), 13 + 6 + 10 + 13);
    }

    #[test]
    fn wire_round_trip_for_every_byte_pair() {
        for t in 0..=255u8 {
            for o in 0..=255u8 {
                let op = Operand::from_wire(t, o);
                assert_eq!(op.to_wire(), (t, o));
                assert_eq!(op.is_error(), t == 2);
            }
        }
        for op in Operand::ALL {
            assert!(op.is_known());
            assert_ne!(op.name(), "UNKNOWN");
        }
        assert_eq!(
            Operand::from_wire(4, 0),
            Operand::Unknown {
                frame_type: 4,
                operand: 0
            }
        );
        assert_eq!(
            Operand::from_wire(1, 6).to_string(),
            "UNKNOWN(type 1, operand 6)"
        );
    }
}
