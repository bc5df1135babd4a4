//! `/openapi.json` describes routes that exist (every path and method answers something other
//! than "no such route" or 405) and every native route; `/openapi-openstack.json` describes
//! routes that exist, with the authentication they ask for; `/metrics` (admins only) counts requests by route and status class.

use axum::http::{Method, StatusCode};

use crate::support::World;

#[tokio::test]
async fn every_documented_route_exists() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let (status, _, doc) = c.send(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], w.api.url);
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 25, "{}", paths.len());
    for (path, item) in paths {
        let concrete = path
            .replace("{role}", "member")
            .replace("{id}", &uuid::Uuid::new_v4().to_string())
            .replace("{tenant}", &uuid::Uuid::new_v4().to_string());
        for (method, op) in item.as_object().unwrap() {
            assert!(op["responses"].is_object());
            let method: Method = method.to_uppercase().parse().unwrap();
            let body = op.get("requestBody").map(|_| serde_json::json!({}));
            let (status, _, reply) = c.send(method.clone(), &concrete, Some(&admin), body).await;
            assert_ne!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {concrete}"
            );
            assert!(
                !reply.to_string().contains("no resource at"),
                "{method} {concrete} is documented but not routed"
            );
            assert!(status.as_u16() < 500, "{method} {concrete}: {reply}");
        }
    }
    w.stop().await;
}

/// Every route of `controller/src/api/native/mod.rs` (method, path under `/cumulo/v1`): a route
/// added there and not here fails `every_documented_route_exists` once documented, and one
/// added here and not documented fails below.
const NATIVE_ROUTES: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/tenants"),
    ("post", "/tenants"),
    ("get", "/tenants/{id}"),
    ("patch", "/tenants/{id}"),
    ("delete", "/tenants/{id}"),
    ("get", "/tenants/{id}/quota"),
    ("put", "/tenants/{id}/quota"),
    ("get", "/users"),
    ("post", "/users"),
    ("get", "/users/{id}"),
    ("patch", "/users/{id}"),
    ("delete", "/users/{id}"),
    ("get", "/users/{id}/roles"),
    ("post", "/users/{id}/roles"),
    ("delete", "/users/{id}/roles/{tenant}/{role}"),
    ("get", "/flavors"),
    ("post", "/flavors"),
    ("get", "/flavors/{id}"),
    ("delete", "/flavors/{id}"),
    ("get", "/images"),
    ("post", "/images"),
    ("get", "/images/{id}"),
    ("delete", "/images/{id}"),
    ("get", "/workloads"),
    ("post", "/workloads"),
    ("get", "/workloads/{id}"),
    ("patch", "/workloads/{id}"),
    ("delete", "/workloads/{id}"),
    ("get", "/instances"),
    ("post", "/instances"),
    ("get", "/instances/{id}"),
    ("delete", "/instances/{id}"),
    ("post", "/instances/{id}/stop"),
    ("post", "/instances/{id}/start"),
    ("post", "/instances/{id}/restart"),
    ("post", "/instances/{id}/reboot-hard"),
    ("post", "/instances/{id}/pause"),
    ("post", "/instances/{id}/unpause"),
    ("post", "/instances/{id}/suspend"),
    ("post", "/instances/{id}/resume"),
    ("post", "/instances/{id}/rebuild"),
    ("post", "/instances/{id}/resize"),
    ("post", "/instances/{id}/confirm-resize"),
    ("post", "/instances/{id}/revert-resize"),
    ("get", "/instances/{id}/actions"),
    ("get", "/instances/{id}/console"),
    ("get", "/nodes"),
    ("post", "/nodes"),
    ("get", "/nodes/{id}"),
    ("delete", "/nodes/{id}"),
    ("post", "/nodes/{id}/credentials"),
    ("post", "/nodes/{id}/evacuate"),
    ("post", "/nodes/{id}/restore"),
    ("get", "/cncis"),
    ("get", "/cncis/{id}"),
    ("get", "/events"),
    ("delete", "/events"),
    ("get", "/traces"),
];

#[tokio::test]
async fn every_native_route_is_documented() {
    let w = World::start().await;
    let c = w.client();
    let (status, _, doc) = c.send(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.push((method.clone(), path.clone()));
        }
    }
    for (method, path) in NATIVE_ROUTES {
        let path = format!("/cumulo/v1{path}");
        assert!(
            documented.contains(&(method.to_string(), path.clone())),
            "{method} {path} is routed but not documented"
        );
    }
    // Nothing but the native routes is documented, each once.
    assert_eq!(documented.len(), NATIVE_ROUTES.len(), "{documented:?}");
    w.stop().await;
}

/// `/openapi-openstack.json` is written from the route tables the routers are built from
/// (`controller/src/api/table.rs`), so it lists every OpenStack route and no other; this
/// checks, against the live router, that each operation it lists is served (neither "no
/// resource at" nor 405), never fails with a 5xx when probed with made-up ids, and asks for a
/// token exactly when the document says so.
#[tokio::test]
async fn every_openstack_operation_is_served_as_documented() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let (status, _, doc) = c
        .send(Method::GET, "/openapi-openstack.json", None, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], w.api.url);
    let paths = doc["paths"].as_object().unwrap();
    let mut count = 0;
    for (path, item) in paths {
        let mut concrete = path.clone();
        while let Some(start) = concrete.find('{') {
            let end = concrete[start..].find('}').unwrap() + start;
            concrete.replace_range(start..=end, &uuid::Uuid::new_v4().to_string());
        }
        for (method, op) in item.as_object().unwrap() {
            count += 1;
            let verb: Method = method.to_uppercase().parse().unwrap();
            let body = op.get("requestBody").map(|_| serde_json::json!({}));
            let (status, _, reply) = c
                .send(verb.clone(), &concrete, Some(&admin), body.clone())
                .await;
            let what = format!("{method} {path} ({concrete})");
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{what}");
            assert!(
                !reply.to_string().contains("no resource at"),
                "{what} is documented but not routed"
            );
            assert!(status.as_u16() < 500, "{what}: {status} {reply}");
            let public = op.get("security") == Some(&serde_json::json!([{}]));
            let (status, _, reply) = c.send(verb, &concrete, None, body).await;
            if public {
                assert_ne!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{what} is public: {reply}"
                );
            } else {
                assert_eq!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{what} needs a token: {reply}"
                );
            }
        }
    }
    assert!(count >= 150, "{count}");
    w.stop().await;
}

#[tokio::test]
async fn metrics_count_requests() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    w.server_a(&a, "m").await;
    c.send(Method::GET, "/compute/v2.1/servers/nope", Some(&a), None)
        .await;
    // Neither an anonymous caller nor a member reads the figures.
    let (status, _, _) = c.send(Method::GET, "/metrics", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = c.send(Method::GET, "/metrics", Some(&a), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let admin = w.admin_token().await;
    let (status, headers, text) = c.send(Method::GET, "/metrics", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = text.as_str().unwrap();
    assert!(
        text.contains(
            "cumulo_api_requests_total{method=\"POST\",route=\"/v3/auth/tokens\",status=\"2xx\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains(
        "cumulo_api_requests_total{method=\"GET\",route=\"/compute/v2.1/servers/{id}\",status=\"4xx\"} 1"
    ), "{text}");
    assert!(text.contains("cumulo_api_request_seconds_count{route=\"/compute/v2.1/servers\"} 1"));
    assert!(
        text.contains(
            "cumulo_api_requests_total{method=\"GET\",route=\"/metrics\",status=\"4xx\"} 2"
        ),
        "{text}"
    );
    assert!(
        text.contains("cumulo_instances{state=\"active\"} 1"),
        "{text}"
    );
    w.stop().await;
}
