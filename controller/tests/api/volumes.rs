//! The Block Storage v3 subset: version documents and microversions, the catalog entries,
//! volumes (create, list, show, update, extend, delete) with Cinder's codes and fault bodies,
//! another project's volumes and URL, and the `volumes` and `gigabytes` quotas (the defaults, and
//! a project's own as an admin sets it).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::World;

/// Cinder's fault name and code of an error body.
fn fault(body: &Value) -> (&str, u64) {
    let (key, inner) = body
        .as_object()
        .and_then(|o| o.iter().next())
        .unwrap_or_else(|| panic!("not a fault: {body}"));
    (key.as_str(), inner["code"].as_u64().unwrap())
}

fn base(project: uuid::Uuid) -> String {
    format!("/volume/v3/{project}")
}

#[tokio::test]
async fn versions_microversions_and_catalog() {
    let w = World::start().await;
    let c = w.client();
    let (status, _, versions) = c.send(Method::GET, "/volume/", None, None).await;
    assert_eq!(status, StatusCode::MULTIPLE_CHOICES);
    let v = &versions["versions"][0];
    assert_eq!(v["id"], "v3.0");
    assert_eq!(v["min_version"], "3.0");
    assert_eq!(v["version"], "3.0");
    assert_eq!(
        v["links"][0]["href"],
        format!("{}/volume/v3/", w.api.url).as_str()
    );
    let (status, _, doc) = c.send(Method::GET, "/volume/v3/", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["versions"][0]["id"], "v3.0");

    let (_, _, token) = c
        .login(&w.a.user_name, crate::support::PASSWORD, &w.a.name)
        .await;
    let catalog = token["token"]["catalog"].as_array().unwrap();
    let url = format!("{}/volume/v3/{}", w.api.url, w.a.id);
    for kind in ["block-storage", "volumev3"] {
        let service = catalog
            .iter()
            .find(|s| s["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind}: {catalog:?}"));
        assert_eq!(service["endpoints"][0]["url"], url.as_str());
    }

    let a = w.token_a().await;
    let path = format!("{}/volumes", base(w.a.id));
    let h = [
        ("x-auth-token", a.as_str()),
        ("openstack-api-version", "volume 3.0"),
    ];
    let (status, answered, _) = c.send_with(Method::GET, &path, &h, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answered["openstack-api-version"], "volume 3.0");
    let h = [
        ("x-auth-token", a.as_str()),
        ("openstack-api-version", "volume 3.70"),
    ];
    let (status, _, body) = c.send_with(Method::GET, &path, &h, None).await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "{body}");
    assert_eq!(fault(&body).1, 406);

    // Unauthenticated: Cinder's shape.
    let (status, _, body) = c.send(Method::GET, &path, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(fault(&body), ("unauthorized", 401));
    w.stop().await;
}

#[tokio::test]
async fn volume_lifecycle() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let root = base(w.a.id);
    let vols = format!("{root}/volumes");

    let (status, _, made) = c
        .send(
            Method::POST,
            &vols,
            Some(&a),
            Some(
                json!({"volume": {"size": 1, "name": "v1", "description": "first",
                "metadata": {}, "volume_type": null, "availability_zone": "nova"}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{made}");
    let v = &made["volume"];
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(v["name"], "v1");
    assert_eq!(v["description"], "first");
    assert_eq!(v["size"], 1);
    assert_eq!(v["status"], "available");
    assert_eq!(v["attachments"], json!([]));
    assert_eq!(v["bootable"], "false");
    assert_eq!(v["availability_zone"], "nova");
    assert_eq!(v["multiattach"], false);
    assert_eq!(v["encrypted"], false);
    assert_eq!(v["metadata"], json!({}));
    assert_eq!(v["os-vol-tenant-attr:tenant_id"], w.a.id.to_string());
    assert!(v["created_at"].is_string());
    // A size as text, as Cinder takes it.
    let (status, _, second) = c
        .send(
            Method::POST,
            &vols,
            Some(&a),
            Some(json!({"volume": {"size": "2", "name": "v2"}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{second}");

    // List (summary and detail), filters.
    let (status, _, list) = c.send(Method::GET, &vols, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["volumes"].as_array().unwrap().len(), 2);
    assert!(list["volumes"][0].get("size").is_none());
    let (_, _, detail) = c
        .send(
            Method::GET,
            &format!("{vols}/detail?name=v1"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(detail["volumes"].as_array().unwrap().len(), 1, "{detail}");
    assert_eq!(detail["volumes"][0]["size"], 1);
    let (_, _, paged) = c
        .send(
            Method::GET,
            &format!("{vols}/detail?limit=1"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(paged["volumes"].as_array().unwrap().len(), 1);

    // Show, update.
    let one = format!("{vols}/{id}");
    let (status, _, shown) = c.send(Method::GET, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["volume"]["id"], id.as_str());
    let (status, _, updated) = c
        .send(
            Method::PUT,
            &one,
            Some(&a),
            Some(json!({"volume": {"name": "renamed", "description": "d2"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["volume"]["name"], "renamed");
    assert_eq!(updated["volume"]["description"], "d2");

    // Extend: larger only.
    let action = format!("{one}/action");
    let extend = |n: Value| Some(json!({"os-extend": {"new_size": n}}));
    let (status, _, body) = c
        .send(Method::POST, &action, Some(&a), extend(json!(3)))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, _, shown) = c.send(Method::GET, &one, Some(&a), None).await;
    assert_eq!(shown["volume"]["size"], 3);
    for n in [json!(3), json!(2), json!("x")] {
        let (status, _, body) = c.send(Method::POST, &action, Some(&a), extend(n)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(fault(&body), ("badRequest", 400));
    }
    let (status, _, body) = c
        .send(
            Method::POST,
            &action,
            Some(&a),
            Some(json!({"os-reset_status": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Another project: its member sees nothing, by id or by its own URL; another project's URL
    // is Cinder's 400.
    let b_one = format!("{}/volumes/{id}", base(w.b.id));
    let (status, _, body) = c.send(Method::GET, &b_one, Some(&b), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(fault(&body), ("itemNotFound", 404));
    let (status, _, _) = c.send(Method::DELETE, &b_one, Some(&b), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, _, list) = c
        .send(
            Method::GET,
            &format!("{}/volumes", base(w.b.id)),
            Some(&b),
            None,
        )
        .await;
    assert_eq!(list["volumes"], json!([]));
    let (status, _, body) = c.send(Method::GET, &one, Some(&b), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("Malformed request url"), "{body}");
    // An admin lists every project's with all_tenants.
    let admin = w.admin_token().await;
    let admin_project = w
        .store
        .tenants()
        .unwrap()
        .into_iter()
        .find(|t| t.name == controller::api::testing::ADMIN_PROJECT)
        .unwrap()
        .id;
    let admin_vols = format!("{}/volumes/detail", base(admin_project));
    let (_, _, own) = c.send(Method::GET, &admin_vols, Some(&admin), None).await;
    assert_eq!(own["volumes"], json!([]));
    let (_, _, all) = c
        .send(
            Method::GET,
            &format!("{admin_vols}?all_tenants=1"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(all["volumes"].as_array().unwrap().len(), 2, "{all}");

    // Unknown volumes.
    for missing in [uuid::Uuid::new_v4().to_string(), "nope".to_string()] {
        let (status, _, body) = c
            .send(Method::GET, &format!("{vols}/{missing}"), Some(&a), None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(fault(&body), ("itemNotFound", 404));
    }

    // Delete: 202, then gone.
    let (status, _, _) = c.send(Method::DELETE, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _, _) = c.send(Method::GET, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = c.send(Method::DELETE, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    w.stop().await;
}

#[tokio::test]
async fn bad_input_is_a_400() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let vols = format!("{}/volumes", base(w.a.id));
    for body in [
        json!({"volume": {"size": 0}}),
        json!({"volume": {"size": -1}}),
        json!({"volume": {"size": 1.5}}),
        json!({"volume": {"size": "one"}}),
        json!({"volume": {}}),
        json!({"volume": {"size": 1, "name": "x".repeat(256)}}),
        json!({"volume": {"size": 1, "name": 7}}),
        json!({"volume": {"size": 1, "imageRef": w.image.id}}),
        json!({"volume": {"size": 1, "snapshot_id": uuid::Uuid::new_v4()}}),
        json!({"volume": {"size": 1, "availability_zone": "elsewhere"}}),
        json!({"size": 1}),
    ] {
        let (status, _, reply) = c
            .send(Method::POST, &vols, Some(&a), Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {reply}");
        assert_eq!(fault(&reply), ("badRequest", 400), "{body}");
    }
    let (_, _, reply) = c
        .send(
            Method::POST,
            &vols,
            Some(&a),
            Some(json!({"volume": {"size": 1, "imageRef": w.image.id}})),
        )
        .await;
    // The fixture's image is registered by reference (a file on the nodes): no volume is made
    // from it (docs/storage.md; tests/api/boot_volume.rs makes volumes from uploaded images).
    assert!(
        reply.to_string().contains("registered by reference"),
        "{reply}"
    );
    let (status, _, reply) = c.raw(Method::POST, &vols, Some(&a), b"{".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(fault(&reply), ("badRequest", 400));
    let (_, _, list) = c.send(Method::GET, &vols, Some(&a), None).await;
    assert_eq!(list["volumes"], json!([]));
    w.stop().await;
}

#[tokio::test]
async fn quotas_count_volumes_and_gigabytes() {
    let w = World::start_with(None, |config| {
        config.volume_limits = store::VolumeLimits {
            volumes: Some(2),
            gigabytes: Some(5),
        };
    })
    .await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let root = base(w.a.id);
    let vols = format!("{root}/volumes");
    let create = |size: u32| Some(json!({"volume": {"size": size}}));

    // Over the gigabytes at once.
    let (status, _, body) = c.send(Method::POST, &vols, Some(&a), create(6)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(fault(&body), ("overLimit", 413));
    assert!(body.to_string().contains("gigabytes"), "{body}");
    let (_, _, first) = c.send(Method::POST, &vols, Some(&a), create(2)).await;
    let (status, _, _) = c.send(Method::POST, &vols, Some(&a), create(2)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // A third volume: over the count.
    let (status, _, body) = c.send(Method::POST, &vols, Some(&a), create(1)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body.to_string().contains("VolumeLimitExceeded"), "{body}");
    // Growing past the gigabytes.
    let id = first["volume"]["id"].as_str().unwrap();
    let (status, _, body) = c
        .send(
            Method::POST,
            &format!("{vols}/{id}/action"),
            Some(&a),
            Some(json!({"os-extend": {"new_size": 4}})),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(fault(&body), ("overLimit", 413));

    // The quota set, with usage.
    let quota = format!("{root}/os-quota-sets/{}", w.a.id);
    let (status, _, q) = c.send(Method::GET, &quota, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK, "{q}");
    assert_eq!(q["quota_set"]["volumes"], 2);
    assert_eq!(q["quota_set"]["gigabytes"], 5);
    assert_eq!(q["quota_set"]["id"], w.a.id.to_string());
    let (_, _, q) = c
        .send(Method::GET, &format!("{quota}?usage=true"), Some(&a), None)
        .await;
    assert_eq!(
        q["quota_set"]["volumes"],
        json!({"limit": 2, "in_use": 2, "reserved": 0, "allocated": 0})
    );
    assert_eq!(q["quota_set"]["gigabytes"]["in_use"], 4);
    let (status, _, d) = c
        .send(Method::GET, &format!("{quota}/defaults"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d["quota_set"]["gigabytes"], 5);
    // Setting them is an admin's: `an_admin_sets_a_projects_volume_quota`.
    // Another project's quotas: a member's 403; its own project in its URL.
    let (status, _, body) = c
        .send(
            Method::GET,
            &format!("{}/os-quota-sets/{}", base(w.b.id), w.a.id),
            Some(&b),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(fault(&body), ("forbidden", 403));
    // The other project's volumes are its own: B may still make one.
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("{}/volumes", base(w.b.id)),
            Some(&b),
            create(5),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    w.stop().await;
}

/// An admin's `PUT os-quota-sets` gives a project its own `volumes` and `gigabytes` in place of
/// the defaults: its creations and growths past them are Cinder's 413s, another project keeps
/// the defaults, a member may not set them, and bad figures or keys not kept are 400s.
#[tokio::test]
async fn an_admin_sets_a_projects_volume_quota() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let admin = w.admin_token().await;
    let admin_project = w
        .store
        .tenants()
        .unwrap()
        .into_iter()
        .find(|t| t.name == controller::api::testing::ADMIN_PROJECT)
        .unwrap()
        .id;
    let set_a = format!("{}/os-quota-sets/{}", base(admin_project), w.a.id);
    let put = |body: Value| {
        let (c, set_a, admin) = (c.clone(), set_a.clone(), admin.clone());
        async move { c.send(Method::PUT, &set_a, Some(&admin), Some(body)).await }
    };

    // The admin's change: the answer is the new set (Cinder's, without an id).
    let (status, _, body) = put(json!({"quota_set": {"volumes": 2, "gigabytes": 5}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"quota_set": {"volumes": 2, "gigabytes": 5}}));
    let own_a = format!("{}/os-quota-sets/{}", base(w.a.id), w.a.id);
    let (status, _, q) = c.send(Method::GET, &own_a, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK, "{q}");
    assert_eq!(
        q["quota_set"],
        json!({"id": w.a.id.to_string(), "volumes": 2, "gigabytes": 5})
    );
    // The defaults stay the controller's, and B keeps them.
    let (_, _, d) = c
        .send(Method::GET, &format!("{own_a}/defaults"), Some(&a), None)
        .await;
    assert_eq!(
        (
            d["quota_set"]["volumes"].clone(),
            d["quota_set"]["gigabytes"].clone()
        ),
        (json!(10), json!(1000))
    );
    let own_b = format!("{}/os-quota-sets/{}", base(w.b.id), w.b.id);
    let (_, _, q) = c.send(Method::GET, &own_b, Some(&b), None).await;
    assert_eq!(q["quota_set"]["volumes"], 10);

    // A's creations and growths past its own quota: 413 overLimit.
    let vols = format!("{}/volumes", base(w.a.id));
    let create = |size: u32| Some(json!({"volume": {"size": size}}));
    let (status, _, first) = c.send(Method::POST, &vols, Some(&a), create(3)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let (status, _, body) = c.send(Method::POST, &vols, Some(&a), create(3)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(fault(&body), ("overLimit", 413));
    assert!(body.to_string().contains("Quota is 5G"), "{body}");
    let (status, _, _) = c.send(Method::POST, &vols, Some(&a), create(2)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _, body) = c.send(Method::POST, &vols, Some(&a), create(1)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(
        body.to_string()
            .contains("Maximum number of volumes allowed (2) exceeded"),
        "{body}"
    );
    let id = first["volume"]["id"].as_str().unwrap().to_string();
    let extend = format!("{vols}/{id}/action");
    let grow = Some(json!({"os-extend": {"new_size": 4}}));
    let (status, _, body) = c.send(Method::POST, &extend, Some(&a), grow.clone()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(fault(&body), ("overLimit", 413));
    // Its usage shows against it; B's creations are not bound by it.
    let (_, _, q) = c
        .send(Method::GET, &format!("{own_a}?usage=true"), Some(&a), None)
        .await;
    assert_eq!(
        q["quota_set"]["volumes"],
        json!({"limit": 2, "in_use": 2, "reserved": 0, "allocated": 0})
    );
    assert_eq!(q["quota_set"]["gigabytes"]["limit"], 5);
    assert_eq!(q["quota_set"]["gigabytes"]["in_use"], 5);
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("{}/volumes", base(w.b.id)),
            Some(&b),
            create(6),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);

    // Unlimited GiB (-1), the count kept: the growth fits.
    let (status, _, body) = put(json!({"quota_set": {"gigabytes": -1}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"quota_set": {"volumes": 2, "gigabytes": -1}}));
    let (status, _, body) = c.send(Method::POST, &extend, Some(&a), grow).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // A member may not set them, its own project's neither: Cinder's 403.
    let (status, _, body) = c
        .send(
            Method::PUT,
            &own_a,
            Some(&a),
            Some(json!({"quota_set": {"volumes": 20}})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(fault(&body), ("forbidden", 403));
    // Bad figures, keys not kept here, below the usage (Cinder's words), past the maxima: 400s
    // that change nothing.
    for (bad, says) in [
        (json!({"volumes": -2}), "volumes must be >= -1"),
        (json!({"volumes": "many"}), "volumes must be an integer"),
        (json!({"gigabytes": 2.5}), "gigabytes must be an integer"),
        (
            json!({"snapshots": 3}),
            "Bad key(s) in quota set: snapshots",
        ),
        (
            json!({"volumes": 3, "backups": 1, "volumes_lvm": 2}),
            "backups, volumes_lvm",
        ),
        (json!({"per_volume_gigabytes": 1}), "per_volume_gigabytes"),
        (
            json!({"volumes": 1}),
            "Quota volumes limit must be equal or greater than existing resources. Current \
             usage is 2 and the requested limit is 1.",
        ),
        (json!({"volumes": 10_001}), "at most 10000 volumes"),
    ] {
        let (status, _, body) = put(json!({"quota_set": bad.clone()})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(fault(&body), ("badRequest", 400));
        assert!(body.to_string().contains(says), "{bad}: {body}");
    }
    let (status, _, body) = put(json!({"volumes": 3})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, _, q) = c.send(Method::GET, &own_a, Some(&a), None).await;
    assert_eq!(
        (
            q["quota_set"]["volumes"].clone(),
            q["quota_set"]["gigabytes"].clone()
        ),
        (json!(2), json!(-1))
    );
    // A project that is none.
    let nobody = format!(
        "{}/os-quota-sets/{}",
        base(admin_project),
        uuid::Uuid::new_v4()
    );
    let (status, _, body) = c
        .send(
            Method::PUT,
            &nobody,
            Some(&admin),
            Some(json!({"quota_set": {"volumes": 1}})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(fault(&body), ("itemNotFound", 404));
    w.stop().await;
}

/// A volume attached (as the store records it) is neither deleted
/// nor extended: Cinder's 400s, and its attachment shows.
#[tokio::test]
async fn an_attached_volume_is_not_deleted_or_extended() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let vols = format!("{}/volumes", base(w.a.id));
    let (_, _, made) = c
        .send(
            Method::POST,
            &vols,
            Some(&a),
            Some(json!({"volume": {"size": 1}})),
        )
        .await;
    let id: uuid::Uuid = made["volume"]["id"].as_str().unwrap().parse().unwrap();
    let instance = uuid::Uuid::new_v4();
    let change = store::VolumeChange {
        status: Some(store::VolumeStatus::InUse),
        attachment: Some(Some(store::VolumeAttachment {
            id: uuid::Uuid::new_v4(),
            instance,
            device: "/dev/vdb".into(),
            attached: std::time::SystemTime::now(),
            delete_on_termination: false,
        })),
        ..store::VolumeChange::default()
    };
    w.store
        .change_volume(
            store::Scope::All,
            id,
            change,
            store::VolumeLimits::default(),
        )
        .unwrap();
    let one = format!("{vols}/{id}");
    let (_, _, shown) = c.send(Method::GET, &one, Some(&a), None).await;
    assert_eq!(shown["volume"]["status"], "in-use");
    assert_eq!(
        shown["volume"]["attachments"][0]["server_id"],
        instance.to_string()
    );
    assert_eq!(shown["volume"]["attachments"][0]["device"], "/dev/vdb");
    let (status, _, body) = c.send(Method::DELETE, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("Invalid volume"), "{body}");
    let (status, _, body) = c
        .send(
            Method::POST,
            &format!("{one}/action"),
            Some(&a),
            Some(json!({"os-extend": {"new_size": 2}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(fault(&body), ("badRequest", 400));
    w.stop().await;
}

/// A volume whose data is on a node has it removed there before its record goes; a node that
/// cannot remove it leaves the volume `error_deleting`, and a second delete tries again.
#[tokio::test]
async fn a_deleted_volume_leaves_its_node_or_waits_in_error_deleting() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let vols = format!("{}/volumes", base(w.a.id));
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (_, _, made) = c
            .send(
                Method::POST,
                &vols,
                Some(&a),
                Some(json!({"volume": {"size": 1}})),
            )
            .await;
        ids.push(
            made["volume"]["id"]
                .as_str()
                .unwrap()
                .parse::<uuid::Uuid>()
                .unwrap(),
        );
    }
    // The first is on a node (as a first attach leaves it), the second on none.
    let node = uuid::Uuid::new_v4();
    let change = store::VolumeChange {
        node: Some(Some(node)),
        ..store::VolumeChange::default()
    };
    w.store
        .change_volume(
            store::Scope::All,
            ids[0],
            change,
            store::VolumeLimits::default(),
        )
        .unwrap();

    // The node cannot be reached: kept, error_deleting.
    w.cluster.set_connected(false);
    let one = format!("{vols}/{}", ids[0]);
    let (status, _, body) = c.send(Method::DELETE, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (_, _, shown) = c.send(Method::GET, &one, Some(&a), None).await;
    assert_eq!(shown["volume"]["status"], "error_deleting");
    assert!(w.cluster.removed_volume_data().is_empty());
    // Again, reachable: removed from the node, then gone.
    w.cluster.set_connected(true);
    let (status, _, body) = c.send(Method::DELETE, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(w.cluster.removed_volume_data(), vec![(node, ids[0])]);
    let (status, _, _) = c.send(Method::GET, &one, Some(&a), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // On no node: nothing to remove there.
    let two = format!("{vols}/{}", ids[1]);
    let (status, _, _) = c.send(Method::DELETE, &two, Some(&a), None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(w.cluster.removed_volume_data().len(), 1);
    w.stop().await;
}
