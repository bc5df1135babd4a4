//! Flavors through the Compute API with the real `openstack` CLI: an admin creates and deletes
//! them, sets and unsets their properties (extra specs), and makes private ones for projects; a
//! member may do none of it.

use crate::openstack::{admin_cli, fails, json, ok, openstack_or_skip, tenant_cli};
use serde_json::{Value, json};

use crate::support::World;

/// `openstack flavor create` and `flavor delete` as the admin; a member may not; what cumulo's
/// flavors do not have (swap) is refused, not dropped.
#[tokio::test]
async fn the_openstack_cli_creates_and_deletes_flavors_as_the_admin() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin.clone(), &world, &world.a);
    let admin = admin_cli(bin, &world);
    let made = json(
        &admin,
        &[
            "flavor", "create", "--ram", "256", "--disk", "2", "--vcpus", "2", "small",
        ],
    )
    .await;
    assert_eq!(
        (&made["name"], &made["ram"], &made["disk"], &made["vcpus"]),
        (
            &serde_json::json!("small"),
            &serde_json::json!(256),
            &serde_json::json!(2),
            &serde_json::json!(2)
        ),
        "{made}"
    );
    let shown = json(&alice, &["flavor", "show", "small"]).await;
    assert_eq!(shown["id"], made["id"], "{shown}");
    let said = fails(
        &admin,
        &["flavor", "create", "--ram", "1", "--disk", "1", "small"],
    )
    .await;
    assert!(
        said.contains("409") || said.contains("already exists"),
        "{said}"
    );
    let said = fails(
        &admin,
        &[
            "flavor", "create", "--ram", "1", "--disk", "1", "--swap", "64", "swapped",
        ],
    )
    .await;
    assert!(said.contains("swap"), "{said}");
    let said = fails(
        &alice,
        &["flavor", "create", "--ram", "1", "--disk", "1", "mine"],
    )
    .await;
    assert!(said.contains("403"), "{said}");
    let said = fails(&alice, &["flavor", "delete", "small"]).await;
    assert!(said.contains("403") || said.contains("admin"), "{said}");
    ok(&admin, &["flavor", "delete", "small"]).await;
    fails(&alice, &["flavor", "show", "small"]).await;
    world.stop().await;
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|f| f["Name"].as_str().unwrap())
        .collect()
}

/// `openstack flavor create --property`, `flavor set --property`, `flavor unset --property`,
/// `flavor set --no-property`: the properties (extra specs) are kept, shown by `flavor show`
/// and `flavor list --long`, and changed by admins only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_sets_and_unsets_flavor_properties() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin.clone(), &world, &world.a);
    let admin = admin_cli(bin, &world);
    let made = json(
        &admin,
        &[
            "flavor",
            "create",
            "--ram",
            "256",
            "--disk",
            "1",
            "--property",
            "hw:cpu_policy=dedicated",
            "--property",
            "a=1",
            "pinned",
        ],
    )
    .await;
    assert_eq!(
        made["properties"],
        json!({"hw:cpu_policy": "dedicated", "a": "1"}),
        "{made}"
    );
    ok(
        &admin,
        &[
            "flavor",
            "set",
            "--property",
            "b=two words",
            "--property",
            "a=2",
            "pinned",
        ],
    )
    .await;
    let shown = json(&alice, &["flavor", "show", "pinned"]).await;
    assert_eq!(
        shown["properties"],
        json!({"hw:cpu_policy": "dedicated", "a": "2", "b": "two words"}),
        "{shown}"
    );
    assert_eq!(shown["os-flavor-access:is_public"], true, "{shown}");
    ok(&admin, &["flavor", "unset", "--property", "a", "pinned"]).await;
    let listed = json(&alice, &["flavor", "list", "--long"]).await;
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["Name"] == "pinned")
        .unwrap();
    assert_eq!(
        row["Properties"],
        json!({"hw:cpu_policy": "dedicated", "b": "two words"}),
        "{listed}"
    );
    // Unsetting one it has not is a 404 the CLI passes over (openstacksdk ignores it); a member
    // may not change them.
    ok(&admin, &["flavor", "unset", "--property", "a", "pinned"]).await;
    let said = fails(&alice, &["flavor", "set", "--property", "c=3", "pinned"]).await;
    assert!(said.contains("Command Failed"), "{said}");
    let said = fails(&alice, &["flavor", "unset", "--property", "b", "pinned"]).await;
    assert!(said.contains("403") || said.contains("admin"), "{said}");
    let said = fails(
        &admin,
        &["flavor", "set", "--property", "bad/key=1", "pinned"],
    )
    .await;
    assert!(said.contains("Command Failed"), "{said}");
    ok(&admin, &["flavor", "set", "--no-property", "pinned"]).await;
    let shown = json(&admin, &["flavor", "show", "pinned"]).await;
    assert_eq!(shown["properties"], json!({}), "{shown}");
    world.stop().await;
}

/// `openstack flavor create --private --project`, `flavor set --project`, `flavor unset
/// --project`, `flavor show` (`access_project_ids`) and `flavor list` (`--all`, `--private`,
/// `--public`): a private flavor is listed, shown and booted by the projects given access only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_makes_private_flavors_for_projects() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin.clone(), &world, &world.a);
    let bob = tenant_cli(bin.clone(), &world, &world.b);
    let admin = admin_cli(bin, &world);
    let made = json(
        &admin,
        &[
            "flavor",
            "create",
            "--ram",
            "256",
            "--disk",
            "1",
            "--private",
            "--project",
            &world.a.name,
            "hidden",
        ],
    )
    .await;
    assert_eq!(made["os-flavor-access:is_public"], false, "{made}");
    let shown = json(&admin, &["flavor", "show", "hidden"]).await;
    assert_eq!(
        shown["access_project_ids"],
        json!([world.a.id.to_string()]),
        "{shown}"
    );
    assert_eq!(
        names(&json(&alice, &["flavor", "list"]).await),
        ["hidden", "m1.tiny"]
    );
    assert_eq!(names(&json(&bob, &["flavor", "list"]).await), ["m1.tiny"]);
    fails(&bob, &["flavor", "show", "hidden"]).await;
    // The admin's lists: public (its project has no access), all, private.
    assert_eq!(names(&json(&admin, &["flavor", "list"]).await), ["m1.tiny"]);
    assert_eq!(
        names(&json(&admin, &["flavor", "list", "--all"]).await),
        ["hidden", "m1.tiny"]
    );
    assert_eq!(
        names(&json(&admin, &["flavor", "list", "--private"]).await),
        ["hidden"]
    );
    // Alice boots it; Bob cannot name it.
    let server = json(
        &alice,
        &[
            "server", "create", "--flavor", "hidden", "--image", "cirros", "--wait", "vm",
        ],
    )
    .await;
    assert_eq!(server["status"], "ACTIVE", "{server}");
    fails(
        &bob,
        &[
            "server", "create", "--flavor", "hidden", "--image", "cirros", "vm",
        ],
    )
    .await;
    // Access moves from Alice's project to Bob's.
    ok(
        &admin,
        &["flavor", "set", "--project", &world.b.name, "hidden"],
    )
    .await;
    ok(
        &admin,
        &["flavor", "unset", "--project", &world.a.name, "hidden"],
    )
    .await;
    let shown = json(&admin, &["flavor", "show", "hidden"]).await;
    assert_eq!(
        shown["access_project_ids"],
        json!([world.b.id.to_string()]),
        "{shown}"
    );
    assert_eq!(
        names(&json(&bob, &["flavor", "list"]).await),
        ["hidden", "m1.tiny"]
    );
    assert_eq!(names(&json(&alice, &["flavor", "list"]).await), ["m1.tiny"]);
    let shown = json(&bob, &["flavor", "show", "hidden"]).await;
    assert_eq!(shown["os-flavor-access:is_public"], false, "{shown}");
    // Twice, or not on the list, or a public flavor, or by a member: refused.
    fails(
        &admin,
        &["flavor", "set", "--project", &world.b.name, "hidden"],
    )
    .await;
    fails(
        &admin,
        &["flavor", "unset", "--project", &world.a.name, "hidden"],
    )
    .await;
    fails(
        &admin,
        &["flavor", "set", "--project", &world.a.name, "m1.tiny"],
    )
    .await;
    fails(
        &bob,
        &["flavor", "set", "--project", &world.b.name, "hidden"],
    )
    .await;
    world.stop().await;
}
