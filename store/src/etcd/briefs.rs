//! [`NodeBriefs`]: each node's instances in brief as last read from its index
//! (`node/<node>/<instance>`), with every write under the index since applied, used again for
//! the node's next STATS.
//!
//! A node reports every few seconds whether anything changed, and most reports change nothing:
//! at 10,000 nodes the reads of their indexes were about 1,000 etcd ranges a second, however
//! fast instances were being made, and some 330 a second when a read was kept 30 s. Two sources
//! of writes are applied to the kept reads (a brief written replaces the instance's, in the
//! index's order; a key deleted drops it), each write only if it is newer than what the read
//! holds of that key (the read's revision, or the key's last write applied since), so that
//! writes applied out of their order still leave each key as its newest write made it:
//! - this store's own commits, once etcd has answered them, so that a read that begins after a
//!   commit of this store sees it, with no round trip;
//! - a watch on every node's index (`watch.rs`, made when the store first reads a
//!   node's briefs), which delivers every process's writes (this store's too) in revision
//!   order. While it is up a read is kept with no time limit: a read is kept only if it began
//!   after the watch did, and only if no write under the node's index newer than the read was
//!   noted while it was in flight (such a write is not in the read, and was applied to nothing).
//!
//! A write that cannot be applied (a value that is not a brief, a key under a node's index that
//! names no instance, a range deletion that may cover the index) drops the read (or every read).
//! While no watch is up (it could not be made, or it ended and is being made again, which drops
//! every kept read), a read is used for at most
//! [`EtcdOptions::briefs_kept`](super::EtcdOptions::briefs_kept), and another process's writes
//! are seen when it expires; until then a report is checked against the older briefs, which
//! costs a read of the records that look changed, or leaves a repeated report unapplied until
//! the read expires: never a write, since every write the reconciliation makes compares the
//! record's version. A commit of this store whose outcome is unknown (it timed out) drops every
//! kept read, and none is kept for a call timeout after it, while etcd may still apply it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::instance_recs::BriefRec;
use crate::InstanceBrief;

/// The most nodes whose reads are kept; past it every kept read is dropped and counting starts
/// again (a cluster this size has its reads made again once, no more).
const MAX_NODES: usize = 1 << 17;

/// The most writes a read remembers by key while no watch is up (each key's last write since
/// the read, so that commits answered out of their order apply in order); past it the read is
/// dropped. With a watch up, the keys the watch has gone past are forgotten instead.
const MAX_REMEMBERED: usize = 4096;

/// The kept reads of each node's index (see the module docs).
pub(super) struct NodeBriefs {
    /// `<prefix>node/`: the index's keys start with it.
    root: String,
    /// How long a read is used while no watch is up.
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
    /// The watch on the index, while it is up.
    watch: Option<Watch>,
}

/// A watch on every node's index, up since revision `since`: every write after it reaches
/// [`NodeBriefs::watched`] in revision order.
#[derive(Clone, Copy)]
struct Watch {
    since: i64,
    /// The revision of the last write the watch delivered: every write before it has been.
    progress: i64,
}

/// A node whose index has been read.
#[derive(Default)]
struct Entry {
    /// The revision of the newest write under the node's index noted since the entry was made
    /// (this store's commits and, with a watch up, the watch's): a read at an older revision
    /// lacks it and is not kept.
    newest: i64,
    read: Option<Read>,
}

/// One read of a node's index, with the writes under it since applied.
struct Read {
    /// When the read began.
    at: Instant,
    /// The briefs in the index's order: the record's creation revision, then its id.
    briefs: Vec<(i64, InstanceBrief)>,
    /// The revision etcd read the index at: a write at or before it is in the briefs already.
    revision: i64,
    /// The revision of each key's last write applied since the read (put or delete): a write
    /// of the key at or before it is older than what the briefs hold.
    since: HashMap<Uuid, i64>,
}

impl Read {
    /// Applies one write under the node's index made at `revision` (unless the key holds a
    /// later write already); `false` when it cannot be (the read must then be dropped).
    fn apply(&mut self, node: Uuid, write: &IndexWrite, revision: i64) -> bool {
        let last = self
            .since
            .get(&write.instance)
            .copied()
            .unwrap_or(self.revision);
        if revision <= last {
            return true;
        }
        self.since.insert(write.instance, revision);
        self.briefs.retain(|(_, b)| b.id != write.instance);
        let Some(value) = &write.value else {
            return true;
        };
        let Ok(brief) = serde_json::from_slice::<BriefRec>(value) else {
            return false;
        };
        let Ok(model) = brief.model(write.instance, node) else {
            return false;
        };
        let order = (brief.c, write.instance);
        let at = self.briefs.partition_point(|(c, b)| (*c, b.id) < order);
        self.briefs.insert(at, (brief.c, model));
        true
    }

    /// Forgets the keys' writes the watch has gone past (no write of theirs can come again
    /// older than `progress`); `false` when, with no watch, too many are remembered.
    fn bound(&mut self, watch: Option<Watch>) -> bool {
        match watch {
            Some(w) if self.since.len() > self.briefs.len() + 64 => {
                self.since.retain(|_, rev| *rev >= w.progress);
                true
            }
            Some(_) => true,
            None => self.since.len() <= MAX_REMEMBERED,
        }
    }
}

/// One write under a node's index: the instance's brief put (its JSON), or its key deleted
/// (`None`).
pub(super) struct IndexWrite {
    pub(super) node: Uuid,
    pub(super) instance: Uuid,
    pub(super) value: Option<Vec<u8>>,
}

/// A read of a node's index about to begin: [`NodeBriefs::keep`] keeps its outcome.
#[derive(Debug)]
pub(super) struct Mark {
    node: Uuid,
    epoch: u64,
    at: Instant,
}

/// A write the watch delivered under the index.
pub(super) enum Watched {
    /// A write of an instance's key under a node's index.
    Write(IndexWrite, i64),
    /// A write under a node's index of a key that names no instance: the node's read is
    /// dropped.
    Node(Uuid, i64),
    /// A key under the index that names no node: every read is dropped.
    Unknown,
}

impl NodeBriefs {
    /// For keys under `root` (the store's prefix), each read used for at most `keep` while no
    /// watch is up (`Duration::ZERO`: none kept, and no watch).
    pub(super) fn new(root: &str, keep: Duration) -> NodeBriefs {
        NodeBriefs {
            root: format!("{root}node/"),
            keep,
            kept: Mutex::new(Kept::default()),
        }
    }

    /// Whether reads are kept at all.
    pub(super) fn keeps(&self) -> bool {
        !self.keep.is_zero()
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
        let (epoch, watching) = (kept.epoch, kept.watch.is_some());
        let entry = kept.nodes.entry(node).or_default();
        if let Some(read) = &entry.read
            && (watching || now.duration_since(read.at) < self.keep)
        {
            return Ok(read.briefs.iter().map(|(_, b)| b.clone()).collect());
        }
        Err(Mark {
            node,
            epoch,
            at: now,
        })
    }

    /// Keeps `briefs` (in the index's order, each with its record's creation revision), read
    /// at `revision` after `mark` was taken, for the node's next reads; not if a write under
    /// the node's index after `revision` was noted meanwhile, nor, with a watch up, if the read
    /// is older than the watch.
    pub(super) fn keep(&self, mark: Mark, briefs: &[(i64, InstanceBrief)], revision: i64) {
        if self.keep.is_zero() {
            return;
        }
        let mut kept = self.lock();
        if kept.epoch != mark.epoch || kept.unsure_until.is_some_and(|until| mark.at < until) {
            return;
        }
        if kept.watch.is_some_and(|w| revision < w.since) {
            return;
        }
        if let Some(entry) = kept.nodes.get_mut(&mark.node)
            && entry.newest <= revision
        {
            entry.read = Some(Read {
                at: mark.at,
                briefs: briefs.to_vec(),
                revision,
                since: HashMap::new(),
            });
        }
    }

    /// Drops every kept read.
    fn drop_all(kept: &mut Kept) {
        kept.nodes.clear();
        kept.epoch += 1;
    }

    /// A commit of this store that wrote under some node's index failed with an unknown
    /// outcome: etcd may apply it later, until about `until` (the call's timeout after it
    /// failed). Every kept read is dropped, and no read that begins before `until` is kept.
    pub(super) fn unsure(&self, until: Instant) {
        let mut kept = self.lock();
        Self::drop_all(&mut kept);
        kept.unsure_until = Some(kept.unsure_until.map_or(until, |u| u.max(until)));
    }

    /// Applies the writes of one commit (this store's or, from the watch, any process's) made
    /// at `revision` to the nodes' kept reads, dropping a read where one cannot be applied.
    fn note(kept: &mut Kept, writes: &[&IndexWrite], revision: i64) {
        let watch = kept.watch;
        for write in writes {
            let Some(entry) = kept.nodes.get_mut(&write.node) else {
                continue;
            };
            entry.newest = entry.newest.max(revision);
            let Some(read) = &mut entry.read else {
                continue;
            };
            if !read.apply(write.node, write, revision) || !read.bound(watch) {
                entry.read = None;
            }
        }
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
            Self::drop_all(&mut kept);
            return;
        }
        // The watch delivered it already (and may have forgotten the keys' revisions).
        if kept.watch.is_some_and(|w| revision < w.progress) {
            return;
        }
        let writes: Vec<&IndexWrite> = writes.iter().collect();
        Self::note(&mut kept, &writes, revision);
    }

    /// The watch is up from `revision` on: every kept read is dropped (one older than the watch
    /// may lack a write it will not deliver), and from now on reads are kept with no time
    /// limit.
    pub(super) fn watching(&self, revision: i64) {
        let mut kept = self.lock();
        Self::drop_all(&mut kept);
        kept.watch = Some(Watch {
            since: revision,
            progress: revision,
        });
    }

    /// The watch is down: every kept read is dropped, and reads are kept for their time again.
    pub(super) fn unwatched(&self) {
        let mut kept = self.lock();
        Self::drop_all(&mut kept);
        kept.watch = None;
    }

    /// Whether the watch is up.
    #[cfg(test)]
    pub(super) fn is_watched(&self) -> bool {
        self.lock().watch.is_some()
    }

    /// The watch delivered `writes` (in revision order): applied to the nodes' kept reads.
    pub(super) fn watched(&self, writes: &[Watched]) {
        let mut kept = self.lock();
        let Some(mut watch) = kept.watch else {
            return;
        };
        for write in writes {
            match write {
                Watched::Write(write, revision) => {
                    Self::note(&mut kept, &[write], *revision);
                    watch.progress = watch.progress.max(*revision);
                }
                Watched::Node(node, revision) => {
                    if let Some(entry) = kept.nodes.get_mut(node) {
                        entry.newest = entry.newest.max(*revision);
                        entry.read = None;
                    }
                    watch.progress = watch.progress.max(*revision);
                }
                Watched::Unknown => Self::drop_all(&mut kept),
            }
            kept.watch = Some(watch);
        }
    }
}

impl super::watch::Follower for NodeBriefs {
    fn prefix(&self) -> &str {
        &self.root
    }

    fn what(&self) -> &'static str {
        "the node indexes (node briefs are kept for their time meanwhile)"
    }

    fn up(&self, revision: i64) {
        self.watching(revision);
    }

    fn down(&self) {
        self.unwatched();
    }

    fn events(&self, events: &[etcd_client::Event]) {
        let writes: Vec<Watched> = events
            .iter()
            .filter_map(etcd_client::Event::kv)
            .map(|kv| {
                let Ok(key) = kv.key_str() else {
                    return Watched::Unknown;
                };
                let revision = kv.mod_revision();
                match self.index_key(key) {
                    Some((node, Some(instance))) => Watched::Write(
                        IndexWrite {
                            node,
                            instance,
                            value: (!super::watch::deleted(kv)).then(|| kv.value().to_vec()),
                        },
                        revision,
                    ),
                    Some((node, None)) => Watched::Node(node, revision),
                    None => Watched::Unknown,
                }
            })
            .collect();
        self.watched(&writes);
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
    fn a_commit_answered_after_a_later_one_leaves_each_key_as_its_newest_write() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        let a = brief(node);
        read(&briefs, node, std::slice::from_ref(&a));
        let b = brief(node);
        let mut a2 = a.clone();
        a2.version = 5;
        // Committed at 14: `a` deleted, `b` made.
        briefs.written(&[delete(node, a.id), put(node, &b, 14)], false, 14);
        // Committed at 12, answered after: `a` changed (older than its deletion), `c` made.
        let c = brief(node);
        briefs.written(&[put(node, &a2, 1), put(node, &c, 12)], false, 12);
        assert_eq!(briefs.kept(node).unwrap(), vec![c, b]);
    }

    /// The revision [`kept_after`] reads at.
    const READ_AT: i64 = 100;

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
        briefs.keep(mark, &[(1, brief(node))], READ_AT);
        briefs.kept(node).is_ok()
    }

    #[test]
    fn a_read_is_kept_until_a_write_it_cannot_apply() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let (node, other) = (Uuid::new_v4(), Uuid::new_v4());
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        // Another node's write leaves it.
        briefs.written(&[put(other, &brief(other), 1)], false, READ_AT + 1);
        assert_eq!(briefs.kept(node).unwrap().len(), 1);
        // Its own that is not a brief ends it.
        let junk = IndexWrite {
            node,
            instance: Uuid::new_v4(),
            value: Some(b"{".to_vec()),
        };
        briefs.written(&[junk], false, READ_AT + 2);
        let mark = briefs.kept(node).expect_err("dropped");
        briefs.keep(mark, &[(1, brief(node))], READ_AT + 3);
        assert!(briefs.kept(node).is_ok());
        // So does a write that may touch every node's index.
        briefs.written(&[], true, READ_AT + 4);
        assert!(briefs.kept(node).is_err());
    }

    #[test]
    fn a_read_overtaken_by_a_write_is_not_kept() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        // A commit answered while the read was in flight, newer than the read: not in it.
        let node = Uuid::new_v4();
        assert!(!kept_after(&briefs, node, Duration::ZERO, || {
            briefs.written(&[delete(node, Uuid::new_v4())], false, READ_AT + 1);
        }));
        // One the read saw already leaves it.
        let node = Uuid::new_v4();
        assert!(kept_after(&briefs, node, Duration::ZERO, || {
            briefs.written(&[delete(node, Uuid::new_v4())], false, READ_AT - 1);
        }));
        // Not when every read was dropped meanwhile.
        let node = Uuid::new_v4();
        assert!(!kept_after(&briefs, node, Duration::ZERO, || {
            briefs.written(&[], true, READ_AT - 1);
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

    fn watched_put(node: Uuid, b: &InstanceBrief, created: i64, revision: i64) -> Watched {
        Watched::Write(put(node, b, created), revision)
    }

    #[test]
    fn with_a_watch_up_every_processs_writes_are_applied_and_a_read_does_not_expire() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        briefs.watching(5);
        // A read an hour old, begun after the watch: still answered.
        assert!(kept_after(&briefs, node, Duration::from_secs(3600), || {}));
        briefs.written(&[], true, 6);
        let a = brief(node);
        read(&briefs, node, std::slice::from_ref(&a));
        // Delivered late, a write the read holds already (`a` as written at 9): left.
        let mut older = a.clone();
        older.version = 2;
        // Then another process's write.
        let b = brief(node);
        briefs.watched(&[
            watched_put(node, &older, 1, 9),
            watched_put(node, &b, 11, 11),
        ]);
        assert_eq!(briefs.kept(node).unwrap(), vec![a.clone(), b.clone()]);
        // This store's commit, applied once answered, then delivered by the watch again.
        let c = brief(node);
        briefs.written(&[put(node, &c, 12)], false, 12);
        assert_eq!(
            briefs.kept(node).unwrap(),
            vec![a.clone(), b.clone(), c.clone()]
        );
        briefs.watched(&[watched_put(node, &c, 12, 12)]);
        briefs.watched(&[Watched::Write(delete(node, b.id), 13)]);
        assert_eq!(briefs.kept(node).unwrap(), vec![a, c]);
        // A write under the node's index that names no instance drops the read.
        briefs.watched(&[Watched::Node(node, 14)]);
        assert!(briefs.kept(node).is_err());
    }

    #[test]
    fn a_late_answer_to_this_stores_commit_does_not_undo_a_newer_write() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        briefs.watching(5);
        let (a, c) = (brief(node), brief(node));
        read(&briefs, node, &[a.clone(), c.clone()]);
        // This store deletes `a` at 14: the watch delivers it before etcd's answer arrives;
        // another process puts `a` back at 15.
        let mut again = a.clone();
        again.version = 9;
        briefs.watched(&[Watched::Write(delete(node, a.id), 14)]);
        briefs.watched(&[watched_put(node, &again, 1, 15)]);
        // Enough other writes that the keys the watch has gone past are forgotten.
        for n in 0..100 {
            briefs.watched(&[Watched::Write(delete(node, Uuid::new_v4()), 16 + n)]);
        }
        {
            let kept = briefs.lock();
            let read = kept.nodes[&node].read.as_ref().expect("kept");
            assert!(!read.since.contains_key(&a.id), "a's write at 15 forgotten");
        }
        // The answer to the deletion at 14 comes now: older than what the watch delivered.
        briefs.written(&[delete(node, a.id)], false, 14);
        assert_eq!(briefs.kept(node).unwrap(), vec![again, c]);
    }

    #[test]
    fn with_a_watch_up_a_read_older_than_it_or_than_a_write_it_delivered_is_not_kept() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        briefs.watching(20);
        // Read at 10, before the watch began: a write between may never be delivered.
        let mark = briefs.kept(node).unwrap_err();
        briefs.keep(mark, &[(1, brief(node))], 10);
        assert!(briefs.kept(node).is_err());
        // Read at 25 while the watch delivered a write at 26 under the node's index.
        let mark = briefs.kept(node).unwrap_err();
        briefs.watched(&[watched_put(node, &brief(node), 26, 26)]);
        briefs.keep(mark, &[(1, brief(node))], 25);
        assert!(briefs.kept(node).is_err());
        // Read at 27: the write at 26 is in it.
        let mark = briefs.kept(node).unwrap_err();
        briefs.keep(mark, &[(1, brief(node))], 27);
        assert_eq!(briefs.kept(node).unwrap().len(), 1);
    }

    #[test]
    fn a_watch_made_or_ended_drops_every_read_and_an_unknown_key_too() {
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        let node = Uuid::new_v4();
        // No watch: a read for its time.
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        assert!(!briefs.is_watched());
        briefs.watching(5);
        assert!(briefs.is_watched());
        assert!(briefs.kept(node).is_err());
        assert!(kept_after(&briefs, node, Duration::from_secs(120), || {}));
        briefs.watched(&[Watched::Unknown]);
        assert!(briefs.kept(node).is_err());
        assert!(kept_after(&briefs, node, Duration::from_secs(120), || {}));
        // Ended: dropped, and a read is kept for its time again.
        briefs.unwatched();
        assert!(!briefs.is_watched());
        assert!(briefs.kept(node).is_err());
        assert!(!kept_after(&briefs, node, Duration::from_secs(120), || {}));
        // Writes delivered with no watch up (an ended watch's last) are not applied.
        assert!(kept_after(&briefs, node, Duration::ZERO, || {}));
        briefs.watched(&[watched_put(node, &brief(node), 200, 200)]);
        assert_eq!(briefs.kept(node).unwrap().len(), 1);
    }

    #[test]
    fn a_read_remembers_its_keys_writes_within_bounds() {
        let node = Uuid::new_v4();
        // With no watch: past the bound, the read is dropped.
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        read(&briefs, node, &[]);
        for n in 0..MAX_REMEMBERED {
            let gone = Uuid::new_v4();
            briefs.written(&[delete(node, gone)], false, 11 + n as i64);
        }
        assert!(briefs.kept(node).is_ok());
        briefs.written(&[delete(node, Uuid::new_v4())], false, 1_000_000);
        assert!(briefs.kept(node).is_err());
        // With a watch: the keys it has gone past are forgotten, and the read stays.
        let briefs = NodeBriefs::new("/c/", Duration::from_secs(60));
        briefs.watching(5);
        read(&briefs, node, &[]);
        for n in 0..2 * MAX_REMEMBERED {
            let gone = Uuid::new_v4();
            briefs.watched(&[Watched::Write(delete(node, gone), 11 + n as i64)]);
        }
        let kept = briefs.lock();
        let read = kept.nodes[&node].read.as_ref().expect("kept");
        assert!(read.since.len() <= 65, "{}", read.since.len());
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
