//! The instance lifecycle end to end: controller → scheduler → sim agent, and back.

use controller::cluster::{Caller, Cluster};
use controller::daemon::Controller;
use ssntp::{Role, Uuid};
use store::{InstanceState, Quota, Scope};
use testkit::TestPki;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_go_through_their_whole_life() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = start_scheduler(&pki).await;
    let agent = start_agent(&pki, &sched.addr, dir.path());
    let controller = Controller::start(controller_config(&pki, &sched.addr, dir.path()))
        .await
        .unwrap();
    testkit::wait_until(T, "a compute node", || async {
        controller
            .engine
            .nodes()
            .iter()
            .any(|n| n.kinds.compute && n.kinds.network)
    })
    .await;
    let (tenant, workload) = seed(&controller, Quota::default());
    let ids = launch(&controller, tenant, workload, 3);
    wait_states(&controller, &ids, Some(InstanceState::Active), "active").await;
    let node = controller.engine.nodes()[0].id;
    for id in &ids {
        assert_eq!(
            controller.store.instance(Scope::All, *id).unwrap().node,
            Some(node)
        );
    }

    let scope = Scope::Tenant(tenant);
    controller
        .engine
        .stop(scope, ids[0], &Caller::default())
        .unwrap();
    wait_states(
        &controller,
        &ids[..1],
        Some(InstanceState::Exited),
        "exited",
    )
    .await;
    controller
        .engine
        .start(scope, ids[0], &Caller::default())
        .unwrap();
    controller
        .engine
        .reboot(scope, ids[1], &Caller::default())
        .unwrap();
    wait_states(
        &controller,
        &ids[..2],
        Some(InstanceState::Active),
        "active again",
    )
    .await;

    for id in &ids {
        controller
            .engine
            .delete(scope, *id, &Caller::default())
            .unwrap();
    }
    wait_states(&controller, &ids, None, "deleted").await;
    controller.stop().await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_loses_nothing_and_reconciles() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = start_scheduler(&pki).await;
    let agent = start_agent(&pki, &sched.addr, dir.path());
    let config = controller_config(&pki, &sched.addr, dir.path());
    let controller = Controller::start(config.clone()).await.unwrap();
    testkit::wait_until(T, "a node", || async {
        !controller.engine.nodes().is_empty()
    })
    .await;
    let (tenant, workload) = seed(&controller, Quota::default());
    let ids = launch(&controller, tenant, workload, 5);
    wait_states(&controller, &ids, Some(InstanceState::Active), "active").await;
    let uuid = controller.uuid;
    controller.stop().await;

    // The agent keeps them running: the restarted controller finds all five (same UUID, same
    // records) and the node's STATS agree with them.
    let controller = Controller::start(config).await.unwrap();
    assert_eq!(controller.uuid, uuid);
    assert_eq!(
        states(&controller, &ids),
        vec![Some(InstanceState::Active); 5]
    );
    testkit::wait_until(T, "the node again", || async {
        controller.engine.nodes().iter().any(|n| n.instances == 5)
    })
    .await;
    tokio::task::block_in_place(|| {
        for id in &ids {
            controller
                .engine
                .delete(Scope::All, *id, &controller::cluster::Caller::default())
                .unwrap();
        }
    });
    wait_states(&controller, &ids, None, "deleted").await;
    controller.stop().await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_goes_away_leaves_missing_instances_that_come_back() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = start_scheduler(&pki).await;
    let agent = start_agent(&pki, &sched.addr, dir.path());
    let controller = Controller::start(controller_config(&pki, &sched.addr, dir.path()))
        .await
        .unwrap();
    testkit::wait_until(T, "a node", || async {
        !controller.engine.nodes().is_empty()
    })
    .await;
    let (tenant, workload) = seed(&controller, Quota::default());
    let ids = launch(&controller, tenant, workload, 2);
    wait_states(&controller, &ids, Some(InstanceState::Active), "active").await;
    agent.stop().await;
    wait_states(&controller, &ids, Some(InstanceState::Missing), "missing").await;
    // The sim instances outlive their agent (as VMs outlive a launcher restart).
    let agent = start_agent(&pki, &sched.addr, dir.path());
    wait_states(&controller, &ids, Some(InstanceState::Active), "back").await;
    controller.stop().await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_compute_node_is_an_error_with_the_reason() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = start_scheduler(&pki).await;
    let controller = Controller::start(controller_config(&pki, &sched.addr, dir.path()))
        .await
        .unwrap();
    testkit::wait_until(T, "connected", || async { controller.engine.connected() }).await;
    let (tenant, workload) = seed(&controller, Quota::default());
    let ids = launch(&controller, tenant, workload, 1);
    wait_states(
        &controller,
        &ids,
        Some(InstanceState::Error("no_cn".into())),
        "error no_cn",
    )
    .await;
    controller
        .engine
        .delete(Scope::All, ids[0], &controller::cluster::Caller::default())
        .unwrap();
    assert_eq!(states(&controller, &ids), vec![None]);
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_over_etcd_runs_instances_and_a_second_one_sees_them() {
    let Some((_etcd, url)) = crate::remote::etcd_url().await else {
        return;
    };
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = start_scheduler(&pki).await;
    let agent = start_agent(&pki, &sched.addr, dir.path());
    let mut config = controller_config(&pki, &sched.addr, dir.path());
    config.store = url;
    config.etcd = Some(crate::remote::controller_tls());
    let controller = Controller::start(config.clone()).await.unwrap();
    testkit::wait_until(T, "a node", || async {
        !controller.engine.nodes().is_empty()
    })
    .await;
    let (tenant, workload) = seed(&controller, Quota::default());
    let ids = launch(&controller, tenant, workload, 3);
    wait_states(&controller, &ids, Some(InstanceState::Active), "active").await;

    // A second controller process on the same etcd (its own state directory, so its own UUID).
    config.state_dir = dir.path().join("controller-2");
    let second = Controller::start(config).await.unwrap();
    assert_ne!(second.uuid, controller.uuid);
    assert_eq!(states(&second, &ids), vec![Some(InstanceState::Active); 3]);
    second.stop().await;

    tokio::task::block_in_place(|| {
        for id in &ids {
            controller
                .engine
                .delete(Scope::All, *id, &controller::cluster::Caller::default())
                .unwrap();
        }
    });
    wait_states(&controller, &ids, None, "deleted").await;
    controller.stop().await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_whose_session_is_taken_for_good_stops_with_the_cause() {
    // Another process with the controller's own certificate (it binds the controller's UUID)
    // replaces the controller's session: the controller's client stops, and the controller must
    // not live on unable to reach the cluster. Its health check fails and it stops, saying why.
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = start_scheduler(&pki).await;
    let uuid = Uuid::new_v4();
    let identity = pki.identity(Role::CONTROLLER, Some(uuid));
    let mut config = controller_config(&pki, &sched.addr, dir.path());
    config.tls = identity.clone();
    let controller = Controller::start(config).await.unwrap();
    assert_eq!(controller.uuid, uuid);
    testkit::wait_until(T, "the controller's session", || async {
        controller.engine.connected()
    })
    .await;
    assert_eq!(controller.engine.gone_for_good(), None);
    let (usurper, mut usurper_events) =
        ssntp_net::client::Client::start(ssntp_net::client::ClientConfig::new(
            identity,
            uuid,
            Role::CONTROLLER,
            vec![sched.addr.clone()],
        ))
        .unwrap();
    match testkit::recv_within(&mut usurper_events, T).await {
        ssntp_net::client::ClientEvent::Connected { .. } => {}
        other => panic!("{other:?}"),
    }
    let why = tokio::time::timeout(T, controller.stopped())
        .await
        .expect("the controller did not stop");
    assert!(why.contains("replaced"), "{why}");
    assert_eq!(
        controller.engine.gone_for_good().as_deref(),
        Some(why.as_str())
    );
    controller.stop().await;
    usurper.close();
}

/// A node an admin disabled (Compute's `os-services` disable) takes no new instance through the
/// real scheduler; what it runs stays; enabled, it takes new ones again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_node_takes_no_new_instance_until_enabled() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let (_sched, agent_a, agent_b, controller) = two_nodes(&pki, dir.path(), &[]).await;
    let nodes: Vec<Uuid> = controller.engine.nodes().iter().map(|n| n.id).collect();
    let (tenant, workload) = seed(&controller, Quota::default());
    let before = launch(&controller, tenant, workload, 2);
    wait_states(&controller, &before, Some(InstanceState::Active), "active").await;

    controller
        .engine
        .disable_node(nodes[0], Some("drain".into()))
        .unwrap();
    let drained = launch(&controller, tenant, workload, 6);
    wait_states(&controller, &drained, Some(InstanceState::Active), "active").await;
    for id in &drained {
        assert_eq!(
            controller.store.instance(Scope::All, *id).unwrap().node,
            Some(nodes[1]),
            "{id} was placed on the disabled node"
        );
    }
    // What ran there before stays.
    let still = states(&controller, &before);
    assert!(
        still.iter().all(|s| *s == Some(InstanceState::Active)),
        "{still:?}"
    );

    assert!(controller.engine.enable_node(nodes[0]).unwrap());
    let after = launch(&controller, tenant, workload, 6);
    wait_states(&controller, &after, Some(InstanceState::Active), "active").await;
    let on_first = after
        .iter()
        .filter(|id| controller.store.instance(Scope::All, **id).unwrap().node == Some(nodes[0]))
        .count();
    assert!(on_first > 0, "no new instance on the enabled node");
    controller.stop().await;
    agent_a.stop().await;
    agent_b.stop().await;
}

/// `count` instances of one launch in a new server group of `policy`.
fn launch_in_group(
    controller: &Controller,
    tenant: Uuid,
    workload: Uuid,
    policy: &str,
    count: u32,
) -> Vec<Uuid> {
    let group = controller
        .store
        .create_server_group(store::NewServerGroup {
            tenant,
            user: None,
            name: policy.into(),
            policy: policy.into(),
        })
        .unwrap();
    launch_with(controller, tenant, workload, count, |l| {
        l.server_group = Some(group.id);
    })
}

/// Waits until no instance of `ids` is pending; their nodes (`None` for one in error).
async fn settled(controller: &Controller, ids: &[Uuid]) -> Vec<Option<Uuid>> {
    testkit::wait_until(T, "instances active or in error", || async {
        states(controller, ids).iter().all(|s| {
            matches!(
                s,
                Some(InstanceState::Active) | Some(InstanceState::Error(_))
            )
        })
    })
    .await;
    ids.iter()
        .map(|id| {
            let i = controller.store.instance(Scope::All, *id).unwrap();
            match i.state {
                InstanceState::Active => i.node,
                _ => None,
            }
        })
        .collect()
}

/// Server groups through the real scheduler and two sim agents: anti-affinity spreads (and
/// fails past the nodes there are), affinity gathers, soft anti-affinity balances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_groups_spread_or_gather_their_members_over_real_nodes() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let (_sched, agent_a, agent_b, controller) = two_nodes(&pki, dir.path(), &[]).await;
    let (tenant, workload) = seed(&controller, Quota::default());

    // Anti-affinity over two nodes: two of three siblings, one on each; the third in error.
    let spread = launch_in_group(&controller, tenant, workload, "anti-affinity", 3);
    let nodes = settled(&controller, &spread).await;
    let placed: std::collections::HashSet<Uuid> = nodes.iter().flatten().copied().collect();
    assert_eq!(placed.len(), 2, "{nodes:?}");
    let failed: Vec<_> = spread
        .iter()
        .filter_map(
            |id| match controller.store.instance(Scope::All, *id).unwrap().state {
                InstanceState::Error(_) => {
                    controller.store.instance(Scope::All, *id).unwrap().fault
                }
                _ => None,
            },
        )
        .collect();
    assert_eq!(failed.len(), 1, "{nodes:?}");
    assert!(failed[0].message.contains("anti-affinity"), "{failed:?}");

    // Affinity: every member on the first one's node.
    let gathered = launch_in_group(&controller, tenant, workload, "affinity", 3);
    let nodes = settled(&controller, &gathered).await;
    assert!(
        nodes[0].is_some() && nodes.iter().all(|n| *n == nodes[0]),
        "{nodes:?}"
    );

    // Soft anti-affinity: four members, two on each node.
    let soft = launch_in_group(&controller, tenant, workload, "soft-anti-affinity", 4);
    let nodes = settled(&controller, &soft).await;
    for node in &placed {
        let on = nodes.iter().filter(|n| **n == Some(*node)).count();
        assert_eq!(on, 2, "{nodes:?}");
    }
    controller.stop().await;
    agent_a.stop().await;
    agent_b.stop().await;
}

/// Availability zones through the real scheduler: an agent started with `--zone edge` takes
/// the instances asked for in `edge`, the other (in `nova`) those asked for in `nova`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_keeps_instances_to_its_nodes() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let (_sched, agent_a, agent_b, controller) =
        two_nodes(&pki, dir.path(), &["--zone", "edge"]).await;
    let zone_of = |zone: &str| {
        controller
            .engine
            .nodes()
            .into_iter()
            .find(|n| n.zone == zone)
            .map(|n| n.id)
            .unwrap_or_else(|| {
                panic!(
                    "no node in {zone}: {:?}",
                    controller
                        .engine
                        .nodes()
                        .iter()
                        .map(|n| (n.hostname.clone(), n.zone.clone()))
                        .collect::<Vec<_>>()
                )
            })
    };
    let (edge, nova) = (zone_of("edge"), zone_of("nova"));
    let (tenant, workload) = seed(&controller, Quota::default());
    for (zone, node) in [("edge", edge), ("nova", nova)] {
        let ids = launch_with(&controller, tenant, workload, 4, |l| {
            l.zone = Some(zone.into());
        });
        let nodes = settled(&controller, &ids).await;
        assert!(nodes.iter().all(|n| *n == Some(node)), "{zone}: {nodes:?}");
    }
    controller.stop().await;
    agent_a.stop().await;
    agent_b.stop().await;
}

/// A scheduler, two sim agents (the first with `extra_a` flags) and a controller that has both
/// nodes' figures, under `dir`.
async fn two_nodes(
    pki: &TestPki,
    dir: &std::path::Path,
    extra_a: &[&str],
) -> (Sched, Agent, Agent, Controller) {
    let sched = start_scheduler(pki).await;
    let (dir_a, dir_b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let agent_a = start_agent_with(pki, &sched.addr, &dir_a, extra_a);
    let agent_b = start_agent(pki, &sched.addr, &dir_b);
    let controller = Controller::start(controller_config(pki, &sched.addr, dir))
        .await
        .unwrap();
    testkit::wait_until(T, "two compute nodes with figures", || async {
        controller
            .engine
            .nodes()
            .iter()
            .filter(|n| n.kinds.compute && n.last_stats.is_some())
            .count()
            == 2
    })
    .await;
    (sched, agent_a, agent_b, controller)
}
