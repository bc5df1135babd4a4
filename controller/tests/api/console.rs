//! The console log: Compute's `os-getConsoleOutput` server action and the native `GET
//! /instances/{id}/console`, over the fake cluster (whose log is three lines, the last the guest's
//! marker): lengths, states that have no log (409), an unreachable cluster (503), tenancy.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::InstanceState;

use crate::support::World;

/// `os-getConsoleOutput` with `args`: the status and the body.
async fn console_output(w: &World, token: &str, server: &str, args: Value) -> (StatusCode, Value) {
    let (status, _, body) = w
        .client()
        .send(
            Method::POST,
            &format!("/compute/v2.1/servers/{server}/action"),
            Some(token),
            Some(json!({ "os-getConsoleOutput": args })),
        )
        .await;
    (status, body)
}

#[tokio::test]
async fn os_get_console_output_takes_nova_lengths() {
    let w = World::start().await;
    let a = w.token_a().await;
    let server = w.server_a(&a, "vm").await;
    let marker = format!("CUMULO-GUEST-UP {server}\n");
    let (status, body) = console_output(&w, &a, &server, json!({"length": 1})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "output": marker }));
    for args in [
        json!({}),
        json!({"length": null}),
        json!({"length": -1}),
        json!(null),
    ] {
        let (status, body) = console_output(&w, &a, &server, args.clone()).await;
        assert_eq!(status, StatusCode::OK, "{args}: {body}");
        let output = body["output"].as_str().unwrap();
        assert_eq!(output.lines().count(), 3, "{args}: {output}");
        assert!(output.ends_with(&marker));
    }
    let (status, body) = console_output(&w, &a, &server, json!({"length": "2"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"].as_str().unwrap().lines().count(), 2);
    for bad in [
        json!({"length": -2}),
        json!({"length": "two"}),
        json!({"length": [1]}),
    ] {
        let (status, body) = console_output(&w, &a, &server, bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["badRequest"]["code"], 400, "{body}");
    }
    // Another tenant's server is not found.
    let b = w.token_b().await;
    let (status, _) = console_output(&w, &b, &server, json!({"length": 1})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    w.stop().await;
}

#[tokio::test]
async fn a_server_on_no_node_has_no_console_and_an_unreachable_one_says_why() {
    let w = World::start().await;
    let a = w.token_a().await;
    let server = w.server_a(&a, "vm").await;
    let id: uuid::Uuid = server.parse().unwrap();
    w.cluster
        .set_state(id, InstanceState::Error("no room".into()))
        .unwrap();
    let (status, body) = console_output(&w, &a, &server, json!({"length": 5})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["conflictingRequest"]["message"]
            .as_str()
            .unwrap()
            .contains("console"),
        "{body}"
    );
    w.cluster.set_state(id, InstanceState::Active).unwrap();
    w.cluster.set_connected(false);
    let (status, body) = console_output(&w, &a, &server, json!({"length": 5})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["serviceUnavailable"]["message"]
            .as_str()
            .unwrap()
            .contains("not connected"),
        "{body}"
    );
    w.stop().await;
}

#[tokio::test]
async fn the_native_api_shows_the_last_lines() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let server = w.server_a(&a, "vm").await;
    let path = format!("/cumulo/v1/instances/{server}/console");
    let (status, _, body) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"].as_str().unwrap().lines().count(), 3);
    let (status, _, body) = c
        .send(Method::GET, &format!("{path}?lines=1"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["output"], format!("CUMULO-GUEST-UP {server}\n"));
    for bad in ["lines=-1", "lines=x", "lines=10001", "tail=3"] {
        let (status, _, body) = c
            .send(Method::GET, &format!("{path}?{bad}"), Some(&a), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let id: uuid::Uuid = server.parse().unwrap();
    w.cluster.set_state(id, InstanceState::Deleted).unwrap();
    let (status, _, body) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let b = w.token_b().await;
    let (status, _, _) = c.send(Method::GET, &path, Some(&b), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    w.stop().await;
}
