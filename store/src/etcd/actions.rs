//! The instance actions log over etcd, [`ActionStore`] for [`EtcdStore`]: one JSON record per
//! action under the instance's range (`action/<instance>/<seq>`, in the instance's order), at most
//! [`ACTIONS_PER_INSTANCE`] of them. A change reads the instance's range (its compare makes
//! concurrent changes of one instance's actions run one after the other), applies the shared
//! rules (`crate::actions`) and writes back the one action that changed.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::keys::suffix;
use super::records::{ActionRec, InstanceRec};
use super::{EtcdStore, Kv, Tx};
use crate::actions as rules;
use crate::common::now;
use crate::*;

impl ActionStore for EtcdStore {
    fn add_instance_action(&self, new: NewInstanceAction) -> Result<InstanceAction> {
        rules::check_new(&new)?;
        self.atomically("recording an instance action", |tx| {
            let keys = tx.keys();
            let prefix = keys.actions(new.instance);
            // The instance and its actions in one round trip.
            let (instance, found) = tx.get_and_range(&keys.instance(new.instance), &prefix)?;
            let instance: InstanceRec = instance
                .ok_or_else(|| StoreError::not_found("instance", new.instance))?
                .decode()?;
            let found = decode_actions(found)?;
            if found.iter().any(|(_, a)| a.request_id == new.request_id) {
                return Err(rules::duplicate(&new));
            }
            let seq = match found.last() {
                Some((kv, _)) => seq_of(kv, &prefix)? + 1,
                None => 1,
            };
            let action = rules::new_action(new.clone(), instance.tenant, now());
            tx.put(&keys.action(new.instance, seq), &ActionRec::from(&action))?;
            let excess = (found.len() + 1).saturating_sub(ACTIONS_PER_INSTANCE);
            for (kv, _) in found.iter().take(excess) {
                tx.delete(&kv.key);
            }
            Ok(action)
        })
    }

    /// The action is the instance's first: its key is the first of the instance's range, and
    /// nothing of the range needs reading.
    fn create_instance_with_action(
        &self,
        new: NewInstance,
        action: NewInstanceAction,
    ) -> Result<(Instance, Result<InstanceAction>)> {
        crate::common::check_new_instance(&new)?;
        let id = Uuid::new_v4();
        let action = NewInstanceAction {
            instance: id,
            ..action
        };
        if let Err(e) = rules::check_new(&action) {
            return Ok((self.create_instance(new)?, Err(e)));
        }
        self.atomically("creating an instance with its action", |tx| {
            let rec = super::instances::create_in(tx, &new, id)?;
            let recorded = rules::new_action(action.clone(), rec.tenant, now());
            let key = tx.keys().action(id, 1);
            tx.put(&key, &ActionRec::from(&recorded))?;
            Ok((rec.model()?, Ok(recorded)))
        })
    }

    /// Up to `CREATED_PER_TXN` instances to a transaction, with their actions: one read of
    /// the tenant, its workload and its networking record, and one commit, for all of them.
    fn create_instances_with_action(
        &self,
        new: &NewInstance,
        count: u32,
        action: &NewInstanceAction,
    ) -> (Vec<(Instance, Result<InstanceAction>)>, Option<StoreError>) {
        if let Err(e) = crate::common::check_new_instance(new) {
            return (Vec::new(), Some(e));
        }
        if rules::check_new(action).is_err() {
            // Each instance made all the same, its action refused.
            return crate::traits::actions::one_after_another(self, new, count, action);
        }
        let count = count as usize;
        let mut made = Vec::with_capacity(count);
        while made.len() < count {
            let want = (count - made.len()).min(CREATED_PER_TXN);
            let chunk = self.atomically("creating instances with their actions", |tx| {
                creations_in(tx, new, want, action)
            });
            match chunk {
                Ok((instances, stopped)) => {
                    made.extend(instances.into_iter().map(|(i, a)| (i, Ok(a))));
                    if stopped.is_some() {
                        return (made, stopped);
                    }
                }
                Err(e) => return (made, Some(e)),
            }
        }
        (made, None)
    }

    fn add_instance_actions(&self, new: &[NewInstanceAction]) -> Vec<Result<InstanceAction>> {
        self.side_by_side(new, |n| self.add_instance_action(n.clone()))
    }

    /// Up to `ENDS_PER_TXN` to a transaction (one read of their instances' ranges, one
    /// commit), several such transactions in flight. An end whose instance's actions do not
    /// decode answers that error alone. A share that kept losing to concurrent changes (so
    /// nothing of it was written) is written one end after another; any other failure (the
    /// commit's outcome unknown, say) is every end's answer, never written twice.
    fn finish_action_events(&self, ends: &[ActionEnd<'_>]) -> Vec<Result<Option<InstanceAction>>> {
        let shares: Vec<&[ActionEnd<'_>]> = ends.chunks(ENDS_PER_TXN).collect();
        self.side_by_side(&shares, |share| {
            match self.atomically("finishing action events", |tx| finish_many_in(tx, share)) {
                Ok(done) => done,
                Err(StoreError::Conflict(_)) => share
                    .iter()
                    .map(|e| {
                        self.finish_action_event(e.instance, e.target, e.event, e.outcome.clone())
                    })
                    .collect(),
                Err(e) => share.iter().map(|_| Err(e.clone())).collect(),
            }
        })
        .into_iter()
        .flatten()
        .collect()
    }

    fn start_action_event(
        &self,
        instance: Uuid,
        target: ActionTarget<'_>,
        event: &str,
    ) -> Result<Option<InstanceAction>> {
        rules::check_event(event)?;
        self.atomically("starting an action event", |tx| {
            let (kvs, mut actions): (Vec<Kv>, Vec<InstanceAction>) =
                of_instance(tx, instance)?.into_iter().unzip();
            match rules::start_event(&mut actions, target, event, now()) {
                Some((at, changed)) => {
                    if changed {
                        tx.put(&kvs[at].key, &ActionRec::from(&actions[at]))?;
                    }
                    Ok(Some(actions.swap_remove(at)))
                }
                None => Ok(None),
            }
        })
    }

    fn finish_action_event(
        &self,
        instance: Uuid,
        target: ActionTarget<'_>,
        event: &str,
        outcome: EventOutcome,
    ) -> Result<Option<InstanceAction>> {
        rules::check_event(event)?;
        self.atomically("finishing an action event", |tx| {
            let found = of_instance(tx, instance)?;
            finish_in(tx, found, target, event, outcome.clone())
        })
    }

    /// The record and the actions read in one round trip, both written in one commit.
    fn update_instance_finishing_event(
        &self,
        instance: Uuid,
        expected_version: u64,
        change: InstanceChange,
        event: &str,
        outcome: EventOutcome,
    ) -> Result<(Instance, Result<Option<InstanceAction>>)> {
        rules::check_event(event)?;
        self.atomically("updating an instance and finishing an action event", |tx| {
            let keys = tx.keys();
            let key = keys.instance(instance);
            let (record, under) = tx.get_and_range(&key, &keys.actions(instance))?;
            // The update reads the record from here (it writes it only after).
            tx.prefetched.insert(key, record);
            let updated = super::instances::update_in(
                tx,
                Scope::All,
                instance,
                Some(expected_version),
                &change,
            )?;
            let found = decode_actions(under)?;
            let finished = finish_in(tx, found, ActionTarget::Newest, event, outcome.clone())?;
            Ok((updated, Ok(finished)))
        })
    }

    /// Up to 25 (`STARTS_PER_TXN`) to a transaction, fewer when their writes would pass
    /// `STARTED_BYTES_PER_TXN`: their records and actions read in one round trip, those started
    /// written in one commit. A share that kept losing to concurrent changes is started one
    /// instance after another; any other failure is every instance's answer in the share.
    fn start_instances_on(
        &self,
        node: Uuid,
        asked: &[ToStart],
        event: &str,
        outcome: EventOutcome,
    ) -> Vec<Result<Starting>> {
        if let Err(e) = rules::check_event(event) {
            return asked.iter().map(|_| Err(e.clone())).collect();
        }
        if asked.is_empty() {
            return Vec::new();
        }
        self.starts
            .run(node, asked, event, &outcome, |all, event, outcome| {
                self.start_together(all, event, outcome)
            })
    }

    fn instance_actions(&self, scope: Scope, instance: Uuid) -> Result<Vec<InstanceAction>> {
        self.read(|tx| {
            let mut visible = visible(tx, scope, instance)?;
            visible.reverse();
            Ok(visible)
        })
    }

    fn instance_action(
        &self,
        scope: Scope,
        instance: Uuid,
        request_id: &str,
    ) -> Result<InstanceAction> {
        self.read(|tx| {
            visible(tx, scope, instance)?
                .into_iter()
                .find(|a| a.request_id == request_id)
                .ok_or_else(|| StoreError::not_found("instance action", request_id))
        })
    }
}

/// Finishes `event` of the `target` action among `found` (an instance's actions with their keys,
/// oldest first) in `tx`: the action as written, `None` when there is no such action.
fn finish_in(
    tx: &mut Tx<'_>,
    found: Vec<(Kv, InstanceAction)>,
    target: ActionTarget<'_>,
    event: &str,
    outcome: EventOutcome,
) -> Result<Option<InstanceAction>> {
    let (kvs, mut actions): (Vec<Kv>, Vec<InstanceAction>) = found.into_iter().unzip();
    match rules::finish_event(&mut actions, target, event, outcome, now()) {
        Some(at) => {
            tx.put(&kvs[at].key, &ActionRec::from(&actions[at]))?;
            Ok(Some(actions.swap_remove(at)))
        }
        None => Ok(None),
    }
}

/// The instance's actions with their keys, oldest first.
fn of_instance(tx: &mut Tx<'_>, instance: Uuid) -> Result<Vec<(Kv, InstanceAction)>> {
    let prefix = tx.keys().actions(instance);
    decode_actions(tx.range(&prefix)?)
}

/// The actions of an instance's range, with their keys.
fn decode_actions(kvs: Vec<Kv>) -> Result<Vec<(Kv, InstanceAction)>> {
    kvs.into_iter()
        .map(|kv| {
            let action = kv.decode::<ActionRec>()?.model()?;
            Ok((kv, action))
        })
        .collect()
}

/// The instance's actions visible in `scope`, oldest first; `NotFound` (an instance) when there
/// are none and the instance has no record visible in `scope`.
fn visible(tx: &mut Tx<'_>, scope: Scope, instance: Uuid) -> Result<Vec<InstanceAction>> {
    let visible: Vec<InstanceAction> = of_instance(tx, instance)?
        .into_iter()
        .map(|(_, a)| a)
        .filter(|a| scope.sees(Some(a.tenant)))
        .collect();
    if visible.is_empty() {
        super::instances::instance_in(tx, scope, instance)?;
    }
    Ok(visible)
}

/// The sequence number at the end of an action's key.
fn seq_of(kv: &Kv, prefix: &str) -> Result<u64> {
    suffix(&kv.key, prefix)
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| StoreError::Backend(format!("bad action key {}", kv.key)))
}

/// The most instances [`ActionStore::create_instances_with_action`] makes in one transaction; the
/// writes bound it first: five each (`make_in`'s) and its action, and the networking record's,
/// within etcd's 128 (twenty; fewer when there are more: a new subnet's block key, full subnets
/// moved out, or large records).
const CREATED_PER_TXN: usize = 31;

/// The most bytes of keys and values one creation transaction writes, well within etcd's default
/// `--max-request-bytes` (1.5 MiB): instances with much metadata go fewer to a transaction.
const CREATED_BYTES_PER_TXN: usize = 512 * 1024;

/// Up to `want` instances of `new` in `tx`, each with its first action `action`, in order: fewer
/// when the transaction's writes would pass etcd's limits (their number, their bytes) or a second
/// new subnet would be needed (the next transaction goes on). An instance that cannot be made stops them: its error is
/// the transaction's when it is the first, else the second of the pair (those before it made).
#[allow(clippy::type_complexity)]
fn creations_in(
    tx: &mut Tx<'_>,
    new: &NewInstance,
    want: usize,
    action: &NewInstanceAction,
) -> Result<(Vec<(Instance, InstanceAction)>, Option<StoreError>)> {
    use super::instances::{creation_reads, make_in, make_writes, needs_subnet};
    let (t, w, mut net) = creation_reads(tx, new)?;
    // Keys one transaction writes share its revision, and those are listed in key order: ids in
    // ascending order list the instances in the order made.
    let mut ids: Vec<Uuid> = (0..want).map(|_| Uuid::new_v4()).collect();
    ids.sort_unstable();
    let mut made: Vec<(InstanceRec, InstanceAction)> = Vec::with_capacity(want);
    let mut stopped = None;
    let mut carved = false;
    // The most bytes one instance of the launch wrote (they differ only in small fields).
    let mut each = 0;
    for id in ids {
        // Its writes, its action and the networking record must fit.
        if tx.ops.len() + make_writes(&net) + 2 > super::MAX_TXN_OPS
            || tx.bytes + each > CREATED_BYTES_PER_TXN
        {
            break;
        }
        let carves = needs_subnet(&net);
        if carves && carved {
            break;
        }
        let (before, mark, bytes) = (net.clone(), tx.savepoint(), tx.bytes);
        match make_in(tx, new, &t, &w, &mut net, id) {
            Ok(rec) => {
                carved |= carves;
                let first = NewInstanceAction {
                    instance: id,
                    ..action.clone()
                };
                let recorded = rules::new_action(first, rec.tenant, now());
                tx.put(&tx.keys().action(id, 1), &ActionRec::from(&recorded))?;
                each = each.max(tx.bytes - bytes);
                made.push((rec, recorded));
            }
            Err(e) if made.is_empty() => return Err(e),
            Err(e) => {
                // Nothing of this one is written.
                net = before;
                tx.rollback(mark);
                stopped = Some(e);
                break;
            }
        }
    }
    tx.put(&tx.keys().net(t.id), &net)?;
    let made = made
        .into_iter()
        .map(|(rec, action)| Ok((rec.model()?, action)))
        .collect::<Result<Vec<_>>>()?;
    Ok((made, stopped))
}

/// The most event ends [`ActionStore::finish_action_events`] writes in one transaction: a
/// range compare and at most one write each, within etcd's 128.
const ENDS_PER_TXN: usize = 64;

/// Each of `ends` finished in `tx`, answered in order, as [`ActionStore::finish_action_event`]
/// answers one: their instances' ranges read in one round trip, each changed action written
/// once (two ends on one instance both apply, in their order in `ends`).
fn finish_many_in(
    tx: &mut Tx<'_>,
    ends: &[ActionEnd<'_>],
) -> Result<Vec<Result<Option<InstanceAction>>>> {
    let mut instances: Vec<Uuid> = ends.iter().map(|e| e.instance).collect();
    instances.sort_unstable();
    instances.dedup();
    let keys = tx.keys();
    let prefixes: Vec<String> = instances.iter().map(|&i| keys.actions(i)).collect();
    // Each instance's actions with their keys (or why they do not decode), and which changed.
    type Found = (Result<(Vec<Kv>, Vec<InstanceAction>)>, BTreeSet<usize>);
    let mut found: Vec<Found> = tx
        .ranges(&prefixes)?
        .into_iter()
        .map(|kvs| {
            let decoded = decode_actions(kvs).map(|found| found.into_iter().unzip());
            (decoded, BTreeSet::new())
        })
        .collect();
    let at = now();
    let answers = ends
        .iter()
        .map(|e| {
            rules::check_event(e.event)?;
            let Ok(i) = instances.binary_search(&e.instance) else {
                return Ok(None);
            };
            let (decoded, changed) = &mut found[i];
            let (_, actions) = decoded.as_mut().map_err(|e| e.clone())?;
            Ok(
                rules::finish_event(actions, e.target, e.event, e.outcome.clone(), at).map(|n| {
                    changed.insert(n);
                    actions[n].clone()
                }),
            )
        })
        .collect();
    for (decoded, changed) in &found {
        if let Ok((kvs, actions)) = decoded {
            for &n in changed {
                tx.put(&kvs[n].key, &ActionRec::from(&actions[n]))?;
            }
        }
    }
    Ok(answers)
}

impl EtcdStore {
    /// [`ActionStore::start_instances_on`] of starts on any nodes (each with its node), run
    /// together by [`Combiner`](super::combine::Combiner): up to 25 (`STARTS_PER_TXN`) to a
    /// transaction, fewer when their writes would pass `STARTED_BYTES_PER_TXN`. A share that
    /// kept losing to concurrent changes is started one instance after another; any other
    /// failure is every instance's answer in the share.
    fn start_together(
        &self,
        asked: &[(Uuid, ToStart)],
        event: &str,
        outcome: &EventOutcome,
    ) -> Vec<Result<Starting>> {
        let start = |share: &[(Uuid, ToStart)]| {
            self.atomically("starting instances", |tx| {
                starts_in(tx, share, event, outcome)
            })
        };
        let mut answers = Vec::with_capacity(asked.len());
        let mut rest = asked;
        while !rest.is_empty() {
            let share = &rest[..rest.len().min(STARTS_PER_TXN)];
            let answered = match start(share) {
                Ok(done) => done,
                Err(StoreError::Conflict(_)) if share.len() > 1 => share
                    .iter()
                    .flat_map(|one| {
                        start(std::slice::from_ref(one)).unwrap_or_else(|e| vec![Err(e)])
                    })
                    .collect(),
                Err(e) => share.iter().map(|_| Err(e.clone())).collect(),
            };
            // A share answers at least its first instance.
            rest = &rest[answered.len().clamp(1, share.len())..];
            answers.extend(answered);
        }
        answers
    }
}

/// The most instances [`ActionStore::start_instances_on`] starts in one transaction: two reads
/// (record, actions) and at most five writes (record, node index, action, and the state index's
/// two keys) each, within etcd's 128.
const STARTS_PER_TXN: usize = 25;

/// The most bytes [`ActionStore::start_instances_on`] writes in one transaction, as
/// [`CREATED_BYTES_PER_TXN`]: each start rewrites its whole record (over 300 KB with the most
/// metadata in its largest encoding), so a share of such instances goes in several
/// transactions.
const STARTED_BYTES_PER_TXN: usize = CREATED_BYTES_PER_TXN;

/// [`ActionStore::start_instances_on`] of `asked` in `tx` (each on its node), answered in order:
/// their records and actions read in one round trip, each that starts written (record, brief
/// and event), each other left. An instance whose record or actions do not decode answers that
/// error alone, and nothing of it is written. Answers fewer than asked (at least one) when the
/// next start's writes would pass [`STARTED_BYTES_PER_TXN`], or at an instance asked twice: the
/// rest go in the next transaction.
fn starts_in(
    tx: &mut Tx<'_>,
    asked: &[(Uuid, ToStart)],
    event: &str,
    outcome: &EventOutcome,
) -> Result<Vec<Result<Starting>>> {
    let keys = tx.keys();
    let pairs: Vec<(String, String)> = asked
        .iter()
        .map(|(_, one)| (keys.instance(one.id), keys.actions(one.id)))
        .collect();
    let found = tx.gets_and_ranges(&pairs)?;
    let mut seen = BTreeSet::new();
    let mut answers = Vec::with_capacity(asked.len());
    for ((&(node, one), (key, _)), (record, under)) in asked.iter().zip(pairs).zip(found) {
        let id = one.id;
        if !seen.insert(id) {
            // Asked twice (two nodes' reports of one instance, made together): the second goes
            // in the next transaction, which reads what the first wrote.
            break;
        }
        let Some(kv) = record else {
            answers.push(Err(StoreError::not_found("instance", id)));
            continue;
        };
        let record = match kv.decode::<InstanceRec>().and_then(|rec| rec.model()) {
            Ok(record) if one.starts(&record, node) => record,
            Ok(record) => {
                answers.push(Ok(Starting::Left(record)));
                continue;
            }
            Err(e) => {
                answers.push(Err(e));
                continue;
            }
        };
        // The record, its brief (small) and one of its actions, at most.
        let writes = kv.value.len() + 256 + under.iter().map(|a| a.value.len()).max().unwrap_or(0);
        if !answers.is_empty() && tx.bytes + writes > STARTED_BYTES_PER_TXN {
            break;
        }
        let actions = match decode_actions(under) {
            Ok(actions) => actions,
            Err(e) => {
                answers.push(Err(e));
                continue;
            }
        };
        // The update reads the record from here (it writes it only after).
        tx.prefetched.insert(key, Some(kv));
        let mark = tx.savepoint();
        let answer = super::instances::update_in(
            tx,
            Scope::All,
            id,
            Some(record.version),
            &Starting::change(node),
        )
        .map(|started| {
            let finished = finish_in(tx, actions, ActionTarget::Newest, event, outcome.clone());
            Starting::Started(started, finished)
        });
        if answer.is_err() {
            // Nothing of this one is written.
            tx.rollback(mark);
        }
        answers.push(answer);
    }
    Ok(answers)
}
