//! Routing and node tracking: frames by role and address, controllers learning of nodes (late ones
//! too), a restarted scheduler rebuilding from its agents, a slow agent not holding up the others,
//! CONFIGURE.

use super::*;

#[tokio::test]
async fn frames_are_routed_by_role_and_address() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c1 = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut c2 = peer(&pki, Role::CONTROLLER, u(0xc2), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    let mut cnci = peer(&pki, Role::CNCIAGENT, u(0x20), &s.addr, None).await;
    nodes_seen(&mut c1, 1).await;
    nodes_seen(&mut c2, 1).await;
    // Agent → every controller: STATS, INSTANCE_DELETED, its failures.
    let Payload::Ready(node) = Payload::Ready(node_status(u(1), "host1", 1000)) else {
        unreachable!()
    };
    let stats = Payload::Stats(Box::new(Stats {
        node,
        status: NodeState::Ready,
        instances: vec![],
    }));
    let deleted = Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: u(7),
    });
    let failure = Payload::DeleteFailure(DeleteFailure {
        instance_uuid: u(8),
        node_uuid: Some(u(1)),
        reason: DeleteFailureReason::NoInstance,
    });
    for p in [&stats, &deleted, &failure] {
        a.send(p);
    }
    for c in [&mut c1, &mut c2] {
        for p in [&stats, &deleted, &failure] {
            let m = c.next_work().await;
            assert_eq!((&m.payload, m.frame.origin), (p, u(1)));
        }
    }
    // Controller → agent by workload_agent_uuid.
    let delete = Payload::Delete(Delete {
        instance_uuid: u(7),
        workload_agent_uuid: u(1),
        stop: false,
    });
    c1.send(&delete);
    assert_eq!(a.next_work().await.payload, delete);
    // Controller → CNCI by concentrator_uuid / cnci_uuid; CNCI → controllers.
    let refresh = Payload::RefreshCnci(RefreshCnci {
        cnci_uuid: u(0x20),
        cncis: vec![],
    });
    c2.send(&refresh);
    assert_eq!(cnci.next_work().await.payload, refresh);
    let added = Payload::ConcentratorInstanceAdded(ConcentratorAdded {
        instance_uuid: u(0x20),
        tenant_uuid: u(0x7e),
        concentrator_ip: "10.0.0.5".parse().unwrap(),
        concentrator_mac: "02:00:0a:00:00:05".parse().unwrap(),
    });
    cnci.send(&added);
    assert_eq!(c1.next_work().await.payload, added);
    assert_eq!(c2.next_work().await.payload, added);
    // A DELETE for a node that is not there, or for a CNCI (wrong role): DELIVERY_FAILURE.
    for target in [u(0x99), u(0x20)] {
        c1.send(&Payload::Delete(Delete {
            instance_uuid: u(7),
            workload_agent_uuid: target,
            stop: false,
        }));
        let m = c1.next_work().await;
        let Payload::DeliveryFailure(f) = m.payload else {
            panic!("{:?}", m.payload)
        };
        assert_eq!(
            (f.target_uuid, f.reason, m.frame.origin),
            (Some(target), DeliveryFailureReason::NodeUnavailable, SCHED)
        );
    }
    c1.send(&Payload::RefreshCnci(RefreshCnci {
        cnci_uuid: u(1),
        cncis: vec![],
    }));
    let Payload::DeliveryFailure(f) = c1.next_work().await.payload else {
        panic!()
    };
    assert_eq!(f.reason, DeliveryFailureReason::CnciUnavailable);
    // A malformed START: START_FAILURE invalid_payload to its sender.
    let mut bad = Frame::new(u(0xc1), &Payload::Heartbeat);
    bad.operand = Operand::Start;
    bad.payload = vec![0xa0].into();
    c1.handle.send(&bad).unwrap();
    let Payload::StartFailure(f) = c1.next_work().await.payload else {
        panic!()
    };
    assert_eq!(f.reason, StartFailureReason::InvalidPayload);
    s.stop.cancel();
}

#[tokio::test]
async fn controllers_learn_of_nodes_coming_and_going_and_catch_up_late() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut early = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let dual = peer(
        &pki,
        Role::DUAL,
        u(1),
        &s.addr,
        Some(node_status(u(1), "d", 100)),
    )
    .await;
    let mut kinds = Vec::new();
    for _ in 0..2 {
        let m = early.next().await;
        let Payload::NodeConnected(e) = m.payload else {
            panic!()
        };
        assert_eq!((e.node_uuid, m.frame.origin), (u(1), SCHED));
        kinds.push(e.node_type);
    }
    assert_eq!(kinds, vec![NodeType::ComputeNode, NodeType::NetworkNode]);
    let _agent = agent(&pki, u(2), &s.addr, 100).await;
    let mut late = peer(&pki, Role::CONTROLLER, u(0xc2), &s.addr, None).await;
    let mut caught = Vec::new();
    for _ in 0..3 {
        let Payload::NodeConnected(e) = late.next().await.payload else {
            panic!()
        };
        caught.push((e.node_uuid, e.node_type));
    }
    caught.sort_by_key(|(u, t)| (*u, *t as u8));
    assert_eq!(
        caught,
        vec![
            (u(1), NodeType::ComputeNode),
            (u(1), NodeType::NetworkNode),
            (u(2), NodeType::ComputeNode)
        ]
    );
    dual.handle.close();
    for c in [&mut early, &mut late] {
        let mut gone = 0;
        while gone < 2 {
            if let Payload::NodeDisconnected(e) = c.next().await.payload {
                assert_eq!(e.node_uuid, u(1));
                gone += 1;
            }
        }
    }
    s.stop.cancel();
}

#[tokio::test]
async fn after_a_restart_the_scheduler_rebuilds_from_the_agents() {
    let pki = TestPki::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let s = scheduler(&pki, Some(listener)).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    nodes_seen(&mut c, 1).await;
    assert_eq!(place(&mut c, &mut [&mut a], start(1, 100)).await, Ok(0));
    s.stop.cancel();
    s.done.await.unwrap().unwrap();
    let s = scheduler(
        &pki,
        Some(TcpListener::bind(("127.0.0.1", port)).await.unwrap()),
    )
    .await;
    // Both reconnect by themselves; the agent re-announces READY, the controller hears of it.
    nodes_seen(&mut c, 1).await;
    assert_eq!(place(&mut c, &mut [&mut a], start(2, 100)).await, Ok(0));
    s.stop.cancel();
}

#[tokio::test]
async fn an_agent_that_stops_reading_does_not_hold_up_the_others() {
    let pki = TestPki::new();
    let conn = ssntp_net::ConnConfig {
        queue_bytes: 32 << 10,
        ..Default::default()
    };
    let s = scheduler_with(&pki, None, conn).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    // The stuck agent: a raw peer that says CONNECT and READY, then never reads again.
    let mut stuck = testkit::RawPeer::connect(&s.addr, &pki.identity(Role::AGENT, Some(u(1))))
        .await
        .unwrap();
    stuck
        .send(&Frame::new(
            u(1),
            &Payload::Connect(Connect { role: Role::AGENT }),
        ))
        .await
        .unwrap();
    assert_eq!(stuck.recv(T).await.unwrap().operand, Operand::Connected);
    let roomy = |uuid, host: &str| NodeStatus {
        disk_total_mb: u32::MAX,
        disk_available_mb: u32::MAX,
        vcpus_total: u32::MAX,
        vcpus_available: u32::MAX,
        ..node_status(uuid, host, u32::MAX)
    };
    stuck
        .send(&Frame::new(u(1), &Payload::Ready(roomy(u(1), "stuck"))))
        .await
        .unwrap();
    let mut fine = peer(&pki, Role::AGENT, u(2), &s.addr, Some(roomy(u(2), "fine"))).await;
    nodes_seen(&mut c, 2).await;
    // Rotation sends every other START to the stuck agent. Once its queue (and the socket
    // buffers) are full, the STARTs it cannot take are placed on the other agent instead: the
    // healthy agent ends up with more than half, and the controller sees no failure.
    let got = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = got.clone();
    let mut events = std::mem::replace(&mut fine.events, mpsc::channel(1).1);
    let drain = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let ClientEvent::Frames { messages: ms, .. } = e {
                let n = ms
                    .iter()
                    .filter(|m| m.frame.operand == Operand::Start)
                    .count() as u32;
                counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    let mut sent: u32 = 0;
    loop {
        assert!(
            sent < 400_000,
            "STARTs the stuck agent could not take were never re-placed"
        );
        for _ in 0..5_000 {
            let mut st = start(0, 1);
            st.instance_uuid = Uuid::from_u128(u128::from(sent) + 1);
            c.handle
                .send_wait(&Frame::new(u(0xc1), &Payload::Start(Box::new(st))))
                .await
                .unwrap();
            sent += 1;
        }
        // Every START is accounted for on the healthy side, at least its half.
        let healthy =
            || std::future::ready(got.load(std::sync::atomic::Ordering::Relaxed) >= sent / 2);
        testkit::wait_until(T, "the healthy agent to keep up", healthy).await;
        if got.load(std::sync::atomic::Ordering::Relaxed) > sent / 2 {
            break;
        }
    }
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), c.events.recv()).await
    {
        if let ClientEvent::Frames { messages: ms, .. } = event {
            assert!(
                ms.iter().all(|m| !m.frame.operand.is_error()),
                "{:?}",
                ms[0].payload
            );
        }
    }
    drain.abort();
    s.stop.cancel();
}

#[tokio::test]
async fn configure_sets_what_later_connections_are_told() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let config = ClusterConfig {
        scheduler: Some(ssntp::payload::SchedulerConfig {
            stats_interval_s: Some(7),
        }),
        ..ClusterConfig::default()
    };
    let config = ClusterConfig {
        controller: Some(ControllerConfig {
            api_port: Some(8443),
            ..Default::default()
        }),
        ..config
    };
    c.send(&Payload::Configure(Box::new(config.clone())));
    // The scheduler keeps the STATS interval it enforces (5 s here): that is what is told.
    let config = ClusterConfig {
        scheduler: Some(ssntp::payload::SchedulerConfig {
            stats_interval_s: Some(5),
        }),
        ..config
    };
    // The next session to connect is told the new configuration in CONNECTED.
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let mut cfg = ClientConfig::new(
            pki.identity(Role::AGENT, Some(u(9))),
            u(9),
            Role::AGENT,
            vec![s.addr.clone()],
        );
        cfg.backoff.initial = Duration::from_millis(50);
        let (handle, mut events) = Client::start(cfg).unwrap();
        let told = loop {
            if let ClientEvent::Connected { cluster, .. } = recv_within(&mut events, T).await {
                break cluster;
            }
        };
        handle.close();
        if told == config {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "CONFIGURE never took effect"
        );
    }
    s.stop.cancel();
}
