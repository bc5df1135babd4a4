//! Instances, subnets and CNCIs in SQLite: [`InstanceStore`] for [`SqliteStore`], over the
//! functions below, each of which runs inside the caller's transaction. Address allocation keeps
//! a `used` count per subnet so that picking a subnet does not scan the tenant's instances.

use std::net::{IpAddr, Ipv4Addr};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use uuid::Uuid;

use super::catalog::workload;
use super::flavors::flavor;
use super::identity::tenant;
use super::{Cached, SqliteStore, bad_column, int, opt_uuid_at, u32_at, u64_at, uuid_at};
use crate::common::{check_name, check_same_size, check_version, from_millis, millis, now};
use crate::net;
use crate::*;

impl InstanceStore for SqliteStore {
    fn create_instance(&self, new: NewInstance) -> Result<Instance> {
        self.write(|tx| create(tx, new))
    }
    fn instance(&self, scope: Scope, id: Uuid) -> Result<Instance> {
        self.read(|tx| get(tx, scope, id))
    }
    fn instances(
        &self,
        scope: Scope,
        filter: InstanceFilter,
        page: Page,
    ) -> Result<Paged<Instance>> {
        self.read(|tx| list(tx, scope, filter, page))
    }
    fn batch(&self, f: &mut dyn FnMut()) -> Result<()> {
        self.run_batch(f)
    }
    fn instance_briefs_on(&self, node: Uuid) -> Result<Vec<InstanceBrief>> {
        self.read(|tx| briefs_on(tx, node))
    }
    fn instance_counts(&self) -> Result<std::collections::BTreeMap<&'static str, u64>> {
        self.read(counts)
    }
    fn update_instance(
        &self,
        scope: Scope,
        id: Uuid,
        expected: u64,
        change: InstanceChange,
    ) -> Result<Instance> {
        self.write(|tx| update(tx, scope, id, expected, change))
    }
    fn delete_instance(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.write(|tx| delete(tx, scope, id))
    }

    fn subnets(&self, scope: Scope) -> Result<Vec<Subnet>> {
        self.read(|tx| subnets(tx, scope))
    }
    fn create_cnci(&self, subnet: Uuid) -> Result<Cnci> {
        self.write(|tx| create_cnci(tx, subnet))
    }
    fn cnci(&self, scope: Scope, id: Uuid) -> Result<Cnci> {
        self.read(|tx| cnci(tx, scope, id))
    }
    fn cncis(&self, scope: Scope) -> Result<Vec<Cnci>> {
        self.read(|tx| cncis(tx, scope))
    }
    fn update_cnci(&self, id: Uuid, expected: u64, change: CnciChange) -> Result<Cnci> {
        self.write(|tx| update_cnci(tx, id, expected, change))
    }
    fn delete_cnci(&self, id: Uuid) -> Result<()> {
        self.write(|tx| delete_cnci(tx, id))
    }
}

const INSTANCE_COLS: &str = "i.id, i.tenant_id, i.workload_id, i.name, i.vcpus, i.memory_mb, \
     i.node, i.state, i.reason, s.base, s.prefix, i.ip, i.cnci, i.created, i.updated, i.version, \
     i.fault_reason, i.fault_message, i.fault_created, i.previous_workload_id, i.key_name, \
     i.key_data, i.metadata, i.locked_by, i.user_id, i.reservation_id, i.zone";
/// How many columns [`INSTANCE_COLS`] reads (a query may read more after them).
const INSTANCE_NCOLS: usize = 27;
const INSTANCE_FROM: &str = "instances i JOIN subnets s ON s.id = i.subnet_id";

fn state_text(state: &InstanceState) -> (&'static str, Option<&str>) {
    state.text()
}

fn ipv4_at(row: &Row<'_>, idx: usize) -> rusqlite::Result<u32> {
    u32_at(row, idx)
}

fn instance_row(row: &Row<'_>) -> rusqlite::Result<Instance> {
    let state: String = row.get(7)?;
    let reason: Option<String> = row.get(8)?;
    let state = InstanceState::from_name(&state, reason)
        .ok_or_else(|| bad_column(7, format!("unknown state {state:?}")))?;
    let prefix = u8::try_from(u32_at(row, 10)?).map_err(|e| bad_column(10, e.to_string()))?;
    let ip = Ipv4Addr::from(ipv4_at(row, 11)?);
    let fault_reason: Option<String> = row.get(16)?;
    let fault_message: Option<String> = row.get(17)?;
    let fault_created: Option<i64> = row.get(18)?;
    let fault = fault_reason.map(|reason| Fault {
        reason,
        message: fault_message.unwrap_or_default(),
        created: from_millis(fault_created.unwrap_or_default()),
    });
    let key_name: Option<String> = row.get(20)?;
    let key_data: Option<String> = row.get(21)?;
    let key = key_name.map(|name| InstanceKey {
        name,
        public_key: key_data.unwrap_or_default(),
    });
    let metadata: String = row.get(22)?;
    let metadata: Metadata =
        serde_json::from_str(&metadata).map_err(|e| bad_column(22, e.to_string()))?;
    let locked_by: Option<String> = row.get(23)?;
    let locked_by = match locked_by {
        None => None,
        Some(name) => Some(
            LockedBy::from_name(&name)
                .ok_or_else(|| bad_column(23, format!("unknown locker {name:?}")))?,
        ),
    };
    Ok(Instance {
        id: uuid_at(row, 0)?,
        tenant: uuid_at(row, 1)?,
        workload: uuid_at(row, 2)?,
        name: row.get(3)?,
        vcpus: u32_at(row, 4)?,
        memory_mb: u64_at(row, 5)?,
        node: opt_uuid_at(row, 6)?,
        state,
        subnet: net::cidr(ipv4_at(row, 9)?, prefix),
        ip,
        mac: net::mac_for(ip),
        cnci: opt_uuid_at(row, 12)?,
        fault,
        created: from_millis(row.get(13)?),
        updated: from_millis(row.get(14)?),
        version: u64_at(row, 15)?,
        previous_workload: opt_uuid_at(row, 19)?,
        key,
        metadata,
        locked_by,
        user: opt_uuid_at(row, 24)?,
        reservation: row.get(25)?,
        zone: row.get(26)?,
    })
}

pub(super) fn usage(tx: &Connection, tenant_id: Uuid) -> Result<Usage> {
    Ok(tx.query_row(
        "SELECT COUNT(*), COALESCE(SUM(vcpus), 0), COALESCE(SUM(memory_mb), 0)
         FROM instances WHERE tenant_id = ?1",
        [tenant_id.to_string()],
        |r| {
            Ok(Usage {
                instances: u32_at(r, 0)?,
                vcpus: u32_at(r, 1)?,
                memory_mb: u64_at(r, 2)?,
            })
        },
    )?)
}

/// A subnet of the tenant with a free address, carving a new one if all are full: its id, base,
/// prefix.
fn subnet_with_room(tx: &Connection, t: &Tenant) -> Result<(Uuid, u32, u8)> {
    let found = tx
        .query_row_cached(
            "SELECT id, base, prefix FROM subnets WHERE tenant_id = ?1 AND used < capacity
             ORDER BY base LIMIT 1",
            [t.id.to_string()],
            |r| Ok((uuid_at(r, 0)?, ipv4_at(r, 1)?, u32_at(r, 2)?)),
        )
        .optional()?;
    if let Some((id, base, prefix)) = found {
        let prefix = u8::try_from(prefix).map_err(|e| StoreError::Backend(e.to_string()))?;
        return Ok((id, base, prefix));
    }
    let mut stmt = tx.prepare_cached("SELECT base, prefix FROM subnets ORDER BY base")?;
    let taken = stmt
        .query_map([], |r| {
            let prefix = u8::try_from(u32_at(r, 1)?).map_err(|e| bad_column(1, e.to_string()))?;
            Ok((ipv4_at(r, 0)?, prefix))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let base = net::first_free_block(&taken, t.subnet_prefix)
        .ok_or_else(|| StoreError::Exhausted("no subnet left in 172.16.0.0/12".into()))?;
    let (first, last) = net::instance_hosts(base, t.subnet_prefix);
    let id = Uuid::new_v4();
    tx.execute(
        "INSERT INTO subnets (id, tenant_id, base, prefix, capacity, used) VALUES (?1, ?2, ?3, ?4, ?5, 0)",
        params![id.to_string(), t.id.to_string(), base, t.subnet_prefix, last - first + 1],
    )?;
    Ok((id, base, t.subnet_prefix))
}

pub(super) fn create(tx: &Connection, new: NewInstance) -> Result<Instance> {
    crate::common::check_new_instance(&new)?;
    let t = tenant(tx, new.tenant)?;
    let w = workload(tx, Scope::Tenant(t.id), new.workload)?;
    let flavor = flavor(tx, Scope::All, w.flavor)?;
    // The usage sums every instance of the tenant: skipped when nothing is limited, so a
    // tenant without a quota does not pay a scan of its instances per launch.
    if t.quota != Quota::default() {
        t.quota
            .check(&usage(tx, t.id)?, flavor.vcpus, flavor.memory_mb)?;
    }
    let (subnet_id, base, prefix) = subnet_with_room(tx, &t)?;
    let mut stmt =
        tx.prepare_cached("SELECT ip FROM instances WHERE subnet_id = ?1 ORDER BY ip")?;
    let taken = stmt
        .query_map([subnet_id.to_string()], |r| ipv4_at(r, 0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let ip = net::first_free_host(base, prefix, &taken)
        .ok_or_else(|| StoreError::Backend(format!("subnet {subnet_id} count is wrong")))?;
    let at = now();
    let instance = Instance {
        id: Uuid::new_v4(),
        tenant: t.id,
        workload: w.id,
        name: new.name,
        vcpus: flavor.vcpus,
        memory_mb: flavor.memory_mb,
        node: None,
        state: InstanceState::Pending,
        subnet: net::cidr(base, prefix),
        ip: Ipv4Addr::from(ip),
        mac: net::mac_for(Ipv4Addr::from(ip)),
        cnci: None,
        fault: None,
        created: at,
        updated: at,
        version: 1,
        previous_workload: None,
        key: new.key,
        metadata: new.metadata,
        locked_by: None,
        user: new.user,
        reservation: new.reservation,
        zone: new.zone,
    };
    tx.prepare_cached(
        "INSERT INTO instances (id, tenant_id, workload_id, name, vcpus, memory_mb, node, state,
             reason, subnet_id, ip, cnci, created, updated, version, key_name, key_data,
             metadata, user_id, reservation_id, zone)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, 'pending', NULL, ?7, ?8, NULL, ?9, ?9, 1, ?10,
             ?11, ?12, ?13, ?14, ?15)",
    )?
    .execute(params![
        instance.id.to_string(),
        t.id.to_string(),
        w.id.to_string(),
        instance.name,
        instance.vcpus,
        int(instance.memory_mb)?,
        subnet_id.to_string(),
        ip,
        millis(at),
        instance.key.as_ref().map(|k| k.name.as_str()),
        instance.key.as_ref().map(|k| k.public_key.as_str()),
        metadata_text(&instance.metadata)?,
        instance.user.map(|u| u.to_string()),
        instance.reservation,
        instance.zone,
    ])?;
    tx.execute_cached(
        "UPDATE subnets SET used = used + 1 WHERE id = ?1",
        [subnet_id.to_string()],
    )?;
    Ok(instance)
}

/// The SQL condition (on `i.tenant_id`) and its parameter for `scope`.
pub(super) fn scope_cond(scope: Scope) -> (String, Option<Value>) {
    match scope {
        Scope::All => (String::new(), None),
        Scope::Tenant(t) => (
            " AND i.tenant_id = ?".into(),
            Some(Value::Text(t.to_string())),
        ),
    }
}

fn with_subnet_id(tx: &Connection, scope: Scope, id: Uuid) -> Result<(Instance, Uuid)> {
    let (cond, param) = scope_cond(scope);
    let mut args = vec![Value::Text(id.to_string())];
    args.extend(param);
    tx.prepare_cached(&format!(
        "SELECT {INSTANCE_COLS}, i.subnet_id FROM {INSTANCE_FROM} WHERE i.id = ?{cond}"
    ))?
    .query_row(params_from_iter(args), |r| {
        Ok((instance_row(r)?, uuid_at(r, INSTANCE_NCOLS)?))
    })
    .optional()?
    .ok_or_else(|| StoreError::not_found("instance", id))
}

pub(super) fn get(tx: &Connection, scope: Scope, id: Uuid) -> Result<Instance> {
    with_subnet_id(tx, scope, id).map(|(i, _)| i)
}

pub(super) fn list(
    tx: &Connection,
    scope: Scope,
    filter: InstanceFilter,
    page: Page,
) -> Result<Paged<Instance>> {
    page.check()?;
    let (cond, param) = scope_cond(scope);
    let after: i64 = match page.marker {
        None => 0,
        Some(marker) => {
            let mut args = vec![Value::Text(marker.to_string())];
            args.extend(param.clone());
            tx.prepare_cached(&format!(
                "SELECT i.seq FROM instances i WHERE i.id = ?{cond}"
            ))?
            .query_row(params_from_iter(args), |r| r.get(0))
            .optional()?
            .ok_or_else(|| StoreError::Invalid(format!("unknown marker {marker}")))?
        }
    };
    let mut sql = format!("SELECT {INSTANCE_COLS} FROM {INSTANCE_FROM} WHERE i.seq > ?{cond}");
    let mut args = vec![Value::Integer(after)];
    args.extend(param);
    if let Some(node) = filter.node {
        sql.push_str(" AND i.node = ?");
        args.push(Value::Text(node.to_string()));
    }
    sql.push_str(" ORDER BY i.seq LIMIT ?");
    args.push(Value::Integer(i64::from(page.limit) + 1));
    let mut stmt = tx.prepare_cached(&sql)?;
    let mut items = stmt
        .query_map(params_from_iter(args), instance_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let more = items.len() > page.limit as usize;
    items.truncate(page.limit as usize);
    let next = if more {
        items.last().map(|i| i.id)
    } else {
        None
    };
    Ok(Paged { items, next })
}

/// The instances on `node` in brief: four columns, not the whole record.
fn briefs_on(tx: &Connection, node: Uuid) -> Result<Vec<InstanceBrief>> {
    let mut stmt = tx.prepare_cached(
        "SELECT id, state, reason, node, version FROM instances WHERE node = ? ORDER BY seq",
    )?;
    let rows = stmt.query_map([node.to_string()], |row| {
        let state: String = row.get(1)?;
        let reason: Option<String> = row.get(2)?;
        let state = InstanceState::from_name(&state, reason)
            .ok_or_else(|| bad_column(1, format!("unknown state {state:?}")))?;
        Ok(InstanceBrief {
            id: uuid_at(row, 0)?,
            state,
            node: opt_uuid_at(row, 3)?,
            version: u64_at(row, 4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// How many instances are in each state, counted by SQLite.
fn counts(tx: &Connection) -> Result<std::collections::BTreeMap<&'static str, u64>> {
    let mut stmt = tx.prepare_cached("SELECT state, COUNT(*) FROM instances GROUP BY state")?;
    let rows = stmt.query_map([], |row| {
        let state: String = row.get(0)?;
        let name = InstanceState::NAMES
            .iter()
            .find(|n| **n == state)
            .ok_or_else(|| bad_column(0, format!("unknown state {state:?}")))?;
        Ok((*name, u64_at(row, 1)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn update(
    tx: &Connection,
    scope: Scope,
    id: Uuid,
    expected: u64,
    change: InstanceChange,
) -> Result<Instance> {
    let mut i = get(tx, scope, id)?;
    check_version("instance", id, i.version, expected)?;
    let in_error = matches!(
        change.state.as_ref().unwrap_or(&i.state),
        InstanceState::Error(_)
    );
    i.fault = change.fault_after(i.fault.take(), in_error);
    if let Some(name) = change.name {
        check_name("instance", &name)?;
        i.name = name;
    }
    if let Some(state) = change.state {
        i.state = state;
    }
    if let Some(node) = change.node {
        i.node = node;
    }
    if let Some(cnci) = change.cnci {
        i.cnci = cnci;
    }
    if let Some(new) = change.workload {
        let w = workload(tx, Scope::Tenant(i.tenant), new)?;
        let f = flavor(tx, Scope::All, w.flavor)?;
        if change.resize {
            let t = tenant(tx, i.tenant)?;
            if t.quota != Quota::default() {
                let others = usage(tx, i.tenant)?.without(i.vcpus, i.memory_mb);
                t.quota.check(&others, f.vcpus, f.memory_mb)?;
            }
            (i.vcpus, i.memory_mb) = (f.vcpus, f.memory_mb);
        } else {
            check_same_size((i.vcpus, i.memory_mb), (f.vcpus, f.memory_mb))?;
        }
        i.workload = new;
    }
    if let Some(previous) = change.previous_workload {
        i.previous_workload = previous;
    }
    if let Some(metadata) = change.metadata {
        Instance::check_metadata(&metadata)?;
        i.metadata = metadata;
    }
    if let Some(locked_by) = change.locked_by {
        i.locked_by = locked_by;
    }
    i.version += 1;
    i.updated = now();
    let (state, reason) = state_text(&i.state);
    let fault = i.fault.as_ref();
    tx.prepare_cached(
        "UPDATE instances SET name = ?2, state = ?3, reason = ?4, node = ?5, cnci = ?6,
             updated = ?7, version = ?8, fault_reason = ?9, fault_message = ?10,
             fault_created = ?11, workload_id = ?12, vcpus = ?13, memory_mb = ?14,
             previous_workload_id = ?15, metadata = ?16, locked_by = ?17 WHERE id = ?1",
    )?
    .execute(params![
        id.to_string(),
        i.name,
        state,
        reason,
        i.node.map(|n| n.to_string()),
        i.cnci.map(|c| c.to_string()),
        millis(i.updated),
        int(i.version)?,
        fault.map(|f| f.reason.as_str()),
        fault.map(|f| f.message.as_str()),
        fault.map(|f| millis(f.created)),
        i.workload.to_string(),
        i.vcpus,
        int(i.memory_mb)?,
        i.previous_workload.map(|w| w.to_string()),
        metadata_text(&i.metadata)?,
        i.locked_by.map(LockedBy::as_str),
    ])?;
    // What was written: times in milliseconds, as a read gives them back.
    if let Some(f) = &mut i.fault {
        f.created = from_millis(millis(f.created));
    }
    Ok(i)
}

/// An instance's metadata as its column holds it.
fn metadata_text(metadata: &Metadata) -> Result<String> {
    serde_json::to_string(metadata).map_err(|e| StoreError::Backend(e.to_string()))
}

/// Frees a subnet left with neither instances nor a CNCI.
fn release_subnet_if_empty(tx: &Connection, subnet_id: Uuid) -> Result<()> {
    tx.execute(
        "DELETE FROM subnets WHERE id = ?1 AND used = 0
             AND NOT EXISTS (SELECT 1 FROM cncis WHERE subnet_id = ?1)",
        [subnet_id.to_string()],
    )?;
    Ok(())
}

pub(super) fn delete(tx: &Connection, scope: Scope, id: Uuid) -> Result<()> {
    let (instance, subnet_id) = with_subnet_id(tx, scope, id)?;
    // Its port's groups go with its row (ON DELETE CASCADE); its floating IPs stay the
    // tenant's, disassociated.
    crate::networking::forget_port(&mut super::networking::SqliteNet(tx), instance.tenant, id)?;
    tx.execute("DELETE FROM instances WHERE id = ?1", [id.to_string()])?;
    instance_gone(tx, id)?;
    tx.execute(
        "UPDATE subnets SET used = used - 1 WHERE id = ?1",
        [subnet_id.to_string()],
    )?;
    release_subnet_if_empty(tx, subnet_id)
}

fn subnet_row(row: &Row<'_>) -> rusqlite::Result<Subnet> {
    let prefix = u8::try_from(u32_at(row, 3)?).map_err(|e| bad_column(3, e.to_string()))?;
    Ok(Subnet {
        id: uuid_at(row, 0)?,
        tenant: uuid_at(row, 1)?,
        cidr: net::cidr(ipv4_at(row, 2)?, prefix),
    })
}

pub(super) fn subnets(tx: &Connection, scope: Scope) -> Result<Vec<Subnet>> {
    let (cond, param) = scope_cond(scope);
    let cond = cond.replace("i.tenant_id", "tenant_id");
    let mut stmt = tx.prepare(&format!(
        "SELECT id, tenant_id, base, prefix FROM subnets WHERE 1{cond} ORDER BY base"
    ))?;
    let rows = stmt.query_map(params_from_iter(param), subnet_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

const CNCI_COLS: &str = "c.id, c.tenant_id, c.subnet_id, s.base, s.prefix, c.state, c.ip, c.node, \
     c.created, c.updated, c.version";

fn cnci_state_text(state: CnciState) -> &'static str {
    match state {
        CnciState::Pending => "pending",
        CnciState::Active => "active",
        CnciState::Exited => "exited",
        CnciState::Failed => "failed",
    }
}

fn cnci_row(row: &Row<'_>) -> rusqlite::Result<Cnci> {
    let prefix = u8::try_from(u32_at(row, 4)?).map_err(|e| bad_column(4, e.to_string()))?;
    let state: String = row.get(5)?;
    let ip: Option<String> = row.get(6)?;
    Ok(Cnci {
        id: uuid_at(row, 0)?,
        tenant: uuid_at(row, 1)?,
        subnet: uuid_at(row, 2)?,
        cidr: net::cidr(ipv4_at(row, 3)?, prefix),
        state: match state.as_str() {
            "pending" => CnciState::Pending,
            "active" => CnciState::Active,
            "exited" => CnciState::Exited,
            "failed" => CnciState::Failed,
            other => return Err(bad_column(5, format!("unknown CNCI state {other:?}"))),
        },
        ip: ip
            .map(|s| {
                s.parse::<IpAddr>()
                    .map_err(|e| bad_column(6, e.to_string()))
            })
            .transpose()?,
        node: opt_uuid_at(row, 7)?,
        created: from_millis(row.get(8)?),
        updated: from_millis(row.get(9)?),
        version: u64_at(row, 10)?,
    })
}

pub(super) fn create_cnci(tx: &Connection, subnet_id: Uuid) -> Result<Cnci> {
    let subnet = tx
        .query_row(
            "SELECT id, tenant_id, base, prefix FROM subnets WHERE id = ?1",
            [subnet_id.to_string()],
            subnet_row,
        )
        .optional()?
        .ok_or_else(|| StoreError::not_found("subnet", subnet_id))?;
    let at = now();
    let cnci = Cnci {
        id: Uuid::new_v4(),
        tenant: subnet.tenant,
        subnet: subnet.id,
        cidr: subnet.cidr,
        state: CnciState::Pending,
        ip: None,
        node: None,
        created: at,
        updated: at,
        version: 1,
    };
    tx.execute(
        "INSERT INTO cncis (id, tenant_id, subnet_id, state, ip, node, created, updated, version)
         VALUES (?1, ?2, ?3, 'pending', NULL, NULL, ?4, ?4, 1)",
        params![
            cnci.id.to_string(),
            cnci.tenant.to_string(),
            subnet_id.to_string(),
            millis(at)
        ],
    )
    .map_err(|e| match StoreError::from(e) {
        StoreError::Conflict(_) => {
            StoreError::Conflict(format!("subnet {subnet_id} already has a CNCI"))
        }
        other => other,
    })?;
    Ok(cnci)
}

pub(super) fn cnci(tx: &Connection, scope: Scope, id: Uuid) -> Result<Cnci> {
    let (cond, param) = scope_cond(scope);
    let cond = cond.replace("i.", "c.");
    let mut args = vec![Value::Text(id.to_string())];
    args.extend(param);
    tx.query_row(
        &format!(
            "SELECT {CNCI_COLS} FROM cncis c JOIN subnets s ON s.id = c.subnet_id WHERE c.id = ?{cond}"
        ),
        params_from_iter(args),
        cnci_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("CNCI", id))
}

pub(super) fn cncis(tx: &Connection, scope: Scope) -> Result<Vec<Cnci>> {
    let (cond, param) = scope_cond(scope);
    let cond = cond.replace("i.", "c.");
    let mut stmt = tx.prepare(&format!(
        "SELECT {CNCI_COLS} FROM cncis c JOIN subnets s ON s.id = c.subnet_id WHERE 1{cond} ORDER BY s.base"
    ))?;
    let rows = stmt.query_map(params_from_iter(param), cnci_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn update_cnci(
    tx: &Connection,
    id: Uuid,
    expected: u64,
    change: CnciChange,
) -> Result<Cnci> {
    let mut c = cnci(tx, Scope::All, id)?;
    check_version("CNCI", id, c.version, expected)?;
    if let Some(state) = change.state {
        c.state = state;
    }
    if let Some(ip) = change.ip {
        c.ip = ip;
    }
    if let Some(node) = change.node {
        c.node = node;
    }
    c.version += 1;
    c.updated = now();
    tx.execute(
        "UPDATE cncis SET state = ?2, ip = ?3, node = ?4, updated = ?5, version = ?6 WHERE id = ?1",
        params![
            id.to_string(),
            cnci_state_text(c.state),
            c.ip.map(|ip| ip.to_string()),
            c.node.map(|n| n.to_string()),
            millis(c.updated),
            int(c.version)?
        ],
    )?;
    Ok(c)
}

pub(super) fn delete_cnci(tx: &Connection, id: Uuid) -> Result<()> {
    let c = cnci(tx, Scope::All, id)?;
    tx.execute("DELETE FROM cncis WHERE id = ?1", [id.to_string()])?;
    release_subnet_if_empty(tx, c.subnet)
}

/// The record of `instance` went (in the caller's transaction): if it has actions, it joins the
/// gone instances, and the actions of the gone instances past [`GONE_INSTANCES_KEPT`] go.
fn instance_gone(tx: &Connection, instance: Uuid) -> Result<()> {
    let added = tx
        .prepare_cached(
            "INSERT INTO gone_instances (instance_id) SELECT ?1
                 WHERE EXISTS (SELECT 1 FROM instance_actions WHERE instance_id = ?1)",
        )?
        .execute([instance.to_string()])?;
    if added == 0 {
        return Ok(());
    }
    let cut = tx.last_insert_rowid() - int(GONE_INSTANCES_KEPT)?;
    if cut <= 0 {
        return Ok(());
    }
    tx.prepare_cached(
        "DELETE FROM instance_actions WHERE instance_id IN
             (SELECT instance_id FROM gone_instances WHERE seq <= ?1)",
    )?
    .execute([cut])?;
    tx.prepare_cached("DELETE FROM gone_instances WHERE seq <= ?1")?
        .execute([cut])?;
    Ok(())
}
