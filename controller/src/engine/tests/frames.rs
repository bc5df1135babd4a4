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
/// engine, on any scheduler's link and read ahead or not; everything, when no frame waits. (With
/// only the next event looked at, a quiet link's fresh frame ahead of a busy one's old ones
/// would have said everything was heard.)
#[tokio::test]
async fn the_cluster_is_heard_as_far_as_the_oldest_frames_waiting() {
    let read = |ago: Duration| {
        let mut event = super::origin::frames(NODE, Vec::new());
        if let ClientEvent::Frames { read_at, .. } = &mut event {
            *read_at = std::time::Instant::now()
                .checked_sub(ago)
                .unwrap_or_else(std::time::Instant::now);
        }
        event
    };
    let (quiet_tx, quiet) = tokio::sync::mpsc::channel(8);
    let (busy_tx, busy) = tokio::sync::mpsc::channel(8);
    let mut events = ssntp_net::client::merge_timed(vec![quiet, busy]);
    let behind = |held: Option<&ClientEvent>, events: &ssntp_net::client::Merged| {
        let now = SystemTime::now();
        now.duration_since(heard_until(held, events, now)).unwrap()
    };
    assert_eq!(behind(None, &events), Duration::ZERO);
    // A fresh frame on the quiet link, read ahead; 30 s old ones on the busy link; then a
    // scheduler's event on the quiet link.
    quiet_tx.send(read(Duration::ZERO)).await.unwrap();
    let held = events.recv().await.unwrap();
    busy_tx.send(read(Duration::from_secs(30))).await.unwrap();
    busy_tx.send(read(Duration::from_secs(29))).await.unwrap();
    quiet_tx
        .send(super::origin::connected(SCHEDULER))
        .await
        .unwrap();
    testkit::wait_for(Duration::from_secs(30), || async {
        match behind(Some(&held.1), &events) {
            b if b >= Duration::from_secs(30) => Ok(()),
            b => Err(format!("heard as far as {b:?} ago")),
        }
    })
    .await;
    assert!(behind(Some(&held.1), &events) < Duration::from_secs(60));
    // The busy link's first taken: its second is the oldest waiting.
    let mut taken = Vec::new();
    while taken.len() < 2 {
        let (link, event) = events.recv().await.unwrap();
        if link == 1 {
            taken.push(event);
        } else {
            assert!(matches!(event, ClientEvent::Connected { .. }));
        }
        if taken.len() == 1 {
            testkit::wait_for(Duration::from_secs(30), || async {
                match behind(None, &events) {
                    b if b >= Duration::from_secs(29) && b < Duration::from_secs(30) => Ok(()),
                    b => Err(format!("heard as far as {b:?} ago")),
                }
            })
            .await;
        }
    }
    // Every frame taken (the scheduler's event too, or waiting: it holds no frame).
    assert!(behind(None, &events) < Duration::from_secs(1));
}
