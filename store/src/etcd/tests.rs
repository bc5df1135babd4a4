//! The store suite against a real etcd (started by the test binary, one key prefix per test), and
//! what only a shared store has: several clients on one etcd.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use testkit::etcd::EtcdServer;
use uuid::Uuid;

use super::*;

/// Every test's prefix is under this one, on which the shared etcd's users have their roles.
pub(super) const TEST_ROOT: &str = "/cumulo-test/";
/// The etcd user (certificate CN) of the tests' controller role.
pub(super) const CONTROLLER: &str = "cumulo-controller";
/// The etcd user (certificate CN) of the tests' launcher role (on [`TEST_ROOT`]).
pub(super) const LAUNCHER: &str = "cumulo-launcher";

/// The shared etcd of this test binary: TLS, authentication on (users `root`, [`CONTROLLER`],
/// [`LAUNCHER`] on [`TEST_ROOT`]), set up by [`auth::setup_auth`] as the cluster's would be.
pub(super) fn server() -> Option<Arc<EtcdServer>> {
    testkit::etcd::shared_with(|server| {
        let plan = auth::AuthPlan {
            prefix: TEST_ROOT.into(),
            controllers: vec![CONTROLLER.into()],
            launchers: vec![LAUNCHER.into()],
        };
        let root = EtcdTransport::Tls(server.identity(testkit::etcd::ROOT));
        auth::setup_auth(&[server.endpoint()], &root, &plan, &EtcdOptions::default())
            .map_err(|e| e.to_string())
    })
}

pub(super) struct Fixture {
    pub(super) server: Arc<EtcdServer>,
    pub(super) prefix: String,
}

impl Fixture {
    /// The controller's transport: TLS as user [`CONTROLLER`].
    pub(super) fn transport(&self) -> EtcdTransport {
        EtcdTransport::Tls(self.server.identity(CONTROLLER))
    }

    pub(super) fn store_with(&self, options: EtcdOptions) -> EtcdStore {
        EtcdStore::connect_with(
            &[self.server.endpoint()],
            &self.prefix,
            &self.transport(),
            options,
        )
        .unwrap()
    }
}

impl crate::suite::Fixture for Fixture {
    type S = EtcdStore;
    fn new() -> Fixture {
        Fixture {
            server: server().expect("etcd is available"),
            prefix: format!("{TEST_ROOT}{}/", Uuid::new_v4()),
        }
    }
    fn open(&self) -> EtcdStore {
        self.store_with(EtcdOptions::default())
    }
    fn raw(&self) -> Vec<u8> {
        let store = self.open();
        let end = super::keys::prefix_end(&self.prefix);
        let (_, kvs) = store.range(&self.prefix, &end, 0, |o| o).unwrap();
        kvs.into_iter()
            .flat_map(|kv| [kv.key.into_bytes(), kv.value].concat())
            .collect()
    }
    fn available() -> bool {
        server().is_some()
    }
}

crate::store_suite!(Fixture);

/// A fixture, or `None` when etcd is missing (and not required).
pub(super) fn fixture() -> Option<Fixture> {
    <Fixture as crate::suite::Fixture>::available().then(<Fixture as crate::suite::Fixture>::new)
}

/// A tenant with `quota` and a public workload of `vcpus` vCPUs.
pub(super) fn tenant_and_workload(
    store: &EtcdStore,
    quota: Quota,
    vcpus: u32,
) -> (Tenant, Workload) {
    let tenant = store
        .create_tenant(NewTenant {
            name: "t".into(),
            quota,
            subnet_prefix: 24,
        })
        .unwrap();
    let flavor = store
        .create_flavor(NewFlavor {
            name: format!("f{vcpus}"),
            vcpus,
            memory_mb: 64,
            disk_gb: 1,
            is_public: true,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "i".into(),
            kind: ImageKind::Raw,
            reference: "i.raw".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: None,
            name: "w".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: String::new(),
            ephemeral: false,
        })
        .unwrap();
    (tenant, workload)
}

#[test]
fn two_clients_on_one_etcd_share_the_quota() {
    let Some(fx) = fixture() else { return };
    // Two stores are two etcd clients (two connections), as two controllers would have: only
    // etcd's transactions stand between them.
    let first = fx.store_with(EtcdOptions::default());
    let second = fx.store_with(EtcdOptions::default());
    let quota = Quota {
        instances: Some(9),
        vcpus: Some(14),
        memory_mb: None,
    };
    let (tenant, workload) = tenant_and_workload(&first, quota, 2);
    let new = |n: usize| NewInstance {
        tenant: tenant.id,
        workload: workload.id,
        name: format!("vm{n}"),
        key: None,
        metadata: Default::default(),
        user: None,
        reservation: None,
        zone: None,
    };
    let made: Vec<Instance> = std::thread::scope(|s| {
        let handles: Vec<_> = [&first, &second, &first, &second, &first, &second]
            .into_iter()
            .enumerate()
            .map(|(n, store)| {
                s.spawn(move || {
                    (0..4)
                        .filter_map(|k| match store.create_instance(new(n * 10 + k)) {
                            Ok(i) => Some(i),
                            Err(StoreError::QuotaExceeded { .. }) => None,
                            Err(e) => panic!("unexpected: {e}"),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(made.len(), 7, "14 vCPUs hold seven 2-vCPU instances");
    let ips: std::collections::HashSet<_> = made.iter().map(|i| i.ip).collect();
    assert_eq!(ips.len(), 7, "no address given twice");
    assert_eq!(
        second.usage(tenant.id).unwrap(),
        Usage {
            instances: 7,
            vcpus: 14,
            memory_mb: 7 * 64
        }
    );
    let listed = first
        .instances(
            Scope::Tenant(tenant.id),
            InstanceFilter::default(),
            Page::first(100),
        )
        .unwrap();
    assert_eq!(listed.items.len(), 7);
}

#[test]
fn a_creation_sees_what_another_client_changed() {
    let Some(fx) = fixture() else { return };
    let a = fx.store_with(EtcdOptions::default());
    let b = fx.store_with(EtcdOptions::default());
    let quota = Quota {
        instances: Some(2),
        vcpus: None,
        memory_mb: None,
    };
    let (tenant, workload) = tenant_and_workload(&a, quota, 1);
    let new = |name: &str| crate::suite::new_instance(&tenant, &workload, name);
    // `b` changes the tenant's records between `a`'s creations.
    let first = a.create_instance(new("a1")).unwrap();
    let second = b.create_instance(new("b1")).unwrap();
    assert_ne!(first.ip, second.ip);
    // Two instances now: the quota is reached.
    assert!(matches!(
        a.create_instance(new("a2")),
        Err(StoreError::QuotaExceeded { .. })
    ));
    // `b` deleted one: it is not.
    b.delete_instance(Scope::All, second.id).unwrap();
    let third = a.create_instance(new("a3")).unwrap();
    assert_eq!(third.ip, second.ip, "the freed address");
    // The quota raised by `b` holds for `a`.
    b.update_tenant(
        tenant.id,
        tenant.version,
        TenantChange {
            quota: Some(Quota {
                instances: Some(3),
                ..quota
            }),
            ..TenantChange::default()
        },
    )
    .unwrap();
    a.create_instance(new("a4")).unwrap();
    assert_eq!(b.usage(tenant.id).unwrap().instances, 3);
    // A workload `b` deleted is not found by `a`.
    let others = b
        .instances(
            Scope::Tenant(tenant.id),
            InstanceFilter::default(),
            Page::first(10),
        )
        .unwrap();
    for i in others.items {
        b.delete_instance(Scope::All, i.id).unwrap();
    }
    b.delete_workload(Scope::All, workload.id).unwrap();
    assert!(matches!(
        a.create_instance(new("gone")),
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(a.usage(tenant.id).unwrap().instances, 0);
}

#[test]
fn a_stale_version_from_one_client_is_refused_after_another_updated() {
    let Some(fx) = fixture() else { return };
    let a = fx.store_with(EtcdOptions::default());
    let b = fx.store_with(EtcdOptions::default());
    let (tenant, workload) = tenant_and_workload(&a, Quota::default(), 1);
    let i = a
        .create_instance(NewInstance {
            tenant: tenant.id,
            workload: workload.id,
            name: "vm".into(),
            key: None,
            metadata: Default::default(),
            user: None,
            reservation: None,
            zone: None,
        })
        .unwrap();
    let seen_by_a = a.instance(Scope::All, i.id).unwrap();
    let active = InstanceChange {
        state: Some(InstanceState::Active),
        ..InstanceChange::default()
    };
    b.update_instance(Scope::All, i.id, seen_by_a.version, active)
        .unwrap();
    let exited = InstanceChange {
        state: Some(InstanceState::Exited),
        ..InstanceChange::default()
    };
    let stale = a.update_instance(Scope::All, i.id, seen_by_a.version, exited);
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    let now = a.instance(Scope::All, i.id).unwrap();
    assert_eq!((now.state, now.version), (InstanceState::Active, 2));
    // The same for a tenant renamed by b.
    b.update_tenant(
        tenant.id,
        1,
        TenantChange {
            name: Some("renamed".into()),
            ..TenantChange::default()
        },
    )
    .unwrap();
    assert!(matches!(
        a.update_tenant(tenant.id, 1, TenantChange::default()),
        Err(StoreError::Conflict(_))
    ));
    // The old name is free again; the new one is taken.
    a.create_tenant(NewTenant {
        name: "t".into(),
        quota: Quota::default(),
        subnet_prefix: 24,
    })
    .unwrap();
    assert!(matches!(
        a.create_tenant(NewTenant {
            name: "renamed".into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        }),
        Err(StoreError::Conflict(_))
    ));
}

#[test]
fn prefixes_do_not_see_each_other() {
    let Some(fx) = fixture() else { return };
    let a = fx.store_with(EtcdOptions::default());
    let other = EtcdStore::connect(
        &[fx.server.endpoint()],
        &format!("{}other", fx.prefix),
        &fx.transport(),
    )
    .unwrap();
    tenant_and_workload(&a, Quota::default(), 1);
    assert_eq!(a.tenants().unwrap().len(), 1);
    assert!(other.tenants().unwrap().is_empty());
    assert_eq!(
        a.schema_version().unwrap(),
        EtcdStore::known_schema_version()
    );
}

#[test]
fn the_event_log_is_bounded() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions {
        event_capacity: 5,
        ..EtcdOptions::default()
    });
    for n in 0..12 {
        store
            .append_event(NewEvent {
                tenant: None,
                kind: EventKind::Info,
                message: format!("e{n}"),
            })
            .unwrap();
    }
    let kept: Vec<String> = store
        .events(Scope::All, None, 100)
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(kept, ["e7", "e8", "e9", "e10", "e11"]);
}

/// Every instance's id in `store`'s admin listing, paged by `limit`.
pub(super) fn admin_listing(store: &EtcdStore, limit: u32) -> Vec<Uuid> {
    let mut seen = Vec::new();
    let mut page = Page::first(limit);
    loop {
        let got = store
            .instances(Scope::All, InstanceFilter::default(), page)
            .unwrap();
        seen.extend(got.items.iter().map(|i| i.id));
        match got.next {
            Some(m) => page.marker = Some(m),
            None => return seen,
        }
    }
}

#[test]
fn admin_pages_follow_creation_order_across_tenants() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let (a, wa) = tenant_and_workload(&store, Quota::default(), 1);
    let b = store
        .create_tenant(NewTenant {
            name: "b".into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        })
        .unwrap();
    let mut made = Vec::new();
    for n in 0..7 {
        let tenant = if n % 2 == 0 { a.id } else { b.id };
        made.push(
            store
                .create_instance(NewInstance {
                    tenant,
                    workload: wa.id,
                    name: format!("vm{n}"),
                    key: None,
                    metadata: Default::default(),
                    user: None,
                    reservation: None,
                    zone: None,
                })
                .unwrap()
                .id,
        );
    }
    assert_eq!(admin_listing(&store, 3), made);
    // A deleted marker is unknown.
    store.delete_instance(Scope::All, made[2]).unwrap();
    let gone = Page {
        marker: Some(made[2]),
        limit: 3,
    };
    assert!(matches!(
        store.instances(Scope::All, InstanceFilter::default(), gone),
        Err(StoreError::Invalid(_))
    ));
}

/// The environment a child process of [`three_processes_share_one_quota`] reads.
const CHILD_ENV: &str = "CUMULO_ETCD_TEST_CHILD";

#[test]
#[ignore = "a child process of three_processes_share_one_quota"]
fn child_creates_instances() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [endpoint, prefix, tenant, workload, ca, cert, key] = parts[..] else {
        panic!("bad {CHILD_ENV}: {spec}");
    };
    let transport = EtcdTransport::tls_files(ca.as_ref(), cert.as_ref(), key.as_ref()).unwrap();
    let store = EtcdStore::connect(&[endpoint.to_string()], prefix, &transport).unwrap();
    let (tenant, workload) = (tenant.parse().unwrap(), workload.parse().unwrap());
    // Start together with the parent and the other child: say ready, wait for its go.
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let mut created = 0;
    for n in 0..15 {
        match store.create_instance(NewInstance {
            tenant,
            workload,
            name: format!("child-{}-{n}", std::process::id()),
            key: None,
            metadata: Default::default(),
            user: None,
            reservation: None,
            zone: None,
        }) {
            Ok(_) => created += 1,
            Err(StoreError::QuotaExceeded { .. }) => {}
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    println!("created={created}");
}

#[test]
fn three_processes_share_one_quota() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let quota = Quota {
        instances: Some(20),
        ..Quota::default()
    };
    let (tenant, workload) = tenant_and_workload(&store, quota, 1);
    // Two more processes (this test binary again, running only the child test) and this one
    // create 15 instances each against a quota of 20.
    let (ca, cert, key) = fx.server.client_files(CONTROLLER);
    let spec = format!(
        "{} {} {} {} {} {} {}",
        fx.server.endpoint(),
        fx.prefix,
        tenant.id,
        workload.id,
        ca.display(),
        cert.display(),
        key.display()
    );
    let mut children: Vec<(
        std::process::Child,
        std::io::BufReader<std::process::ChildStdout>,
    )> = (0..2)
        .map(|_| {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "etcd::tests::child_creates_instances",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, &spec)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
            (child, stdout)
        })
        .collect();
    // A barrier without sleeps: every child has connected and said so before anyone creates.
    for (_, stdout) in &mut children {
        let mut line = String::new();
        while !line.contains("ready") {
            line.clear();
            assert!(
                std::io::BufRead::read_line(stdout, &mut line).unwrap() > 0,
                "child ended"
            );
        }
    }
    for (child, _) in &mut children {
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
    }
    let mut created = (0..15)
        .filter(|n| {
            store
                .create_instance(NewInstance {
                    tenant: tenant.id,
                    workload: workload.id,
                    name: format!("parent-{n}"),
                    key: None,
                    metadata: Default::default(),
                    user: None,
                    reservation: None,
                    zone: None,
                })
                .is_ok()
        })
        .count();
    for (mut child, mut stdout) in children {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "child failed: {status} {text}");
        // The harness writes the test's name on the same line, before the count.
        let n: usize = text
            .split("created=")
            .nth(1)
            .map(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .unwrap_or_else(|| panic!("no count from the child: {text}"))
            .parse()
            .unwrap();
        eprintln!("child made {n}");
        created += n;
    }
    assert_eq!(created, 20, "the quota is reached, never exceeded");
    assert_eq!(store.usage(tenant.id).unwrap().instances, 20);
    let listed = store
        .instances(
            Scope::Tenant(tenant.id),
            InstanceFilter::default(),
            Page::first(100),
        )
        .unwrap();
    let ips: std::collections::HashSet<_> = listed.items.iter().map(|i| i.ip).collect();
    assert_eq!((listed.items.len(), ips.len()), (20, 20));
}

/// The ids in a JSON list `key` of `body`, sorted.
#[test]
fn listing_by_node_follows_moves_and_deletes() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let (t, w) = tenant_and_workload(&store, Quota::default(), 1);
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let mut on_a = Vec::new();
    for n in 0..7 {
        let i = store
            .create_instance(NewInstance {
                tenant: t.id,
                workload: w.id,
                name: format!("vm{n}"),
                key: None,
                metadata: Default::default(),
                user: None,
                reservation: None,
                zone: None,
            })
            .unwrap();
        let node = if n % 3 == 2 { b } else { a };
        let placed = store
            .update_instance(
                Scope::All,
                i.id,
                1,
                InstanceChange {
                    node: Some(Some(node)),
                    ..InstanceChange::default()
                },
            )
            .unwrap();
        if node == a {
            on_a.push(placed);
        }
    }
    // Move the first of a's to b, delete the second.
    let moved = store
        .update_instance(
            Scope::All,
            on_a[0].id,
            2,
            InstanceChange {
                node: Some(Some(b)),
                ..InstanceChange::default()
            },
        )
        .unwrap();
    store.delete_instance(Scope::All, on_a[1].id).unwrap();
    let expected: Vec<Uuid> = on_a[2..].iter().map(|i| i.id).collect();
    for scope in [Scope::All, Scope::Tenant(t.id)] {
        let mut seen = Vec::new();
        let mut page = Page::first(2);
        loop {
            let got = store
                .instances(scope, InstanceFilter { node: Some(a) }, page)
                .unwrap();
            assert!(got.items.iter().all(|i| i.node == Some(a)));
            seen.extend(got.items.iter().map(|i| i.id));
            match got.next {
                Some(m) => page.marker = Some(m),
                None => break,
            }
        }
        assert_eq!(seen, expected, "{scope:?}");
    }
    let on_b = store
        .instances(
            Scope::All,
            InstanceFilter { node: Some(b) },
            Page::first(10),
        )
        .unwrap();
    assert_eq!(on_b.items.len(), 3);
    assert_eq!(on_b.items[0], moved, "creation order, not placement order");
    let other = Scope::Tenant(Uuid::new_v4());
    assert!(
        store
            .instances(other, InstanceFilter { node: Some(b) }, Page::first(10))
            .unwrap()
            .items
            .is_empty()
    );
}

#[test]
fn two_clients_on_one_etcd_claim_each_operation_once() {
    let Some(fx) = fixture() else { return };
    // Two stores are two etcd clients, as two `cumulo-agent --remote` replicas would have.
    let first = fx.store_with(EtcdOptions::default());
    let second = fx.store_with(EtcdOptions::default());
    let host = first
        .create_remote_host(NewRemoteHost {
            name: "edge".into(),
            libvirt_uri: "qemu+tcp://127.0.0.1/system".into(),
        })
        .unwrap();
    let total = 30;
    for n in 0..total {
        let store = if n % 2 == 0 { &first } else { &second };
        store
            .enqueue_operation(NewOperation {
                host: host.id,
                instance: Uuid::new_v4(),
                kind: OperationKind::Start,
                payload: vec![u8::try_from(n).unwrap()],
            })
            .unwrap();
    }
    let lease = Duration::from_secs(3600);
    let claims: Vec<(usize, Operation)> = std::thread::scope(|s| {
        let handles: Vec<_> = [&first, &second, &first, &second]
            .into_iter()
            .enumerate()
            .map(|(n, store)| {
                s.spawn(move || {
                    let owner = format!("replica-{n}");
                    let mut mine = Vec::new();
                    while let Some(op) = store.claim_operation(&owner, lease).unwrap() {
                        mine.push((n, op));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(claims.len(), total);
    let ids: std::collections::HashSet<Uuid> = claims.iter().map(|(_, op)| op.id).collect();
    assert_eq!(ids.len(), total, "no operation claimed twice");
    let mut tokens: Vec<u64> = claims
        .iter()
        .map(|(_, op)| op.claim.as_ref().unwrap().token)
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), total, "every claim has its own token");
    // Each finishes through the other client; the token, not the connection, is what counts.
    for (n, op) in &claims {
        let other = if n % 2 == 0 { &second } else { &first };
        let token = op.claim.as_ref().unwrap().token;
        other.complete_operation(op.id, token, "ok").unwrap();
        assert!(matches!(
            other.complete_operation(op.id, token, "again"),
            Err(StoreError::Fenced { .. })
        ));
    }
    let done = first
        .operations(OperationFilter {
            state: Some(OperationState::Done),
            host: None,
        })
        .unwrap();
    assert_eq!(done.len(), total);
    assert_eq!(first.claim_operation("late", lease).unwrap(), None);
}

#[test]
fn queue_entries_of_before_hold_the_id_alone_and_are_claimed_in_order() {
    let Some(fx) = fixture() else { return };
    let store = fx.store_with(EtcdOptions::default());
    let host = store
        .create_remote_host(NewRemoteHost {
            name: "h".into(),
            libvirt_uri: "qemu+tcp://h/system".into(),
        })
        .unwrap();
    let instance = Uuid::new_v4();
    let ops: Vec<Operation> = [OperationKind::Start, OperationKind::Stop]
        .into_iter()
        .map(|kind| {
            store
                .enqueue_operation(NewOperation {
                    host: host.id,
                    instance,
                    kind,
                    payload: Vec::new(),
                })
                .unwrap()
        })
        .collect();
    // Rewritten as the code of before wrote them: the operation's id alone.
    let queue = store.keys.queue();
    let (_, entries) = store
        .range(&queue, &super::keys::prefix_end(&queue), 0, |o| o)
        .unwrap();
    assert_eq!(entries.len(), 2);
    store
        .atomically("test", |tx| {
            for (kv, op) in entries.iter().zip(&ops) {
                assert!(kv.text()?.starts_with(&format!("{} {instance} ", op.id)));
                tx.put_text(&kv.key, &op.id.to_string());
            }
            Ok(())
        })
        .unwrap();
    let lease = Duration::from_secs(3600);
    let first = store
        .claim_operations_on("r", lease, Some(host.id), 8)
        .unwrap();
    assert_eq!(
        first.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![ops[0].id]
    );
    let token = first[0].claim.as_ref().unwrap().token;
    store.complete_operation(ops[0].id, token, "ok").unwrap();
    let second = store
        .claim_operations_on("r", lease, Some(host.id), 8)
        .unwrap();
    assert_eq!(
        second.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![ops[1].id]
    );
    // A queue entry that is neither form is an error, not a skipped operation.
    store
        .atomically("test", |tx| {
            tx.put_text(&entries[1].key, "not an entry");
            Ok(())
        })
        .unwrap();
    assert!(matches!(
        store.claim_operations_on("r", Duration::ZERO, Some(host.id), 8),
        Err(StoreError::Backend(_))
    ));
}

#[test]
fn reservations_behave_over_etcd() {
    let Some(fx) = fixture() else { return };
    crate::reservations::suite::reservations_behave(&fx.store_with(EtcdOptions::default()));
}

#[test]
fn two_clients_on_one_etcd_reserve_each_key_once() {
    let Some(fx) = fixture() else { return };
    let first = fx.store_with(EtcdOptions::default());
    let second = fx.store_with(EtcdOptions::default());
    let won: Vec<(usize, u32)> = std::thread::scope(|s| {
        let handles: Vec<_> = [&first, &second, &first, &second]
            .into_iter()
            .enumerate()
            .map(|(n, store)| {
                s.spawn(move || {
                    (0..10u32)
                        .filter(|k| {
                            store
                                .reserve("vni", &k.to_string(), &format!("r{n}"))
                                .is_ok()
                        })
                        .map(|k| (n, k))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(won.len(), 10, "each key reserved exactly once: {won:?}");
    assert_eq!(second.reservations("vni").unwrap().len(), 10);
}
