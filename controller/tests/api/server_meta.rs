//! Server metadata, locks, `os-resetState`, `forceDelete`, the listing's filters and sorting,
//! and what a create checks (networks, access addresses, metadata), over HTTP.

use axum::http::{Method, StatusCode};
use serde_json::{Map, Value, json};
use store::{InstanceState, Scope};
use uuid::Uuid;

use crate::support::World;

#[tokio::test]
async fn server_metadata_is_kept_changed_and_bounded_as_nova_s() {
    let w = World::start().await;
    let a = w.token_a().await;
    let c = w.client();
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(
                json!({"server": {"name": "m", "flavorRef": w.flavor.id, "imageRef": w.image.id,
                "metadata": {"role": "web", "tier": "1"}}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = body["server"]["id"].as_str().unwrap().to_string();
    let server = format!("/compute/v2.1/servers/{id}");
    let meta = format!("{server}/metadata");
    let (_, _, shown) = c.send(Method::GET, &server, Some(&a), None).await;
    // Who created it, as Nova's `user_id`.
    assert_eq!(shown["server"]["user_id"], w.a.user.to_string());
    assert_eq!(
        shown["server"]["metadata"],
        json!({"role": "web", "tier": "1"})
    );
    let (status, _, all) = c.send(Method::GET, &meta, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all, json!({"metadata": {"role": "web", "tier": "1"}}));

    // POST merges, PUT replaces, the item routes read, set and delete one.
    let (status, _, merged) = c
        .send(
            Method::POST,
            &meta,
            Some(&a),
            Some(json!({"metadata": {"tier": "2", "zone": "a b"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{merged}");
    assert_eq!(
        merged["metadata"],
        json!({"role": "web", "tier": "2", "zone": "a b"})
    );
    let (status, _, item) = c
        .send(Method::GET, &format!("{meta}/zone"), Some(&a), None)
        .await;
    assert_eq!(
        (status, item),
        (StatusCode::OK, json!({"meta": {"zone": "a b"}}))
    );
    let (status, _, item) = c
        .send(
            Method::PUT,
            &format!("{meta}/os"),
            Some(&a),
            Some(json!({"meta": {"os": "linux"}})),
        )
        .await;
    assert_eq!(
        (status, item),
        (StatusCode::OK, json!({"meta": {"os": "linux"}}))
    );
    let (status, _, _) = c
        .send(Method::DELETE, &format!("{meta}/tier"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, _, all) = c.send(Method::GET, &meta, Some(&a), None).await;
    assert_eq!(
        all["metadata"],
        json!({"role": "web", "zone": "a b", "os": "linux"})
    );
    let (status, _, replaced) = c
        .send(
            Method::PUT,
            &meta,
            Some(&a),
            Some(json!({"metadata": {"only": "this"}})),
        )
        .await;
    assert_eq!(
        (status, &replaced["metadata"]),
        (StatusCode::OK, &json!({"only": "this"}))
    );

    // Nova's answers for what it refuses; nothing changes.
    let (status, _, body) = c
        .send(Method::GET, &format!("{meta}/gone"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["itemNotFound"]["message"],
        "Metadata item was not found"
    );
    let (status, _, _) = c
        .send(Method::DELETE, &format!("{meta}/gone"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = c
        .send(
            Method::PUT,
            &format!("{meta}/k"),
            Some(&a),
            Some(json!({"meta": {"other": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["badRequest"]["message"],
        "Request body and URI mismatch"
    );
    let (status, _, body) = c
        .send(
            Method::PUT,
            &format!("{meta}/k"),
            Some(&a),
            Some(json!({"meta": {"k": "v", "l": "w"}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["badRequest"]["message"],
        "Request body contains too many items"
    );
    for bad in [
        json!({"metadata": {"k/v": "x"}}),
        json!({"metadata": {"k": 1}}),
        json!({"metadata": {"k": "v".repeat(256)}}),
        json!({"metadata": []}),
        json!({"nope": {}}),
    ] {
        let (status, _, body) = c
            .send(Method::POST, &meta, Some(&a), Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let many: Map<String, Value> = (0..128).map(|n| (format!("k{n}"), json!("v"))).collect();
    let (status, _, body) = c
        .send(
            Method::POST,
            &meta,
            Some(&a),
            Some(json!({"metadata": many})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["forbidden"]["message"],
        "Maximum number of metadata items exceeds 128"
    );
    let (_, _, all) = c.send(Method::GET, &meta, Some(&a), None).await;
    assert_eq!(all["metadata"], json!({"only": "this"}));

    // Not while the server builds (409), not another project's (404), an admin's any.
    let uuid: Uuid = id.parse().unwrap();
    w.cluster.set_state(uuid, InstanceState::Pending).unwrap();
    let (status, _, body) = c
        .send(
            Method::POST,
            &meta,
            Some(&a),
            Some(json!({"metadata": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(
        body["conflictingRequest"]["message"],
        format!("Cannot 'update_metadata' instance {id} while it is in vm_state building")
    );
    w.cluster.set_state(uuid, InstanceState::Exited).unwrap();
    let b = w.token_b().await;
    let (status, _, _) = c.send(Method::GET, &meta, Some(&b), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = c
        .send(
            Method::POST,
            &meta,
            Some(&b),
            Some(json!({"metadata": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let admin = w.admin_token().await;
    let (status, _, body) = c
        .send(
            Method::POST,
            &meta,
            Some(&admin),
            Some(json!({"metadata": {"by": "admin"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["metadata"], json!({"only": "this", "by": "admin"}));
    w.stop().await;
}

async fn action(w: &World, token: &str, id: &str, body: Value) -> (StatusCode, Value) {
    let (status, _, body) = w
        .client()
        .send(
            Method::POST,
            &format!("/compute/v2.1/servers/{id}/action"),
            Some(token),
            Some(body),
        )
        .await;
    (status, body)
}

#[tokio::test]
async fn a_locked_server_refuses_its_members_but_not_admins() {
    let w = World::start().await;
    let a = w.token_a().await;
    let admin = w.admin_token().await;
    let c = w.client();
    let id = w.server_a(&a, "locked").await;
    let uuid: Uuid = id.parse().unwrap();

    assert_eq!(
        action(&w, &a, &id, json!({"lock": null})).await.0,
        StatusCode::ACCEPTED
    );
    let locked = format!("Instance {id} is locked");
    for body in [
        json!({"os-stop": null}),
        json!({"reboot": {"type": "SOFT"}}),
        json!({"pause": null}),
        json!({"forceDelete": null}),
    ] {
        let (status, answer) = action(&w, &a, &id, body.clone()).await;
        assert_eq!(status, StatusCode::CONFLICT, "{body}: {answer}");
        assert_eq!(answer["conflictingRequest"]["message"], locked.as_str());
    }
    let server = format!("/compute/v2.1/servers/{id}");
    let (status, _, answer) = c.send(Method::DELETE, &server, Some(&a), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("{server}/metadata"),
            Some(&a),
            Some(json!({"metadata": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // The native API refuses it too.
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("/cumulo/v1/instances/{id}/stop"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    // Renaming is not refused (as Nova's).
    let (status, _, _) = c
        .send(
            Method::PUT,
            &server,
            Some(&a),
            Some(json!({"server": {"name": "renamed"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // An admin (of another project) acts on it.
    let (status, body) = action(&w, &admin, &id, json!({"os-stop": null})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        w.store.instance(Scope::All, uuid).unwrap().state,
        InstanceState::Exited
    );
    // The owner lifts its own lock; an admin's lock is lifted by an admin only.
    assert_eq!(
        action(&w, &a, &id, json!({"unlock": null})).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        action(&w, &a, &id, json!({"os-start": null})).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        action(&w, &admin, &id, json!({"lock": null})).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        w.store.instance(Scope::All, uuid).unwrap().locked_by,
        Some(store::LockedBy::Admin)
    );
    let (status, body) = action(&w, &a, &id, json!({"unlock": null})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // The owner locking it again does not make the lock its own.
    assert_eq!(
        action(&w, &a, &id, json!({"lock": null})).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        w.store.instance(Scope::All, uuid).unwrap().locked_by,
        Some(store::LockedBy::Admin)
    );
    let (status, body) = action(&w, &a, &id, json!({"unlock": null})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        action(&w, &admin, &id, json!({"unlock": null})).await.0,
        StatusCode::ACCEPTED
    );
    assert_eq!(w.store.instance(Scope::All, uuid).unwrap().locked_by, None);
    // Another project's member sees no server, whatever the action.
    let b = w.token_b().await;
    for body in [json!({"lock": null}), json!({"nonsense": 1})] {
        let (status, answer) = action(&w, &b, &id, body.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}: {answer}");
    }
    let (status, _) = action(&w, &a, &Uuid::new_v4().to_string(), json!({"nonsense": 1})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    w.stop().await;
}

#[tokio::test]
async fn an_admin_resets_a_state_and_a_force_delete_deletes() {
    let w = World::start().await;
    let a = w.token_a().await;
    let admin = w.admin_token().await;
    let id = w.server_a(&a, "reset").await;
    let uuid: Uuid = id.parse().unwrap();
    let (status, body) = action(&w, &a, &id, json!({"os-resetState": {"state": "error"}})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = action(
        &w,
        &admin,
        &id,
        json!({"os-resetState": {"state": "deleted"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = action(
        &w,
        &admin,
        &id,
        json!({"os-resetState": {"state": "error"}}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let server = format!("/compute/v2.1/servers/{id}");
    let (_, _, shown) = w.client().send(Method::GET, &server, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "ERROR");
    let (status, _) = action(
        &w,
        &admin,
        &id,
        json!({"os-resetState": {"state": "active"}}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, _, shown) = w.client().send(Method::GET, &server, Some(&a), None).await;
    assert_eq!(shown["server"]["status"], "ACTIVE");

    let (status, body) = action(&w, &a, &id, json!({"forceDelete": null})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(matches!(
        w.store.instance(Scope::All, uuid),
        Err(store::StoreError::NotFound { .. })
    ));
    w.stop().await;
}

/// A `POST /servers` body: the world's flavor and image, and each of `fields` in turn.
pub(crate) fn server_body(w: &World, fields: &[&Value]) -> Value {
    let mut server = json!({"flavorRef": w.flavor.id, "imageRef": w.image.id});
    for (k, v) in fields.iter().flat_map(|f| f.as_object().unwrap()) {
        server[k] = v.clone();
    }
    json!({"server": server})
}

/// The names of a listing.
async fn names(w: &World, token: &str, query: &str) -> (StatusCode, Vec<String>) {
    listed(w, token, query, "name").await
}

/// The `field` of each server `GET /servers/detail{query}` lists for `token`, in order (and
/// the status).
pub(crate) async fn listed(
    w: &World,
    token: &str,
    query: &str,
    field: &str,
) -> (StatusCode, Vec<String>) {
    let (status, _, body) = w
        .client()
        .send(
            Method::GET,
            &format!("/compute/v2.1/servers/detail{query}"),
            Some(token),
            None,
        )
        .await;
    let values = body["servers"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|s| s[field].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    (status, values)
}

#[tokio::test]
async fn server_listings_filter_sort_and_page_as_nova_s() {
    let w = World::start().await;
    let a = w.token_a().await;
    let admin = w.admin_token().await;
    let mut ids = Vec::new();
    for name in ["web-1", "web-2", "db-1", "webby"] {
        ids.push(w.server_a(&a, name).await);
    }
    let db: Uuid = ids[2].parse().unwrap();
    w.cluster.set_state(db, InstanceState::Exited).unwrap();

    let ok = |names: Vec<&str>| {
        (
            StatusCode::OK,
            names.into_iter().map(String::from).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        names(&w, &a, "").await,
        ok(vec!["web-1", "web-2", "db-1", "webby"])
    );
    assert_eq!(
        names(&w, &a, "?name=%5Eweb-%5B0-9%5D%24").await,
        ok(vec!["web-1", "web-2"])
    );
    assert_eq!(
        names(&w, &a, "?name=b-").await,
        ok(vec!["web-1", "web-2", "db-1"])
    );
    assert_eq!(names(&w, &a, "?status=SHUTOFF").await, ok(vec!["db-1"]));
    assert_eq!(names(&w, &a, "?status=NOPE").await, ok(vec![]));
    let flavor = w.flavor.id;
    assert_eq!(names(&w, &a, &format!("?flavor={flavor}")).await.1.len(), 4);
    assert_eq!(
        names(&w, &a, &format!("?flavor={}", Uuid::new_v4())).await,
        ok(vec![])
    );
    assert_eq!(
        names(&w, &a, &format!("?image={}", w.image.id))
            .await
            .1
            .len(),
        4
    );
    assert_eq!(names(&w, &a, "?limit=0").await, ok(vec![]));
    assert_eq!(
        names(&w, &a, "?sort_key=display_name&sort_dir=asc").await,
        ok(vec!["db-1", "web-1", "web-2", "webby"])
    );
    assert_eq!(
        names(&w, &a, "?sort_key=display_name").await,
        ok(vec!["webby", "web-2", "web-1", "db-1"])
    );
    // Sorted pages follow each other.
    let (_, _, page) = w
        .client()
        .send(
            Method::GET,
            "/compute/v2.1/servers?sort_key=display_name&sort_dir=asc&limit=2",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(page["servers"].as_array().unwrap().len(), 2);
    let next = page["servers_links"][0]["href"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(next.contains("sort_key=display_name"), "{next}");
    let marker = page["servers"][1]["id"].as_str().unwrap();
    assert_eq!(
        names(
            &w,
            &a,
            &format!("?sort_key=display_name&sort_dir=asc&limit=2&marker={marker}")
        )
        .await,
        ok(vec!["web-2", "webby"])
    );
    // changes-since: an ISO 8601 time; a bad one is Nova's 400.
    assert_eq!(
        names(&w, &a, "?changes-since=2000-01-01T00:00:00Z")
            .await
            .1
            .len(),
        4
    );
    assert_eq!(
        names(&w, &a, "?changes-since=2999-01-01T00:00:00Z").await,
        ok(vec![])
    );
    let (status, _, body) = w
        .client()
        .send(
            Method::GET,
            "/compute/v2.1/servers?changes-since=yesterday",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["badRequest"]["message"],
        "Invalid filter field: changes-since."
    );
    for bad in [
        "?sort_key=password",
        "?sort_dir=up",
        "?name=%5B",
        "?limit=x",
    ] {
        assert_eq!(names(&w, &a, bad).await.0, StatusCode::BAD_REQUEST, "{bad}");
    }
    // Admins: all projects, one project, one host; a member's admin filters are dropped.
    let b = w.token_b().await;
    w.server_a(&a, "more").await;
    let (status, body) = {
        let (s, _, b) = w
            .client()
            .send(
                Method::POST,
                "/compute/v2.1/servers",
                Some(&b),
                Some(json!({"server": {"name": "b-1", "flavorRef": w.flavor.id, "imageRef": w.image.id}})),
            )
            .await;
        (s, b)
    };
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(names(&w, &admin, "?all_tenants=1").await.1.len(), 6);
    assert_eq!(
        names(&w, &admin, &format!("?all_tenants=1&tenant_id={}", w.b.id)).await,
        ok(vec!["b-1"])
    );
    assert_eq!(
        names(&w, &a, &format!("?tenant_id={}", w.b.id))
            .await
            .1
            .len(),
        5
    );
    let node = w.store.instance(Scope::All, db).unwrap().node;
    if let Some(node) = node {
        assert_eq!(
            names(&w, &admin, &format!("?all_tenants=1&host={node}"))
                .await
                .1
                .len(),
            6
        );
    }
    assert_eq!(
        names(
            &w,
            &admin,
            &format!("?all_tenants=1&host={}", Uuid::new_v4())
        )
        .await,
        ok(vec![])
    );
    w.stop().await;
}

#[tokio::test]
async fn a_create_refuses_networks_and_addresses_it_cannot_honour() {
    let w = World::start().await;
    let a = w.token_a().await;
    let c = w.client();
    let first = w.server_a(&a, "first").await;
    let network = w
        .store
        .instance(Scope::All, first.parse().unwrap())
        .unwrap();
    let own = w
        .store
        .subnets(Scope::Tenant(w.a.id))
        .unwrap()
        .into_iter()
        .find(|s| s.cidr == network.subnet)
        .unwrap()
        .id;
    let create = |extra: Value| server_body(&w, &[&json!({"name": "n"}), &extra]);
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(create(json!({"networks": [{"uuid": own}]}))),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let unknown = Uuid::new_v4();
    for (extra, message) in [
        (
            json!({"networks": [{"uuid": unknown}]}),
            format!("Network {unknown} could not be found."),
        ),
        (json!({"networks": [{"port": unknown}]}), String::new()),
        (json!({"networks": "none"}), String::new()),
        (
            json!({"accessIPv4": "1.2.3"}),
            "Invalid input for field/attribute accessIPv4. Value: 1.2.3. '1.2.3' is not a 'ipv4'"
                .into(),
        ),
        (json!({"metadata": {"k": 5}}), String::new()),
    ] {
        let (status, _, body) = c
            .send(
                Method::POST,
                "/compute/v2.1/servers",
                Some(&a),
                Some(create(extra.clone())),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        if !message.is_empty() {
            assert_eq!(body["badRequest"]["message"], message.as_str(), "{extra}");
        }
    }
    // Another project's network is not found for this one.
    let b = w.token_b().await;
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&b),
            Some(create(json!({"networks": [{"uuid": own}]}))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    w.stop().await;
}
