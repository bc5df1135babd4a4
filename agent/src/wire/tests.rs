use super::*;
use crate::model::{NodeAddress, StopCause, Usage};
use ssntp::Operand;
use ssntp::payload::{Cidr, Networking, NodeCommand, Requirements, Storage};
use std::collections::BTreeMap;

fn node(availability: Availability) -> NodeReport {
    NodeReport {
        node: Uuid::from_u128(0xA),
        hostname: "cn-1".into(),
        availability,
        mem_total_mb: 16_000,
        mem_available_mb: 9_000,
        disk_total_mb: 500_000,
        disk_available_mb: 300_000,
        vcpus_total: 8,
        vcpus_available: 5,
        load: 42,
        networks: vec![NodeAddress {
            ip: "192.0.2.7".parse().unwrap(),
            mac: [2, 0, 0xac, 0x10, 0, 5],
        }],
        zone: None,
    }
}

/// Encodes and decodes a payload: what the wiring sends must read back the same.
fn round_trip(p: &Payload) -> Payload {
    Payload::decode(p.operand(), &p.encode()).unwrap()
}

/// A workload's START with every field set (other modules' tests start from it too).
pub(crate) fn start() -> Start {
    Start {
        instance_uuid: Uuid::from_u128(1),
        tenant_uuid: Uuid::from_u128(2),
        workload_uuid: Uuid::from_u128(3),
        vm_type: VmType::Qemu,
        fw_type: FwType::Legacy,
        image: "debian-12".into(),
        requirements: Requirements {
            vcpus: 2,
            mem_mb: 2048,
            disk_mb: 10_000,
            network_node: false,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        },
        networking: Some(Networking {
            vnic_mac: "02:00:ac:10:00:05".parse().unwrap(),
            vnic_uuid: Uuid::from_u128(4),
            concentrator_uuid: Uuid::from_u128(5),
            concentrator_ip: "192.0.2.1".parse().unwrap(),
            subnet: "172.16.0.0/24".parse::<Cidr>().unwrap(),
            subnet_key: 0x10ac,
            private_ip: "172.16.0.5".parse().unwrap(),
            public_ip: true,
            firewall: None,
        }),
        storage: Some(vec![Storage {
            id: Uuid::from_u128(6),
            boot: true,
            size_mb: 10_000,
            ephemeral: false,
        }]),
        user_data: Some("#cloud-config\n".into()),
        meta_data: Some(BTreeMap::from([("hostname".into(), "vm-1".into())])),
        restart: true,
        kernel: None,
    }
}

#[test]
fn a_start_becomes_a_spec_with_everything_the_backend_needs() {
    let spec = spec_from_start(&start());
    assert_eq!(spec.instance, Uuid::from_u128(1));
    assert_eq!(
        (spec.tenant, spec.workload),
        (Uuid::from_u128(2), Uuid::from_u128(3))
    );
    assert_eq!((spec.kind, spec.firmware), (VmKind::Qemu, Firmware::Legacy));
    assert_eq!(spec.image, "debian-12");
    assert_eq!(
        spec.resources,
        Resources {
            vcpus: 2,
            mem_mb: 2048,
            disk_mb: 10_000
        }
    );
    let nic = spec.nic.as_ref().unwrap();
    assert_eq!(nic.mac, [2, 0, 0xac, 0x10, 0, 5]);
    assert_eq!(
        (
            nic.subnet_addr.to_string(),
            nic.subnet_prefix,
            nic.subnet_key
        ),
        ("172.16.0.0".into(), 24, 0x10ac)
    );
    assert!(nic.public_ip);
    assert_eq!(spec.disks.len(), 1);
    assert!(spec.disks[0].boot);
    assert_eq!(spec.meta_data["hostname"], "vm-1");
    assert!(spec.restart);
    // And it survives the state file's JSON.
    let json = serde_json::to_string(&spec).unwrap();
    assert!(json.contains("\"02:00:ac:10:00:05\""), "{json}");
    assert_eq!(serde_json::from_str::<InstanceSpec>(&json).unwrap(), spec);
    assert_eq!(spec.role, crate::model::InstanceRole::Workload);
}

#[test]
fn a_cncis_credentials_never_reach_the_spec_that_is_kept() {
    let mut s = start();
    let meta = s.meta_data.as_mut().unwrap();
    meta.insert(
        ssntp::payload::ROLE_KEY.into(),
        ssntp::payload::CNCI_ROLE.into(),
    );
    meta.insert(ssntp::payload::CNCI_CERT_KEY.into(), "CERT".into());
    meta.insert(
        ssntp::payload::CNCI_KEY_KEY.into(),
        "-----BEGIN PRIVATE KEY-----".into(),
    );
    let spec = spec_from_start(&s);
    assert_eq!(spec.role, crate::model::InstanceRole::Cnci);
    assert!(!spec.meta_data.contains_key(ssntp::payload::CNCI_CERT_KEY));
    assert!(!spec.meta_data.contains_key(ssntp::payload::CNCI_KEY_KEY));
    assert_eq!(spec.meta_data["hostname"], "vm-1");
    let kept = serde_json::to_string(&spec).unwrap();
    let logged = format!("{spec:?}");
    assert!(!kept.contains("PRIVATE KEY") && !logged.contains("PRIVATE KEY"));
}

#[test]
fn a_start_marked_as_a_cnci_becomes_a_cnci_spec() {
    let mut s = start();
    s.meta_data.as_mut().unwrap().insert(
        ssntp::payload::ROLE_KEY.into(),
        ssntp::payload::CNCI_ROLE.into(),
    );
    assert!(s.is_cnci());
    assert_eq!(spec_from_start(&s).role, crate::model::InstanceRole::Cnci);
    // Another value of the key, or no meta data at all, is a workload.
    s.meta_data
        .as_mut()
        .unwrap()
        .insert(ssntp::payload::ROLE_KEY.into(), "other".into());
    assert_eq!(
        spec_from_start(&s).role,
        crate::model::InstanceRole::Workload
    );
    s.meta_data = None;
    assert!(!s.is_cnci());
    assert_eq!(
        spec_from_start(&s).role,
        crate::model::InstanceRole::Workload
    );
}

#[test]
fn commands_from_payloads() {
    let s = start();
    assert_eq!(
        command(&Payload::Start(Box::new(s.clone()))),
        Some(Command::Start(Box::new(spec_from_start(&s))))
    );
    let delete = Delete {
        instance_uuid: Uuid::from_u128(9),
        workload_agent_uuid: Uuid::from_u128(0xA),
        stop: true,
    };
    assert_eq!(
        command(&Payload::Delete(delete)),
        Some(Command::Delete {
            instance: Uuid::from_u128(9),
            stop: true
        })
    );
    let nc = NodeCommand {
        workload_agent_uuid: Uuid::from_u128(0xA),
    };
    assert_eq!(
        command(&Payload::Evacuate(nc.clone())),
        Some(Command::Evacuate)
    );
    assert_eq!(command(&Payload::Restore(nc)), Some(Command::Restore));
    assert_eq!(command(&Payload::Heartbeat), None);
}

#[test]
fn node_status_becomes_ready_full_or_maintenance_with_figures() {
    for (a, op) in [
        (Availability::Ready, Operand::Ready),
        (Availability::Full, Operand::Full),
        (Availability::Maintenance, Operand::Maintenance),
    ] {
        let p = status_payload(&node(a));
        assert_eq!(p.operand(), op);
        assert_eq!(round_trip(&p), p);
        assert_eq!(p.node_uuid(), Some(Uuid::from_u128(0xA)));
    }
    let Payload::Ready(s) = status_payload(&node(Availability::Ready)) else {
        panic!("not READY")
    };
    assert_eq!(
        (
            s.mem_available_mb,
            s.disk_available_mb,
            s.vcpus_available,
            s.load
        ),
        (9_000, 300_000, 5, 42)
    );
    assert_eq!(s.networks[0].mac.to_string(), "02:00:ac:10:00:05");
}

#[test]
fn stats_carry_status_and_every_instance() {
    let instances = [
        InstanceReport {
            instance: Uuid::from_u128(1),
            state: InstanceState::Pending,
            usage: Usage::default(),
            volumes: Vec::new(),
        },
        InstanceReport {
            instance: Uuid::from_u128(2),
            state: InstanceState::Active,
            usage: Usage {
                mem_mb: 100,
                disk_mb: 200,
                cpu_percent: Some(7),
            },
            volumes: vec![Uuid::from_u128(9)],
        },
        InstanceReport {
            instance: Uuid::from_u128(3),
            state: InstanceState::ExitFailed,
            usage: Usage::default(),
            volumes: Vec::new(),
        },
    ];
    let p = stats_payload(&node(Availability::Full), &instances);
    assert_eq!(round_trip(&p), p);
    let Payload::Stats(stats) = p else {
        panic!("not STATS")
    };
    assert_eq!(stats.status, NodeState::Full);
    let states: Vec<_> = stats.instances.iter().map(|i| i.state).collect();
    assert_eq!(
        states,
        [WireState::Pending, WireState::Active, WireState::ExitFailed]
    );
    assert_eq!(stats.instances[1].memory_usage_mb, 100);
    assert_eq!(stats.instances[1].cpu_usage, Some(7));
    assert_eq!(instance_state(InstanceState::Stopping), WireState::Stopping);
    assert_eq!(instance_state(InstanceState::Exited), WireState::Exited);
}

#[test]
fn every_start_refusal_has_its_reason() {
    let cases = [
        (
            StartRefusal::NodeMaintenance,
            StartFailureReason::NodeMaintenance,
        ),
        (StartRefusal::FullCn, StartFailureReason::FullCn),
        (
            StartRefusal::AlreadyRunning,
            StartFailureReason::AlreadyRunning,
        ),
        (
            StartRefusal::InstanceExists,
            StartFailureReason::InstanceExists,
        ),
        (StartRefusal::ImageFailure, StartFailureReason::ImageFailure),
        (
            StartRefusal::LaunchFailure,
            StartFailureReason::LaunchFailure,
        ),
        (
            StartRefusal::NetworkFailure,
            StartFailureReason::NetworkFailure,
        ),
        (StartRefusal::InvalidData, StartFailureReason::InvalidData),
    ];
    for (refusal, reason) in cases {
        let event = InstanceEvent::StartFailed {
            instance: Uuid::from_u128(1),
            reason: refusal,
            restart: true,
            message: None,
        };
        let p = event_payload(&event, Uuid::from_u128(0xA)).unwrap();
        assert_eq!(round_trip(&p), p);
        assert_eq!(
            p,
            Payload::StartFailure(StartFailure {
                instance_uuid: Uuid::from_u128(1),
                node_uuid: Some(Uuid::from_u128(0xA)),
                reason,
                restart: true,
                message: None,
            })
        );
    }
}

#[test]
fn a_start_failure_carries_its_message_bounded() {
    let event = |message: &str| InstanceEvent::StartFailed {
        instance: Uuid::from_u128(1),
        reason: StartRefusal::LaunchFailure,
        restart: false,
        message: Some(message.into()),
    };
    let p = event_payload(
        &event("QEMU could not open /x: Permission denied"),
        Uuid::nil(),
    );
    let Some(Payload::StartFailure(f)) = p.map(|p| round_trip(&p)) else {
        panic!("not a START_FAILURE");
    };
    assert_eq!(
        f.message.as_deref(),
        Some("QEMU could not open /x: Permission denied")
    );
    let long = event(&"é".repeat(600));
    let Some(Payload::StartFailure(f)) = event_payload(&long, Uuid::nil()) else {
        panic!("not a START_FAILURE");
    };
    assert_eq!(f.message.unwrap(), "é".repeat(512));
}

#[test]
fn delete_events_and_failures() {
    let node = Uuid::from_u128(0xA);
    let id = Uuid::from_u128(1);
    let cases = [
        (
            InstanceEvent::Deleted { instance: id },
            Operand::InstanceDeleted,
        ),
        (
            InstanceEvent::Stopped {
                instance: id,
                cause: StopCause::Evacuated,
            },
            Operand::InstanceStopped,
        ),
        (
            InstanceEvent::DeleteFailed {
                instance: id,
                reason: DeleteRefusal::NoInstance,
            },
            Operand::DeleteFailure,
        ),
    ];
    for (event, op) in cases {
        let p = event_payload(&event, node).unwrap();
        assert_eq!(p.operand(), op);
        assert_eq!(round_trip(&p), p);
    }
    let failure = |reason| {
        event_payload(
            &InstanceEvent::DeleteFailed {
                instance: id,
                reason,
            },
            node,
        )
    };
    let Some(Payload::DeleteFailure(f)) = failure(DeleteRefusal::NoInstance) else {
        panic!()
    };
    assert_eq!(f.reason, DeleteFailureReason::NoInstance);
    for r in [DeleteRefusal::BackendFailure, DeleteRefusal::Busy] {
        let Some(Payload::DeleteFailure(f)) = failure(r) else {
            panic!()
        };
        assert_eq!(f.reason, DeleteFailureReason::Other);
    }
    let state = InstanceEvent::State {
        instance: id,
        state: InstanceState::Active,
    };
    assert_eq!(event_payload(&state, node), None);
}

#[test]
fn busy_commands_get_an_answer() {
    let node = Uuid::from_u128(0xA);
    let spec = spec_from_start(&start());
    let Some(Payload::StartFailure(f)) = busy_reply(&Command::Start(Box::new(spec)), node) else {
        panic!()
    };
    assert_eq!((f.reason, f.restart), (StartFailureReason::FullCn, true));
    let delete = Command::Delete {
        instance: Uuid::from_u128(1),
        stop: false,
    };
    assert_eq!(
        busy_reply(&delete, node).map(|p| p.operand()),
        Some(Operand::DeleteFailure)
    );
    assert_eq!(busy_reply(&Command::Evacuate, node), None);
}

#[test]
fn a_start_firewall_is_carried_into_the_spec_and_its_record() {
    use ssntp::payload::{Firewall, FirewallDirection, FirewallRule};
    let mut s = start();
    let firewall = Firewall {
        revision: 3,
        rules: vec![FirewallRule {
            direction: FirewallDirection::Ingress,
            protocol: Some(6),
            port_min: Some(22),
            port_max: Some(22),
            remote: None,
        }],
    };
    s.networking.as_mut().unwrap().firewall = Some(firewall.clone());
    let spec = spec_from_start(&s);
    assert_eq!(spec.nic.as_ref().unwrap().firewall, Some(firewall));
    // A record of an older agent (no firewall key) still reads back.
    let mut older = serde_json::to_value(spec_from_start(&start())).unwrap();
    assert!(older["nic"].get("firewall").is_none());
    older["nic"].as_object_mut().unwrap().remove("firewall");
    let back: InstanceSpec = serde_json::from_value(older).unwrap();
    assert_eq!(back.nic.unwrap().firewall, None);
}
