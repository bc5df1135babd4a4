//! The native catalog: images, flavors, workloads and instances, with cross-tenant attempts on
//! every route, and the quota.

use super::*;

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

    // A tenant cannot name a file on the nodes (it could be another tenant's image); an admin
    // registers it for the tenant.
    ok(
        &c,
        Method::POST,
        "/cumulo/v1/images",
        &a,
        Some(json!({"name": "mine", "kind": "qcow2", "reference": "/a.qcow2"})),
        403,
    )
    .await;
    let image = ok(
        &c,
        Method::POST,
        "/cumulo/v1/images",
        &admin,
        Some(json!({"name": "mine", "kind": "qcow2", "reference": "/a.qcow2", "tenant": w.a.id})),
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
