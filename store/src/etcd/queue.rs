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

use std::collections::HashSet;
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
            tx.put_text(&keys.queued(seq), &id.to_string());
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

    fn claim_operation_on(
        &self,
        owner: &str,
        lease: Duration,
        host: Option<Uuid>,
    ) -> Result<Option<Operation>> {
        check_owner(owner)?;
        let (chosen, revision) = self.atomically_at("claiming an operation", |tx| {
            let now_ms = millis(now());
            let mut busy = HashSet::new();
            let mut chosen = None;
            for c in unfinished(tx.store)? {
                let state = c.rec.state()?;
                let first_of_instance = busy.insert(c.rec.instance);
                let expired = match &c.lease {
                    Some(kv) => kv.decode::<LeaseRec>()?.expires_ms <= now_ms,
                    None => true,
                };
                let free = match state {
                    OperationState::Queued => true,
                    OperationState::Claimed => expired,
                    OperationState::Done | OperationState::Failed => false,
                };
                let wanted = host.is_none_or(|h| h == c.rec.host);
                if first_of_instance && free && wanted {
                    chosen = Some(c);
                    break;
                }
            }
            let Some(c) = chosen else {
                return Ok(None);
            };
            let keys = tx.keys();
            let (op_key, lease_key) = (keys.operation(c.rec.id), keys.lease(c.rec.id));
            tx.watch(&op_key, Some(&c.kv));
            tx.watch(&lease_key, c.lease.as_ref());
            let mut rec = c.rec;
            rec.state = OperationState::Claimed.as_str().into();
            rec.claim = None;
            rec.updated_ms = now_ms;
            let new_lease = LeaseRec {
                owner: owner.to_string(),
                expires_ms: lease_end(lease),
            };
            tx.put(&op_key, &rec)?;
            tx.put(&lease_key, &new_lease)?;
            Ok(Some((rec, new_lease)))
        })?;
        match (chosen, revision) {
            (Some((rec, lease)), Some(revision)) => rec.model(revision, Some(&lease)).map(Some),
            (None, _) => Ok(None),
            (Some(_), None) => Err(StoreError::Backend("a claim wrote nothing".into())),
        }
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
            let (mut rec, lease) = held(tx, id, token)?;
            match write {
                InstanceWrite::Nothing => {}
                InstanceWrite::Update(mask, facts) => {
                    super::instances::update_in(
                        tx,
                        Scope::All,
                        rec.instance,
                        None,
                        &mask.change(facts),
                    )?;
                }
                InstanceWrite::Remove => {
                    match super::instances::delete_in(tx, Scope::All, rec.instance) {
                        Ok(()) | Err(StoreError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
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
        })?;
        match lease {
            // Still claimed: its token is the claim's revision (the instance write did not touch it).
            Some(lease) => rec.model(i64::try_from(token).unwrap_or(i64::MAX), Some(&lease)),
            None => rec.model(0, None),
        }
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

/// One unfinished operation as read for a claim.
struct Candidate {
    rec: OperationRec,
    kv: Kv,
    lease: Option<Kv>,
}

/// The unfinished operations, in queue order (read without compares: a claim compares only the
/// operation it takes).
fn unfinished(store: &EtcdStore) -> Result<Vec<Candidate>> {
    let keys = &store.keys;
    let prefix = keys.queue();
    let (_, queue) = store.range(&prefix, &prefix_end(&prefix), 0, |o| o)?;
    let ids = queue
        .iter()
        .map(|kv| {
            Uuid::parse_str(kv.text()?)
                .map_err(|e| StoreError::Backend(format!("bad queue entry {}: {e}", kv.key)))
        })
        .collect::<Result<Vec<_>>>()?;
    let wanted: Vec<String> = ids
        .iter()
        .flat_map(|id| [keys.operation(*id), keys.lease(*id)])
        .collect();
    let found = store.get_many(&wanted)?;
    let mut out = Vec::new();
    for pair in found.chunks(2) {
        // An entry whose operation is gone (finished between the two reads) is skipped.
        if let [Some(kv), lease] = pair {
            out.push(Candidate {
                rec: kv.decode()?,
                kv: kv.clone(),
                lease: lease.clone(),
            });
        }
    }
    Ok(out)
}

/// Operation `id` with its lease, if `token` is its current claim (read in `tx`); `Fenced`
/// otherwise.
fn held(tx: &mut Tx<'_>, id: Uuid, token: u64) -> Result<(OperationRec, LeaseRec)> {
    let (rec, kv, lease) = op_in(tx, id)?;
    let current = u64::try_from(kv.mod_rev).ok() == Some(token);
    match (rec.state()?, lease) {
        (OperationState::Claimed, Some(lease)) if current => Ok((rec, lease)),
        _ => Err(fenced(id, token)),
    }
}
