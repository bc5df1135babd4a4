//! Private flavors and their access lists over HTTP (Nova's `os-flavor-access`): who sees a
//! private flavor in the Compute and native APIs, server create and resize with one, the
//! `is_public` list filter, and the access list's routes and errors.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::{InstanceChange, InstanceState, Scope};
use uuid::Uuid;

use crate::support::{Client, World};

const FLAVORS: &str = "/compute/v2.1/flavors";

/// Creates a flavor as the admin; returns its id.
async fn flavor(c: &Client, admin: &str, name: &str, is_public: bool) -> String {
    let (status, body) = c
        .call(
            Method::POST,
            FLAVORS,
            admin,
            Some(
                json!({"flavor": {"name": name, "ram": 256, "vcpus": 1, "disk": 1,
                "os-flavor-access:is_public": is_public}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["flavor"]["os-flavor-access:is_public"], is_public);
    body["flavor"]["id"].as_str().unwrap().to_string()
}

fn names(body: &Value) -> Vec<&str> {
    body["flavors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect()
}

/// `POST /flavors/{id}/action`.
async fn act(c: &Client, token: &str, id: &str, action: &str, tenant: &str) -> (StatusCode, Value) {
    c.call(
        Method::POST,
        &format!("{FLAVORS}/{id}/action"),
        token,
        Some(json!({ action: {"tenant": tenant} })),
    )
    .await
}

fn access_of(id: &str, tenants: &[Uuid]) -> Value {
    let entries: Vec<Value> = tenants
        .iter()
        .map(|t| json!({"flavor_id": id, "tenant_id": t.to_string()}))
        .collect();
    json!({ "flavor_access": entries })
}

/// A private flavor is seen (listed, shown, its specs read) by admins and the projects on its
/// access list only; the list is kept by `addTenantAccess` and `removeTenantAccess` with Nova's
/// answers and errors; members may not touch it.
#[tokio::test]
async fn a_private_flavor_is_seen_by_the_projects_given_access() {
    let w = World::start().await;
    let c = w.client();
    let (admin, a, b) = (w.admin_token().await, w.token_a().await, w.token_b().await);
    let public = flavor(&c, &admin, "shared", true).await;
    let id = flavor(&c, &admin, "hidden", false).await;
    let missing = format!("Flavor {id} could not be found.");
    for token in [&a, &b] {
        let (_, listed) = c.call(Method::GET, FLAVORS, token, None).await;
        assert_eq!(names(&listed), ["m1.tiny", "shared"], "{listed}");
        let (status, body) = c
            .call(Method::GET, &format!("{FLAVORS}/{id}"), token, None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["itemNotFound"]["message"], missing);
        let (status, _) = c
            .call(
                Method::GET,
                &format!("{FLAVORS}/{id}/os-extra_specs"),
                token,
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, shown) = c
        .call(Method::GET, &format!("{FLAVORS}/{id}"), &admin, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["flavor"]["os-flavor-access:is_public"], false);

    // The access list: admins only; none for a public flavor.
    let access = format!("{FLAVORS}/{id}/os-flavor-access");
    let (status, body) = c.call(Method::GET, &access, &a, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        act(&c, &a, &id, "addTenantAccess", &w.a.id.to_string())
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let (status, body) = c.call(Method::GET, &access, &admin, None).await;
    assert_eq!((status, body), (StatusCode::OK, access_of(&id, &[])));
    let (status, body) = c
        .call(
            Method::GET,
            &format!("{FLAVORS}/{public}/os-flavor-access"),
            &admin,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["itemNotFound"]["message"],
        "Access list not available for public flavors."
    );

    let (status, body) = act(&c, &admin, &id, "addTenantAccess", &w.a.id.to_string()).await;
    assert_eq!((status, body), (StatusCode::OK, access_of(&id, &[w.a.id])));
    let (status, body) = act(&c, &admin, &id, "addTenantAccess", &w.a.id.to_string()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["conflictingRequest"]["message"],
        format!(
            "Flavor access already exists for flavor {id} and project {} combination.",
            w.a.id
        )
    );
    let (status, body) = act(&c, &admin, &public, "addTenantAccess", &w.a.id.to_string()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["conflictingRequest"]["message"],
        "Can not add access to a public flavor."
    );
    let nobody = Uuid::new_v4().to_string();
    for (action, project) in [
        ("addTenantAccess", nobody.as_str()),
        ("removeTenantAccess", nobody.as_str()),
        ("addTenantAccess", "not-a-project"),
    ] {
        let (status, body) = act(&c, &admin, &id, action, project).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{action} {project}");
        assert_eq!(
            body["badRequest"]["message"],
            format!("Project ID {project} is not a valid project.")
        );
    }
    let (status, body) = act(&c, &admin, &id, "removeTenantAccess", &w.b.id.to_string()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["itemNotFound"]["message"],
        format!("Flavor access not found for {id} / {} combination.", w.b.id)
    );
    let unknown = Uuid::new_v4();
    let (status, body) = act(
        &c,
        &admin,
        &unknown.to_string(),
        "addTenantAccess",
        &w.a.id.to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["itemNotFound"]["message"],
        format!("Flavor {unknown} could not be found.")
    );
    for bad in [
        json!({"grantAccess": {"tenant": w.a.id}}),
        json!({"addTenantAccess": {"project": w.a.id}}),
        json!({"addTenantAccess": {"tenant": ""}}),
    ] {
        let (status, body) = c
            .call(
                Method::POST,
                &format!("{FLAVORS}/{id}/action"),
                &admin,
                Some(bad.clone()),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    // A sees it now; B does not.
    let (_, listed) = c
        .call(Method::GET, &format!("{FLAVORS}/detail"), &a, None)
        .await;
    assert_eq!(names(&listed), ["hidden", "m1.tiny", "shared"]);
    assert_eq!(listed["flavors"][0]["os-flavor-access:is_public"], false);
    let (status, _) = c
        .call(Method::GET, &format!("{FLAVORS}/{id}"), &a, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, listed) = c.call(Method::GET, FLAVORS, &b, None).await;
    assert_eq!(names(&listed), ["m1.tiny", "shared"]);
    let (status, body) = act(&c, &admin, &id, "addTenantAccess", &w.b.id.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let mut both = [w.a.id, w.b.id];
    both.sort();
    assert_eq!(body, access_of(&id, &both));
    let (status, body) = act(&c, &admin, &id, "removeTenantAccess", &w.a.id.to_string()).await;
    assert_eq!((status, body), (StatusCode::OK, access_of(&id, &[w.b.id])));
    let (status, _) = c
        .call(Method::GET, &format!("{FLAVORS}/{id}"), &a, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = c
        .call(Method::GET, &format!("{FLAVORS}/{id}"), &b, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    w.stop().await;
}

/// The names `GET /flavors{query}` lists for `token`.
async fn listed(c: &Client, token: &str, query: &str) -> Vec<String> {
    let (status, body) = c
        .call(Method::GET, &format!("{FLAVORS}{query}"), token, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{query}: {body}");
    names(&body).iter().map(|n| n.to_string()).collect()
}

/// The `is_public` filter is an admin's: absent or true, the public flavors and the private
/// ones the admin's project has access to; `none`, all; false, the private ones; anything else
/// a 400. A member's list ignores it. The native API shows each caller what it sees.
#[tokio::test]
async fn the_is_public_filter_is_nova_s() {
    let w = World::start().await;
    let c = w.client();
    let (admin, a) = (w.admin_token().await, w.token_a().await);
    let hidden = flavor(&c, &admin, "hidden", false).await;
    let granted = flavor(&c, &admin, "granted", false).await;
    act(&c, &admin, &granted, "addTenantAccess", &w.a.id.to_string()).await;
    let admin_project = w
        .store
        .tenants()
        .unwrap()
        .into_iter()
        .find(|t| t.name == controller::api::testing::ADMIN_PROJECT)
        .unwrap()
        .id;
    let mine = flavor(&c, &admin, "mine", false).await;
    act(
        &c,
        &admin,
        &mine,
        "addTenantAccess",
        &admin_project.to_string(),
    )
    .await;
    assert_eq!(listed(&c, &admin, "").await, ["m1.tiny", "mine"]);
    assert_eq!(
        listed(&c, &admin, "?is_public=True").await,
        ["m1.tiny", "mine"]
    );
    assert_eq!(
        listed(&c, &admin, "?is_public=None").await,
        ["granted", "hidden", "m1.tiny", "mine"]
    );
    assert_eq!(
        listed(&c, &admin, "?is_public=false").await,
        ["granted", "hidden", "mine"]
    );
    let (status, body) = c
        .call(
            Method::GET,
            &format!("{FLAVORS}?is_public=maybe"),
            &admin,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["badRequest"]["message"],
        "Invalid is_public filter [maybe]"
    );
    for query in [
        "",
        "?is_public=none",
        "?is_public=false",
        "?is_public=maybe",
    ] {
        assert_eq!(
            listed(&c, &a, query).await,
            ["granted", "m1.tiny"],
            "{query}"
        );
    }
    // The native API: the same rule.
    let (_, body) = c.call(Method::GET, "/cumulo/v1/flavors", &a, None).await;
    assert_eq!(names(&body), ["granted", "m1.tiny"]);
    let (status, _) = c
        .call(
            Method::GET,
            &format!("/cumulo/v1/flavors/{hidden}"),
            &a,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = c
        .call(
            Method::GET,
            &format!("/cumulo/v1/flavors/{hidden}"),
            &admin,
            None,
        )
        .await;
    assert_eq!(
        (status, &body["is_public"]),
        (StatusCode::OK, &json!(false))
    );
    w.stop().await;
}

/// A server of a private flavor is made by a project on its access list; for any other the
/// flavor is unknown (400), on the Compute and the native API, and so is a resize to it.
#[tokio::test]
async fn only_projects_with_access_boot_or_resize_to_a_private_flavor() {
    let w = World::start().await;
    let c = w.client();
    let (admin, a, b) = (w.admin_token().await, w.token_a().await, w.token_b().await);
    let id = flavor(&c, &admin, "hidden", false).await;
    act(&c, &admin, &id, "addTenantAccess", &w.a.id.to_string()).await;
    let create = json!({"server": {"name": "s", "flavorRef": id, "imageRef": w.image.id}});
    let (status, body) = c
        .call(
            Method::POST,
            "/compute/v2.1/servers",
            &b,
            Some(create.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["badRequest"]["message"],
        format!("Flavor {id} could not be found.")
    );
    let (status, body) = c
        .call(Method::POST, "/compute/v2.1/servers", &a, Some(create))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // B's server, stopped on a node, may not be resized to it; A's workload of it (made by
    // the create) is not B's to launch either.
    let server = w.server_b_stopped(&b).await;
    let (status, body) = c
        .call(
            Method::POST,
            &format!("/compute/v2.1/servers/{server}/action"),
            &b,
            Some(json!({"resize": {"flavorRef": id}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = c
        .call(
            Method::POST,
            &format!("/cumulo/v1/instances/{server}/resize"),
            &b,
            Some(json!({"flavor": id})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Given access, B resizes to it.
    act(&c, &admin, &id, "addTenantAccess", &w.b.id.to_string()).await;
    let (status, body) = c
        .call(
            Method::POST,
            &format!("/compute/v2.1/servers/{server}/action"),
            &b,
            Some(json!({"resize": {"flavorRef": id}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    w.stop().await;
}

/// A project that goes leaves the access lists; a flavor that goes takes its list and its
/// specs, so a new flavor of its name has neither.
#[tokio::test]
async fn access_goes_with_the_project_and_the_flavor() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let gone = crate::support::tenant(w.store.as_ref(), "gone", store::Quota::default());
    let id = flavor(&c, &admin, "hidden", false).await;
    act(&c, &admin, &id, "addTenantAccess", &gone.id.to_string()).await;
    act(&c, &admin, &id, "addTenantAccess", &w.a.id.to_string()).await;
    let (status, body) = c
        .call(
            Method::DELETE,
            &format!("/cumulo/v1/tenants/{}", gone.id),
            &admin,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let access = format!("{FLAVORS}/{id}/os-flavor-access");
    let (_, body) = c.call(Method::GET, &access, &admin, None).await;
    assert_eq!(body, access_of(&id, &[w.a.id]));
    let (status, _) = c
        .call(
            Method::POST,
            &format!("{FLAVORS}/{id}/os-extra_specs"),
            &admin,
            Some(json!({"extra_specs": {"k": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = c
        .call(Method::DELETE, &format!("{FLAVORS}/{id}"), &admin, None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, body) = c.call(Method::GET, &access, &admin, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let again = flavor(&c, &admin, "hidden", false).await;
    let (_, body) = c
        .call(
            Method::GET,
            &format!("{FLAVORS}/{again}/os-flavor-access"),
            &admin,
            None,
        )
        .await;
    assert_eq!(body, access_of(&again, &[]));
    let (_, body) = c
        .call(
            Method::GET,
            &format!("{FLAVORS}/{again}/os-extra_specs"),
            &admin,
            None,
        )
        .await;
    assert_eq!(body, json!({"extra_specs": {}}));
    assert!(
        w.store
            .flavor(Scope::Tenant(w.a.id), again.parse().unwrap())
            .is_err()
    );
    w.stop().await;
}

impl World {
    /// A server of tenant B's, stopped on a node (as a resize needs); its id.
    async fn server_b_stopped(&self, token: &str) -> Uuid {
        let (status, created) = self
            .client()
            .call(
                Method::POST,
                "/compute/v2.1/servers",
                token,
                Some(json!({"server": {"name": "b", "flavorRef": self.flavor.id,
                    "imageRef": self.image.id}})),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{created}");
        let id: Uuid = created["server"]["id"].as_str().unwrap().parse().unwrap();
        self.cluster.set_state(id, InstanceState::Exited).unwrap();
        let current = self.store.instance(Scope::All, id).unwrap();
        self.store
            .update_instance(
                Scope::All,
                id,
                current.version,
                InstanceChange {
                    node: Some(Some(Uuid::from_u128(7))),
                    ..InstanceChange::default()
                },
            )
            .unwrap();
        id
    }
}
