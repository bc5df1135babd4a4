//! The cluster's own routes (nodes, CNCIs, events, traces) and bad input on every route.

use super::*;

#[tokio::test]
async fn nodes_cncis_events_and_traces() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let n = node();
    w.cluster.add_node(n.clone());
    w.cluster.add_trace(Trace {
        label: "t1".into(),
        frame: "COMMAND START".into(),
        total_ns: 5,
        hops: vec![],
    });
    let nodes = ok(&c, Method::GET, "/cumulo/v1/nodes", &admin, None, 200).await;
    assert_eq!(nodes["nodes"][0]["hostname"], "host1");
    ok(
        &c,
        Method::POST,
        &format!("/cumulo/v1/nodes/{}/evacuate", n.id),
        &admin,
        None,
        202,
    )
    .await;
    let shown = ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/nodes/{}", n.id),
        &admin,
        None,
        200,
    )
    .await;
    assert_eq!(shown["status"], "maintenance");
    ok(
        &c,
        Method::POST,
        &format!("/cumulo/v1/nodes/{}/restore", n.id),
        &admin,
        None,
        202,
    )
    .await;
    ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/nodes/{}", uuid::Uuid::new_v4()),
        &admin,
        None,
        404,
    )
    .await;
    let traces = ok(&c, Method::GET, "/cumulo/v1/traces", &admin, None, 200).await;
    assert_eq!(traces["traces"][0]["label"], "t1");
    ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/nodes/{}", n.id),
        &a,
        None,
        403,
    )
    .await;

    for (tenant, message) in [
        (Some(w.a.id), "a1"),
        (Some(w.b.id), "b1"),
        (None, "cluster"),
    ] {
        w.store
            .append_event(NewEvent {
                tenant,
                kind: EventKind::Info,
                message: message.into(),
            })
            .unwrap();
    }
    let mine = ok(&c, Method::GET, "/cumulo/v1/events", &a, None, 200).await;
    assert_eq!(mine["events"].as_array().unwrap().len(), 1);
    assert_eq!(mine["events"][0]["message"], "a1");
    let all = ok(&c, Method::GET, "/cumulo/v1/events", &admin, None, 200).await;
    let first = all["events"][0]["seq"].as_u64().unwrap();
    let after = ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/events?after={first}"),
        &admin,
        None,
        200,
    )
    .await;
    assert_eq!(after["events"].as_array().unwrap().len(), 2);
    let cleared = ok(&c, Method::DELETE, "/cumulo/v1/events", &admin, None, 200).await;
    assert_eq!(cleared["deleted"], 3);
    let cncis = ok(&c, Method::GET, "/cumulo/v1/cncis", &admin, None, 200).await;
    assert_eq!(cncis["cncis"], json!([]));
    ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/cncis/{}", uuid::Uuid::new_v4()),
        &a,
        None,
        404,
    )
    .await;
    w.stop().await;
}

#[tokio::test]
async fn native_bad_input() {
    let w = World::start_with(None, |config| config.body_limit = 4096).await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let cases = [
        (
            Method::POST,
            "/cumulo/v1/tenants",
            json!({"name": "x", "colour": "red"}),
            400,
        ),
        (
            Method::POST,
            "/cumulo/v1/tenants",
            json!({"name": "x", "quota": null}),
            400,
        ),
        (
            Method::POST,
            "/cumulo/v1/tenants",
            json!({"name": "x", "subnet_prefix": 8}),
            400,
        ),
        (Method::POST, "/cumulo/v1/tenants", json!({"name": 5}), 400),
        (
            Method::POST,
            "/cumulo/v1/tenants",
            json!({"name": "admin"}),
            409,
        ),
        (Method::POST, "/cumulo/v1/users", json!({"name": "x"}), 400),
        (
            Method::POST,
            "/cumulo/v1/flavors",
            json!({"name": "z", "vcpus": 0, "memory_mb": 1}),
            400,
        ),
        (
            Method::POST,
            "/cumulo/v1/flavors",
            json!({"name": "m1.tiny", "vcpus": 1, "memory_mb": 1}),
            409,
        ),
        (
            Method::POST,
            "/cumulo/v1/images",
            json!({"name": "i", "kind": "vmdk", "reference": "/x"}),
            400,
        ),
        (
            Method::POST,
            "/cumulo/v1/workloads",
            json!({"name": "w", "flavor": "nope", "image": w.image.id}),
            400,
        ),
        (
            Method::POST,
            "/cumulo/v1/workloads",
            json!({"name": "w", "flavor": uuid::Uuid::new_v4(), "image": w.image.id}),
            404,
        ),
        (
            Method::POST,
            "/cumulo/v1/instances",
            json!({"workload": uuid::Uuid::new_v4(), "name": "x"}),
            404,
        ),
        (
            Method::POST,
            "/cumulo/v1/instances",
            json!({"workload": uuid::Uuid::new_v4(), "name": "x", "count": 0}),
            400,
        ),
        (
            Method::POST,
            "/cumulo/v1/users/not-a-uuid/roles",
            json!({"tenant": w.a.id, "role": "member"}),
            404,
        ),
        (
            Method::POST,
            &format!("/cumulo/v1/users/{}/roles", w.a.user),
            json!({"tenant": w.a.id, "role": "owner"}),
            400,
        ),
    ];
    for (method, path, body, expected) in cases {
        let (status, _, reply) = c
            .send(method.clone(), path, Some(&admin), Some(body.clone()))
            .await;
        assert_eq!(status.as_u16(), expected, "{method} {path} {body}: {reply}");
        assert_eq!(reply["error"]["code"], expected);
    }
    for raw in [&b"{"[..], b"", b"[]", b"\"x\""] {
        let (status, _, _) = c
            .raw(
                Method::POST,
                "/cumulo/v1/tenants",
                Some(&admin),
                raw.to_vec(),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
    let big = json!({"name": "x".repeat(5000)});
    let (status, _, _) = c
        .send(Method::POST, "/cumulo/v1/tenants", Some(&admin), Some(big))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    for path in [
        "/cumulo/v1/instances/123",
        "/cumulo/v1/workloads/x",
        "/cumulo/v1/tenants/..",
        "/cumulo/v1/nope",
        "/cumulo/v1/instances/%FF",
    ] {
        let (status, _, _) = c.send(Method::GET, path, Some(&admin), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    let (status, _, body) = c
        .send(
            Method::DELETE,
            "/cumulo/v1/users/%C0/roles/x/y",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], 404);
    let (status, _, _) = c
        .send(
            Method::GET,
            "/cumulo/v1/instances?limit=abc",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = c
        .send(
            Method::GET,
            "/cumulo/v1/instances?marker=abc",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = c
        .send(Method::PUT, "/cumulo/v1/instances", Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    w.stop().await;
}
