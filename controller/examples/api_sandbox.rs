//! A sandbox of the REST API for trying clients by hand (the `openstack` CLI, schemathesis, curl):
//! the API on `127.0.0.1:PORT` (default 8889, plain HTTP) over a fresh SQLite store in a
//! temporary directory and the fake cluster, with a flavor (`m1.tiny`) and a public image
//! (`cirros`). Prints the URL and an admin token, then serves until killed.
//!
//!     cargo run -p controller --example api_sandbox -- 8889
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::SystemTime;

use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, FakeCluster};
use controller::api::{ApiConfig, ApiState, TokenSigner, bootstrap_with, router, serve};
use store::{ImageKind, NewFlavor, NewImage, SqliteStore, Store};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::args()
        .nth(1)
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(8889);
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db"))?);
    store.create_flavor(NewFlavor {
        name: "m1.tiny".into(),
        vcpus: 1,
        memory_mb: 128,
        disk_gb: 1,
        is_public: true,
    })?;
    store.create_image(NewImage {
        owner: None,
        name: "cirros".into(),
        kind: ImageKind::Qcow2,
        reference: "/images/cirros.qcow2".into(),
    })?;
    let admin = bootstrap_with(
        store.as_ref(),
        ADMIN_NAME,
        ADMIN_PASSWORD,
        ADMIN_PROJECT,
        1000,
    )?;
    let url = format!("http://127.0.0.1:{port}");
    let signer = TokenSigner::random(std::time::Duration::from_secs(24 * 3600))?;
    let (token, _) = signer.issue(admin.user, admin.project, 0, SystemTime::now())?;
    let cluster = Arc::new(FakeCluster::new(store.clone()));
    let state = ApiState::new(store, cluster, signer, ApiConfig::new(url.clone()));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("url {url}");
    println!("admin {ADMIN_NAME} / {ADMIN_PASSWORD} in project {ADMIN_PROJECT}");
    println!("token {token}");
    serve(listener, None, router(state), CancellationToken::new()).await?;
    Ok(())
}
