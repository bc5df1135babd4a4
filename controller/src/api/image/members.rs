//! Image members, as Glance shares images (`visibility: shared`): the projects a shared image is
//! shared with, under `/v2/images/{id}/members`, and which images a listing shows.
//!
//! The image's owner (or an admin) adds a project (`POST`, `{"member": "<project id>"}`: the
//! member is `pending`) and removes one (`DELETE`); the member (or an admin) accepts, rejects
//! or resets its membership (`PUT`, `{"status": "accepted"}`). The owner lists every member, a
//! member only itself. A member sees the image and may boot it whatever its status; it lists it
//! among its images only once it accepted it (Glance's default `member_status=accepted`).
//! Members are offered on shared images only (403 "Only shared images have members.", as
//! Glance answers; a 404 for `GET .../members/{member}`, which Glance hides so); an image has
//! at most [`MAX_IMAGE_MEMBERS`] (Glance's `image_member_quota`; 413 past it).

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::super::clock::rfc3339;
use super::super::extract::{PathParams, parse_json, path_id};
use super::super::{ApiError, ApiState, Principal};
use store::{Image, ImageMember, MAX_IMAGE_MEMBERS, MemberStatus, Scope, StoreError, Visibility};

/// The Image API's view of a member.
fn body(member: &ImageMember) -> Value {
    json!({
        "image_id": member.image,
        "member_id": member.member,
        "status": member.status.as_str(),
        "created_at": rfc3339(member.created),
        "updated_at": rfc3339(member.updated),
        "schema": "/v2/schemas/member",
    })
}

/// Which visibilities a listing shows (Glance's `visibility` filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VisibilityFilter {
    /// None said: every visibility, but other projects' community images.
    Default,
    /// `all`: every visibility.
    All,
    /// One visibility.
    Only(Visibility),
}

impl VisibilityFilter {
    /// The filter a `visibility` query parameter asks for.
    pub(crate) fn parse(text: Option<&str>) -> Result<VisibilityFilter, ApiError> {
        match text {
            None => Ok(VisibilityFilter::Default),
            Some("all") => Ok(VisibilityFilter::All),
            Some(text) => Visibility::parse(text)
                .map(VisibilityFilter::Only)
                .ok_or_else(|| {
                    ApiError::BadRequest(format!(
                        "visibility {text} is not one of public, private, shared, community, all"
                    ))
                }),
        }
    }
}

/// The member status a listing shows shared images of (Glance's `member_status` filter:
/// `accepted` when not said; `None` is `all`).
pub(crate) fn member_status_filter(text: Option<&str>) -> Result<Option<MemberStatus>, ApiError> {
    match text {
        None => Ok(Some(MemberStatus::Accepted)),
        Some("all") => Ok(None),
        Some(text) => MemberStatus::parse(text).map(Some).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "member_status {text} is not one of pending, accepted, rejected, all"
            ))
        }),
    }
}

/// Whether project `tenant` lists `image` (one it sees; `membership`: its status as a member
/// of it, if it is one), as Glance lists: public and community images, its own, and shared
/// ones whose member status is `status` (`None`: any), of the visibility `visibility` asks for.
pub(crate) fn listed(
    image: &Image,
    tenant: Uuid,
    membership: Option<MemberStatus>,
    visibility: VisibilityFilter,
    status: Option<MemberStatus>,
) -> bool {
    let own = image.owner == Some(tenant);
    let shown = match image.visibility {
        Visibility::Public | Visibility::Community => true,
        _ if own => true,
        Visibility::Shared => membership.is_some_and(|m| status.is_none_or(|s| s == m)),
        Visibility::Private => false,
    };
    shown
        && match visibility {
            VisibilityFilter::Default => image.visibility != Visibility::Community || own,
            VisibilityFilter::All => true,
            VisibilityFilter::Only(v) => image.visibility == v,
        }
}

/// The images `scope` lists by default (Glance's listing without filters): for a project, public
/// images, its own, and shared ones it accepted; everything for [`Scope::All`].
pub(crate) fn listed_by_default(
    store: &dyn store::Store,
    scope: Scope,
) -> Result<Vec<Image>, ApiError> {
    let images = store.images(scope)?;
    let Scope::Tenant(tenant) = scope else {
        return Ok(images);
    };
    let memberships = memberships_of(store, tenant)?;
    Ok(images
        .into_iter()
        .filter(|i| {
            listed(
                i,
                tenant,
                memberships.get(&i.id).copied(),
                VisibilityFilter::Default,
                Some(MemberStatus::Accepted),
            )
        })
        .collect())
}

/// The member status of `tenant` in each image it is a member of.
pub(crate) fn memberships_of(
    store: &dyn store::Store,
    tenant: Uuid,
) -> Result<HashMap<Uuid, MemberStatus>, ApiError> {
    Ok(store
        .image_memberships(tenant)?
        .into_iter()
        .map(|m| (m.image, m.status))
        .collect())
}

/// The image `id` as the caller sees it, with the scope it sees it in; a 403 unless it is
/// shared.
async fn shared_image(
    state: &ApiState,
    caller: &Principal,
    id: Uuid,
) -> Result<(Scope, Image), ApiError> {
    let scope = caller.project_scope(true)?;
    let image = state
        .store(move |store| Ok(store.image(scope, id)?))
        .await?;
    if image.visibility != Visibility::Shared {
        return Err(ApiError::Forbidden(
            "Only shared images have members.".into(),
        ));
    }
    Ok((scope, image))
}

/// A member in a path: a project id (a 404 for anything else, as for a project that is none).
fn member_id(image: Uuid, text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| not_a_member(image, text))
}

fn not_a_member(image: Uuid, member: impl std::fmt::Display) -> ApiError {
    ApiError::NotFound(format!(
        "{member} not found in the member list of the image {image}."
    ))
}

/// A store error about member `member` of image `image`, as Glance answers it.
fn member_error(image: Uuid, member: Uuid, error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound {
            kind: "image member",
            ..
        } => not_a_member(image, member),
        StoreError::NotFound { kind: "tenant", .. } => {
            ApiError::BadRequest(format!("project {member} does not exist"))
        }
        StoreError::Conflict(_) => {
            ApiError::Conflict(format!("Member {member} is duplicated for image {image}"))
        }
        StoreError::QuotaExceeded { limit, .. } => ApiError::PayloadTooLarge(format!(
            "Image member limit exceeded for image {image}: an image has at most {limit} members"
        )),
        other => other.into(),
    }
}

/// `POST /v2/images/{id}/members` `{"member": "<project id>"}`: the image's owner (or an admin)
/// shares it with a project, `pending` (200 with the member).
pub(super) async fn add(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("image", &id)?;
    let request: Map<String, Value> = parse_json(&bytes)?;
    let member = match request.get("member") {
        None => {
            return Err(ApiError::BadRequest(
                "Member to be added not specified".into(),
            ));
        }
        Some(Value::String(text)) if text.is_empty() => {
            return Err(ApiError::BadRequest("Member can't be empty".into()));
        }
        Some(Value::String(text)) => Uuid::parse_str(text)
            .map_err(|_| ApiError::BadRequest(format!("member {text:?} is not a project id")))?,
        Some(_) => {
            return Err(ApiError::BadRequest(
                "Expected a member in the form: {\"member\": \"<project id>\"}".into(),
            ));
        }
    };
    let (scope, image) = shared_image(&state, &caller, id).await?;
    if !scope.owns(image.owner) {
        return Err(ApiError::Forbidden(
            "You are not permitted to create image members for the image.".into(),
        ));
    }
    let added = state
        .store(move |store| {
            store
                .add_image_member(scope, id, member, MAX_IMAGE_MEMBERS)
                .map_err(|e| member_error(id, member, e))
        })
        .await?;
    Ok(Json(body(&added)))
}

/// `GET /v2/images/{id}/members`: every member for the image's owner (and admins), only its own
/// membership for a member.
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("image", &id)?;
    let (scope, _) = shared_image(&state, &caller, id).await?;
    let members = state
        .store(move |store| Ok(store.image_members(scope, id)?))
        .await?;
    Ok(Json(json!({
        "members": members.iter().map(body).collect::<Vec<_>>(),
        "schema": "/v2/schemas/members",
    })))
}

/// `GET /v2/images/{id}/members/{member}`: a member, for the image's owner (and admins) and for
/// that member; a 404 otherwise (and for an image that is not shared, as Glance hides it).
pub(super) async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, member)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("image", &id)?;
    let member = member_id(id, &member)?;
    let (scope, _) = shared_image(&state, &caller, id)
        .await
        .map_err(|e| match e {
            ApiError::Forbidden(message) => ApiError::NotFound(message),
            other => other,
        })?;
    let found = state
        .store(move |store| Ok(store.image_members(scope, id)?))
        .await?
        .into_iter()
        .find(|m| m.member == member)
        .ok_or_else(|| not_a_member(id, member))?;
    Ok(Json(body(&found)))
}

/// `PUT /v2/images/{id}/members/{member}` `{"status": "accepted"|"rejected"|"pending"}`: the
/// member (or an admin) answers; the image's owner may not (403), another project sees no such
/// member (404).
pub(super) async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, member)): PathParams<(String, String)>,
    bytes: Bytes,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("image", &id)?;
    let member = member_id(id, &member)?;
    let request: Map<String, Value> = parse_json(&bytes)?;
    let status = match request.get("status") {
        None => return Err(ApiError::BadRequest("Status not specified".into())),
        Some(value) => value
            .as_str()
            .and_then(MemberStatus::parse)
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "Incorrect request: status {value} is not one of pending, accepted, rejected"
                ))
            })?,
    };
    let (scope, image) = shared_image(&state, &caller, id).await?;
    if matches!(scope, Scope::Tenant(t) if image.owner == Some(t)) {
        return Err(ApiError::Forbidden(
            "You are not permitted to modify 'status' on this image member.".into(),
        ));
    }
    let changed = state
        .store(move |store| {
            store
                .set_image_member_status(scope, id, member, status)
                .map_err(|e| member_error(id, member, e))
        })
        .await?;
    Ok(Json(body(&changed)))
}

/// `DELETE /v2/images/{id}/members/{member}` (204): the image's owner (or an admin) stops
/// sharing it with a project, which sees it no more.
pub(super) async fn remove(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, member)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("image", &id)?;
    let member = member_id(id, &member)?;
    let (scope, image) = shared_image(&state, &caller, id).await?;
    if !scope.owns(image.owner) {
        return Err(ApiError::Forbidden(
            "You cannot delete image member.".into(),
        ));
    }
    state
        .store(move |store| {
            store
                .remove_image_member(scope, id, member)
                .map_err(|e| member_error(id, member, e))
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn image(owner: Option<Uuid>, visibility: Visibility) -> Image {
        Image {
            id: Uuid::new_v4(),
            owner,
            visibility,
            name: "i".into(),
            kind: store::ImageKind::Raw,
            reference: String::new(),
            created: SystemTime::UNIX_EPOCH,
            status: store::ImageStatus::Active,
            file: None,
            props: store::ImageProps::default(),
            updated: SystemTime::UNIX_EPOCH,
        }
    }

    /// Glance's listing: public and own images always, shared ones by member status, others'
    /// community images only when asked.
    #[test]
    fn listings_follow_glance() {
        let (me, other) = (Uuid::new_v4(), Uuid::new_v4());
        let public = image(None, Visibility::Public);
        let mine = image(Some(me), Visibility::Shared);
        let shared = image(Some(other), Visibility::Shared);
        let community = image(Some(other), Visibility::Community);
        let default = |i: &Image, m: Option<MemberStatus>| {
            listed(
                i,
                me,
                m,
                VisibilityFilter::Default,
                Some(MemberStatus::Accepted),
            )
        };
        assert!(default(&public, None));
        assert!(default(&mine, None));
        assert!(default(&shared, Some(MemberStatus::Accepted)));
        assert!(!default(&shared, Some(MemberStatus::Pending)));
        assert!(!default(&shared, None));
        assert!(!default(&community, None));
        let only = |v| VisibilityFilter::Only(v);
        assert!(listed(
            &community,
            me,
            None,
            only(Visibility::Community),
            None
        ));
        assert!(listed(&community, me, None, VisibilityFilter::All, None));
        assert!(listed(
            &shared,
            me,
            Some(MemberStatus::Pending),
            only(Visibility::Shared),
            Some(MemberStatus::Pending)
        ));
        assert!(listed(
            &shared,
            me,
            Some(MemberStatus::Rejected),
            only(Visibility::Shared),
            None
        ));
        assert!(!listed(&public, me, None, only(Visibility::Shared), None));
        assert_eq!(
            VisibilityFilter::parse(Some("hidden")).map_err(|e| e.status().as_u16()),
            Err(400)
        );
        assert_eq!(
            member_status_filter(None).unwrap(),
            Some(MemberStatus::Accepted)
        );
        assert_eq!(member_status_filter(Some("all")).unwrap(), None);
        assert!(member_status_filter(Some("maybe")).is_err());
    }
}
