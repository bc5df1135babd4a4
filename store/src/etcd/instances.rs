//! Instances, subnets and CNCIs over etcd: [`InstanceStore`] for [`EtcdStore`]. A tenant's usage
//! and its subnets with a free address (with their address bitmaps) are one record (`net/<tenant>`)
//! rewritten in the same transaction as every instance or CNCI it counts; a full subnet is a key
//! of its own (`fullnet/<tenant>/<base>`) until an address in it is freed.

use etcd_client::{GetOptions, TxnOp};
use uuid::Uuid;

use super::identity::net_in;
use super::keys::prefix_end;
use super::records::*;
use super::{EtcdStore, Kv, Tx};
use crate::common::{check_name, check_same_size, check_version, millis, now};
use crate::net;
use crate::*;

impl EtcdStore {
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
}

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

    /// One range: the node's index keys hold the briefs (schema 3). Keys written by code of
    /// schema 2 hold none: their records are read (one more round trip). None while this store
    /// has written nothing under the node's index since its last read, for at most
    /// [`EtcdOptions::briefs_kept`](super::EtcdOptions::briefs_kept): that read is answered
    /// again (`briefs.rs`).
    fn instance_briefs_on(&self, node: Uuid) -> Result<Vec<InstanceBrief>> {
        let mark = match self.briefs.kept(node) {
            Ok(briefs) => return Ok(briefs),
            Err(mark) => mark,
        };
        let prefix = self.keys.on_nodes(node);
        let (_, index) = self.range(&prefix, &prefix_end(&prefix), 0, |o| o)?;
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
        let briefs: Vec<InstanceBrief> = briefs.into_iter().map(|(_, brief)| brief).collect();
        // Kept only when the index held them all: a record's write need not touch the index.
        if unbriefed.is_empty() {
            self.briefs.keep(mark, &briefs);
        }
        Ok(briefs)
    }

    fn instances(
        &self,
        scope: Scope,
        filter: InstanceFilter,
        page: Page,
    ) -> Result<Paged<Instance>> {
        if page.limit == 0 || page.limit > Page::MAX_LIMIT {
            return Err(StoreError::Invalid(format!(
                "page limit must be 1 to {}",
                Page::MAX_LIMIT
            )));
        }
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

    /// Every instance record read in key order, in batches at one revision (none sorted by
    /// etcd, only the state of each decoded): the default pages in creation order, and etcd
    /// sorts the whole range again for every page.
    /// One round trip: a count of each state's keys in the state index, when every instance
    /// has its key there; in a prefix raised from schema 2, every record read.
    fn instance_counts(&self) -> Result<std::collections::BTreeMap<&'static str, u64>> {
        let marker = self.keys.state_index();
        let states = InstanceState::NAMES;
        let mut prefixes = vec![marker];
        prefixes.extend(states.iter().map(|s| self.keys.in_states(s)));
        let counted = self.counts(&prefixes)?;
        let (indexed, counts) = counted.split_at(1);
        if indexed[0] == 0 {
            return self.counts_read_whole();
        }
        Ok(states
            .iter()
            .zip(counts)
            .filter(|&(_, &n)| n > 0)
            .map(|(&state, &n)| (state, n))
            .collect())
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

impl EtcdStore {
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
