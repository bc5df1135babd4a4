//! The suite: the instance actions log ([`ActionStore`](crate::ActionStore)).

use super::*;

fn new_action(
    instance: Uuid,
    request_id: &str,
    action: &str,
    events: &[&str],
) -> NewInstanceAction {
    NewInstanceAction {
        request_id: request_id.into(),
        instance,
        action: action.into(),
        user: Some(Uuid::from_u128(7)),
        project: Some(Uuid::from_u128(8)),
        events: events.iter().map(|e| e.to_string()).collect(),
        done: Vec::new(),
    }
}

/// An instance of `new` made with its create action, its `node_start` unfinished: pending, its
/// START awaited.
fn awaiting_start<S: ActionStore + ?Sized>(store: &S, new: NewInstance) -> Instance {
    let action = new_action(Uuid::nil(), "req-1", "create", &["node_start"]);
    store.create_instance_with_action(new, action).unwrap().0
}

fn kind_of<T: std::fmt::Debug>(r: Result<T>) -> &'static str {
    match r {
        Err(StoreError::NotFound { kind, .. }) => kind,
        other => panic!("not a NotFound: {other:?}"),
    }
}

pub(crate) fn actions_are_recorded_and_finished<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (other, _) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    assert_eq!(store.instance_actions(Scope::All, i.id).unwrap(), vec![]);

    let created = store
        .add_instance_action(new_action(i.id, "req-1", "create", &["controller_create"]))
        .unwrap();
    assert_eq!(created.tenant, t.id);
    assert_eq!(created.user, Some(Uuid::from_u128(7)));
    assert_eq!(created.project, Some(Uuid::from_u128(8)));
    assert_eq!(created.message, None);
    assert_eq!(created.events.len(), 1);
    assert_eq!(created.events[0].finish, None);
    assert_eq!(created.events[0].result, None);

    // The controller's part done, then the node's part started and failed.
    let done = store
        .finish_action_event(
            i.id,
            ActionTarget::Request("req-1"),
            "controller_create",
            EventOutcome::success(),
        )
        .unwrap()
        .unwrap();
    assert_eq!(done.events[0].result, Some(ActionResult::Success));
    assert!(done.events[0].finish.is_some());
    let started = store
        .start_action_event(i.id, ActionTarget::Newest, "node_start")
        .unwrap()
        .unwrap();
    assert_eq!(started.events.len(), 2);
    let stop = store
        .add_instance_action(new_action(i.id, "req-2", "stop", &["controller_stop"]))
        .unwrap();
    // The newest action with node_start open is the create, not the newer stop.
    let failed = store
        .finish_action_event(
            i.id,
            ActionTarget::Newest,
            "node_start",
            EventOutcome::error("no image"),
        )
        .unwrap()
        .unwrap();
    assert_eq!(failed.request_id, "req-1");
    assert_eq!(failed.message.as_deref(), Some("Error"));
    assert_eq!(failed.events[1].result, Some(ActionResult::Error));
    assert_eq!(failed.events[1].detail.as_deref(), Some("no image"));
    assert_eq!(
        store
            .finish_action_event(
                i.id,
                ActionTarget::Newest,
                "node_start",
                EventOutcome::success()
            )
            .unwrap(),
        None,
        "nothing open any more"
    );
    assert_eq!(
        store
            .start_action_event(i.id, ActionTarget::Request("req-9"), "x")
            .unwrap(),
        None
    );

    // Newest first; the same records by request id; as written.
    let list = store.instance_actions(Scope::Tenant(t.id), i.id).unwrap();
    let ids: Vec<&str> = list.iter().map(|a| a.request_id.as_str()).collect();
    assert_eq!(ids, ["req-2", "req-1"]);
    assert_eq!(list[0], stop);
    assert_eq!(list[1], failed);
    assert_eq!(
        store.instance_action(Scope::All, i.id, "req-1").unwrap(),
        failed
    );

    // Duplicates, bad input, unknown instances and request ids, other tenants.
    assert!(matches!(
        store.add_instance_action(new_action(i.id, "req-1", "stop", &[])),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.add_instance_action(new_action(i.id, "", "stop", &[])),
        Err(StoreError::Invalid(_))
    ));
    let nobody = Uuid::new_v4();
    assert!(is_not_found(store.add_instance_action(new_action(
        nobody,
        "req-3",
        "stop",
        &[]
    ))));
    assert_eq!(
        kind_of(store.instance_actions(Scope::All, nobody)),
        "instance"
    );
    assert_eq!(
        kind_of(store.instance_action(Scope::Tenant(t.id), i.id, "req-3")),
        "instance action"
    );
    assert_eq!(
        kind_of(store.instance_actions(Scope::Tenant(other.id), i.id)),
        "instance"
    );
    assert_eq!(
        kind_of(store.instance_action(Scope::Tenant(other.id), i.id, "req-1")),
        "instance"
    );
}

pub(crate) fn actions_are_bounded_and_outlive_the_instance<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (other, _) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    let extra = 5;
    for n in 0..ACTIONS_PER_INSTANCE + extra {
        store
            .add_instance_action(new_action(i.id, &format!("req-{n}"), "reboot", &[]))
            .unwrap();
    }
    let kept = store.instance_actions(Scope::All, i.id).unwrap();
    assert_eq!(kept.len(), ACTIONS_PER_INSTANCE);
    let last = ACTIONS_PER_INSTANCE + extra - 1;
    assert_eq!(kept[0].request_id, format!("req-{last}"));
    assert_eq!(kept[kept.len() - 1].request_id, format!("req-{extra}"));
    assert!(is_not_found(store.instance_action(
        Scope::All,
        i.id,
        "req-0"
    )));

    // The record goes; the actions stay, for the tenant and admins, and take no new ones.
    store.delete_instance(Scope::All, i.id).unwrap();
    assert_eq!(
        store
            .instance_actions(Scope::Tenant(t.id), i.id)
            .unwrap()
            .len(),
        ACTIONS_PER_INSTANCE
    );
    assert_eq!(
        store
            .instance_action(Scope::All, i.id, &format!("req-{last}"))
            .unwrap()
            .action,
        "reboot"
    );
    assert_eq!(
        kind_of(store.instance_actions(Scope::Tenant(other.id), i.id)),
        "instance"
    );
    assert!(is_not_found(store.add_instance_action(new_action(
        i.id,
        "req-new",
        "start",
        &[]
    ))));
    assert_eq!(
        store
            .finish_action_event(
                i.id,
                ActionTarget::Request("req-1"),
                "late",
                EventOutcome::success()
            )
            .unwrap(),
        None,
        "req-1 was pushed out"
    );
}

/// The actions of at most `GONE_INSTANCES_KEPT` gone instances are kept.
pub(crate) fn gone_instances_keep_their_actions_for_a_while<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let mut gone = Vec::new();
    for n in 0..=GONE_INSTANCES_KEPT {
        let i = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
        store
            .add_instance_action(new_action(i.id, &format!("req-{n}"), "create", &[]))
            .unwrap();
        store.delete_instance(Scope::All, i.id).unwrap();
        gone.push(i.id);
    }
    // One without actions does not count.
    let quiet = store.create_instance(new_instance(&t, &w, "vm")).unwrap();
    store.delete_instance(Scope::All, quiet.id).unwrap();
    assert!(is_not_found(store.instance_actions(Scope::All, gone[0])));
    assert_eq!(
        store.instance_actions(Scope::All, gone[1]).unwrap().len(),
        1
    );
    let newest = gone[gone.len() - 1];
    assert_eq!(store.instance_actions(Scope::All, newest).unwrap().len(), 1);
}

/// `add_instance_actions` and `finish_action_events` answer each in order, as the single calls
/// would (a store may run them side by side): the errors stay with their own item.
pub(crate) fn many_actions_are_recorded_and_finished_in_order<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let ids: Vec<Uuid> = (0..40)
        .map(|k| {
            store
                .create_instance(new_instance(&t, &w, &format!("vm-{k}")))
                .unwrap()
                .id
        })
        .collect();
    // One of them twice (a duplicate request id), and one with no instance.
    let mut new: Vec<NewInstanceAction> = ids
        .iter()
        .map(|&i| new_action(i, "req-many", "create", &["controller_create"]))
        .collect();
    new.insert(
        7,
        new_action(ids[3], "req-many", "create", &["controller_create"]),
    );
    new.push(new_action(
        Uuid::from_u128(99),
        "req-many",
        "create",
        &["controller_create"],
    ));
    let added = store.add_instance_actions(&new);
    assert_eq!(added.len(), new.len());
    for (k, (asked, got)) in new.iter().zip(&added).enumerate() {
        match k {
            // The two for ids[3]: side by side, either may be the one recorded (below).
            3 | 7 => {}
            41 => assert!(
                matches!(
                    got,
                    Err(StoreError::NotFound {
                        kind: "instance",
                        ..
                    })
                ),
                "{got:?}"
            ),
            _ => assert_eq!(got.as_ref().unwrap().instance, asked.instance),
        }
    }
    let twice = [&added[3], &added[7]];
    assert_eq!(
        twice.iter().filter(|r| r.is_ok()).count(),
        1,
        "one of two identical actions is recorded: {twice:?}"
    );
    assert!(
        twice
            .iter()
            .any(|r| matches!(r, Err(StoreError::Conflict(_)))),
        "{twice:?}"
    );

    let ends: Vec<ActionEnd<'_>> = ids
        .iter()
        .enumerate()
        .map(|(k, &instance)| ActionEnd {
            instance,
            target: ActionTarget::Request("req-many"),
            event: "controller_create",
            outcome: if k % 2 == 0 {
                EventOutcome::success()
            } else {
                EventOutcome::error(format!("failed {k}"))
            },
        })
        .chain([ActionEnd {
            instance: Uuid::from_u128(99),
            target: ActionTarget::Request("req-many"),
            event: "controller_create",
            outcome: EventOutcome::success(),
        }])
        .collect();
    let finished = store.finish_action_events(&ends);
    assert_eq!(finished.len(), ends.len());
    for (k, got) in finished.iter().enumerate() {
        if k == ids.len() {
            assert!(
                matches!(got, Ok(None)),
                "no such instance's action: {got:?}"
            );
            continue;
        }
        let action = got.as_ref().unwrap().as_ref().unwrap();
        assert_eq!(action.instance, ids[k]);
        let event = &action.events[0];
        if k % 2 == 0 {
            assert_eq!(event.result, Some(ActionResult::Success));
        } else {
            assert_eq!(event.result, Some(ActionResult::Error));
            assert_eq!(
                event.detail.as_deref(),
                Some(format!("failed {k}").as_str())
            );
        }
        let stored = store
            .instance_action(Scope::All, ids[k], "req-many")
            .unwrap();
        assert_eq!(&stored, action);
    }
    // More than a hundred at once (etcd: in shares of a transaction each, side by side), three
    // on each instance, each a different event (all apply, whether in one share or not), and
    // one with no event name (refused on its own).
    const THREE: [&str; 3] = ["node_start", "node_stop", "node_reboot"];
    let mut more: Vec<ActionEnd<'_>> = THREE
        .iter()
        .flat_map(|&event| {
            ids.iter().map(move |&instance| ActionEnd {
                instance,
                target: ActionTarget::Request("req-many"),
                event,
                outcome: EventOutcome::success(),
            })
        })
        .collect();
    more.insert(
        50,
        ActionEnd {
            instance: ids[0],
            target: ActionTarget::Request("req-many"),
            event: "",
            outcome: EventOutcome::success(),
        },
    );
    let finished = store.finish_action_events(&more);
    assert_eq!(finished.len(), more.len());
    assert!(
        matches!(finished[50], Err(StoreError::Invalid(_))),
        "{:?}",
        finished[50]
    );
    assert!(
        finished
            .iter()
            .enumerate()
            .all(|(k, got)| k == 50 || matches!(got, Ok(Some(_))))
    );
    for &id in &ids {
        let stored = store.instance_action(Scope::All, id, "req-many").unwrap();
        let ended: Vec<&str> = stored
            .events
            .iter()
            .filter(|e| e.name.starts_with("node_") && e.result == Some(ActionResult::Success))
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(ended.len(), 3, "{stored:?}");
        assert!(THREE.iter().all(|e| ended.contains(e)), "{stored:?}");
    }
}

pub(crate) fn a_record_and_its_event_change_together<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let i = awaiting_start(&store, new_instance(&t, &w, "vm"));
    let active = InstanceChange {
        state: Some(InstanceState::Active),
        ..InstanceChange::default()
    };
    // A stale version: neither the record nor the event changes.
    let stale = store.update_instance_finishing_event(
        i.id,
        i.version + 1,
        active.clone(),
        "node_start",
        EventOutcome::success(),
    );
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    let actions = store.instance_actions(Scope::All, i.id).unwrap();
    assert_eq!(actions[0].events[0].finish, None);
    assert_eq!(
        store.instance(Scope::All, i.id).unwrap().state,
        InstanceState::Pending
    );
    // The right one: both.
    let (updated, finished) = store
        .update_instance_finishing_event(
            i.id,
            i.version,
            active.clone(),
            "node_start",
            EventOutcome::success(),
        )
        .unwrap();
    assert_eq!(
        (updated.state.clone(), updated.version),
        (InstanceState::Active, i.version + 1)
    );
    let finished = finished.unwrap().unwrap();
    assert_eq!(finished.events[0].result, Some(ActionResult::Success));
    assert_eq!(store.instance(Scope::All, i.id).unwrap(), updated);
    assert_eq!(
        store.instance_actions(Scope::All, i.id).unwrap(),
        vec![finished]
    );
    // No unfinished event of that name left: the record alone.
    let paused = InstanceChange {
        state: Some(InstanceState::Paused),
        ..InstanceChange::default()
    };
    let (again, none) = store
        .update_instance_finishing_event(
            i.id,
            updated.version,
            paused,
            "node_start",
            EventOutcome::success(),
        )
        .unwrap();
    assert_eq!(again.state, InstanceState::Paused);
    assert_eq!(none.unwrap(), None);
    assert_eq!(
        kind_of(store.update_instance_finishing_event(
            Uuid::new_v4(),
            1,
            active,
            "node_start",
            EventOutcome::success(),
        )),
        "instance"
    );
}

pub(crate) fn an_instance_is_made_with_its_first_action<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let asked = new_action(
        Uuid::nil(),
        "req-1",
        "create",
        &["controller_create", "node_start"],
    );
    let (i, recorded) = store
        .create_instance_with_action(new_instance(&t, &w, "vm"), asked.clone())
        .unwrap();
    let recorded = recorded.unwrap();
    assert_eq!(store.instance(Scope::All, i.id).unwrap(), i);
    assert_eq!(
        (
            recorded.instance,
            recorded.tenant,
            recorded.request_id.as_str()
        ),
        (i.id, t.id, "req-1")
    );
    assert_eq!(recorded.events.len(), 2);
    assert!(recorded.events.iter().all(|e| e.finish.is_none()));
    assert_eq!(
        store.instance_actions(Scope::Tenant(t.id), i.id).unwrap(),
        vec![recorded]
    );
    // It is the instance's first: the next of its request is refused, another comes after it.
    assert!(matches!(
        store.add_instance_action(NewInstanceAction {
            instance: i.id,
            ..asked.clone()
        }),
        Err(StoreError::Conflict(_))
    ));
    store
        .add_instance_action(new_action(i.id, "req-2", "stop", &["controller_stop"]))
        .unwrap();
    let listed = store.instance_actions(Scope::All, i.id).unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|a| a.request_id.as_str())
            .collect::<Vec<_>>(),
        ["req-2", "req-1"]
    );
    // An action that cannot be recorded: the instance is made all the same.
    let (j, refused) = store
        .create_instance_with_action(
            new_instance(&t, &w, "vm2"),
            new_action(Uuid::nil(), "", "create", &[]),
        )
        .unwrap();
    assert!(
        matches!(refused, Err(StoreError::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(store.instance(Scope::All, j.id).unwrap(), j);
    assert_eq!(store.instance_actions(Scope::All, j.id).unwrap(), vec![]);
    // An instance that cannot be made: neither.
    let (other, _) = tenant_and_workload(&store, "other", Quota::default(), 24);
    let before = store.usage(other.id).unwrap();
    assert!(is_not_found(
        store
            .create_instance_with_action(new_instance(&other, &w, "x"), asked)
            .map(|(i, _)| i)
    ));
    assert_eq!(store.usage(other.id).unwrap(), before);
    assert_eq!(store.usage(t.id).unwrap().instances, 2);
}

/// Every instance of `made` to start, at any version.
fn any_version(made: &[Instance]) -> Vec<ToStart> {
    made.iter()
        .map(|i| ToStart {
            id: i.id,
            version: None,
        })
        .collect()
}

/// `start_instances_on` writes active on the node each pending instance placed on no node or on
/// it (at the version asked, if one was), its `node_start` finished, and leaves every other as
/// read; answers come in the order asked, across more than one transaction's share (etcd: 25),
/// with `NotFound` for no record.
pub(crate) fn reported_instances_start_together<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "acme", Quota::default(), 24);
    let (node, other) = (Uuid::new_v4(), Uuid::new_v4());
    let placed = |i: &Instance, state: InstanceState, on: Uuid| placed(&store, i, on, state);
    // 70 instances: pending on no node, pending on the node, pending on another node, active
    // on the node, pending on the node but asked at an older version, in turn; each with its
    // START's event unfinished.
    let made: Vec<Instance> = (0..70)
        .map(|k| {
            let i = awaiting_start(&store, new_instance(&t, &w, &format!("vm-{k}")));
            match k % 5 {
                0 => i,
                1 | 4 => placed(&i, InstanceState::Pending, node),
                2 => placed(&i, InstanceState::Pending, other),
                _ => placed(&i, InstanceState::Active, node),
            }
        })
        .collect();
    let stranger = Uuid::new_v4();
    let mut asked = any_version(&made);
    for (k, one) in asked.iter_mut().enumerate() {
        match k % 5 {
            1 => one.version = Some(made[k].version),
            4 => one.version = Some(made[k].version - 1),
            _ => {}
        }
    }
    asked.insert(
        33,
        ToStart {
            id: stranger,
            version: None,
        },
    );
    let answers = store.start_instances_on(node, &asked, "node_start", EventOutcome::success());
    assert_eq!(answers.len(), asked.len());
    for (one, answer) in asked.iter().zip(answers) {
        let Some(k) = made.iter().position(|i| i.id == one.id) else {
            assert!(
                matches!(
                    answer,
                    Err(StoreError::NotFound {
                        kind: "instance",
                        ..
                    })
                ),
                "{answer:?}"
            );
            continue;
        };
        let now = store.instance(Scope::All, one.id).unwrap();
        let event = &store.instance_actions(Scope::All, one.id).unwrap()[0].events[0];
        match (k % 5, answer.unwrap()) {
            (0 | 1, Starting::Started(started, finished)) => {
                assert_eq!(started, now);
                assert_eq!(
                    (now.state, now.node, now.version),
                    (InstanceState::Active, Some(node), made[k].version + 1)
                );
                let finished = finished.unwrap().unwrap();
                assert_eq!(&finished.events[0], event);
                assert_eq!(event.result, Some(ActionResult::Success));
            }
            (2..=4, Starting::Left(left)) => {
                assert_eq!(left, made[k]);
                assert_eq!(now, made[k]);
                assert_eq!(event.finish, None);
            }
            (_, answer) => panic!("instance {k}: {answer:?}"),
        }
    }
    // Started ones are on the node now, in brief too; asked again, they are left.
    let briefs = store.instance_briefs_on(node).unwrap();
    assert_eq!(briefs.len(), 56, "{briefs:?}");
    assert_eq!(
        briefs
            .iter()
            .filter(|b| b.state == InstanceState::Active && b.node == Some(node))
            .count(),
        42
    );
    let again = store.start_instances_on(node, &asked[..2], "node_start", EventOutcome::success());
    assert!(
        again.iter().all(|a| matches!(a, Ok(Starting::Left(_)))),
        "{again:?}"
    );
    // A bad event name is every instance's answer, and nothing is written.
    let fresh = store
        .create_instance(new_instance(&t, &w, "fresh"))
        .unwrap();
    let refused = store.start_instances_on(
        node,
        &any_version(std::slice::from_ref(&fresh)),
        "",
        EventOutcome::success(),
    );
    assert!(
        matches!(refused[..], [Err(StoreError::Invalid(_))]),
        "{refused:?}"
    );
    assert_eq!(store.instance(Scope::All, fresh.id).unwrap(), fresh);
}

/// Many nodes' reports started side by side, as the controller applies them (etcd makes them
/// together: `combine.rs`): each caller's instances start on its own node, its answers in its
/// order, and an instance pending on another node is left, whatever else shares its
/// transaction; two nodes reporting one instance at once start it on one of them.
pub(crate) fn many_nodes_start_side_by_side<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "sides", Quota::default(), 24);
    let elsewhere = Uuid::new_v4();
    let nodes: Vec<Uuid> = (0..16).map(|_| Uuid::new_v4()).collect();
    // Each node: three pending on no node, then one pending on another node.
    let made: Vec<Vec<Instance>> = nodes
        .iter()
        .enumerate()
        .map(|(n, _)| {
            (0..4)
                .map(|k| {
                    let i = awaiting_start(&store, new_instance(&t, &w, &format!("vm-{n}-{k}")));
                    match k {
                        3 => placed(&store, &i, elsewhere, InstanceState::Pending),
                        _ => i,
                    }
                })
                .collect()
        })
        .collect();
    let barrier = std::sync::Barrier::new(nodes.len());
    std::thread::scope(|scope| {
        for (&node, mine) in nodes.iter().zip(&made) {
            let (store, barrier) = (&store, &barrier);
            scope.spawn(move || {
                barrier.wait();
                let answers = store.start_instances_on(
                    node,
                    &any_version(mine),
                    "node_start",
                    EventOutcome::success(),
                );
                assert_eq!(answers.len(), mine.len());
                for (k, (i, answer)) in mine.iter().zip(answers).enumerate() {
                    match (k, answer) {
                        (0..=2, Ok(Starting::Started(started, finished))) => {
                            assert_eq!(started.id, i.id);
                            assert_eq!(
                                (started.state, started.node),
                                (InstanceState::Active, Some(node))
                            );
                            let finished = finished.unwrap().unwrap();
                            assert_eq!(finished.events[0].result, Some(ActionResult::Success));
                        }
                        (3, Ok(Starting::Left(left))) => assert_eq!(&left, i),
                        (k, answer) => panic!("instance {k} of {node}: {answer:?}"),
                    }
                }
            });
        }
    });
    for (&node, mine) in nodes.iter().zip(&made) {
        for (k, i) in mine.iter().enumerate() {
            let now = store.instance(Scope::All, i.id).unwrap();
            match k {
                3 => assert_eq!(&now, i),
                _ => assert_eq!((now.state, now.node), (InstanceState::Active, Some(node))),
            }
        }
        assert_eq!(store.instance_briefs_on(node).unwrap().len(), 3);
    }
    // Two nodes report one pending instance at once (a START sent twice): it starts on one of
    // them, and the other's answer is the record as the first left it.
    for round in 0..4 {
        let one = awaiting_start(&store, new_instance(&t, &w, &format!("twice-{round}")));
        let pair = [nodes[0], nodes[1]];
        let barrier = std::sync::Barrier::new(2);
        let answers: Vec<Result<Starting>> = std::thread::scope(|scope| {
            let handles: Vec<_> = pair
                .iter()
                .map(|&node| {
                    let (store, barrier, one) = (&store, &barrier, &one);
                    scope.spawn(move || {
                        barrier.wait();
                        store
                            .start_instances_on(
                                node,
                                &any_version(std::slice::from_ref(one)),
                                "node_start",
                                EventOutcome::success(),
                            )
                            .remove(0)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let now = store.instance(Scope::All, one.id).unwrap();
        assert_eq!(now.state, InstanceState::Active);
        let started: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter_map(|(k, a)| match a {
                Ok(Starting::Started(s, _)) => {
                    assert_eq!(s, &now);
                    Some(k)
                }
                Ok(Starting::Left(left)) => {
                    assert_eq!(left, &now, "left as the other start wrote it");
                    None
                }
                other => panic!("round {round}: {other:?}"),
            })
            .collect();
        assert_eq!(started.len(), 1, "round {round}: {answers:?}");
        assert_eq!(now.node, Some(pair[started[0]]));
    }
}

/// Instances with the most metadata an instance may hold, in its largest JSON encoding, start
/// together whole (etcd: in as many transactions as their size needs).
pub(crate) fn large_records_start_together<F: Fixture>() {
    let fx = F::new();
    let store = fx.open();
    let (t, w) = tenant_and_workload(&store, "large", Quota::default(), 24);
    let mut new = new_instance(&t, &w, "large");
    new.metadata = largest_metadata();
    let made: Vec<Instance> = (0..6)
        .map(|_| awaiting_start(&store, new.clone()))
        .collect();
    let node = Uuid::new_v4();
    let answers = store.start_instances_on(
        node,
        &any_version(&made),
        "node_start",
        EventOutcome::success(),
    );
    for (i, answer) in made.iter().zip(answers) {
        assert!(matches!(answer, Ok(Starting::Started(..))), "{answer:?}");
        let now = store.instance(Scope::All, i.id).unwrap();
        assert_eq!((now.state, now.node), (InstanceState::Active, Some(node)));
        assert_eq!(now.metadata, new.metadata);
        let event = &store.instance_actions(Scope::All, i.id).unwrap()[0].events[0];
        assert_eq!(event.result, Some(ActionResult::Success));
    }
}
