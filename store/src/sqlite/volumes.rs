//! Tenants' volumes in SQLite: [`VolumeStore`] for [`SqliteStore`], one row per volume in
//! `volumes` (migration 13; an attachment's `delete_on_termination`: migration 15), and a
//! tenant's own quota as its row in `volume_quotas` (migration 16; no row: the caller's defaults;
//! going with the tenant by its foreign key). Every write is one `BEGIN IMMEDIATE` transaction,
//! so a quota check (the quota read in it too) and the write it allows are never split by
//! another writer.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};
use uuid::Uuid;

use super::catalog::image;
use super::identity::tenant;
use super::{SqliteStore, opt_uuid_at, u32_at, u64_at, uuid_at};
use crate::common::{from_millis, millis, now};
use crate::*;

impl VolumeStore for SqliteStore {
    fn create_volume(&self, new: NewVolume, defaults: VolumeLimits) -> Result<Volume> {
        new.check()?;
        self.write(|tx| create(tx, new, defaults))
    }
    fn volume(&self, scope: Scope, id: Uuid) -> Result<Volume> {
        self.read(|tx| get(tx, scope, id))
    }
    fn volumes(&self, scope: Scope) -> Result<Vec<Volume>> {
        self.read(|tx| list(tx, scope))
    }
    fn change_volume(
        &self,
        scope: Scope,
        id: Uuid,
        change: VolumeChange,
        defaults: VolumeLimits,
    ) -> Result<Volume> {
        self.write(|tx| change_volume(tx, scope, id, &change, defaults))
    }
    fn delete_volume(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.write(|tx| {
            let volume = get(tx, scope, id)?;
            volume.check_detached()?;
            tx.execute("DELETE FROM volumes WHERE id = ?1", [id.to_string()])?;
            Ok(())
        })
    }
    fn tenant_volume_usage(&self, t: Uuid) -> Result<(u32, u64)> {
        self.read(|tx| {
            tenant(tx, t)?;
            usage(tx, t)
        })
    }
    fn volume_quota(&self, t: Uuid, defaults: VolumeLimits) -> Result<VolumeLimits> {
        self.read(|tx| {
            tenant(tx, t)?;
            limits_of(tx, t, defaults)
        })
    }
    fn set_volume_quota(&self, t: Uuid, quota: VolumeLimits) -> Result<VolumeLimits> {
        quota.check_settable()?;
        self.write(|tx| {
            tenant(tx, t)?;
            let (count, gigabytes) = usage(tx, t)?;
            quota.check_covers(count, gigabytes)?;
            let gigabytes = quota
                .gigabytes
                .map(|g| i64::try_from(g).unwrap_or(i64::MAX));
            tx.execute(
                "INSERT INTO volume_quotas (tenant_id, volumes, gigabytes) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (tenant_id) DO UPDATE \
                 SET volumes = excluded.volumes, gigabytes = excluded.gigabytes",
                params![t.to_string(), quota.volumes, gigabytes],
            )?;
            Ok(quota)
        })
    }
}

const COLS: &str = "id, owner, name, description, size_gb, status, image_id, node, \
     attachment_id, attachment_instance, attachment_device, attachment_attached, bootable, \
     created, updated, attachment_delete_on_termination";

fn row(row: &Row<'_>) -> rusqlite::Result<Volume> {
    let status: String = row.get(5)?;
    let attachment = match opt_uuid_at(row, 8)? {
        Some(id) => Some(VolumeAttachment {
            id,
            instance: uuid_at(row, 9)?,
            device: row.get(10)?,
            attached: from_millis(row.get(11)?),
            delete_on_termination: row.get(15)?,
        }),
        None => None,
    };
    Ok(Volume {
        id: uuid_at(row, 0)?,
        owner: uuid_at(row, 1)?,
        name: row.get(2)?,
        description: row.get(3)?,
        size_gb: u32_at(row, 4)?,
        status: VolumeStatus::from_name(&status)
            .ok_or_else(|| super::bad_column(5, format!("unknown volume status {status:?}")))?,
        image: opt_uuid_at(row, 6)?,
        node: opt_uuid_at(row, 7)?,
        attachment,
        bootable: row.get(12)?,
        created: from_millis(row.get(13)?),
        updated: from_millis(row.get(14)?),
    })
}

/// The tenant's volumes: how many, and their GiB in all.
fn usage(tx: &Connection, owner: Uuid) -> Result<(u32, u64)> {
    let (count, gigabytes) = tx.query_row(
        "SELECT COUNT(*), COALESCE(SUM(size_gb), 0) FROM volumes WHERE owner = ?1",
        [owner.to_string()],
        |r| Ok((u32_at(r, 0)?, u64_at(r, 1)?)),
    )?;
    Ok((count, gigabytes))
}

/// The tenant's own quota, if it has one (`NULL` figures: unlimited).
fn own_quota(tx: &Connection, owner: Uuid) -> Result<Option<VolumeLimits>> {
    let quota = tx
        .prepare_cached("SELECT volumes, gigabytes FROM volume_quotas WHERE tenant_id = ?1")?
        .query_row([owner.to_string()], |r| {
            let volumes: Option<i64> = r.get(0)?;
            let gigabytes: Option<i64> = r.get(1)?;
            Ok(VolumeLimits {
                volumes: volumes
                    .map(|v| u32::try_from(v).map_err(|e| super::bad_column(0, e.to_string())))
                    .transpose()?,
                gigabytes: gigabytes
                    .map(|g| u64::try_from(g).map_err(|e| super::bad_column(1, e.to_string())))
                    .transpose()?,
            })
        })
        .optional()?;
    Ok(quota)
}

/// The limits of the tenant: its own quota if it has one, else `defaults`.
fn limits_of(tx: &Connection, owner: Uuid, defaults: VolumeLimits) -> Result<VolumeLimits> {
    Ok(own_quota(tx, owner)?.unwrap_or(defaults))
}

fn create(tx: &Connection, new: NewVolume, defaults: VolumeLimits) -> Result<Volume> {
    tenant(tx, new.owner)?;
    if let Some(i) = new.image {
        image(tx, Scope::Tenant(new.owner), i)?;
    }
    let (count, gigabytes) = usage(tx, new.owner)?;
    limits_of(tx, new.owner, defaults)?.check_new(count, gigabytes, new.size_gb)?;
    let volume = new.volume(Uuid::new_v4(), now());
    tx.execute(
        &format!(
            "INSERT INTO volumes ({COLS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, NULL, NULL, NULL, ?8, ?9, ?9, 0)"
        ),
        params![
            volume.id.to_string(),
            volume.owner.to_string(),
            volume.name,
            volume.description,
            volume.size_gb,
            volume.status.as_str(),
            volume.image.map(|i| i.to_string()),
            volume.bootable,
            millis(volume.created),
        ],
    )?;
    Ok(volume)
}

fn change_volume(
    tx: &Connection,
    scope: Scope,
    id: Uuid,
    change: &VolumeChange,
    defaults: VolumeLimits,
) -> Result<Volume> {
    let old = get(tx, scope, id)?;
    let new = old.changed(change, now())?;
    if new.size_gb > old.size_gb {
        let (_, gigabytes) = usage(tx, old.owner)?;
        limits_of(tx, old.owner, defaults)?.check_growth(gigabytes, old.size_gb, new.size_gb)?;
    }
    let a = new.attachment.as_ref();
    tx.execute(
        "UPDATE volumes SET name = ?2, description = ?3, size_gb = ?4, status = ?5, node = ?6, \
         attachment_id = ?7, attachment_instance = ?8, attachment_device = ?9, \
         attachment_attached = ?10, bootable = ?11, updated = ?12, \
         attachment_delete_on_termination = ?13 WHERE id = ?1",
        params![
            id.to_string(),
            new.name,
            new.description,
            new.size_gb,
            new.status.as_str(),
            new.node.map(|n| n.to_string()),
            a.map(|a| a.id.to_string()),
            a.map(|a| a.instance.to_string()),
            a.map(|a| a.device.as_str()),
            a.map(|a| millis(a.attached)),
            new.bootable,
            millis(new.updated),
            a.is_some_and(|a| a.delete_on_termination),
        ],
    )?;
    Ok(new)
}

/// The SQL condition and its parameters for "visible in `scope`".
fn visible(scope: Scope) -> (&'static str, Vec<Value>) {
    match scope {
        Scope::All => ("1", Vec::new()),
        Scope::Tenant(t) => ("owner = ?", vec![Value::Text(t.to_string())]),
    }
}

fn get(tx: &Connection, scope: Scope, id: Uuid) -> Result<Volume> {
    let (cond, mut args) = visible(scope);
    args.push(Value::Text(id.to_string()));
    tx.prepare_cached(&format!(
        "SELECT {COLS} FROM volumes WHERE {cond} AND id = ?"
    ))?
    .query_row(params_from_iter(args), row)
    .optional()?
    .ok_or_else(|| StoreError::not_found("volume", id))
}

fn list(tx: &Connection, scope: Scope) -> Result<Vec<Volume>> {
    let (cond, args) = visible(scope);
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {COLS} FROM volumes WHERE {cond} ORDER BY created, id"
    ))?;
    let rows = stmt.query_map(params_from_iter(args), row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
