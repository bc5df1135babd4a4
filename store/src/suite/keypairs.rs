//! The suite: users' key pairs ([`KeypairStore`](crate::KeypairStore)) and the key an instance
//! keeps.

use std::sync::Arc;

use uuid::Uuid;

use super::*;

const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkZ7oKqGOSVvZkVgGUSyV3m8p3V7ZQ2 a@b";

fn user(store: &dyn Store, name: &str) -> User {
    store
        .create_user(NewUser {
            name: name.into(),
            password_hash: "$argon2id$x".into(),
        })
        .unwrap()
}

fn new_keypair(user: Uuid, name: &str) -> NewKeypair {
    NewKeypair {
        user,
        name: name.into(),
        kind: KeypairKind::Ssh,
        public_key: ED25519.into(),
        fingerprint: "00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff".into(),
    }
}

pub(crate) fn keypair_crud<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let alice = user(&store, "alice");
    let bob = user(&store, "bob");
    let k2 = store
        .create_keypair(new_keypair(alice.id, "k2"), 100)
        .unwrap();
    let k1 = store
        .create_keypair(new_keypair(alice.id, "k 1_-x"), 100)
        .unwrap();
    assert_eq!((k2.user, k2.name.as_str()), (alice.id, "k2"));
    assert_eq!(k2.kind, KeypairKind::Ssh);
    assert_eq!(k2.public_key, ED25519);
    assert_eq!(store.keypair(alice.id, "k2").unwrap(), k2);
    assert_eq!(
        store.keypairs(alice.id).unwrap(),
        vec![k1.clone(), k2.clone()]
    );
    // Names are unique per user, not across users.
    assert!(matches!(
        store.create_keypair(new_keypair(alice.id, "k2"), 100),
        Err(StoreError::Conflict(_))
    ));
    let bobs = store
        .create_keypair(new_keypair(bob.id, "k2"), 100)
        .unwrap();
    assert_eq!(store.keypairs(bob.id).unwrap(), vec![bobs]);
    assert!(is_not_found(store.keypair(bob.id, "k 1_-x")));
    // Bad input.
    let long = "k".repeat(Keypair::MAX_NAME + 1);
    for name in ["", "a/b", "é", "a.b", long.as_str()] {
        let r = store.create_keypair(new_keypair(alice.id, name), 100);
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{name:?}: {r:?}");
        assert!(is_not_found(store.keypair(alice.id, name)), "{name:?}");
    }
    let huge = format!("ssh-rsa {}", "A".repeat(Keypair::MAX_PUBLIC_KEY));
    for key in ["", " ", "ssh-ed25519 AAAA\nssh-rsa AAAA", huge.as_str()] {
        let r = store.create_keypair(
            NewKeypair {
                public_key: key.into(),
                ..new_keypair(alice.id, "bad")
            },
            100,
        );
        assert!(matches!(r, Err(StoreError::Invalid(_))), "{r:?}");
    }
    assert!(is_not_found(
        store.create_keypair(new_keypair(Uuid::new_v4(), "k"), 100)
    ));
    // Delete.
    store.delete_keypair(alice.id, "k2").unwrap();
    assert!(is_not_found(store.keypair(alice.id, "k2")));
    assert!(is_not_found(store.delete_keypair(alice.id, "k2")));
    assert_eq!(store.keypairs(alice.id).unwrap(), vec![k1]);
    assert!(store.keypairs(Uuid::new_v4()).unwrap().is_empty());
    // A user's key pairs go with the user; a new user of the same name has none.
    store.delete_user(alice.id).unwrap();
    let again = user(&store, "alice");
    assert!(store.keypairs(alice.id).unwrap().is_empty());
    assert!(store.keypairs(again.id).unwrap().is_empty());
    assert_eq!(store.keypairs(bob.id).unwrap().len(), 1);
}

pub(crate) fn parallel_keypair_creates_respect_the_limit<F: Fixture>() {
    let fx = F::new();
    let store = Arc::new(fx.open());
    let alice = user(store.as_ref(), "alice");
    let results: Vec<Result<Keypair>> = in_parallel(4, |n| {
        (0..3)
            .map(|k| store.create_keypair(new_keypair(alice.id, &format!("k-{n}-{k}")), 5))
            .collect()
    });
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 5);
    for r in &results {
        if let Err(e) = r {
            assert_eq!(
                *e,
                StoreError::QuotaExceeded {
                    what: QuotaKind::Keypairs,
                    limit: 5
                }
            );
        }
    }
    assert_eq!(store.keypairs(alice.id).unwrap().len(), 5);
}

pub(crate) fn an_instance_keeps_its_key<F: Fixture>() {
    let fx = F::new();
    let (with_key, without) = {
        let store = fx.open();
        let alice = user(&store, "alice");
        let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
        let k = store
            .create_keypair(new_keypair(alice.id, "k1"), 100)
            .unwrap();
        let key = InstanceKey {
            name: k.name.clone(),
            public_key: k.public_key.clone(),
        };
        let with_key = store
            .create_instance(NewInstance {
                key: Some(key.clone()),
                ..new_instance(&t, &w, "vm1")
            })
            .unwrap();
        assert_eq!(with_key.key, Some(key.clone()));
        let without = store.create_instance(new_instance(&t, &w, "vm2")).unwrap();
        assert_eq!(without.key, None);
        // The instance keeps its copy when the key pair goes.
        store.delete_keypair(alice.id, "k1").unwrap();
        assert_eq!(
            store.instance(Scope::All, with_key.id).unwrap().key,
            Some(key.clone())
        );
        let bad = store.create_instance(NewInstance {
            key: Some(InstanceKey {
                name: "a/b".into(),
                public_key: ED25519.into(),
            }),
            ..new_instance(&t, &w, "vm3")
        });
        assert!(matches!(bad, Err(StoreError::Invalid(_))), "{bad:?}");
        (with_key.id, without.id)
    };
    let store = fx.open();
    let listed = store
        .instances(Scope::All, InstanceFilter::default(), Page::first(10))
        .unwrap();
    let key_of = |id: Uuid| {
        listed
            .items
            .iter()
            .find(|i| i.id == id)
            .unwrap()
            .key
            .clone()
    };
    assert_eq!(key_of(with_key).map(|k| k.name), Some("k1".to_string()));
    assert_eq!(key_of(without), None);
}
