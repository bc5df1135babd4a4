//! The [`ReservationStore`] over etcd: `resv/<pool>/<key>` holds the owner, and
//! `resvowner/<owner>/<pool>/<key>` indexes it by owner; both are written or deleted in one
//! transaction that compares the reservation key as read, so of parallel reservers exactly one
//! commits.

use super::keys::{prefix_end, suffix};
use super::{EtcdStore, MAX_TXN_OPS};
use crate::reservations::{check_reservation, not_reserved, taken};
use crate::*;

impl ReservationStore for EtcdStore {
    fn reserve(&self, pool: &str, key: &str, owner: &str) -> Result<()> {
        check_reservation(pool, key, owner)?;
        self.atomically("reserving", |tx| {
            let keys = tx.keys();
            let at = keys.reservation(pool, key);
            match tx.get(&at)? {
                Some(kv) if kv.text()? == owner => Ok(()),
                Some(kv) => Err(taken(pool, key, kv.text()?)),
                None => {
                    tx.put_text(&at, owner);
                    tx.put_text(&keys.reserved_by(owner, pool, key), "");
                    Ok(())
                }
            }
        })
    }

    fn release(&self, pool: &str, key: &str, owner: &str) -> Result<()> {
        check_reservation(pool, key, owner)?;
        self.atomically("releasing a reservation", |tx| {
            let keys = tx.keys();
            let at = keys.reservation(pool, key);
            match tx.get(&at)? {
                None => Err(not_reserved(pool, key)),
                Some(kv) if kv.text()? != owner => Err(taken(pool, key, kv.text()?)),
                Some(_) => {
                    tx.delete(&at);
                    tx.delete(&keys.reserved_by(owner, pool, key));
                    Ok(())
                }
            }
        })
    }

    fn reservations(&self, pool: &str) -> Result<Vec<Reservation>> {
        let prefix = self.keys.reservations(pool);
        let (_, kvs) = self.range(&prefix, &prefix_end(&prefix), 0, |o| o)?;
        kvs.iter()
            .map(|kv| {
                Ok(Reservation {
                    pool: pool.to_string(),
                    key: suffix(&kv.key, &prefix).unwrap_or_default().to_string(),
                    owner: kv.text()?.to_string(),
                })
            })
            .collect()
    }

    fn release_owner(&self, owner: &str) -> Result<u64> {
        let prefix = self.keys.all_reserved_by(owner);
        let batch = MAX_TXN_OPS / 2;
        let mut released = 0u64;
        // In batches, each one transaction (two deletions per reservation).
        loop {
            let (_, kvs) =
                self.range(&prefix, &prefix_end(&prefix), batch, |o| o.with_keys_only())?;
            if kvs.is_empty() {
                return Ok(released);
            }
            let count = kvs.len();
            self.atomically("releasing an owner's reservations", |tx| {
                for kv in &kvs {
                    let rest = suffix(&kv.key, &prefix).unwrap_or_default();
                    let Some((pool, key)) = rest.split_once('/') else {
                        return Err(StoreError::Backend(format!("bad key {}", kv.key)));
                    };
                    // Only what this owner still holds is deleted.
                    let at = tx.keys().reservation(pool, key);
                    if let Some(found) = tx.get(&at)?
                        && found.text()? == owner
                    {
                        tx.delete(&at);
                    }
                    tx.delete(&kv.key);
                }
                Ok(())
            })?;
            released += u64::try_from(count).unwrap_or(0);
        }
    }
}
