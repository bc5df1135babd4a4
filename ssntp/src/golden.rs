//! Golden byte vectors: the frames `docs/protocol.md` shows in hex, checked in both directions.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use crate::frame::{Frame, Hop, Trace};
use crate::payload::*;
use crate::{Role, Uuid};

/// The agent's UUID in the examples.
pub const AGENT: Uuid = Uuid::from_bytes([0x11; 16]);
/// The scheduler's UUID in the examples.
pub const SCHEDULER: Uuid = Uuid::from_bytes([0x5c; 16]);
/// The controller's UUID in the examples.
pub const CONTROLLER: Uuid = Uuid::from_bytes([0xc0; 16]);
/// The instance's UUID in the examples.
pub const INSTANCE: Uuid = Uuid::from_bytes([0x1a; 16]);
/// The tenant's UUID in the examples.
pub const TENANT: Uuid = Uuid::from_bytes([0x7e; 16]);
/// The workload's UUID in the examples.
pub const WORKLOAD: Uuid = Uuid::from_bytes([0x3a; 16]);

fn node_status() -> NodeStatus {
    NodeStatus {
        node_uuid: AGENT,
        hostname: "node1".into(),
        mem_total_mb: 16384,
        mem_available_mb: 12000,
        disk_total_mb: 100_000,
        disk_available_mb: 80_000,
        vcpus_total: 8,
        vcpus_available: 6,
        load: 25,
        networks: vec![NodeNetwork {
            ip: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)),
            mac: MacAddr([0x02, 0x00, 0xc0, 0xa8, 0x01, 0x0a]),
        }],
        zone: None,
    }
}

/// Every golden vector: its name, the frame, and its exact encoding in hex.
pub fn vectors() -> Vec<(&'static str, Frame, &'static str)> {
    let connect = Frame::new(AGENT, &Payload::Connect(Connect { role: Role::DUAL }));
    let connected = Frame::new(
        SCHEDULER,
        &Payload::Connected(Box::new(Connected {
            role: Role::SCHEDULER,
            client_uuid: AGENT,
            config: ClusterConfig::default(),
        })),
    );
    let start = Frame::new(
        CONTROLLER,
        &Payload::Start(Box::new(Start {
            instance_uuid: INSTANCE,
            tenant_uuid: TENANT,
            workload_uuid: WORKLOAD,
            vm_type: VmType::Qemu,
            fw_type: FwType::Legacy,
            image: "tiny".into(),
            requirements: Requirements {
                vcpus: 1,
                mem_mb: 256,
                disk_mb: 1024,
                network_node: false,
                node_id: None,
                hostname: None,
                avoid_nodes: Vec::new(),
                group: None,
                zone: None,
            },
            networking: None,
            storage: None,
            user_data: None,
            meta_data: Some(BTreeMap::from([("hostname".into(), "vm1".into())])),
            restart: false,
            kernel: None,
        })),
    );
    let ready = Frame::new(AGENT, &Payload::Ready(node_status()));
    let stats = Frame::new(
        AGENT,
        &Payload::Stats(Box::new(Stats {
            node: node_status(),
            status: NodeState::Ready,
            instances: vec![InstanceStat {
                instance_uuid: INSTANCE,
                state: InstanceState::Active,
                ssh_ip: None,
                ssh_port: None,
                memory_usage_mb: 200,
                disk_usage_mb: 300,
                cpu_usage: Some(3),
                volumes: Vec::new(),
            }],
        })),
    );
    let start_failure = Frame::new(
        SCHEDULER,
        &Payload::StartFailure(StartFailure {
            instance_uuid: INSTANCE,
            node_uuid: None,
            reason: StartFailureReason::FullCloud,
            restart: false,
            message: None,
        }),
    );
    let start_failure_message = Frame::new(
        AGENT,
        &Payload::StartFailure(
            StartFailure::new(
                INSTANCE,
                Some(AGENT),
                StartFailureReason::LaunchFailure,
                false,
            )
            .with_message("QEMU could not open /x/seed.iso: Permission denied"),
        ),
    );
    let traced = Frame::new(
        CONTROLLER,
        &Payload::Delete(Delete {
            instance_uuid: INSTANCE,
            workload_agent_uuid: AGENT,
            stop: false,
        }),
    )
    .with_trace(Trace {
        label: "t1".into(),
        start_ns: 1_000,
        hops: vec![Hop {
            uuid: CONTROLLER,
            role: Role::CONTROLLER,
            tx_ns: 1_000,
            rx_ns: 2_000,
        }],
    });
    let heartbeat = Frame::new(AGENT, &Payload::Heartbeat);
    vec![
        (
            "CONNECT",
            connect,
            "010000000000000711111111111111111111111111111111a164726f6c6514",
        ),
        (
            "CONNECTED",
            connected,
            "010001000000002c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5ca364726f6c65086b636c69656e745f75756964501111111111111111111111111111111166636f6e666967a0",
        ),
        (
            "START",
            start,
            "01000001000000dcc0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0a96d696e7374616e63655f75756964501a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a6b74656e616e745f75756964507e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e6d776f726b6c6f61645f75756964503a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a67766d5f747970656471656d756766775f74797065666c656761637965696d6167656474696e796c726571756972656d656e7473a465766370757301666d656d5f6d62190100676469736b5f6d621904006c6e6574776f726b5f6e6f6465f4696d6574615f64617461a168686f73746e616d6563766d316772657374617274f4",
        ),
        (
            "READY",
            ready,
            "01000101000000cf11111111111111111111111111111111aa696e6f64655f75756964501111111111111111111111111111111168686f73746e616d65656e6f6465316c6d656d5f746f74616c5f6d62194000706d656d5f617661696c61626c655f6d62192ee06d6469736b5f746f74616c5f6d621a000186a0716469736b5f617661696c61626c655f6d621a000138806b76637075735f746f74616c086f76637075735f617661696c61626c6506646c6f61641819686e6574776f726b7381a26269706c3139322e3136382e312e3130636d61637130323a30303a63303a61383a30313a3061",
        ),
        (
            "STATS",
            stats,
            "010000020000014211111111111111111111111111111111ac696e6f64655f75756964501111111111111111111111111111111168686f73746e616d65656e6f6465316c6d656d5f746f74616c5f6d62194000706d656d5f617661696c61626c655f6d62192ee06d6469736b5f746f74616c5f6d621a000186a0716469736b5f617661696c61626c655f6d621a000138806b76637075735f746f74616c086f76637075735f617661696c61626c6506646c6f61641819686e6574776f726b7381a26269706c3139322e3136382e312e3130636d61637130323a30303a63303a61383a30313a30616673746174757365524541445969696e7374616e63657381a56d696e7374616e63655f75756964501a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a657374617465666163746976656f6d656d6f72795f75736167655f6d6218c86d6469736b5f75736167655f6d6219012c696370755f757361676503",
        ),
        (
            "START_FAILURE",
            start_failure,
            "010002010000003b5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5ca36d696e7374616e63655f75756964501a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a66726561736f6e6a66756c6c5f636c6f75646772657374617274f4",
        ),
        (
            "START_FAILURE, with a message",
            start_failure_message,
            "010002010000009611111111111111111111111111111111a56d696e7374616e63655f75756964501a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a696e6f64655f75756964501111111111111111111111111111111166726561736f6e6e6c61756e63685f6661696c7572656772657374617274f4676d657373616765783251454d5520636f756c64206e6f74206f70656e202f782f736565642e69736f3a205065726d697373696f6e2064656e696564",
        ),
        (
            "DELETE, traced",
            traced,
            "8100000400000098c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0004ba3656c6162656c6274316873746172745f6e731903e864686f707381a4647575696450c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c064726f6c65026574785f6e731903e86572785f6e731907d0a36d696e7374616e63655f75756964501a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a73776f726b6c6f61645f6167656e745f7575696450111111111111111111111111111111116473746f70f4",
        ),
        (
            "HEARTBEAT",
            heartbeat,
            "010001050000000011111111111111111111111111111111",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Decoded, Decoder};
    use crate::frame::DEFAULT_MAX_FRAME;
    use bytes::BytesMut;

    #[test]
    fn frames_encode_to_their_golden_bytes() {
        for (name, frame, hex) in vectors() {
            let bytes = frame.to_bytes(DEFAULT_MAX_FRAME).unwrap();
            assert_eq!(hex::encode(&bytes), hex, "{name}");
        }
    }

    #[test]
    fn golden_bytes_decode_to_their_frames() {
        for (name, frame, hex) in vectors() {
            let mut buf = BytesMut::from(&hex::decode(hex).unwrap()[..]);
            let Ok(Decoded::Frame(raw)) = Decoder::default().decode(&mut buf) else {
                panic!("{name}: no frame");
            };
            assert!(buf.is_empty(), "{name}: bytes left");
            let decoded = raw.into_frame().unwrap();
            assert_eq!(decoded, frame, "{name}");
            let payload = decoded.decode_payload().unwrap();
            assert_eq!(
                Frame::new(frame.origin, &payload).payload,
                frame.payload,
                "{name}"
            );
        }
    }

    #[test]
    fn docs_show_every_golden_vector() {
        let doc = include_str!("../../docs/protocol.md");
        // The document wraps long hex at 64 characters per line; join it back.
        let joined: String = doc.split_whitespace().collect();
        for (name, _, hex) in vectors() {
            assert!(
                joined.contains(hex),
                "docs/protocol.md lacks the {name} vector"
            );
        }
    }
}
