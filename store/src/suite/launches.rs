//! A launch's instances made together with their first actions
//! ([`ActionStore::create_instances_with_action`]): in order, up to the quota, listed as made.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use super::*;

fn create(request: &str) -> NewInstanceAction {
    NewInstanceAction {
        request_id: request.into(),
        instance: Uuid::nil(),
        action: "create".into(),
        user: Some(Uuid::from_u128(7)),
        project: Some(Uuid::from_u128(8)),
        events: vec!["node_start".into()],
        done: vec!["controller_create".into()],
    }
}

/// Every id of `scope` (through `filter`) in listing order, read in pages of `limit`.
fn walk(store: &dyn Store, filter: InstanceFilter, limit: u32) -> Vec<Uuid> {
    let mut seen = Vec::new();
    let mut page = Page::first(limit);
    loop {
        let paged = store.instances(Scope::All, filter, page).unwrap();
        seen.extend(paged.items.iter().map(|i| i.id));
        match paged.next {
            Some(marker) => page.marker = Some(marker),
            None => return seen,
        }
    }
}

pub(crate) fn a_launchs_instances_are_made_in_order_up_to_the_quota<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    // A /29 holds 5 instances: 78 of them take 16 subnets; the quota stops the 79th, in the
    // middle of what etcd would make in one transaction (one per subnet here).
    let quota = Quota {
        instances: Some(78),
        ..Quota::default()
    };
    let (t, w) = tenant_and_workload(&store, "many", quota, 29);
    let action = create("req-many");
    let (made, stopped) =
        store.create_instances_with_action(&new_instance(&t, &w, "vm"), 100, &action);
    assert_eq!(made.len(), 78);
    assert!(
        matches!(
            stopped,
            Some(StoreError::QuotaExceeded {
                what: QuotaKind::Instances,
                ..
            })
        ),
        "{stopped:?}"
    );
    let ips: HashSet<Ipv4Addr> = made.iter().map(|(i, _)| i.ip).collect();
    assert_eq!(ips.len(), 78, "no address given twice");
    assert_eq!(store.subnets(Scope::Tenant(t.id)).unwrap().len(), 16);
    assert_eq!(store.usage(t.id).unwrap().instances, 78);
    // Each with its action, as create_instance_with_action makes one.
    for (i, recorded) in &made {
        let recorded = recorded.as_ref().unwrap();
        assert_eq!(
            (
                recorded.instance,
                recorded.tenant,
                recorded.request_id.as_str()
            ),
            (i.id, t.id, "req-many")
        );
        assert_eq!(
            store.instance_actions(Scope::Tenant(t.id), i.id).unwrap(),
            vec![recorded.clone()]
        );
        // The controller's part recorded done, the node's under way, as written.
        assert_eq!(
            crate::actions::results(recorded),
            [
                ("controller_create", Some(ActionResult::Success)),
                ("node_start", None)
            ]
        );
        assert_eq!(recorded.events[0].finish, Some(recorded.start));
        assert_eq!(
            (i.state.clone(), i.name.as_str(), i.version),
            (InstanceState::Pending, "vm", 1)
        );
    }
    let made: Vec<Instance> = made.into_iter().map(|(i, _)| i).collect();
    // Listed in the order made.
    let listed = store
        .instances(
            Scope::Tenant(t.id),
            InstanceFilter::default(),
            Page::first(100),
        )
        .unwrap();
    assert_eq!(listed.items, made);
    let first: Vec<String> = made[..6]
        .iter()
        .map(|i| format!("{} {}", i.subnet, i.ip))
        .collect();
    assert_eq!(
        first,
        [
            "172.16.0.0/29 172.16.0.2",
            "172.16.0.0/29 172.16.0.3",
            "172.16.0.0/29 172.16.0.4",
            "172.16.0.0/29 172.16.0.5",
            "172.16.0.0/29 172.16.0.6",
            "172.16.0.8/29 172.16.0.10",
        ]
    );
    // Over the quota from the first: nothing made; none asked: nothing either.
    let (none, stopped) =
        store.create_instances_with_action(&new_instance(&t, &w, "vm"), 3, &action);
    assert!(none.is_empty());
    assert!(matches!(stopped, Some(StoreError::QuotaExceeded { .. })));
    let (none, stopped) =
        store.create_instances_with_action(&new_instance(&t, &w, "vm"), 0, &action);
    assert!(none.is_empty() && stopped.is_none());
    // A workload the tenant cannot see: nothing made, and why.
    let (t2, _) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let mut theirs = new_instance(&t2, &w, "x");
    theirs.workload = Uuid::new_v4();
    let (none, stopped) = store.create_instances_with_action(&theirs, 2, &action);
    assert!(none.is_empty());
    assert!(
        matches!(stopped, Some(StoreError::NotFound { .. })),
        "{stopped:?}"
    );
    // An action that cannot be recorded: the instances are made all the same, without it.
    let (t3, w3) = tenant_and_workload(&store, "third", Quota::default(), 24);
    let (unrecorded, stopped) =
        store.create_instances_with_action(&new_instance(&t3, &w3, "y"), 2, &create(""));
    assert_eq!((unrecorded.len(), stopped), (2, None));
    for (i, refused) in &unrecorded {
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{refused:?}"
        );
        assert_eq!(store.instance_actions(Scope::All, i.id).unwrap(), vec![]);
    }
    // Many in one subnet: consecutive addresses, usage counted for each.
    let (big, wbig) = tenant_and_workload(&store, "big", Quota::default(), 24);
    let (many, stopped) =
        store.create_instances_with_action(&new_instance(&big, &wbig, "b"), 70, &action);
    assert_eq!((many.len(), stopped.is_none()), (70, true));
    let many: Vec<Instance> = many.into_iter().map(|(i, _)| i).collect();
    assert!(
        many.iter()
            .enumerate()
            .all(|(n, i)| i.ip.octets()[3] as usize == n + 2)
    );
    assert_eq!(store.usage(big.id).unwrap().instances, 70);
    // Pages of every size through all the instances, and through a node's, miss none and
    // repeat none: instances made together (etcd: one transaction, one revision) included.
    let all: Vec<Uuid> = made
        .iter()
        .chain(unrecorded.iter().map(|(i, _)| i))
        .chain(&many)
        .map(|i| i.id)
        .collect();
    let node = Uuid::new_v4();
    for i in &many[..40] {
        let change = InstanceChange {
            node: Some(Some(node)),
            ..InstanceChange::default()
        };
        store
            .update_instance(Scope::All, i.id, i.version, change)
            .unwrap();
    }
    let mut on_node: Vec<Uuid> = many[..40].iter().map(|i| i.id).collect();
    on_node.sort();
    for limit in [1, 3, 7, 32, 33, 100] {
        assert_eq!(
            walk(&store, InstanceFilter::default(), limit),
            all,
            "pages of {limit}"
        );
        let mut seen = walk(&store, InstanceFilter { node: Some(node) }, limit);
        assert_eq!(seen.len(), 40, "a node's pages of {limit}");
        seen.sort();
        assert_eq!(seen, on_node);
    }
}

/// Instances with as much metadata as an instance may hold, in every encoding's worst case:
/// made whole (etcd: fewer to a transaction, within its request size).
pub(crate) fn a_launch_of_large_records_is_made_whole<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "large", Quota::default(), 24);
    let mut new = new_instance(&t, &w, "large");
    new.metadata = largest_metadata();
    let (made, stopped) = store.create_instances_with_action(&new, 6, &create("req-large"));
    assert!(stopped.is_none(), "{stopped:?}");
    assert_eq!(made.len(), 6);
    for (i, recorded) in &made {
        assert!(recorded.is_ok(), "{recorded:?}");
        assert_eq!(
            store.instance(Scope::All, i.id).unwrap().metadata,
            new.metadata
        );
    }
    assert_eq!(store.usage(t.id).unwrap().instances, 6);
}
