//! `os-quota-sets`: a project's limits, with usage, the defaults, an admin's change; who may
//! read and change them; bad changes.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::World;

async fn quota_get(w: &World, token: &str, path: &str) -> (StatusCode, Value) {
    let (status, _, body) = w
        .client()
        .send(
            Method::GET,
            &format!("/compute/v2.1/os-quota-sets/{path}"),
            Some(token),
            None,
        )
        .await;
    (status, body)
}

async fn quota_put(w: &World, token: &str, project: &str, set: Value) -> (StatusCode, Value) {
    let (status, _, body) = w
        .client()
        .send(
            Method::PUT,
            &format!("/compute/v2.1/os-quota-sets/{project}"),
            Some(token),
            Some(json!({"quota_set": set})),
        )
        .await;
    (status, body)
}

#[tokio::test]
async fn a_project_reads_its_quota_with_usage_and_an_admin_changes_it() {
    let w = World::start().await;
    let a = w.token_a().await;
    let b = w.token_b().await;
    let admin = w.admin_token().await;
    let pa = w.a.id.to_string();

    let (status, shown) = quota_get(&w, &a, &pa).await;
    assert_eq!(status, StatusCode::OK, "{shown}");
    let set = &shown["quota_set"];
    assert_eq!(set["id"], pa.as_str());
    // Unlimited instances, cores and RAM (the test tenant's quota); Neutron's defaults.
    assert_eq!(set["instances"], -1);
    assert_eq!(set["cores"], -1);
    assert_eq!(set["ram"], -1);
    assert_eq!(set["floating_ips"], 50);
    assert_eq!(set["security_groups"], 10);
    assert_eq!(set["security_group_rules"], 100);
    assert_eq!(set["key_pairs"], 100);
    assert_eq!(set["metadata_items"], 128);

    // Another project's: 403; an admin reads any; a bad id: 404.
    let (status, body) = quota_get(&w, &b, &pa).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body["forbidden"]["message"].is_string(), "{body}");
    let (status, _) = quota_get(&w, &admin, &pa).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = quota_get(&w, &admin, "not-a-project").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Usage: one server of one vCPU.
    let (status, _, made) = w
        .client()
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(
                json!({"server": {"name": "s", "flavorRef": w.flavor.id, "imageRef": w.image.id}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{made}");
    let (status, detail) = quota_get(&w, &a, &format!("{pa}/detail")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let d = &detail["quota_set"];
    assert_eq!(
        d["instances"],
        json!({"limit": -1, "in_use": 1, "reserved": 0})
    );
    assert_eq!(d["cores"]["in_use"], w.flavor.vcpus);
    assert_eq!(d["ram"]["in_use"], w.flavor.memory_mb);
    assert_eq!(d["floating_ips"]["in_use"], 0);

    // Defaults: what a new project gets.
    let (status, defaults) = quota_get(&w, &a, &format!("{pa}/defaults")).await;
    assert_eq!(status, StatusCode::OK, "{defaults}");
    assert_eq!(defaults["quota_set"]["floating_ips"], 50);

    // A member may not change it; an admin may.
    let (status, _) = quota_put(&w, &a, &pa, json!({"cores": 8})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, changed) = quota_put(
        &w,
        &admin,
        &pa,
        json!({"cores": 8, "instances": "4", "ram": 4096, "floating_ips": 3, "force": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    let c = &changed["quota_set"];
    assert_eq!(
        (&c["cores"], &c["instances"], &c["ram"], &c["floating_ips"]),
        (&json!(8), &json!(4), &json!(4096), &json!(3))
    );
    // And it holds: the limits the project meets, in its own view and in /limits.
    let (_, shown) = quota_get(&w, &a, &pa).await;
    assert_eq!(shown["quota_set"]["cores"], 8);
    let (_, _, limits) = w
        .client()
        .send(Method::GET, "/compute/v2.1/limits", Some(&a), None)
        .await;
    assert_eq!(limits["limits"]["absolute"]["maxTotalCores"], 8);
    assert_eq!(limits["limits"]["absolute"]["maxTotalFloatingIps"], 3);
    // -1 makes it unlimited again.
    let (status, changed) = quota_put(&w, &admin, &pa, json!({"cores": -1})).await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["quota_set"]["cores"], -1);

    // Bad changes: a figure this server does not keep, a negative one, a word, no quota_set,
    // a Networking figure past its bound (-1 is not allowed there).
    for (set, why) in [
        (json!({"key_pairs": 5}), "key_pairs"),
        (json!({"cores": -2}), "-1 or more"),
        (json!({"cores": "many"}), "integer"),
        (json!({"floating_ips": -1}), "floating_ips"),
        (json!({"security_groups": 1000}), "security_groups"),
    ] {
        let (status, body) = quota_put(&w, &admin, &pa, set.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{set}: {body}");
        assert!(body.to_string().contains(why), "{set}: {body}");
    }
    let (status, _, _) = w
        .client()
        .send(
            Method::PUT,
            &format!("/compute/v2.1/os-quota-sets/{pa}"),
            Some(&admin),
            Some(json!({"cores": 3})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Nothing of the refused changes was kept.
    let (_, shown) = quota_get(&w, &a, &pa).await;
    assert_eq!(shown["quota_set"]["cores"], -1);
    assert_eq!(shown["quota_set"]["floating_ips"], 3);
    w.stop().await;
}
