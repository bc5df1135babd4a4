//! The bounded event log over etcd, [`EventStore`] for [`EtcdStore`]: one key per event under a
//! sequence number taken from a counter key in the same transaction; events beyond the capacity
//! are deleted as they are pushed out.

use super::keys::prefix_end;
use super::records::EventRec;
use super::{EtcdStore, Kv};
use crate::common::now;
use crate::*;

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
        // Down from the newest sequence number (the counter), in ascending windows, every read
        // at the counter's revision: etcd applies a range's limit only to ascending key order
        // (a descending read would read the whole log), so each window is read whole.
        let limit = limit.min(Page::MAX_LIMIT) as usize;
        let counter = self.keys.event_counter();
        let (revision, found) =
            self.range(&counter, format!("{counter}\0").as_bytes(), 1, |o| o)?;
        let Some(kv) = found.first() else {
            return Ok(Vec::new());
        };
        let newest: u64 = kv
            .text()?
            .parse()
            .map_err(|e| StoreError::Backend(format!("bad event counter: {e}")))?;
        // Nothing older than the log's capacity is kept.
        let oldest = newest
            .saturating_sub(self.options.event_capacity)
            .saturating_add(1)
            .max(1);
        let mut out = Vec::new();
        let mut top = newest;
        while out.len() < limit && top >= oldest {
            let window = match scope {
                Scope::All => (limit - out.len()) as u64,
                Scope::Tenant(_) => 500,
            };
            let low = top.saturating_sub(window - 1).max(oldest);
            let end = self.keys.event(top + 1);
            let (_, kvs) = self.range(&self.keys.event(low), end.as_bytes(), 0, |o| {
                o.with_revision(revision)
            })?;
            for kv in kvs.iter().rev() {
                let rec: EventRec = kv.decode()?;
                let visible = match scope {
                    Scope::All => true,
                    Scope::Tenant(t) => rec.tenant == Some(t),
                };
                if visible && out.len() < limit {
                    out.push(rec.model());
                }
            }
            top = low - 1;
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
