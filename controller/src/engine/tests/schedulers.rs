//! Several schedulers (the rules are in `super::super::schedulers`): which one each frame goes
//! to, a START that one refuses tried on the next, a lost scheduler's STARTs sent again, and the
//! second copy of such a START deleted.

use super::*;
use ssntp::payload::{NodeEvent, NodeState};

const A: Uuid = Uuid::from_bytes([0xa5; 16]);
const B: Uuid = Uuid::from_bytes([0xb5; 16]);
const NODE_A: Uuid = Uuid::from_bytes([0x1a; 16]);
const NODE_B: Uuid = Uuid::from_bytes([0x1b; 16]);

/// Two schedulers, A (link 0) and B (link 1), connected, each with one ready node: A's with
/// `free_a` MiB free, B's with `free_b`.
fn two(free_a: u32, free_b: u32) -> (Schedulers, [Arc<Recorder>; 2]) {
    let links = [Arc::new(Recorder::default()), Arc::new(Recorder::default())];
    let s = Schedulers::new(
        links
            .iter()
            .map(|l| l.clone() as Arc<dyn Outbound>)
            .collect(),
    );
    s.opened(0, A);
    s.opened(1, B);
    for (link, node, scheduler, free) in [(0, NODE_A, A, free_a), (1, NODE_B, B, free_b)] {
        let up = Payload::NodeConnected(NodeEvent {
            node_uuid: node,
            node_type: NodeType::ComputeNode,
        });
        assert_eq!(s.inbound(link, scheduler, &up), Verdict::Apply);
        assert_eq!(
            s.inbound(link, node, &stats_free(node, free)),
            Verdict::Apply
        );
    }
    (s, links)
}

fn stats_free(node: Uuid, free: u32) -> Payload {
    let mut stats = stats_payload(node, NodeState::Ready, &[], vec![]);
    if let Payload::Stats(s) = &mut stats {
        s.node.mem_available_mb = free;
    }
    stats
}

/// A START as the engine makes it, with its instance.
fn a_start() -> (Uuid, Payload) {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    let start = w
        .out
        .take()
        .into_iter()
        .find(|p| matches!(p, Payload::Start(_)))
        .unwrap();
    (id, start)
}

#[test]
fn a_start_goes_to_the_scheduler_with_room_and_to_the_next_on_full_cloud() {
    let (s, [a, b]) = two(100, 5000);
    let (id, start) = a_start();
    s.send(&start).unwrap();
    assert_eq!((starts_of(&a.take(), id), starts_of(&b.take(), id)), (0, 1));
    // B is full after all: the START goes to A, and B's refusal stays here.
    let full = start_failure(id, StartFailureReason::FullCloud);
    assert_eq!(s.inbound(1, B, &full), Verdict::Skip);
    assert_eq!((starts_of(&a.take(), id), starts_of(&b.take(), id)), (1, 0));
    // A refuses too: nowhere left, the engine hears it.
    assert_eq!(s.inbound(0, A, &full), Verdict::Apply);
    assert!(a.take().is_empty() && b.take().is_empty());
    // A node's own failure is never retried elsewhere.
    let (other, start) = a_start();
    s.send(&start).unwrap();
    b.take();
    let mut on_node = start_failure(other, StartFailureReason::FullCloud);
    if let Payload::StartFailure(f) = &mut on_node {
        f.node_uuid = Some(NODE_B);
    }
    assert_eq!(s.inbound(1, NODE_B, &on_node), Verdict::Apply);
    assert!(a.take().is_empty());
}

#[test]
fn frames_for_a_node_go_to_the_scheduler_that_holds_it_and_follow_it() {
    let (s, [a, b]) = two(100, 100);
    let delete = |node| {
        Payload::Delete(Delete {
            instance_uuid: Uuid::from_u128(1),
            workload_agent_uuid: node,
            stop: false,
        })
    };
    s.send(&delete(NODE_A)).unwrap();
    s.send(&delete(NODE_B)).unwrap();
    assert_eq!((a.take().len(), b.take().len()), (1, 1));
    // NODE_A's agent moves to B: B announces it, and A's late NODE_DISCONNECTED changes
    // nothing.
    let event = NodeEvent {
        node_uuid: NODE_A,
        node_type: NodeType::ComputeNode,
    };
    assert_eq!(
        s.inbound(1, B, &Payload::NodeConnected(event.clone())),
        Verdict::Apply
    );
    assert_eq!(
        s.inbound(0, A, &Payload::NodeDisconnected(event.clone())),
        Verdict::Skip
    );
    s.send(&delete(NODE_A)).unwrap();
    assert_eq!((a.take().len(), b.take().len()), (0, 1));
    // From the holder it counts.
    assert_eq!(
        s.inbound(1, B, &Payload::NodeDisconnected(event)),
        Verdict::Apply
    );
    assert_eq!(s.holder(NODE_A), None);
    // A frame for a node nobody holds goes to the first connected scheduler (which answers
    // DELIVERY_FAILURE); none connected: not sent.
    s.send(&delete(NODE_A)).unwrap();
    assert_eq!((a.take().len(), b.take().len()), (1, 0));
    a.down.store(true, Ordering::SeqCst);
    b.down.store(true, Ordering::SeqCst);
    assert!(!s.connected());
    assert_eq!(s.send(&delete(NODE_A)), Err(SendFailure::NotConnected));
}

#[test]
fn a_lost_schedulers_nodes_and_starts_are_returned_and_its_starts_go_again() {
    let (s, [a, b]) = two(5000, 100);
    let (id, start) = a_start();
    s.send(&start).unwrap();
    assert_eq!(starts_of(&a.take(), id), 1);
    a.down.store(true, Ordering::SeqCst);
    let (nodes, starts) = s.disconnected(0);
    assert_eq!((nodes, starts.clone()), (vec![NODE_A], vec![id]));
    assert_eq!(s.resend(&starts), vec![id]);
    assert_eq!(starts_of(&b.take(), id), 1);
    // What went to B is B's now.
    assert_eq!(s.disconnected(1).1, vec![id]);
}

#[test]
fn a_start_sent_twice_keeps_the_first_copy_reported_and_deletes_the_second() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    w.node_connected(OTHER_NODE, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    let untouched = w.launch(1)[0].id;
    w.stats(NODE, &[(untouched, Reported::Active)]);
    w.out.take();
    // Its scheduler was lost before any node reported it: it goes again; the one a node
    // reported does not.
    assert_eq!(w.engine.orphaned_starts(&[id, untouched]), vec![id]);
    w.stats(OTHER_NODE, &[(id, Reported::Active)]);
    assert_eq!(w.placed(id), (InstanceState::Active, Some(OTHER_NODE)));
    // The first START ran too: that copy is deleted, and what its node says of it changes
    // nothing.
    w.stats(
        NODE,
        &[(id, Reported::Active), (untouched, Reported::Active)],
    );
    let deletes: Vec<(Uuid, Uuid)> = deletes(&w.out.take())
        .iter()
        .map(|d| (d.instance_uuid, d.workload_agent_uuid))
        .collect();
    assert_eq!(deletes, vec![(id, NODE)]);
    w.engine
        .handle_from(NODE, &deleted_event(id), SystemTime::now())
        .unwrap();
    assert_eq!(w.placed(id), (InstanceState::Active, Some(OTHER_NODE)));
    let mut failed = start_failure(id, StartFailureReason::LaunchFailure);
    if let Payload::StartFailure(f) = &mut failed {
        f.node_uuid = Some(NODE);
    }
    w.engine
        .handle_from(NODE, &failed, SystemTime::now())
        .unwrap();
    assert_eq!(w.placed(id), (InstanceState::Active, Some(OTHER_NODE)));
    assert_eq!(
        w.engine.reports_refused().iter().map(|r| r.1).sum::<u64>(),
        0
    );
}

/// A START sent twice (its scheduler lost) of which one node's copy is gone (its agent restarted
/// with nothing of it): still pending, and the other node's report places it.
#[test]
fn one_copy_gone_of_a_start_sent_twice_leaves_it_pending_for_the_other() {
    let w = world();
    w.node_connected(OTHER_NODE, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    assert_eq!(w.engine.orphaned_starts(&[id]), vec![id]);
    w.engine
        .handle_from(NODE, &deleted_event(id), SystemTime::now())
        .unwrap();
    assert_eq!(w.placed(id), (InstanceState::Pending, None));
    w.stats(OTHER_NODE, &[(id, Reported::Active)]);
    assert_eq!(w.placed(id), (InstanceState::Active, Some(OTHER_NODE)));
}

const OTHER_NODE: Uuid = Uuid::from_bytes([0xcc; 16]);

/// A scheduler link whose session ends as a START is queued on it: the end is told (on another
/// thread, as the engine's loop would) while the frame is being queued.
struct DyingLink {
    schedulers: std::sync::OnceLock<Arc<Schedulers>>,
    down: AtomicBool,
    /// What the told end found: the STARTs to send again.
    found: Mutex<Option<std::sync::mpsc::Receiver<Vec<Uuid>>>>,
}

impl Outbound for DyingLink {
    fn send(&self, payload: &Payload) -> Result<(), SendFailure> {
        if self.down.swap(true, Ordering::SeqCst) {
            return Err(SendFailure::NotConnected);
        }
        if matches!(payload, Payload::Start(_)) {
            let schedulers = self.schedulers.get().expect("set").clone();
            let (tx, rx) = std::sync::mpsc::channel();
            if schedulers.table_busy() {
                // The sender holds the table: the end, told now on the loop's thread, waits
                // until the START is remembered.
                std::thread::spawn(move || {
                    let _ = tx.send(schedulers.disconnected(0).1);
                });
            } else {
                // Nothing keeps the end from being handled before the sender remembers the
                // START: it is, now.
                let _ = tx.send(schedulers.disconnected(0).1);
            }
            *self.found.lock().unwrap() = Some(rx);
        }
        Ok(())
    }

    fn connected(&self) -> bool {
        !self.down.load(Ordering::SeqCst)
    }
}

#[test]
fn a_start_queued_on_a_session_that_ends_meanwhile_is_among_those_sent_again() {
    let dying = Arc::new(DyingLink {
        schedulers: std::sync::OnceLock::new(),
        down: AtomicBool::new(false),
        found: Mutex::new(None),
    });
    let other = Arc::new(Recorder::default());
    let s = Arc::new(Schedulers::new(vec![
        dying.clone() as Arc<dyn Outbound>,
        other.clone() as Arc<dyn Outbound>,
    ]));
    assert!(dying.schedulers.set(s.clone()).is_ok());
    s.opened(0, A);
    s.opened(1, B);
    let (id, start) = a_start();
    // The dying scheduler has the most room: the START goes there, and its session ends.
    let up = |node| {
        Payload::NodeConnected(NodeEvent {
            node_uuid: node,
            node_type: NodeType::ComputeNode,
        })
    };
    s.inbound(0, A, &up(NODE_A));
    s.inbound(0, NODE_A, &stats_free(NODE_A, 5000));
    s.inbound(1, B, &up(NODE_B));
    s.inbound(1, NODE_B, &stats_free(NODE_B, 100));
    s.send(&start).unwrap();
    let found = dying
        .found
        .lock()
        .unwrap()
        .take()
        .expect("the end was told");
    let again = found
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the end's scan finished");
    assert_eq!(again, vec![id]);
    assert_eq!(s.resend(&again), vec![id]);
    assert_eq!(starts_of(&other.take(), id), 1);
}
