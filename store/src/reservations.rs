//! The [`ReservationStore`]: one place where subnets, addresses and tunnel keys are reserved
//! (issue 11), in memory on a host ([`MemoryReservations`]) and in etcd off it
//! ([`EtcdStore`](super::EtcdStore), one transaction per change), so that several off-host
//! launchers never hand out one value twice.
//!
//! A reservation is a `key` (an address, a CIDR, a tunnel key as text) in a `pool` (such as
//! `subnet`, `ip/<subnet>`, `vni`), tagged with its `owner` (a replica or an instance): what a
//! crashed owner left behind is released at once with [`ReservationStore::release_owner`].

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use super::{Result, StoreError};

/// One reserved value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reservation {
    /// The pool it is in.
    pub pool: String,
    /// The value.
    pub key: String,
    /// Who holds it.
    pub owner: String,
}

/// Reservations of unique values, each tagged with its owner. Every call is atomic.
pub trait ReservationStore: Send + Sync {
    /// Reserves `key` in `pool` for `owner`: `Ok` if it was free or already `owner`'s,
    /// `Conflict` if another owner holds it.
    fn reserve(&self, pool: &str, key: &str, owner: &str) -> Result<()>;
    /// Frees `owner`'s reservation (`NotFound` if none, `Conflict` if another owner holds it).
    fn release(&self, pool: &str, key: &str, owner: &str) -> Result<()>;
    /// The reservations in `pool`, by key.
    fn reservations(&self, pool: &str) -> Result<Vec<Reservation>>;
    /// Frees everything `owner` holds (after its crash); returns how many.
    fn release_owner(&self, owner: &str) -> Result<u64>;
}

/// Checks a pool, key and owner: not blank, at most 255 bytes; pool and owner without `/`.
pub(crate) fn check_reservation(pool: &str, key: &str, owner: &str) -> Result<()> {
    check_part("pool", pool, false)?;
    check_part("key", key, true)?;
    check_part("owner", owner, false)
}

fn check_part(what: &str, text: &str, slash_ok: bool) -> Result<()> {
    if text.trim().is_empty() || text.len() > 255 || (!slash_ok && text.contains('/')) {
        return Err(StoreError::Invalid(format!(
            "a reservation's {what} must be 1 to 255 bytes, not blank{}",
            if slash_ok { "" } else { ", without '/'" }
        )));
    }
    Ok(())
}

/// Reservations in this process only (a launcher on its own host).
#[derive(Debug, Default)]
pub struct MemoryReservations {
    held: Mutex<BTreeMap<(String, String), String>>,
}

impl MemoryReservations {
    /// No reservations.
    pub fn new() -> MemoryReservations {
        MemoryReservations::default()
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), String>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ReservationStore for MemoryReservations {
    fn reserve(&self, pool: &str, key: &str, owner: &str) -> Result<()> {
        check_reservation(pool, key, owner)?;
        let mut held = self.held();
        match held.get(&(pool.to_string(), key.to_string())) {
            Some(holder) if holder == owner => Ok(()),
            Some(holder) => Err(taken(pool, key, holder)),
            None => {
                held.insert((pool.to_string(), key.to_string()), owner.to_string());
                Ok(())
            }
        }
    }

    fn release(&self, pool: &str, key: &str, owner: &str) -> Result<()> {
        check_reservation(pool, key, owner)?;
        let mut held = self.held();
        let slot = (pool.to_string(), key.to_string());
        match held.get(&slot) {
            None => Err(not_reserved(pool, key)),
            Some(holder) if holder != owner => Err(taken(pool, key, holder)),
            Some(_) => {
                held.remove(&slot);
                Ok(())
            }
        }
    }

    fn reservations(&self, pool: &str) -> Result<Vec<Reservation>> {
        Ok(self
            .held()
            .iter()
            .filter(|((p, _), _)| p == pool)
            .map(|((p, k), o)| Reservation {
                pool: p.clone(),
                key: k.clone(),
                owner: o.clone(),
            })
            .collect())
    }

    fn release_owner(&self, owner: &str) -> Result<u64> {
        let mut held = self.held();
        let before = held.len();
        held.retain(|_, o| o != owner);
        Ok(u64::try_from(before - held.len()).unwrap_or(u64::MAX))
    }
}

/// The `Conflict` of a key held by `holder`.
pub(crate) fn taken(pool: &str, key: &str, holder: &str) -> StoreError {
    StoreError::Conflict(format!("{pool} {key} is reserved by {holder}"))
}

/// The `NotFound` of a key nobody holds.
pub(crate) fn not_reserved(pool: &str, key: &str) -> StoreError {
    StoreError::not_found("reservation", format!("{pool}/{key}"))
}

/// The behaviour every [`ReservationStore`] must have (run by each implementation's tests).
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod suite {
    use super::*;

    /// Exactly one of many parallel reservers of one key wins; owners, listing, release, crash
    /// cleanup.
    pub(crate) fn reservations_behave(store: &dyn ReservationStore) {
        let winners: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|n| {
                    s.spawn(move || {
                        store
                            .reserve("subnet", "172.16.0.0/24", &format!("replica-{n}"))
                            .is_ok()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| usize::from(h.join().unwrap()))
                .sum()
        });
        assert_eq!(winners, 1, "one reserver wins");
        let held = store.reservations("subnet").unwrap();
        assert_eq!(held.len(), 1);
        let owner = held[0].owner.clone();
        assert_eq!(held[0].key, "172.16.0.0/24");
        // Idempotent for its owner; refused to others.
        store.reserve("subnet", "172.16.0.0/24", &owner).unwrap();
        assert!(matches!(
            store.reserve("subnet", "172.16.0.0/24", "other"),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.release("subnet", "172.16.0.0/24", "other"),
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.reserve("sub/net", "k", "o"),
            Err(StoreError::Invalid(_))
        ));
        // The same key in another pool is another reservation.
        store.reserve("ip", "172.16.0.0/24", "other").unwrap();
        for n in 2..6 {
            store
                .reserve("ip", &format!("172.16.0.{n}"), "crashed")
                .unwrap();
        }
        store.reserve("vni", "4097", "crashed").unwrap();
        assert_eq!(store.reservations("ip").unwrap().len(), 5);
        assert_eq!(store.release_owner("crashed").unwrap(), 5);
        assert_eq!(
            store.reservations("ip").unwrap(),
            vec![Reservation {
                pool: "ip".into(),
                key: "172.16.0.0/24".into(),
                owner: "other".into(),
            }]
        );
        assert!(store.reservations("vni").unwrap().is_empty());
        assert_eq!(store.release_owner("crashed").unwrap(), 0);
        store.release("subnet", "172.16.0.0/24", &owner).unwrap();
        assert!(matches!(
            store.release("subnet", "172.16.0.0/24", &owner),
            Err(StoreError::NotFound { .. })
        ));
        store.reserve("subnet", "172.16.0.0/24", "other").unwrap();
    }

    #[test]
    fn memory_reservations_behave() {
        reservations_behave(&MemoryReservations::new());
    }
}
