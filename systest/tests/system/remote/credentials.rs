//! Launcher credentials renewed on demand, and replicas picking the new ones up.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launcher_credentials_are_renewed_on_demand_and_replicas_pick_them_up() {
    use controller::creds::CredsIssuer;
    use std::os::unix::fs::PermissionsExt;

    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The controller's CA (made here).
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test cluster CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_pem = params.self_signed(&ca_key).unwrap().pem();
    let issuer = Arc::new(
        CredsIssuer::from_pem(&ca_pem, &ca_key.serialize_pem(), Duration::from_secs(3600)).unwrap(),
    );
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
        ],
    );
    let host_id = Uuid::parse_str(&host).unwrap();
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
        let (cert, key) = (pki.join("clientcert.pem"), pki.join("clientkey.pem"));
        testkit::wait_until(T, &format!("round {round}: the replica's copy"), || async {
            std::fs::read_to_string(&cert).is_ok_and(|c| c == creds.cert_pem)
                && std::fs::read_to_string(&key).is_ok_and(|k| k == creds.key_pem)
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
