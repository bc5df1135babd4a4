//! Replicas over real libvirt: a real VM over a remote (TCP) libvirt URI with its domain fenced,
//! and a TLS libvirt reached with the credentials the controller issues.

use super::*;

/// The libvirt URI reached over TCP on loopback (`scripts/libvirt.sh` exports it), or `None`
/// (after saying why) when the test is skipped.
fn tcp_uri() -> Option<String> {
    match std::env::var("CUMULO_LIBVIRT_TCP_URI") {
        Ok(uri) if !uri.is_empty() => Some(uri),
        _ => {
            let required = std::env::var("CUMULO_LIBVIRT_REQUIRED").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "CUMULO_LIBVIRT_REQUIRED=1 but CUMULO_LIBVIRT_TCP_URI is not set (scripts/libvirt.sh)"
            );
            eprintln!(
                "SKIPPED: the off-host libvirt test needs CUMULO_LIBVIRT_TCP_URI (a libvirtd \
                 listening on loopback TCP; see scripts/libvirt.sh)"
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_boot_a_real_vm_over_a_remote_libvirt_uri_and_fence_the_domain() {
    use agent::backend::Backend;
    use agent::backend::libvirt::{Accel, LibvirtBackend, LibvirtConfig};
    use agent::remote::fence::Fenced;

    let Some(uri) = tcp_uri() else {
        return;
    };
    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let _vms = testkit::libvirt::VMS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    // Both replicas keep the instance files in one directory (the remote host must see the
    // same paths: here it is this machine).
    let state = testkit::libvirt::state_dir(dir.path());
    let ctls = controllers(&url, 2).await;
    let host = register(&ctls[0], "edge-tcp", &uri).await;
    let workload = workload(&ctls[0], "tiny").await;
    let args = vm_args(state.to_str().unwrap(), "5s");
    let mut r1 = Replica::start(&url, &uri, "r1", dir.path(), &args);
    let mut r2 = Replica::start(&url, &uri, "r2", dir.path(), &args);

    let id = create(&ctls[0], workload, "vm").await;
    let instance = Uuid::parse_str(&id).unwrap();
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    let (_, body) = state_of(&ctls[1], &id).await.unwrap();
    assert_eq!(body["node"], host.as_str());
    // The guest boots (its console says so).
    let console = state
        .join("libvirt")
        .join("instances")
        .join(&id)
        .join("console.log");
    testkit::wait_until(Duration::from_secs(120), "the guest's marker", || async {
        std::fs::read_to_string(&console)
            .is_ok_and(|log| log.contains(&format!("CUMULO-GUEST-UP {id}")))
    })
    .await;
    // The domain carries the token of the claim that started it.
    let store = ctls[0].store.clone();
    let op = tokio::task::spawn_blocking(move || {
        store
            .operations(OperationFilter::default())
            .unwrap()
            .into_iter()
            .find(|o| o.instance == instance)
            .unwrap()
    })
    .await
    .unwrap();
    let token = op.claim.clone().unwrap().token;
    let backend =
        Arc::new(LibvirtBackend::new(LibvirtConfig::new(&uri, Accel::Tcg, &state)).unwrap());
    assert_eq!(backend.fence_token(instance).await.unwrap(), Some(token));
    // A replica with an older claim cannot touch it: stop and delete are refused, it runs on.
    let stale = Fenced::new(backend.clone(), token - 1);
    let refused = stale.stop(instance).await.unwrap_err();
    assert!(refused.to_string().contains("fenced"), "{refused}");
    assert!(stale.delete(instance).await.is_err());
    assert_eq!(backend.fence_token(instance).await.unwrap(), Some(token));
    assert_eq!(domain_of(&backend, instance).await, Some(true));

    // Stop, start, delete through the API.
    act(&ctls[1], &id, "stop").await;
    wait_state(&ctls, &id, "exited", Duration::from_secs(120)).await;
    // Powered off and kept: the same domain boots again on the start.
    assert_eq!(domain_of(&backend, instance).await, Some(false));
    let stopped_token = backend.fence_token(instance).await.unwrap();
    act(&ctls[0], &id, "start").await;
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    assert!(
        backend.fence_token(instance).await.unwrap() > stopped_token,
        "the start claimed the kept domain"
    );
    act(&ctls[1], &id, "delete").await;
    wait_gone(&ctls, &id, Duration::from_secs(120)).await;
    assert_eq!(domain_of(&backend, instance).await, None);

    // A replica SIGKILLed in the middle of a start, once it has defined the domain: the other
    // takes the operation over with a larger token, remakes the domain, and the guest boots.
    r1.kill();
    r2.kill();
    let short = vm_args(state.to_str().unwrap(), "2s");
    let (instance, op, old) = {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut victim = Replica::start(&url, &uri, "victim", dir.path(), &short);
            let id = create(&ctls[0], workload, &format!("taken-over-{tries}")).await;
            let instance = Uuid::parse_str(&id).unwrap();
            testkit::wait_until(Duration::from_secs(120), "the victim's domain", || async {
                backend
                    .list()
                    .await
                    .is_ok_and(|l| l.iter().any(|e| e.instance == instance))
            })
            .await;
            victim.kill();
            let op = operation_of(&ctls[0], instance).await;
            // The victim may have finished in the instant between the definition and the
            // kill (a loaded machine): then it was not in the middle; try again.
            if op.state == OperationState::Claimed {
                let old = op.claim.clone().unwrap();
                assert_eq!(old.owner, "victim");
                break (instance, op, old);
            }
            assert!(
                tries < 3,
                "the victim finished its start {tries} times before its kill"
            );
            act(&ctls[0], &id, "delete").await;
            let _heir = Replica::start(&url, &uri, "cleaner", dir.path(), &short);
            wait_gone(&ctls, &id, Duration::from_secs(120)).await;
        }
    };
    let id = instance.to_string();
    let _heir = Replica::start(&url, &uri, "heir", dir.path(), &short);
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    let done = operation_of(&ctls[1], instance).await;
    assert_eq!((done.id, done.state), (op.id, OperationState::Done));
    let new = done.claim.clone().unwrap();
    assert_eq!(new.owner, "heir");
    assert!(new.token > old.token, "{} > {}", new.token, old.token);
    assert_eq!(
        backend.fence_token(instance).await.unwrap(),
        Some(new.token)
    );
    let console = state
        .join("libvirt")
        .join("instances")
        .join(&id)
        .join("console.log");
    let marker = format!("CUMULO-GUEST-UP {id}");
    testkit::wait_until(Duration::from_secs(120), "the guest's marker", || async {
        std::fs::read_to_string(&console).is_ok_and(|log| log.contains(&marker))
    })
    .await;
    // One domain, running, and the dead replica's stale claim can no longer touch it.
    let listed = backend.list().await.unwrap();
    assert_eq!(listed.iter().filter(|e| e.instance == instance).count(), 1);
    assert_eq!(domain_of(&backend, instance).await, Some(true));
    assert!(
        Fenced::new(backend.clone(), old.token)
            .stop(instance)
            .await
            .is_err()
    );
    act(&ctls[1], &id, "delete").await;
    wait_gone(&ctls, &id, Duration::from_secs(120)).await;
    assert_eq!(domain_of(&backend, instance).await, None);
}

/// The instance's domain as `backend` lists it: `Some(running)`, `None` when there is none.
async fn domain_of(
    backend: &agent::backend::libvirt::LibvirtBackend,
    instance: Uuid,
) -> Option<bool> {
    use agent::backend::Backend;
    let listed = backend.list().await.unwrap();
    listed
        .iter()
        .find(|e| e.instance == instance)
        .map(|e| e.power.is_active())
}

/// The operation about `instance` with the newest claim.
async fn operation_of(ctl: &Ctl, instance: Uuid) -> store::Operation {
    let store = ctl.store.clone();
    tokio::task::spawn_blocking(move || {
        store
            .operations(OperationFilter::default())
            .unwrap()
            .into_iter()
            .filter(|o| o.instance == instance)
            .max_by_key(|o| o.claim.as_ref().map_or(0, |c| c.token))
            .unwrap()
    })
    .await
    .unwrap()
}

/// A libvirt replica's arguments: TCG, a `lease`, the instances' files under `state`.
fn vm_args<'a>(state: &'a str, lease: &'a str) -> [&'a str; 8] {
    [
        "--backend",
        "libvirt",
        "--accel",
        "tcg",
        "--lease",
        lease,
        "--state-dir",
        state,
    ]
}

/// The TLS libvirt URI and the CA behind it (`scripts/libvirt.sh` exports them when it starts
/// libvirtd): (URI, CA certificate PEM, CA key PEM), or `None` (after saying why) when the test
/// is skipped.
fn tls_uri() -> Option<(String, String, String)> {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let found = (|| {
        let uri = var("CUMULO_LIBVIRT_TLS_URI")?;
        let ca = std::fs::read_to_string(var("CUMULO_LIBVIRT_TLS_CA")?).ok()?;
        let key = std::fs::read_to_string(var("CUMULO_LIBVIRT_TLS_CA_KEY")?).ok()?;
        Some((uri, ca, key))
    })();
    if found.is_none() {
        let required = std::env::var("CUMULO_LIBVIRT_REQUIRED").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "CUMULO_LIBVIRT_REQUIRED=1 but CUMULO_LIBVIRT_TLS_URI, _CA and _CA_KEY are not set \
             (scripts/libvirt.sh exports them when it starts libvirtd)"
        );
        eprintln!(
            "SKIPPED: the libvirt TLS test needs CUMULO_LIBVIRT_TLS_URI, CUMULO_LIBVIRT_TLS_CA and \
             CUMULO_LIBVIRT_TLS_CA_KEY (scripts/libvirt.sh)"
        );
    }
    found
}

/// A replica reaches a libvirtd that only lets in clients with a certificate from its CA,
/// with no credentials of its own: the controller holding that CA's key issues the host's
/// launcher certificate, the replica copies it into its pki directory, and runs a VM through
/// that TLS connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reaches_a_tls_libvirt_with_the_credentials_the_controller_issues() {
    use controller::creds::CredsIssuer;

    let Some((tls, ca_pem, ca_key)) = tls_uri() else {
        return;
    };
    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let _vms = testkit::libvirt::VMS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let state = testkit::libvirt::state_dir(dir.path());
    let pki = dir.path().join("pki");
    // libvirt's client finds its certificate, key and CA in `pkipath`.
    let uri = format!("{tls}?pkipath={}", pki.display());
    let issuer =
        Arc::new(CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(3600)).unwrap());
    let ctl = controller_with(&url, move |c| c.launcher_creds = Some(issuer)).await;
    let host = register(&ctl, "edge-tls", &uri).await;
    // The host's key for its replica (the CA key as the controller has it).
    let ca_key_file = dir.path().join("ca.key");
    std::fs::write(&ca_key_file, &ca_key).unwrap();
    let host_key = dir.path().join("edge-tls.key");
    super::credentials::launcher_key(&url, &ca_key_file, &host, &host_key).await;
    let workload = workload(&ctl, "tiny").await;
    let (status, body) = call(
        &ctl,
        "POST",
        &format!("/cumulo/v1/nodes/{host}/credentials"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let _replica = Replica::start(
        &url,
        &uri,
        "r1",
        dir.path(),
        &[
            &vm_args(state.to_str().unwrap(), "5s")[..],
            &[
                "--tls-pki",
                pki.to_str().unwrap(),
                "--creds-key",
                host_key.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    let id = create(&ctl, workload, "over-tls").await;
    let ctls = [ctl];
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    // The replica's connection was TLS with the issued certificate: it is what sits in pki.
    let cert = std::fs::read_to_string(pki.join("clientcert.pem")).unwrap();
    assert!(cert.contains("BEGIN CERTIFICATE"));
    // Opened from the sealed copy in the store with the host's key.
    assert!(
        std::fs::read_to_string(pki.join("clientkey.pem"))
            .unwrap()
            .contains("PRIVATE KEY")
    );
    let instance = Uuid::parse_str(&id).unwrap();
    let backend =
        agent::backend::libvirt::LibvirtBackend::new(agent::backend::libvirt::LibvirtConfig::new(
            &uri,
            agent::backend::libvirt::Accel::Tcg,
            &state,
        ))
        .unwrap();
    assert_eq!(domain_of(&backend, instance).await, Some(true));
    act(&ctls[0], &id, "delete").await;
    wait_gone(&ctls, &id, Duration::from_secs(120)).await;
    assert_eq!(domain_of(&backend, instance).await, None);
}
