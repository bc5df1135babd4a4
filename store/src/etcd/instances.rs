//! Instances, subnets and CNCIs over etcd: [`InstanceStore`] for [`EtcdStore`]. A tenant's usage
//! and its subnets with a free address (with their address bitmaps) are one record (`net/<tenant>`)
//! rewritten in the same transaction as every instance or CNCI it counts; a full subnet is a key
//! of its own (`fullnet/<tenant>/<base>`) until an address in it is freed.

use uuid::Uuid;

use super::identity::net_in;
use super::records::*;
use super::{EtcdStore, Kv, Tx};
use crate::common::{check_name, check_same_size, check_version, millis, now};
use crate::net;
use crate::*;

impl InstanceStore for EtcdStore {
    fn create_instance(&self, new: NewInstance) -> Result<Instance> {
        crate::common::check_new_instance(&new)?;
        let id = Uuid::new_v4();
        self.atomically("creating an instance", |tx| {
            create_in(tx, &new, id)?.model()
        })
    }

    fn instance(&self, scope: Scope, id: Uuid) -> Result<Instance> {
        self.read(|tx| instance_in(tx, scope, id))?.0.model()
    }

    /// As many as the store keeps in flight in its side-by-side calls (16).
    fn writers_at_once(&self) -> usize {
        super::IN_FLIGHT
    }

    /// One round trip per 128 instances (the most etcd takes in one transaction).
    fn instances_by_id(&self, ids: &[Uuid]) -> Result<Vec<Option<Instance>>> {
        let keys: Vec<String> = ids.iter().map(|&id| self.keys.instance(id)).collect();
        self.get_many(&keys)?
            .into_iter()
            .map(|kv| {
                kv.map(|kv| kv.decode::<InstanceRec>().and_then(|rec| rec.model()))
                    .transpose()
            })
            .collect()
    }

    /// One range of the node's index, or none while a read of it is kept (`listings.rs`,
    /// `briefs.rs`).
    fn instance_briefs_on(&self, node: Uuid) -> Result<Vec<InstanceBrief>> {
        self.briefs_on(node)
    }

    fn instances(
        &self,
        scope: Scope,
        filter: InstanceFilter,
        page: Page,
    ) -> Result<Paged<Instance>> {
        self.listed(scope, filter, page)
    }

    /// One round trip of key counts in the state index (`listings.rs`).
    fn instance_counts(&self) -> Result<std::collections::BTreeMap<&'static str, u64>> {
        self.counted()
    }

    fn update_instance(
        &self,
        scope: Scope,
        id: Uuid,
        expected: u64,
        change: InstanceChange,
    ) -> Result<Instance> {
        self.atomically("updating an instance", |tx| {
            update_in(tx, scope, id, Some(expected), &change)
        })
    }

    fn delete_instance(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.atomically("deleting an instance", |tx| delete_in(tx, scope, id))
    }

    fn subnets(&self, scope: Scope) -> Result<Vec<Subnet>> {
        self.read(|tx| match scope {
            Scope::Tenant(t) => {
                // The record and the full subnets at one revision.
                let keys = tx.keys();
                let (net, full) = tx.get_and_range(&keys.net(t), &keys.full_subnets(t))?;
                let mut subnets = match net {
                    Some(kv) => kv.decode::<NetRec>()?.subnets,
                    None => Vec::new(),
                };
                for kv in full {
                    subnets.push(kv.decode()?);
                }
                subnets.sort_by_key(|s| s.base);
                Ok(subnets.iter().map(|s| s.model(t)).collect())
            }
            Scope::All => {
                let keys = tx.keys();
                // Block keys are in base order.
                tx.range(&keys.blocks())?
                    .iter()
                    .map(|kv| {
                        let block: BlockRec = kv.decode()?;
                        let base = block_base(kv)?;
                        Ok(Subnet {
                            id: block.subnet,
                            tenant: block.tenant,
                            cidr: net::cidr(base, block.prefix),
                        })
                    })
                    .collect()
            }
        })
    }

    fn create_cnci(&self, subnet_id: Uuid) -> Result<Cnci> {
        let id = Uuid::new_v4();
        self.atomically("creating a CNCI", |tx| {
            let keys = tx.keys();
            let mut owner = None;
            for kv in tx.range(&keys.blocks())? {
                let block: BlockRec = kv.decode()?;
                if block.subnet == subnet_id {
                    owner = Some((block.tenant, block_base(&kv)?));
                    break;
                }
            }
            let (tenant, base) = owner.ok_or_else(|| StoreError::not_found("subnet", subnet_id))?;
            let mut net = net_in(tx, tenant)?;
            let mut full = None;
            let subnet = match find_subnet(tx, tenant, &net, subnet_id, base)? {
                Some(Found::InNet(at)) => &mut net.subnets[at],
                Some(Found::Full(s)) => full.insert(s),
                None => return Err(StoreError::not_found("subnet", subnet_id)),
            };
            if subnet.cnci.is_some() {
                return Err(StoreError::Conflict(format!(
                    "subnet {subnet_id} already has a CNCI"
                )));
            }
            subnet.cnci = Some(id);
            let at = millis(now());
            let rec = CnciRec {
                id,
                tenant,
                subnet: subnet_id,
                base: subnet.base,
                prefix: subnet.prefix,
                state: CnciState::Pending.into(),
                ip: None,
                node: None,
                created_ms: at,
                updated_ms: at,
                version: 1,
            };
            match full {
                Some(s) => tx.put(&keys.full_subnet(tenant, s.base), &s)?,
                None => tx.put(&keys.net(tenant), &net)?,
            }
            tx.put(&keys.cnci(id), &rec)?;
            Ok(rec.model())
        })
    }

    fn cnci(&self, scope: Scope, id: Uuid) -> Result<Cnci> {
        self.read(|tx| cnci_in(tx, scope, id)).map(|c| c.model())
    }

    fn cncis(&self, scope: Scope) -> Result<Vec<Cnci>> {
        let mut all: Vec<CnciRec> = self.read(|tx| {
            let prefix = tx.keys().cncis();
            tx.range(&prefix)?
                .iter()
                .map(Kv::decode::<CnciRec>)
                .collect::<Result<Vec<_>>>()
        })?;
        all.retain(|c| scope.sees(Some(c.tenant)));
        all.sort_by_key(|c| c.base);
        Ok(all.iter().map(CnciRec::model).collect())
    }

    fn update_cnci(&self, id: Uuid, expected: u64, change: CnciChange) -> Result<Cnci> {
        self.atomically("updating a CNCI", |tx| {
            let mut c = cnci_in(tx, Scope::All, id)?;
            check_version("CNCI", id, c.version, expected)?;
            if let Some(state) = change.state {
                c.state = state.into();
            }
            if let Some(ip) = change.ip {
                c.ip = ip;
            }
            if let Some(node) = change.node {
                c.node = node;
            }
            c.version += 1;
            c.updated_ms = millis(now());
            let key = tx.keys().cnci(id);
            tx.put(&key, &c)?;
            Ok(c.model())
        })
    }

    fn delete_cnci(&self, id: Uuid) -> Result<()> {
        self.atomically("deleting a CNCI", |tx| {
            let c = cnci_in(tx, Scope::All, id)?;
            let mut net = net_in(tx, c.tenant)?;
            let keys = tx.keys();
            match find_subnet(tx, c.tenant, &net, c.subnet, c.base)? {
                Some(Found::InNet(at)) => {
                    net.subnets[at].cnci = None;
                    release_if_empty(tx, &mut net, at);
                    tx.put(&keys.net(c.tenant), &net)?;
                }
                Some(Found::Full(mut s)) => {
                    s.cnci = None;
                    tx.put(&keys.full_subnet(c.tenant, s.base), &s)?;
                }
                None => {}
            }
            tx.delete(&keys.cnci(id));
            Ok(())
        })
    }
}

/// Makes instance `id` of `new` in `tx`: its record, its order and reference keys, and its tenant's
/// networking record with its address taken.
pub(super) fn create_in(tx: &mut Tx<'_>, new: &NewInstance, id: Uuid) -> Result<InstanceRec> {
    let (t, w, mut net) = creation_reads(tx, new)?;
    let rec = make_in(tx, new, &t, &w, &mut net, id)?;
    tx.put(&tx.keys().net(t.id), &net)?;
    Ok(rec)
}

/// What making an instance of `new` reads: its tenant, its workload (if the tenant sees it) and
/// the tenant's networking record.
pub(super) fn creation_reads(
    tx: &mut Tx<'_>,
    new: &NewInstance,
) -> Result<(TenantRec, WorkloadRec, NetRec)> {
    let keys = tx.keys();
    let read = tx.get_many(&[
        keys.tenant(new.tenant),
        keys.workload(new.workload),
        keys.net(new.tenant),
    ])?;
    let [t, w, n] = read.as_slice() else {
        return Err(StoreError::Backend("short read".into()));
    };
    let t: TenantRec = t
        .as_ref()
        .ok_or_else(|| StoreError::not_found("tenant", new.tenant))?
        .decode()?;
    let w: WorkloadRec = w
        .as_ref()
        .map(Kv::decode::<WorkloadRec>)
        .transpose()?
        .filter(|w| Scope::Tenant(t.id).sees(w.owner))
        .ok_or_else(|| StoreError::not_found("workload", new.workload))?;
    let net: NetRec = n.as_ref().map(Kv::decode).transpose()?.unwrap_or_default();
    Ok((t, w, net))
}

/// The most writes [`make_in`] adds to a transaction with `net` as it is: the record, its order,
/// reference, state and creation keys, the subnet it fills moved out, a new subnet's block key,
/// and the full subnets that a record of before still holds moved out (up to
/// [`FULL_MOVED_AT_ONCE`]).
pub(super) fn make_writes(net: &NetRec) -> usize {
    let full = net.subnets.iter().filter(|s| s.used >= s.capacity).count();
    7 + full.min(FULL_MOVED_AT_ONCE)
}

/// The creation stamp of an instance made now: the time in milliseconds, shifted left 16 bits,
/// or one more than the last stamp this process gave if that is later. Strictly increasing in a
/// process (instances made one after another are listed in that order, those of one
/// transaction too); across processes, ordered by their clocks.
pub(super) fn creation_stamp() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = u64::try_from(millis(now())).unwrap_or(0) << 16;
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// Whether making one more instance in `tx` would carve a new subnet: none in `net` has room.
pub(super) fn needs_subnet(net: &NetRec) -> bool {
    !net.subnets.iter().any(|s| s.used < s.capacity)
}

/// One instance of `new`, `id`, in `tx`, its tenant `t` and workload `w` read: quota-checked
/// against `net`'s usage and its address taken from `net`, which the caller writes back (once
/// for all the instances it makes in `tx`). At most one per transaction may carve a new subnet
/// ([`needs_subnet`]): a second would not see the block key of the first.
pub(super) fn make_in(
    tx: &mut Tx<'_>,
    new: &NewInstance,
    t: &TenantRec,
    w: &WorkloadRec,
    net: &mut NetRec,
    id: Uuid,
) -> Result<InstanceRec> {
    Quota::from(t.quota).check(&Usage::from(net.usage), w.vcpus, w.memory_mb)?;
    let at = subnet_with_room(tx, t, net)?;
    let subnet = &mut net.subnets[at];
    let ip = subnet
        .first_free()
        .ok_or_else(|| StoreError::Backend(format!("subnet {} count is wrong", subnet.id)))?;
    subnet.mark(ip, true);
    let (subnet_id, base, prefix) = (subnet.id, subnet.base, subnet.prefix);
    move_out_full(tx, t.id, net, at)?;
    let seq = net.next_seq;
    net.next_seq += 1;
    net.usage.instances += 1;
    net.usage.vcpus = net.usage.vcpus.saturating_add(w.vcpus);
    net.usage.memory_mb = net.usage.memory_mb.saturating_add(w.memory_mb);
    let at = millis(now());
    let rec = InstanceRec {
        id,
        tenant: t.id,
        workload: w.id,
        name: new.name.clone(),
        vcpus: w.vcpus,
        memory_mb: w.memory_mb,
        node: None,
        state: "pending".into(),
        reason: None,
        subnet: subnet_id,
        base,
        prefix,
        ip,
        cnci: None,
        created_ms: at,
        updated_ms: at,
        version: 1,
        seq,
        fault: None,
        previous_workload: None,
        key: new.key.as_ref().map(KeyRec::from),
        metadata: new.metadata.clone(),
        locked_by: None,
        user: new.user,
        server_group: None,
        reservation: new.reservation.clone(),
        zone: new.zone.clone(),
        stamp: Some(creation_stamp()),
    };
    let keys = tx.keys();
    tx.put(&keys.instance(id), &rec)?;
    tx.put_text(&keys.order(t.id, seq), &id.to_string());
    if let Some(stamp) = rec.stamp {
        tx.put_text(&keys.created(stamp, id), "");
    }
    tx.put_text(&keys.reference("workload", w.id, id), "");
    tx.put_text(&keys.in_state(&rec.state, id), "");
    Ok(rec)
}

/// The index in `net.subnets` of a subnet with a free address, carving a new one (and writing
/// its block key) if all are full.
fn subnet_with_room(tx: &mut Tx<'_>, t: &TenantRec, net: &mut NetRec) -> Result<usize> {
    if let Some(at) = net.subnets.iter().position(|s| s.used < s.capacity) {
        return Ok(at);
    }
    let keys = tx.keys();
    let taken = tx
        .range(&keys.blocks())?
        .iter()
        .map(|kv| {
            let block: BlockRec = kv.decode()?;
            Ok((block_base(kv)?, block.prefix))
        })
        .collect::<Result<Vec<_>>>()?;
    let base = net::first_free_block(&taken, t.subnet_prefix)
        .ok_or_else(|| StoreError::Exhausted("no subnet left in 172.16.0.0/12".into()))?;
    let subnet = SubnetRec::new(base, t.subnet_prefix);
    tx.put(
        &keys.block(base),
        &BlockRec {
            tenant: t.id,
            subnet: subnet.id,
            prefix: t.subnet_prefix,
        },
    )?;
    let at = net.subnets.partition_point(|s| s.base < base);
    net.subnets.insert(at, subnet);
    Ok(at)
}

/// The base address a block key names.
fn block_base(kv: &Kv) -> Result<u32> {
    kv.key
        .rsplit('/')
        .next()
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| StoreError::Backend(format!("bad block key {}", kv.key)))
}

/// The most full subnets one creation moves out of a record written before they had keys of
/// their own (the rest go with the next creations): a transaction holds at most 128 writes.
const FULL_MOVED_AT_ONCE: usize = 32;

/// Moves subnets of `net` with no free address left to keys of their own: the one at `filled`
/// (which a creation just filled, if it did), and up to [`FULL_MOVED_AT_ONCE`] that a record
/// written before those keys existed still holds.
fn move_out_full(tx: &mut Tx<'_>, tenant: Uuid, net: &mut NetRec, filled: usize) -> Result<()> {
    let full = |s: &SubnetRec| s.used >= s.capacity;
    let mut moving: Vec<usize> = (0..net.subnets.len())
        .filter(|&at| at != filled && full(&net.subnets[at]))
        .take(FULL_MOVED_AT_ONCE)
        .collect();
    if net.subnets.get(filled).is_some_and(full) {
        moving.push(filled);
    }
    // From the last index down, so that each removal leaves the others' indices as they were.
    moving.sort_unstable_by(|a, b| b.cmp(a));
    let keys = tx.keys();
    for at in moving {
        let s = net.subnets.remove(at);
        tx.put(&keys.full_subnet(tenant, s.base), &s)?;
    }
    Ok(())
}

/// Where a subnet of a tenant is kept.
enum Found {
    /// In its networking record, at this index (it has a free address, or a record written before
    /// full subnets had keys of their own holds it).
    InNet(usize),
    /// At a key of its own: full.
    Full(SubnetRec),
}

/// Subnet `id` (at `base`) of `tenant`, whose networking record is `net`.
fn find_subnet(
    tx: &mut Tx<'_>,
    tenant: Uuid,
    net: &NetRec,
    id: Uuid,
    base: u32,
) -> Result<Option<Found>> {
    if let Some(at) = net.subnets.iter().position(|s| s.id == id) {
        return Ok(Some(Found::InNet(at)));
    }
    let key = tx.keys().full_subnet(tenant, base);
    Ok(tx
        .get_json::<SubnetRec>(&key)?
        .filter(|s| s.id == id)
        .map(Found::Full))
}

/// The instance `id` if `scope` sees it, with its key as read.
pub(super) fn instance_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<(InstanceRec, Kv)> {
    let key = tx.keys().instance(id);
    let kv = tx
        .get(&key)?
        .ok_or_else(|| StoreError::not_found("instance", id))?;
    let rec: InstanceRec = kv.decode()?;
    if !scope.sees(Some(rec.tenant)) {
        return Err(StoreError::not_found("instance", id));
    }
    Ok((rec, kv))
}

/// Applies `change` to instance `id` in `tx` (checking its version when `expected` is given).
pub(super) fn update_in(
    tx: &mut Tx<'_>,
    scope: Scope,
    id: Uuid,
    expected: Option<u64>,
    change: &InstanceChange,
) -> Result<Instance> {
    {
        let (mut i, kv) = instance_in(tx, scope, id)?;
        if let Some(expected) = expected {
            check_version("instance", id, i.version, expected)?;
        }
        if let Some(name) = &change.name {
            check_name("instance", name)?;
            i.name = name.clone();
        }
        let in_error = match &change.state {
            Some(state) => matches!(state, InstanceState::Error(_)),
            None => i.state == "error",
        };
        i.fault = change
            .fault_after(i.fault.as_ref().map(FaultRec::model), in_error)
            .as_ref()
            .map(FaultRec::from);
        let keys = tx.keys();
        if let Some(state) = &change.state {
            let (text, reason) = state_text(state);
            if i.state != text {
                tx.delete(&keys.in_state(&i.state, id));
                tx.put_text(&keys.in_state(text, id), "");
            }
            i.state = text.into();
            i.reason = reason;
        }
        if let Some(node) = change.node
            && node != i.node
        {
            // The new node's index key is written below, with the brief.
            if let Some(old) = i.node {
                tx.delete(&keys.on_node(old, id));
            }
            i.node = node;
        }
        if let Some(cnci) = change.cnci {
            i.cnci = cnci;
        }
        if let Some(new) = change.workload
            && new != i.workload
        {
            let w = super::catalog::workload_in(tx, Scope::Tenant(i.tenant), new)?;
            if change.resize {
                let t = super::identity::tenant_in(tx, i.tenant)?;
                let mut net = net_in(tx, i.tenant)?;
                let others = Usage::from(net.usage).without(i.vcpus, i.memory_mb);
                Quota::from(t.quota).check(&others, w.vcpus, w.memory_mb)?;
                net.usage.vcpus = others.vcpus.saturating_add(w.vcpus);
                net.usage.memory_mb = others.memory_mb.saturating_add(w.memory_mb);
                tx.put(&keys.net(i.tenant), &net)?;
                (i.vcpus, i.memory_mb) = (w.vcpus, w.memory_mb);
            } else {
                check_same_size((i.vcpus, i.memory_mb), (w.vcpus, w.memory_mb))?;
            }
            tx.delete(&keys.reference("workload", i.workload, id));
            tx.put_text(&keys.reference("workload", new, id), "");
            i.workload = new;
        }
        if let Some(previous) = change.previous_workload {
            i.previous_workload = previous;
        }
        if let Some(metadata) = &change.metadata {
            Instance::check_metadata(metadata)?;
            i.metadata = metadata.clone();
        }
        if let Some(locked_by) = change.locked_by {
            i.locked_by = locked_by.map(|l| l.as_str().to_string());
        }
        i.version += 1;
        i.updated_ms = millis(now());
        let key = keys.instance(id);
        tx.put(&key, &i)?;
        if let Some(node) = i.node {
            tx.put(&keys.on_node(node, id), &BriefRec::of(&i, kv.create_rev))?;
        }
        i.model()
    }
}

/// Drops subnet `at` of `net` (and its block key) if neither an instance nor a CNCI is left in it.
fn release_if_empty(tx: &mut Tx<'_>, net: &mut NetRec, at: usize) {
    if net.subnets[at].used == 0 && net.subnets[at].cnci.is_none() {
        let gone = net.subnets.remove(at);
        let key = tx.keys().block(gone.base);
        tx.delete(&key);
    }
}

/// Removes instance `id`'s record in `tx`.
pub(super) fn delete_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<()> {
    {
        let (i, _) = instance_in(tx, scope, id)?;
        let mut net = net_in(tx, i.tenant)?;
        let keys = tx.keys();
        match find_subnet(tx, i.tenant, &net, i.subnet, i.base)? {
            Some(Found::InNet(at)) => {
                net.subnets[at].mark(i.ip, false);
                release_if_empty(tx, &mut net, at);
            }
            Some(Found::Full(mut s)) => {
                // An address is free again: back among the subnets with room.
                s.mark(i.ip, false);
                tx.delete(&keys.full_subnet(i.tenant, s.base));
                let at = net.subnets.partition_point(|n| n.base < s.base);
                net.subnets.insert(at, s);
                release_if_empty(tx, &mut net, at);
            }
            None => {}
        }
        net.usage.instances = net.usage.instances.saturating_sub(1);
        net.usage.vcpus = net.usage.vcpus.saturating_sub(i.vcpus);
        net.usage.memory_mb = net.usage.memory_mb.saturating_sub(i.memory_mb);
        tx.put(&keys.net(i.tenant), &net)?;
        tx.delete(&keys.instance(id));
        tx.delete(&keys.in_state(&i.state, id));
        instance_gone(tx, id)?;
        if let Some(group) = i.server_group {
            super::group_recs::forget_member(tx, group, id)?;
        }
        tx.delete(&keys.order(i.tenant, i.seq));
        if let Some(stamp) = i.stamp {
            tx.delete(&keys.created(stamp, id));
        }
        tx.delete(&keys.reference("workload", i.workload, id));
        if let Some(node) = i.node {
            tx.delete(&keys.on_node(node, id));
        }
        Ok(())
    }
}

fn cnci_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<CnciRec> {
    let key = tx.keys().cnci(id);
    tx.get_json::<CnciRec>(&key)?
        .filter(|c| scope.sees(Some(c.tenant)))
        .ok_or_else(|| StoreError::not_found("CNCI", id))
}

/// The record of `instance` goes in `tx`: if it has actions, it joins the gone instances, and the
/// actions of the gone instance pushed past [`GONE_INSTANCES_KEPT`] go.
fn instance_gone(tx: &mut Tx<'_>, instance: Uuid) -> Result<()> {
    let keys = tx.keys();
    if !tx.any_under(&keys.actions(instance))? {
        return Ok(());
    }
    let counter = keys.gone_counter();
    let last: u64 = match tx.get(&counter)? {
        Some(kv) => kv
            .text()?
            .parse()
            .map_err(|e| StoreError::Backend(format!("bad gone-instance counter: {e}")))?,
        None => 0,
    };
    let seq = last + 1;
    tx.put_text(&counter, &seq.to_string());
    tx.put_text(&keys.gone(seq), &instance.to_string());
    if seq > GONE_INSTANCES_KEPT {
        let oldest = keys.gone(seq - GONE_INSTANCES_KEPT);
        if let Some(kv) = tx.get(&oldest)? {
            let id = Uuid::parse_str(kv.text()?)
                .map_err(|e| StoreError::Backend(format!("bad id at {}: {e}", kv.key)))?;
            tx.delete_prefix(&keys.actions(id));
            tx.delete(&oldest);
        }
    }
    Ok(())
}
