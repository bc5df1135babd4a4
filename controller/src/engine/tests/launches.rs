//! Launches and what bounds them: an unreachable scheduler, tenancy, quotas, bad requests, evacuate
//! and restore, the trace ring.

use super::*;

#[test]
fn nothing_is_created_while_the_scheduler_is_unreachable() {
    let w = world();
    w.out.down.store(true, Ordering::SeqCst);
    let refused = w.engine.launch(
        Scope::Tenant(w.tenant),
        Launch {
            tenant: w.tenant,
            workload: w.workload,
            name: "x".into(),
            count: 1,
            key: None,
            groups: Vec::new(),
            metadata: store::Metadata::new(),
            user: None,
            server_group: None,
            reservation: store::Instance::new_reservation(),
            zone: None,
        },
        &Caller::default(),
    );
    assert!(matches!(refused, Err(ClusterError::Unavailable(_))));
    assert!(
        w.engine
            .store()
            .instances(Scope::All, InstanceFilter::default(), Page::first(10))
            .unwrap()
            .items
            .is_empty()
    );
}

#[test]
fn a_launch_beyond_what_the_nodes_could_hold_writes_nothing() {
    let w = world();
    let try_launch = |count| {
        w.engine.launch(
            Scope::Tenant(w.tenant),
            Launch {
                tenant: w.tenant,
                workload: w.workload,
                name: "x".into(),
                count,
                key: None,
                groups: Vec::new(),
                metadata: store::Metadata::new(),
                user: None,
                server_group: None,
                reservation: store::Instance::new_reservation(),
                zone: None,
            },
            &Caller::default(),
        )
    };
    let records = || {
        w.engine
            .store()
            .instances(Scope::All, InstanceFilter::default(), Page::first(100))
            .unwrap()
            .items
            .len()
    };
    // A node that has not sent its STATS: its size is unknown, nothing is refused (as before).
    w.node_connected(NODE, NodeType::ComputeNode);
    let flavor = w.engine.store().flavors(Scope::All).unwrap().remove(0);
    assert_eq!(w.engine.capacity(&flavor).unwrap(), None);
    // Its STATS: 8 vCPUs, 4096 MiB, 10,000 MB of disk hold 8 instances of 1 vCPU, 256 MiB, 1 GiB
    // (used or not: the figures are its totals).
    w.stats(NODE, &[]);
    assert_eq!(w.engine.capacity(&flavor).unwrap(), Some(8));
    let refused = try_launch(9);
    assert_eq!(
        refused.unwrap_err(),
        ClusterError::OverCapacity {
            requested: 9,
            capacity: 8
        }
    );
    assert_eq!(records(), 0, "nothing written");
    let message = try_launch(Launch::MAX_COUNT).unwrap_err().to_string();
    assert!(message.contains("at most 8"), "{message}");
    assert_eq!(records(), 0, "nothing written");
    let launched = try_launch(8).unwrap();
    assert_eq!(launched.len(), 8);
    // The instances of one launch share its reservation id, kept in the store.
    let reservation = launched[0].reservation.clone();
    assert!(reservation.as_deref().is_some_and(|r| r.starts_with("r-")));
    for i in &launched {
        let kept = w.engine.store().instance(Scope::All, i.id).unwrap();
        assert_eq!(kept.reservation, reservation);
    }
    // A second node doubles it.
    w.node_connected(NET_NODE, NodeType::ComputeNode);
    w.stats(NET_NODE, &[]);
    assert_eq!(w.engine.capacity(&flavor).unwrap(), Some(16));
}

#[test]
fn another_tenant_sees_nothing() {
    let w = world();
    let id = w.active();
    let other = Scope::Tenant(Uuid::from_bytes([0x99; 16]));
    for result in [
        w.engine.stop(other, id, &Caller::default()).map(drop),
        w.engine.start(other, id, &Caller::default()).map(drop),
        w.engine.reboot(other, id, &Caller::default()).map(drop),
        w.engine.delete(other, id, &Caller::default()),
    ] {
        assert!(matches!(
            result,
            Err(ClusterError::Store(StoreError::NotFound { .. }))
        ));
    }
    let launch = w.engine.launch(
        other,
        Launch {
            tenant: w.tenant,
            workload: w.workload,
            name: "x".into(),
            count: 1,
            key: None,
            groups: Vec::new(),
            metadata: store::Metadata::new(),
            user: None,
            server_group: None,
            reservation: store::Instance::new_reservation(),
            zone: None,
        },
        &Caller::default(),
    );
    assert!(matches!(
        launch,
        Err(ClusterError::Store(StoreError::NotFound { .. }))
    ));
    assert_eq!(w.state(id), InstanceState::Active);
}

#[test]
fn a_launch_past_the_quota_keeps_what_fitted() {
    let w = world_with(
        TenantNetwork::None,
        Quota {
            instances: Some(2),
            ..Quota::default()
        },
    );
    let refused = w.engine.launch(
        Scope::Tenant(w.tenant),
        Launch {
            tenant: w.tenant,
            workload: w.workload,
            name: "x".into(),
            count: 3,
            key: None,
            groups: Vec::new(),
            metadata: store::Metadata::new(),
            user: None,
            server_group: None,
            reservation: store::Instance::new_reservation(),
            zone: None,
        },
        &Caller::default(),
    );
    assert!(matches!(
        refused,
        Err(ClusterError::Store(StoreError::QuotaExceeded { .. }))
    ));
    assert_eq!(starts(&w.out.take()).len(), 2);
}

#[test]
fn bad_launches_are_refused() {
    let w = world();
    for (count, name) in [(0, "x"), (Launch::MAX_COUNT + 1, "x"), (1, "  ")] {
        let refused = w.engine.launch(
            Scope::All,
            Launch {
                tenant: w.tenant,
                workload: w.workload,
                name: name.into(),
                count,
                key: None,
                groups: Vec::new(),
                metadata: store::Metadata::new(),
                user: None,
                server_group: None,
                reservation: store::Instance::new_reservation(),
                zone: None,
            },
            &Caller::default(),
        );
        assert!(matches!(refused, Err(ClusterError::Invalid(_))));
    }
}

#[test]
fn evacuate_and_restore_go_to_connected_nodes_only() {
    let w = world();
    assert!(matches!(
        w.engine.evacuate(NODE),
        Err(ClusterError::NoNode(_))
    ));
    w.node_connected(NODE, NodeType::ComputeNode);
    w.engine.evacuate(NODE).unwrap();
    w.engine.restore(NODE).unwrap();
    let sent = w.out.take();
    assert!(matches!(&sent[0], Payload::Evacuate(c) if c.workload_agent_uuid == NODE));
    assert!(matches!(&sent[1], Payload::Restore(c) if c.workload_agent_uuid == NODE));
}

#[test]
fn traces_are_kept_in_a_bounded_ring() {
    let w = world();
    let frame = |i: usize| ssntp::payload::FrameTrace {
        label: format!("t{i}"),
        operand_type: 0,
        operand: 1,
        start_ns: 10,
        end_ns: 110,
        hops: vec![],
    };
    // 18 reports of 64: the newest 1,000 are kept.
    for report in 0..18 {
        let frames = (0..64).map(|i| frame(report * 64 + i)).collect();
        w.event(Payload::TraceReport(ssntp::payload::TraceReport { frames }));
    }
    let traces = w.engine.traces();
    assert_eq!(traces.len(), 1000);
    assert_eq!(traces.last().unwrap().label, "t1151");
    assert_eq!(traces[0].total_ns, 100);
    assert_eq!(traces[0].frame, "START");
}

/// A peer's report is bounded: 64 traces a report, 16 hops a trace, a printable label of 48
/// bytes at most.
#[test]
fn a_peers_trace_report_is_bounded() {
    let w = world();
    let hop = ssntp::frame::Hop {
        uuid: NODE,
        role: ssntp::Role::AGENT,
        tx_ns: 1,
        rx_ns: 2,
    };
    let frames = (0..100)
        .map(|_| ssntp::payload::FrameTrace {
            label: format!("\u{1b}[31m{}", "x".repeat(100)),
            operand_type: 0,
            operand: 1,
            start_ns: 10,
            end_ns: 110,
            hops: vec![hop; 1000],
        })
        .collect();
    w.event(Payload::TraceReport(ssntp::payload::TraceReport { frames }));
    let traces = w.engine.traces();
    assert_eq!(traces.len(), 64);
    assert_eq!(traces[0].hops.len(), 16);
    assert_eq!(traces[0].label.len(), 48);
    assert!(
        traces[0]
            .label
            .chars()
            .all(|c| c == ' ' || c.is_ascii_graphic())
    );
}

// ---- CNCIs --------------------------------------------------------------------------------

/// A launch with a key: every instance keeps it, and its START carries the public key as
/// `public-keys` meta data; a launch without one has none.
#[test]
fn a_launch_with_a_key_puts_it_in_the_start() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let key = store::InstanceKey {
        name: "k2".into(),
        public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDqQ me@home".into(),
    };
    let made = w
        .engine
        .launch(
            Scope::Tenant(w.tenant),
            Launch {
                tenant: w.tenant,
                workload: w.workload,
                name: "x".into(),
                count: 2,
                key: Some(key.clone()),
                groups: Vec::new(),
                metadata: store::Metadata::new(),
                user: None,
                server_group: None,
                reservation: store::Instance::new_reservation(),
                zone: None,
            },
            &Caller::default(),
        )
        .unwrap();
    let sent = w.out.take();
    let keyed = starts(&sent);
    assert_eq!(keyed.len(), 2);
    for (instance, start) in made.iter().zip(&keyed) {
        assert_eq!(w.instance(instance.id).key, Some(key.clone()));
        let meta = start.meta_data.as_ref().unwrap();
        assert_eq!(meta.get("public-keys"), Some(&key.public_key));
        assert_eq!(meta.get("key-name"), Some(&key.name));
    }
    w.launch(1);
    let sent = w.out.take();
    let meta = starts(&sent)[0].meta_data.clone().unwrap();
    assert!(!meta.contains_key("public-keys") && !meta.contains_key("key-name"));
}

/// A launch that asks for a trace sends each START traced under its label; others go untraced,
/// unless sampled (every one at rate 1, under `sampled`); nothing waits once they went.
#[test]
fn a_traced_launch_sends_its_starts_traced() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let by = Caller {
        trace: TraceLabel::new("my trace"),
        ..Caller::default()
    };
    w.launch_by(2, &by);
    w.launch(1);
    let traced = std::mem::take(&mut *w.out.traced.lock().unwrap());
    assert_eq!(
        traced,
        vec![
            (ssntp::Operand::Start, "my trace".to_string()),
            (ssntp::Operand::Start, "my trace".to_string()),
        ]
    );
    assert!(w.engine.state().traced.is_empty());

    let sampled = world_configured(TenantNetwork::None, Quota::default(), |c| {
        c.trace_sample = 1.0;
    });
    sampled.node_connected(NODE, NodeType::ComputeNode);
    sampled.launch(1);
    let traced = sampled.out.traced.lock().unwrap().clone();
    assert_eq!(traced, vec![(ssntp::Operand::Start, "sampled".to_string())]);
    // Not labels: too long, not printable.
    assert!(TraceLabel::new(&"x".repeat(49)).is_none());
    assert!(TraceLabel::new("é").is_none());
    assert!(TraceLabel::new("  ").is_none());
    assert_eq!(TraceLabel::new(" a b ").unwrap().as_str(), "a b");
}
