//! etcd's TLS and authorization as the store meets them: refusals told with their cause and in
//! time, and a launcher's etcd user kept to its key ranges.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use uuid::Uuid;

use super::tests::{Fixture, fixture};
use super::transport::Dialer;
use super::*;

/// How long a refusal may take to be told (the connect timeout is 5 s: a refusal must not wait
/// for it).
const PROMPT: Duration = Duration::from_secs(2);

fn refused(fx: &Fixture, transport: &EtcdTransport) -> (String, Duration) {
    let started = Instant::now();
    let err = EtcdStore::connect(&[fx.server.endpoint()], &fx.prefix, transport).unwrap_err();
    let took = started.elapsed();
    match err {
        StoreError::Backend(m) => (m, took),
        other => panic!("not a Backend error: {other}"),
    }
}

#[test]
fn plain_http_to_a_tls_etcd_fails_at_once_saying_why() {
    let Some(fx) = fixture() else { return };
    let (message, took) = refused(&fx, &EtcdTransport::Plaintext);
    assert!(message.contains("serves TLS"), "{message}");
    assert!(took < PROMPT, "{took:?}");
}

#[test]
fn a_certificate_from_another_ca_is_refused_at_once_saying_why() {
    let Some(fx) = fixture() else { return };
    let foreign = EtcdTransport::Tls(fx.server.foreign_identity(tests::CONTROLLER));
    let (message, took) = refused(&fx, &foreign);
    assert!(
        message.contains("refused our client certificate"),
        "{message}"
    );
    assert!(took < PROMPT, "{took:?}");
    // The other way round: a client that trusts another CA refuses etcd's certificate.
    let pki = testkit::TestPki::new();
    let other = EtcdTransport::Tls(
        pki.leaf_named(tests::CONTROLLER, ssntp::Role::empty())
            .identity(),
    );
    let (message, took) = refused(&fx, &other);
    assert!(message.contains("not issued by our etcd CA"), "{message}");
    assert!(took < PROMPT, "{took:?}");
}

#[test]
fn a_client_without_a_certificate_is_refused_at_once_saying_why() {
    let Some(fx) = fixture() else { return };
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(fx.server.ca_pem().as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(ssntp_net::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let dialer = Dialer::with_tls_config(
        &fx.server.endpoint(),
        Arc::new(config),
        Duration::from_secs(5),
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let message = runtime.block_on(dialer.check()).unwrap_err();
    assert!(
        message.contains("requires a client certificate"),
        "{message}"
    );
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
}

/// A store over the prefix of `fx` as etcd user `user`.
fn store_as(fx: &Fixture, user: &str) -> Result<EtcdStore> {
    EtcdStore::connect(
        &[fx.server.endpoint()],
        &fx.prefix,
        &EtcdTransport::Tls(fx.server.identity(user)),
    )
}

fn denied<T: std::fmt::Debug>(what: &str, out: Result<T>) {
    match out {
        Err(StoreError::PermissionDenied(m)) if m.contains("etcd user") => {}
        other => panic!("{what}: not refused as permission denied: {other:?}"),
    }
}

/// The cluster's set-up for the fixture's prefix, run again as root (idempotent), with a new
/// launcher user: its name.
fn with_launcher(fx: &Fixture) -> String {
    let launcher = format!("launcher-{}", Uuid::new_v4().simple());
    let plan = auth::AuthPlan {
        prefix: fx.prefix.clone(),
        controllers: vec![tests::CONTROLLER.into()],
        launchers: vec![launcher.clone()],
    };
    let root = EtcdTransport::Tls(fx.server.identity(testkit::etcd::ROOT));
    auth::setup_auth(
        &[fx.server.endpoint()],
        &root,
        &plan,
        &EtcdOptions::default(),
    )
    .unwrap();
    launcher
}

#[test]
fn a_launcher_user_reaches_its_own_keys_only() {
    let Some(fx) = fixture() else { return };
    let launcher = with_launcher(&fx);

    let controller = fx.store_with(EtcdOptions::default());
    let tenant = controller
        .create_tenant(NewTenant {
            name: "t".into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        })
        .unwrap();
    let host = controller
        .create_remote_host(NewRemoteHost {
            name: "edge".into(),
            libvirt_uri: "qemu+tcp://127.0.0.1/system".into(),
        })
        .unwrap();
    let queued = controller
        .enqueue_operation(NewOperation {
            host: host.id,
            instance: Uuid::new_v4(),
            kind: OperationKind::Start,
            payload: vec![1],
        })
        .unwrap();

    let replica = store_as(&fx, &launcher).unwrap();
    // Its own: the hosts, the queue, a claim, its renewal and its end; reservations.
    assert_eq!(replica.remote_hosts().unwrap().len(), 1);
    let lease = Duration::from_secs(60);
    let op = replica
        .claim_operation_on("r1", lease, Some(host.id))
        .unwrap()
        .unwrap();
    assert_eq!(op.id, queued.id);
    let token = op.claim.as_ref().unwrap().token;
    replica.renew_claim(op.id, token, lease).unwrap();
    replica.fail_operation(op.id, token, "test").unwrap();
    replica.reserve("vni", "7", "r1").unwrap();

    // Not its own: tenants, users, roles, names, tokens, events, the catalog.
    denied("tenants", replica.tenants());
    denied("tenant", replica.tenant(tenant.id));
    denied("users", replica.users());
    denied(
        "create a user",
        replica.create_user(NewUser {
            name: "mallory".into(),
            password_hash: "x".into(),
        }),
    );
    denied(
        "revoke a token",
        replica.revoke_token(&TokenRef {
            id: "t".into(),
            expires: std::time::SystemTime::now() + Duration::from_secs(60),
        }),
    );
    denied("events", replica.events(Scope::All, None, 10));
    denied("flavors", replica.flavors(Scope::All));
    denied(
        "enqueue",
        replica.enqueue_operation(NewOperation {
            host: host.id,
            instance: Uuid::new_v4(),
            kind: OperationKind::Start,
            payload: vec![2],
        }),
    );
    // An etcd user the set-up never made is refused too.
    let stranger = store_as(&fx, "nobody").map(|s| s.tenants());
    assert!(!matches!(stranger, Ok(Ok(_))), "{stranger:?}");
}

#[test]
fn a_launcher_deletes_an_instance_of_a_server_group() {
    let Some(fx) = fixture() else { return };
    let launcher = with_launcher(&fx);
    let controller = fx.store_with(EtcdOptions::default());
    let (tenant, workload) = tests::tenant_and_workload(&controller, Quota::default(), 1);
    let instance = controller
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
    let group = controller
        .create_server_group(NewServerGroup {
            tenant: tenant.id,
            user: None,
            name: "g".into(),
            policy: "anti-affinity".into(),
        })
        .unwrap();
    controller
        .add_server_group_member(Scope::All, group.id, instance.id)
        .unwrap();
    let host = controller
        .create_remote_host(NewRemoteHost {
            name: "edge".into(),
            libvirt_uri: "qemu+tcp://127.0.0.1/system".into(),
        })
        .unwrap();
    controller
        .enqueue_operation(NewOperation {
            host: host.id,
            instance: instance.id,
            kind: OperationKind::Delete,
            payload: vec![1],
        })
        .unwrap();
    let replica = store_as(&fx, &launcher).unwrap();
    let op = replica
        .claim_operation_on("r1", Duration::from_secs(60), Some(host.id))
        .unwrap()
        .unwrap();
    let token = op.claim.as_ref().unwrap().token;
    replica
        .fenced_write(op.id, token, &InstanceWrite::Remove, None)
        .unwrap();
    let group = controller.server_group(Scope::All, group.id).unwrap();
    assert!(group.members.is_empty());
}
