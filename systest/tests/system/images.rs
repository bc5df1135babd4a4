//! Images reach the nodes: the controller's node image endpoint and an agent's image cache,
//! over real TLS with the cluster CA's certificates, and the roles each side checks.

use std::io::Write;
use std::sync::Arc;

use agent::backend::libvirt::cache::ImageCache;
use agent::backend::libvirt::fetch::ImageServer;
use controller::images::{ImageBlobs, LocalBlobs, nodes};
use ssntp::Role;
use ssntp_net::TlsIdentity;
use testkit::TestPki;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn sha512(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA512, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn nodes_fetch_image_data_by_hash_and_only_nodes_may() {
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let blobs = LocalBlobs::open(&dir.path().join("controller")).unwrap();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    let hash = sha512(&data);
    let (staged, mut file) = blobs.stage().unwrap();
    file.write_all(&data).unwrap();
    blobs.keep(&staged, &hash).unwrap();

    let serve = |identity: TlsIdentity, blobs: Arc<dyn ImageBlobs>| async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = format!("localhost:{}", listener.local_addr().unwrap().port());
        let stop = CancellationToken::new();
        let tls = identity.server_config().unwrap();
        let task = tokio::spawn(nodes::serve(listener, tls, blobs, stop.clone()));
        (at, stop, task)
    };
    let blobs: Arc<dyn ImageBlobs> = Arc::new(blobs);
    let controller = pki.identity(Role::CONTROLLER, Some(Uuid::new_v4()));
    let (at, stop, task) = serve(controller, blobs.clone()).await;
    let node = |identity: &TlsIdentity, name: &str, at: &str| {
        let top = dir.path().join(name);
        let source = ImageServer::new(identity, at).unwrap();
        ImageCache::open(
            &top.join("images"),
            &top.join("instances"),
            1 << 30,
            Some(Arc::new(source)),
        )
        .unwrap()
    };

    // Compute nodes, network nodes and dual-role nodes fetch the data, checked.
    for (roles, name) in [
        (Role::AGENT, "agent"),
        (Role::NETAGENT, "netagent"),
        (Role::DUAL, "dual"),
    ] {
        let cache = node(&pki.identity(roles, Some(Uuid::new_v4())), name, &at);
        let _lease = cache.ensure(&hash).await.unwrap();
        assert_eq!(std::fs::read(cache.path(&hash)).unwrap(), data, "{name}");
    }
    let agent = pki.identity(Role::AGENT, None);
    let said = |cache: ImageCache, hash: String| async move {
        cache.ensure(&hash).await.unwrap_err().to_string()
    };
    // Data the controller does not keep.
    let e = said(node(&agent, "missing", &at), "0".repeat(128)).await;
    assert!(e.contains("404") && e.contains("no image data"), "{e}");
    // A certificate without a node's role (another controller's, an admin's) gets none.
    let other_controller = pki.identity(Role::CONTROLLER, None);
    let e = said(node(&other_controller, "controller", &at), hash.clone()).await;
    assert!(e.contains("403") && e.contains("for nodes"), "{e}");
    // A node of another cluster (another CA) gets no TLS session.
    let stranger = TestPki::new().identity(Role::AGENT, None);
    let e = said(node(&stranger, "stranger", &at), hash.clone()).await;
    assert!(e.contains("TLS"), "{e}");
    stop.cancel();
    task.await.unwrap().unwrap();

    // A server whose certificate is not a controller's is not taken for the image server.
    let impostor = pki.identity(Role::AGENT, None);
    let (at, stop, task) = serve(impostor, blobs).await;
    let e = said(node(&agent, "fooled", &at), hash.clone()).await;
    assert!(e.contains("controller role"), "{e}");
    stop.cancel();
    task.await.unwrap().unwrap();
}
