//! What the scheduler remembers of server groups: where it placed each member it was sent, for
//! a short while. A controller names a START's fellow members whose node it does not know yet
//! (siblings of one launch, sent one after the other before any has reported where it runs);
//! the scheduler answers for them from this memory, so that strict anti-affinity holds within
//! one launch. Bounded: [`MAX_GROUPS`] groups of [`MAX_PER_GROUP`] members, each kept
//! [`KEEP`] (by then the controller knows where the member runs); soft state, lost with the
//! process like the rest of the cluster (a controller's `nodes` then still say where members
//! that reported run).

use ssntp::Uuid;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The most groups remembered at once: past it, the group placed on least recently goes.
pub const MAX_GROUPS: usize = 4096;
/// The most members remembered per group: past it, the one placed first goes.
pub const MAX_PER_GROUP: usize = 256;
/// How long a placement is remembered.
pub const KEEP: Duration = Duration::from_secs(600);

/// Members' nodes by group, with when each was placed.
#[derive(Debug, Default)]
pub(super) struct GroupMemory {
    groups: HashMap<Uuid, Placed>,
}

/// One group's members' nodes and when each was placed, and its latest placement.
#[derive(Debug)]
struct Placed {
    last: Instant,
    members: HashMap<Uuid, (Uuid, Instant)>,
}

impl GroupMemory {
    /// The nodes the scheduler placed those of `members` it remembers on (one entry each).
    pub(super) fn nodes_of(&self, group: Uuid, members: &[Uuid], now: Instant) -> Vec<Uuid> {
        let Some(placed) = self.groups.get(&group) else {
            return Vec::new();
        };
        members
            .iter()
            .filter_map(|m| placed.members.get(m))
            .filter(|(_, at)| now.saturating_duration_since(*at) < KEEP)
            .map(|(node, _)| *node)
            .collect()
    }

    /// Remembers that `instance` of `group` went to `node` at `now`.
    pub(super) fn remember(&mut self, group: Uuid, instance: Uuid, node: Uuid, now: Instant) {
        // Past the bound, the groups placed on too long ago go, then the least recent one: a
        // pass over the groups (not their members) only when the memory is full.
        if !self.groups.contains_key(&group) && self.groups.len() >= MAX_GROUPS {
            self.groups
                .retain(|_, placed| now.saturating_duration_since(placed.last) < KEEP);
            if self.groups.len() >= MAX_GROUPS
                && let Some(stale) = self
                    .groups
                    .iter()
                    .min_by_key(|(_, placed)| placed.last)
                    .map(|(g, _)| *g)
            {
                self.groups.remove(&stale);
            }
        }
        let placed = self.groups.entry(group).or_insert_with(|| Placed {
            last: now,
            members: HashMap::new(),
        });
        placed.last = placed.last.max(now);
        let members = &mut placed.members;
        if !members.contains_key(&instance) && members.len() >= MAX_PER_GROUP {
            members.retain(|_, (_, at)| now.saturating_duration_since(*at) < KEEP);
            if members.len() >= MAX_PER_GROUP
                && let Some(first) = members
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(i, _)| *i)
            {
                members.remove(&first);
            }
        }
        members.insert(instance, (node, now));
    }

    /// A member placed again elsewhere (its first node could not take the START): the same
    /// time, the new node.
    pub(super) fn moved(&mut self, group: Uuid, instance: Uuid, node: Uuid) {
        if let Some(entry) = self
            .groups
            .get_mut(&group)
            .and_then(|placed| placed.members.get_mut(&instance))
        {
            entry.0 = node;
        }
    }

    /// How many groups are remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.groups.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn members_are_remembered_for_a_while_and_only_those_asked_for() {
        let mut memory = GroupMemory::default();
        let t0 = Instant::now();
        memory.remember(u(1), u(10), u(100), t0);
        memory.remember(u(1), u(11), u(101), t0);
        assert_eq!(
            memory.nodes_of(u(1), &[u(10), u(11), u(12)], t0),
            [u(100), u(101)]
        );
        // A member the controller no longer names (deleted) is not counted.
        assert_eq!(memory.nodes_of(u(1), &[u(11)], t0), [u(101)]);
        assert!(memory.nodes_of(u(2), &[u(10)], t0).is_empty());
        memory.moved(u(1), u(10), u(102));
        assert_eq!(memory.nodes_of(u(1), &[u(10)], t0), [u(102)]);
        assert!(memory.nodes_of(u(1), &[u(10)], t0 + KEEP).is_empty());
    }

    #[test]
    fn memory_is_bounded_in_groups_and_members() {
        let mut memory = GroupMemory::default();
        let t0 = Instant::now();
        for g in 0..=MAX_GROUPS as u128 {
            memory.remember(u(g), u(1), u(1), t0 + Duration::from_millis(g as u64));
        }
        assert_eq!(memory.len(), MAX_GROUPS);
        // The group placed on least recently went.
        assert!(memory.nodes_of(u(0), &[u(1)], t0).is_empty());
        let later = t0 + Duration::from_secs(10);
        for i in 0..=MAX_PER_GROUP as u128 {
            memory.remember(
                u(1 << 64),
                u(1000 + i),
                u(5),
                later + Duration::from_millis(i as u64),
            );
        }
        let all: Vec<Uuid> = (0..=MAX_PER_GROUP as u128).map(|i| u(1000 + i)).collect();
        assert_eq!(
            memory.nodes_of(u(1 << 64), &all, later).len(),
            MAX_PER_GROUP
        );
        assert!(memory.nodes_of(u(1 << 64), &[u(1000)], later).is_empty());
    }
}
