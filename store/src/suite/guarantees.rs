//! The suite: what the crate promises across concerns — scopes keep tenants apart, stale versions
//! conflict, nothing is lost when the store is opened again.

use std::net::Ipv4Addr;
use std::sync::Arc;

use super::*;

pub(crate) fn stale_versions_conflict<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    let to = |state| InstanceChange {
        state: Some(state),
        ..InstanceChange::default()
    };
    store
        .update_instance(Scope::All, i.id, 1, to(InstanceState::Active))
        .unwrap();
    let stale = store.update_instance(Scope::All, i.id, 1, to(InstanceState::Exited));
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    assert_eq!(
        store.instance(Scope::All, i.id).unwrap().state,
        InstanceState::Active
    );
    // Racing threads from one version: exactly one wins.
    let store = Arc::new(store);
    let winners: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let store = Arc::clone(&store);
                s.spawn(move || {
                    store
                        .update_instance(Scope::All, i.id, 2, to(InstanceState::Stopping))
                        .is_ok()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| usize::from(h.join().unwrap()))
            .sum()
    });
    assert_eq!(winners, 1);
    assert_eq!(store.instance(Scope::All, i.id).unwrap().version, 3);
    let tenant = store.tenant(t.id).unwrap();
    assert!(matches!(
        store.update_tenant(t.id, tenant.version + 1, TenantChange::default()),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.update_workload(Scope::All, w.id, 7, WorkloadChange::default()),
        Err(StoreError::Conflict(_))
    ));
}

pub(crate) fn tenants_are_isolated<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (a, wa) = tenant_and_workload(&store, "a", Quota::default(), 24);
    let (b, wb) = tenant_and_workload(&store, "b", Quota::default(), 24);
    let ia = store
        .create_instance(new_instance(&a, &wa, "a-vm"))
        .unwrap();
    let ib = store
        .create_instance(new_instance(&b, &wb, "b-vm"))
        .unwrap();
    let sa = Scope::Tenant(a.id);
    assert_ne!(ia.subnet, ib.subnet, "each tenant has its own subnet");
    // b's instance, workload and image are invisible to a.
    assert!(is_not_found(store.instance(sa, ib.id)));
    assert!(is_not_found(store.update_instance(
        sa,
        ib.id,
        1,
        InstanceChange::default()
    )));
    assert!(is_not_found(store.delete_instance(sa, ib.id)));
    assert!(is_not_found(store.workload(sa, wb.id)));
    assert!(is_not_found(store.update_workload(
        sa,
        wb.id,
        1,
        WorkloadChange::default()
    )));
    assert!(is_not_found(store.delete_workload(sa, wb.id)));
    assert!(is_not_found(store.image(sa, wb.image)));
    assert!(is_not_found(store.delete_image(sa, wb.image)));
    // a cannot start an instance of b's workload.
    assert!(is_not_found(
        store.create_instance(new_instance(&a, &wb, "x"))
    ));
    // a workload of a cannot use b's image.
    let steal = store.create_workload(NewWorkload {
        owner: Some(a.id),
        name: "steal".into(),
        flavor: wb.flavor,
        image: wb.image,
        user_data: String::new(),
        ephemeral: false,
    });
    assert!(is_not_found(steal));
    let listed = store
        .instances(sa, InstanceFilter::default(), Page::first(100))
        .unwrap();
    assert_eq!(listed.items, vec![ia.clone()]);
    // b's instance as a page marker for a is unknown.
    let marker = Page {
        marker: Some(ib.id),
        limit: 10,
    };
    assert!(matches!(
        store.instances(sa, InstanceFilter::default(), marker),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.images(sa).unwrap().len(), 1);
    assert_eq!(store.workloads(sa).unwrap().len(), 1);
    assert_eq!(store.subnets(sa).unwrap().len(), 1);
    assert_eq!(store.subnets(Scope::All).unwrap().len(), 2);
    let all = store
        .instances(Scope::All, InstanceFilter::default(), Page::first(100))
        .unwrap();
    assert_eq!(all.items.len(), 2);
    // b's instance is untouched.
    assert_eq!(store.instance(Scope::Tenant(b.id), ib.id).unwrap(), ib);
}

pub(crate) fn nothing_is_lost_on_reopen<F: Fixture>() {
    let fx = F::new();
    let (t, w, u, instances, cnci) = {
        let store = fx.open();
        let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
        let u = store
            .create_user(NewUser {
                name: "alice".into(),
                password_hash: "hash".into(),
            })
            .unwrap();
        store.grant_role(u.id, t.id, Role::Admin).unwrap();
        let mut instances: Vec<Instance> = (0..5)
            .map(|n| {
                store
                    .create_instance(new_instance(&t, &w, &format!("vm{n}")))
                    .unwrap()
            })
            .collect();
        instances[1] = store
            .update_instance(
                Scope::All,
                instances[1].id,
                1,
                InstanceChange {
                    state: Some(InstanceState::Active),
                    ..InstanceChange::default()
                },
            )
            .unwrap();
        let subnet = store.subnets(Scope::All).unwrap().remove(0);
        let cnci = store.create_cnci(subnet.id).unwrap();
        store
            .append_event(NewEvent {
                tenant: Some(t.id),
                kind: EventKind::Warning,
                message: "kept".into(),
            })
            .unwrap();
        (t, w, u, instances, cnci)
    };
    let store = fx.open();
    assert_eq!(store.tenant(t.id).unwrap(), t);
    assert_eq!(store.workload(Scope::All, w.id).unwrap(), w);
    assert_eq!(store.user(u.id).unwrap(), u);
    assert_eq!(store.roles_of_user(u.id).unwrap().len(), 1);
    let listed = store
        .instances(
            Scope::Tenant(t.id),
            InstanceFilter::default(),
            Page::first(100),
        )
        .unwrap();
    assert_eq!(listed.items, instances);
    assert_eq!(store.cnci(Scope::All, cnci.id).unwrap(), cnci);
    assert_eq!(
        store.events(Scope::All, None, 10).unwrap()[0].message,
        "kept"
    );
    // Allocation carries on from what is stored.
    let more = store.create_instance(new_instance(&t, &w, "more")).unwrap();
    assert_eq!(more.ip, Ipv4Addr::new(172, 16, 0, 7));
}
