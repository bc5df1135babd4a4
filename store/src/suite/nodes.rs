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
