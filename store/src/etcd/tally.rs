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
//! While no watch is up, or when the count at `W` could not be made (etcd compacted past it, or
//! the prefix has no state index: it was written by schema 2 code), every count is read from
//! etcd as before.

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
    /// The revision of this store's newest commit that wrote under the index.
    owed: i64,
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
                let counts = InstanceState::NAMES
                    .iter()
                    .filter_map(|&state| {
                        let n = base.get(state).copied().unwrap_or(0)
                            + up.moved.get(state).copied().unwrap_or(0);
                        u64::try_from(n).ok().filter(|&n| n > 0).map(|n| (state, n))
                    })
                    .collect();
                return Tallied::Counts(counts);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Tallied::Read;
            }
            inner = self
                .moved
                .wait_timeout(inner, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// The states counted at revision `since` (as [`Tallied::CountAt`] asked; `None`: they
    /// could not be, and counts are read from etcd until the watch is made again).
    pub(super) fn based(&self, since: i64, counts: Option<BTreeMap<&'static str, u64>>) {
        let mut inner = self.lock();
        if let Some(up) = &mut inner.watch
            && up.since == since
            && up.base.is_none()
        {
            up.base = Some(counts.ok_or(()).map(|counts| {
                counts
                    .into_iter()
                    .map(|(state, n)| (state, i64::try_from(n).unwrap_or(i64::MAX)))
                    .collect()
            }));
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
        self.lock().watch = Some(Up {
            since: revision,
            progress: revision,
            base: None,
            moved: BTreeMap::new(),
        });
        self.moved.notify_all();
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

    #[test]
    fn the_tally_is_the_count_at_the_watch_moved_by_what_it_delivered() {
        let tally = StateTally::new("/c/");
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
        tally.up(10);
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::CountAt(10)));
        // Delivered before the count at 10 was given: counted on top of it all the same.
        let (p1, a1, a2) = (key("pending", 1), key("active", 1), key("active", 2));
        tally.delivered(&[(&p1, true, false, 11)]);
        tally.based(10, Some(BTreeMap::from([("active", 2)])));
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
        tally.based(10, Some(BTreeMap::from([("active", 9)])));
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::CountAt(20)));
        // One that could not be made: read from etcd.
        tally.based(20, None);
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
    }

    #[test]
    fn a_count_waits_for_the_watch_to_deliver_this_stores_own_writes() {
        let tally = std::sync::Arc::new(StateTally::new("/c/"));
        tally.up(10);
        tally.based(10, Some(BTreeMap::new()));
        tally.written(12);
        // Not delivered: within no wait, read from etcd.
        assert!(matches!(tally.counts(Duration::ZERO), Tallied::Read));
        // Delivered while a count waits: that count answers it.
        let waiter = {
            let tally = tally.clone();
            std::thread::spawn(move || match tally.counts(Duration::from_secs(60)) {
                Tallied::Counts(c) => c,
                _ => panic!("no count"),
            })
        };
        let k = key("active", 1);
        tally.delivered(&[(&k, true, false, 11)]);
        tally.delivered(&[(&k, false, false, 12)]);
        assert_eq!(waiter.join().unwrap(), BTreeMap::from([("active", 1)]));
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
