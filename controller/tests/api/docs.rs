//! `/openapi.json` describes routes that exist (every path and method answers something other
//! than "no such route" or 405) and every native route; `/openapi-openstack.json` describes
//! routes that exist, with the authentication they ask for, and docs/api.md's tables list
//! exactly its routes; `/metrics` (admins only) counts requests by route and status class.

use axum::http::{Method, StatusCode};
use serde_json::Value;

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

/// `status` is one `op` of the OpenStack document lists (else a line saying so goes to
/// `wrong`), and an error's body is in the shape of the schema the document gives it.
fn answers_as_documented(
    doc: &Value,
    op: &Value,
    (status, reply): (StatusCode, &Value),
    what: &str,
    wrong: &mut Vec<String>,
) {
    let Some(response) = op["responses"].get(status.as_str()) else {
        wrong.push(format!("{what}: {status} is not documented: {reply}"));
        return;
    };
    let Some(target) = response.pointer("/content/application~1json/schema/$ref") else {
        return;
    };
    if reply.is_null() {
        return; // HEAD: no body
    }
    let name = target
        .as_str()
        .unwrap()
        .trim_start_matches("#/components/schemas/");
    let schema = &doc["components"]["schemas"][name];
    let code = status.as_u16();
    let fault = match name {
        "KeystoneError" => &reply["error"],
        "NeutronError" => &reply["NeutronError"],
        _ => {
            let keys: Vec<&String> = reply.as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), 1, "{what}: {reply}");
            let names = schema["propertyNames"]["enum"].as_array().unwrap();
            assert!(
                names.contains(&Value::from(keys[0].as_str())),
                "{what}: {reply}"
            );
            &reply[keys[0].as_str()]
        }
    };
    assert!(fault["message"].is_string(), "{what}: {name}: {reply}");
    if name != "NeutronError" {
        assert_eq!(fault["code"], code, "{what}: {reply}");
    }
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
    ("get", "/instance-counts"),
    ("get", "/nodes/{id}/history"),
    ("post", "/nodes/{id}/revoke"),
    ("get", "/join-tokens"),
    ("post", "/join-tokens"),
    ("delete", "/join-tokens/{id}"),
    ("post", "/join"),
    ("get", "/join/ca"),
    ("get", "/joined-nodes"),
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
/// resource at" nor 405), never fails with a 5xx when probed with made-up ids, answers a status
/// the document lists for it with an error body of the shape it gives, and asks for a token
/// exactly when the document says so (a public GET, a version document, succeeds).
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
    let mut wrong = Vec::new();
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
            answers_as_documented(&doc, op, (status, &reply), &what, &mut wrong);
            let public = op.get("security") == Some(&serde_json::json!([{}]));
            let (status, _, reply) = c.send(verb.clone(), &concrete, None, body).await;
            answers_as_documented(&doc, op, (status, &reply), &what, &mut wrong);
            if public && verb == Method::GET {
                assert!(status.as_u16() < 400, "{what}: {status} {reply}");
            }
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
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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

/// With the real engine, `/metrics` also says how far behind its schedulers' frames the
/// controller was at its last sweep.
#[tokio::test]
async fn metrics_say_how_far_behind_the_frames_the_controller_is() {
    let rig = crate::engine_rig::EngineRig::start().await;
    let now = std::time::SystemTime::now();
    rig.engine
        .sweep_heard(now, now - std::time::Duration::from_secs(7))
        .unwrap();
    let admin = rig.admin_token().await;
    let (status, _, text) = rig
        .client()
        .send(Method::GET, "/metrics", Some(&admin), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let text = text.as_str().unwrap();
    let behind: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("cumulo_controller_frames_behind_seconds "))
        .unwrap_or_else(|| panic!("no frames_behind gauge in {text}"))
        .parse()
        .unwrap();
    assert_eq!(behind, 7.0);
    rig.stop().await;
}

/// The route families' sections of docs/api.md: (heading, the prefix a path already holds when
/// written whole, the base a shorter path is under).
const FAMILIES: [(&str, &str, &str); 5] = [
    ("## Identity v3", "/", ""),
    ("## Compute v2.1", "/compute", "/compute/v2.1"),
    ("## Image v2", "/image", "/image/v2"),
    ("## Networking v2.0", "/network", "/network/v2.0"),
    ("## Block Storage v3", "/volume", "/volume/v3/{project_id}"),
];

const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// The routes (method, path) the first column of a table row of docs/api.md names, in the
/// family whose `prefix` and `base` are given. The column's `code` spans are read in order:
/// `GET` alone is a method of the next path, `GET /path` a method and a path, `/path` a path
/// with the methods of the one before it; anything else (bodies, flags) is not a route. A path
/// whose first segment is not the family's prefix is under its base; `[...]` and `?...` are left
/// off.
fn routes_of_row(cell: &str, prefix: &str, base: &str) -> Result<Vec<(String, String)>, String> {
    let mut found = Vec::new();
    let mut pending: Vec<&str> = Vec::new();
    let mut last: Vec<&str> = Vec::new();
    for (i, span) in cell.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let span = span.trim();
        let (methods, path) = if METHODS.contains(&span) {
            pending.push(span);
            continue;
        } else if let Some((method, path)) = span
            .split_once(' ')
            .filter(|(m, p)| METHODS.contains(m) && p.starts_with('/'))
        {
            pending.push(method);
            last = std::mem::take(&mut pending);
            (last.clone(), path)
        } else if span.starts_with('/') {
            if last.is_empty() || !pending.is_empty() {
                return Err(format!("`{span}` has no method in `{cell}`"));
            }
            (last.clone(), span)
        } else {
            continue;
        };
        let path = path.split(['[', '?']).next().unwrap();
        let whole = path == prefix || path.starts_with(&format!("{prefix}/"));
        let path = if base.is_empty() || whole {
            path.to_string()
        } else {
            format!("{base}{path}")
        };
        for method in methods {
            found.push((method.to_string(), path.clone()));
        }
    }
    if !pending.is_empty() {
        return Err(format!("{pending:?} have no path in `{cell}`"));
    }
    Ok(found)
}

/// Whether a route written in the docs is the document's `route`: the same method, and the
/// same path segment by segment, a parameter matching a parameter or a value of one (a
/// trailing slash aside).
fn same_route(written: &(String, String), route: &(String, String)) -> bool {
    let segments = |path: &str| -> Vec<String> {
        let path = if path.len() > 1 {
            path.trim_end_matches('/')
        } else {
            path
        };
        path.split('/').map(str::to_string).collect()
    };
    let (a, b) = (segments(&written.1), segments(&route.1));
    written.0.eq_ignore_ascii_case(&route.0)
        && a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(a, b)| a == b || (b.starts_with('{') && !a.is_empty()))
}

/// docs/api.md's tables of the OpenStack families name every route of
/// `/openapi-openstack.json` (hence of the routers), and no route that is not one.
#[tokio::test]
async fn the_openstack_tables_of_the_docs_list_every_route() {
    let w = World::start().await;
    let (status, _, doc) = w
        .client()
        .send(Method::GET, "/openapi-openstack.json", None, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    w.stop().await;
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase(), path.clone()));
        }
    }
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md")).unwrap();
    let mut written = Vec::new();
    let mut family = None;
    for line in text.lines() {
        if line.starts_with("## ") {
            family = FAMILIES
                .iter()
                .find(|(heading, _, _)| line.starts_with(&format!("{heading} (")));
        }
        let Some((_, prefix, base)) = family else {
            continue;
        };
        if let Some(row) = line.strip_prefix("| `") {
            let cell = format!("`{}", row.split(" | ").next().unwrap());
            written.extend(routes_of_row(&cell, prefix, base).unwrap());
        }
    }
    let stale: Vec<_> = written
        .iter()
        .filter(|w| !routes.iter().any(|r| same_route(w, r)))
        .collect();
    assert!(stale.is_empty(), "in docs/api.md, not routed: {stale:?}");
    let missing: Vec<_> = routes
        .iter()
        .filter(|r| !written.iter().any(|w| same_route(w, r)))
        .collect();
    assert!(
        missing.is_empty(),
        "routed, not in docs/api.md's tables: {missing:?}"
    );
}

#[test]
fn rows_of_the_docs_are_read_as_routes() {
    let row =
        "`GET`, `POST`, `PUT /servers/{id}/metadata`; `DELETE /compute/v2.1/x`, `/y` `{\"a\": 1}`";
    let got = routes_of_row(row, "/compute", "/compute/v2.1").unwrap();
    let want = [
        ("GET", "/compute/v2.1/servers/{id}/metadata"),
        ("POST", "/compute/v2.1/servers/{id}/metadata"),
        ("PUT", "/compute/v2.1/servers/{id}/metadata"),
        ("DELETE", "/compute/v2.1/x"),
        ("DELETE", "/compute/v2.1/y"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(got, want);
    assert!(routes_of_row("`GET /a`, `PUT`", "/", "").is_err());
    let route = ("GET".to_string(), "/os-services/{action}".to_string());
    assert!(same_route(
        &("GET".into(), "/os-services/enable".into()),
        &route
    ));
    assert!(same_route(
        &("GET".into(), "/v3/".into()),
        &("GET".into(), "/v3".into())
    ));
    assert!(!same_route(
        &("PUT".into(), "/os-services/enable".into()),
        &route
    ));
}
