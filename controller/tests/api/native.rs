//! The native API: every resource, cross-tenant attempts on every tenant-owned route, admin-only
//! routes, bad input.

use std::net::{IpAddr, Ipv4Addr};
use std::time::SystemTime;

use axum::http::{Method, StatusCode};
use controller::cluster::{Node, NodeKinds, NodeStatus, Trace};
use serde_json::{Value, json};
use store::{EventKind, NewEvent};

use crate::support::{Client, World, login_body};

mod catalog;
mod cluster;
mod joins;

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

/// A connected compute and network node of 4096 MiB, 10,000 MB of disk and 4 vCPUs that has
/// sent no STATS yet.
pub(crate) fn node() -> Node {
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
        zone: ssntp::payload::DEFAULT_ZONE.into(),
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
async fn a_new_tenant_gets_the_default_quota_unless_told_otherwise() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let limits = |t: &Value| {
        let q = &t["quota"];
        (
            q["instances"].clone(),
            q["vcpus"].clone(),
            q["memory_mb"].clone(),
        )
    };
    let create = |body: Value| {
        ok(
            &c,
            Method::POST,
            "/cumulo/v1/tenants",
            &admin,
            Some(body),
            201,
        )
    };
    // No quota: the controller's default (Nova's), never unlimited.
    let plain = create(json!({"name": "plain"})).await;
    assert_eq!(limits(&plain), (json!(10), json!(20), json!(51_200)));
    // A limit left out is the default's; null is unlimited, asked for explicitly.
    let partial =
        create(json!({"name": "partial", "quota": {"instances": 3, "memory_mb": null}})).await;
    assert_eq!(limits(&partial), (json!(3), json!(20), Value::Null));
    let open = create(json!({"name": "open",
        "quota": {"instances": null, "vcpus": null, "memory_mb": null}}))
    .await;
    assert_eq!(limits(&open), (Value::Null, Value::Null, Value::Null));
    // A PUT changes what it names and keeps the rest.
    let id = partial["id"].as_str().unwrap();
    let set = ok(
        &c,
        Method::PUT,
        &format!("/cumulo/v1/tenants/{id}/quota"),
        &admin,
        Some(json!({"vcpus": 4})),
        200,
    )
    .await;
    assert_eq!(
        (
            &set["limits"]["instances"],
            &set["limits"]["vcpus"],
            &set["limits"]["memory_mb"]
        ),
        (&json!(3), &json!(4), &Value::Null)
    );
    // Bad limits are a 400, not a default.
    for bad in [
        json!({"instances": -1}),
        json!({"instances": "many"}),
        json!({"disk": 5}),
    ] {
        let (status, _, _) = c
            .send(
                Method::POST,
                "/cumulo/v1/tenants",
                Some(&admin),
                Some(json!({"name": "bad", "quota": bad})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
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
        Some(json!({"name": "gamma", "quota": {"instances": 2, "vcpus": null}})),
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
    // OpenAPI 3.1: `null` or a reference to the fault's own schema.
    let fault = &schema["properties"]["fault"]["oneOf"];
    assert!(
        fault.as_array().unwrap().contains(&json!({"type": "null"})),
        "{fault}"
    );
    let fault = &doc["components"]["schemas"]["Fault"];
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

#[tokio::test]
async fn instance_counts_and_recent_events_are_scoped() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let b = w.token_b().await;
    let first = w.server_a(&a, "one").await;
    w.server_a(&a, "two").await;
    w.cluster
        .set_state(first.parse().unwrap(), store::InstanceState::Exited)
        .unwrap();

    let path = "/cumulo/v1/instance-counts";
    let mine = ok(&c, Method::GET, path, &a, None, 200).await;
    assert_eq!(mine["total"], 2, "{mine}");
    assert_eq!(mine["counts"]["exited"], 1, "{mine}");
    let theirs = ok(&c, Method::GET, path, &b, None, 200).await;
    assert_eq!(theirs, json!({"counts": {}, "total": 0}));
    assert_eq!(
        ok(&c, Method::GET, path, &admin, None, 200).await["total"],
        2
    );

    for i in 0..5 {
        w.store
            .append_event(NewEvent {
                tenant: Some(w.a.id),
                kind: EventKind::Info,
                message: format!("a {i}"),
            })
            .unwrap();
        w.store
            .append_event(NewEvent {
                tenant: Some(w.b.id),
                kind: EventKind::Warning,
                message: format!("b {i}"),
            })
            .unwrap();
    }
    let recent = ok(&c, Method::GET, "/cumulo/v1/events?last=2", &a, None, 200).await;
    let messages: Vec<&str> = recent["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(messages, ["a 3", "a 4"], "the newest two, oldest first");
    let all = ok(
        &c,
        Method::GET,
        "/cumulo/v1/events?last=1",
        &admin,
        None,
        200,
    )
    .await;
    assert_eq!(all["events"][0]["message"], "b 4");
    for bad in ["last=0", "last=1001", "last=2&after=1", "last=2&limit=3"] {
        ok(
            &c,
            Method::GET,
            &format!("/cumulo/v1/events?{bad}"),
            &a,
            None,
            400,
        )
        .await;
    }
    w.stop().await;
}
