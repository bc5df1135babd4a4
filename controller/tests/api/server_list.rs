//! Reservation ids (every create's, shared by the servers of a multi-create; Nova's
//! `return_reservation_id`; the `reservation_id` filter) and listings sorted by several keys,
//! over HTTP and through the real `openstack` CLI.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::{InstanceState, Scope};
use uuid::Uuid;

use crate::openstack::{json as cli_json, ok, openstack_or_skip, tenant_cli};
use crate::support::World;

/// The ids `GET /servers/detail{query}` lists for `token`, in order (and the status).
async fn listed(w: &World, token: &str, query: &str) -> (StatusCode, Vec<String>) {
    crate::server_meta::listed(w, token, query, "id").await
}

fn is_novas_reservation_id(id: &str) -> bool {
    id.len() == 10
        && id.starts_with("r-")
        && id[2..]
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

fn reservation_of(w: &World, id: &str) -> String {
    w.store
        .instance(Scope::All, id.parse().unwrap())
        .unwrap()
        .reservation
        .unwrap()
}

#[tokio::test]
async fn a_create_makes_a_reservation_that_its_servers_share_and_listings_filter_by() {
    let w = World::start().await;
    let a = w.token_a().await;
    let c = w.client();
    let multi = json!({"name": "multi", "min_count": 2, "max_count": 2});
    let create = |extra: Value| crate::server_meta::server_body(&w, &[&multi, &extra]);
    // `return_reservation_id`: the reservation alone, 202.
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(create(json!({"return_reservation_id": "True"}))),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    let reservation = body["reservation_id"].as_str().unwrap().to_string();
    assert!(is_novas_reservation_id(&reservation), "{reservation}");
    // Without it, the first server, whose reservation is another.
    let single = w.server_a(&a, "single").await;
    let own = reservation_of(&w, &single);
    assert!(is_novas_reservation_id(&own) && own != reservation, "{own}");
    // `false` is a create as any.
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(create(
                json!({"return_reservation_id": false, "max_count": 1,
                "min_count": 1}),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert!(body["server"]["id"].is_string(), "{body}");
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(create(json!({"return_reservation_id": "maybe"}))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // The filter: the two servers of the multi-create, exactly.
    let (status, two) = listed(&w, &a, &format!("?reservation_id={reservation}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(two.len(), 2, "{two:?}");
    for id in &two {
        assert_eq!(reservation_of(&w, id), reservation);
    }
    assert_eq!(
        listed(&w, &a, &format!("?reservation_id={own}")).await.1,
        vec![single.clone()]
    );
    assert_eq!(
        listed(&w, &a, "?reservation_id=r-00000000").await.1.len(),
        0
    );
    // Another project's member does not see them; an admin across projects does.
    let b = w.token_b().await;
    assert_eq!(
        listed(&w, &b, &format!("?reservation_id={reservation}"))
            .await
            .1
            .len(),
        0
    );
    let admin = w.admin_token().await;
    assert_eq!(
        listed(
            &w,
            &admin,
            &format!("?all_tenants=1&reservation_id={reservation}")
        )
        .await
        .1
        .len(),
        2
    );

    // Nova shows it in a server from 2.3 only (`OS-EXT-SRV-ATTR:reservation_id`): not at 2.1,
    // not even to admins. The native API shows it.
    for token in [&a, &admin] {
        let (_, _, shown) = c
            .send(
                Method::GET,
                &format!("/compute/v2.1/servers/{single}"),
                Some(token),
                None,
            )
            .await;
        let fields = shown["server"].as_object().unwrap();
        assert!(
            !fields.keys().any(|k| k.contains("reservation_id")),
            "{shown}"
        );
    }
    let (status, _, native) = c
        .send(
            Method::GET,
            &format!("/cumulo/v1/instances/{single}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{native}");
    assert_eq!(native["reservation_id"], own);
    w.stop().await;
}

#[tokio::test]
async fn listings_sort_by_several_keys_paired_with_their_directions_as_nova_s() {
    let w = World::start().await;
    let a = w.token_a().await;
    // Two names, each with one server stopped: each key decides.
    let mut by = std::collections::HashMap::new();
    for (name, stopped) in [("b", false), ("a", true), ("b", true), ("a", false)] {
        let id = w.server_a(&a, name).await;
        if stopped {
            let uuid: Uuid = id.parse().unwrap();
            w.cluster.set_state(uuid, InstanceState::Exited).unwrap();
        }
        by.insert((name, stopped), id);
    }
    let order = |wanted: &[(&'static str, bool)]| -> Vec<String> {
        wanted.iter().map(|k| by[k].clone()).collect()
    };
    // vm_state: `stopped` sorts after `active` (or `building`) ascending.
    assert_eq!(
        listed(
            &w,
            &a,
            "?sort_key=display_name&sort_dir=asc&sort_key=vm_state&sort_dir=desc"
        )
        .await,
        (
            StatusCode::OK,
            order(&[("a", true), ("a", false), ("b", true), ("b", false)])
        )
    );
    // A key without a direction takes the first one given.
    assert_eq!(
        listed(
            &w,
            &a,
            "?sort_key=display_name&sort_dir=asc&sort_key=vm_state"
        )
        .await
        .1,
        order(&[("a", false), ("a", true), ("b", false), ("b", true)])
    );
    // No direction at all: `desc` for every key.
    assert_eq!(
        listed(&w, &a, "?sort_key=display_name&sort_key=vm_state")
            .await
            .1,
        order(&[("b", true), ("b", false), ("a", true), ("a", false)])
    );
    // Directions are paired with keys in order, wherever they stand in the query.
    assert_eq!(
        listed(
            &w,
            &a,
            "?sort_key=display_name&sort_key=vm_state&sort_dir=desc&sort_dir=asc"
        )
        .await
        .1,
        order(&[("b", false), ("b", true), ("a", false), ("a", true)])
    );

    // Pages of two follow each other, the next link keeping every key and direction.
    let (status, _, page) = w
        .client()
        .send(
            Method::GET,
            "/compute/v2.1/servers?sort_key=display_name&sort_dir=asc&sort_key=vm_state\
             &sort_dir=desc&limit=2",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let first: Vec<String> = page["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(first, order(&[("a", true), ("a", false)]));
    let next = page["servers_links"][0]["href"].as_str().unwrap();
    let query = &next[next.find('?').unwrap()..];
    for part in [
        "sort_key=display_name",
        "sort_key=vm_state",
        "sort_dir=asc",
        "sort_dir=desc",
    ] {
        assert!(query.contains(part), "{next}");
    }
    assert_eq!(
        listed(&w, &a, query).await.1,
        order(&[("b", true), ("b", false)])
    );

    // An unknown key (first or later), more directions than keys, a bad direction, too many
    // keys: 400s in Nova's shape.
    let many = "&sort_key=uuid".repeat(17);
    for bad in [
        "?sort_key=display_name&sort_key=password".to_string(),
        "?sort_key=display_name&sort_dir=asc&sort_dir=desc".to_string(),
        "?sort_key=display_name&sort_dir=asc&sort_key=uuid&sort_dir=up".to_string(),
        format!("?sort_dir=asc{many}"),
    ] {
        let (status, _, body) = w
            .client()
            .send(
                Method::GET,
                &format!("/compute/v2.1/servers{bad}"),
                Some(&a),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["badRequest"]["message"].is_string(), "{body}");
    }
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_lists_the_servers_of_one_reservation() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin, &world, &world.a);
    ok(
        &alice,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "--min", "2", "--max",
            "2", "--wait", "pair",
        ],
    )
    .await;
    let single = cli_json(
        &alice,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "--wait", "single",
        ],
    )
    .await;
    let single = single["id"].as_str().unwrap().to_string();
    let pair: Vec<Value> = cli_json(&alice, &["server", "list", "--name", "pair"])
        .await
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(pair.len(), 2, "{pair:?}");
    let reservation = reservation_of(&world, pair[0]["ID"].as_str().unwrap());
    assert_eq!(
        reservation_of(&world, pair[1]["ID"].as_str().unwrap()),
        reservation
    );
    let listed = cli_json(
        &alice,
        &["server", "list", "--reservation-id", &reservation],
    )
    .await;
    let mut ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["ID"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut wanted: Vec<&str> = pair.iter().map(|s| s["ID"].as_str().unwrap()).collect();
    wanted.sort_unstable();
    assert_eq!(ids, wanted);
    let own = reservation_of(&world, &single);
    let listed = cli_json(&alice, &["server", "list", "--reservation-id", &own]).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["ID"], single.as_str());
    world.stop().await;
}
