//! The suite: tenants' server groups and their members
//! ([`ServerGroupStore`](crate::ServerGroupStore)).

use super::*;

pub(crate) fn server_groups_hold_members_until_they_go<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (other, ow) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let new = |name: &str, policy: &str| NewServerGroup {
        tenant: t.id,
        user: Some(Uuid::from_u128(9)),
        name: name.into(),
        policy: policy.into(),
    };
    let g = store
        .create_server_group(new("web", "anti-affinity"))
        .unwrap();
    assert_eq!(
        (g.name.as_str(), g.policy.as_str()),
        ("web", "anti-affinity")
    );
    assert_eq!(g.user, Some(Uuid::from_u128(9)));
    assert!(g.members.is_empty());
    for (name, policy) in [("", "affinity"), ("x", "closest")] {
        let refused = store.create_server_group(new(name, policy));
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{refused:?}"
        );
    }
    let mut strange = new("x", "affinity");
    strange.tenant = Uuid::from_u128(77);
    assert!(matches!(
        store.create_server_group(strange),
        Err(StoreError::NotFound { .. })
    ));

    // Members: of the group's tenant, in one group at most, bounded.
    let a = store.create_instance(new_instance(&t, &w, "a")).unwrap();
    let b = store.create_instance(new_instance(&t, &w, "b")).unwrap();
    let theirs = store
        .create_instance(new_instance(&other, &ow, "theirs"))
        .unwrap();
    let g = store
        .add_server_group_member(Scope::Tenant(t.id), g.id, a.id)
        .unwrap();
    assert_eq!(g.members, [a.id]);
    let g = store
        .add_server_group_member(Scope::All, g.id, b.id)
        .unwrap();
    assert_eq!(g.members, [a.id, b.id]);
    assert!(matches!(
        store.add_server_group_member(Scope::All, g.id, a.id),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.add_server_group_member(Scope::All, g.id, theirs.id),
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.add_server_group_member(Scope::Tenant(other.id), g.id, theirs.id),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(store.server_group_of(a.id).unwrap().unwrap().id, g.id);
    assert_eq!(store.server_group_of(theirs.id).unwrap(), None);

    // Scopes, and a reopen.
    assert_eq!(store.server_group(Scope::Tenant(t.id), g.id).unwrap(), g);
    assert!(matches!(
        store.server_group(Scope::Tenant(other.id), g.id),
        Err(StoreError::NotFound { .. })
    ));
    assert!(
        store
            .server_groups(Scope::Tenant(other.id))
            .unwrap()
            .is_empty()
    );
    drop(store);
    let store = fx.open();
    assert_eq!(
        store.server_groups(Scope::All).unwrap(),
        std::slice::from_ref(&g)
    );

    // An instance's record going takes it out of its group.
    store.delete_instance(Scope::All, a.id).unwrap();
    let g = store.server_group(Scope::All, g.id).unwrap();
    assert_eq!(g.members, [b.id]);
    assert_eq!(store.server_group_of(a.id).unwrap(), None);

    // Bounds: members per group, groups per tenant.
    let mut made = vec![b.clone()];
    for n in 1..ServerGroup::MAX_MEMBERS {
        let i = store
            .create_instance(new_instance(&t, &w, &format!("m{n}")))
            .unwrap();
        store
            .add_server_group_member(Scope::All, g.id, i.id)
            .unwrap();
        made.push(i);
    }
    let one_more = store.create_instance(new_instance(&t, &w, "over")).unwrap();
    assert!(matches!(
        store.add_server_group_member(Scope::All, g.id, one_more.id),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::ServerGroupMembers,
            ..
        })
    ));
    for n in 1..ServerGroup::MAX_PER_TENANT {
        store
            .create_server_group(new(&format!("g{n}"), "affinity"))
            .unwrap();
    }
    assert!(matches!(
        store.create_server_group(new("over", "affinity")),
        Err(StoreError::QuotaExceeded {
            what: QuotaKind::ServerGroups,
            ..
        })
    ));
    let listed = store.server_groups(Scope::Tenant(t.id)).unwrap();
    assert_eq!(listed.len(), ServerGroup::MAX_PER_TENANT);
    assert_eq!(listed[0].id, g.id, "oldest first");

    // A group's deletion leaves its members in none; a tenant's takes its groups.
    store
        .delete_server_group(Scope::Tenant(t.id), g.id)
        .unwrap();
    assert_eq!(store.server_group_of(b.id).unwrap(), None);
    assert!(matches!(
        store.delete_server_group(Scope::All, g.id),
        Err(StoreError::NotFound { .. })
    ));
    let spare = store.create_server_group(new("spare", "affinity")).unwrap();
    store
        .add_server_group_member(Scope::All, spare.id, one_more.id)
        .unwrap();
    for i in made.iter().chain([&one_more]) {
        store.delete_instance(Scope::All, i.id).unwrap();
    }
    store.delete_tenant(t.id).unwrap();
    assert!(store.server_groups(Scope::All).unwrap().is_empty());
    assert!(matches!(
        store.server_group(Scope::All, spare.id),
        Err(StoreError::NotFound { .. })
    ));
}
