//! How the store's calls reach etcd: from every kind of caller (outside a runtime, in a
//! blocking thread, in a task), and as a backend error in time when etcd cannot be reached or
//! has gone.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::etcd::EtcdServer;

use super::tests::fixture;
use super::*;

#[test]
fn an_unreachable_etcd_is_a_backend_error_in_time() {
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let started = Instant::now();
    let err = EtcdStore::connect_with(
        &[port.to_string()],
        "/cumulo/",
        &EtcdTransport::Plaintext,
        EtcdOptions {
            connect_timeout: Duration::from_millis(500),
            ..EtcdOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err, StoreError::Backend(m) if m.contains(&port.to_string())),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        EtcdStore::connect(&[], "/cumulo/", &EtcdTransport::Plaintext),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn a_store_works_from_spawn_blocking() {
    let Some(fx) = fixture() else { return };
    let store = Arc::new(fx.store_with(EtcdOptions::default()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tenants = rt.block_on(async move {
        let inner = Arc::clone(&store);
        let n = tokio::task::spawn_blocking(move || inner.tenants().unwrap().len())
            .await
            .unwrap();
        // Dropping the last handle inside an async context must not panic.
        drop(store);
        n
    });
    assert_eq!(tenants, 0);
}

#[test]
fn a_store_works_from_every_kind_of_caller_in_a_multi_threaded_runtime() {
    let Some(fx) = fixture() else { return };
    let store = Arc::new(fx.store_with(EtcdOptions::default()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Outside any runtime, in the runtime's own block_on, in a blocking thread, and in tasks
    // (several at once, so that a worker blocked in one leaves its other tasks to another).
    assert_eq!(store.tenants().unwrap().len(), 0);
    let counts = rt.block_on(async {
        let mut counts = vec![store.tenants().unwrap().len()];
        let inner = Arc::clone(&store);
        counts.push(
            tokio::task::spawn_blocking(move || inner.tenants().unwrap().len())
                .await
                .unwrap(),
        );
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let inner = Arc::clone(&store);
                tokio::spawn(async move { inner.tenants().unwrap().len() })
            })
            .collect();
        for task in tasks {
            counts.push(task.await.unwrap());
        }
        counts
    });
    assert_eq!(counts, vec![0; 6]);
}

#[test]
fn calls_fail_with_backend_in_time_once_etcd_is_gone() {
    if fixture().is_none() {
        return;
    }
    // Its own etcd, to stop it under a connected store.
    let server = EtcdServer::start().unwrap();
    let store = EtcdStore::connect_with(
        &[server.endpoint()],
        "/cumulo/",
        &EtcdTransport::Tls(server.identity(testkit::etcd::ROOT)),
        EtcdOptions {
            call_timeout: Duration::from_secs(1),
            ..EtcdOptions::default()
        },
    )
    .unwrap();
    assert!(store.tenants().unwrap().is_empty());
    drop(server);
    let started = Instant::now();
    let err = store.tenants().unwrap_err();
    assert!(
        matches!(&err, StoreError::Backend(m) if m.contains("etcd at")),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
