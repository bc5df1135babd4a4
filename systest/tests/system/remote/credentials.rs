//! Launcher credentials renewed on demand, kept sealed in the store, and replicas (given their
//! host's key by `cumulo-controller launcher-key`) picking the new ones up; replicas without the
//! right key stopping at once, saying why.

use super::*;

/// A CA made here: its certificate and key (PEM).
fn ca() -> (String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test cluster CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_pem = params.self_signed(&ca_key).unwrap().pem();
    (ca_pem, ca_key.serialize_pem())
}

/// Runs `cumulo-controller launcher-key` for host `host` (a name: looked up in the store at
/// `url`) with the CA key in `ca_key`, writing the host's key to `out`.
pub(crate) async fn launcher_key(
    url: &str,
    ca_key: &std::path::Path,
    host: &str,
    out: &std::path::Path,
) {
    let etcd = testkit::etcd::shared().expect("the test's etcd");
    let mut command = Command::new(testkit::bins::path("cumulo-controller"));
    command
        .arg("launcher-key")
        .args(["--launcher-ca-key", ca_key.to_str().unwrap()])
        .args(["--host", host, "--store", url])
        .args(etcd.client_args(CONTROLLER))
        .args(["--out", out.to_str().unwrap()]);
    let done = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    assert!(
        done.status.success(),
        "launcher-key: {}",
        String::from_utf8_lossy(&done.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launcher_credentials_are_renewed_on_demand_and_replicas_pick_them_up() {
    use controller::creds::CredsIssuer;
    use std::os::unix::fs::PermissionsExt;

    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The controller's CA (made here).
    let (ca_pem, ca_key) = ca();
    let ca_key_file = dir.path().join("ca.key");
    std::fs::write(&ca_key_file, &ca_key).unwrap();
    let issuer =
        Arc::new(CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(3600)).unwrap());
    // One controller without the CA key, one with it.
    let mut ctls = controllers(&url, 1).await;
    let with_key = issuer.clone();
    ctls.push(
        controller_with(&url, move |c| {
            c.launcher_creds = Some(with_key);
        })
        .await,
    );

    let uri = "qemu+tls://edge-tls/system";
    let host = register(&ctls[0], "edge-tls", uri).await;
    let path = format!("/cumulo/v1/nodes/{host}/credentials");
    let (status, body) = call(&ctls[0], "POST", &path, None).await;
    assert_eq!(status, 409, "no CA key on this controller: {body}");
    // The host's key, for its replicas, by the host's name.
    let host_key = dir.path().join("edge-tls.key");
    launcher_key(&url, &ca_key_file, "edge-tls", &host_key).await;
    let mode = std::fs::metadata(&host_key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let host_id = Uuid::parse_str(&host).unwrap();
    assert_eq!(
        store::sealed::HostKey::read(&host_key).unwrap(),
        issuer.host_key(host_id)
    );
    let pki = dir.path().join("pki");
    let _replica = Replica::start(
        &url,
        uri,
        "r1",
        dir.path(),
        &[
            "--backend",
            "sim",
            "--lease",
            "1s",
            "--tls-pki",
            pki.to_str().unwrap(),
            "--creds-key",
            host_key.to_str().unwrap(),
        ],
    );
    for round in 0..2 {
        let (status, body) = call(&ctls[1], "POST", &path, None).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.get("key").is_none() && body["not_after"].is_string(),
            "{body}"
        );
        let store = ctls[0].store.clone();
        let creds = tokio::task::spawn_blocking(move || store.launcher_creds(host_id))
            .await
            .unwrap()
            .unwrap();
        assert!(creds.cert_pem.contains("BEGIN CERTIFICATE"));
        assert_eq!(creds.ca_pem, ca_pem);
        // The store holds the key sealed: a reader of it gets no private key.
        assert!(creds.sealed_key.starts_with(store::sealed::SEALED_PREFIX));
        assert!(!creds.sealed_key.contains("PRIVATE KEY"));
        let key_pem = issuer
            .host_key(host_id)
            .open(host_id, &creds.cert_pem, &creds.sealed_key)
            .unwrap();
        assert!(key_pem.contains("PRIVATE KEY"));
        let (cert, key) = (pki.join("clientcert.pem"), pki.join("clientkey.pem"));
        testkit::wait_until(T, &format!("round {round}: the replica's copy"), || async {
            std::fs::read_to_string(&cert).is_ok_and(|c| c == creds.cert_pem)
                && std::fs::read_to_string(&key).is_ok_and(|k| k == key_pem)
        })
        .await;
        assert_eq!(
            std::fs::read_to_string(pki.join("cacert.pem")).unwrap(),
            ca_pem
        );
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // Unknown host: 404.
    let (status, _) = call(
        &ctls[1],
        "POST",
        &format!("/cumulo/v1/nodes/{}/credentials", Uuid::new_v4()),
        None,
    )
    .await;
    assert_eq!(status, 404);
}

/// A replica whose credentials it cannot open stops at once and says why: no `--creds-key`
/// beside `--tls-pki`, another host's key, a key from another CA key (the host's credentials
/// already in the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_its_hosts_key_stops_at_once_saying_why() {
    use controller::creds::CredsIssuer;

    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, ca_key) = ca();
    let ca_key_file = dir.path().join("ca.key");
    std::fs::write(&ca_key_file, &ca_key).unwrap();
    let issuer =
        Arc::new(CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(3600)).unwrap());
    let ctl = controller_with(&url, move |c| c.launcher_creds = Some(issuer)).await;
    let uri = "qemu+tls://edge-a/system";
    let host = register(&ctl, "edge-a", uri).await;
    register(&ctl, "edge-b", "qemu+tls://edge-b/system").await;
    let (status, body) = call(
        &ctl,
        "POST",
        &format!("/cumulo/v1/nodes/{host}/credentials"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let pki = dir.path().join("pki");
    let pki = pki.to_str().unwrap();

    // --tls-pki without --creds-key: refused by the command line.
    let (code, log) = Replica::run_to_exit(&url, uri, "r0", dir.path(), &["--tls-pki", pki]).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("--creds-key"), "{log}");

    // The key of another host (edge-b).
    let b_key = dir.path().join("edge-b.key");
    launcher_key(&url, &ca_key_file, "edge-b", &b_key).await;
    let args = ["--tls-pki", pki, "--creds-key", b_key.to_str().unwrap()];
    let (code, log) = Replica::run_to_exit(&url, uri, "r1", dir.path(), &args).await;
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(&format!("this replica serves host {host}")),
        "{log}"
    );

    // The host's key as another CA key derives it: the sealed key does not open.
    let (_, other_ca_key) = ca();
    let other_ca_file = dir.path().join("other-ca.key");
    std::fs::write(&other_ca_file, other_ca_key).unwrap();
    let wrong = dir.path().join("edge-a-wrong.key");
    launcher_key(&url, &other_ca_file, "edge-a", &wrong).await;
    let args = ["--tls-pki", pki, "--creds-key", wrong.to_str().unwrap()];
    let (code, log) = Replica::run_to_exit(&url, uri, "r2", dir.path(), &args).await;
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("does not open with this host key"), "{log}");
    assert!(!std::path::Path::new(pki).join("clientkey.pem").exists());
}
