//! The instance listings over etcd (a node's, a tenant's, every tenant's), a node's instances in
//! brief, and the counts by state: the reads of [`InstanceStore`] for [`EtcdStore`] that read
//! many records, apart from the records' changes in `instances.rs`.

use etcd_client::{GetOptions, TxnOp};
use uuid::Uuid;

use super::instances::instance_in;
use super::keys::prefix_end;
use super::records::*;
use super::{EtcdStore, Kv};
use crate::*;

/// How long a count waits for the watch on the state index to deliver this store's own writes
/// before it reads the counts from etcd instead (the watch is milliseconds behind; a write
/// that made no event under the index, such as a deletion of a key that was not there, is
/// never delivered, and is not waited for again).
const TALLY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl EtcdStore {
    /// [`InstanceStore::instances`]: a node's listing from its index; a tenant's from its order
    /// keys; every tenant's from the creation index (or, in a prefix raised from schema 3, every
    /// record in creation order).
    pub(super) fn listed(
        &self,
        scope: Scope,
        filter: InstanceFilter,
        page: Page,
    ) -> Result<Paged<Instance>> {
        page.check()?;
        let want = page.limit as usize + 1;
        let marker = match page.marker {
            None => None,
            Some(m) => Some(
                self.read(|tx| instance_in(tx, scope, m))
                    .map_err(|e| match e {
                        StoreError::NotFound { .. } => {
                            StoreError::Invalid(format!("unknown marker {m}"))
                        }
                        other => other,
                    })?,
            ),
        };
        let mut items: Vec<InstanceRec> = Vec::new();
        if let Some(node) = filter.node {
            // The node's index, in creation (revision) order: as many keys as instances on the node.
            let prefix = self.keys.on_nodes(node);
            let (_, on_node) =
                self.range(&prefix, &prefix_end(&prefix), 0, |o| o.with_keys_only())?;
            let ids = on_node
                .iter()
                .map(|kv| Ok(self.keys.instance(indexed_id(kv, &prefix)?)))
                .collect::<Result<Vec<_>>>()?;
            // Creation order: the revision, then the key (instances made together share one).
            let after = marker
                .as_ref()
                .map_or((0, ""), |(_, kv)| (kv.create_rev, kv.key.as_str()));
            let mut found: Vec<((i64, String), InstanceRec)> = Vec::new();
            for kv in self.get_many(&ids)?.into_iter().flatten() {
                let rec: InstanceRec = kv.decode()?;
                if (kv.create_rev, kv.key.as_str()) > after
                    && rec.node == Some(node)
                    && scope.sees(Some(rec.tenant))
                {
                    found.push(((kv.create_rev, kv.key), rec));
                }
            }
            found.sort_by(|(a, _), (b, _)| a.cmp(b));
            items.extend(found.into_iter().take(want).map(|(_, rec)| rec));
            return paged(items, page.limit);
        }
        match scope {
            Scope::Tenant(t) => {
                // The tenant's order keys from after the marker, then their instances. etcd
                // 3.4 walks a range to its end whatever its limit (every later instance of the
                // tenant, for each page), so the keys are read first from a window of sequence
                // numbers twice the page (numbers are dense but for deleted instances), and
                // from the rest only when the window held too few.
                let prefix = self.keys.orders(t);
                let end = prefix_end(&prefix);
                let first = marker.as_ref().map_or(0, |(m, _)| m.seq + 1);
                let mut from = self.keys.order(t, first);
                let mut bound = u64::try_from(2 * want)
                    .ok()
                    .and_then(|w| first.checked_add(w));
                loop {
                    let room = want - items.len();
                    let stop = bound.map_or_else(|| end.clone(), |b| self.keys.order(t, b).into());
                    let (_, order) = self.range(&from, &stop, room, |o| o)?;
                    let ids = order
                        .iter()
                        .map(|kv| Ok(self.keys.instance(parse_id(kv)?)))
                        .collect::<Result<Vec<_>>>()?;
                    for kv in self.get_many(&ids)?.into_iter().flatten() {
                        items.push(kv.decode()?);
                    }
                    if items.len() >= want {
                        break;
                    }
                    match (order.last(), bound) {
                        // A full batch, yet the page is short: an instance was deleted between the
                        // two reads. Read on.
                        (Some(last), _) if order.len() == room => {
                            from = format!("{}\0", last.key);
                        }
                        // The window held too few: the rest.
                        (_, Some(b)) => {
                            from = self.keys.order(t, b);
                            bound = None;
                        }
                        _ => break,
                    }
                }
            }
            Scope::All => {
                // The creation index from after the marker, then its instances.
                if let Some(found) = self.by_creation(marker.as_ref().map(|(m, _)| m), want)? {
                    return paged(found, page.limit);
                }
                // A prefix raised from schema 3, or a marker made before: every instance key in
                // creation (revision) order from after the marker (etcd sorts them all).
                let prefix = self.keys.instances();
                let after = marker
                    .as_ref()
                    .map_or((0, ""), |(_, kv)| (kv.create_rev, kv.key.as_str()));
                for kv in self.range_by_creation(&prefix, &prefix_end(&prefix), after, want)? {
                    items.push(kv.decode()?);
                }
            }
        }
        paged(items, page.limit)
    }

    /// One range: the node's index keys hold the briefs (schema 3). Keys written by code of
    /// schema 2 hold none: their records are read (one more round trip). None while this store
    /// has written nothing under the node's index since its last read, for at most
    /// [`EtcdOptions::briefs_kept`](super::EtcdOptions::briefs_kept): that read is answered
    /// again (`briefs.rs`).
    pub(super) fn briefs_on(&self, node: Uuid) -> Result<Vec<InstanceBrief>> {
        if self.briefs.keeps() {
            self.follow(&self.briefs, &self.briefs_followed);
        }
        let mark = match self.briefs.kept(node) {
            Ok(briefs) => return Ok(briefs),
            Err(mark) => mark,
        };
        let prefix = self.keys.on_nodes(node);
        let (revision, index) = self.range(&prefix, &prefix_end(&prefix), 0, |o| o)?;
        let mut briefs: Vec<((i64, Uuid), InstanceBrief)> = Vec::with_capacity(index.len());
        let mut unbriefed = Vec::new();
        for kv in index {
            let id = indexed_id(&kv, &prefix)?;
            if kv.value.is_empty() {
                unbriefed.push(self.keys.instance(id));
            } else {
                let brief: BriefRec = kv.decode()?;
                briefs.push(((brief.c, id), brief.model(id, node)?));
            }
        }
        let records = if unbriefed.is_empty() {
            Vec::new()
        } else {
            self.get_many(&unbriefed)?
        };
        for kv in records.into_iter().flatten() {
            let rec: InstanceRec = kv.decode()?;
            if rec.node == Some(node) {
                let brief = InstanceBrief::from(&rec.model()?);
                briefs.push(((kv.create_rev, rec.id), brief));
            }
        }
        // Creation order: the record's revision, then its id (instances made together share one).
        briefs.sort_unstable_by_key(|(order, _)| *order);
        // Kept only when the index held them all: a record's write need not touch the index.
        if unbriefed.is_empty() {
            let ordered: Vec<(i64, InstanceBrief)> =
                briefs.iter().map(|((c, _), b)| (*c, b.clone())).collect();
            self.briefs.keep(mark, &ordered, revision);
        }
        Ok(briefs.into_iter().map(|(_, brief)| brief).collect())
    }

    /// No round trip once the watch on the state index is up and has counted the states at
    /// its first revision (`tally.rs`): the tally, when the watch has delivered this store's
    /// own writes (waited for at most [`TALLY_WAIT`]). Else one round trip: a count of each
    /// state's keys in the state index, when every instance has its key there; in a prefix
    /// raised from schema 2, every record read.
    pub(super) fn counted(&self) -> Result<std::collections::BTreeMap<&'static str, u64>> {
        use super::tally::{Counted, Tallied};
        self.follow(&self.tally, &self.tally_followed);
        let wait = TALLY_WAIT.min(self.options.call_timeout);
        match self.tally.counts(wait) {
            Tallied::Counts(counts) => return Ok(counts),
            Tallied::CountAt(revision) => {
                // A count that fails (etcd compacted past the revision, say) has the watch made
                // again: the counts are read below meanwhile.
                let counted = match self.counted_at(revision) {
                    Ok(Some(counts)) => Counted::At(counts),
                    Ok(None) => Counted::NotIndexed,
                    Err(_) => Counted::Failed,
                };
                self.tally.based(revision, counted);
                if let Tallied::Counts(counts) = self.tally.counts(wait) {
                    return Ok(counts);
                }
            }
            Tallied::Read => {}
        }
        match self.counted_at(0)? {
            Some(counts) => Ok(counts),
            None => self.counts_read_whole(),
        }
    }

    /// One round trip: a count of each state's keys in the state index at `revision` (0: now),
    /// `None` when not every instance has its key there (a prefix raised from schema 2).
    pub(super) fn counted_at(
        &self,
        revision: i64,
    ) -> Result<Option<std::collections::BTreeMap<&'static str, u64>>> {
        let marker = self.keys.state_index();
        let states = InstanceState::NAMES;
        let mut prefixes = vec![marker];
        prefixes.extend(states.iter().map(|s| self.keys.in_states(s)));
        let counted = self.counts(&prefixes, revision)?;
        let (indexed, counts) = counted.split_at(1);
        if indexed[0] == 0 {
            return Ok(None);
        }
        Ok(Some(
            states
                .iter()
                .zip(counts)
                .filter(|&(_, &n)| n > 0)
                .map(|(&state, &n)| (state, n))
                .collect(),
        ))
    }

    /// Counts the keys under each of `prefixes` in one round trip, at one revision (`revision`;
    /// 0: the current one) (etcd answers the counts, not the keys).
    fn counts(&self, prefixes: &[String], revision: i64) -> Result<Vec<u64>> {
        let reads = prefixes
            .iter()
            .map(|p| {
                let only = GetOptions::new()
                    .with_prefix()
                    .with_count_only()
                    .with_revision(revision);
                TxnOp::get(p.as_str(), Some(only))
            })
            .collect();
        let (_, found) = self.read_answers(reads)?;
        Ok(found
            .iter()
            .map(|get| u64::try_from(get.count()).unwrap_or(0))
            .collect())
    }

    /// [`InstanceStore::instance_counts`] from every instance's record.
    fn counts_read_whole(&self) -> Result<std::collections::BTreeMap<&'static str, u64>> {
        /// What a count needs of an instance's record.
        #[derive(serde::Deserialize)]
        struct StateOf {
            id: Uuid,
            state: String,
        }
        let prefix = self.keys.instances();
        let (_, kvs) = self.range(&prefix, &prefix_end(&prefix), 0, |o| o)?;
        let mut counts = std::collections::BTreeMap::new();
        for kv in &kvs {
            let rec: StateOf = kv.decode()?;
            let state = InstanceState::from_name(&rec.state, None).ok_or_else(|| {
                StoreError::Backend(format!(
                    "instance {}: unknown state {:?}",
                    rec.id, rec.state
                ))
            })?;
            *counts.entry(state.name()).or_insert(0) += 1;
        }
        Ok(counts)
    }

    /// Up to `want` instances of every tenant after `marker` in creation order, from the
    /// creation index: a round trip for its keys (with its marker key), one for their records.
    /// `None` where the index is not whole (a prefix raised from schema 3, with no
    /// `createdindex`) or the marker is not in it (made before).
    fn by_creation(
        &self,
        marker: Option<&InstanceRec>,
        want: usize,
    ) -> Result<Option<Vec<InstanceRec>>> {
        let prefix = self.keys.creations();
        let mut from = match marker {
            None => prefix.clone(),
            Some(m) => match m.stamp {
                Some(stamp) => format!("{}\0", self.keys.created(stamp, m.id)),
                None => return Ok(None),
            },
        };
        let end = prefix_end(&prefix);
        let mut items: Vec<InstanceRec> = Vec::new();
        loop {
            let room = want - items.len();
            let page = GetOptions::new()
                .with_range(end.clone())
                .with_limit(i64::try_from(room).unwrap_or(i64::MAX))
                .with_keys_only();
            let reads = vec![
                TxnOp::get(self.keys.created_index(), None),
                TxnOp::get(from.as_str(), Some(page)),
            ];
            let (_, found) = self.read_answers(reads)?;
            let [whole, index] = found.as_slice() else {
                return Err(StoreError::Backend(
                    "etcd answered reads with another number of answers".into(),
                ));
            };
            if whole.kvs().is_empty() {
                return Ok(None);
            }
            let index = index
                .kvs()
                .iter()
                .map(Kv::from_etcd)
                .collect::<Result<Vec<_>>>()?;
            let ids = index
                .iter()
                .map(|kv| {
                    let id = kv.key.rsplit('/').next().unwrap_or_default();
                    Uuid::parse_str(id)
                        .map(|id| self.keys.instance(id))
                        .map_err(|e| StoreError::Backend(format!("bad key {}: {e}", kv.key)))
                })
                .collect::<Result<Vec<_>>>()?;
            for kv in self.get_many(&ids)?.into_iter().flatten() {
                items.push(kv.decode()?);
            }
            match index.last() {
                // A full batch, yet the page is short: an instance was deleted between the two
                // reads. Read on.
                Some(last) if index.len() == room && items.len() < want => {
                    from = format!("{}\0", last.key);
                }
                _ => return Ok(Some(items)),
            }
        }
    }
}

/// The page of at most `limit` of `items` (which hold one more when there is a next page).
fn paged(mut items: Vec<InstanceRec>, limit: u32) -> Result<Paged<Instance>> {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next = if more {
        items.last().map(|i| i.id)
    } else {
        None
    };
    Ok(Paged {
        items: items
            .iter()
            .map(InstanceRec::model)
            .collect::<Result<_>>()?,
        next,
    })
}

/// The instance of an index key under `prefix` (`node/<node>/<instance>`).
fn indexed_id(kv: &Kv, prefix: &str) -> Result<Uuid> {
    let id = kv.key.strip_prefix(prefix).unwrap_or_default();
    Uuid::parse_str(id).map_err(|e| StoreError::Backend(format!("bad key {}: {e}", kv.key)))
}

fn parse_id(kv: &Kv) -> Result<Uuid> {
    Uuid::parse_str(kv.text()?)
        .map_err(|e| StoreError::Backend(format!("bad id at {}: {e}", kv.key)))
}
