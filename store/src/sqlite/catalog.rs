//! Flavors, images and workloads in SQLite: [`CatalogStore`] for [`SqliteStore`], over the
//! functions below (and `flavors.rs` for flavors, `image_members.rs` for the tenants images are
//! shared with), each of which runs inside the caller's transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::flavors;
use super::identity::tenant;
use super::image_members;
use super::{Cached, SqliteStore, bad_column, delete_row, int, opt_uuid_at, u64_at, uuid_at};
use crate::common::{check_name, check_version, from_millis, millis, now};
use crate::*;

impl CatalogStore for SqliteStore {
    fn create_flavor(&self, new: NewFlavor) -> Result<Flavor> {
        self.write(|tx| flavors::create(tx, new))
    }
    fn flavor(&self, scope: Scope, id: Uuid) -> Result<Flavor> {
        self.read(|tx| flavors::flavor(tx, scope, id))
    }
    fn flavors(&self, scope: Scope) -> Result<Vec<Flavor>> {
        self.read(|tx| flavors::flavors(tx, scope))
    }
    fn delete_flavor(&self, id: Uuid) -> Result<()> {
        self.write(|tx| flavors::delete(tx, id))
    }
    fn set_flavor_extra_specs(&self, id: Uuid, specs: ExtraSpecs) -> Result<Flavor> {
        self.write(|tx| flavors::set_specs(tx, id, specs))
    }
    fn delete_flavor_extra_spec(&self, id: Uuid, key: &str) -> Result<Flavor> {
        self.write(|tx| flavors::delete_spec(tx, id, key))
    }
    fn flavor_access(&self, id: Uuid) -> Result<Vec<Uuid>> {
        self.read(|tx| flavors::access(tx, id))
    }
    fn add_flavor_access(&self, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>> {
        self.write(|tx| flavors::add_access(tx, id, tenant))
    }
    fn remove_flavor_access(&self, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>> {
        self.write(|tx| flavors::remove_access(tx, id, tenant))
    }

    fn create_image(&self, new: NewImage) -> Result<Image> {
        let visibility = Visibility::of_owner(new.owner);
        self.write(|tx| {
            create_image(
                tx,
                new,
                ImageStatus::Active,
                visibility,
                ImageProps::default(),
            )
        })
    }
    fn create_queued_image(
        &self,
        new: NewImage,
        visibility: Visibility,
        props: ImageProps,
    ) -> Result<Image> {
        self.write(|tx| create_image(tx, new, ImageStatus::Queued, visibility, props))
    }
    fn change_image(&self, scope: Scope, id: Uuid, change: ImageChange) -> Result<Image> {
        self.write(|tx| change_image(tx, scope, id, change))
    }
    fn image(&self, scope: Scope, id: Uuid) -> Result<Image> {
        self.read(|tx| image(tx, scope, id))
    }
    fn images(&self, scope: Scope) -> Result<Vec<Image>> {
        self.read(|tx| images(tx, scope))
    }
    fn delete_image(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.write(|tx| {
            let image = image(tx, scope, id)?;
            if !scope.owns(image.owner) {
                return Err(StoreError::not_found("image", id));
            }
            // Its members go with it (`ON DELETE CASCADE`).
            delete_row(tx, "images", "image", id)
        })
    }

    fn add_image_member(
        &self,
        scope: Scope,
        image: Uuid,
        member: Uuid,
        limit: u32,
    ) -> Result<ImageMember> {
        self.write(|tx| {
            let img = self::image(tx, scope, image)?;
            image_members::add(tx, scope, &img, member, limit)
        })
    }
    fn image_members(&self, scope: Scope, image: Uuid) -> Result<Vec<ImageMember>> {
        self.read(|tx| image_members::of_image(tx, scope, &self::image(tx, scope, image)?))
    }
    fn set_image_member_status(
        &self,
        scope: Scope,
        image: Uuid,
        member: Uuid,
        status: MemberStatus,
    ) -> Result<ImageMember> {
        self.write(|tx| {
            self::image(tx, scope, image)?;
            image_members::set_status(tx, scope, image, member, status)
        })
    }
    fn remove_image_member(&self, scope: Scope, image: Uuid, member: Uuid) -> Result<()> {
        self.write(|tx| image_members::remove(tx, scope, &self::image(tx, scope, image)?, member))
    }
    fn image_memberships(&self, tenant: Uuid) -> Result<Vec<ImageMember>> {
        self.read(|tx| image_members::of_tenant(tx, tenant))
    }

    fn create_workload(&self, new: NewWorkload) -> Result<Workload> {
        self.write(|tx| create_workload(tx, new))
    }
    fn workload(&self, scope: Scope, id: Uuid) -> Result<Workload> {
        self.read(|tx| workload(tx, scope, id))
    }
    fn workloads(&self, scope: Scope) -> Result<Vec<Workload>> {
        self.read(|tx| workloads(tx, scope))
    }
    fn update_workload(
        &self,
        scope: Scope,
        id: Uuid,
        expected: u64,
        change: WorkloadChange,
    ) -> Result<Workload> {
        self.write(|tx| update_workload(tx, scope, id, expected, change))
    }
    fn delete_workload(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.write(|tx| {
            let workload = workload(tx, scope, id)?;
            if !scope.owns(workload.owner) {
                return Err(StoreError::not_found("workload", id));
            }
            delete_row(tx, "workloads", "workload", id)
        })
    }
}

/// The SQL condition and parameter for "owner visible in `scope`" on column `owner`.
fn visible(scope: Scope) -> (&'static str, Option<String>) {
    match scope {
        Scope::All => ("?1 IS NULL", None),
        Scope::Tenant(t) => ("(owner IS NULL OR owner = ?1)", Some(t.to_string())),
    }
}

/// The SQL condition and parameter for "image visible in `scope`": public and community images,
/// the tenant's own, and shared images of which it is a member.
fn image_visible(scope: Scope) -> (&'static str, Option<String>) {
    match scope {
        Scope::All => ("?1 IS NULL", None),
        Scope::Tenant(t) => (
            "(owner IS NULL OR owner = ?1 OR visibility = 'community' OR \
              (visibility = 'shared' AND EXISTS (SELECT 1 FROM image_members m \
               WHERE m.image_id = images.id AND m.member = ?1)))",
            Some(t.to_string()),
        ),
    }
}

const IMAGE_COLS: &str =
    "id, owner, name, kind, reference, created, status, file, props, updated, visibility";

fn json_at<T: serde::de::DeserializeOwned>(row: &Row<'_>, i: usize) -> rusqlite::Result<T> {
    let text: String = row.get(i)?;
    serde_json::from_str(&text).map_err(|e| bad_column(i, e.to_string()))
}

fn image_row(row: &Row<'_>) -> rusqlite::Result<Image> {
    let kind: String = row.get(3)?;
    let status: String = row.get(6)?;
    let file: Option<String> = row.get(7)?;
    let created = from_millis(row.get(5)?);
    let updated: i64 = row.get(9)?;
    let visibility: String = row.get(10)?;
    Ok(Image {
        id: uuid_at(row, 0)?,
        owner: opt_uuid_at(row, 1)?,
        visibility: Visibility::parse(&visibility)
            .ok_or_else(|| bad_column(10, format!("unknown visibility {visibility:?}")))?,
        name: row.get(2)?,
        kind: match kind.as_str() {
            "qcow2" => ImageKind::Qcow2,
            "raw" => ImageKind::Raw,
            "iso" => ImageKind::Iso,
            "aki" => ImageKind::Kernel,
            "ari" => ImageKind::Ramdisk,
            "container" => ImageKind::Container,
            other => return Err(bad_column(3, format!("unknown image kind {other:?}"))),
        },
        reference: row.get(4)?,
        created,
        status: ImageStatus::parse(&status)
            .ok_or_else(|| bad_column(6, format!("unknown image status {status:?}")))?,
        file: match file {
            Some(text) => {
                Some(serde_json::from_str(&text).map_err(|e| bad_column(7, e.to_string()))?)
            }
            None => None,
        },
        props: json_at(row, 8)?,
        updated: if updated == 0 {
            created
        } else {
            from_millis(updated)
        },
    })
}

fn kind_text(kind: ImageKind) -> &'static str {
    match kind {
        ImageKind::Qcow2 => "qcow2",
        ImageKind::Raw => "raw",
        ImageKind::Iso => "iso",
        ImageKind::Kernel => "aki",
        ImageKind::Ramdisk => "ari",
        ImageKind::Container => "container",
    }
}

pub(super) fn create_image(
    tx: &Connection,
    new: NewImage,
    status: ImageStatus,
    visibility: Visibility,
    props: ImageProps,
) -> Result<Image> {
    check_name("image", &new.name)?;
    if new.reference.is_empty() && status == ImageStatus::Active {
        return Err(StoreError::Invalid("empty image reference".into()));
    }
    if let Some(owner) = new.owner {
        tenant(tx, owner)?;
    }
    let at = now();
    let image = Image {
        id: Uuid::new_v4(),
        owner: new.owner,
        visibility,
        name: new.name,
        kind: new.kind,
        reference: new.reference,
        created: at,
        status,
        file: None,
        props,
        updated: at,
    };
    image.check_visibility()?;
    tx.execute(
        "INSERT INTO images (id, owner, name, kind, reference, created, status, props, updated, \
         visibility) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?6, ?9)",
        params![
            image.id.to_string(),
            image.owner.map(|o| o.to_string()),
            image.name,
            kind_text(image.kind),
            image.reference,
            millis(image.created),
            image.status.as_str(),
            props_text(&image.props)?,
            image.visibility.as_str(),
        ],
    )?;
    Ok(image)
}

fn props_text(props: &ImageProps) -> Result<String> {
    serde_json::to_string(props).map_err(|e| StoreError::Invalid(e.to_string()))
}

pub(super) fn change_image(
    tx: &Connection,
    scope: Scope,
    id: Uuid,
    change: ImageChange,
) -> Result<Image> {
    let old = image(tx, scope, id)?;
    if !scope.owns(old.owner) {
        return Err(StoreError::not_found("image", id));
    }
    if let Some(name) = &change.name {
        check_name("image", name)?;
    }
    if let Some(Some(owner)) = change.owner {
        tenant(tx, owner)?;
    }
    let new = old.changed(&change, now())?;
    let file = match &new.file {
        Some(f) => Some(serde_json::to_string(f).map_err(|e| StoreError::Invalid(e.to_string()))?),
        None => None,
    };
    tx.execute(
        "UPDATE images SET owner = ?2, name = ?3, kind = ?4, reference = ?5, status = ?6, \
         file = ?7, props = ?8, updated = ?9, visibility = ?10 WHERE id = ?1",
        params![
            id.to_string(),
            new.owner.map(|o| o.to_string()),
            new.name,
            kind_text(new.kind),
            new.reference,
            new.status.as_str(),
            file,
            props_text(&new.props)?,
            millis(new.updated),
            new.visibility.as_str(),
        ],
    )?;
    Ok(new)
}

pub(super) fn image(tx: &Connection, scope: Scope, id: Uuid) -> Result<Image> {
    let (cond, param) = image_visible(scope);
    tx.query_row(
        &format!("SELECT {IMAGE_COLS} FROM images WHERE {cond} AND id = ?2"),
        params![param, id.to_string()],
        image_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("image", id))
}

pub(super) fn images(tx: &Connection, scope: Scope) -> Result<Vec<Image>> {
    let (cond, param) = image_visible(scope);
    let mut stmt = tx.prepare(&format!(
        "SELECT {IMAGE_COLS} FROM images WHERE {cond} ORDER BY name, id"
    ))?;
    let rows = stmt.query_map([param], image_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

const WORKLOAD_COLS: &str = "id, owner, name, flavor_id, image_id, user_data, version, ephemeral";

fn workload_row(row: &Row<'_>) -> rusqlite::Result<Workload> {
    Ok(Workload {
        id: uuid_at(row, 0)?,
        owner: opt_uuid_at(row, 1)?,
        name: row.get(2)?,
        flavor: uuid_at(row, 3)?,
        image: uuid_at(row, 4)?,
        user_data: row.get(5)?,
        version: u64_at(row, 6)?,
        ephemeral: row.get(7)?,
    })
}

pub(super) fn create_workload(tx: &Connection, new: NewWorkload) -> Result<Workload> {
    check_name("workload", &new.name)?;
    let scope = match new.owner {
        Some(owner) => {
            tenant(tx, owner)?;
            Scope::Tenant(owner)
        }
        None => Scope::All,
    };
    flavors::flavor(tx, Scope::All, new.flavor)?;
    let img = image(tx, scope, new.image)?;
    if new.owner.is_none() && img.owner.is_some() {
        return Err(StoreError::Invalid(
            "a public workload needs a public image".into(),
        ));
    }
    let workload = Workload {
        id: Uuid::new_v4(),
        owner: new.owner,
        name: new.name,
        flavor: new.flavor,
        image: new.image,
        user_data: new.user_data,
        ephemeral: new.ephemeral,
        version: 1,
    };
    tx.execute(
        "INSERT INTO workloads (id, owner, name, flavor_id, image_id, user_data, version, ephemeral)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7)",
        params![
            workload.id.to_string(),
            workload.owner.map(|o| o.to_string()),
            workload.name,
            workload.flavor.to_string(),
            workload.image.to_string(),
            workload.user_data,
            workload.ephemeral
        ],
    )?;
    Ok(workload)
}

pub(super) fn workload(tx: &Connection, scope: Scope, id: Uuid) -> Result<Workload> {
    let (cond, param) = visible(scope);
    tx.query_row_cached(
        &format!("SELECT {WORKLOAD_COLS} FROM workloads WHERE {cond} AND id = ?2"),
        params![param, id.to_string()],
        workload_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::not_found("workload", id))
}

pub(super) fn workloads(tx: &Connection, scope: Scope) -> Result<Vec<Workload>> {
    let (cond, param) = visible(scope);
    let mut stmt = tx.prepare(&format!(
        "SELECT {WORKLOAD_COLS} FROM workloads WHERE {cond} ORDER BY name, id"
    ))?;
    let rows = stmt.query_map([param], workload_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn update_workload(
    tx: &Connection,
    scope: Scope,
    id: Uuid,
    expected: u64,
    change: WorkloadChange,
) -> Result<Workload> {
    let mut w = workload(tx, scope, id)?;
    if !scope.owns(w.owner) {
        return Err(StoreError::not_found("workload", id));
    }
    check_version("workload", id, w.version, expected)?;
    if let Some(name) = change.name {
        check_name("workload", &name)?;
        w.name = name;
    }
    if let Some(data) = change.user_data {
        w.user_data = data;
    }
    w.version += 1;
    tx.execute(
        "UPDATE workloads SET name = ?2, user_data = ?3, version = ?4 WHERE id = ?1",
        params![id.to_string(), w.name, w.user_data, int(w.version)?],
    )?;
    Ok(w)
}
