//! The tenants shared images are shared with (Glance's image members) in SQLite: what
//! [`CatalogStore`](crate::CatalogStore) runs for [`SqliteStore`](super::SqliteStore) once it
//! has read the image in the caller's scope, each function inside the caller's transaction. A
//! member row goes with its image and with its tenant (`ON DELETE CASCADE` on both).

use rusqlite::{Connection, OptionalExtension, Row, params};
use uuid::Uuid;

use super::identity::tenant;
use super::{bad_column, uuid_at};
use crate::common::{
    already_member, check_member_limit, check_shareable, from_millis, millis, now,
};
use crate::*;

const MEMBER_COLS: &str = "image_id, member, status, created, updated";

fn member_row(row: &Row<'_>) -> rusqlite::Result<ImageMember> {
    let status: String = row.get(2)?;
    Ok(ImageMember {
        image: uuid_at(row, 0)?,
        member: uuid_at(row, 1)?,
        status: MemberStatus::parse(&status)
            .ok_or_else(|| bad_column(2, format!("unknown member status {status:?}")))?,
        created: from_millis(row.get(3)?),
        updated: from_millis(row.get(4)?),
    })
}

/// The member row of `member` on `image`, if any.
fn member(tx: &Connection, image: Uuid, member: Uuid) -> Result<Option<ImageMember>> {
    Ok(tx
        .query_row(
            &format!("SELECT {MEMBER_COLS} FROM image_members WHERE image_id = ?1 AND member = ?2"),
            params![image.to_string(), member.to_string()],
            member_row,
        )
        .optional()?)
}

/// `member` of `img` (as `scope` sees it) added as `pending` (see
/// [`CatalogStore::add_image_member`]).
pub(super) fn add(
    tx: &Connection,
    scope: Scope,
    img: &Image,
    member_id: Uuid,
    limit: u32,
) -> Result<ImageMember> {
    let image_id = img.id;
    if !scope.owns(img.owner) {
        return Err(StoreError::not_found("image", image_id));
    }
    check_shareable(img, member_id)?;
    tenant(tx, member_id)?;
    if member(tx, image_id, member_id)?.is_some() {
        return Err(already_member(image_id, member_id));
    }
    let count: i64 = tx.query_row(
        "SELECT COUNT(*) FROM image_members WHERE image_id = ?1",
        [image_id.to_string()],
        |r| r.get(0),
    )?;
    check_member_limit(usize::try_from(count).unwrap_or(usize::MAX), limit)?;
    let at = now();
    let added = ImageMember {
        image: image_id,
        member: member_id,
        status: MemberStatus::Pending,
        created: at,
        updated: at,
    };
    tx.execute(
        "INSERT INTO image_members (image_id, member, status, created, updated) \
         VALUES (?1, ?2, ?3, ?4, ?4)",
        params![
            image_id.to_string(),
            member_id.to_string(),
            added.status.as_str(),
            millis(at),
        ],
    )?;
    Ok(added)
}

/// The members of `img` (as `scope` sees it) that `scope` sees (see
/// [`CatalogStore::image_members`]).
pub(super) fn of_image(tx: &Connection, scope: Scope, img: &Image) -> Result<Vec<ImageMember>> {
    let image_id = img.id;
    let mut stmt = tx.prepare(&format!(
        "SELECT {MEMBER_COLS} FROM image_members WHERE image_id = ?1 \
         AND (?2 IS NULL OR member = ?2) ORDER BY created, member"
    ))?;
    let only = match scope {
        Scope::Tenant(t) if !scope.owns(img.owner) => Some(t.to_string()),
        _ => None,
    };
    let rows = stmt.query_map(params![image_id.to_string(), only], member_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// `member` of `image` (which `scope` sees) with `status` (see
/// [`CatalogStore::set_image_member_status`]).
pub(super) fn set_status(
    tx: &Connection,
    scope: Scope,
    image_id: Uuid,
    member_id: Uuid,
    status: MemberStatus,
) -> Result<ImageMember> {
    if matches!(scope, Scope::Tenant(t) if t != member_id) {
        return Err(StoreError::not_found("image member", member_id));
    }
    let mut found = member(tx, image_id, member_id)?
        .ok_or_else(|| StoreError::not_found("image member", member_id))?;
    found.status = status;
    found.updated = now();
    tx.execute(
        "UPDATE image_members SET status = ?3, updated = ?4 WHERE image_id = ?1 AND member = ?2",
        params![
            image_id.to_string(),
            member_id.to_string(),
            status.as_str(),
            millis(found.updated),
        ],
    )?;
    Ok(found)
}

/// Removes `member` from `img` (as `scope` sees it; see
/// [`CatalogStore::remove_image_member`]).
pub(super) fn remove(tx: &Connection, scope: Scope, img: &Image, member_id: Uuid) -> Result<()> {
    let image_id = img.id;
    if !scope.owns(img.owner) {
        return Err(StoreError::not_found("image", image_id));
    }
    let n = tx.execute(
        "DELETE FROM image_members WHERE image_id = ?1 AND member = ?2",
        params![image_id.to_string(), member_id.to_string()],
    )?;
    if n == 0 {
        return Err(StoreError::not_found("image member", member_id));
    }
    Ok(())
}

/// The memberships of `tenant`, by image.
pub(super) fn of_tenant(tx: &Connection, tenant: Uuid) -> Result<Vec<ImageMember>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT {MEMBER_COLS} FROM image_members WHERE member = ?1 ORDER BY image_id"
    ))?;
    let rows = stmt.query_map([tenant.to_string()], member_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
