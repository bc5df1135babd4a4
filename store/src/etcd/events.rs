//! The bounded event log over etcd, [`EventStore`] for [`EtcdStore`]: one key per event under a
//! sequence number taken from a counter key in the same transaction; events beyond the capacity
//! are deleted as they are pushed out.

use super::keys::prefix_end;
use super::records::EventRec;
use super::{EtcdStore, Kv};
use crate::common::now;
use crate::*;
use etcd_client::{GetOptions, SortOrder, SortTarget};

impl EventStore for EtcdStore {
    fn append_event(&self, new: NewEvent) -> Result<Event> {
        let capacity = self.options.event_capacity;
        self.atomically("appending an event", |tx| {
            let keys = tx.keys();
            let counter = keys.event_counter();
            let last: u64 = match tx.get(&counter)? {
                Some(kv) => kv
                    .text()?
                    .parse()
                    .map_err(|e| StoreError::Backend(format!("bad event counter: {e}")))?,
                None => 0,
            };
            let seq = last + 1;
            let rec = EventRec::new(seq, now(), new.clone());
            tx.put_text(&counter, &seq.to_string());
            tx.put(&keys.event(seq), &rec)?;
            if seq > capacity {
                // Every event at or below `seq - capacity` goes.
                tx.delete_range(&keys.events(), keys.event(seq - capacity + 1).into_bytes());
            }
            Ok(rec.model())
        })
    }

    fn events(&self, scope: Scope, after: Option<u64>, limit: u32) -> Result<Vec<Event>> {
        let limit = limit.min(Page::MAX_LIMIT) as usize;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let prefix = self.keys.events();
        let end = prefix_end(&prefix);
        let mut from = self.keys.event(after.unwrap_or(0).saturating_add(1));
        let mut out = Vec::new();
        loop {
            let batch = if matches!(scope, Scope::All) {
                limit
            } else {
                500
            };
            let (_, kvs) = self.range(&from, &end, batch, |o| o)?;
            for kv in &kvs {
                let rec: EventRec = kv.decode()?;
                let visible = match scope {
                    Scope::All => true,
                    Scope::Tenant(t) => rec.tenant == Some(t),
                };
                if visible {
                    out.push(rec.model());
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
            match kvs.last() {
                Some(last) if kvs.len() == batch => from = format!("{}\0", last.key),
                _ => return Ok(out),
            }
        }
    }

    fn recent_events(&self, scope: Scope, limit: u32) -> Result<Vec<Event>> {
        let limit = limit.min(Page::MAX_LIMIT) as usize;
        let prefix = self.keys.events();
        // Newest first, in batches, each ending below the last key the one before read.
        let mut end = prefix_end(&prefix);
        let mut out = Vec::new();
        while out.len() < limit {
            let batch: i64 = if matches!(scope, Scope::All) {
                i64::try_from(limit - out.len()).unwrap_or(500)
            } else {
                500
            };
            let options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(batch)
                .with_sort(SortTarget::Key, SortOrder::Descend);
            let mut kv = self.client.kv_client();
            let key = prefix.clone();
            let resp = self.call(async move { kv.get(key, Some(options)).await })?;
            let kvs = resp.kvs();
            for kv in kvs {
                let rec: EventRec = Kv::from_etcd(kv)?.decode()?;
                let visible = match scope {
                    Scope::All => true,
                    Scope::Tenant(t) => rec.tenant == Some(t),
                };
                if visible && out.len() < limit {
                    out.push(rec.model());
                }
            }
            match kvs.last() {
                Some(last) if resp.more() => end = last.key().to_vec(),
                _ => break,
            }
        }
        out.reverse();
        Ok(out)
    }

    fn clear_events(&self, scope: Scope) -> Result<u64> {
        let prefix = self.keys.events();
        match scope {
            Scope::All => {
                let mut kv = self.client.kv_client();
                let options = etcd_client::DeleteOptions::new().with_prefix();
                let resp = self.call(async move { kv.delete(prefix, Some(options)).await })?;
                Ok(u64::try_from(resp.deleted()).unwrap_or(0))
            }
            Scope::Tenant(t) => {
                // Not one transaction: the tenant's events go in batches (each batch is).
                let (_, kvs) = self.range(&prefix, &prefix_end(&prefix), 0, |o| o)?;
                let mine: Vec<&Kv> = kvs
                    .iter()
                    .filter(|kv| {
                        kv.decode::<EventRec>()
                            .is_ok_and(|rec| rec.tenant == Some(t))
                    })
                    .collect();
                let mut deleted = 0u64;
                for chunk in mine.chunks(100) {
                    self.atomically("clearing events", |tx| {
                        for kv in chunk {
                            tx.delete(&kv.key);
                        }
                        Ok(())
                    })?;
                    deleted += chunk.len() as u64;
                }
                Ok(deleted)
            }
        }
    }
}
