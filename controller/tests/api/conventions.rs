//! What every answer carries: a request id (`X-OpenStack-Request-Id`, and on Compute also
//! `X-Compute-Request-Id`), errors and 404s included, a new one for every request.

use axum::http::{HeaderMap, Method, StatusCode};

use crate::support::World;

fn request_id(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test]
async fn every_answer_carries_a_request_id() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let mut seen = std::collections::HashSet::new();
    for (method, path, token, want) in [
        (Method::GET, "/v3", None, StatusCode::OK),
        (Method::GET, "/v3/projects", None, StatusCode::UNAUTHORIZED),
        (
            Method::GET,
            "/compute/v2.1/flavors",
            Some(&a),
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/compute/v2.1/servers/6c1b0e0e-0000-4000-8000-000000000000",
            Some(&a),
            StatusCode::NOT_FOUND,
        ),
        (Method::GET, "/image/v2/images", Some(&a), StatusCode::OK),
        (
            Method::GET,
            "/network/v2.0/networks",
            Some(&a),
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/no/such/route",
            Some(&a),
            StatusCode::NOT_FOUND,
        ),
        (Method::DELETE, "/v3", None, StatusCode::METHOD_NOT_ALLOWED),
    ] {
        let (status, headers, body) = c
            .send(method.clone(), path, token.map(|t| t.as_str()), None)
            .await;
        assert_eq!(status, want, "{method} {path}: {body}");
        let id = request_id(&headers, "x-openstack-request-id")
            .unwrap_or_else(|| panic!("{method} {path}: no X-OpenStack-Request-Id in {headers:?}"));
        let uuid = id.strip_prefix("req-").unwrap_or_else(|| panic!("{id}"));
        assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{id}");
        assert!(seen.insert(id.clone()), "{id} given twice");
        let compute = request_id(&headers, "x-compute-request-id");
        if path.starts_with("/compute") {
            assert_eq!(compute.as_deref(), Some(id.as_str()), "{path}");
        } else {
            assert_eq!(compute, None, "{path}");
        }
    }
    w.stop().await;
}

/// An instance action's `request_id` is the id of the request that started it (Nova's rule),
/// for a create and for an action alike.
#[tokio::test]
async fn instance_actions_take_their_requests_id() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let (status, headers, made) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(serde_json::json!({"server": {"name": "s", "flavorRef": w.flavor.id, "imageRef": w.image.id}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{made}");
    let created = request_id(&headers, "x-openstack-request-id").unwrap();
    let server = made["server"]["id"].as_str().unwrap().to_string();
    let (status, headers, body) = c
        .send(
            Method::POST,
            &format!("/compute/v2.1/servers/{server}/action"),
            Some(&a),
            Some(serde_json::json!({"os-stop": null})),
        )
        .await;
    let stopped = request_id(&headers, "x-openstack-request-id").unwrap();
    let (_, _, listed) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1/servers/{server}/os-instance-actions"),
            Some(&a),
            None,
        )
        .await;
    let ids: Vec<(String, String)> = listed["instanceActions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap().to_string(),
                a["request_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(ids.contains(&("create".to_string(), created)), "{ids:?}");
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(ids.contains(&("stop".to_string(), stopped)), "{ids:?}");
    w.stop().await;
}
