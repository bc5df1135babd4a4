//! Flavors through the Compute API with the real `openstack` CLI: an admin creates and deletes
//! them, a member may not.

use crate::openstack::{admin_cli, fails, json, ok, openstack_or_skip, tenant_cli};
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
