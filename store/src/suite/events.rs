//! The suite: the event log ([`EventStore`](crate::EventStore)).

use super::*;

pub(crate) fn events_are_scoped<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let a = tenant_with(&store, "a", Quota::default(), 24);
    let b = tenant_with(&store, "b", Quota::default(), 24);
    let ev = |tenant, message: &str| NewEvent {
        tenant,
        kind: EventKind::Info,
        message: message.into(),
    };
    let e1 = store.append_event(ev(Some(a.id), "a started")).unwrap();
    store.append_event(ev(Some(b.id), "b started")).unwrap();
    let e3 = store.append_event(ev(None, "node joined")).unwrap();
    assert!(e1.seq < e3.seq);
    let mine = store.events(Scope::Tenant(a.id), None, 100).unwrap();
    assert_eq!(mine, vec![e1.clone()]);
    assert_eq!(store.events(Scope::All, None, 100).unwrap().len(), 3);
    assert_eq!(store.events(Scope::All, Some(e1.seq), 1).unwrap().len(), 1);
    assert_eq!(store.clear_events(Scope::Tenant(a.id)).unwrap(), 1);
    assert_eq!(store.events(Scope::All, None, 100).unwrap().len(), 2);
    assert_eq!(store.clear_events(Scope::All).unwrap(), 2);
}
