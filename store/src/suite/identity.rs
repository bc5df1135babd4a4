//! The suite: tenants, users and role assignments, the token revocation list
//! ([`IdentityStore`](crate::IdentityStore)).

use std::time::{Duration, SystemTime};

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
                ..TenantChange::default()
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
                ..UserChange::default()
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

fn token(id: &str, expires: SystemTime) -> TokenRef {
    TokenRef {
        id: id.into(),
        expires,
    }
}

fn alice(store: &dyn Store) -> User {
    store
        .create_user(NewUser {
            name: "alice".into(),
            password_hash: "h".into(),
        })
        .unwrap()
}

pub(crate) fn revoked_tokens_are_listed_until_they_expire<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let u = alice(&store);
    let hour = Duration::from_secs(3600);
    let now = SystemTime::now();
    let (t1, t2) = (token("tok-1_A", now + hour), token("tok-2", now + hour));
    let state = store.token_state(u.id, &t1).unwrap();
    assert_eq!((state.generation, state.revoked), (0, false));
    store.revoke_token(&t1).unwrap();
    store.revoke_token(&t1).unwrap();
    assert!(store.token_state(u.id, &t1).unwrap().revoked);
    assert!(!store.token_state(u.id, &t2).unwrap().revoked);
    // An expired token is not listed (it is refused anyway).
    let old = token("old", now - Duration::from_secs(1));
    store.revoke_token(&old).unwrap();
    assert!(!store.token_state(u.id, &old).unwrap().revoked);
    // The list survives a reopen (another controller sees it).
    drop(store);
    let store = fx.open();
    assert!(store.token_state(u.id, &t1).unwrap().revoked);
    // Pruning drops what has expired by then, and only that.
    let t3 = token("tok-3", now + 3 * hour);
    store.revoke_token(&t3).unwrap();
    assert_eq!(store.prune_revoked_tokens(now).unwrap(), 0);
    assert_eq!(store.prune_revoked_tokens(now + 2 * hour).unwrap(), 1);
    assert!(!store.token_state(u.id, &t1).unwrap().revoked);
    assert!(store.token_state(u.id, &t3).unwrap().revoked);
    // Bad ids are typed errors; a user that is gone is not found.
    for bad in ["", "a/b", "a b", "\u{e9}", &"x".repeat(65)] {
        let t = token(bad, now + hour);
        assert!(
            matches!(store.revoke_token(&t), Err(StoreError::Invalid(_))),
            "{bad:?}"
        );
        assert!(
            matches!(store.token_state(u.id, &t), Err(StoreError::Invalid(_))),
            "{bad:?}"
        );
    }
    assert!(is_not_found(store.token_state(Uuid::new_v4(), &t1)));
}

pub(crate) fn a_password_change_or_a_role_removal_ends_the_users_tokens<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    let u = alice(&store);
    assert_eq!(u.token_generation, 0);
    let probe = token("probe", SystemTime::now() + Duration::from_secs(60));
    let generation = |store: &dyn Store| store.token_state(u.id, &probe).unwrap().generation;
    let changed = store
        .update_user(
            u.id,
            u.version,
            UserChange {
                password_hash: Some("new".into()),
                ..UserChange::default()
            },
        )
        .unwrap();
    assert_eq!(changed.token_generation, 1);
    assert_eq!(generation(&store), 1);
    // Granting changes nothing; removing a role ends the tokens; a role that was not given
    // is not found and changes nothing.
    store.grant_role(u.id, t.id, Role::Member).unwrap();
    store.grant_role(u.id, t.id, Role::Admin).unwrap();
    assert_eq!(generation(&store), 1);
    store.revoke_role(u.id, t.id, Role::Admin).unwrap();
    assert_eq!(generation(&store), 2);
    assert!(is_not_found(store.revoke_role(u.id, t.id, Role::Admin)));
    assert_eq!(generation(&store), 2);
    let user = store.user(u.id).unwrap();
    assert_eq!((user.token_generation, user.version), (2, 2));
}
