//! What controllers are told of nodes and when: NODE_CONNECTED before a node's first STATS, a late
//! controller's catch-up, heartbeats keeping a node and silent intervals dropping it.

use super::*;

fn stats_of(node: NodeStatus) -> Payload {
    Payload::Stats(Box::new(Stats {
        node,
        status: NodeState::Ready,
        instances: vec![],
    }))
}

#[tokio::test]
async fn a_node_is_announced_before_the_stats_it_sends_after_its_first_status() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    // As an agent does on connect: its status, then its STATS at once.
    let status = node_status(u(1), "dual", 1000);
    let stats = stats_of(status.clone());
    let announce = vec![Payload::Ready(status), stats.clone()];
    let _dual = peer_announcing(&pki, Role::DUAL, u(1), &s.addr, announce).await;
    // A controller takes figures only from nodes it has heard of: the STATS must not overtake
    // the NODE_CONNECTED its status made, or the node has no figures for a whole interval.
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = c.next().await;
        got.push((m.frame.operand, m.frame.origin));
    }
    assert_eq!(
        got,
        vec![
            (Operand::NodeConnected, SCHED),
            (Operand::NodeConnected, SCHED),
            (Operand::Stats, u(1)),
        ]
    );
    s.stop.cancel();
}

#[tokio::test]
async fn a_late_controller_gets_each_nodes_latest_stats_after_its_node_connected() {
    let pki = TestPki::new();
    let s = scheduler(&pki, None).await;
    let mut early = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut a = agent(&pki, u(1), &s.addr, 1000).await;
    nodes_seen(&mut early, 1).await;
    let latest = Frame::new(u(1), &stats_of(node_status(u(1), "host1", 900)));
    a.send(&stats_of(node_status(u(1), "host1", 1000)));
    a.handle.send(&latest).unwrap();
    // Then FULL: once a START is refused for it, the scheduler has handled both STATS too.
    a.send(&Payload::Full(None));
    while place(&mut early, &mut [&mut a], start(1, 1)).await.is_ok() {}
    // A controller that connects now (a restarted one) hears of the node and gets its figures
    // at once, not a STATS interval later.
    let mut late = peer(&pki, Role::CONTROLLER, u(0xc2), &s.addr, None).await;
    let m = late.next().await;
    assert_eq!(
        (m.payload, m.frame.origin),
        (
            Payload::NodeConnected(NodeEvent {
                node_uuid: u(1),
                node_type: NodeType::ComputeNode
            }),
            SCHED
        )
    );
    assert_eq!(late.next().await.frame, latest, "as the agent sent it");
    s.stop.cancel();
}

/// An agent speaking raw frames (it sends no HEARTBEAT of its own), past CONNECT and READY.
async fn raw_agent(pki: &TestPki, addr: &str, uuid: Uuid) -> RawPeer {
    let mut p = RawPeer::connect(addr, &pki.identity(Role::AGENT, Some(uuid)))
        .await
        .unwrap();
    p.send(&Frame::new(
        uuid,
        &Payload::Connect(Connect { role: Role::AGENT }),
    ))
    .await
    .unwrap();
    assert_eq!(p.recv(T).await.unwrap().operand, Operand::Connected);
    let ready = Payload::Ready(node_status(uuid, "raw", 1000));
    p.send(&Frame::new(uuid, &ready)).await.unwrap();
    p
}

/// The next NODE_CONNECTED (`true`) or NODE_DISCONNECTED (`false`) a controller hears, and its
/// node.
async fn node_event(c: &mut Peer) -> (bool, Uuid) {
    loop {
        match c.next().await.payload {
            Payload::NodeConnected(e) => return (true, e.node_uuid),
            Payload::NodeDisconnected(e) => return (false, e.node_uuid),
            _ => {}
        }
    }
}

/// Issue 20: a node is lost only when nothing at all came from it for three STATS intervals;
/// HEARTBEATs, which the scheduler never hands to its cluster state, count.
#[tokio::test]
async fn heartbeats_alone_keep_a_node_and_three_silent_intervals_drop_one() {
    let pki = TestPki::new();
    let s = scheduler_tuned(&pki, None, |c| c.stats_interval = Duration::from_secs(1)).await;
    let mut c = peer(&pki, Role::CONTROLLER, u(0xc1), &s.addr, None).await;
    let mut beating = raw_agent(&pki, &s.addr, u(1)).await;
    assert_eq!(node_event(&mut c).await, (true, u(1)));
    // From now on node 1 sends HEARTBEATs only, every quarter of a second.
    let beats = Arc::new(AtomicU32::new(0));
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (beats, stop) = (beats.clone(), stop.clone());
        async move {
            let heartbeat = Frame::new(u(1), &Payload::Heartbeat);
            let mut pace = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return beating,
                    _ = pace.tick() => {
                        beating.send(&heartbeat).await.unwrap();
                        beats.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    });
    wait_until(T, "a second of HEARTBEATs", || {
        let beats = beats.clone();
        async move { beats.load(Ordering::Relaxed) >= 5 }
    })
    .await;
    // Node 2 falls silent after its READY: three intervals later it is dropped, and controllers
    // hear of it. Node 1 has sent nothing but HEARTBEATs for longer than that by then.
    let mut silent = raw_agent(&pki, &s.addr, u(2)).await;
    assert_eq!(node_event(&mut c).await, (true, u(2)));
    assert_eq!(node_event(&mut c).await, (false, u(2)));
    assert!(
        silent.closed_within(T).await,
        "the dropped node's session is closed"
    );
    stop.cancel();
    let mut beating = task.await.unwrap();
    // Node 1 is still there to place on.
    c.send(&Payload::Start(Box::new(start(9, 100))));
    loop {
        let f = beating
            .recv(T)
            .await
            .expect("the kept node's session is open");
        if f.operand == Operand::Start {
            break;
        }
    }
    // Silent from now on, it goes in turn.
    assert_eq!(node_event(&mut c).await, (false, u(1)));
    s.stop.cancel();
}
