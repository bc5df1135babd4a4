//! The tenants shared images are shared with (Glance's image members) over etcd: the reads and
//! writes [`CatalogStore`](crate::CatalogStore) for [`EtcdStore`](super::EtcdStore) makes in
//! its transactions, once it has read the image in the caller's scope. One record per member
//! at `imember/<image>/<tenant>`, so that an image's members are one range (counted against the
//! limit, and deleted with the image in one operation); a tenant's memberships are found by
//! reading every member record (there is no index by tenant, which would cost a write per member
//! when an image goes).

use uuid::Uuid;

use super::records::MemberRec;
use super::{Tx, decode_all};
use crate::common::{already_member, check_member_limit, check_shareable, millis, now};
use crate::*;

/// `member` (a tenant that exists) of `img` (as `scope` sees it) added as `pending` (see
/// [`CatalogStore::add_image_member`]).
pub(super) fn add_in(
    tx: &mut Tx<'_>,
    scope: Scope,
    img: &Image,
    member: Uuid,
    limit: u32,
) -> Result<ImageMember> {
    if !scope.owns(img.owner) {
        return Err(StoreError::not_found("image", img.id));
    }
    check_shareable(img, member)?;
    let keys = tx.keys();
    let key = keys.image_member(img.id, member);
    let members = tx.range(&keys.image_members(img.id))?;
    if members.iter().any(|kv| kv.key == key) {
        return Err(already_member(img.id, member));
    }
    check_member_limit(members.len(), limit)?;
    let at = millis(now());
    let rec = MemberRec {
        image: img.id,
        member,
        status: MemberStatus::Pending,
        created_ms: at,
        updated_ms: at,
    };
    tx.put(&key, &rec)?;
    Ok(rec.model())
}

/// The members of `img` (as `scope` sees it) that `scope` sees (see
/// [`CatalogStore::image_members`]).
pub(super) fn of_image_in(tx: &mut Tx<'_>, scope: Scope, img: &Image) -> Result<Vec<ImageMember>> {
    let all = decode_all::<MemberRec>(&tx.range(&tx.keys().image_members(img.id))?)?;
    let mut seen: Vec<ImageMember> = all
        .iter()
        .filter(|m| scope.owns(img.owner) || scope == Scope::Tenant(m.member))
        .map(MemberRec::model)
        .collect();
    seen.sort_by_key(|m| (m.created, m.member));
    Ok(seen)
}

/// `member` of `image` (which `scope` sees) with `status` (see
/// [`CatalogStore::set_image_member_status`]).
pub(super) fn set_status_in(
    tx: &mut Tx<'_>,
    scope: Scope,
    image: Uuid,
    member: Uuid,
    status: MemberStatus,
) -> Result<ImageMember> {
    if matches!(scope, Scope::Tenant(t) if t != member) {
        return Err(StoreError::not_found("image member", member));
    }
    let key = tx.keys().image_member(image, member);
    let mut rec = tx
        .get_json::<MemberRec>(&key)?
        .ok_or_else(|| StoreError::not_found("image member", member))?;
    rec.status = status;
    rec.updated_ms = millis(now());
    tx.put(&key, &rec)?;
    Ok(rec.model())
}

/// Removes `member` from `img` (as `scope` sees it; see [`CatalogStore::remove_image_member`]).
pub(super) fn remove_in(tx: &mut Tx<'_>, scope: Scope, img: &Image, member: Uuid) -> Result<()> {
    if !scope.owns(img.owner) {
        return Err(StoreError::not_found("image", img.id));
    }
    let key = tx.keys().image_member(img.id, member);
    if tx.get(&key)?.is_none() {
        return Err(StoreError::not_found("image member", member));
    }
    tx.delete(&key);
    Ok(())
}

/// The memberships of `tenant`, by image (read in `tx`: a commit requires that no member record
/// changed meanwhile).
pub(super) fn memberships_in(tx: &mut Tx<'_>, tenant: Uuid) -> Result<Vec<ImageMember>> {
    let all = decode_all::<MemberRec>(&tx.range(&tx.keys().all_image_members())?)?;
    let mut found: Vec<ImageMember> = all
        .iter()
        .filter(|m| m.member == tenant)
        .map(MemberRec::model)
        .collect();
    found.sort_by_key(|m| m.image);
    Ok(found)
}
