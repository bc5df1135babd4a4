//! Compute v2.1: versions, microversions, flavors, servers and actions; cross-tenant attempts,
//! bad input, unknown flavor or image, quotas (and a quota race), Nova's error shapes.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::{
    ImageKind, InstanceChange, InstanceState, NewFlavor, NewImage, Quota, Scope, TenantChange,
};

use crate::support::World;

fn create_body(name: &str, flavor: impl ToString, image: impl ToString) -> Value {
    json!({"server": {"name": name, "flavorRef": flavor.to_string(), "imageRef": image.to_string()}})
}

#[tokio::test]
async fn versions_and_microversions() {
    let w = World::start().await;
    let c = w.client();
    let (status, _, body) = c.send(Method::GET, "/compute/", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["versions"][0]["version"], "2.1");
    let (status, headers, body) = c.send(Method::GET, "/compute/v2.1", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["version"]["min_version"], "2.1");
    assert_eq!(headers["openstack-api-version"], "compute 2.1");

    let a = w.token_a().await;
    for (header, value, expected) in [
        ("openstack-api-version", "compute 2.1", 200),
        ("openstack-api-version", "compute latest", 200),
        ("x-openstack-nova-api-version", "2.1", 200),
        ("openstack-api-version", "compute 2.90", 406),
        ("x-openstack-nova-api-version", "bogus", 400),
    ] {
        let (status, _, body) = c
            .send_with(
                Method::GET,
                "/compute/v2.1/flavors",
                &[("x-auth-token", &a), (header, value)],
                None,
            )
            .await;
        assert_eq!(status.as_u16(), expected, "{header}: {value}: {body}");
    }
    w.stop().await;
}

#[tokio::test]
async fn flavors() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let (status, _, body) = c
        .send(Method::GET, "/compute/v2.1/flavors", Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["flavors"][0]["name"], "m1.tiny");
    let (_, _, body) = c
        .send(Method::GET, "/compute/v2.1/flavors/detail", Some(&a), None)
        .await;
    assert_eq!(body["flavors"][0]["ram"], 128);
    let path = format!("/compute/v2.1/flavors/{}", w.flavor.id);
    let (status, _, body) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["flavor"]["vcpus"], 1);
    for missing in [
        "/compute/v2.1/flavors/m1.tiny",
        &format!("/compute/v2.1/flavors/{}", uuid::Uuid::new_v4()),
    ] {
        let (status, _, body) = c.send(Method::GET, missing, Some(&a), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["itemNotFound"]["code"], 404, "{body}");
    }
    let (status, _, body) = c
        .send(Method::GET, "/compute/v2.1/flavors", None, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body["unauthorized"].is_object(), "{body}");
    let (status, _, _) = c
        .send(Method::GET, "/compute/v2.1/flavors?limit=x", Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    w.stop().await;
}

#[tokio::test]
async fn server_lifecycle() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let user_data = base64_of("#cloud-config\n");
    let body = json!({"server": {"name": "web", "flavorRef": w.flavor.id.to_string(),
        "imageRef": w.image.id.to_string(), "user_data": user_data, "networks": "auto",
        "min_count": 2, "max_count": 2}});
    let (status, _, created) = c
        .send(Method::POST, "/compute/v2.1/servers", Some(&a), Some(body))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    let id = created["server"]["id"].as_str().unwrap().to_string();

    let (_, _, list) = c
        .send(Method::GET, "/compute/v2.1/servers", Some(&a), None)
        .await;
    assert_eq!(list["servers"].as_array().unwrap().len(), 2);
    let (_, _, detail) = c
        .send(
            Method::GET,
            "/compute/v2.1/servers/detail?name=we",
            Some(&a),
            None,
        )
        .await;
    let first = &detail["servers"][0];
    assert_eq!(first["status"], "ACTIVE");
    assert_eq!(first["flavor"]["id"], w.flavor.id.to_string());
    assert_eq!(first["image"]["id"], w.image.id.to_string());
    assert_eq!(first["tenant_id"], w.a.id.to_string());
    assert!(
        first["addresses"]["private"][0]["addr"]
            .as_str()
            .unwrap()
            .starts_with("172.")
    );
    let (_, _, paged) = c
        .send(
            Method::GET,
            "/compute/v2.1/servers/detail?limit=1",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(paged["servers"].as_array().unwrap().len(), 1);
    assert!(
        paged["servers_links"][0]["href"]
            .as_str()
            .unwrap()
            .contains("marker=")
    );

    let path = format!("/compute/v2.1/servers/{id}");
    let action = format!("{path}/action");
    let (status, _, _) = c
        .send(
            Method::POST,
            &action,
            Some(&a),
            Some(json!({"os-stop": null})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "SHUTOFF");
    // Stopping a stopped server is a conflict.
    let (status, _, body) = c
        .send(
            Method::POST,
            &action,
            Some(&a),
            Some(json!({"os-stop": null})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(body["conflictingRequest"].is_object(), "{body}");
    let (status, _, _) = c
        .send(
            Method::POST,
            &action,
            Some(&a),
            Some(json!({"os-start": null})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _, _) = c
        .send(
            Method::POST,
            &action,
            Some(&a),
            Some(json!({"reboot": {"type": "SOFT"}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // Pause, shown PAUSED; a second pause conflicts; unpause; an action cumulo lacks is a 400.
    let (status, _, _) = c
        .send(
            Method::POST,
            &action,
            Some(&a),
            Some(json!({"pause": null})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "PAUSED");
    assert_eq!(shown["server"]["OS-EXT-STS:power_state"], 3);
    for (body, wanted) in [
        (json!({"pause": null}), StatusCode::CONFLICT),
        (json!({"unpause": null}), StatusCode::ACCEPTED),
        (json!({"shelve": null}), StatusCode::BAD_REQUEST),
    ] {
        let (status, _, _) = c
            .send(Method::POST, &action, Some(&a), Some(body.clone()))
            .await;
        assert_eq!(status, wanted, "{body}");
    }

    // An errored instance shows its fault.
    w.cluster
        .set_state(id.parse().unwrap(), InstanceState::Error("no room".into()))
        .unwrap();
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "ERROR");
    assert_eq!(shown["server"]["fault"]["message"], "no room");

    let (status, _, _) = c.send(Method::DELETE, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The second server reused the same workload.
    let workloads = w.store.workloads(Scope::Tenant(w.a.id)).unwrap();
    assert_eq!(
        workloads.iter().filter(|x| x.owner == Some(w.a.id)).count(),
        1
    );
    assert_eq!(workloads[0].user_data, "#cloud-config\n");
    w.stop().await;
}

/// Creates the server `web` of the world's flavor and image with `token`: its id.
async fn web_server(w: &World, token: &str) -> uuid::Uuid {
    let (status, _, created) = w
        .client()
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(token),
            Some(create_body("web", w.flavor.id, w.image.id)),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    created["server"]["id"].as_str().unwrap().parse().unwrap()
}

/// Puts instance `id` on `node`, as a node's report would.
fn place(w: &World, id: uuid::Uuid, node: uuid::Uuid) {
    let current = w.store.instance(Scope::All, id).unwrap();
    w.store
        .update_instance(
            Scope::All,
            id,
            current.version,
            InstanceChange {
                node: Some(Some(node)),
                ..InstanceChange::default()
            },
        )
        .unwrap();
}

/// `hostId` is Nova's hash of project and host: equal for one project's servers on one node,
/// different for another project's server on that node, and never the node's UUID.
#[tokio::test]
async fn the_host_id_hides_the_node() {
    let w = World::start().await;
    let c = w.client();
    let (a, b) = (w.token_a().await, w.token_b().await);
    let node = uuid::Uuid::new_v4();
    let (a1, a2, b1) = (
        web_server(&w, &a).await,
        web_server(&w, &a).await,
        web_server(&w, &b).await,
    );
    for id in [a1, a2, b1] {
        place(&w, id, node);
    }
    let host_id = async |token: &str, id: uuid::Uuid| {
        let path = format!("/compute/v2.1/servers/{id}");
        let (status, _, body) = c.send(Method::GET, &path, Some(token), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["server"]["hostId"].as_str().unwrap().to_string()
    };
    let (h1, h2, h3) = (
        host_id(&a, a1).await,
        host_id(&a, a2).await,
        host_id(&b, b1).await,
    );
    assert_eq!(h1.len(), 56, "{h1}");
    assert!(
        h1.bytes()
            .all(|x| x.is_ascii_hexdigit() && !x.is_ascii_uppercase())
    );
    assert!(!h1.contains(&node.simple().to_string()) && !h1.contains(&node.to_string()));
    assert_eq!(h1, h2);
    assert_ne!(h1, h3);
    w.stop().await;
}

#[tokio::test]
async fn a_server_is_rebuilt_from_another_image() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let id = web_server(&w, &a).await.to_string();
    let other = w
        .store
        .create_image(NewImage {
            owner: Some(w.a.id),
            name: "other".into(),
            kind: ImageKind::Raw,
            reference: "/other.raw".into(),
        })
        .unwrap();
    let path = format!("/compute/v2.1/servers/{id}");
    let action = format!("{path}/action");
    // Bad requests: no image, an image the project cannot see.
    for body in [
        json!({"rebuild": {}}),
        json!({"rebuild": {"imageRef": uuid::Uuid::new_v4().to_string()}}),
    ] {
        let (status, _, answer) = c
            .send(Method::POST, &action, Some(&a), Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
    }
    let rebuild = json!({"rebuild": {"imageRef": other.id.to_string(), "name": "web2",
        "user_data": base64_of("#cloud-config\nx: 1\n"), "adminPass": "ignored"}});
    let (status, _, answer) = c
        .send(Method::POST, &action, Some(&a), Some(rebuild.clone()))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let server = &answer["server"];
    assert_eq!(
        (&server["id"], &server["status"], &server["name"]),
        (&json!(id), &json!("REBUILD"), &json!("web2"))
    );
    assert_eq!(server["OS-EXT-STS:task_state"], "rebuilding");
    assert_eq!(server["image"]["id"], other.id.to_string());
    // While it rebuilds, another rebuild is a conflict.
    let (status, _, _) = c.send(Method::POST, &action, Some(&a), Some(rebuild)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "REBUILD");
    let instance = w.store.instance(Scope::All, id.parse().unwrap()).unwrap();
    let workload = w.store.workload(Scope::All, instance.workload).unwrap();
    assert_eq!(
        (workload.image, workload.user_data.as_str(), workload.flavor),
        (other.id, "#cloud-config\nx: 1\n", w.flavor.id)
    );
    let (_, _, actions) = c
        .send(
            Method::GET,
            &format!("{path}/os-instance-actions"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(actions["instanceActions"][0]["action"], "rebuild");

    // The native route: its own image and user data kept.
    w.cluster
        .set_state(id.parse().unwrap(), InstanceState::Exited)
        .unwrap();
    let (status, _, native) = c
        .send(
            Method::POST,
            &format!("/cumulo/v1/instances/{id}/rebuild"),
            Some(&a),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{native}");
    assert_eq!(native["state"], "rebuilding");
    assert_eq!(
        w.store
            .instance(Scope::All, id.parse().unwrap())
            .unwrap()
            .workload,
        workload.id
    );
    w.stop().await;
}

#[tokio::test]
async fn a_stopped_server_is_resized_then_confirmed_or_reverted() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let id = web_server(&w, &a).await;
    let path = format!("/compute/v2.1/servers/{id}");
    let action = format!("{path}/action");
    let base = w.store.flavor(Scope::All, w.flavor.id).unwrap();
    let flavor = |name: &str, disk_gb: u64| {
        w.store
            .create_flavor(NewFlavor {
                name: name.into(),
                vcpus: base.vcpus + 1,
                memory_mb: base.memory_mb * 2,
                disk_gb,
                is_public: true,
            })
            .unwrap()
    };
    let (big, bigger, small) = (
        flavor("big", base.disk_gb + 1),
        flavor("bigger", base.disk_gb + 2),
        flavor("small", 0),
    );
    let resize = |f: uuid::Uuid| json!({"resize": {"flavorRef": f.to_string()}});
    let post = |body: Value| c.send(Method::POST, &action, Some(&a), Some(body));
    // Running: 409.
    assert_eq!(post(resize(big.id)).await.0, StatusCode::CONFLICT);
    // Stopped on its node.
    w.cluster.set_state(id, InstanceState::Exited).unwrap();
    place(&w, id, uuid::Uuid::from_u128(7));
    for bad in [
        resize(small.id),
        resize(w.flavor.id),
        resize(uuid::Uuid::new_v4()),
        json!({"resize": {}}),
        json!({"confirmResize": null}),
    ] {
        let (status, _, body) = post(bad.clone()).await;
        let wanted = if bad.get("confirmResize").is_some() {
            StatusCode::CONFLICT
        } else {
            StatusCode::BAD_REQUEST
        };
        assert_eq!(status, wanted, "{bad}: {body}");
    }
    assert_eq!(post(resize(big.id)).await.0, StatusCode::ACCEPTED);
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "VERIFY_RESIZE");
    assert_eq!(shown["server"]["flavor"]["id"], big.id.to_string());
    let (status, _, _) = post(json!({"confirmResize": null})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "SHUTOFF");
    assert_eq!(shown["server"]["flavor"]["id"], big.id.to_string());
    // Resized again, then reverted: back to `big`.
    assert_eq!(post(resize(bigger.id)).await.0, StatusCode::ACCEPTED);
    assert_eq!(
        post(json!({"revertResize": null})).await.0,
        StatusCode::ACCEPTED
    );
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(
        (&shown["server"]["status"], &shown["server"]["flavor"]["id"]),
        (&json!("SHUTOFF"), &json!(big.id.to_string()))
    );
    let i = w.store.instance(Scope::All, id).unwrap();
    assert_eq!((i.vcpus, i.memory_mb), (big.vcpus, big.memory_mb));
    let (_, _, actions) = c
        .send(
            Method::GET,
            &format!("{path}/os-instance-actions"),
            Some(&a),
            None,
        )
        .await;
    let names: Vec<&str> = actions["instanceActions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        names[..4],
        ["revertResize", "resize", "confirmResize", "resize"]
    );
    w.stop().await;
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn another_tenant_sees_and_touches_nothing() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let id = w.server_a(&a, "secret-server").await;
    let path = format!("/compute/v2.1/servers/{id}");
    for list in [
        "/compute/v2.1/servers",
        "/compute/v2.1/servers/detail",
        "/compute/v2.1/servers/detail?all_tenants=1",
    ] {
        let (status, _, body) = c.send(Method::GET, list, Some(&b), None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["servers"], json!([]), "{list}");
    }
    let (status, _, body) = c.send(Method::GET, &path, Some(&b), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!body.to_string().contains("secret-server"));
    for action in [
        json!({"os-stop": null}),
        json!({"os-start": null}),
        json!({"reboot": {"type": "HARD"}}),
    ] {
        let (status, _, _) = c
            .send(
                Method::POST,
                &format!("{path}/action"),
                Some(&b),
                Some(action),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, _, _) = c.send(Method::DELETE, &path, Some(&b), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A's server is untouched.
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "ACTIVE");

    // B's private image is invisible to A: a create with it is a bad request.
    let private = w
        .store
        .create_image(NewImage {
            owner: Some(w.b.id),
            name: "b-only".into(),
            kind: ImageKind::Raw,
            reference: "/b".into(),
        })
        .unwrap();
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(create_body("x", w.flavor.id, private.id)),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, _, images) = c
        .send(Method::GET, "/image/v2/images", Some(&a), None)
        .await;
    assert!(!images.to_string().contains("b-only"));
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("/image/v2/images/{}", private.id),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, _, images) = c
        .send(Method::GET, "/image/v2/images", Some(&b), None)
        .await;
    assert_eq!(images["images"].as_array().unwrap().len(), 2);
    // The admin's project scope does not include A's servers unless it asks for all.
    let admin = w.admin_token().await;
    let (_, _, mine) = c
        .send(Method::GET, "/compute/v2.1/servers", Some(&admin), None)
        .await;
    assert_eq!(mine["servers"], json!([]));
    let (_, _, all) = c
        .send(
            Method::GET,
            "/compute/v2.1/servers/detail?all_tenants=True",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(all["servers"].as_array().unwrap().len(), 1);
    // It reads A's server and acts on it, as Nova's admins do.
    let (status, _, _) = c.send(Method::GET, &path, Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("{path}/action"),
            Some(&admin),
            Some(json!({"os-stop": null})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _, _) = c.send(Method::DELETE, &path, Some(&admin), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    w.stop().await;
}

#[tokio::test]
async fn bad_input_gets_clear_4xx_answers() {
    let w = World::start_with(None, |config| config.body_limit = 8 * 1024).await;
    let c = w.client();
    let a = w.token_a().await;
    let servers = "/compute/v2.1/servers";
    let cases = [
        (
            create_body("x", uuid::Uuid::new_v4(), w.image.id),
            400,
            "badRequest",
        ),
        (
            create_body("x", w.flavor.id, uuid::Uuid::new_v4()),
            400,
            "badRequest",
        ),
        (create_body("x", "small", w.image.id), 400, "badRequest"),
        (create_body("", w.flavor.id, w.image.id), 400, "badRequest"),
        (json!({"server": {"name": "x"}}), 400, "badRequest"),
        (json!({"servers": {}}), 400, "badRequest"),
        (
            json!({"server": {"name": "x", "flavorRef": w.flavor.id, "imageRef": w.image.id, "user_data": "%%%"}}),
            400,
            "badRequest",
        ),
    ];
    for (body, expected, key) in cases {
        let (status, _, reply) = c
            .send(Method::POST, servers, Some(&a), Some(body.clone()))
            .await;
        assert_eq!(status.as_u16(), expected, "{body}: {reply}");
        assert!(reply[key].is_object(), "{reply}");
    }
    for raw in [&b"{"[..], b"", b"null", b"[1,2]", b"\xff\xfe"] {
        let (status, _, reply) = c.raw(Method::POST, servers, Some(&a), raw.to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw:?}: {reply}");
    }
    let big = json!({"server": {"name": "x".repeat(10_000)}});
    let (status, _, reply) = c.send(Method::POST, servers, Some(&a), Some(big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{reply}");
    for path in [
        "/compute/v2.1/servers/not-a-uuid",
        "/compute/v2.1/servers/%00",
        "/compute/v2.1/servers/%FF",
    ] {
        let (status, _, reply) = c.send(Method::GET, path, Some(&a), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(reply["itemNotFound"].is_object());
    }
    let (status, _, _) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers/nope/action",
            Some(&a),
            Some(json!({"os-stop": null})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = c.send(Method::PUT, servers, Some(&a), None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _, _) = c
        .send(
            Method::GET,
            "/compute/v2.1/servers?marker=zzz",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_hold_under_parallel_creates() {
    let w = World::start().await;
    let quota = Quota {
        instances: Some(5),
        vcpus: None,
        memory_mb: None,
    };
    let tenant = w.store.tenant(w.a.id).unwrap();
    w.store
        .update_tenant(
            tenant.id,
            tenant.version,
            TenantChange {
                quota: Some(quota),
                ..TenantChange::default()
            },
        )
        .unwrap();
    let a = w.token_a().await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (c, a, body) = (
            w.client(),
            a.clone(),
            create_body(&format!("r{i}"), w.flavor.id, w.image.id),
        );
        tasks.push(tokio::spawn(async move {
            let (status, _, reply) = c
                .send(Method::POST, "/compute/v2.1/servers", Some(&a), Some(body))
                .await;
            (status, reply)
        }));
    }
    let mut accepted = 0;
    for task in tasks {
        let (status, reply) = task.await.unwrap();
        match status {
            StatusCode::ACCEPTED => accepted += 1,
            StatusCode::FORBIDDEN => assert!(reply["overLimit"].is_object(), "{reply}"),
            other => panic!("unexpected {other}: {reply}"),
        }
    }
    assert_eq!(accepted, 5);
    assert_eq!(w.store.usage(w.a.id).unwrap().instances, 5);
    // A count that does not fit is refused whole; min_count takes what fits.
    let (status, _, _) = w
        .client()
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(create_body("more", w.flavor.id, w.image.id)),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, _, limits) = w
        .client()
        .send(Method::GET, "/compute/v2.1/limits", Some(&a), None)
        .await;
    assert_eq!(limits["limits"]["absolute"]["maxTotalInstances"], 5);
    assert_eq!(limits["limits"]["absolute"]["totalInstancesUsed"], 5);
    w.stop().await;
}

#[tokio::test]
async fn a_launch_takes_what_the_nodes_could_hold_between_min_and_max() {
    let w = World::start().await;
    let a = w.token_a().await;
    let c = w.client();
    // 4 vCPUs hold 4 instances of m1.tiny (1 vCPU, 128 MiB, 1 GiB): the scarcest of the three.
    let mut node = crate::native::node();
    node.last_stats = Some(std::time::SystemTime::now());
    w.cluster.add_node(node);
    let create = |min: u32, max: u32| {
        let mut body = create_body("many", w.flavor.id, w.image.id);
        body["server"]["min_count"] = json!(min);
        body["server"]["max_count"] = json!(max);
        c.send(Method::POST, "/compute/v2.1/servers", Some(&a), Some(body))
    };
    let (status, _, body) = create(5, 1000).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let message = body["overLimit"]["message"].as_str().unwrap();
    assert!(message.starts_with("Quota exceeded"), "{message}");
    assert!(message.contains("at most 4"), "{message}");
    assert_eq!(
        w.store.usage(w.a.id).unwrap().instances,
        0,
        "nothing written"
    );
    // Between min and max: as many as fit.
    let (status, _, body) = create(2, 1000).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(w.store.usage(w.a.id).unwrap().instances, 4);
    // The native API: a count beyond it is a 403, nothing made.
    let workload = w
        .store
        .instances(Scope::All, Default::default(), store::Page::first(1))
        .unwrap()
        .items[0]
        .workload;
    let (status, _, body) = c
        .send(
            Method::POST,
            "/cumulo/v1/instances",
            Some(&a),
            Some(json!({"workload": workload, "name": "x", "count": 5})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 4"),
        "{body}"
    );
    assert_eq!(w.store.usage(w.a.id).unwrap().instances, 4);
    w.stop().await;
}

#[tokio::test]
async fn an_unavailable_cluster_is_503() {
    let w = World::start().await;
    let a = w.token_a().await;
    let id = w.server_a(&a, "s").await;
    w.cluster.set_connected(false);
    let c = w.client();
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(create_body("x", w.flavor.id, w.image.id)),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body["serviceUnavailable"].is_object(), "{body}");
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("/compute/v2.1/servers/{id}/action"),
            Some(&a),
            Some(json!({"os-stop": null})),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (_, _, health) = c.send(Method::GET, "/cumulo/v1/healthz", None, None).await;
    assert_eq!(health["scheduler"], false);
    // Reads still work.
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1/servers/{id}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    w.stop().await;
}
