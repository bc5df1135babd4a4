//! The registry of live sessions: one [`Entry`] per UUID, indexed by claimed role too
//! ([`Sessions`]), and its view as a forwarding [`Directory`] ([`Registry`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use uuid::Uuid;

use crate::conn::{self, Outbox};
use crate::forward::Directory;
use ssntp::Role;

/// A live session, as the registry keeps it.
pub(super) struct Entry {
    pub(super) role: Role,
    pub(super) outbox: Outbox,
    pub(super) generation: u64,
    /// When the session last received a frame (its reader records it).
    pub(super) received: Arc<conn::Stamp>,
    /// Its certificate's serial number (empty if unreadable).
    pub(super) serial: Box<[u8]>,
}

/// The live sessions by UUID, and their UUIDs by claimed role: a frame for a role (STATS to the
/// controllers, say) finds its few targets without walking every agent's session.
#[derive(Default)]
pub(super) struct Sessions {
    by_uuid: HashMap<Uuid, Entry>,
    by_role: HashMap<Role, HashSet<Uuid>>,
}

impl Sessions {
    pub(super) fn get(&self, uuid: &Uuid) -> Option<&Entry> {
        self.by_uuid.get(uuid)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Entry> {
        self.by_uuid.values()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Uuid, &Entry)> {
        self.by_uuid.iter()
    }

    pub(super) fn insert(&mut self, uuid: Uuid, entry: Entry) -> Option<Entry> {
        let role = entry.role;
        let old = self.by_uuid.insert(uuid, entry);
        if let Some(old) = &old {
            self.unindex(uuid, old.role);
        }
        self.by_role.entry(role).or_default().insert(uuid);
        old
    }

    pub(super) fn remove(&mut self, uuid: &Uuid) -> Option<Entry> {
        let old = self.by_uuid.remove(uuid)?;
        self.unindex(*uuid, old.role);
        Some(old)
    }

    fn unindex(&mut self, uuid: Uuid, role: Role) {
        if let Some(set) = self.by_role.get_mut(&role) {
            set.remove(&uuid);
            if set.is_empty() {
                self.by_role.remove(&role);
            }
        }
    }

    /// The sessions whose role intersects `role`: one lookup per distinct role claimed.
    pub(super) fn with_role(&self, role: Role) -> impl Iterator<Item = (&Uuid, &Entry)> {
        self.by_role
            .iter()
            .filter(move |(r, _)| r.intersects(role))
            .flat_map(|(_, uuids)| uuids.iter())
            .filter_map(|u| self.by_uuid.get_key_value(u))
    }
}

/// The registry as the routing rules see it: who is connected, under which role.
pub(super) struct Registry<'a>(pub(super) &'a Sessions);

impl Directory for Registry<'_> {
    fn role_of(&self, uuid: Uuid) -> Option<Role> {
        self.0.get(&uuid).map(|e| e.role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn entry(role: Role, generation: u64) -> Entry {
        Entry {
            role,
            outbox: Outbox::detached(),
            generation,
            received: Arc::new(conn::Stamp::new(Instant::now())),
            serial: Box::default(),
        }
    }

    pub(super) fn with_role(s: &Sessions, role: Role) -> Vec<Uuid> {
        let mut v: Vec<Uuid> = s.with_role(role).map(|(u, _)| *u).collect();
        v.sort();
        v
    }

    #[test]
    fn the_role_index_follows_inserts_replacements_and_removals() {
        let mut s = Sessions::default();
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        assert!(s.insert(a, entry(Role::AGENT, 0)).is_none());
        assert!(
            s.insert(b, entry(Role::AGENT | Role::NETAGENT, 1))
                .is_none()
        );
        assert!(s.insert(c, entry(Role::CONTROLLER, 2)).is_none());
        assert_eq!(with_role(&s, Role::CONTROLLER), vec![c]);
        assert_eq!(with_role(&s, Role::AGENT), vec![a, b]);
        assert_eq!(with_role(&s, Role::NETAGENT | Role::CONTROLLER), vec![b, c]);
        // The same UUID back under another role: indexed under the new role only.
        let old = s.insert(a, entry(Role::CONTROLLER, 3)).unwrap();
        assert_eq!(old.generation, 0);
        assert_eq!(with_role(&s, Role::AGENT), vec![b]);
        assert_eq!(with_role(&s, Role::CONTROLLER), vec![a, c]);
        assert_eq!(s.remove(&c).map(|e| e.generation), Some(2));
        assert!(s.remove(&c).is_none());
        assert_eq!(with_role(&s, Role::CONTROLLER), vec![a]);
        s.remove(&a);
        s.remove(&b);
        assert!(s.by_role.is_empty() && s.by_uuid.is_empty());
    }
}
