//! [`NodeBriefs`]: each node's instances in brief as last read from its index
//! (`node/<node>/<instance>`), used again for the node's next STATS while this store has written
//! nothing under that index since, and for at most [`EtcdOptions::briefs_kept`](super::EtcdOptions::briefs_kept).
//!
//! A node reports every few seconds whether anything changed, and most reports change nothing:
//! at 10,000 nodes the reads of their indexes were about 1,000 etcd ranges a second, however
//! fast instances were being made. Every write of this store under the index (a commit whose
//! writes include a key there) makes the node's kept read stale at once, so a controller alone
//! on its prefix reconciles against what etcd holds; a commit whose outcome is unknown (it
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
/// write or a drop of every read takes it away).
struct Read {
    /// When the read began.
    at: Instant,
    briefs: Vec<InstanceBrief>,
}

/// A read of a node's index about to begin: [`NodeBriefs::keep`] keeps its outcome.
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

    /// The node whose index `key` is in, if it is.
    pub(super) fn node_of(&self, key: &str) -> Option<Uuid> {
        let rest = key.strip_prefix(&self.root)?;
        let node = rest.split('/').next()?;
        Uuid::parse_str(node).ok()
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
            return Ok(read.briefs.clone());
        }
        Err(Mark {
            node,
            writes: entry.writes,
            epoch,
            at: now,
        })
    }

    /// Keeps `briefs`, read after `mark` was taken, for the node's next reads; not if this
    /// store wrote under the node's index meanwhile.
    pub(super) fn keep(&self, mark: Mark, briefs: &[InstanceBrief]) {
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

    /// This store committed writes under the indexes of `nodes` (or of any node, `all`): their
    /// kept reads are stale. Called once the commit has been answered, so that a read that
    /// begins after this sees the writes.
    pub(super) fn written(&self, nodes: &[Uuid], all: bool) {
        if nodes.is_empty() && !all {
            return;
        }
        let mut kept = self.lock();
        if all {
            kept.nodes.clear();
            kept.epoch += 1;
            return;
        }
        for node in nodes {
            if let Some(entry) = kept.nodes.get_mut(node) {
                entry.writes += 1;
                entry.read = None;
            }
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
        briefs.keep(mark, &[brief(node)]);
        briefs.kept(node).is_ok()
    }

    #[test]
    fn a_read_is_kept_until_a_write_under_its_node() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let (node, other) = (Uuid::new_v4(), Uuid::new_v4());
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        // Another node's write leaves it.
        briefs.written(&[other], false);
        assert!(briefs.kept(node).is_ok());
        // Its own ends it.
        briefs.written(&[node], false);
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        // So does a write that may touch every node's index.
        briefs.written(&[], true);
        assert!(briefs.kept(node).is_err());
    }

    #[test]
    fn a_read_overtaken_by_a_write_is_not_kept() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        // A commit answered while the read was in flight: what was read may predate it.
        assert!(!kept_after(&briefs, node, Duration::ZERO, || {
            briefs.written(&[node], false);
        }));
        // Likewise when every read was dropped meanwhile.
        assert!(!kept_after(&briefs, node, Duration::ZERO, || {
            briefs.written(&[], true);
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
        briefs.keep(mark, &[brief(node)]);
        assert!(briefs.kept(node).is_ok());
    }

    #[test]
    fn the_index_keys_name_their_node() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let (node, id) = (Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(briefs.node_of(&format!("/c/node/{node}/{id}")), Some(node));
        assert_eq!(briefs.node_of(&format!("/c/nodes/{node}/{id}")), None);
        assert_eq!(briefs.node_of(&format!("/c/instance/{id}")), None);
        assert_eq!(briefs.node_of("/c/node/junk/x"), None);
        assert!(briefs.overlaps("/c/", b"/c0"));
        assert!(briefs.overlaps("/c/node/", b""));
        assert!(!briefs.overlaps("/c/events/", b"/c/events0"));
        assert!(!briefs.overlaps("/c/nodf", b"/c/nodg"));
    }
}
