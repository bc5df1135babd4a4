//! [`StateTally`]: how many instances are in each state, kept from a watch on the state index
//! (`bystate/<state>/<instance>`), so that a count costs no round trip.
//!
//! etcd 3.4 counts a range by collecting every key in it: a count of 100,000 active instances
//! walks 100,000 keys, and `/metrics` counts every state at each scrape (some 25 % of etcd's CPU
//! in the 100,000-instance bench, which scrapes to pace itself). Instead, once the watch is up
//! (at revision `W`), the states are counted once at revision `W`, and every write the watch
//! delivers after it moves the count: a key created (its version is 1) adds one to its state, a
//! key deleted takes one away, a key written again changes nothing.
//!
//! A count is answered from the tally once the watch has delivered this store's newest commit
//! that wrote under the index (waiting for it, at most the call timeout), so a store reads its
//! own writes; another process's writes count once the watch delivers them (milliseconds).
//! A write of this store that the watch does not deliver within that wait (one that made no
//! event, such as a deletion of a key that was not there) is not waited for again.
//!
//! While no watch is up, or in a prefix that has no state index (written by schema 2 code),
//! every count is read from etcd as before. A count at `W` that fails (etcd compacted past it,
//! a call failed), or a tally that goes below zero, has the watch made again (within 5 s), and
//! counted at its new first revision; meanwhile counts are read from etcd.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::InstanceState;

/// The tally of each state's instances (see the module docs).
pub(super) struct StateTally {
    /// `<prefix>bystate/`: the index's keys start with it.
    root: String,
    inner: Mutex<Inner>,
    /// Told when the watch delivers writes, or goes up or down.
    moved: Condvar,
}

#[derive(Default)]
struct Inner {
    watch: Option<Up>,
    /// The revision of this store's newest commit that wrote under the index (one the watch
    /// did not deliver in time is given up: see [`StateTally::counts`]).
    owed: i64,
    /// The watch is to be made again: the count at its first revision failed, or the tally
    /// went wrong.
    stale: bool,
    /// Counts waiting for the watch (for tests).
    waiting: usize,
}

/// A watch that is up, and what it delivered.
struct Up {
    /// Its first revision: every write after it is delivered.
    since: i64,
    /// The revision of the last write delivered (`since` before any).
    progress: i64,
    /// Each state's count at `since` (`None`: not counted yet), or why it cannot be.
    base: Option<Result<BTreeMap<&'static str, i64>, ()>>,
    /// Each state's change since `since`, by the writes delivered.
    moved: BTreeMap<&'static str, i64>,
}

/// The states counted at the watch's first revision ([`StateTally::based`]).
pub(super) enum Counted {
    /// Each state's count.
    At(BTreeMap<&'static str, u64>),
    /// The prefix has no state index (raised from schema 2): counts are read from the records.
    NotIndexed,
    /// The count failed (etcd compacted past the revision, a call failed): the watch is made
    /// again, and counted at its new first revision.
    Failed,
}

/// What [`StateTally::counts`] can answer.
pub(super) enum Tallied {
    /// Each state's count (the states with none left out).
    Counts(BTreeMap<&'static str, u64>),
    /// Count the states at this revision and give them to [`StateTally::based`].
    CountAt(i64),
    /// Read the counts from etcd.
    Read,
}

impl StateTally {
    /// For keys under `root` (the store's prefix).
    pub(super) fn new(root: &str) -> StateTally {
        StateTally {
            root: format!("{root}bystate/"),
            inner: Mutex::new(Inner::default()),
            moved: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing here is left half-changed by a panic.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `key` is in the state index.
    pub(super) fn covers(&self, key: &str) -> bool {
        key.starts_with(&self.root)
    }

    /// Whether `[start, end)` may hold keys of the index (an empty `end`: every key from
    /// `start`).
    pub(super) fn overlaps(&self, start: &str, end: &[u8]) -> bool {
        let root = self.root.as_bytes();
        let root_end = super::keys::prefix_end(&self.root);
        (end.is_empty() || end > root) && start.as_bytes() < root_end.as_slice()
    }

    /// Whether the watch is up and the states were counted at its first revision.
    #[cfg(test)]
    pub(super) fn is_tallying(&self) -> bool {
        self.lock()
            .watch
            .as_ref()
            .is_some_and(|up| matches!(up.base, Some(Ok(_))))
    }

    /// This store committed writes under the index at `revision`.
    pub(super) fn written(&self, revision: i64) {
        let mut inner = self.lock();
        inner.owed = inner.owed.max(revision);
    }

    /// Each state's count, once the watch has delivered this store's own writes (waiting for
    /// them at most `wait`), or what to do instead.
    pub(super) fn counts(&self, wait: Duration) -> Tallied {
        let deadline = Instant::now() + wait;
        let mut inner = self.lock();
        loop {
            let owed = inner.owed;
            let Some(up) = &inner.watch else {
                return Tallied::Read;
            };
            let base = match &up.base {
                None => return Tallied::CountAt(up.since),
                Some(Err(())) => return Tallied::Read,
                Some(Ok(base)) => base,
            };
            if up.progress >= owed {
                let mut counts = BTreeMap::new();
                let mut below = None;
                for state in InstanceState::NAMES.iter().copied() {
                    let n = base.get(state).copied().unwrap_or(0)
                        + up.moved.get(state).copied().unwrap_or(0);
                    match u64::try_from(n) {
                        Ok(0) => {}
                        Ok(n) => {
                            counts.insert(state, n);
                        }
                        Err(_) => below = Some((state, n)),
                    }
                }
                let Some((state, n)) = below else {
                    return Tallied::Counts(counts);
                };
                tracing::warn!(
                    "the etcd store's count of {state} instances went below zero ({n}); \
                     counted again"
                );
                inner.stale = true;
                return Tallied::Read;
            }
            let (progress, left) = (
                up.progress,
                deadline.saturating_duration_since(Instant::now()),
            );
            if left.is_zero() {
                // Not delivered in time: perhaps it made no event (a deletion of a key that was
                // not there). Later counts do not wait for it again.
                inner.owed = progress;
                return Tallied::Read;
            }
            inner.waiting += 1;
            inner = self
                .moved
                .wait_timeout(inner, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            inner.waiting -= 1;
        }
    }

    /// The states counted at revision `since`, as [`Tallied::CountAt`] asked.
    pub(super) fn based(&self, since: i64, counted: Counted) {
        let mut inner = self.lock();
        let Some(up) = &mut inner.watch else { return };
        if up.since != since || up.base.is_some() {
            return;
        }
        match counted {
            Counted::At(counts) => {
                up.base = Some(Ok(counts
                    .into_iter()
                    .map(|(state, n)| (state, i64::try_from(n).unwrap_or(i64::MAX)))
                    .collect()));
            }
            Counted::NotIndexed => up.base = Some(Err(())),
            Counted::Failed => inner.stale = true,
        }
    }

    /// The state a key of the index names (`None`: not a state this code knows).
    fn state_of(&self, key: &str) -> Option<&'static str> {
        let (state, _) = key.strip_prefix(&self.root)?.split_once('/')?;
        InstanceState::NAMES.iter().copied().find(|&s| s == state)
    }

    /// Writes delivered: `(key, created, deleted, revision)` each, in revision order.
    fn delivered(&self, writes: &[(&str, bool, bool, i64)]) {
        let mut inner = self.lock();
        let Some(up) = &mut inner.watch else { return };
        for &(key, created, deleted, revision) in writes {
            up.progress = up.progress.max(revision);
            let step = match (created, deleted) {
                (_, true) => -1,
                (true, false) => 1,
                (false, false) => continue,
            };
            if let Some(state) = self.state_of(key) {
                *up.moved.entry(state).or_default() += step;
            }
        }
        drop(inner);
        self.moved.notify_all();
    }
}

impl super::watch::Follower for StateTally {
    fn prefix(&self) -> &str {
        &self.root
    }

    fn what(&self) -> &'static str {
        "the state index (instance counts are read from etcd meanwhile)"
    }

    fn up(&self, revision: i64) {
        let mut inner = self.lock();
        inner.stale = false;
        inner.watch = Some(Up {
            since: revision,
            progress: revision,
            base: None,
            moved: BTreeMap::new(),
        });
        drop(inner);
        self.moved.notify_all();
    }

    fn stale(&self) -> bool {
        self.lock().stale
    }

    fn down(&self) {
        self.lock().watch = None;
        self.moved.notify_all();
    }

    fn events(&self, events: &[etcd_client::Event]) {
        let writes: Vec<(&str, bool, bool, i64)> = events
            .iter()
            .filter_map(etcd_client::Event::kv)
            .filter_map(|kv| {
                let key = kv.key_str().ok()?;
                let deleted = super::watch::deleted(kv);
                Some((key, kv.version() == 1, deleted, kv.mod_revision()))
            })
            .collect();
        self.delivered(&writes);
    }
}

#[cfg(test)]
mod tests {
    use super::super::watch::Follower;
    use super::*;

    fn key(state: &str, n: u32) -> String {
        format!("/c/bystate/{state}/{n}")
    }

    fn counts(tally: &StateTally) -> Vec<(&'static str, u64)> {
        match tally.counts(Duration::ZERO) {
            Tallied::Counts(c) => c.into_iter().collect(),
            Tallied::CountAt(at) => panic!("a count at {at} asked"),
            Tallied::Read => panic!("a read asked"),
        }
    }

    fn at(counts: &[(&'static str, u64)]) -> Counted {
        Counted::At(counts.iter().copied().collect())
    }

    #[test]
    fn the_tally_is_the_count_at_the_watch_moved_by_what_it_delivered() {
        let tally = StateTally::new("/c/");
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
        tally.up(10);
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::CountAt(10)));
        // Delivered before the count at 10 was given: counted on top of it all the same.
        let (p1, a1, a2) = (key("pending", 1), key("active", 1), key("active", 2));
        tally.delivered(&[(&p1, true, false, 11)]);
        tally.based(10, at(&[("active", 2)]));
        assert_eq!(counts(&tally), vec![("active", 2), ("pending", 1)]);
        // Started: its pending key deleted, its active key made; one written again.
        tally.delivered(&[(&p1, false, true, 12), (&a1, true, false, 12)]);
        tally.delivered(&[(&a2, false, false, 13)]);
        assert_eq!(counts(&tally), vec![("active", 3)]);
        // A key of a state this code does not know, or outside the index, counts nowhere.
        tally.delivered(&[("/c/bystate/molten/1", true, false, 14)]);
        tally.delivered(&[("/c/bystate", true, false, 14)]);
        assert_eq!(counts(&tally), vec![("active", 3)]);
        // Down: read from etcd until it is up again and counted again.
        tally.down();
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
        tally.up(20);
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::CountAt(20)));
        // A count given for another watch's revision is not taken.
        tally.based(10, at(&[("active", 9)]));
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::CountAt(20)));
        // A prefix with no state index: read from etcd, with no new watch asked.
        tally.based(20, Counted::NotIndexed);
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
        assert!(!tally.stale());
    }

    #[test]
    fn a_failed_count_or_a_tally_below_zero_asks_for_the_watch_again() {
        let tally = StateTally::new("/c/");
        tally.up(10);
        tally.based(10, Counted::Failed);
        assert!(tally.stale());
        // Still to be counted meanwhile; made again, no longer stale.
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::CountAt(10)));
        tally.up(30);
        assert!(!tally.stale());
        tally.based(30, at(&[]));
        let gone = key("active", 1);
        tally.delivered(&[(&gone, false, true, 31)]);
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
        assert!(tally.stale());
    }

    #[test]
    fn a_count_waits_for_the_watch_to_deliver_this_stores_own_writes() {
        let tally = std::sync::Arc::new(StateTally::new("/c/"));
        tally.up(10);
        tally.based(10, at(&[]));
        tally.written(12);
        // Delivered while a count waits: that count answers it.
        let waiter = {
            let tally = tally.clone();
            std::thread::spawn(move || match tally.counts(Duration::from_secs(60)) {
                Tallied::Counts(c) => c,
                _ => panic!("no count"),
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while tally.lock().waiting == 0 {
            assert!(Instant::now() < deadline, "the count did not wait");
            std::thread::yield_now();
        }
        let k = key("active", 1);
        tally.delivered(&[(&k, true, false, 11)]);
        tally.delivered(&[(&k, false, false, 12)]);
        assert_eq!(waiter.join().unwrap(), BTreeMap::from([("active", 1)]));
    }

    #[test]
    fn a_write_the_watch_does_not_deliver_in_time_is_waited_for_once() {
        let tally = StateTally::new("/c/");
        tally.up(10);
        tally.based(10, at(&[("active", 1)]));
        // A deletion of a key that was not there: no event.
        tally.written(12);
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
        assert_eq!(counts(&tally), vec![("active", 1)]);
    }

    #[test]
    fn the_index_keys_and_ranges_are_told_apart() {
        let tally = StateTally::new("/c/");
        assert!(tally.covers("/c/bystate/active/1"));
        assert!(!tally.covers("/c/bystates/x"));
        assert!(tally.overlaps("/c/", b"/c0"));
        assert!(!tally.overlaps("/c/node/", b"/c/node0"));
        assert_eq!(tally.state_of("/c/bystate/active/1"), Some("active"));
        assert_eq!(tally.state_of("/c/bystate/active"), None);
    }
}
