//! Flavor extra specs over HTTP (Nova's `os-extra_specs`): set, read, replace one, delete one,
//! Nova's validation and errors, admins only for writes.

use axum::http::{Method, StatusCode};
use serde_json::json;
use store::Flavor;

use crate::support::World;

/// Extra specs are set (merged), read whole and one by one, replaced one by one (the key in the
/// body must be the path's) and deleted one by one; the flavor's size does not change.
#[tokio::test]
async fn extra_specs_are_set_read_replaced_and_deleted() {
    let w = World::start().await;
    let c = w.client();
    let (admin, a) = (w.admin_token().await, w.token_a().await);
    let specs = format!("/compute/v2.1/flavors/{}/os-extra_specs", w.flavor.id);
    let (status, body) = c.call(Method::GET, &specs, &a, None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"extra_specs": {}})));

    // Set: the answer is what was sent (numbers too); reads give text.
    let sent = json!({"extra_specs": {"hw:cpu_policy": "dedicated", "quota:cpu_shares": 1024}});
    let (status, body) = c
        .call(Method::POST, &specs, &admin, Some(sent.clone()))
        .await;
    assert_eq!((status, body), (StatusCode::OK, sent));
    let (status, body) = c
        .call(
            Method::POST,
            &specs,
            &admin,
            Some(json!({"extra_specs": {"a b": "", "quota:cpu_shares": "2048"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let all = json!({"extra_specs": {"a b": "", "hw:cpu_policy": "dedicated",
        "quota:cpu_shares": "2048"}});
    let (_, body) = c.call(Method::GET, &specs, &a, None).await;
    assert_eq!(body, all);

    // One key.
    let one = format!("{specs}/hw:cpu_policy");
    let (status, body) = c.call(Method::GET, &one, &a, None).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"hw:cpu_policy": "dedicated"}))
    );
    let (status, body) = c
        .call(
            Method::PUT,
            &one,
            &admin,
            Some(json!({"hw:cpu_policy": "shared"})),
        )
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"hw:cpu_policy": "shared"}))
    );
    let (status, body) = c
        .call(Method::PUT, &one, &admin, Some(json!({"other": "x"})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["badRequest"]["message"],
        "Request body and URI mismatch"
    );
    for bad in [
        json!({}),
        json!({"hw:cpu_policy": "shared", "other": "x"}),
        json!({"hw:cpu_policy": null}),
        json!("shared"),
    ] {
        let (status, body) = c.call(Method::PUT, &one, &admin, Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body) = c.call(Method::DELETE, &one, &admin, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = c.call(Method::GET, &one, &a, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let gone = format!(
        "Flavor {} has no extra specs with key hw:cpu_policy.",
        w.flavor.id
    );
    assert_eq!(body["itemNotFound"]["message"], gone);
    let (status, body) = c.call(Method::DELETE, &one, &admin, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["itemNotFound"]["message"], gone);
    let (_, body) = c.call(Method::GET, &specs, &a, None).await;
    assert_eq!(
        body,
        json!({"extra_specs": {"a b": "", "quota:cpu_shares": "2048"}})
    );
    // A key with a space, through the path.
    let (status, body) = c
        .call(Method::GET, &format!("{specs}/a%20b"), &a, None)
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"a b": ""})));
    let (_, body) = c
        .call(
            Method::GET,
            &format!("/compute/v2.1/flavors/{}", w.flavor.id),
            &a,
            None,
        )
        .await;
    assert_eq!(body["flavor"]["ram"], w.flavor.memory_mb);
    w.stop().await;
}

/// Writes are an admin's (403 `forbidden`); bad keys, values, bodies and too many specs are 400s
/// that change nothing; an unknown flavor is Nova's 404.
#[tokio::test]
async fn extra_specs_are_checked_as_nova_checks_them() {
    let w = World::start().await;
    let c = w.client();
    let (admin, a) = (w.admin_token().await, w.token_a().await);
    let specs = format!("/compute/v2.1/flavors/{}/os-extra_specs", w.flavor.id);
    let body = json!({"extra_specs": {"k": "v"}});
    for (method, path, body) in [
        (Method::POST, specs.clone(), Some(body.clone())),
        (Method::PUT, format!("{specs}/k"), Some(json!({"k": "v"}))),
        (Method::DELETE, format!("{specs}/k"), None),
    ] {
        let (status, answer) = c.call(method.clone(), &path, &a, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        assert!(answer["forbidden"].is_object(), "{answer}");
    }
    for bad in [
        json!({}),
        json!({"extra_specs": {"k": "v"}, "more": 1}),
        json!({"extra_specs": ["k"]}),
        json!({"extra_specs": {"bad/key": "v"}}),
        json!({"extra_specs": {"": "v"}}),
        json!({"extra_specs": {"k": "v".repeat(256)}}),
        json!({"extra_specs": {"k".repeat(256): "v"}}),
        json!({"extra_specs": {"k": true}}),
        json!({"extra_specs": {"k": null}}),
    ] {
        let (status, answer) = c
            .call(Method::POST, &specs, &admin, Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {answer}");
    }
    // At most MAX_EXTRA_SPECS a flavor: one more is refused whole.
    let full: serde_json::Map<String, serde_json::Value> = (0..Flavor::MAX_EXTRA_SPECS)
        .map(|i| (format!("k{i}"), json!("v")))
        .collect();
    let (status, _) = c
        .call(
            Method::POST,
            &specs,
            &admin,
            Some(json!({"extra_specs": full})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = c
        .call(
            Method::POST,
            &specs,
            &admin,
            Some(json!({"extra_specs": {"one-more": "v", "k0": "changed"}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (_, now) = c.call(Method::GET, &specs, &a, None).await;
    assert_eq!(
        now["extra_specs"].as_object().unwrap().len(),
        Flavor::MAX_EXTRA_SPECS
    );
    assert_eq!(now["extra_specs"]["k0"], "v");
    // An unknown flavor.
    let unknown = uuid::Uuid::new_v4();
    for (method, path) in [
        (
            Method::GET,
            format!("/compute/v2.1/flavors/{unknown}/os-extra_specs"),
        ),
        (
            Method::POST,
            format!("/compute/v2.1/flavors/{unknown}/os-extra_specs"),
        ),
        (
            Method::GET,
            format!("/compute/v2.1/flavors/{unknown}/os-extra_specs/k"),
        ),
        (
            Method::DELETE,
            format!("/compute/v2.1/flavors/{unknown}/os-extra_specs/k"),
        ),
        (
            Method::GET,
            "/compute/v2.1/flavors/m1.nope/os-extra_specs".to_string(),
        ),
    ] {
        let (status, answer) = c
            .call(method.clone(), &path, &admin, Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {answer}");
        assert!(
            answer["itemNotFound"]["message"]
                .as_str()
                .unwrap()
                .ends_with("could not be found."),
            "{answer}"
        );
    }
    w.stop().await;
}
