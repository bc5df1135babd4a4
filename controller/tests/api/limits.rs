//! What unauthenticated clients cannot do to the API: log in past the limits per user name and
//! per source address (429 with `Retry-After`, in Keystone's error shape), take every connection
//! slot from one address, or starve the rest of the API by keeping the password hashing pool
//! busy.

use std::time::Duration;

use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{PASSWORD, World, connect_from};

fn retry_after(headers: &HeaderMap) -> u64 {
    headers
        .get("retry-after")
        .expect("a Retry-After header")
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn assert_too_many(status: StatusCode, headers: &HeaderMap, body: &Value) -> u64 {
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], 429, "{body}");
    assert_eq!(body["error"]["title"], "Too Many Requests", "{body}");
    retry_after(headers)
}

#[tokio::test]
async fn a_user_name_past_its_limit_gets_429_until_the_window_passes() {
    let w = World::start_with(None, |c| {
        c.login.per_user = 3;
        c.login.per_source = 0;
    })
    .await;
    let user = &w.a.user_name;
    // Attempts from several addresses count against the one name.
    for from in [[127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 3]] {
        let (status, _, _) = w.client_from(from).login(user, "wrong", &w.a.name).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // Now even the right password is refused, with how long to wait (60 s / 3 a token).
    let (status, headers, body) = w.client().login(user, PASSWORD, &w.a.name).await;
    let wait = assert_too_many(status, &headers, &body);
    assert!((1..=20).contains(&wait), "Retry-After: {wait}");
    // A name that does not exist is limited alike: the limiter does not tell them apart.
    for _ in 0..3 {
        let (status, _, _) = w.client().login("nobody", "wrong", &w.a.name).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, headers, body) = w.client().login("nobody", "wrong", &w.a.name).await;
    assert_too_many(status, &headers, &body);
    // Another user is not affected, and right passwords do not count.
    for _ in 0..5 {
        let (status, _, body) = w.client().login(&w.b.user_name, PASSWORD, &w.b.name).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // Once the wait has passed, the right password is let in.
    w.api.state.login_limiter.advance(Duration::from_secs(wait));
    let (status, _, body) = w.client().login(user, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    w.stop().await;
}

#[tokio::test]
async fn a_source_past_its_limit_gets_429_other_sources_do_not() {
    let w = World::start_with(None, |c| {
        c.login.per_user = 0;
        c.login.per_source = 3;
    })
    .await;
    let attacker = w.client_from([127, 0, 0, 2]);
    for i in 0..3 {
        let (status, _, _) = attacker
            .login(&format!("guess-{i}"), "wrong", &w.a.name)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, headers, body) = attacker.login(&w.a.user_name, PASSWORD, &w.a.name).await;
    let wait = assert_too_many(status, &headers, &body);
    assert!((1..=20).contains(&wait), "Retry-After: {wait}");
    // Another address is let in, and its right passwords do not count against it.
    let honest = w.client_from([127, 0, 0, 3]);
    for _ in 0..5 {
        let (status, _, body) = honest.login(&w.a.user_name, PASSWORD, &w.a.name).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, _, _) = honest.login("guess", "wrong", &w.a.name).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.api.state.login_limiter.advance(Duration::from_secs(wait));
    let (status, _, body) = attacker.login(&w.a.user_name, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    w.stop().await;
}

/// Sends a request on `stream` and reads until the server closes it: the answer's bytes (none
/// if the connection was closed without one).
async fn exchange(mut stream: TcpStream) -> Vec<u8> {
    let request = b"GET /cumulo/v1/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let mut answer = Vec::new();
    if stream.write_all(request).await.is_ok() {
        let _ = stream.read_to_end(&mut answer).await;
    }
    answer
}

#[tokio::test]
async fn one_address_cannot_take_more_than_its_connection_slots() {
    let w = World::start_with(None, |c| c.connections.per_source = 2).await;
    let one = [127, 0, 0, 1].into();
    let held = [
        connect_from(one, w.api.addr).await.unwrap(),
        connect_from(one, w.api.addr).await.unwrap(),
    ];
    // The third from the same address is closed without an answer.
    let third = connect_from(one, w.api.addr).await.unwrap();
    let answer = exchange(third).await;
    assert!(
        answer.is_empty(),
        "answered: {}",
        String::from_utf8_lossy(&answer)
    );
    // Another address is served meanwhile.
    let (status, _, body) = w
        .client_from([127, 0, 0, 2])
        .send(Method::GET, "/cumulo/v1/healthz", None, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Once one of the two closes, the address is served again (as soon as the server notices).
    drop(held);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = exchange(connect_from(one, w.api.addr).await.unwrap()).await;
        if answer.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "127.0.0.1 still refused"
        );
        tokio::task::yield_now().await;
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_hashing_pool_refuses_logins_at_once_and_the_rest_of_the_api_answers() {
    let w = World::start_with(None, |c| {
        c.login.workers = 1;
        c.login.queue = 1;
    })
    .await;
    let token = w.token_a().await;
    let admin = w.admin_token().await;
    // Fill the pool: one job holds its thread, another waits in the queue.
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let gate = std::sync::Arc::new(std::sync::Mutex::new(gate));
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let holding = {
        let gate = gate.clone();
        w.api.state.hashing.submit(move || {
            let _ = started_tx.send(());
            let _ = gate.lock().unwrap().recv();
        })
    }
    .unwrap();
    started.await.unwrap();
    let waiting = w
        .api
        .state
        .hashing
        .submit(move || {
            let _ = gate.lock().unwrap().recv();
        })
        .unwrap();

    // A login is refused at once (503, Retry-After), not queued.
    let (status, headers, body) = w.client().login(&w.a.user_name, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry_after(&headers), 1);
    // So is a user creation, which hashes too.
    let (status, _, body) = w
        .client()
        .send(
            Method::POST,
            "/cumulo/v1/users",
            Some(&admin),
            Some(serde_json::json!({"name": "new", "password": "new-password"})),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    // Everything else answers.
    let (status, _, body) = w
        .client()
        .send(Method::GET, "/cumulo/v1/healthz", None, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = w
        .client()
        .send(Method::GET, "/compute/v2.1/servers", Some(&token), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Freed, the pool takes logins again; the refused attempt was not counted.
    release.send(()).unwrap();
    release.send(()).unwrap();
    holding.await.unwrap();
    waiting.await.unwrap();
    let (status, _, body) = w.client().login(&w.a.user_name, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    w.stop().await;
}

#[tokio::test]
async fn the_admin_client_certificate_is_not_rate_limited() {
    use ssntp::Role;
    let pki = testkit::TestPki::new();
    let server = pki.leaf(Role::CONTROLLER, Some(uuid::Uuid::new_v4()));
    let tls = controller::api::server_tls_config(
        server.ca_pem.as_bytes(),
        server.cert_pem.as_bytes(),
        server.key_pem.as_bytes(),
    )
    .unwrap();
    let w = World::start_with(Some(tls), |c| {
        c.login.per_user = 1;
        c.login.per_source = 0;
    })
    .await;
    let plain = crate::support::Client {
        tls: Some(crate::tls::client_config(&server.ca_pem, None)),
        ..w.client()
    };
    let admin = crate::support::Client {
        tls: Some(pki.admin_leaf().identity().client_config().unwrap()),
        ..w.client()
    };
    let (status, _, _) = plain.login("admin", "wrong", "admin").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, headers, body) = plain.login("admin", "wrong", "admin").await;
    assert_too_many(status, &headers, &body);
    for _ in 0..3 {
        let (status, _, body) = admin.login("admin", "wrong", "admin").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    w.stop().await;
}
