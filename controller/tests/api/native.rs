//! The native API: every resource, cross-tenant attempts on every tenant-owned route, admin-only
//! routes, bad input.

use std::net::{IpAddr, Ipv4Addr};
use std::time::SystemTime;

use axum::http::{Method, StatusCode};
use controller::cluster::{Node, NodeKinds, NodeStatus, Trace};
use serde_json::{Value, json};
use store::{EventKind, NewEvent};

use crate::support::{Client, World, login_body};

async fn ok(
    c: &Client,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
    expected: u16,
) -> Value {
    let (status, _, reply) = c.send(method.clone(), path, Some(token), body).await;
    assert_eq!(status.as_u16(), expected, "{method} {path}: {reply}");
    reply
}

fn node() -> Node {
    Node {
        id: uuid::Uuid::new_v4(),
        kinds: NodeKinds {
            compute: true,
            network: true,
        },
        status: NodeStatus::Ready,
        hostname: "host1".into(),
        mem_total_mb: 4096,
        mem_available_mb: 2048,
        disk_total_mb: 10_000,
        disk_available_mb: 5_000,
        vcpus_total: 4,
        vcpus_available: 2,
        load: 50,
        instances: 0,
        ips: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        connected: SystemTime::now(),
        last_stats: None,
    }
}

#[tokio::test]
async fn health_needs_no_login() {
    let w = World::start().await;
    let (status, _, body) = w
        .client()
        .send(Method::GET, "/cumulo/v1/healthz", None, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["scheduler"], true);
    w.stop().await;
}

#[tokio::test]
async fn tenants_users_and_quotas() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let t = ok(
        &c,
        Method::POST,
        "/cumulo/v1/tenants",
        &admin,
        Some(json!({"name": "gamma", "quota": {"instances": 2}})),
        201,
    )
    .await;
    let gamma = t["id"].as_str().unwrap().to_string();
    assert_eq!(t["quota"]["instances"], 2);
    assert_eq!(t["quota"]["vcpus"], Value::Null);
    let list = ok(&c, Method::GET, "/cumulo/v1/tenants", &admin, None, 200).await;
    assert_eq!(list["tenants"].as_array().unwrap().len(), 4);
    let renamed = ok(
        &c,
        Method::PATCH,
        &format!("/cumulo/v1/tenants/{gamma}"),
        &admin,
        Some(json!({"name": "gamma2"})),
        200,
    )
    .await;
    assert_eq!(renamed["name"], "gamma2");
    let quota = ok(
        &c,
        Method::PUT,
        &format!("/cumulo/v1/tenants/{gamma}/quota"),
        &admin,
        Some(json!({"instances": 3, "vcpus": 4, "memory_mb": null})),
        200,
    )
    .await;
    assert_eq!(quota["limits"]["instances"], 3);
    assert_eq!(quota["usage"]["instances"], 0);

    // A user for gamma logs in once granted a role.
    let u = ok(
        &c,
        Method::POST,
        "/cumulo/v1/users",
        &admin,
        Some(json!({"name": "carol", "password": "pw-carol"})),
        201,
    )
    .await;
    assert!(u.get("password_hash").is_none());
    let uid = u["id"].as_str().unwrap().to_string();
    let (status, _, _) = c
        .send(
            Method::POST,
            "/v3/auth/tokens",
            None,
            Some(login_body("carol", "pw-carol", "gamma2")),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    ok(
        &c,
        Method::POST,
        &format!("/cumulo/v1/users/{uid}/roles"),
        &admin,
        Some(json!({"tenant": gamma, "role": "member"})),
        204,
    )
    .await;
    let carol = w.token("carol", "pw-carol", "gamma2").await;
    let mine = ok(&c, Method::GET, "/cumulo/v1/tenants", &carol, None, 200).await;
    assert_eq!(mine["tenants"].as_array().unwrap().len(), 1);
    ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/tenants/{gamma}/quota"),
        &carol,
        None,
        200,
    )
    .await;
    let shown = ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/users/{uid}"),
        &admin,
        None,
        200,
    )
    .await;
    assert_eq!(shown["roles"][0]["role"], "member");
    ok(
        &c,
        Method::PATCH,
        &format!("/cumulo/v1/users/{uid}"),
        &admin,
        Some(json!({"password": "new"})),
        200,
    )
    .await;
    w.token("carol", "new", "gamma2").await;
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/users/{uid}/roles/{gamma}/member"),
        &admin,
        None,
        204,
    )
    .await;
    ok(&c, Method::GET, "/cumulo/v1/tenants", &carol, None, 401).await;
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/users/{uid}"),
        &admin,
        None,
        204,
    )
    .await;
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/tenants/{gamma}"),
        &admin,
        None,
        204,
    )
    .await;

    // An admin cannot lock itself out.
    let me = w.api.admin;
    for (method, path) in [
        (Method::DELETE, format!("/cumulo/v1/users/{}", me.user)),
        (
            Method::DELETE,
            format!("/cumulo/v1/users/{}/roles/{}/admin", me.user, me.project),
        ),
        (Method::DELETE, format!("/cumulo/v1/tenants/{}", me.project)),
    ] {
        ok(&c, method, &path, &admin, None, 409).await;
    }
    ok(
        &c,
        Method::POST,
        "/cumulo/v1/tenants",
        &admin,
        Some(json!({"name": "q", "quota": [1]})),
        400,
    )
    .await;

    // Members may not administer.
    for (method, path, body) in [
        (
            Method::POST,
            "/cumulo/v1/tenants".to_string(),
            Some(json!({"name": "x"})),
        ),
        (
            Method::PATCH,
            format!("/cumulo/v1/tenants/{}", w.a.id),
            Some(json!({"name": "x"})),
        ),
        (
            Method::DELETE,
            format!("/cumulo/v1/tenants/{}", w.a.id),
            None,
        ),
        (
            Method::PUT,
            format!("/cumulo/v1/tenants/{}/quota", w.a.id),
            Some(json!({})),
        ),
        (Method::GET, "/cumulo/v1/users".to_string(), None),
        (
            Method::POST,
            "/cumulo/v1/users".to_string(),
            Some(json!({"name": "x", "password": "y"})),
        ),
        (Method::GET, format!("/cumulo/v1/users/{}", w.a.user), None),
        (
            Method::POST,
            format!("/cumulo/v1/users/{}/roles", w.a.user),
            Some(json!({"tenant": w.b.id, "role": "admin"})),
        ),
        (
            Method::POST,
            "/cumulo/v1/flavors".to_string(),
            Some(json!({"name": "x", "vcpus": 1, "memory_mb": 1})),
        ),
        (
            Method::DELETE,
            format!("/cumulo/v1/flavors/{}", w.flavor.id),
            None,
        ),
        (Method::GET, "/cumulo/v1/nodes".to_string(), None),
        (Method::GET, "/cumulo/v1/traces".to_string(), None),
        (Method::DELETE, "/cumulo/v1/events".to_string(), None),
        (
            Method::POST,
            "/cumulo/v1/images".to_string(),
            Some(json!({"name": "p", "kind": "raw", "reference": "/p", "public": true})),
        ),
    ] {
        let (status, _, body) = c.send(method.clone(), &path, Some(&a), body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], 403);
    }
    // Another tenant's tenant record and quota are not found.
    for path in [
        format!("/cumulo/v1/tenants/{}", w.b.id),
        format!("/cumulo/v1/tenants/{}/quota", w.b.id),
    ] {
        let (status, _, body) = c.send(Method::GET, &path, Some(&a), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(!body.to_string().contains(&w.b.name));
    }
    w.stop().await;
}

#[tokio::test]
async fn catalog_workloads_and_instances_with_cross_tenant_attempts() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let b = w.token_b().await;
    let flavor = ok(
        &c,
        Method::POST,
        "/cumulo/v1/flavors",
        &admin,
        Some(json!({"name": "m1.small", "vcpus": 2, "memory_mb": 256, "disk_gb": 2})),
        201,
    )
    .await;
    let flavors = ok(&c, Method::GET, "/cumulo/v1/flavors", &a, None, 200).await;
    assert_eq!(flavors["flavors"].as_array().unwrap().len(), 2);
    ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/flavors/{}", flavor["id"].as_str().unwrap()),
        &a,
        None,
        200,
    )
    .await;

    let image = ok(
        &c,
        Method::POST,
        "/cumulo/v1/images",
        &a,
        Some(json!({"name": "mine", "kind": "qcow2", "reference": "/a.qcow2"})),
        201,
    )
    .await;
    assert_eq!(image["tenant"], w.a.id.to_string());
    let image_id = image["id"].as_str().unwrap().to_string();
    let public = ok(
        &c,
        Method::POST,
        "/cumulo/v1/images",
        &admin,
        Some(json!({"name": "pub", "kind": "raw", "reference": "/p.raw", "public": true})),
        201,
    )
    .await;
    assert_eq!(public["public"], true);
    let images = ok(&c, Method::GET, "/cumulo/v1/images", &b, None, 200).await;
    assert!(!images.to_string().contains("/a.qcow2"));

    let workload = ok(&c, Method::POST, "/cumulo/v1/workloads", &a,
        Some(json!({"name": "web", "flavor": w.flavor.id, "image": image_id, "user_data": "#cloud-config\n"})), 201).await;
    let wid = workload["id"].as_str().unwrap().to_string();
    let updated = ok(
        &c,
        Method::PATCH,
        &format!("/cumulo/v1/workloads/{wid}"),
        &a,
        Some(json!({"user_data": "#cloud-config\nx: 1\n"})),
        200,
    )
    .await;
    assert_eq!(updated["user_data"], "#cloud-config\nx: 1\n");
    assert_eq!(updated["ephemeral"], false, "not ephemeral unless asked");
    let batch = ok(
        &c,
        Method::POST,
        "/cumulo/v1/workloads",
        &a,
        Some(json!({"name": "batch", "flavor": w.flavor.id, "image": image_id, "ephemeral": true})),
        201,
    )
    .await;
    let batch_id = batch["id"].as_str().unwrap();
    let shown = ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/workloads/{batch_id}"),
        &a,
        None,
        200,
    )
    .await;
    assert_eq!(shown["ephemeral"], true);
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/workloads/{batch_id}"),
        &a,
        None,
        204,
    )
    .await;
    // B cannot build on A's private image.
    ok(
        &c,
        Method::POST,
        "/cumulo/v1/workloads",
        &b,
        Some(json!({"name": "steal", "flavor": w.flavor.id, "image": image_id})),
        404,
    )
    .await;

    let launched = ok(
        &c,
        Method::POST,
        "/cumulo/v1/instances",
        &a,
        Some(json!({"workload": wid, "name": "web", "count": 2})),
        202,
    )
    .await;
    let iid = launched["instances"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(launched["instances"][0]["state"], "active");
    let list = ok(
        &c,
        Method::GET,
        "/cumulo/v1/instances?limit=1",
        &a,
        None,
        200,
    )
    .await;
    assert_eq!(list["instances"].as_array().unwrap().len(), 1);
    assert!(list["next"].is_string());
    ok(
        &c,
        Method::POST,
        &format!("/cumulo/v1/instances/{iid}/stop"),
        &a,
        None,
        202,
    )
    .await;
    let shown = ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/instances/{iid}"),
        &a,
        None,
        200,
    )
    .await;
    assert_eq!(shown["state"], "exited");
    ok(
        &c,
        Method::POST,
        &format!("/cumulo/v1/instances/{iid}/stop"),
        &a,
        None,
        409,
    )
    .await;
    ok(
        &c,
        Method::POST,
        &format!("/cumulo/v1/instances/{iid}/start"),
        &a,
        None,
        202,
    )
    .await;
    ok(
        &c,
        Method::POST,
        &format!("/cumulo/v1/instances/{iid}/restart"),
        &a,
        None,
        202,
    )
    .await;

    // Tenant B on every route naming A's objects: not found, never data.
    let routes = [
        (Method::GET, format!("/cumulo/v1/images/{image_id}"), None),
        (
            Method::DELETE,
            format!("/cumulo/v1/images/{image_id}"),
            None,
        ),
        (Method::GET, format!("/cumulo/v1/workloads/{wid}"), None),
        (
            Method::PATCH,
            format!("/cumulo/v1/workloads/{wid}"),
            Some(json!({"name": "x"})),
        ),
        (Method::DELETE, format!("/cumulo/v1/workloads/{wid}"), None),
        (Method::GET, format!("/cumulo/v1/instances/{iid}"), None),
        (Method::DELETE, format!("/cumulo/v1/instances/{iid}"), None),
        (
            Method::POST,
            format!("/cumulo/v1/instances/{iid}/stop"),
            None,
        ),
        (
            Method::POST,
            format!("/cumulo/v1/instances/{iid}/start"),
            None,
        ),
        (
            Method::POST,
            format!("/cumulo/v1/instances/{iid}/restart"),
            None,
        ),
        (Method::GET, format!("/cumulo/v1/tenants/{}", w.a.id), None),
        (
            Method::GET,
            format!("/cumulo/v1/tenants/{}/quota", w.a.id),
            None,
        ),
    ];
    for (method, path, body) in routes {
        let (status, _, reply) = c.send(method.clone(), &path, Some(&b), body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {reply}");
        assert!(!reply.to_string().contains("/a.qcow2"));
    }
    // B launching A's workload, or into A's tenant.
    ok(
        &c,
        Method::POST,
        "/cumulo/v1/instances",
        &b,
        Some(json!({"workload": wid, "name": "x"})),
        404,
    )
    .await;
    ok(
        &c,
        Method::POST,
        "/cumulo/v1/instances",
        &b,
        Some(json!({"workload": wid, "name": "x", "tenant": w.a.id})),
        403,
    )
    .await;
    for path in [
        "/cumulo/v1/instances",
        "/cumulo/v1/workloads",
        "/cumulo/v1/cncis",
        "/cumulo/v1/events",
    ] {
        let reply = ok(&c, Method::GET, path, &b, None, 200).await;
        let items = reply.as_object().unwrap().values().next().unwrap();
        assert_eq!(items, &json!([]), "{path}");
    }
    let shown = ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/instances/{iid}"),
        &a,
        None,
        200,
    )
    .await;
    assert_eq!(shown["state"], "active");
    // Admins see everything.
    let all = ok(&c, Method::GET, "/cumulo/v1/instances", &admin, None, 200).await;
    assert_eq!(all["instances"].as_array().unwrap().len(), 2);

    // A's workload is in use: deleting it is a conflict; instances go first.
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/workloads/{wid}"),
        &a,
        None,
        409,
    )
    .await;
    for i in launched["instances"].as_array().unwrap() {
        ok(
            &c,
            Method::DELETE,
            &format!("/cumulo/v1/instances/{}", i["id"].as_str().unwrap()),
            &a,
            None,
            202,
        )
        .await;
    }
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/workloads/{wid}"),
        &a,
        None,
        204,
    )
    .await;
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/images/{image_id}"),
        &a,
        None,
        204,
    )
    .await;
    // Public images are the admins' to delete.
    ok(
        &c,
        Method::DELETE,
        &format!("/cumulo/v1/images/{}", public["id"].as_str().unwrap()),
        &a,
        None,
        403,
    )
    .await;
    w.stop().await;
}

#[tokio::test]
async fn native_quota_is_enforced() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    ok(
        &c,
        Method::PUT,
        &format!("/cumulo/v1/tenants/{}/quota", w.a.id),
        &admin,
        Some(json!({"instances": 2})),
        200,
    )
    .await;
    let workload = ok(
        &c,
        Method::POST,
        "/cumulo/v1/workloads",
        &a,
        Some(json!({"name": "w", "flavor": w.flavor.id, "image": w.image.id})),
        201,
    )
    .await;
    let wid = workload["id"].as_str().unwrap();
    let (status, _, body) = c
        .send(
            Method::POST,
            "/cumulo/v1/instances",
            Some(&a),
            Some(json!({"workload": wid, "name": "x", "count": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["error"]["message"].as_str().unwrap().contains("quota"));
    ok(
        &c,
        Method::POST,
        "/cumulo/v1/instances",
        &a,
        Some(json!({"workload": wid, "name": "x", "count": 2})),
        202,
    )
    .await;
    let quota = ok(
        &c,
        Method::GET,
        &format!("/cumulo/v1/tenants/{}/quota", w.a.id),
        &a,
        None,
        200,
    )
    .await;
    assert_eq!(quota["usage"]["instances"], 2);
    w.stop().await;
}

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

/// An instance in `error` shows its fault (reason, message, time) in the native view and,
/// in Nova's shape, in Compute's (`details` for admins only); the OpenAPI document describes
/// every key; starting it again clears the fault.
#[tokio::test]
async fn an_instance_in_error_shows_its_fault() {
    use std::time::{Duration, UNIX_EPOCH};
    use store::Fault;

    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let failed = w.server_a(&a, "broken").await;
    let fine = w.server_a(&a, "fine").await;
    let message = "QEMU could not open /x/seed.iso: Permission denied";
    w.cluster
        .fail(
            failed.parse().unwrap(),
            Fault {
                reason: "launch_failure".into(),
                message: message.into(),
                created: UNIX_EPOCH + Duration::from_millis(1_764_602_611_908),
            },
        )
        .unwrap();

    let native = |id: &str| format!("/cumulo/v1/instances/{id}");
    let shown = ok(&c, Method::GET, &native(&failed), &a, None, 200).await;
    assert_eq!(shown["state"], "error");
    assert_eq!(
        shown["fault"],
        json!({"reason": "launch_failure", "message": message, "created": "2025-12-01T15:23:31Z"})
    );
    let other = ok(&c, Method::GET, &native(&fine), &a, None, 200).await;
    assert_eq!(other["fault"], Value::Null);

    // The document knows every key of the view, the fault's included.
    let (_, _, doc) = c.send(Method::GET, "/openapi.json", None, None).await;
    let schema = &doc["components"]["schemas"]["Instance"];
    for key in shown.as_object().unwrap().keys() {
        assert!(schema["properties"][key].is_object(), "{key} undocumented");
    }
    let fault = &schema["properties"]["fault"];
    assert_eq!(fault["nullable"], true);
    for key in shown["fault"].as_object().unwrap().keys() {
        assert!(
            fault["properties"][key].is_object(),
            "fault.{key} undocumented"
        );
    }

    // Compute: Nova's fault, on ERROR only; details for admins.
    let server = |id: &str| format!("/compute/v2.1/servers/{id}");
    let (_, _, member) = c.send(Method::GET, &server(&failed), Some(&a), None).await;
    assert_eq!(member["server"]["status"], "ERROR");
    assert_eq!(
        member["server"]["fault"],
        json!({"code": 500, "message": message, "created": "2025-12-01T15:23:31Z"})
    );
    let (_, _, by_admin) = c
        .send(Method::GET, &server(&failed), Some(&admin), None)
        .await;
    assert_eq!(by_admin["server"]["fault"]["details"], "launch_failure");
    let (_, _, active) = c.send(Method::GET, &server(&fine), Some(&a), None).await;
    assert!(active["server"].get("fault").is_none(), "{active}");
    let (_, _, detail) = c
        .send(Method::GET, "/compute/v2.1/servers/detail", Some(&a), None)
        .await;
    let servers = detail["servers"].as_array().unwrap();
    let with_fault: Vec<&Value> = servers
        .iter()
        .filter(|s| s.get("fault").is_some())
        .collect();
    assert_eq!(with_fault.len(), 1, "{detail}");
    assert_eq!(with_fault[0]["id"], failed.as_str());
    assert_eq!(with_fault[0]["fault"]["message"], message);

    // Started again: no fault any more.
    ok(
        &c,
        Method::POST,
        &format!("{}/start", native(&failed)),
        &a,
        None,
        202,
    )
    .await;
    let again = ok(&c, Method::GET, &native(&failed), &a, None, 200).await;
    assert_eq!(again["state"], "active");
    assert_eq!(again["fault"], Value::Null);
    w.stop().await;
}
