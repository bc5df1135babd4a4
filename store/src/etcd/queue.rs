//! Off-host hosts and the operation queue over etcd: [`OperationQueue`] for [`EtcdStore`].
//!
//! An operation is `op/<id>`; while unfinished it is also listed in `opq/<seq>` (the queue, in
//! enqueue order) and `ophost/<host>/<id>`, and while claimed its lease is `lease/<id>`. A claim
//! rewrites `op/<id>` and `lease/<id>` in one transaction that compares both as they were read, so
//! of many claimers of one operation exactly one commits; the **fencing token** is the revision of
//! that transaction, which is the mod revision of `op/<id>` until the operation is claimed again
//! or finished. Renewing rewrites only the lease, so the token stays. Completing or failing
//! compares `op/<id>`'s mod revision with the token: a replica whose claim was taken over (or
//! already finished) is refused with `Fenced`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use uuid::Uuid;

use super::keys::prefix_end;
use super::records::{ClaimRec, CredsRec, LeaseRec, OperationRec, RemoteHostRec};
use super::{EtcdStore, Kv, Tx};
use crate::common::{from_millis, millis, now};
use crate::queue::{check_creds, check_owner, check_remote_host, fenced};
use crate::*;

impl OperationQueue for EtcdStore {
    // --- off-host hosts ---
    fn create_remote_host(&self, new: NewRemoteHost) -> Result<RemoteHost> {
        check_remote_host(&new)?;
        let rec = RemoteHostRec {
            id: Uuid::new_v4(),
            name: new.name,
            libvirt_uri: new.libvirt_uri,
            created_ms: millis(now()),
        };
        self.atomically("recording a remote host", |tx| {
            let keys = tx.keys();
            let name_key = keys.name("rhost", &rec.name);
            if tx.get(&name_key)?.is_some() {
                return Err(StoreError::Conflict(format!(
                    "remote host {:?} already exists",
                    rec.name
                )));
            }
            tx.put_text(&name_key, &rec.id.to_string());
            tx.put(&keys.remote_host(rec.id), &rec)
        })?;
        Ok(rec.model())
    }

    fn remote_host(&self, id: Uuid) -> Result<RemoteHost> {
        self.read(|tx| host_in(tx, id)).map(|h| h.model())
    }

    fn remote_hosts(&self) -> Result<Vec<RemoteHost>> {
        let prefix = self.keys.remote_hosts();
        let (_, kvs) = self.range(&prefix, &prefix_end(&prefix), 0, |o| o)?;
        let mut all = kvs
            .iter()
            .map(|kv| kv.decode::<RemoteHostRec>().map(|h| h.model()))
            .collect::<Result<Vec<_>>>()?;
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    fn delete_remote_host(&self, id: Uuid) -> Result<()> {
        self.atomically("deleting a remote host", |tx| {
            let host = host_in(tx, id)?;
            let keys = tx.keys();
            if tx.any_under(&keys.pending_on_host(id))? {
                return Err(StoreError::Conflict(format!(
                    "remote host {id} has unfinished operations"
                )));
            }
            tx.delete(&keys.name("rhost", &host.name));
            tx.delete(&keys.remote_host(id));
            tx.delete(&keys.creds(id));
            Ok(())
        })
    }

    // --- operations and claims ---
    fn enqueue_operation(&self, new: NewOperation) -> Result<Operation> {
        let id = Uuid::new_v4();
        let rec = self.atomically("queueing an operation", |tx| {
            host_in(tx, new.host)?;
            let keys = tx.keys();
            let counter = keys.op_counter();
            let last: u64 = match tx.get(&counter)? {
                Some(kv) => kv
                    .text()?
                    .parse()
                    .map_err(|e| StoreError::Backend(format!("bad operation counter: {e}")))?,
                None => 0,
            };
            let seq = last + 1;
            let at = millis(now());
            let rec = OperationRec {
                id,
                seq,
                host: new.host,
                instance: new.instance,
                kind: new.kind.as_str().into(),
                payload: new.payload.clone(),
                state: OperationState::Queued.as_str().into(),
                claim: None,
                result: None,
                created_ms: at,
                updated_ms: at,
            };
            tx.put_text(&counter, &seq.to_string());
            tx.put(&keys.operation(id), &rec)?;
            tx.put_text(
                &keys.queued(seq),
                &QueueEntry::text(id, new.instance, new.host),
            );
            tx.put_text(&keys.pending_on(new.host, id), "");
            Ok(rec)
        })?;
        rec.model(0, None)
    }

    fn operation(&self, id: Uuid) -> Result<Operation> {
        let (rec, kv, lease) = self.read(|tx| op_in(tx, id))?;
        rec.model(kv.mod_rev, lease.as_ref())
    }

    fn operations(&self, filter: OperationFilter) -> Result<Vec<Operation>> {
        let keys = &self.keys;
        let ops_prefix = keys.operations();
        let (revision, ops) = self.range(&ops_prefix, &prefix_end(&ops_prefix), 0, |o| o)?;
        // The leases at the same revision, so that a claim is seen with its lease.
        let lease_prefix = keys.leases();
        let (_, leases) = self.range(&lease_prefix, &prefix_end(&lease_prefix), 0, |o| {
            o.with_revision(revision)
        })?;
        let leases = leases
            .iter()
            .map(|kv| Ok((kv.key.clone(), kv.decode::<LeaseRec>()?)))
            .collect::<Result<std::collections::HashMap<_, _>>>()?;
        let mut out = Vec::new();
        for kv in &ops {
            let rec: OperationRec = kv.decode()?;
            let op = rec.model(kv.mod_rev, leases.get(&keys.lease(rec.id)))?;
            if filter.matches(&op) {
                out.push((rec.seq, op));
            }
        }
        out.sort_by_key(|(seq, _)| *seq);
        Ok(out.into_iter().map(|(_, op)| op).collect())
    }

    fn claim_operations_on(
        &self,
        owner: &str,
        lease: Duration,
        host: Option<Uuid>,
        max: usize,
    ) -> Result<Vec<Operation>> {
        check_owner(owner)?;
        let max = max.clamp(1, MAX_CLAIM_BATCH);
        let (claimed, revision) = self.atomically_at("claiming operations", |tx| {
            let now_ms = millis(now());
            // With one wanted, the oldest; with more, a run of them from among the first
            // `CLAIM_SPREAD` batches' worth, picked at random (in steps of a batch, so that two
            // claimers either take the same run, and one retries, or runs apart).
            let wanted = if max == 1 { 1 } else { max * CLAIM_SPREAD };
            let free = free_at_head(tx.store, host, now_ms, wanted)?;
            // Whole runs only: a claim takes `max` when that many are free.
            let runs = free.len() / max;
            let run = if runs <= 1 {
                0
            } else {
                usize::try_from(Uuid::new_v4().as_u128() % runs as u128).unwrap_or(0)
            };
            let chosen: Vec<(Uuid, Option<Kv>)> =
                free.into_iter().skip(run * max).take(max).collect();
            let keys = tx.keys();
            let op_keys: Vec<String> = chosen.iter().map(|(id, _)| keys.operation(*id)).collect();
            let found = tx.get_many(&op_keys)?;
            let mut out = Vec::with_capacity(chosen.len());
            for ((id, lease_kv), kv) in chosen.into_iter().zip(found) {
                // Finished or taken since the queue was read: the compares would fail anyway.
                let Some(kv) = kv else { continue };
                let mut rec: OperationRec = kv.decode()?;
                let lease_key = keys.lease(id);
                let free = match rec.state()? {
                    OperationState::Queued => true,
                    OperationState::Claimed => match &lease_kv {
                        Some(l) => l.decode::<LeaseRec>()?.expires_ms <= now_ms,
                        None => true,
                    },
                    OperationState::Done | OperationState::Failed => false,
                };
                if !free {
                    continue;
                }
                tx.watch(&lease_key, lease_kv.as_ref());
                rec.state = OperationState::Claimed.as_str().into();
                rec.claim = None;
                rec.updated_ms = now_ms;
                let new_lease = LeaseRec {
                    owner: owner.to_string(),
                    expires_ms: lease_end(lease),
                };
                tx.put(&keys.operation(id), &rec)?;
                tx.put(&lease_key, &new_lease)?;
                out.push((rec, new_lease));
            }
            Ok(out)
        })?;
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let revision =
            revision.ok_or_else(|| StoreError::Backend("a claim wrote nothing".into()))?;
        claimed
            .into_iter()
            .map(|(rec, lease)| rec.model(revision, Some(&lease)))
            .collect()
    }

    fn unfinished_operations(&self, host: Uuid) -> Result<usize> {
        let prefix = self.keys.pending_on_host(host);
        self.count(&prefix, &prefix_end(&prefix))
    }

    fn renew_claim(&self, id: Uuid, token: u64, lease: Duration) -> Result<Operation> {
        let (rec, lease) = self.atomically("renewing a claim", |tx| {
            let (rec, mut held_lease) = held(tx, id, token)?;
            held_lease.expires_ms = lease_end(lease);
            let key = tx.keys().lease(id);
            tx.put(&key, &held_lease)?;
            Ok((rec, held_lease))
        })?;
        let revision = i64::try_from(token).unwrap_or(i64::MAX);
        rec.model(revision, Some(&lease))
    }

    fn complete_operation(&self, id: Uuid, token: u64, result: &str) -> Result<Operation> {
        self.fenced_write(
            id,
            token,
            &InstanceWrite::Nothing,
            Some((OperationState::Done, result)),
        )
    }

    fn fail_operation(&self, id: Uuid, token: u64, reason: &str) -> Result<Operation> {
        self.fenced_write(
            id,
            token,
            &InstanceWrite::Nothing,
            Some((OperationState::Failed, reason)),
        )
    }

    /// A launcher's write about operation `id` under claim `token`: the instance change and the
    /// finish commit in one transaction that compares the operation's key as `held` read it, so a
    /// takeover (or a finish) in between makes it run again and be refused with `Fenced`.
    fn fenced_write(
        &self,
        id: Uuid,
        token: u64,
        write: &InstanceWrite,
        finish: Option<(OperationState, &str)>,
    ) -> Result<Operation> {
        let (rec, lease) = self.atomically("a fenced write", |tx| {
            let (rec, lease) = held(tx, id, token)?;
            apply(tx, id, token, rec, lease, write, finish)
        })?;
        written(rec, lease.as_ref(), token)
    }

    /// Reports that update an instance (or write nothing to it) go [`MAX_FENCED_BATCH`] to a
    /// transaction: one round trip reads their operations and leases, one their instances, one
    /// commits. A report refused (a stale token, an instance gone) writes nothing and leaves the
    /// others be. Removals, and a second report about an instance already in the batch, go alone.
    fn fenced_writes(&self, reports: &[FencedWrite]) -> Vec<Result<Operation>> {
        let mut out: Vec<Option<Result<Operation>>> = reports.iter().map(|_| None).collect();
        let mut alone = Vec::new();
        let batched: Vec<usize> = (0..reports.len())
            .filter(|&n| {
                let removal = reports[n].write == InstanceWrite::Remove;
                if removal {
                    alone.push(n);
                }
                !removal
            })
            .collect();
        for chunk in batched.chunks(MAX_FENCED_BATCH) {
            match self.fenced_batch(reports, chunk) {
                Ok(results) => {
                    for (&n, result) in chunk.iter().zip(results) {
                        match result {
                            Some(r) => out[n] = Some(r),
                            None => alone.push(n),
                        }
                    }
                }
                Err(e) => {
                    for &n in chunk {
                        out[n] = Some(Err(e.clone()));
                    }
                }
            }
        }
        for n in alone {
            let r = &reports[n];
            out[n] = Some(self.fenced_write(r.id, r.token, &r.write, r.finish()));
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::Backend("a report was lost".into()))))
            .collect()
    }

    // --- launcher credentials ---
    fn put_launcher_creds(&self, creds: LauncherCreds) -> Result<()> {
        check_creds(&creds)?;
        let rec = CredsRec {
            cert: creds.cert_pem.clone(),
            key: creds.sealed_key.clone(),
            ca: creds.ca_pem.clone(),
            not_after_ms: millis(creds.not_after),
            issued_ms: millis(creds.issued),
        };
        self.atomically("storing launcher credentials", |tx| {
            host_in(tx, creds.host)?;
            let key = tx.keys().creds(creds.host);
            tx.put(&key, &rec)
        })
    }

    fn launcher_creds(&self, host: Uuid) -> Result<LauncherCreds> {
        let rec: CredsRec = self
            .read(|tx| {
                let key = tx.keys().creds(host);
                tx.get_json(&key)
            })?
            .ok_or_else(|| StoreError::not_found("launcher credentials", host))?;
        Ok(LauncherCreds {
            host,
            cert_pem: rec.cert,
            sealed_key: rec.key,
            ca_pem: rec.ca,
            not_after: from_millis(rec.not_after_ms),
            issued: from_millis(rec.issued_ms),
        })
    }
}

/// Milliseconds since the epoch at which a lease taken now ends.
fn lease_end(lease: Duration) -> i64 {
    let lease = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    millis(now()).saturating_add(lease)
}

fn host_in(tx: &mut Tx<'_>, id: Uuid) -> Result<RemoteHostRec> {
    let key = tx.keys().remote_host(id);
    tx.get_json(&key)?
        .ok_or_else(|| StoreError::not_found("remote host", id))
}

/// Operation `id` as read in `tx` (watched), with its key and lease.
fn op_in(tx: &mut Tx<'_>, id: Uuid) -> Result<(OperationRec, Kv, Option<LeaseRec>)> {
    let keys = tx.keys();
    let found = tx.get_many(&[keys.operation(id), keys.lease(id)])?;
    let [op, lease] = found.as_slice() else {
        return Err(StoreError::Backend("short read".into()));
    };
    let kv = op
        .clone()
        .ok_or_else(|| StoreError::not_found("operation", id))?;
    let lease = lease.as_ref().map(Kv::decode::<LeaseRec>).transpose()?;
    Ok((kv.decode()?, kv, lease))
}

/// How many batches' worth of free operations a claim of more than one reads from the head of
/// the queue, to pick its run among them.
const CLAIM_SPREAD: usize = 8;

/// A queue entry (`opq/<seq>`): the operation, and (written since 2026-12-04) its instance and
/// host, so that a claim decides what it may take from the queue and the leases alone. An entry
/// of before holds the operation's id only; its record is read for the rest.
struct QueueEntry {
    op: Uuid,
    about: Option<(Uuid, Uuid)>,
}

impl QueueEntry {
    fn text(op: Uuid, instance: Uuid, host: Uuid) -> String {
        format!("{op} {instance} {host}")
    }

    fn parse(kv: &Kv) -> Result<QueueEntry> {
        let bad = |e: &dyn std::fmt::Display| {
            StoreError::Backend(format!("bad queue entry {}: {e}", kv.key))
        };
        let uuid = |s: &str| Uuid::parse_str(s).map_err(|e| bad(&e));
        let mut parts = kv.text()?.split(' ');
        let op = uuid(parts.next().unwrap_or_default())?;
        let about = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => None,
            (Some(instance), Some(host), None) => Some((uuid(instance)?, uuid(host)?)),
            _ => return Err(bad(&"not `<operation> <instance> <host>`")),
        };
        Ok(QueueEntry { op, about })
    }
}

/// Up to `wanted` operations that a claim may take, oldest first, each with its lease as read
/// (`None`: unclaimed): queued, or claimed with the lease run out; for `host` when given; and
/// the first unfinished one of its instance. Read without compares, from the leases (all of them:
/// one per claim in flight) and the head of the queue (as many entries as there are leases, plus
/// `wanted`, plus a page more each time that was not enough): the claim's transaction compares
/// each operation it takes, and reads its record again.
fn free_at_head(
    store: &EtcdStore,
    host: Option<Uuid>,
    now_ms: i64,
    wanted: usize,
) -> Result<Vec<(Uuid, Option<Kv>)>> {
    let keys = &store.keys;
    let lease_prefix = keys.leases();
    let (_, leases) = store.range(&lease_prefix, &prefix_end(&lease_prefix), 0, |o| o)?;
    let leases: HashMap<String, Kv> = leases.into_iter().map(|kv| (kv.key.clone(), kv)).collect();
    let queue = keys.queue();
    let end = prefix_end(&queue);
    let mut from = queue.clone();
    let mut busy = HashSet::new();
    let mut free = Vec::new();
    let mut page = leases.len() + wanted;
    loop {
        let (_, entries) = store.range(&from, &end, page, |o| o)?;
        let mut parsed = entries
            .iter()
            .map(QueueEntry::parse)
            .collect::<Result<Vec<_>>>()?;
        // Entries of before: their instance and host from their records (an operation gone
        // meanwhile finished: skipped).
        let legacy: Vec<String> = parsed
            .iter()
            .filter(|e| e.about.is_none())
            .map(|e| keys.operation(e.op))
            .collect();
        if !legacy.is_empty() {
            let mut recs = store.get_many(&legacy)?.into_iter();
            for entry in parsed.iter_mut().filter(|e| e.about.is_none()) {
                if let Some(kv) = recs.next().flatten() {
                    let rec: OperationRec = kv.decode()?;
                    entry.about = Some((rec.instance, rec.host));
                }
            }
        }
        for entry in &parsed {
            let Some((instance, op_host)) = entry.about else {
                continue;
            };
            let first_of_instance = busy.insert(instance);
            let lease = leases.get(&keys.lease(entry.op));
            let expired = match lease {
                Some(kv) => kv.decode::<LeaseRec>()?.expires_ms <= now_ms,
                None => true,
            };
            if first_of_instance && expired && host.is_none_or(|h| h == op_host) {
                free.push((entry.op, lease.cloned()));
                if free.len() == wanted {
                    return Ok(free);
                }
            }
        }
        let Some(last) = entries.last().filter(|_| entries.len() == page) else {
            return Ok(free);
        };
        // Not enough yet: the next page, after the last entry read.
        from = format!("{}\0", last.key);
        page = wanted.max(256);
    }
}

impl EtcdStore {
    /// The reports `which` of `reports` in one transaction: per report its result, or `None` for
    /// one to write alone (a second about the same instance).
    fn fenced_batch(
        &self,
        reports: &[FencedWrite],
        which: &[usize],
    ) -> Result<Vec<Option<Result<Operation>>>> {
        type Item = Option<Result<(OperationRec, Option<LeaseRec>, u64)>>;
        let items: Vec<Item> = self.atomically("fenced writes", |tx| {
            let keys = tx.keys();
            let wanted: Vec<String> = which
                .iter()
                .flat_map(|&n| [keys.operation(reports[n].id), keys.lease(reports[n].id)])
                .collect();
            let found = tx.get_many(&wanted)?;
            // Each held one's operation record, or why it is refused.
            let mut seen = HashSet::new();
            let mut checked = Vec::with_capacity(which.len());
            for (pair, &n) in found.chunks(2).zip(which) {
                let r = &reports[n];
                let [op, lease] = pair else {
                    return Err(StoreError::Backend("short read".into()));
                };
                let result = match held_of(r.id, r.token, op.as_ref(), lease.as_ref()) {
                    Ok((rec, _)) if !seen.insert(rec.instance) => None,
                    other => Some(other),
                };
                checked.push(result);
            }
            // Their instances in one round trip, then each report's writes; a report that fails
            // takes back what it wrote.
            let instances: Vec<String> = checked
                .iter()
                .filter_map(|c| match c {
                    Some(Ok((rec, _))) => Some(keys.instance(rec.instance)),
                    _ => None,
                })
                .collect();
            tx.prefetch(&instances)?;
            let mut items = Vec::with_capacity(which.len());
            for (c, &n) in checked.into_iter().zip(which) {
                let r = &reports[n];
                let item = match c {
                    None => None,
                    Some(Err(e)) => Some(Err(e)),
                    Some(Ok((rec, lease))) => {
                        let mark = tx.savepoint();
                        match apply(tx, r.id, r.token, rec, lease, &r.write, r.finish()) {
                            Ok((rec, lease)) => Some(Ok((rec, lease, r.token))),
                            Err(e) => {
                                tx.rollback(mark);
                                Some(Err(e))
                            }
                        }
                    }
                };
                items.push(item);
            }
            Ok(items)
        })?;
        Ok(items
            .into_iter()
            .map(|item| {
                item.map(|r| r.and_then(|(rec, lease, token)| written(rec, lease.as_ref(), token)))
            })
            .collect())
    }
}

/// A held operation's report, written in `tx`: the instance change, then the finish if any.
/// Returns the record as written, and the lease while it is still claimed.
fn apply(
    tx: &mut Tx<'_>,
    id: Uuid,
    token: u64,
    mut rec: OperationRec,
    lease: LeaseRec,
    write: &InstanceWrite,
    finish: Option<(OperationState, &str)>,
) -> Result<(OperationRec, Option<LeaseRec>)> {
    match write {
        InstanceWrite::Nothing => {}
        InstanceWrite::Update(mask, facts) => {
            super::instances::update_in(tx, Scope::All, rec.instance, None, &mask.change(facts))?;
        }
        InstanceWrite::Remove => match super::instances::delete_in(tx, Scope::All, rec.instance) {
            Ok(()) | Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        },
    }
    let Some((state, result)) = finish else {
        return Ok((rec, Some(lease)));
    };
    rec.state = state.as_str().into();
    rec.claim = Some(ClaimRec {
        owner: lease.owner,
        token,
        expires_ms: lease.expires_ms,
    });
    rec.result = Some(result.to_string());
    rec.updated_ms = millis(now());
    let keys = tx.keys();
    tx.put(&keys.operation(id), &rec)?;
    tx.delete(&keys.lease(id));
    tx.delete(&keys.queued(rec.seq));
    tx.delete(&keys.pending_on(rec.host, id));
    Ok((rec, None))
}

/// The operation as a fenced write left it: still claimed (its token is the claim's revision:
/// the instance write did not touch it), or finished.
fn written(rec: OperationRec, lease: Option<&LeaseRec>, token: u64) -> Result<Operation> {
    match lease {
        Some(lease) => rec.model(i64::try_from(token).unwrap_or(i64::MAX), Some(lease)),
        None => rec.model(0, None),
    }
}

/// Operation `id` with its lease, if `token` is its current claim (read in `tx`); `Fenced`
/// otherwise.
fn held(tx: &mut Tx<'_>, id: Uuid, token: u64) -> Result<(OperationRec, LeaseRec)> {
    let keys = tx.keys();
    let found = tx.get_many(&[keys.operation(id), keys.lease(id)])?;
    let [op, lease] = found.as_slice() else {
        return Err(StoreError::Backend("short read".into()));
    };
    held_of(id, token, op.as_ref(), lease.as_ref())
}

/// Operation `id` with its lease, as read (`op`, `lease`), if `token` is its current claim;
/// `NotFound` without the operation, `Fenced` otherwise.
fn held_of(
    id: Uuid,
    token: u64,
    op: Option<&Kv>,
    lease: Option<&Kv>,
) -> Result<(OperationRec, LeaseRec)> {
    let kv = op.ok_or_else(|| StoreError::not_found("operation", id))?;
    let rec: OperationRec = kv.decode()?;
    let lease = lease.map(Kv::decode::<LeaseRec>).transpose()?;
    let current = u64::try_from(kv.mod_rev).ok() == Some(token);
    match (rec.state()?, lease) {
        (OperationState::Claimed, Some(lease)) if current => Ok((rec, lease)),
        _ => Err(fenced(id, token)),
    }
}
