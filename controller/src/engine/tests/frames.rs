//! One read's frames applied with the STATS side by side (`run::apply_frames`, as over etcd):
//! each node's reports in order, every other frame in its place; how far the frames waiting
//! leave the cluster heard (`run::heard_until`).

use super::*;
use crate::engine::run::{apply_frames, heard_until};
use ssntp::payload::{NodeEvent, NodeState};
use ssntp_net::client::ClientEvent;

fn message(origin: Uuid, payload: Payload) -> ssntp::session::Message {
    ssntp::session::Message {
        frame: ssntp::Frame::new(origin, &payload),
        payload,
    }
}

/// Four nodes' reports interleaved, three each, applied on four threads: what each node said
/// last is what its records hold, as when applied one after the other; a node connected in the
/// middle of the read is known to the reports that follow it.
#[test]
fn side_by_side_reports_keep_each_nodes_order() {
    for at_once in [1, 4] {
        let w = world();
        let nodes: Vec<Uuid> = (1..=5u8).map(|n| Uuid::from_bytes([n; 16])).collect();
        for &node in &nodes[..4] {
            w.node_connected(node, NodeType::ComputeNode);
        }
        let ids: Vec<Uuid> = w.launch(10).iter().map(|i| i.id).collect();
        let (a, b) = (|k: usize| ids[2 * k], |k: usize| ids[2 * k + 1]);
        let report = |k: usize, states: [Reported; 2]| {
            let stats = stats_payload(
                nodes[k],
                NodeState::Ready,
                &[(a(k), states[0]), (b(k), states[1])],
                vec![],
            );
            message(nodes[k], stats)
        };
        let mut messages = Vec::new();
        for states in [
            [Reported::Pending, Reported::Pending],
            [Reported::Active, Reported::Active],
            [Reported::Exited, Reported::Active],
        ] {
            for k in 0..4 {
                messages.push(report(k, states));
            }
        }
        // A node the engine learns of in the middle of the read, and its report after that.
        let up = Payload::NodeConnected(NodeEvent {
            node_uuid: nodes[4],
            node_type: NodeType::ComputeNode,
        });
        messages.insert(6, message(SCHEDULER, up));
        messages.push(report(4, [Reported::Active, Reported::Exited]));
        let schedulers = Schedulers::new(vec![w.out.clone() as Arc<dyn Outbound>]);
        schedulers.opened(0, SCHEDULER);
        apply_frames(&w.engine, &schedulers, 0, &messages, at_once);
        for (k, &node) in nodes[..4].iter().enumerate() {
            assert_eq!(
                w.placed(a(k)),
                (InstanceState::Exited, Some(node)),
                "{at_once}: node {k}'s last report"
            );
            assert_eq!(w.placed(b(k)), (InstanceState::Active, Some(node)));
            assert_eq!(w.engine.node(node).unwrap().instances, 2);
        }
        assert_eq!(w.placed(a(4)), (InstanceState::Active, Some(nodes[4])));
        assert_eq!(w.placed(b(4)).1, Some(nodes[4]));
        assert_eq!(w.engine.node(nodes[4]).unwrap().status, NodeStatus::Ready);
    }
}

/// The sweep hears the cluster as far as the read time of the oldest frames waiting for the
/// engine, on any scheduler's link and read ahead or not; everything, when nothing waits. (With
/// only the next event looked at, a quiet link's fresh frame ahead of a busy one's old ones
/// would have said everything was heard.)
#[tokio::test]
async fn the_cluster_is_heard_as_far_as_the_oldest_frames_waiting() {
    let read = |ago: Duration| {
        let at = std::time::Instant::now()
            .checked_sub(ago)
            .expect("the machine has been up for 30 s");
        let mut event = super::origin::frames(NODE, Vec::new());
        if let ClientEvent::Frames { read_at, .. } = &mut event {
            *read_at = at;
        }
        (event, at)
    };
    let (quiet_tx, quiet) = tokio::sync::mpsc::channel(8);
    let (busy_tx, busy) = tokio::sync::mpsc::channel(8);
    let mut events = ssntp_net::client::merge_timed(vec![quiet, busy]);
    let now = SystemTime::now();
    assert_eq!(heard_until(None, &events, now), now);
    // A fresh frame on the quiet link, read ahead; then 30 and 29 s old ones on the busy link.
    quiet_tx.send(read(Duration::ZERO).0).await.unwrap();
    let (_, held) = events.recv().await.unwrap();
    assert_eq!(events.oldest_waiting(), None);
    let (first, first_at) = read(Duration::from_secs(30));
    let (second, second_at) = read(Duration::from_secs(29));
    busy_tx.send(first).await.unwrap();
    busy_tx.send(second).await.unwrap();
    oldest_waiting_is(&events, first_at).await;
    let now = SystemTime::now();
    let behind = now
        .duration_since(heard_until(Some(&held), &events, now))
        .unwrap();
    assert!(
        behind >= Duration::from_secs(30) && behind < Duration::from_secs(60),
        "{behind:?}"
    );
    // The busy link's first taken: its second is the oldest waiting; then none.
    assert_eq!(events.recv().await.unwrap().0, 1);
    oldest_waiting_is(&events, second_at).await;
    assert_eq!(events.recv().await.unwrap().0, 1);
    assert_eq!(events.oldest_waiting(), None);
    // Another event waits since it was taken from its client (frames read after it wait
    // behind it).
    let before = std::time::Instant::now();
    quiet_tx
        .send(super::origin::connected(SCHEDULER))
        .await
        .unwrap();
    testkit::wait_for(Duration::from_secs(30), || {
        let events = &events;
        async move {
            match events.oldest_waiting() {
                Some(since) if since >= before => Ok(()),
                other => Err(format!("the oldest waiting: {other:?}")),
            }
        }
    })
    .await;
}

/// Waits until the oldest event waiting in `events` is the one since `at`.
async fn oldest_waiting_is(events: &ssntp_net::client::Merged, at: std::time::Instant) {
    testkit::wait_for(Duration::from_secs(30), || async {
        match events.oldest_waiting() {
            Some(oldest) if oldest == at => Ok(()),
            other => Err(format!("the oldest waiting: {other:?}, not {at:?}")),
        }
    })
    .await;
}
