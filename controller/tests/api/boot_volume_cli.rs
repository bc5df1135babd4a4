//! The real `openstack` CLI against the API with the fake cluster: `volume create --image`,
//! `server create --volume` and `server create --image --boot-from-volume` (the mappings the
//! CLI really sends), `server remove volume` of a root disk refused, the volume released when
//! its server goes. Skipped with a message when the CLI is not installed, unless
//! `CUMULO_REQUIRE_OPENSTACK=1`.

use std::sync::Arc;

use controller::api::testing::OpenStackCli;
use serde_json::Value;
use store::{ImageChange, ImageFile, ImageKind, NewImage, Scope};

use crate::openstack::openstack_or_skip;
use crate::support::{PASSWORD, World};

/// Runs `openstack <args>` on the blocking pool: its JSON (`json`), or its failure's stderr.
async fn run(cli: &Arc<OpenStackCli>, args: &[&str], json: bool) -> Result<Value, String> {
    let (cli, args): (_, Vec<String>) = (cli.clone(), args.iter().map(|s| s.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if json {
            return cli.json(&args);
        }
        let out = cli.run(&args).unwrap();
        if out.success {
            Ok(Value::String(out.stdout))
        } else {
            Err(out.stderr)
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_boots_servers_from_volumes() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    // An uploaded disk image, as `openstack image create --file` leaves it.
    let hash = format!("{:0128x}", uuid::Uuid::new_v4().as_u128());
    let image = world
        .store
        .create_image(NewImage {
            owner: None,
            name: "debian".into(),
            kind: ImageKind::Qcow2,
            reference: format!("sha512/{hash}"),
        })
        .unwrap();
    world
        .store
        .change_image(
            Scope::All,
            image.id,
            ImageChange {
                file: Some(Some(ImageFile {
                    size: 1 << 20,
                    md5: "0".repeat(32),
                    sha512: hash,
                })),
                ..ImageChange::default()
            },
        )
        .unwrap();
    let alice = Arc::new(OpenStackCli::new(
        bin,
        &world.api.url,
        &world.a.user_name,
        PASSWORD,
        &world.a.name,
    ));
    let json = |args: &'static [&'static str]| run(&alice, args, true);

    let root = json(&[
        "volume", "create", "--image", "debian", "--size", "1", "root",
    ])
    .await
    .unwrap();
    // (openstacksdk turns Cinder's "true" into a boolean.)
    assert!(root["bootable"].to_string().contains("true"), "{root}");
    assert_eq!(
        root["volume_image_metadata"]["image_name"], "debian",
        "{root}"
    );
    assert_eq!(root["status"], "available", "{root}");
    let root_id = root["id"].as_str().unwrap().to_string();
    // The fixture's image is registered by reference: no volume is made from it.
    let refused = run(
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
        false,
    )
    .await
    .unwrap_err();
    assert!(refused.contains("registered by reference"), "{refused}");

    let flavor = world.flavor.name.clone();
    let vm1 = run(
        &alice,
        &[
            "server", "create", "--flavor", &flavor, "--volume", "root", "--wait", "vm1",
        ],
        true,
    )
    .await
    .unwrap();
    assert_eq!(vm1["status"], "ACTIVE", "{vm1}");
    let shown = json(&["server", "show", "vm1"]).await.unwrap();
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
    let listed = json(&["server", "volume", "list", "vm1"]).await.unwrap();
    assert_eq!(listed[0]["Device"], "/dev/vda", "{listed}");
    let stderr = run(
        &alice,
        &["server", "remove", "volume", "vm1", "root"],
        false,
    )
    .await
    .unwrap_err();
    assert!(
        stderr.contains("Cannot detach a root device volume"),
        "{stderr}"
    );
    let shown = json(&["volume", "show", "root"]).await.unwrap();
    assert_eq!(shown["status"], "in-use", "{shown}");

    let vm2 = run(
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
        true,
    )
    .await
    .unwrap();
    assert_eq!(vm2["status"], "ACTIVE", "{vm2}");
    let volumes = json(&["volume", "list", "--long"]).await.unwrap();
    let rows = volumes.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{volumes}");
    assert!(
        rows.iter()
            .any(|r| r["Size"] == 2 && r["Status"] == "in-use"),
        "{volumes}"
    );

    run(&alice, &["server", "delete", "--wait", "vm1"], false)
        .await
        .unwrap();
    let shown = json(&["volume", "show", "root"]).await.unwrap();
    assert_eq!(shown["status"], "available", "{shown}");
    world.stop().await;
}
