//! The suite: users' profiles (enabled, default project), projects' descriptions, the four
//! roles, and application credentials ([`IdentityStore`](crate::IdentityStore)).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use uuid::Uuid;

use super::*;

fn user(store: &dyn Store, name: &str) -> User {
    store
        .create_user(NewUser {
            name: name.into(),
            password_hash: "$pbkdf2-sha256$x".into(),
        })
        .unwrap()
}

fn new_cred(user: Uuid, project: Uuid, name: &str) -> NewAppCredential {
    NewAppCredential {
        user,
        project,
        name: name.into(),
        description: "for CI".into(),
        secret_hash: "$pbkdf2-sha256$secret".into(),
        roles: vec![Role::Reader, Role::Member, Role::Reader],
        expires: None,
        unrestricted: false,
    }
}

pub(crate) fn users_and_projects_keep_keystones_fields<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    assert_eq!(t.description, "");
    let described = store
        .create_described_tenant(
            NewTenant {
                name: "described".into(),
                quota: Quota::default(),
                subnet_prefix: 24,
            },
            "a project".into(),
        )
        .unwrap();
    assert_eq!(store.tenant(described.id).unwrap().description, "a project");
    let changed = store
        .update_tenant(
            described.id,
            1,
            TenantChange {
                description: Some("changed".into()),
                ..TenantChange::default()
            },
        )
        .unwrap();
    assert_eq!(changed.description, "changed");
    assert_eq!(store.tenant(described.id).unwrap(), changed);
    let long = "d".repeat(MAX_DESCRIPTION + 1);
    let r = store.create_described_tenant(
        NewTenant {
            name: "long".into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        },
        long.clone(),
    );
    assert!(matches!(r, Err(StoreError::Invalid(_))), "{r:?}");
    let r = store.update_tenant(
        t.id,
        1,
        TenantChange {
            description: Some(long),
            ..TenantChange::default()
        },
    );
    assert!(matches!(r, Err(StoreError::Invalid(_))), "{r:?}");

    // A user is enabled, without a default project, unless made otherwise.
    let alice = user(&store, "alice");
    assert!(alice.enabled);
    assert_eq!(alice.default_project, None);
    let bob = store
        .create_user_with(
            NewUser {
                name: "bob".into(),
                password_hash: "h".into(),
            },
            UserProfile {
                enabled: false,
                default_project: Some(t.id),
            },
        )
        .unwrap();
    assert_eq!((bob.enabled, bob.default_project), (false, Some(t.id)));
    assert_eq!(store.user(bob.id).unwrap(), bob);
    let nowhere = UserProfile {
        default_project: Some(Uuid::new_v4()),
        ..UserProfile::default()
    };
    let r = store.create_user_with(
        NewUser {
            name: "carol".into(),
            password_hash: "h".into(),
        },
        nowhere,
    );
    assert!(is_not_found(r));
    assert!(is_not_found(store.user_by_name("carol")));
    // Renamed (not to a name taken), disabled (its tokens end), default project changed.
    let r = store.update_user(
        alice.id,
        1,
        UserChange {
            name: Some("bob".into()),
            ..UserChange::default()
        },
    );
    assert!(matches!(r, Err(StoreError::Conflict(_))), "{r:?}");
    let renamed = store
        .update_user(
            alice.id,
            1,
            UserChange {
                name: Some("alicia".into()),
                default_project: Some(Some(t.id)),
                ..UserChange::default()
            },
        )
        .unwrap();
    assert_eq!(renamed.token_generation, alice.token_generation);
    assert_eq!(store.user_by_name("alicia").unwrap(), renamed);
    assert!(is_not_found(store.user_by_name("alice")));
    let disabled = store
        .update_user(
            alice.id,
            2,
            UserChange {
                enabled: Some(false),
                default_project: Some(None),
                ..UserChange::default()
            },
        )
        .unwrap();
    assert!(!disabled.enabled);
    assert_eq!(disabled.default_project, None);
    assert_eq!(disabled.token_generation, alice.token_generation + 1);
    let enabled = store
        .update_user(
            alice.id,
            3,
            UserChange {
                enabled: Some(true),
                ..UserChange::default()
            },
        )
        .unwrap();
    assert!(enabled.enabled);
    assert_eq!(enabled.token_generation, disabled.token_generation);
    assert_eq!(store.user(alice.id).unwrap(), enabled);
    let r = store.update_user(
        alice.id,
        4,
        UserChange {
            default_project: Some(Some(Uuid::new_v4())),
            ..UserChange::default()
        },
    );
    assert!(is_not_found(r));

    // All four roles are kept as given.
    for role in Role::ALL {
        store.grant_role(alice.id, t.id, role).unwrap();
    }
    let kept: Vec<Role> = store
        .roles_of_user(alice.id)
        .unwrap()
        .iter()
        .map(|a| a.role)
        .collect();
    assert_eq!(kept, Role::ALL);
    store.revoke_role(alice.id, t.id, Role::Manager).unwrap();
    assert_eq!(store.roles_in_tenant(t.id).unwrap().len(), 3);
}

pub(crate) fn app_credential_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    let alice = user(&store, "alice");
    let bob = user(&store, "bob");
    let expires = SystemTime::UNIX_EPOCH + Duration::from_secs(4_000_000_000);
    let c2 = store
        .create_app_credential(
            NewAppCredential {
                expires: Some(expires),
                unrestricted: true,
                ..new_cred(alice.id, t.id, "c2")
            },
            10,
        )
        .unwrap();
    assert_eq!(c2.roles, [Role::Member, Role::Reader]);
    assert_eq!((c2.user, c2.project), (alice.id, t.id));
    assert_eq!((c2.expires, c2.unrestricted), (Some(expires), true));
    assert_eq!(store.app_credential(c2.id).unwrap(), c2);
    let c1 = store
        .create_app_credential(new_cred(alice.id, t.id, "c1"), 10)
        .unwrap();
    assert_eq!(c1.expires, None);
    assert_eq!(
        store.app_credentials(alice.id).unwrap(),
        vec![c1.clone(), c2.clone()]
    );
    // Names are unique per user, not across users.
    let r = store.create_app_credential(new_cred(alice.id, t.id, "c1"), 10);
    assert!(matches!(r, Err(StoreError::Conflict(_))), "{r:?}");
    let bobs = store
        .create_app_credential(new_cred(bob.id, t.id, "c1"), 10)
        .unwrap();
    assert_eq!(store.app_credentials(bob.id).unwrap(), vec![bobs.clone()]);
    // Bad input; a user or project that does not exist.
    let long = "n".repeat(256);
    for bad in [
        new_cred(alice.id, t.id, ""),
        new_cred(alice.id, t.id, &long),
        NewAppCredential {
            roles: vec![],
            ..new_cred(alice.id, t.id, "x")
        },
        NewAppCredential {
            secret_hash: String::new(),
            ..new_cred(alice.id, t.id, "x")
        },
        NewAppCredential {
            description: "d".repeat(MAX_DESCRIPTION + 1),
            ..new_cred(alice.id, t.id, "x")
        },
    ] {
        let r = store.create_app_credential(bad, 10);
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{r:?}");
    }
    assert!(is_not_found(
        store.create_app_credential(new_cred(Uuid::new_v4(), t.id, "x"), 10)
    ));
    assert!(is_not_found(store.create_app_credential(
        new_cred(alice.id, Uuid::new_v4(), "x"),
        10
    )));
    // Delete: only the user's own.
    assert!(is_not_found(store.delete_app_credential(bob.id, c2.id)));
    store.delete_app_credential(alice.id, c2.id).unwrap();
    assert!(is_not_found(store.app_credential(c2.id)));
    assert!(is_not_found(store.delete_app_credential(alice.id, c2.id)));
    assert_eq!(store.app_credentials(alice.id).unwrap(), vec![c1.clone()]);
    assert!(store.app_credentials(Uuid::new_v4()).unwrap().is_empty());
    // They go with their user, and with their project.
    let other = tenant_with(&store, "other", Quota::default(), 24);
    let elsewhere = store
        .create_app_credential(new_cred(bob.id, other.id, "c2"), 10)
        .unwrap();
    store.delete_user(alice.id).unwrap();
    assert!(is_not_found(store.app_credential(c1.id)));
    assert!(store.app_credentials(alice.id).unwrap().is_empty());
    store.delete_tenant(t.id).unwrap();
    assert!(is_not_found(store.app_credential(bobs.id)));
    assert_eq!(store.app_credentials(bob.id).unwrap(), vec![elsewhere]);
    let again = user(&store, "alice");
    assert!(store.app_credentials(again.id).unwrap().is_empty());
}

pub(crate) fn parallel_app_credential_creates_respect_the_limit<F: Fixture>() {
    let fx = F::new();
    let store = Arc::new(fx.open());
    let t = tenant_with(store.as_ref(), "acme", Quota::default(), 24);
    let alice = user(store.as_ref(), "alice");
    let results: Vec<Result<AppCredential>> = in_parallel(4, |n| {
        (0..3)
            .map(|k| {
                store.create_app_credential(new_cred(alice.id, t.id, &format!("c-{n}-{k}")), 5)
            })
            .collect()
    });
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 5);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(
                *e,
                StoreError::QuotaExceeded {
                    what: QuotaKind::AppCredentials,
                    limit: 5
                }
            );
        }
    }
    assert_eq!(store.app_credentials(alice.id).unwrap().len(), 5);
}

/// A user or a project with more credentials than one etcd transaction could delete goes, and
/// its credentials with it.
pub(crate) fn many_credentials_go_with_their_user_and_project<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let t = tenant_with(&store, "acme", Quota::default(), 24);
    let u = tenant_with(&store, "other", Quota::default(), 24);
    let alice = user(&store, "alice");
    let bob = user(&store, "bob");
    for n in 0..70 {
        store
            .create_app_credential(new_cred(alice.id, t.id, &format!("a{n}")), 100)
            .unwrap();
        store
            .create_app_credential(new_cred(bob.id, u.id, &format!("b{n}")), 100)
            .unwrap();
    }
    store.delete_user(alice.id).unwrap();
    assert!(store.app_credentials(alice.id).unwrap().is_empty());
    store.delete_tenant(u.id).unwrap();
    assert!(store.app_credentials(bob.id).unwrap().is_empty());
}
