//! The suite: shared and community images, and the tenants images are shared with
//! ([`CatalogStore`](crate::CatalogStore)'s image members).

use uuid::Uuid;

use super::*;

fn is_invalid<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::Invalid(_)))
}

fn is_conflict<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::Conflict(_)))
}

/// Sets the visibility of `image` as its owner `scope`.
fn set_visibility(store: &dyn Store, scope: Scope, image: Uuid, visibility: Visibility) -> Image {
    store
        .change_image(
            scope,
            image,
            ImageChange {
                visibility: Some(visibility),
                ..ImageChange::default()
            },
        )
        .unwrap()
}

/// A workload of `owner`'s named `name` of `flavor` and `image` (another tenant's, shared).
fn workload_of(
    store: &dyn Store,
    owner: Uuid,
    name: &str,
    flavor: Uuid,
    image: Uuid,
) -> Result<Workload> {
    store.create_workload(NewWorkload {
        owner: Some(owner),
        name: name.into(),
        flavor,
        image,
        user_data: String::new(),
        ephemeral: false,
    })
}

/// A queued raw image of `owner` (none: public) named `name`, of `visibility`.
fn queued(
    store: &dyn Store,
    owner: Option<Uuid>,
    name: &str,
    visibility: Visibility,
) -> Result<Image> {
    store.create_queued_image(
        NewImage {
            owner,
            name: name.into(),
            kind: ImageKind::Raw,
            reference: String::new(),
        },
        visibility,
        ImageProps::default(),
    )
}

/// The ids of the images `tenant` sees.
fn seen(store: &dyn Store, tenant: Uuid) -> Vec<Uuid> {
    store
        .images(Scope::Tenant(tenant))
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

/// An owner shares its image: members only on a shared image, by its owner, once each, up to
/// the limit; a member sees it (by id, in `images`, to make a workload of) whatever its status,
/// and only its own membership; only the member (or `Scope::All`) sets its status; a private
/// image hides it again (the members stay, and count again once shared); a removed member sees
/// it no more. Community images are seen by all. A reopen keeps it all.
pub(crate) fn images_are_shared_with_their_members<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (owner, w) = tenant_and_workload(&store, "owner", Quota::default(), 24);
    let member = tenant_with(&store, "member", Quota::default(), 24);
    let third = tenant_with(&store, "third", Quota::default(), 24);
    let fourth = tenant_with(&store, "fourth", Quota::default(), 24);
    let (os, ms, ts) = (
        Scope::Tenant(owner.id),
        Scope::Tenant(member.id),
        Scope::Tenant(third.id),
    );
    let image = store.workload(os, w.id).unwrap().image;
    assert_eq!(
        store.image(os, image).unwrap().visibility,
        Visibility::Private
    );
    // `scope` adds `tenant` to the image, or sets its status.
    let add = |scope, tenant| store.add_image_member(scope, image, tenant, MAX_IMAGE_MEMBERS);
    let answer =
        |scope, tenant, status| store.set_image_member_status(scope, image, tenant, status);

    // Members only on a shared image.
    assert!(is_invalid(add(os, member.id)));
    let shared = set_visibility(&store, os, image, Visibility::Shared);
    assert_eq!(shared.visibility, Visibility::Shared);
    assert_eq!(store.image(os, image).unwrap(), shared);
    assert!(is_not_found(store.image(ms, image)));
    let added = add(os, member.id).unwrap();
    assert_eq!(
        (added.image, added.member, added.status),
        (image, member.id, MemberStatus::Pending)
    );
    assert_eq!(added.created, added.updated);
    // Once each; never its owner; a tenant that exists; by its owner only.
    assert!(is_conflict(add(os, member.id)));
    assert!(is_invalid(add(os, owner.id)));
    assert!(is_not_found(add(os, Uuid::new_v4())));
    assert!(is_not_found(add(ms, third.id)));
    assert!(is_not_found(add(ts, third.id)));

    // The member sees it, pending as it is; the third tenant does not.
    assert_eq!(store.image(ms, image).unwrap(), shared);
    assert!(seen(&store, member.id).contains(&image));
    assert!(is_not_found(store.image(ts, image)));
    assert!(!seen(&store, third.id).contains(&image));
    assert_eq!(
        store.image_memberships(member.id).unwrap(),
        vec![added.clone()]
    );
    assert!(store.image_memberships(third.id).unwrap().is_empty());

    // Up to the limit.
    let second = store.add_image_member(os, image, third.id, 2).unwrap();
    assert!(matches!(
        store.add_image_member(os, image, fourth.id, 2),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::ImageMembers,
            limit: 2
        })
    ));
    store.remove_image_member(os, image, third.id).unwrap();
    assert!(is_not_found(store.image(ts, image)));

    // Its owner (and `Scope::All`) sees every member, a member only itself.
    assert_eq!(store.image_members(os, image).unwrap(), vec![added.clone()]);
    assert_eq!(
        store.image_members(Scope::All, image).unwrap(),
        vec![added.clone()]
    );
    assert_eq!(store.image_members(ms, image).unwrap(), vec![added.clone()]);
    assert!(is_not_found(store.image_members(ts, image)));
    assert_ne!(second.member, added.member);

    // Only the member (or `Scope::All`) sets its status.
    assert!(is_not_found(answer(os, member.id, MemberStatus::Accepted)));
    assert!(is_not_found(answer(ts, member.id, MemberStatus::Accepted)));
    let accepted = answer(ms, member.id, MemberStatus::Accepted).unwrap();
    assert_eq!(accepted.status, MemberStatus::Accepted);
    assert_eq!(accepted.created, added.created);
    let rejected = answer(Scope::All, member.id, MemberStatus::Rejected).unwrap();
    assert_eq!(rejected.status, MemberStatus::Rejected);
    assert!(is_not_found(answer(ms, third.id, MemberStatus::Accepted)));
    // Rejected, it still sees it, and may make a workload of it; the third tenant may not.
    assert_eq!(store.image(ms, image).unwrap().id, image);
    let theirs = workload_of(&store, member.id, "borrowed", w.flavor, image).unwrap();
    assert!(is_not_found(workload_of(
        &store, third.id, "stolen", w.flavor, image
    )));
    // The member changes nothing of the image, nor deletes it.
    assert!(is_not_found(store.change_image(
        ms,
        image,
        ImageChange {
            name: Some("mine".into()),
            ..ImageChange::default()
        }
    )));
    assert!(is_not_found(store.delete_image(ms, image)));
    assert!(is_not_found(
        store.remove_image_member(ms, image, member.id)
    ));

    // Private again: the member sees it no more, but stays a member (and sees it again once it
    // is shared again).
    set_visibility(&store, os, image, Visibility::Private);
    assert!(is_not_found(store.image(ms, image)));
    assert!(!seen(&store, member.id).contains(&image));
    assert_eq!(store.image_members(os, image).unwrap().len(), 1);
    set_visibility(&store, os, image, Visibility::Shared);
    assert_eq!(store.image(ms, image).unwrap().id, image);

    // Removed, it sees it no more; a second removal is `NotFound`.
    store.remove_image_member(os, image, member.id).unwrap();
    assert!(is_not_found(store.image(ms, image)));
    assert!(store.image_memberships(member.id).unwrap().is_empty());
    assert!(is_not_found(
        store.remove_image_member(os, image, member.id)
    ));
    assert!(is_not_found(answer(ms, member.id, MemberStatus::Accepted)));

    // Community: every tenant sees it.
    set_visibility(&store, os, image, Visibility::Community);
    assert_eq!(store.image(ts, image).unwrap().id, image);
    assert!(seen(&store, third.id).contains(&image));
    assert!(is_invalid(add(os, member.id)));

    // Public means no owner, and no owner means public.
    assert!(is_invalid(store.change_image(
        os,
        image,
        ImageChange {
            visibility: Some(Visibility::Public),
            ..ImageChange::default()
        }
    )));
    assert!(is_invalid(queued(
        &store,
        Some(owner.id),
        "p",
        Visibility::Public
    )));
    assert!(is_invalid(queued(&store, None, "p", Visibility::Shared)));
    let made = queued(&store, Some(owner.id), "s", Visibility::Shared).unwrap();
    assert_eq!(made.visibility, Visibility::Shared);
    // An owner given to a public image makes it private unless said otherwise; taken away,
    // public.
    let public = store
        .create_image(NewImage {
            owner: None,
            name: "pub".into(),
            kind: ImageKind::Raw,
            reference: "pub.raw".into(),
        })
        .unwrap();
    assert_eq!(public.visibility, Visibility::Public);
    let give = |owner: Option<Uuid>| {
        let change = ImageChange {
            owner: Some(owner),
            ..ImageChange::default()
        };
        store.change_image(Scope::All, public.id, change).unwrap()
    };
    let owned = give(Some(owner.id));
    assert_eq!(owned.visibility, Visibility::Private);
    let back = give(None);
    assert_eq!(back.visibility, Visibility::Public);

    // A reopen keeps it all.
    let again = store
        .add_image_member(os, made.id, member.id, MAX_IMAGE_MEMBERS)
        .unwrap();
    let store = fx.open();
    assert_eq!(store.image(ms, made.id).unwrap(), made);
    assert_eq!(
        store.image(ms, image).unwrap().visibility,
        Visibility::Community
    );
    assert_eq!(store.image_members(os, made.id).unwrap(), vec![again]);
    assert_eq!(store.workload(ms, theirs.id).unwrap().image, image);
}

/// Members go with their image and with their tenant. A tenant's images go with it, and
/// other tenants' workloads of them, unless an instance uses one (`Conflict`).
pub(crate) fn members_go_with_their_image_and_their_tenant<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (owner, w) = tenant_and_workload(&store, "owner", Quota::default(), 24);
    let member = tenant_with(&store, "member", Quota::default(), 24);
    let leaving = tenant_with(&store, "leaving", Quota::default(), 24);
    let os = Scope::Tenant(owner.id);
    let new_image = |name: &str| queued(&store, Some(owner.id), name, Visibility::Shared).unwrap();
    let (first, second) = (new_image("first"), new_image("second"));
    for image in [first.id, second.id] {
        for tenant in [member.id, leaving.id] {
            store
                .add_image_member(os, image, tenant, MAX_IMAGE_MEMBERS)
                .unwrap();
        }
    }
    assert_eq!(store.image_memberships(member.id).unwrap().len(), 2);

    // An image's members go with it.
    store.delete_image(os, first.id).unwrap();
    let left: Vec<Uuid> = store
        .image_memberships(member.id)
        .unwrap()
        .iter()
        .map(|m| m.image)
        .collect();
    assert_eq!(left, [second.id]);
    assert!(is_not_found(store.image_members(os, first.id)));

    // A tenant's memberships go with it.
    store.delete_tenant(leaving.id).unwrap();
    let members: Vec<Uuid> = store
        .image_members(os, second.id)
        .unwrap()
        .iter()
        .map(|m| m.member)
        .collect();
    assert_eq!(members, [member.id]);

    // The owner goes with its images: not while the member's instance uses one of them; then
    // the member's workload of it goes too.
    let image = store.workload(os, w.id).unwrap().image;
    set_visibility(&store, os, image, Visibility::Shared);
    store
        .add_image_member(os, image, member.id, MAX_IMAGE_MEMBERS)
        .unwrap();
    let theirs = workload_of(&store, member.id, "borrowed", w.flavor, image).unwrap();
    let instance = store
        .create_instance(new_instance(&member, &theirs, "vm"))
        .unwrap();
    assert!(is_conflict(store.delete_tenant(owner.id)));
    assert_eq!(store.image(Scope::All, image).unwrap().id, image);
    store
        .delete_instance(Scope::Tenant(member.id), instance.id)
        .unwrap();
    store.delete_tenant(owner.id).unwrap();
    assert!(is_not_found(store.image(Scope::All, image)));
    assert!(is_not_found(store.workload(Scope::All, theirs.id)));
    assert!(store.image_memberships(member.id).unwrap().is_empty());
    assert!(store.images(Scope::Tenant(member.id)).unwrap().is_empty());
}
