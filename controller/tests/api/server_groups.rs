//! `os-server-groups`: groups kept per project and bounded, servers joining them with the
//! `group` scheduler hint, and the STARTs of the real engine carrying the group's placement (its
//! policy, its members' nodes, its members not placed yet); and the same through the real
//! `openstack` CLI.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::engine_rig::{EngineRig, NODE_A, id_of};
use crate::openstack::{admin_cli, fails, json, ok, openstack_or_skip, tenant_cli};
use crate::support::World;

const GROUPS: &str = "/compute/v2.1/os-server-groups";

async fn create_group(rig: &EngineRig, token: &str, body: Value) -> (StatusCode, Value) {
    rig.client()
        .call(
            Method::POST,
            GROUPS,
            token,
            Some(json!({"server_group": body})),
        )
        .await
}

async fn create_in(
    rig: &EngineRig,
    token: &str,
    name: &str,
    group: &str,
    n: u32,
) -> (StatusCode, Value) {
    let body = json!({
        "server": {
            "name": name,
            "flavorRef": rig.flavor.id,
            "imageRef": rig.image.id,
            "min_count": n,
            "max_count": n,
        },
        "os:scheduler_hints": {"group": group},
    });
    rig.client()
        .call(Method::POST, "/compute/v2.1/servers", token, Some(body))
        .await
}

#[tokio::test]
async fn server_groups_hold_their_members_and_starts_carry_the_policy() {
    let rig = EngineRig::start().await;
    let a = rig.token(&rig.a).await;
    let b = rig.token(&rig.b).await;
    let admin = rig.admin_token().await;

    // Made with one known policy; anything else is a 400.
    for bad in [
        json!({"name": "x", "policies": ["affinity", "anti-affinity"]}),
        json!({"name": "x", "policies": ["closest"]}),
        json!({"name": "x"}),
        json!({"name": "", "policies": ["affinity"]}),
        json!({"name": "x", "policies": ["affinity"], "rules": {}}),
    ] {
        let (status, body) = create_group(&rig, &a, bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, body) = create_group(
        &rig,
        &a,
        json!({"name": "web", "policies": ["anti-affinity"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let group = &body["server_group"];
    assert_eq!(group["policies"], json!(["anti-affinity"]));
    assert_eq!(
        (group["members"].clone(), group["metadata"].clone()),
        (json!([]), json!({}))
    );
    let gid = group["id"].as_str().unwrap().to_string();
    let path = format!("{GROUPS}/{gid}");
    let (status, _) = rig.client().call(Method::GET, &path, &b, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another project's group");
    let (_, listed) = rig.client().call(Method::GET, GROUPS, &b, None).await;
    assert_eq!(listed["server_groups"], json!([]));
    let (_, listed) = rig
        .client()
        .call(
            Method::GET,
            &format!("{GROUPS}?all_projects=True"),
            &admin,
            None,
        )
        .await;
    assert!(
        listed["server_groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["id"] == gid.as_str())
    );

    // Two siblings of one launch, both made before either START goes: each names the other,
    // not placed yet.
    let (status, body) = create_in(&rig, &a, "web", &gid, 2).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let starts = rig.out.starts();
    assert_eq!(starts.len(), 2, "{starts:?}");
    let (first, second) = (starts[0].instance_uuid, starts[1].instance_uuid);
    let g0 = starts[0].requirements.group.clone().unwrap();
    assert_eq!(
        (g0.id.to_string(), g0.policy.as_str()),
        (gid.clone(), "anti-affinity")
    );
    assert_eq!(
        (g0.nodes.clone(), g0.members.clone()),
        (vec![], vec![second])
    );
    let g1 = starts[1].requirements.group.clone().unwrap();
    assert_eq!(
        (g1.nodes.clone(), g1.members.clone()),
        (vec![], vec![first])
    );

    // Once the first runs on a node, a third names that node and the pending second.
    rig.stats(NODE_A, &[(first, &[])]);
    rig.out.take();
    let (status, body) = create_in(&rig, &a, "web", &gid, 1).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let third = id_of(&body, "server");
    let g2 = rig.out.starts()[0].requirements.group.clone().unwrap();
    assert_eq!((g2.nodes, g2.members), (vec![NODE_A], vec![second]));
    let (_, shown) = rig.client().call(Method::GET, &path, &a, None).await;
    assert_eq!(
        shown["server_group"]["members"],
        json!([first, second, third])
    );

    // Hints: a group must be a UUID the project sees; a full group is a 403.
    for (hint, status) in [
        ("nope", StatusCode::BAD_REQUEST),
        (&*Uuid::new_v4().to_string(), StatusCode::BAD_REQUEST),
    ] {
        let (got, body) = create_in(&rig, &a, "x", hint, 1).await;
        assert_eq!(got, status, "{hint}: {body}");
    }
    let (status, body) = create_in(&rig, &b, "theirs", &gid, 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = create_in(&rig, &a, "web", &gid, 7).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = create_in(&rig, &a, "web", &gid, 1).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body.to_string().contains("too many servers in group"),
        "{body}"
    );

    // At most ten groups per project; in use shown by the quota set.
    for n in 1..10 {
        let (status, body) = create_group(
            &rig,
            &a,
            json!({"name": format!("g{n}"), "policies": ["affinity"]}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) =
        create_group(&rig, &a, json!({"name": "over", "policies": ["affinity"]})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Paging as Nova's (a limit of 0 is none); all_projects is for admins only.
    let page = |q: &'static str| {
        let c = rig.client();
        let a = a.clone();
        async move {
            c.call(Method::GET, &format!("{GROUPS}?{q}"), &a, None)
                .await
        }
    };
    let (_, two) = page("limit=1&offset=1").await;
    assert_eq!(two["server_groups"].as_array().unwrap().len(), 1, "{two}");
    assert_eq!(two["server_groups"][0]["name"], "g1");
    let (_, all) = page("limit=0").await;
    assert_eq!(all["server_groups"].as_array().unwrap().len(), 10);
    let (status, _) = page("limit=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, theirs) = rig
        .client()
        .call(Method::GET, &format!("{GROUPS}?all_projects=1"), &b, None)
        .await;
    assert_eq!(
        theirs["server_groups"],
        json!([]),
        "a member sees its own only"
    );
    let quota = format!("/compute/v2.1/os-quota-sets/{}/detail", rig.a.id);
    let (_, set) = rig.client().call(Method::GET, &quota, &a, None).await;
    assert_eq!(set["quota_set"]["server_groups"]["in_use"], 10, "{set}");

    // Deleted with members: they stay, in no group.
    let (status, _) = rig.client().call(Method::DELETE, &path, &a, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = rig.client().call(Method::GET, &path, &a, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let server = format!("/compute/v2.1/servers/{first}");
    let (status, _) = rig.client().call(Method::GET, &server, &a, None).await;
    assert_eq!(status, StatusCode::OK);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_makes_server_groups_and_places_servers_in_them() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin.clone(), &world, &world.a);
    let admin = admin_cli(bin, &world);
    let made = json(
        &alice,
        &[
            "server",
            "group",
            "create",
            "--policy",
            "anti-affinity",
            "spread",
        ],
    )
    .await;
    let gid = made["id"].as_str().unwrap().to_string();
    assert_eq!(made["name"], "spread", "{made}");
    let server = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--hint",
            &format!("group={gid}"),
            "--wait",
            "web-1",
        ],
    )
    .await;
    let sid = server["id"].as_str().unwrap().to_string();
    let shown = json(&alice, &["server", "group", "show", "spread"]).await;
    // The CLI shows the member list as text.
    assert!(shown["members"].to_string().contains(&sid), "{shown}");
    let listed = json(&alice, &["server", "group", "list"]).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let everyone = json(&admin, &["server", "group", "list", "--all-projects"]).await;
    assert!(
        everyone
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["ID"] == gid.as_str()),
        "{everyone}"
    );
    fails(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--hint",
            "group=not-a-uuid",
            "bad",
        ],
    )
    .await;
    ok(&alice, &["server", "group", "delete", "spread"]).await;
    fails(&alice, &["server", "group", "show", &gid]).await;
    world.stop().await;
}
