//! The real `openstack` CLI against the API with the fake cluster: `volume create --image`,
//! `server create --volume` and `server create --image --boot-from-volume` (the mappings the
//! CLI really sends), `server remove volume` of a root disk refused, the volume released when
//! its server goes. Skipped with a message when the CLI is not installed, unless
//! `CUMULO_REQUIRE_OPENSTACK=1`.

use store::ImageKind;

use crate::openstack::{fails, json, ok, openstack_or_skip, tenant_cli};
use crate::support::{World, uploaded};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_boots_servers_from_volumes() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    // An uploaded disk image, as `openstack image create --file` leaves it.
    uploaded(
        world.store.as_ref(),
        None,
        "debian",
        ImageKind::Qcow2,
        1 << 20,
    );
    let alice = tenant_cli(bin, &world, &world.a);

    let root = json(
        &alice,
        &[
            "volume", "create", "--image", "debian", "--size", "1", "root",
        ],
    )
    .await;
    // (openstacksdk turns Cinder's "true" into a boolean.)
    assert!(root["bootable"].to_string().contains("true"), "{root}");
    assert_eq!(
        root["volume_image_metadata"]["image_name"], "debian",
        "{root}"
    );
    assert_eq!(root["status"], "available", "{root}");
    let root_id = root["id"].as_str().unwrap().to_string();
    // The fixture's image is registered by reference: no volume is made from it.
    let refused = fails(
        &alice,
        &[
            "volume",
            "create",
            "--image",
            &world.image.name,
            "--size",
            "1",
            "x",
        ],
    )
    .await;
    assert!(refused.contains("registered by reference"), "{refused}");

    let flavor = world.flavor.name.clone();
    let vm1 = json(
        &alice,
        &[
            "server", "create", "--flavor", &flavor, "--volume", "root", "--wait", "vm1",
        ],
    )
    .await;
    assert_eq!(vm1["status"], "ACTIVE", "{vm1}");
    let shown = json(&alice, &["server", "show", "vm1"]).await;
    assert!(
        shown["image"]
            .as_str()
            .is_some_and(|i| i.is_empty() || i.contains("booted from volume")),
        "{shown}"
    );
    assert!(
        shown["volumes_attached"].to_string().contains(&root_id),
        "{shown}"
    );
    let listed = json(&alice, &["server", "volume", "list", "vm1"]).await;
    assert_eq!(listed[0]["Device"], "/dev/vda", "{listed}");
    let stderr = fails(&alice, &["server", "remove", "volume", "vm1", "root"]).await;
    assert!(
        stderr.contains("Cannot detach a root device volume"),
        "{stderr}"
    );
    let shown = json(&alice, &["volume", "show", "root"]).await;
    assert_eq!(shown["status"], "in-use", "{shown}");

    let vm2 = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            &flavor,
            "--image",
            "debian",
            "--boot-from-volume",
            "2",
            "--wait",
            "vm2",
        ],
    )
    .await;
    assert_eq!(vm2["status"], "ACTIVE", "{vm2}");
    let volumes = json(&alice, &["volume", "list", "--long"]).await;
    let rows = volumes.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{volumes}");
    assert!(
        rows.iter()
            .any(|r| r["Size"] == 2 && r["Status"] == "in-use"),
        "{volumes}"
    );

    ok(&alice, &["server", "delete", "--wait", "vm1"]).await;
    let shown = json(&alice, &["volume", "show", "root"]).await;
    assert_eq!(shown["status"], "available", "{shown}");
    world.stop().await;
}
