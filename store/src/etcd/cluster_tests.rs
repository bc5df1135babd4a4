//! etcd as a cluster: three members over peer TLS (`testkit::etcd::EtcdCluster`: peer
//! certificates from the cluster's CA, `--peer-client-cert-auth`) serve the store with
//! authentication on; the store keeps working when the member it talks to, the leader, is killed;
//! the killed member, restarted, serves alone what was written while it was down; a member whose
//! peer certificate comes from another CA cannot join.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use testkit::etcd::{EtcdCluster, PeerIssuer, ROOT};

use super::tests::{CONTROLLER, LAUNCHER, tenant_and_workload};
use super::*;

/// The key prefix of these tests (each test has a cluster of its own).
const PREFIX: &str = "/cumulo/";
/// How long the cluster may take to serve again after losing a member (a new leader is elected
/// within a few election timeouts, 1 s each by default).
const FAILOVER: Duration = Duration::from_secs(30);
/// How long a newcomer may take to give up joining.
const JOIN: Duration = Duration::from_secs(20);

/// A cluster of three members, or `None` when etcd is missing (and not required), as the other
/// etcd tests decide (`testkit::etcd::available`).
fn cluster() -> Option<EtcdCluster> {
    testkit::etcd::available().then(|| EtcdCluster::start(3).unwrap())
}

/// The index of the cluster's leader, asked of the members (as `root`) that run.
fn leader(cluster: &EtcdCluster, root: &EtcdTransport) -> usize {
    let options = EtcdOptions::default();
    let ids: Vec<(u64, u64)> = (0..cluster.size())
        .map(|member| {
            let (runtime, mut client) =
                connect_client(&[cluster.endpoint(member)], root, &options).unwrap();
            let status = runtime.block_on(client.status()).unwrap();
            (status.header().unwrap().member_id(), status.leader())
        })
        .collect();
    let leader = ids[0].1;
    assert!(
        ids.iter().all(|(_, l)| *l == leader),
        "the members agree on the leader: {ids:?}"
    );
    ids.iter()
        .position(|(id, _)| *id == leader)
        .unwrap_or_else(|| panic!("leader {leader:x} is not a member: {ids:?}"))
}

/// Creates tenant `name`, polling until the cluster serves it: an attempt that timed out may
/// have committed, so a failure is checked against the tenants listed.
fn create_tenant_eventually(store: &EtcdStore, name: &str) -> Tenant {
    testkit::poll_for(FAILOVER, || {
        let created = store.create_tenant(NewTenant {
            name: name.into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        });
        match created {
            Ok(tenant) => Ok(tenant),
            Err(e) => match store.tenants() {
                Ok(tenants) => tenants
                    .into_iter()
                    .find(|t| t.name == name)
                    .ok_or_else(|| format!("creating tenant {name}: {e}")),
                Err(listing) => Err(format!("creating tenant {name}: {e}; listing: {listing}")),
            },
        }
    })
}

/// The ids of `tenant`'s instances, in creation order.
/// How many instances the store counts pending.
fn pending(store: &EtcdStore) -> u64 {
    let counts = store.instance_counts().unwrap();
    counts.get("pending").copied().unwrap_or(0)
}

fn instance_ids(store: &EtcdStore, tenant: Uuid) -> Vec<Uuid> {
    let page = store
        .instances(
            Scope::Tenant(tenant),
            InstanceFilter::default(),
            Page::first(100),
        )
        .unwrap();
    page.items.iter().map(|i| i.id).collect()
}

#[test]
fn three_members_over_peer_tls_serve_the_store_through_the_loss_of_its_leader() {
    let Some(mut cluster) = cluster() else { return };
    // Users and roles over the cluster, as `cumulo-controller etcd-setup` makes them.
    let root = EtcdTransport::Tls(cluster.identity(ROOT));
    let plan = auth::AuthPlan {
        prefix: PREFIX.into(),
        controllers: vec![CONTROLLER.into()],
        launchers: vec![LAUNCHER.into()],
    };
    auth::setup_auth(&cluster.endpoints(), &root, &plan, &EtcdOptions::default()).unwrap();

    // All three endpoints, the leader's first: the store's connection goes to it.
    let leader = leader(&cluster, &root);
    let mut endpoints = cluster.endpoints();
    endpoints.rotate_left(leader);
    let controller = EtcdTransport::Tls(cluster.identity(CONTROLLER));
    let options = EtcdOptions {
        call_timeout: Duration::from_secs(2),
        ..EtcdOptions::default()
    };
    let store = EtcdStore::connect_with(&endpoints, PREFIX, &controller, options.clone()).unwrap();
    let (tenant, workload) = tenant_and_workload(&store, Quota::default(), 1);
    let create = |name: String| {
        store
            .create_instance(NewInstance {
                tenant: tenant.id,
                workload: workload.id,
                name,
                key: None,
                metadata: Default::default(),
                user: None,
                reservation: None,
                zone: None,
            })
            .unwrap()
            .id
    };
    let mut made: Vec<Uuid> = (0..3).map(|n| create(format!("before-{n}"))).collect();
    assert_eq!(instance_ids(&store, tenant.id), made);
    // Counted from the watch on the state index, made on the leader.
    assert_eq!(pending(&store), 3);
    assert!(store.tally.is_tallying());

    cluster.kill(leader).unwrap();
    assert_eq!(cluster.pid(leader), None);
    // Two of three are a quorum: they elect a leader, and the store dials the next endpoint.
    let after = create_tenant_eventually(&store, "after-the-kill");
    made.extend((0..3).map(|n| create(format!("after-{n}"))));
    assert_eq!(instance_ids(&store, tenant.id), made, "nothing lost");
    let usage = store.usage(tenant.id).unwrap();
    assert_eq!(usage.instances, 6);
    // The watch ended with its member, and is made again on another: counted afresh there,
    // the counts are right again with no round trip.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !store.tally.is_tallying() {
        assert_eq!(pending(&store), 6, "counted from etcd meanwhile");
        assert!(std::time::Instant::now() < deadline, "no watch made again");
        std::thread::yield_now();
    }
    let calls = store.calls();
    assert_eq!(pending(&store), 6);
    assert_eq!(store.calls(), calls);
    // The survivors hold the users and roles too: the launcher user may not list tenants.
    let launcher = EtcdStore::connect_with(
        &endpoints,
        PREFIX,
        &EtcdTransport::Tls(cluster.identity(LAUNCHER)),
        options,
    )
    .unwrap();
    match launcher.tenants() {
        Err(StoreError::PermissionDenied(_)) => {}
        other => panic!("the launcher listed tenants: {other:?}"),
    }

    // Restarted, the killed member catches up over peer TLS: alone, it answers (linearizable
    // reads) with what was written while it was down.
    cluster.restart(leader).unwrap();
    let alone = EtcdStore::connect(&[cluster.endpoint(leader)], PREFIX, &controller).unwrap();
    assert_eq!(instance_ids(&alone, tenant.id), made);
    assert_eq!(alone.tenant(after.id).unwrap().name, "after-the-kill");
    assert_eq!(alone.usage(tenant.id).unwrap(), usage);
}

#[test]
fn a_member_whose_peer_certificate_is_from_another_ca_cannot_join() {
    let Some(cluster) = cluster() else { return };
    let refused = cluster
        .try_join("intruder", PeerIssuer::Foreign, JOIN)
        .unwrap();
    let log = &refused.log;
    assert!(!refused.joined, "{log}");
    let exit = refused.exit.expect("the intruder exits");
    assert!(!exit.success(), "{exit}: {log}");
    // Every member refused its certificate (the alert is the member's: a remote error) when it
    // asked for the membership, the first thing a newcomer does.
    assert!(
        log.matches("remote error: tls: bad certificate").count() >= cluster.size(),
        "{log}"
    );
    assert!(
        log.contains("cannot fetch cluster info from peer urls"),
        "{log}"
    );

    // The same newcomer with a peer certificate from the cluster's CA reads the membership; it
    // then stops only because it was never added to it (`etcdctl member add`).
    let control = cluster
        .try_join("newcomer", PeerIssuer::Cluster, JOIN)
        .unwrap();
    let log = &control.log;
    assert!(!log.contains("bad certificate"), "{log}");
    assert!(log.contains("error validating peerURLs"), "{log}");
    for member in 0..cluster.size() {
        assert!(cluster.healthy(member), "member {member} is healthy");
    }
}
