//! [`EtcdStore`]: the controller's store over etcd v3, shared by several controllers (and the
//! off-host launchers) so that they serve one cluster state.
//!
//! Every record is a JSON value under one key prefix (`keys.rs` has the layout); the prefix also
//! holds a schema version. Every change is one etcd transaction built optimistically: the
//! operation reads what it needs, recording for each key read a compare (its mod revision as read,
//! or `create_revision == 0` for a key that was absent) and for each range read "nothing in the
//! range changed since", then commits its writes only if every compare still holds. A transaction
//! that lost a race is run again from the reads (at most [`MAX_TRIES`] times, with a short random
//! pause); a persistent loss is a [`StoreError::Conflict`]. No lock in memory is relied on, so any
//! number of processes may share one etcd:
//! - unique names are name-index keys created under a `create_revision == 0` compare;
//! - quota checks and address allocation read and rewrite one per-tenant record (`net/<tenant>`:
//!   usage, and the subnets with a free address with their address bitmaps) in the instance's own
//!   transaction, and carving a subnet compares the whole block index, so two controllers never
//!   exceed a quota nor hand out one address or block twice. A subnet that fills up moves to a key
//!   of its own (`fullnet/<tenant>/<base>`) in the transaction that took its last address, and
//!   back when an address in it is freed, so that the record a creation rewrites stays small
//!   however many instances the tenant has;
//! - compare-and-swap updates check the record's version, then commit against its mod revision;
//! - "still in use" checks read reference keys (`ref/...`) whose range is compared at commit.
//!
//! Limits: one transaction holds at most 128 compares and 128 writes (etcd's `--max-txn-ops`
//! default), so deleting a tenant that still has more than about 40 private workloads, images,
//! role assignments and image memberships fails with `Backend` (delete some first); clearing a
//! tenant's events is done in batches, each atomic, not as one transaction.
//!
//! Instances are listed in creation order: per tenant by a sequence number kept in the tenant's
//! record (`order/<tenant>/<seq>` keys), across tenants by the etcd create revision (which etcd
//! sorts over every instance key, so an admin page costs more as instances grow); a listing by
//! node reads that node's index (`node/<node>/<instance>`, kept in each instance's transaction).
//!
//! The [`Store`] trait is synchronous and etcd-client is async: the store owns a small tokio
//! runtime (one worker thread) and blocks on it. Call it from plain threads or from
//! `tokio::task::spawn_blocking`, never from inside an async task (blocking there panics). Every
//! call has a deadline ([`EtcdOptions::call_timeout`]); an unreachable etcd is a
//! [`StoreError::Backend`] naming the endpoints.
//!
//! This file holds the connection, the reads and the optimistic transactions (`Tx`); each
//! concern's trait is implemented in the file of that concern (`identity.rs`, `catalog.rs` with
//! `image_members.rs`, `instances.rs` with `listings.rs` and `briefs.rs`, `volumes.rs`,
//! `events.rs`, `actions.rs` with `combine.rs` (concurrent starts made together), `queue.rs`;
//! `reservations.rs` for the [`ReservationStore`]).

mod actions;
mod app_creds;
#[cfg(feature = "cli")]
mod args;
pub mod auth;
mod briefs;
#[cfg(test)]
mod call_tests;
mod catalog;
#[cfg(test)]
mod cluster_tests;
mod combine;
mod events;
mod flavor_recs;
mod flavors;
mod group_recs;
mod identity;
mod image_members;
mod instance_recs;
mod instances;
mod keypairs;
mod keys;
#[cfg(test)]
mod layout_tests;
mod listings;
mod networking;
mod nodes;
mod queue;
mod records;
mod reservations;
#[cfg(test)]
mod round_trip_tests;
mod server_groups;
mod tally;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tls_tests;
mod transport;
mod tx;
mod volumes;
mod watch;

use std::future::Future;
use std::time::Duration;

use etcd_client::{Client, Compare, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use serde::de::DeserializeOwned;
use uuid::Uuid;

#[cfg(feature = "cli")]
pub use self::args::EtcdArgs;
use self::keys::Keys;
use self::records::{SCHEMA_VERSION, SchemaRec};
use self::transport::Dialer;
pub use self::transport::EtcdTransport;
use self::tx::Tx;
use super::*;

/// The most calls [`EtcdStore::side_by_side`] keeps in flight.
const IN_FLIGHT: usize = 16;

/// How many times a transaction that lost a race is tried before giving up with `Conflict`.
pub const MAX_TRIES: u32 = 64;
/// Most operations (and most compares) etcd takes in one transaction (its `--max-txn-ops`
/// default).
const MAX_TXN_OPS: usize = 128;
/// Keys fetched per range request (keeps responses well under gRPC's 4 MiB message limit).
const RANGE_BATCH: i64 = 500;

/// Timeouts and limits of an [`EtcdStore`].
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// How long connecting (and the first request) may take.
    pub connect_timeout: Duration,
    /// How long one request to etcd may take.
    pub call_timeout: Duration,
    /// Events kept (at least 1).
    pub event_capacity: u64,
    /// How long a read of a node's instances in brief is used again for the node's next
    /// reports while the store's watch on the node indexes is not up (with it up, every
    /// process's writes are applied to the kept reads and they do not expire; without it,
    /// another process's writes are seen when a read expires); `Duration::ZERO` reads every
    /// time and makes no watch. See [`InstanceStore::instance_briefs_on`] and `briefs.rs`. The
    /// daemons use the default (30 s); a program that opens the store itself may set it.
    pub briefs_kept: Duration,
}

impl Default for EtcdOptions {
    fn default() -> EtcdOptions {
        EtcdOptions {
            connect_timeout: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
            event_capacity: crate::common::DEFAULT_EVENT_CAPACITY,
            briefs_kept: Duration::from_secs(30),
        }
    }
}

/// The etcd store. Cheap to share between threads (`Arc<EtcdStore>`); see the module docs for the
/// threads it may be called from.
pub struct EtcdStore {
    runtime: Option<tokio::runtime::Runtime>,
    client: Client,
    /// The client of the store's watches (`watch.rs`): ended by etcd when its member has no
    /// leader.
    watcher: Client,
    keys: Keys,
    endpoints: String,
    options: EtcdOptions,
    /// Calls made to etcd ([`EtcdStore::call`]), for tests that count a read's round trips.
    calls: std::sync::atomic::AtomicU64,
    /// Each node's instances in brief as last read.
    briefs: std::sync::Arc<briefs::NodeBriefs>,
    /// Whether the watch that keeps `briefs` up to date was made (`watch.rs`).
    briefs_followed: std::sync::atomic::AtomicBool,
    /// How many instances are in each state, from a watch.
    tally: std::sync::Arc<tally::StateTally>,
    /// Whether the watch that keeps `tally` up to date was made.
    tally_followed: std::sync::atomic::AtomicBool,
    /// Starts asked for by concurrent callers, made together.
    starts: combine::Combiner,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.keys.root())
            .finish_non_exhaustive()
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Safe from any context, async or not.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A key as read (or absent), and the keys under a prefix.
type KeyAndRange = (Option<Kv>, Vec<Kv>);

/// One key as read.
#[derive(Debug, Clone)]
struct Kv {
    key: String,
    value: Vec<u8>,
    create_rev: i64,
    mod_rev: i64,
}

impl Kv {
    /// The value as a JSON record.
    fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.value)
            .map_err(|e| StoreError::Backend(format!("bad record at {}: {e}", self.key)))
    }

    /// The value as text.
    fn text(&self) -> Result<&str> {
        std::str::from_utf8(&self.value)
            .map_err(|e| StoreError::Backend(format!("bad value at {}: {e}", self.key)))
    }

    fn from_etcd(kv: &etcd_client::KeyValue) -> Result<Kv> {
        Ok(Kv {
            key: kv
                .key_str()
                .map_err(|e| StoreError::Backend(format!("key is not UTF-8: {e}")))?
                .to_string(),
            value: kv.value().to_vec(),
            create_rev: kv.create_revision(),
            mod_rev: kv.mod_revision(),
        })
    }
}

impl EtcdStore {
    /// Connects to etcd at `endpoints` (`host:port`, or with the transport's scheme:
    /// `https://host:port` for TLS, `http://host:port` in plain text) over `transport` and keeps
    /// every key under `prefix` (such as `/cumulo/`), writing the schema version there if the
    /// prefix is new. A prefix written by a newer controller is refused with
    /// [`StoreError::SchemaTooNew`]; an etcd that cannot be reached, or refuses the transport (a
    /// certificate refused either way, TLS against plain text), is a [`StoreError::Backend`]
    /// saying why, within [`EtcdOptions::connect_timeout`].
    pub fn connect(
        endpoints: &[String],
        prefix: &str,
        transport: &EtcdTransport,
    ) -> Result<EtcdStore> {
        EtcdStore::connect_with(endpoints, prefix, transport, EtcdOptions::default())
    }

    /// As [`EtcdStore::connect`], with explicit timeouts and event capacity.
    pub fn connect_with(
        endpoints: &[String],
        prefix: &str,
        transport: &EtcdTransport,
        options: EtcdOptions,
    ) -> Result<EtcdStore> {
        if prefix.is_empty() {
            return Err(StoreError::Invalid("empty etcd key prefix".into()));
        }
        let (runtime, client, watcher) = connect_clients(endpoints, transport, &options)?;
        let joined = endpoints.join(",");
        let store = EtcdStore {
            runtime: Some(runtime),
            client,
            watcher,
            keys: Keys::new(prefix),
            briefs: std::sync::Arc::new(briefs::NodeBriefs::new(
                Keys::new(prefix).root(),
                options.briefs_kept,
            )),
            briefs_followed: std::sync::atomic::AtomicBool::new(false),
            tally: std::sync::Arc::new(tally::StateTally::new(Keys::new(prefix).root())),
            tally_followed: std::sync::atomic::AtomicBool::new(false),
            starts: combine::Combiner::default(),
            endpoints: joined,
            options: EtcdOptions {
                event_capacity: options.event_capacity.max(1),
                ..options
            },
            calls: std::sync::atomic::AtomicU64::new(0),
        };
        store.init_schema()?;
        Ok(store)
    }

    /// The key prefix of this store.
    pub fn prefix(&self) -> &str {
        self.keys.root()
    }

    /// The schema version recorded under the prefix.
    pub fn schema_version(&self) -> Result<u32> {
        let key = self.keys.schema();
        let found = self.get_many(std::slice::from_ref(&key))?;
        match found.into_iter().next().flatten() {
            Some(kv) => Ok(kv.decode::<SchemaRec>()?.version),
            None => Ok(0),
        }
    }

    /// The newest schema version this code knows.
    pub fn known_schema_version() -> u32 {
        SCHEMA_VERSION
    }

    fn init_schema(&self) -> Result<()> {
        let key = self.keys.schema();
        // The first request is the one that connects: an etcd that does not answer within the
        // connect timeout is reported as unreachable.
        let limit = self.options.connect_timeout;
        let read = self.get_many_async(&[key]);
        let found = self
            .runtime()?
            .block_on(async { tokio::time::timeout(limit, read).await })
            .map_err(|_| unreachable_err(&self.endpoints, limit))?
            .map_err(|e| call_err(&self.endpoints, &e))?;
        let known = SCHEMA_VERSION;
        match found.into_iter().next().flatten() {
            Some(kv) => {
                let found = kv.decode::<SchemaRec>()?.version;
                if found > known {
                    return Err(StoreError::SchemaTooNew { found, known });
                }
                if found < known {
                    // Raised, so that older code refuses it from now on (every version so far
                    // reads what the one before wrote). A client that may not write the key (a
                    // launcher) reads it as it is.
                    let _ = self.atomically("raising the schema version", |tx| {
                        let key = tx.keys().schema();
                        if let Some(kv) = tx.get(&key)?
                            && kv.decode::<SchemaRec>()?.version < known
                        {
                            tx.put(&key, &SchemaRec { version: known })?;
                        }
                        Ok(())
                    });
                }
                Ok(())
            }
            None => self.atomically("writing the schema version", |tx| {
                let key = tx.keys().schema();
                match tx.get(&key)? {
                    Some(kv) => {
                        let found = kv.decode::<SchemaRec>()?.version;
                        if found > known {
                            return Err(StoreError::SchemaTooNew { found, known });
                        }
                    }
                    None => {
                        tx.put(&key, &SchemaRec { version: known })?;
                        // A new prefix: each instance will have its key in the state index
                        // and in the creation index.
                        if !tx.any_under(&tx.keys().instances())? {
                            tx.put_text(&tx.keys().state_index(), "");
                            tx.put_text(&tx.keys().created_index(), "");
                        }
                    }
                }
                Ok(())
            }),
        }
    }

    fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        self.runtime
            .as_ref()
            .ok_or_else(|| StoreError::Backend("the etcd store is closed".into()))
    }

    /// Runs `fut` on the store's runtime within the call timeout.
    ///
    /// Where a caller is in another runtime, blocking on ours goes through that runtime's
    /// `block_in_place`: in a `spawn_blocking` thread (where the controller calls the store) it
    /// simply runs; in a multi-threaded runtime's task it first hands the worker's other tasks to
    /// another thread. Only a single-threaded runtime's task (tests), which must not block, gets a
    /// scoped thread of its own per call, as every caller in a runtime did until 2026-12-05 (a
    /// thread spawned and joined per round trip, some 20 of them per instance launched).
    fn call<T: Send>(
        &self,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>> + Send,
    ) -> Result<T> {
        let limit = self.options.call_timeout;
        let runtime = self.runtime()?;
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let run = move || runtime.block_on(async { tokio::time::timeout(limit, fut).await });
        let out = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Err(_) => run(),
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
            Ok(_) => std::thread::scope(|scope| scope.spawn(run).join()).map_err(|_| {
                StoreError::Backend(format!("etcd at {}: the call panicked", self.endpoints))
            })?,
        };
        match out {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(call_err(&self.endpoints, &e)),
            Err(_) => Err(StoreError::Backend(format!(
                "etcd at {} did not answer within {limit:?}",
                self.endpoints
            ))),
        }
    }

    /// How many calls this store has made to etcd: each is one round trip, but for a read of
    /// more than [`MAX_TXN_OPS`] keys, which is one call of a round trip per [`MAX_TXN_OPS`].
    #[cfg(test)]
    pub(super) fn calls(&self) -> u64 {
        self.calls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads `keys` in one round trip per [`MAX_TXN_OPS`] keys.
    fn get_many_async(
        &self,
        keys: &[String],
    ) -> impl Future<Output = std::result::Result<Vec<Option<Kv>>, etcd_client::Error>> + use<>
    {
        let mut kv = self.client.kv_client();
        let chunks: Vec<Vec<String>> = keys.chunks(MAX_TXN_OPS).map(<[String]>::to_vec).collect();
        async move {
            let mut out = Vec::new();
            for chunk in chunks {
                let ops: Vec<TxnOp> = chunk.iter().map(|k| TxnOp::get(k.as_str(), None)).collect();
                let txn = Txn::new().and_then(ops);
                let mut tries = 0;
                let resp = loop {
                    match kv.txn(txn.clone()).await {
                        // etcd's users or roles changed while it was in flight: read again.
                        Err(e) if auth_changed(&e) && tries < AUTH_RETRIES => tries += 1,
                        other => break other?,
                    }
                };
                for op in resp.op_responses() {
                    match op {
                        TxnOpResponse::Get(get) => out.push(
                            get.kvs()
                                .first()
                                .map(Kv::from_etcd)
                                .transpose()
                                .map_err(|e| etcd_client::Error::InvalidArgs(e.to_string()))?,
                        ),
                        _ => {
                            return Err(etcd_client::Error::Internal(
                                "unexpected response to a read".into(),
                            ));
                        }
                    }
                }
            }
            Ok(out)
        }
    }

    fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Kv>>> {
        self.call(self.get_many_async(keys))
    }

    /// Sends `reads` (gets) as one transaction, again (up to [`AUTH_RETRIES`] times) when
    /// etcd's users or roles changed while it was in flight: the revision, and each read's keys,
    /// in order.
    fn read_together(&self, reads: Vec<TxnOp>) -> Result<(i64, Vec<Vec<Kv>>)> {
        let (revision, found) = self.read_answers(reads)?;
        let found = found
            .iter()
            .map(|get| get.kvs().iter().map(Kv::from_etcd).collect())
            .collect::<Result<Vec<_>>>()?;
        Ok((revision, found))
    }

    /// [`EtcdStore::read_together`]'s transaction: the revision, and each read's answer.
    fn read_answers(&self, reads: Vec<TxnOp>) -> Result<(i64, Vec<etcd_client::GetResponse>)> {
        let asked = reads.len();
        let mut kv = self.client.kv_client();
        let txn = Txn::new().and_then(reads);
        let resp = self.call(async move {
            let mut tries = 0;
            loop {
                match kv.txn(txn.clone()).await {
                    Err(e) if auth_changed(&e) && tries < AUTH_RETRIES => tries += 1,
                    other => break other,
                }
            }
        })?;
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| StoreError::Backend("etcd answered a read without a header".into()))?;
        let found = resp
            .op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(get) => Ok(get),
                _ => Err(StoreError::Backend("unexpected response to a read".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        if found.len() != asked {
            return Err(StoreError::Backend(
                "etcd answered reads with another number of answers".into(),
            ));
        }
        Ok((revision, found))
    }

    /// Reads every key under each of `prefixes` in one round trip, at one revision: the
    /// revision, and each prefix's keys. Each range is answered whole: only for small ones,
    /// and at most [`MAX_TXN_OPS`] of them.
    fn ranges(&self, prefixes: &[String]) -> Result<(i64, Vec<Vec<Kv>>)> {
        self.read_together(
            prefixes
                .iter()
                .map(|p| TxnOp::get(p.as_str(), Some(GetOptions::new().with_prefix())))
                .collect(),
        )
    }

    /// Reads each pair's key and every key under its prefix in one round trip, at one revision:
    /// the revision, and each pair's key and range. Each range is answered whole: only for small
    /// ones, and at most [`MAX_TXN_OPS`] reads (two per pair).
    fn gets_and_ranges(&self, pairs: &[(String, String)]) -> Result<(i64, Vec<KeyAndRange>)> {
        let reads = pairs
            .iter()
            .flat_map(|(key, prefix)| {
                [
                    TxnOp::get(key.as_str(), None),
                    TxnOp::get(prefix.as_str(), Some(GetOptions::new().with_prefix())),
                ]
            })
            .collect();
        let (revision, found) = self.read_together(reads)?;
        let mut found = found.into_iter();
        let mut out = Vec::with_capacity(pairs.len());
        while let (Some(one), Some(range)) = (found.next(), found.next()) {
            out.push((one.into_iter().next(), range));
        }
        Ok((revision, out))
    }

    /// Reads the keys in `[start, end)` (at most `limit`, 0 for all) with `opts` applied, in
    /// batches of [`RANGE_BATCH`] at one revision (the current one unless `opts` pins another);
    /// returns the current revision and the keys.
    fn range(
        &self,
        start: &str,
        end: &[u8],
        limit: usize,
        opts: impl Fn(GetOptions) -> GetOptions,
    ) -> Result<(i64, Vec<Kv>)> {
        let mut out = Vec::new();
        let mut from = start.as_bytes().to_vec();
        let mut revision = 0;
        loop {
            let want = if limit == 0 {
                RANGE_BATCH
            } else {
                RANGE_BATCH.min(i64::try_from(limit - out.len()).unwrap_or(RANGE_BATCH))
            };
            // `opts` may pin a revision of its own (it then holds for every batch).
            let options = opts(
                GetOptions::new()
                    .with_range(end.to_vec())
                    .with_limit(want)
                    .with_revision(revision),
            );
            let resp = self.get(from.clone(), options)?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            for item in resp.kvs() {
                out.push(Kv::from_etcd(item)?);
            }
            let done = !resp.more() || resp.kvs().is_empty() || (limit > 0 && out.len() >= limit);
            if done {
                return Ok((revision, out));
            }
            let mut next = resp
                .kvs()
                .last()
                .map(|kv| kv.key().to_vec())
                .unwrap_or_default();
            next.push(0);
            from = next;
        }
    }

    /// One range read of `key` with `options`, sent again (up to [`AUTH_RETRIES`] times) when
    /// etcd's users or roles changed while it was in flight.
    fn get(
        &self,
        key: impl Into<Vec<u8>>,
        options: GetOptions,
    ) -> Result<etcd_client::GetResponse> {
        let mut kv = self.client.kv_client();
        let key: Vec<u8> = key.into();
        self.call(async move {
            let mut tries = 0;
            loop {
                match kv.get(key.clone(), Some(options.clone())).await {
                    Err(e) if auth_changed(&e) && tries < AUTH_RETRIES => tries += 1,
                    other => break other,
                }
            }
        })
    }

    /// How many keys are in `[start, end)` (etcd counts them; none is read).
    fn count(&self, start: &str, end: &[u8]) -> Result<usize> {
        let options = GetOptions::new().with_range(end.to_vec()).with_count_only();
        let resp = self.get(start.to_string(), options)?;
        Ok(usize::try_from(resp.count()).unwrap_or(0))
    }

    /// Reads keys in `[start, end)` in creation order, after `after` (a key's creation revision
    /// and the key; `(0, "")` for the first): at most `limit` (0 for all). Keys that one
    /// transaction made share its revision (a launch's instances are made several to a
    /// transaction), so the order is the revision, then the key; a read that etcd cut short
    /// leaves out its last revision, which may be incomplete, and reads it again with the next.
    fn range_by_creation(
        &self,
        start: &str,
        end: &[u8],
        after: (i64, &str),
        limit: usize,
    ) -> Result<Vec<Kv>> {
        let mut out: Vec<Kv> = Vec::new();
        let mut from = (after.0, after.1.to_string());
        let mut revision = 0;
        // Room for a revision's keys beyond what is wanted; doubled when a read makes no
        // progress (a revision with more keys than that).
        let mut slack = 33;
        loop {
            let want = if limit == 0 {
                RANGE_BATCH
            } else {
                RANGE_BATCH.min(i64::try_from(limit - out.len()).unwrap_or(RANGE_BATCH))
            };
            let options = GetOptions::new()
                .with_range(end.to_vec())
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_min_create_revision(from.0.max(1))
                .with_limit(want.saturating_add(slack))
                .with_revision(revision);
            let resp = self.get(start.to_string(), options)?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            let mut read = resp
                .kvs()
                .iter()
                .map(Kv::from_etcd)
                .collect::<Result<Vec<_>>>()?;
            read.sort_by(|a, b| (a.create_rev, &a.key).cmp(&(b.create_rev, &b.key)));
            let more = resp.more();
            if more && let Some(last) = read.last().map(|kv| kv.create_rev) {
                read.retain(|kv| kv.create_rev != last);
            }
            let before = out.len();
            for kv in read {
                if (kv.create_rev, kv.key.as_str()) > (from.0, from.1.as_str()) {
                    out.push(kv);
                }
            }
            if limit > 0 {
                out.truncate(limit);
            }
            if !more || (limit > 0 && out.len() >= limit) {
                return Ok(out);
            }
            match out.last() {
                Some(last) if out.len() > before => from = (last.create_rev, last.key.clone()),
                _ => slack = slack.saturating_mul(2),
            }
        }
    }

    /// Commits `ops` if every compare holds, returning the revision of the commit; `None` if a
    /// compare did not hold.
    fn commit(&self, compares: Vec<Compare>, ops: Vec<TxnOp>) -> Result<Option<i64>> {
        if compares.len() > MAX_TXN_OPS || ops.len() > MAX_TXN_OPS {
            return Err(StoreError::Backend(format!(
                "change too large for one etcd transaction ({} compares, {} writes; at most \
                 {MAX_TXN_OPS} each)",
                compares.len(),
                ops.len()
            )));
        }
        let mut kv = self.client.kv_client();
        let txn = Txn::new().when(compares).and_then(ops);
        let resp = self.call(async move {
            match kv.txn(txn).await {
                // etcd's users or roles changed while it was in flight: as a lost race, run it
                // again.
                Err(e) if auth_changed(&e) => Ok(None),
                other => other.map(Some),
            }
        })?;
        let Some(resp) = resp.filter(etcd_client::TxnResponse::succeeded) else {
            return Ok(None);
        };
        resp.header().map(|h| Some(h.revision())).ok_or_else(|| {
            StoreError::Backend("etcd answered a transaction without a header".into())
        })
    }

    /// Runs `f` and commits what it wrote if nothing it read has changed meanwhile; runs it again
    /// (from its reads) when something has, at most [`MAX_TRIES`] times. An error from `f` ends
    /// the operation with nothing written.
    fn atomically<T>(&self, what: &str, f: impl FnMut(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        self.atomically_at(what, f).map(|(out, _)| out)
    }

    /// As [`EtcdStore::atomically`], also returning the revision of the commit (`None` when `f`
    /// wrote nothing): every key written has it as its mod revision.
    fn atomically_at<T>(
        &self,
        what: &str,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<T>,
    ) -> Result<(T, Option<i64>)> {
        for attempt in 0..MAX_TRIES {
            let mut tx = Tx::new(self);
            let out = f(&mut tx)?;
            if tx.ops.is_empty() {
                return Ok((out, None));
            }
            let (nodes, all_nodes, states) =
                (std::mem::take(&mut tx.nodes), tx.all_nodes, tx.states);
            let committed = self.commit(tx.compares, tx.ops);
            if let (Ok(Some(revision)), true) = (&committed, states) {
                self.tally.written(*revision);
            }
            // Written: the nodes' kept briefs are stale. Perhaps written, perhaps later (an
            // unknown outcome): none is kept for a while.
            match &committed {
                Ok(Some(revision)) => self.briefs.written(&nodes, all_nodes, *revision),
                Ok(None) => {}
                Err(_) if nodes.is_empty() && !all_nodes => {}
                Err(_) => self
                    .briefs
                    .unsure(std::time::Instant::now() + self.options.call_timeout),
            }
            if let Some(revision) = committed? {
                return Ok((out, Some(revision)));
            }
            pause(attempt);
        }
        Err(StoreError::Conflict(format!(
            "{what}: lost to concurrent changes {MAX_TRIES} times; try again"
        )))
    }

    /// `f` of each item, answered in order, with up to [`IN_FLIGHT`] calls at once: the items
    /// in as many shares, each share's one after the other on a thread of its own. For
    /// independent transactions (another instance's records each), which etcd then commits
    /// together (one raft round and one `fsync` for those that arrive together), instead of
    /// one round trip and one `fsync` after the other. Costs a thread per share for the call's
    /// length.
    fn side_by_side<I: Sync, T: Send>(&self, items: &[I], f: impl Fn(&I) -> T + Sync) -> Vec<T> {
        if items.len() < 2 {
            return items.iter().map(&f).collect();
        }
        let share = items.len().div_ceil(IN_FLIGHT);
        std::thread::scope(|scope| {
            let shares: Vec<_> = items
                .chunks(share)
                .map(|part| scope.spawn(|| part.iter().map(&f).collect::<Vec<T>>()))
                .collect();
            shares
                .into_iter()
                .flat_map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    }

    /// Runs the reads of `f` (it must write nothing).
    fn read<T>(&self, f: impl FnOnce(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        let mut tx = Tx::new(self);
        f(&mut tx)
    }
}

/// A runtime for the etcd client and a client connected to `endpoints` over `transport`: one
/// endpoint is dialled and checked first (so that a refusal is told with its cause), then the
/// client's channel is made over the same connector.
fn connect_client(
    endpoints: &[String],
    transport: &EtcdTransport,
    options: &EtcdOptions,
) -> Result<(tokio::runtime::Runtime, Client)> {
    connect_clients(endpoints, transport, options).map(|(runtime, client, _)| (runtime, client))
}

/// As [`connect_client`], with a second client over the same channel for the store's watches:
/// it asks etcd to end a watch when its member has no leader (a member cut off from its
/// cluster would otherwise go on answering the watch's progress requests while the others
/// move on).
fn connect_clients(
    endpoints: &[String],
    transport: &EtcdTransport,
    options: &EtcdOptions,
) -> Result<(tokio::runtime::Runtime, Client, Client)> {
    if endpoints.is_empty() {
        return Err(StoreError::Invalid("no etcd endpoint given".into()));
    }
    let dialer = Dialer::new(endpoints, transport, options.connect_timeout)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("cumulo-etcd")
        .enable_all()
        .build()
        .map_err(|e| StoreError::Backend(format!("starting the etcd client runtime: {e}")))?;
    let joined = endpoints.join(",");
    runtime
        .block_on(dialer.check())
        .map_err(|e| StoreError::Backend(format!("etcd at {joined}: {e}")))?;
    let endpoint = tonic::transport::Endpoint::from_shared(dialer.uri())
        .map_err(|e| StoreError::Invalid(format!("etcd endpoint {joined}: {e}")))?
        .connect_timeout(options.connect_timeout)
        .timeout(options.call_timeout)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true);
    let (client, watcher) = runtime
        .block_on(async {
            let channel = endpoint.connect_with_connector_lazy(dialer.connector());
            let client =
                Client::from_channel(etcd_client::Channel::Tonic(channel.clone()), None).await?;
            let leader = etcd_client::ConnectOptions::new().with_require_leader(true);
            let watcher =
                Client::from_channel(etcd_client::Channel::Tonic(channel), Some(leader)).await?;
            Ok::<_, etcd_client::Error>((client, watcher))
        })
        .map_err(|e| StoreError::Backend(format!("etcd at {joined}: {e}")))?;
    Ok((runtime, client, watcher))
}

/// How many times a read refused because etcd's users or roles changed meanwhile is tried again.
const AUTH_RETRIES: u32 = 3;

/// Whether etcd refused a request because its users or roles changed while it was in flight
/// (`ErrAuthOldRevision`): the request may simply be sent again, as etcd's own client does.
fn auth_changed(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(status)
        if status.message().contains("revision of auth store is old"))
}

/// A failed etcd call as a [`StoreError`]: a refusal by etcd's authorization is
/// [`StoreError::PermissionDenied`].
fn call_err(endpoints: &str, e: &etcd_client::Error) -> StoreError {
    if let etcd_client::Error::GRpcStatus(status) = e
        && (status.code() == tonic::Code::PermissionDenied
            || status.message().contains("permission denied"))
    {
        return StoreError::PermissionDenied(format!(
            "etcd at {endpoints}: this client's etcd user (its certificate's CN) may not do this \
             under the prefix (docs/etcd-store.md): {}",
            status.message()
        ));
    }
    StoreError::Backend(format!("etcd at {endpoints}: {e}"))
}

fn unreachable_err(endpoints: &str, limit: Duration) -> StoreError {
    StoreError::Backend(format!(
        "cannot reach etcd at {endpoints} within {limit:?} (is it running?)"
    ))
}

/// A short random pause before trying a lost transaction again, growing with the attempts.
fn pause(attempt: u32) {
    let ceiling_us = 500u128 * u128::from(attempt.min(10) + 1);
    let jitter = Uuid::new_v4().as_u128() % ceiling_us;
    std::thread::sleep(Duration::from_micros(u64::try_from(jitter).unwrap_or(0)));
}

/// Decodes every record of `kvs`.
fn decode_all<T: serde::de::DeserializeOwned>(kvs: &[Kv]) -> Result<Vec<T>> {
    kvs.iter().map(Kv::decode).collect()
}

/// Every record under `prefix`, read without a transaction.
fn all<T: serde::de::DeserializeOwned>(store: &EtcdStore, prefix: &str) -> Result<Vec<T>> {
    store.read(|tx| decode_all(&tx.range(prefix)?))
}

/// `Conflict`: a `kind` named `name` exists.
fn duplicate(kind: &str, name: &str) -> StoreError {
    StoreError::Conflict(format!("{kind} {name:?} already exists"))
}
