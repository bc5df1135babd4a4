//! [`NodeBriefs`]: each node's instances in brief as last read from its index
//! (`node/<node>/<instance>`), used again for the node's next STATS while this store has written
//! nothing under that index since, and for at most [`EtcdOptions::briefs_kept`](super::EtcdOptions::briefs_kept).
//!
//! A node reports every few seconds whether anything changed, and most reports change nothing:
//! at 10,000 nodes the reads of their indexes were about 1,000 etcd ranges a second, however
//! fast instances were being made. Every write of this store under the index (a commit whose
//! writes include a key there) is applied to the node's kept read once etcd has answered it (a
//! brief written replaces the instance's, a key deleted drops it), so a controller alone on its
//! prefix reconciles against what etcd holds without reading the index again after each of its
//! own writes; a write that cannot be applied so (commits answered out of their order, a value
//! that is not a brief) drops the read instead. A commit whose outcome is unknown (it
//! timed out) drops every kept read, and none is kept for a call timeout after it, while etcd
//! may still apply it (past that, the expiry below bounds what a very late apply leaves). Another
//! process's writes (a second controller, an off-host launcher) are seen when the kept read
//! expires; until then a report is checked against the older briefs, which costs a read of the
//! records that look changed, or leaves a repeated report unapplied until the read expires: never
//! a write, since every write the reconciliation makes compares the record's version.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::instance_recs::BriefRec;
use crate::InstanceBrief;

/// The most nodes whose reads are kept; past it every kept read is dropped and counting starts
/// again (a cluster this size has its reads made again once, no more).
const MAX_NODES: usize = 1 << 17;

/// The kept reads of each node's index (see the module docs).
pub(super) struct NodeBriefs {
    /// `<prefix>node/`: the index's keys start with it.
    root: String,
    /// How long a read is used.
    keep: Duration,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// Raised when every kept read is dropped at once.
    epoch: u64,
    nodes: HashMap<Uuid, Entry>,
    /// No read that began before this is kept: a commit whose outcome is unknown may still be
    /// applied by etcd until then ([`NodeBriefs::unsure`]).
    unsure_until: Option<Instant>,
}

/// A node whose index has been read.
#[derive(Default)]
struct Entry {
    /// This store's commits under the node's index since the entry was made.
    writes: u64,
    read: Option<Read>,
}

/// One read of a node's index, kept while no write under it has been noted since it began (a
/// drop of every read takes it away), with this store's writes since applied to it.
struct Read {
    /// When the read began.
    at: Instant,
    /// The briefs in the index's order: the record's creation revision, then its id.
    briefs: Vec<(i64, InstanceBrief)>,
    /// The revision etcd read the index at: a commit at or before it is in the briefs already.
    revision: i64,
    /// The revision of the last commit applied to the briefs since (`revision` before any).
    applied: i64,
}

impl Read {
    /// Applies one commit's writes under the node's index; `false` when one cannot be (the read
    /// must then be dropped).
    fn apply(&mut self, node: Uuid, writes: &[&IndexWrite]) -> bool {
        for write in writes {
            self.briefs.retain(|(_, b)| b.id != write.instance);
            let Some(value) = &write.value else { continue };
            let Ok(brief) = serde_json::from_slice::<BriefRec>(value) else {
                return false;
            };
            let Ok(model) = brief.model(write.instance, node) else {
                return false;
            };
            let order = (brief.c, write.instance);
            let at = self.briefs.partition_point(|(c, b)| (*c, b.id) < order);
            self.briefs.insert(at, (brief.c, model));
        }
        true
    }
}

/// One write of a commit under a node's index: the instance's brief put (its JSON), or its key
/// deleted (`None`).
pub(super) struct IndexWrite {
    pub(super) node: Uuid,
    pub(super) instance: Uuid,
    pub(super) value: Option<Vec<u8>>,
}

/// A read of a node's index about to begin: [`NodeBriefs::keep`] keeps its outcome.
#[derive(Debug)]
pub(super) struct Mark {
    node: Uuid,
    writes: u64,
    epoch: u64,
    at: Instant,
}

impl NodeBriefs {
    /// For keys under `root` (the store's prefix), each read used for at most `keep`
    /// (`Duration::ZERO`: none kept).
    pub(super) fn new(root: &str, keep: Duration) -> NodeBriefs {
        NodeBriefs {
            root: format!("{root}node/"),
            keep,
            kept: Mutex::new(Kept::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // Nothing here is left half-changed by a panic: the reads are kept as they were.
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The node and the instance that index key `key` names (the instance `None` when the
    /// key is under the node's index but names no instance).
    pub(super) fn index_key(&self, key: &str) -> Option<(Uuid, Option<Uuid>)> {
        let rest = key.strip_prefix(&self.root)?;
        let mut parts = rest.split('/');
        let node = Uuid::parse_str(parts.next()?).ok()?;
        let instance = match (parts.next(), parts.next()) {
            (Some(id), None) => Uuid::parse_str(id).ok(),
            _ => None,
        };
        Some((node, instance))
    }

    /// Whether `[start, end)` may hold keys of the index (an empty `end`: every key from
    /// `start`).
    pub(super) fn overlaps(&self, start: &str, end: &[u8]) -> bool {
        let root = self.root.as_bytes();
        let root_end = super::keys::prefix_end(&self.root);
        (end.is_empty() || end > root) && start.as_bytes() < root_end.as_slice()
    }

    /// `node`'s briefs as last read, if that read is still good; else the mark of a read to
    /// make now.
    pub(super) fn kept(&self, node: Uuid) -> std::result::Result<Vec<InstanceBrief>, Mark> {
        let now = Instant::now();
        let mut kept = self.lock();
        if kept.nodes.len() >= MAX_NODES && !kept.nodes.contains_key(&node) {
            kept.nodes.clear();
            kept.epoch += 1;
        }
        let epoch = kept.epoch;
        let entry = kept.nodes.entry(node).or_default();
        if let Some(read) = &entry.read
            && now.duration_since(read.at) < self.keep
        {
            return Ok(read.briefs.iter().map(|(_, b)| b.clone()).collect());
        }
        Err(Mark {
            node,
            writes: entry.writes,
            epoch,
            at: now,
        })
    }

    /// Keeps `briefs` (in the index's order, each with its record's creation revision), read
    /// at `revision` after `mark` was taken, for the node's next reads; not if this store wrote
    /// under the node's index meanwhile.
    pub(super) fn keep(&self, mark: Mark, briefs: &[(i64, InstanceBrief)], revision: i64) {
        if self.keep.is_zero() {
            return;
        }
        let mut kept = self.lock();
        if kept.epoch != mark.epoch || kept.unsure_until.is_some_and(|until| mark.at < until) {
            return;
        }
        if let Some(entry) = kept.nodes.get_mut(&mark.node)
            && entry.writes == mark.writes
        {
            entry.read = Some(Read {
                at: mark.at,
                briefs: briefs.to_vec(),
                revision,
                applied: revision,
            });
        }
    }

    /// A commit of this store that wrote under some node's index failed with an unknown
    /// outcome: etcd may apply it later, until about `until` (the call's timeout after it
    /// failed). Every kept read is dropped, and no read that begins before `until` is kept.
    pub(super) fn unsure(&self, until: Instant) {
        let mut kept = self.lock();
        kept.nodes.clear();
        kept.epoch += 1;
        kept.unsure_until = Some(kept.unsure_until.map_or(until, |u| u.max(until)));
    }

    /// This store committed `writes` under node indexes at `revision` (or writes that may touch
    /// any node's index, `all`): they are applied to the nodes' kept reads, or those reads are
    /// dropped where they cannot be (see the module docs). Called once the commit has been
    /// answered, so that a read that begins after this sees the writes.
    pub(super) fn written(&self, writes: &[IndexWrite], all: bool, revision: i64) {
        if writes.is_empty() && !all {
            return;
        }
        let mut kept = self.lock();
        if all {
            kept.nodes.clear();
            kept.epoch += 1;
            return;
        }
        let mut nodes: Vec<Uuid> = writes.iter().map(|w| w.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for node in nodes {
            let Some(entry) = kept.nodes.get_mut(&node) else {
                continue;
            };
            // A read in flight may predate the commit: it is not kept.
            entry.writes += 1;
            let Some(read) = &mut entry.read else {
                continue;
            };
            if revision <= read.revision {
                // Read after the commit: in the briefs already.
                continue;
            }
            let mine: Vec<&IndexWrite> = writes.iter().filter(|w| w.node == node).collect();
            // A later commit applied already: this one came too late to apply in order.
            if revision < read.applied || !read.apply(node, &mine) {
                entry.read = None;
                continue;
            }
            read.applied = revision;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InstanceState;

    fn brief(node: Uuid) -> InstanceBrief {
        InstanceBrief {
            id: Uuid::new_v4(),
            state: InstanceState::Active,
            node: Some(node),
            version: 3,
        }
    }

    /// `b` written at `b.id`'s key under `node`'s index, created at revision `created`.
    fn put(node: Uuid, b: &InstanceBrief, created: i64) -> IndexWrite {
        let (s, _) = super::super::instance_recs::state_text(&b.state);
        let rec = BriefRec {
            c: created,
            v: b.version,
            s: s.into(),
            r: None,
        };
        IndexWrite {
            node,
            instance: b.id,
            value: Some(serde_json::to_vec(&rec).unwrap()),
        }
    }

    fn delete(node: Uuid, instance: Uuid) -> IndexWrite {
        IndexWrite {
            node,
            instance,
            value: None,
        }
    }

    /// Keeps a read of `node`'s index made at revision 10, holding `held` (created at
    /// revisions 1, 2, ...).
    fn read(briefs: &NodeBriefs, node: Uuid, held: &[InstanceBrief]) {
        let mark = briefs.kept(node).expect_err("a read to make");
        let ordered: Vec<(i64, InstanceBrief)> = (1..).zip(held.iter().cloned()).collect();
        briefs.keep(mark, &ordered, 10);
    }

    #[test]
    fn this_stores_writes_are_applied_to_the_kept_read_in_the_index_order() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        let (a, b) = (brief(node), brief(node));
        read(&briefs, node, &[a.clone(), b.clone()]);
        // `a` turns exited; a new instance (created at 5) comes; `b` leaves the node.
        let mut a2 = a.clone();
        a2.state = InstanceState::Exited;
        a2.version = 4;
        let c = brief(node);
        briefs.written(&[put(node, &a2, 1), put(node, &c, 5)], false, 11);
        briefs.written(&[delete(node, b.id)], false, 12);
        assert_eq!(briefs.kept(node).unwrap(), vec![a2.clone(), c.clone()]);
        // One that sorts between them by its creation revision goes between them.
        let d = brief(node);
        briefs.written(&[put(node, &d, 3)], false, 13);
        assert_eq!(briefs.kept(node).unwrap(), vec![a2.clone(), d, c]);
        // A commit the read saw already (at or before its revision) changes nothing.
        briefs.written(&[delete(node, a2.id)], false, 9);
        assert_eq!(briefs.kept(node).unwrap().len(), 3);
    }

    #[test]
    fn a_commit_answered_after_a_later_one_drops_the_read() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        read(&briefs, node, &[brief(node)]);
        briefs.written(&[put(node, &brief(node), 2)], false, 14);
        assert_eq!(briefs.kept(node).unwrap().len(), 2);
        // Committed at 12, answered after 14: what it wrote may have been overwritten at 14.
        briefs.written(&[put(node, &brief(node), 3)], false, 12);
        assert!(briefs.kept(node).is_err());
    }

    /// Reads `node` (the read beginning `age` ago, `meanwhile` happening while it is in
    /// flight): whether the node's next read is answered from it.
    fn kept_after(
        briefs: &NodeBriefs,
        node: Uuid,
        age: Duration,
        meanwhile: impl FnOnce(),
    ) -> bool {
        let mut mark = briefs.kept(node).expect_err("a read to make");
        mark.at = Instant::now()
            .checked_sub(age)
            .expect("the clock is past the age");
        meanwhile();
        briefs.keep(mark, &[(1, brief(node))], 10);
        briefs.kept(node).is_ok()
    }

    #[test]
    fn a_read_is_kept_until_a_write_it_cannot_apply() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let (node, other) = (Uuid::new_v4(), Uuid::new_v4());
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        // Another node's write leaves it.
        briefs.written(&[put(other, &brief(other), 1)], false, 11);
        assert_eq!(briefs.kept(node).unwrap().len(), 1);
        // Its own that is not a brief ends it.
        let junk = IndexWrite {
            node,
            instance: Uuid::new_v4(),
            value: Some(b"{".to_vec()),
        };
        briefs.written(&[junk], false, 12);
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        // So does a write that may touch every node's index.
        briefs.written(&[], true, 13);
        assert!(briefs.kept(node).is_err());
    }

    #[test]
    fn a_read_overtaken_by_a_write_is_not_kept() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        // A commit answered while the read was in flight: what was read may predate it.
        assert!(!kept_after(&briefs, node, Duration::ZERO, || {
            briefs.written(&[delete(node, Uuid::new_v4())], false, 11);
        }));
        // Likewise when every read was dropped meanwhile.
        assert!(!kept_after(&briefs, node, Duration::ZERO, || {
            briefs.written(&[], true, 12);
        }));
    }

    #[test]
    fn a_read_expires_and_none_is_kept_when_told_so() {
        let node = Uuid::new_v4();
        let none = NodeBriefs::new("/c/", Duration::ZERO);
        assert!(!kept_after(&none, node, Duration::ZERO, || {}));
        // A read older than the time kept is made again.
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        assert!(!kept_after(&briefs, node, Duration::from_secs(61), || {}));
        assert!(kept_after(&briefs, node, Duration::from_secs(59), || {}));
    }

    #[test]
    fn no_read_is_kept_while_a_commit_may_still_be_applied() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        let until = Instant::now() + Duration::from_secs(10);
        briefs.unsure(until);
        // Dropped, and a read that begins before `until` is not kept.
        assert!(!kept_after(&briefs, node, Duration::ZERO, || {}));
        // One that begins after it is.
        let mut mark = briefs.kept(node).unwrap_err();
        mark.at = until;
        briefs.keep(mark, &[(1, brief(node))], 10);
        assert!(briefs.kept(node).is_ok());
    }

    #[test]
    fn the_index_keys_name_their_node_and_instance() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let (node, id) = (Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(
            briefs.index_key(&format!("/c/node/{node}/{id}")),
            Some((node, Some(id)))
        );
        assert_eq!(
            briefs.index_key(&format!("/c/node/{node}/")),
            Some((node, None))
        );
        assert_eq!(
            briefs.index_key(&format!("/c/node/{node}/{id}/x")),
            Some((node, None))
        );
        assert_eq!(briefs.index_key(&format!("/c/nodes/{node}/{id}")), None);
        assert_eq!(briefs.index_key(&format!("/c/instance/{id}")), None);
        assert_eq!(briefs.index_key("/c/node/junk/x"), None);
        assert!(briefs.overlaps("/c/", b"/c0"));
        assert!(briefs.overlaps("/c/node/", b""));
        assert!(!briefs.overlaps("/c/events/", b"/c/events0"));
        assert!(!briefs.overlaps("/c/nodf", b"/c/nodg"));
    }
}
