//! Server metadata (properties), locks, reset state, forced deletes and list filters through
//! the real `openstack` CLI.

use serde_json::{Value, json};

use crate::openstack::{admin_cli, fails, json, ok, openstack_or_skip, tenant_cli};
use crate::support::World;

fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["Name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_sets_properties_locks_and_filters_servers() {
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
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--property",
            "role=web",
            "--wait",
            "web-1",
        ],
    )
    .await;
    assert_eq!(made["status"], "ACTIVE", "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    ok(
        &alice,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "--wait", "db-1",
        ],
    )
    .await;

    // Properties: set, shown, unset.
    ok(
        &alice,
        &[
            "server",
            "set",
            "--property",
            "tier=1",
            "--property",
            "zone=a",
            "web-1",
        ],
    )
    .await;
    let shown = json(&alice, &["server", "show", "web-1"]).await;
    assert_eq!(
        shown["properties"],
        json!({"role": "web", "tier": "1", "zone": "a"}),
        "{shown}"
    );
    ok(&alice, &["server", "unset", "--property", "role", "web-1"]).await;
    let shown = json(&alice, &["server", "show", "web-1"]).await;
    assert_eq!(
        shown["properties"],
        json!({"tier": "1", "zone": "a"}),
        "{shown}"
    );
    let said = fails(
        &alice,
        &["server", "set", "--property", "bad/key=v", "web-1"],
    )
    .await;
    assert!(said.contains("400") || said.contains("metadata"), "{said}");

    // Locked: the member's stop and delete are refused with the cause; unlocked, they work.
    ok(&alice, &["server", "lock", "web-1"]).await;
    let said = fails(&alice, &["server", "stop", "web-1"]).await;
    assert!(said.contains(&format!("Instance {id} is locked")), "{said}");
    let said = fails(&alice, &["server", "delete", "web-1"]).await;
    assert!(said.contains("is locked"), "{said}");
    ok(&alice, &["server", "unlock", "web-1"]).await;
    ok(&alice, &["server", "stop", "web-1"]).await;

    // Filters.
    let all = json(&alice, &["server", "list"]).await;
    assert_eq!(names(&all), ["db-1", "web-1"]);
    let web = json(&alice, &["server", "list", "--name", "^web-[0-9]$"]).await;
    assert_eq!(names(&web), ["web-1"]);
    let off = json(&alice, &["server", "list", "--status", "SHUTOFF"]).await;
    assert_eq!(names(&off), ["web-1"]);
    let tiny = json(&alice, &["server", "list", "--flavor", "m1.tiny"]).await;
    assert_eq!(names(&tiny), ["db-1", "web-1"]);
    let cirros = json(&alice, &["server", "list", "--image", "cirros"]).await;
    assert_eq!(names(&cirros), ["db-1", "web-1"]);
    let later = json(
        &alice,
        &["server", "list", "--changes-since", "2999-01-01T00:00:00Z"],
    )
    .await;
    assert_eq!(names(&later), Vec::<String>::new());
    let said = fails(&alice, &["server", "list", "--changes-since", "yesterday"]).await;
    assert!(said.contains("changes-since"), "{said}");
    let sorted = json(
        &alice,
        &[
            "server",
            "list",
            "--sort-column",
            "Name",
            "--sort-ascending",
        ],
    )
    .await;
    assert_eq!(sorted[0]["Name"], "db-1", "{sorted}");

    // An admin resets a state and sees every project's servers; a forced delete deletes.
    ok(
        &admin,
        &["server", "set", "--auto-approve", "--state", "error", &id],
    )
    .await;
    let shown = json(&alice, &["server", "show", "web-1"]).await;
    assert_eq!(shown["status"], "ERROR", "{shown}");
    let said = fails(
        &alice,
        &[
            "server",
            "set",
            "--auto-approve",
            "--state",
            "active",
            "web-1",
        ],
    )
    .await;
    assert!(
        said.contains("403") || said.to_lowercase().contains("forbidden"),
        "{said}"
    );
    ok(
        &admin,
        &["server", "set", "--auto-approve", "--state", "active", &id],
    )
    .await;
    let everyone = json(&admin, &["server", "list", "--all-projects"]).await;
    assert_eq!(names(&everyone), ["db-1", "web-1"]);
    let project = world.a.id.to_string();
    let of_a = json(
        &admin,
        &["server", "list", "--all-projects", "--project", &project],
    )
    .await;
    assert_eq!(names(&of_a), ["db-1", "web-1"]);
    ok(&alice, &["server", "delete", "--force", "--wait", "db-1"]).await;
    let left = json(&alice, &["server", "list"]).await;
    assert_eq!(names(&left), ["web-1"]);
    world.stop().await;
}
