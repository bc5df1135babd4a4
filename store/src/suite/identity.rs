//! The suite: tenants, users and role assignments ([`IdentityStore`](crate::IdentityStore)).

use uuid::Uuid;

use super::*;

pub(crate) fn tenant_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let quota = Quota {
        instances: Some(10),
        vcpus: None,
        memory_mb: Some(4096),
    };
    let t = tenant_with(&store, "acme", quota, 24);
    assert_eq!(t.version, 1);
    assert_eq!(store.tenant(t.id).unwrap(), t);
    assert!(matches!(
        store.create_tenant(NewTenant {
            name: "acme".into(),
            quota,
            subnet_prefix: 24
        }),
        Err(StoreError::Conflict(_))
    ));
    for bad in [15, 31] {
        let r = store.create_tenant(NewTenant {
            name: "x".into(),
            quota,
            subnet_prefix: bad,
        });
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{bad}: {r:?}");
    }
    let changed = store
        .update_tenant(
            t.id,
            1,
            TenantChange {
                name: Some("acme2".into()),
                quota: Some(Quota::default()),
            },
        )
        .unwrap();
    assert_eq!((changed.name.as_str(), changed.version), ("acme2", 2));
    assert_eq!(changed.quota, Quota::default());
    assert_eq!(store.tenants().unwrap(), vec![changed.clone()]);
    assert_eq!(store.usage(t.id).unwrap(), Usage::default());
    store.delete_tenant(t.id).unwrap();
    assert!(is_not_found(store.tenant(t.id)));
    assert!(is_not_found(store.delete_tenant(t.id)));
}

pub(crate) fn user_and_role_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    let u = store
        .create_user(NewUser {
            name: "alice".into(),
            password_hash: "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into(),
        })
        .unwrap();
    assert_eq!(store.user(u.id).unwrap(), u);
    assert_eq!(store.user_by_name("alice").unwrap(), u);
    assert!(is_not_found(store.user_by_name("bob")));
    assert!(matches!(
        store.create_user(NewUser {
            name: "alice".into(),
            password_hash: "h".into()
        }),
        Err(StoreError::Conflict(_))
    ));
    let u2 = store
        .update_user(
            u.id,
            1,
            UserChange {
                password_hash: Some("new".into()),
            },
        )
        .unwrap();
    assert_eq!((u2.password_hash.as_str(), u2.version), ("new", 2));
    store.grant_role(u.id, t.id, Role::Member).unwrap();
    store.grant_role(u.id, t.id, Role::Member).unwrap();
    store.grant_role(u.id, t.id, Role::Admin).unwrap();
    let roles = store.roles_of_user(u.id).unwrap();
    assert_eq!(roles.len(), 2);
    assert_eq!(store.roles_in_tenant(t.id).unwrap(), roles);
    store.revoke_role(u.id, t.id, Role::Admin).unwrap();
    assert!(is_not_found(store.revoke_role(u.id, t.id, Role::Admin)));
    assert_eq!(
        store.roles_of_user(u.id).unwrap(),
        vec![RoleAssignment {
            user: u.id,
            tenant: t.id,
            role: Role::Member
        }]
    );
    assert!(is_not_found(store.grant_role(
        Uuid::new_v4(),
        t.id,
        Role::Member
    )));
    assert_eq!(store.users().unwrap().len(), 1);
    store.delete_user(u.id).unwrap();
    assert!(store.roles_in_tenant(t.id).unwrap().is_empty());
    assert!(is_not_found(store.delete_user(u.id)));
}
