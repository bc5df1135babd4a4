//! [`Tx`]: one optimistic etcd transaction being built, for [`EtcdStore::atomically`] and
//! [`EtcdStore::read`]: its reads become the commit's compares.

use etcd_client::{Compare, CompareOp, TxnOp};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::briefs::IndexWrite;
use super::keys::{Keys, prefix_end};
use super::{EtcdStore, KeyAndRange, Kv};
use crate::{Result, StoreError};

/// One optimistic transaction being built: what was read (as compares) and what to write.
pub(super) struct Tx<'s> {
    pub(super) store: &'s EtcdStore,
    pub(super) compares: Vec<Compare>,
    pub(super) ops: Vec<TxnOp>,
    /// The bytes of the keys and values that `ops` write (etcd refuses a request past its
    /// `--max-request-bytes`, 1.5 MiB by default).
    pub(super) bytes: usize,
    /// Keys read ahead ([`Tx::prefetch`]), as read: a later read of only such keys is answered
    /// from here (their compares are in already). Writes of the transaction do not show here.
    pub(super) prefetched: std::collections::HashMap<String, Option<Kv>>,
    /// What `ops` write under node indexes, in order, and whether a range they delete (or a key
    /// that names no instance) may touch index keys of any node.
    pub(super) nodes: Vec<IndexWrite>,
    pub(super) all_nodes: bool,
    /// Whether `ops` write under the state index (for [`StateTally`](super::tally::StateTally)).
    pub(super) states: bool,
}

/// How far a transaction's writes had gone ([`Tx::savepoint`]), to undo those after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Savepoint {
    ops: usize,
    bytes: usize,
    nodes: usize,
    all_nodes: bool,
    states: bool,
}

impl<'s> Tx<'s> {
    /// Where the writes stand now: [`Tx::rollback`] to it undoes every write after it (and what
    /// was noted of them for the nodes' kept briefs).
    pub(super) fn savepoint(&self) -> Savepoint {
        Savepoint {
            ops: self.ops.len(),
            bytes: self.bytes,
            nodes: self.nodes.len(),
            all_nodes: self.all_nodes,
            states: self.states,
        }
    }

    /// Undoes every write made since `at`.
    pub(super) fn rollback(&mut self, at: Savepoint) {
        self.ops.truncate(at.ops);
        self.bytes = at.bytes;
        self.nodes.truncate(at.nodes);
        self.all_nodes = at.all_nodes;
        self.states = at.states;
    }

    pub(super) fn new(store: &'s EtcdStore) -> Tx<'s> {
        Tx {
            store,
            compares: Vec::new(),
            ops: Vec::new(),
            bytes: 0,
            prefetched: std::collections::HashMap::new(),
            nodes: Vec::new(),
            all_nodes: false,
            states: false,
        }
    }

    /// Reads `keys` in one round trip (the commit requires each unchanged), so that the reads of
    /// them that follow cost none. Only for keys that the transaction does not write before it
    /// reads them again: a read from here returns the value before the transaction.
    pub(super) fn prefetch(&mut self, keys: &[String]) -> Result<()> {
        let found = self.get_many(keys)?;
        self.prefetched.extend(keys.iter().cloned().zip(found));
        Ok(())
    }

    /// Reads `watched` and `seen` in one round trip (one per [`MAX_TXN_OPS`](super::MAX_TXN_OPS)
    /// keys): `watched` as [`Tx::prefetch`] does (the commit requires each unchanged, and reads
    /// of them that follow cost none), `seen` only for the caller to look at, with no compare, so
    /// that a read of many keys for display does not fill the commit with compares (etcd takes
    /// 128 at most). Returns `seen`'s values.
    pub(super) fn prefetch_and_see(
        &mut self,
        watched: &[String],
        seen: &[String],
    ) -> Result<Vec<Option<Kv>>> {
        let all: Vec<String> = watched.iter().chain(seen).cloned().collect();
        let mut found = self.store.get_many(&all)?;
        let seen = found.split_off(watched.len());
        for (key, kv) in watched.iter().zip(found) {
            self.watch(key, kv.as_ref());
            self.prefetched.insert(key.clone(), kv);
        }
        Ok(seen)
    }

    pub(super) fn keys(&self) -> &'s Keys {
        &self.store.keys
    }

    pub(super) fn watch(&mut self, key: &str, kv: Option<&Kv>) {
        self.compares.push(match kv {
            Some(kv) => Compare::mod_revision(key, CompareOp::Equal, kv.mod_rev),
            None => Compare::create_revision(key, CompareOp::Equal, 0),
        });
    }

    /// Reads one key; the commit requires it unchanged (or still absent).
    pub(super) fn get(&mut self, key: &str) -> Result<Option<Kv>> {
        let mut found = self.get_many(&[key.to_string()])?;
        Ok(found.pop().flatten())
    }

    /// Reads one key as a JSON record.
    pub(super) fn get_json<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>> {
        self.get(key)?.map(|kv| kv.decode()).transpose()
    }

    /// Reads several keys in one round trip; the commit requires each unchanged.
    pub(super) fn get_many(&mut self, keys: &[String]) -> Result<Vec<Option<Kv>>> {
        if !keys.is_empty() && keys.iter().all(|k| self.prefetched.contains_key(k)) {
            return Ok(keys.iter().map(|k| self.prefetched[k].clone()).collect());
        }
        let found = self.store.get_many(keys)?;
        for (key, kv) in keys.iter().zip(&found) {
            self.watch(key, kv.as_ref());
        }
        Ok(found)
    }

    /// Reads every key under `prefix`; the commit requires that none was created or changed
    /// since (a deletion in the range is not noticed).
    pub(super) fn range(&mut self, prefix: &str) -> Result<Vec<Kv>> {
        let end = prefix_end(prefix);
        let (revision, found) = self.store.range(prefix, &end, 0, |o| o)?;
        self.compares
            .push(Compare::mod_revision(prefix, CompareOp::Less, revision + 1).with_range(end));
        Ok(found)
    }

    /// Reads `key` and every key under `prefix` in one round trip ([`Tx::gets_and_ranges`] of
    /// one pair).
    pub(super) fn get_and_range(
        &mut self,
        key: &str,
        prefix: &str,
    ) -> Result<(Option<Kv>, Vec<Kv>)> {
        let pair = [(key.to_string(), prefix.to_string())];
        self.gets_and_ranges(&pair)?
            .pop()
            .ok_or_else(|| StoreError::Backend("etcd answered a read with none".into()))
    }

    /// Reads each pair's key and every key under its prefix in one round trip
    /// ([`EtcdStore::gets_and_ranges`]: small ranges only); the commit requires each key
    /// unchanged (or still absent) and nothing under each prefix created or changed since.
    pub(super) fn gets_and_ranges(
        &mut self,
        pairs: &[(String, String)],
    ) -> Result<Vec<KeyAndRange>> {
        let (revision, found) = self.store.gets_and_ranges(pairs)?;
        if found.len() != pairs.len() {
            return Err(StoreError::Backend(
                "etcd answered reads with another number of answers".into(),
            ));
        }
        for ((key, prefix), (kv, _)) in pairs.iter().zip(&found) {
            self.watch(key, kv.as_ref());
            self.compares.push(
                Compare::mod_revision(prefix.as_str(), CompareOp::Less, revision + 1)
                    .with_range(prefix_end(prefix)),
            );
        }
        Ok(found)
    }

    /// Reads every key under each of `prefixes` in one round trip ([`EtcdStore::ranges`]: small
    /// ranges only); the commit requires that nothing under any of them was created or changed
    /// since.
    pub(super) fn ranges(&mut self, prefixes: &[String]) -> Result<Vec<Vec<Kv>>> {
        let (revision, found) = self.store.ranges(prefixes)?;
        for prefix in prefixes {
            self.compares.push(
                Compare::mod_revision(prefix.as_str(), CompareOp::Less, revision + 1)
                    .with_range(prefix_end(prefix)),
            );
        }
        Ok(found)
    }

    /// Reads whether any key is under `prefix`; the commit requires that none was created or
    /// changed since.
    pub(super) fn any_under(&mut self, prefix: &str) -> Result<bool> {
        let end = prefix_end(prefix);
        let (revision, found) = self.store.range(prefix, &end, 1, |o| o.with_keys_only())?;
        self.compares
            .push(Compare::mod_revision(prefix, CompareOp::Less, revision + 1).with_range(end));
        Ok(!found.is_empty())
    }

    /// Writes `value` as JSON at `key`.
    pub(super) fn put<T: Serialize>(&mut self, key: &str, value: &T) -> Result<()> {
        let json = serde_json::to_vec(value)
            .map_err(|e| StoreError::Backend(format!("encoding {key}: {e}")))?;
        self.bytes += key.len() + json.len();
        self.note(key, Some(&json));
        self.ops.push(TxnOp::put(key, json, None));
        Ok(())
    }

    /// Writes `text` at `key`.
    pub(super) fn put_text(&mut self, key: &str, text: &str) {
        self.bytes += key.len() + text.len();
        self.note(key, Some(text.as_bytes()));
        self.ops.push(TxnOp::put(key, text, None));
    }

    /// Deletes `key`.
    pub(super) fn delete(&mut self, key: &str) {
        self.note(key, None);
        self.ops.push(TxnOp::delete(key, None));
    }

    /// Deletes every key in `[start, end)`.
    pub(super) fn delete_range(&mut self, start: &str, end: Vec<u8>) {
        self.all_nodes |= self.store.briefs.overlaps(start, &end);
        self.states |= self.store.tally.overlaps(start, &end);
        self.ops.push(TxnOp::delete(
            start,
            Some(etcd_client::DeleteOptions::new().with_range(end)),
        ));
    }

    /// Notes a write of `value` at `key` (a deletion: `None`) if `key` is in a node's index.
    fn note(&mut self, key: &str, value: Option<&[u8]>) {
        self.states |= self.store.tally.covers(key);
        match self.store.briefs.index_key(key) {
            None => {}
            Some((node, Some(instance))) => self.nodes.push(IndexWrite {
                node,
                instance,
                value: value.map(<[u8]>::to_vec),
            }),
            Some((_, None)) => self.all_nodes = true,
        }
    }

    /// Deletes every key under `prefix`.
    pub(super) fn delete_prefix(&mut self, prefix: &str) {
        self.delete_range(prefix, prefix_end(prefix));
    }
}
