//! proptest strategies for every payload, and for frames carrying them.

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use ssntp::frame::{Frame, Hop, Trace};
use ssntp::payload::*;
use ssntp::{Operand, Role, Uuid};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub fn uuid() -> impl Strategy<Value = Uuid> {
    any::<[u8; 16]>().prop_map(Uuid::from_bytes)
}

fn role() -> impl Strategy<Value = Role> {
    any::<u32>().prop_map(Role::from_bits_retain)
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,12}", "[a-z0-9-]{0,20}"]
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        any::<[u8; 16]>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
    ]
}

fn cidr() -> impl Strategy<Value = Cidr> {
    (ip(), any::<u8>()).prop_map(|(addr, p)| {
        let max = if addr.is_ipv4() { 33 } else { 129 };
        Cidr::new(addr, p % max).expect("prefix in range")
    })
}

fn mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

fn node_status() -> impl Strategy<Value = NodeStatus> {
    (
        uuid(),
        text(),
        any::<[u32; 7]>(),
        vec((ip(), mac()), 0..3),
        option::of(text()),
    )
        .prop_map(|(u, h, n, nets, zone)| NodeStatus {
            node_uuid: u,
            hostname: h,
            mem_total_mb: n[0],
            mem_available_mb: n[1],
            disk_total_mb: n[2],
            disk_available_mb: n[3],
            vcpus_total: n[4],
            vcpus_available: n[5],
            load: n[6],
            networks: nets
                .into_iter()
                .map(|(ip, mac)| NodeNetwork { ip, mac })
                .collect(),
            zone,
        })
}

/// ATTACH_VOLUME's and DETACH_VOLUME's payload, with or without each optional key.
fn volume_command() -> impl Strategy<Value = VolumeCommand> {
    (
        uuid(),
        uuid(),
        uuid(),
        option::of(any::<u32>()),
        option::of("[a-z0-9/]{0,20}"),
        option::of("vd[a-z]"),
        any::<bool>(),
    )
        .prop_map(|(i, v, a, size_mb, image, device, force)| VolumeCommand {
            size_mb,
            image,
            device,
            force,
            ..VolumeCommand::new(i, v, a)
        })
}

fn instance_stat() -> impl Strategy<Value = InstanceStat> {
    let state = prop_oneof![
        Just(InstanceState::Pending),
        Just(InstanceState::Active),
        Just(InstanceState::Exited),
        Just(InstanceState::Stopping),
        Just(InstanceState::ExitFailed),
        Just(InstanceState::Paused),
        Just(InstanceState::Suspended),
    ];
    (
        uuid(),
        state,
        option::of(ip()),
        option::of(any::<u16>()),
        any::<[u32; 2]>(),
        option::of(0u32..=100),
        vec(uuid(), 0..3),
    )
        .prop_map(
            |(u, state, ssh_ip, ssh_port, n, cpu, volumes)| InstanceStat {
                instance_uuid: u,
                state,
                ssh_ip,
                ssh_port,
                memory_usage_mb: n[0],
                disk_usage_mb: n[1],
                cpu_usage: cpu,
                volumes,
            },
        )
}

fn stats() -> impl Strategy<Value = Stats> {
    let status = prop_oneof![
        Just(NodeState::Ready),
        Just(NodeState::Full),
        Just(NodeState::Maintenance),
        Just(NodeState::Offline),
    ];
    (node_status(), status, vec(instance_stat(), 0..4)).prop_map(|(node, status, instances)| {
        Stats {
            node,
            status,
            instances,
        }
    })
}

fn group() -> impl Strategy<Value = GroupRequirement> {
    (
        uuid(),
        text(),
        proptest::collection::vec(uuid(), 0..4),
        proptest::collection::vec(uuid(), 0..4),
    )
        .prop_map(|(id, policy, nodes, members)| GroupRequirement {
            id,
            policy,
            nodes,
            members,
        })
}

fn start() -> impl Strategy<Value = Start> {
    let vm = prop_oneof![
        Just(VmType::Qemu),
        Just(VmType::Container),
        Just(VmType::Sim)
    ];
    let fw = prop_oneof![Just(FwType::Efi), Just(FwType::Legacy)];
    let req = (
        any::<[u32; 3]>(),
        any::<bool>(),
        option::of(uuid()),
        option::of(text()),
        proptest::collection::vec(uuid(), 0..4),
        option::of(group()),
        option::of(text()),
    )
        .prop_map(
            |(n, network_node, node_id, hostname, avoid_nodes, group, zone)| Requirements {
                vcpus: n[0],
                mem_mb: n[1],
                disk_mb: n[2],
                network_node,
                node_id,
                hostname,
                avoid_nodes,
                group,
                zone,
            },
        );
    let net = (
        mac(),
        uuid(),
        uuid(),
        ip(),
        cidr(),
        any::<u32>(),
        ip(),
        any::<bool>(),
        option::of(firewall()),
    )
        .prop_map(
            |(
                vnic_mac,
                vnic_uuid,
                concentrator_uuid,
                concentrator_ip,
                subnet,
                subnet_key,
                private_ip,
                public_ip,
                firewall,
            )| {
                Networking {
                    vnic_mac,
                    vnic_uuid,
                    concentrator_uuid,
                    concentrator_ip,
                    subnet,
                    subnet_key,
                    private_ip,
                    public_ip,
                    firewall,
                }
            },
        );
    let storage = (uuid(), any::<bool>(), any::<u32>(), any::<bool>()).prop_map(
        |(id, boot, size_mb, ephemeral)| Storage {
            id,
            boot,
            size_mb,
            ephemeral,
        },
    );
    let kernel =
        (text(), option::of(text()), option::of(text())).prop_map(|(kernel, initrd, cmdline)| {
            KernelBoot {
                kernel,
                initrd,
                cmdline,
            }
        });
    (
        (uuid(), uuid(), uuid(), vm, fw, text()),
        (req, option::of(net), option::of(vec(storage, 0..3))),
        (
            option::of(text()),
            option::of(btree_map(text(), text(), 0..3)),
            any::<bool>(),
            option::of(kernel),
        ),
    )
        .prop_map(
            |(
                (i, t, w, vm_type, fw_type, image),
                (requirements, networking, storage),
                (user_data, meta_data, restart, kernel),
            )| Start {
                instance_uuid: i,
                tenant_uuid: t,
                workload_uuid: w,
                vm_type,
                fw_type,
                image,
                requirements,
                networking,
                storage,
                user_data,
                meta_data,
                restart,
                kernel,
            },
        )
}

fn cluster_config() -> impl Strategy<Value = ClusterConfig> {
    let scheduler = option::of(option::of(any::<u32>()).prop_map(|s| SchedulerConfig {
        stats_interval_s: s,
    }));
    let controller = option::of(
        (
            option::of(any::<u16>()),
            option::of(any::<[u32; 3]>()),
            option::of(cidr()),
            option::of(text()),
        )
            .prop_map(|(api_port, cnci, cnci_net, key)| ControllerConfig {
                api_port,
                cnci_vcpus: cnci.map(|c| c[0]),
                cnci_mem_mb: cnci.map(|c| c[1]),
                cnci_disk_mb: cnci.map(|c| c[2]),
                cnci_net,
                admin_ssh_key: key,
            }),
    );
    let launcher = option::of(
        (
            vec(cidr(), 0..2),
            vec(cidr(), 0..2),
            option::of(any::<bool>()),
            option::of(any::<bool>()),
        )
            .prop_map(
                |(compute_net, mgmt_net, disk_limit, mem_limit)| LauncherConfig {
                    compute_net,
                    mgmt_net,
                    disk_limit,
                    mem_limit,
                },
            ),
    );
    (scheduler, controller, launcher).prop_map(|(scheduler, controller, launcher)| ClusterConfig {
        scheduler,
        controller,
        launcher,
    })
}

fn hop() -> impl Strategy<Value = Hop> {
    (uuid(), role(), any::<u64>(), any::<u64>()).prop_map(|(uuid, role, tx_ns, rx_ns)| Hop {
        uuid,
        role,
        tx_ns,
        rx_ns,
    })
}

pub fn trace() -> impl Strategy<Value = Trace> {
    (text(), any::<u64>(), vec(hop(), 0..4)).prop_map(|(label, start_ns, hops)| Trace {
        label,
        start_ns,
        hops,
    })
}

fn reason() -> impl Strategy<Value = Reason> {
    text().prop_map(Reason::new)
}

fn public_ip_command() -> impl Strategy<Value = PublicIpCommand> {
    (uuid(), uuid(), uuid(), ip(), ip(), mac()).prop_map(
        |(c, t, i, public_ip, private_ip, vnic_mac)| PublicIpCommand {
            concentrator_uuid: c,
            tenant_uuid: t,
            instance_uuid: i,
            public_ip,
            private_ip,
            vnic_mac,
        },
    )
}

fn public_ip_event() -> impl Strategy<Value = PublicIpEvent> {
    (uuid(), uuid(), ip(), ip()).prop_map(|(c, i, public_ip, private_ip)| PublicIpEvent {
        concentrator_uuid: c,
        instance_uuid: i,
        public_ip,
        private_ip,
    })
}

fn tenant_event() -> impl Strategy<Value = TenantEvent> {
    (uuid(), ip(), uuid(), cidr(), uuid(), ip(), any::<u32>()).prop_map(
        |(a, aip, t, sub, c, cip, key)| TenantEvent {
            agent_uuid: a,
            agent_ip: aip,
            tenant_uuid: t,
            tenant_subnet: sub,
            concentrator_uuid: c,
            concentrator_ip: cip,
            subnet_key: key,
        },
    )
}

fn public_ip_failure() -> impl Strategy<Value = PublicIpFailure> {
    let reason = prop_oneof![
        Just(PublicIpFailureReason::NoInstance),
        Just(PublicIpFailureReason::InvalidPayload),
        Just(PublicIpFailureReason::InvalidData),
        Just(PublicIpFailureReason::AssignFailure),
        Just(PublicIpFailureReason::ReleaseFailure),
    ];
    (
        option::of(uuid()),
        option::of(uuid()),
        uuid(),
        option::of(ip()),
        option::of(ip()),
        option::of(mac()),
        reason,
    )
        .prop_map(
            |(c, t, i, public_ip, private_ip, vnic_mac, reason)| PublicIpFailure {
                concentrator_uuid: c,
                tenant_uuid: t,
                instance_uuid: i,
                public_ip,
                private_ip,
                vnic_mac,
                reason,
            },
        )
}

fn start_failure_reason() -> impl Strategy<Value = StartFailureReason> {
    use StartFailureReason as R;
    proptest::sample::select(vec![
        R::FullCloud,
        R::FullCn,
        R::NodeMaintenance,
        R::NoCn,
        R::NoNetCn,
        R::InvalidPayload,
        R::InvalidData,
        R::AlreadyRunning,
        R::InstanceExists,
        R::InstanceMissing,
        R::ImageFailure,
        R::LaunchFailure,
        R::NetworkFailure,
        R::Other,
    ])
}

fn attach_reason() -> impl Strategy<Value = AttachVolumeFailureReason> {
    use AttachVolumeFailureReason as R;
    proptest::sample::select(vec![
        R::NoInstance,
        R::InvalidPayload,
        R::InvalidData,
        R::AttachFailure,
        R::AlreadyAttached,
        R::StateFailure,
        R::InstanceFailure,
        R::NotSupported,
    ])
}

fn action() -> impl Strategy<Value = Action> {
    proptest::sample::select(vec![
        Action::Reboot,
        Action::RebootHard,
        Action::Pause,
        Action::Unpause,
        Action::Suspend,
        Action::Resume,
    ])
}

fn action_reason() -> impl Strategy<Value = InstanceActionFailureReason> {
    use InstanceActionFailureReason as R;
    proptest::sample::select(vec![
        R::NoInstance,
        R::InvalidState,
        R::InvalidPayload,
        R::InvalidData,
        R::BackendFailure,
    ])
}

/// Any payload of any known operand.
pub fn payload() -> impl Strategy<Value = Payload> {
    let node_cmd = || {
        uuid().prop_map(|u| NodeCommand {
            workload_agent_uuid: u,
        })
    };
    let inst_ev = || uuid().prop_map(|u| InstanceEvent { instance_uuid: u });
    let node_ev = || {
        (
            uuid(),
            prop_oneof![Just(NodeType::ComputeNode), Just(NodeType::NetworkNode)],
        )
            .prop_map(|(u, t)| NodeEvent {
                node_uuid: u,
                node_type: t,
            })
    };
    let commands = prop_oneof![
        role().prop_map(|role| Payload::Connect(Connect { role })),
        start().prop_map(|s| Payload::Start(Box::new(s))),
        stats().prop_map(|s| Payload::Stats(Box::new(s))),
        node_cmd().prop_map(Payload::Evacuate),
        (uuid(), uuid(), any::<bool>()).prop_map(|(i, a, stop)| Payload::Delete(Delete {
            instance_uuid: i,
            workload_agent_uuid: a,
            stop
        })),
        public_ip_command().prop_map(Payload::AssignPublicIp),
        public_ip_command().prop_map(Payload::ReleasePublicIp),
        cluster_config().prop_map(|c| Payload::Configure(Box::new(c))),
        volume_command().prop_map(Payload::AttachVolume),
        node_cmd().prop_map(Payload::Restore),
        (uuid(), uuid(), action()).prop_map(|(i, a, action)| Payload::InstanceAction(
            InstanceAction {
                instance_uuid: i,
                workload_agent_uuid: a,
                action
            }
        )),
        volume_command().prop_map(Payload::DetachVolume),
        (uuid(), vec((ip(), cidr(), ip(), any::<u32>()), 0..3)).prop_map(|(c, peers)| {
            Payload::RefreshCnci(RefreshCnci {
                cnci_uuid: c,
                cncis: peers
                    .into_iter()
                    .map(|(physical_ip, subnet, tunnel_ip, tunnel_id)| CnciPeer {
                        physical_ip,
                        subnet,
                        tunnel_ip,
                        tunnel_id,
                    })
                    .collect(),
            })
        }),
    ];
    let statuses = prop_oneof![
        (role(), uuid(), cluster_config()).prop_map(|(role, client_uuid, config)| {
            Payload::Connected(Box::new(Connected {
                role,
                client_uuid,
                config,
            }))
        }),
        node_status().prop_map(Payload::Ready),
        option::of(node_status()).prop_map(Payload::Full),
        option::of(node_status()).prop_map(Payload::Offline),
        option::of(node_status()).prop_map(Payload::Maintenance),
        Just(Payload::Heartbeat),
    ];
    let events = prop_oneof![
        tenant_event().prop_map(Payload::TenantAdded),
        tenant_event().prop_map(Payload::TenantRemoved),
        inst_ev().prop_map(Payload::InstanceDeleted),
        (uuid(), uuid(), ip(), mac()).prop_map(|(i, t, ip, mac)| {
            Payload::ConcentratorInstanceAdded(ConcentratorAdded {
                instance_uuid: i,
                tenant_uuid: t,
                concentrator_ip: ip,
                concentrator_mac: mac,
            })
        }),
        public_ip_event().prop_map(Payload::PublicIpAssigned),
        public_ip_event().prop_map(Payload::PublicIpUnassigned),
        vec(
            (text(), any::<(u8, u8, u64, u64)>(), vec(hop(), 0..3)),
            0..3
        )
        .prop_map(|frames| Payload::TraceReport(TraceReport {
            frames: frames
                .into_iter()
                .map(
                    |(label, (operand_type, operand, start_ns, end_ns), hops)| FrameTrace {
                        label,
                        operand_type,
                        operand,
                        start_ns,
                        end_ns,
                        hops
                    }
                )
                .collect(),
        })),
        node_ev().prop_map(Payload::NodeConnected),
        node_ev().prop_map(Payload::NodeDisconnected),
        inst_ev().prop_map(Payload::InstanceStopped),
    ];
    let errors = prop_oneof![
        reason().prop_map(Payload::InvalidFrameType),
        (
            uuid(),
            option::of(uuid()),
            start_failure_reason(),
            any::<bool>(),
            option::of(text())
        )
            .prop_map(|(i, n, reason, restart, message)| Payload::StartFailure(
                StartFailure {
                    instance_uuid: i,
                    node_uuid: n,
                    reason,
                    restart,
                    message,
                }
            )),
        reason().prop_map(Payload::ConnectionFailure),
        (
            uuid(),
            option::of(uuid()),
            prop_oneof![
                Just(DeleteFailureReason::NoInstance),
                Just(DeleteFailureReason::InvalidPayload),
                Just(DeleteFailureReason::InvalidData)
            ]
        )
            .prop_map(|(i, n, reason)| Payload::DeleteFailure(DeleteFailure {
                instance_uuid: i,
                node_uuid: n,
                reason
            })),
        reason().prop_map(Payload::ConnectionAborted),
        reason().prop_map(Payload::InvalidConfiguration),
        (
            uuid(),
            uuid(),
            option::of(uuid()),
            attach_reason(),
            option::of("[ -~]{0,40}")
        )
            .prop_map(|(i, v, n, reason, message)| {
                Payload::AttachVolumeFailure(AttachVolumeFailure {
                    message,
                    ..AttachVolumeFailure::new(i, v, n, reason)
                })
            }),
        (
            uuid(),
            uuid(),
            option::of(uuid()),
            attach_reason(),
            option::of("[ -~]{0,40}")
        )
            .prop_map(|(i, v, n, reason, message)| {
                Payload::DetachVolumeFailure(AttachVolumeFailure {
                    message,
                    ..AttachVolumeFailure::new(i, v, n, reason)
                })
            }),
        (
            uuid(),
            option::of(uuid()),
            option::of(action()),
            action_reason()
        )
            .prop_map(|(i, n, action, reason)| Payload::InstanceActionFailure(
                InstanceActionFailure {
                    instance_uuid: i,
                    node_uuid: n,
                    action,
                    reason,
                }
            )),
        public_ip_failure().prop_map(Payload::AssignPublicIpFailure),
        public_ip_failure().prop_map(Payload::UnassignPublicIpFailure),
        reason().prop_map(Payload::ProtocolViolation),
        (
            any::<u8>(),
            any::<u8>(),
            option::of(uuid()),
            prop_oneof![
                Just(DeliveryFailureReason::NodeUnavailable),
                Just(DeliveryFailureReason::CnciUnavailable),
                Just(DeliveryFailureReason::TooLarge)
            ]
        )
            .prop_map(|(operand_type, operand, target_uuid, reason)| {
                Payload::DeliveryFailure(DeliveryFailure {
                    operand_type,
                    operand,
                    target_uuid,
                    reason,
                })
            }),
    ];
    prop_oneof![commands, statuses, events, errors]
}

/// Any frame of a known operand: payload, origin, minor version, maybe a trace.
pub fn frame() -> impl Strategy<Value = (Frame, Payload)> {
    (payload(), uuid(), 0u8..4, option::of(trace())).prop_map(|(p, origin, minor, trace)| {
        let mut f = Frame::new(origin, &p);
        f.minor = minor;
        f.trace = trace.map(Box::new);
        (f, p)
    })
}

/// Any frame, including unknown operands with arbitrary bodies (framing only).
pub fn raw_frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        frame().prop_map(|(f, _)| f),
        (any::<(u8, u8)>(), uuid(), vec(any::<u8>(), 0..64)).prop_map(|((t, o), origin, body)| {
            Frame {
                operand: Operand::from_wire(t, o),
                minor: 0,
                origin,
                trace: None,
                payload: body.into(),
            }
        }),
    ]
}

/// A port firewall (START's `networking.firewall`).
fn firewall() -> impl Strategy<Value = Firewall> {
    let direction = prop_oneof![
        Just(FirewallDirection::Ingress),
        Just(FirewallDirection::Egress)
    ];
    let rule = (
        direction,
        option::of(any::<u8>()),
        option::of(any::<u16>()),
        option::of(any::<u16>()),
        option::of(vec(cidr(), 0..3)),
    )
        .prop_map(
            |(direction, protocol, port_min, port_max, remote)| FirewallRule {
                direction,
                protocol,
                port_min,
                port_max,
                remote,
            },
        );
    (any::<u64>(), vec(rule, 0..4)).prop_map(|(revision, rules)| Firewall { revision, rules })
}
