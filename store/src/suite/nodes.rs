//! The suite: the nodes an admin disabled ([`NodeStore`](crate::NodeStore)).

use super::*;

pub(crate) fn nodes_are_disabled_and_enabled_again<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    assert!(store.disabled_nodes().unwrap().is_empty());
    let (a, b) = (Uuid::from_u128(2), Uuid::from_u128(1));
    let first = store.disable_node(a, Some("disk swap".into())).unwrap();
    assert_eq!(
        (first.node, first.reason.as_deref()),
        (a, Some("disk swap"))
    );
    store.disable_node(b, None).unwrap();
    // Again: the reason is replaced, not a second record.
    store.disable_node(a, Some("still".into())).unwrap();
    let all = store.disabled_nodes().unwrap();
    assert_eq!(
        all.iter()
            .map(|d| (d.node, d.reason.clone()))
            .collect::<Vec<_>>(),
        [(b, None), (a, Some("still".to_string()))]
    );
    assert!(matches!(
        store.disable_node(a, Some("x".repeat(256))),
        Err(StoreError::Invalid(_))
    ));
    // Kept across a reopen; enabled once.
    drop(store);
    let store = fx.open();
    assert_eq!(store.disabled_nodes().unwrap(), all);
    assert!(store.enable_node(a).unwrap());
    assert!(!store.enable_node(a).unwrap());
    assert_eq!(store.disabled_nodes().unwrap().len(), 1);
}

pub(crate) fn join_tokens_are_used_once_and_joined_nodes_revoked<F: Fixture>() {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let fx = F::new();
    let store = fx.open();
    let t0 = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    let token = |id: u128, expires: SystemTime| JoinToken {
        id: Uuid::from_u128(id),
        secret_hash: [id as u8; 32],
        roles: 0x14,
        created: t0,
        expires,
        used: None,
    };
    let node = |id: u128| JoinedNode {
        id: Uuid::from_u128(id),
        hostname: format!("host{id}"),
        roles: 0x14,
        serial: vec![0x40, id as u8],
        not_after: t0 + Duration::from_secs(86_400),
        joined: t0,
        revoked: None,
    };
    let hour = t0 + Duration::from_secs(3600);
    let a = store.create_join_token(token(1, hour)).unwrap();
    assert_eq!(a, token(1, hour));
    store.create_join_token(token(2, hour)).unwrap();
    assert!(matches!(
        store.create_join_token(token(1, hour)),
        Err(StoreError::Conflict(_))
    ));
    // Wrong secret, expired, unknown: refused, nothing kept.
    let redeem = |id: u128, secret: u8, at: SystemTime, n: u128| {
        store.redeem_join_token(Uuid::from_u128(id), &[secret; 32], at, node(n))
    };
    assert!(matches!(redeem(1, 9, t0, 10), Err(StoreError::Invalid(_))));
    assert!(matches!(
        redeem(1, 1, hour, 10),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        redeem(7, 7, t0, 10),
        Err(StoreError::NotFound { .. })
    ));
    assert!(store.joined_nodes().unwrap().is_empty());
    // Used once: the second use is refused, whoever asks.
    assert_eq!(redeem(1, 1, t0, 10).unwrap(), node(10));
    assert!(matches!(redeem(1, 1, t0, 11), Err(StoreError::Conflict(_))));
    // A node's UUID is taken once.
    assert!(matches!(redeem(2, 2, t0, 10), Err(StoreError::Conflict(_))));
    let tokens = store.join_tokens().unwrap();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0].used, Some((t0, Uuid::from_u128(10))));
    assert_eq!(
        tokens[1].used, None,
        "a refused use leaves the token as it was"
    );
    // A bad host name is refused.
    let mut bad = node(12);
    bad.hostname = String::new();
    assert!(matches!(
        store.redeem_join_token(Uuid::from_u128(2), &[2; 32], t0, bad),
        Err(StoreError::Invalid(_))
    ));
    // Revoked once: the first date stays. Kept across a reopen.
    let later = t0 + Duration::from_secs(60);
    let revoked = store
        .revoke_joined_node(Uuid::from_u128(10), later)
        .unwrap();
    assert_eq!(revoked.revoked, Some(later));
    let again = store
        .revoke_joined_node(Uuid::from_u128(10), later + Duration::from_secs(5))
        .unwrap();
    assert_eq!(again.revoked, Some(later));
    assert!(matches!(
        store.revoke_joined_node(Uuid::from_u128(99), later),
        Err(StoreError::NotFound { .. })
    ));
    drop(store);
    let store = fx.open();
    assert_eq!(store.joined_nodes().unwrap(), vec![again]);
    // A new token drops the expired ones; deleting one.
    store
        .create_join_token(JoinToken {
            created: hour,
            ..token(3, hour + Duration::from_secs(60))
        })
        .unwrap();
    assert_eq!(
        store
            .join_tokens()
            .unwrap()
            .iter()
            .map(|t| t.id)
            .collect::<Vec<_>>(),
        [Uuid::from_u128(3)]
    );
    store.delete_join_token(Uuid::from_u128(3)).unwrap();
    assert!(matches!(
        store.delete_join_token(Uuid::from_u128(3)),
        Err(StoreError::NotFound { .. })
    ));
}
