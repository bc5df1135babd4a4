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

pub(crate) fn recent_events_are_the_newest_in_order<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let a = tenant_with(&store, "a", Quota::default(), 24);
    let ev = |tenant, message: String| NewEvent {
        tenant,
        kind: EventKind::Info,
        message,
    };
    let mut mine = Vec::new();
    for i in 0..700 {
        let tenant = (i % 3 == 0).then_some(a.id);
        let e = store
            .append_event(ev(tenant, format!("event {i}")))
            .unwrap();
        if tenant.is_some() {
            mine.push(e);
        }
    }
    let all = store.events(Scope::All, None, 1000).unwrap();
    assert_eq!(all.len(), 700);
    assert_eq!(
        store.recent_events(Scope::All, 5).unwrap(),
        all[695..].to_vec()
    );
    // More than a batch of etcd's back in the log, through other tenants' events.
    let recent = store.recent_events(Scope::Tenant(a.id), 200).unwrap();
    assert_eq!(recent, mine[mine.len() - 200..].to_vec());
    assert_eq!(
        store.recent_events(Scope::Tenant(a.id), 1000).unwrap(),
        mine
    );
    assert!(store.recent_events(Scope::All, 0).unwrap().is_empty());
}
