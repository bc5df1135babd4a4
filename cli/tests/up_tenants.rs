//! Two tenants with the real `openstack` CLI: `cumulo up --backend sim` in a temporary directory
//! on free ports, and a second project with a user of its own. The demo project uploads a
//! private disk image and a private kernel image (`aki`) and creates a volume; the second
//! project neither lists nor shows them, boots no server of the image, makes no volume of it,
//! attaches the volume to no server of its own (one of `up`'s public image), deletes it not,
//! and boots no disk image of its own whose `kernel_id` names the demo project's kernel. The
//! demo project's things are all there, as they were, at the end. `cumulo down --purge` then.
//!
//! Many refusals come from the CLI itself: it looks an image or volume up by id, then by name,
//! before it sends anything, and another project's are found by neither. The kernel is the one
//! the Compute API refuses (its `kernel_id` is looked up as the booting project sees images);
//! so the requests the CLI never sends (a boot of, a volume of, an attach and a delete of A's
//! things) are sent too, as the second project, to the cluster's controller.
//!
//! Needs the cluster's binaries (`cargo build --bins`) and the `openstack` CLI
//! (`CUMULO_OPENSTACK`, made by `scripts/openstack-venv.sh`); without them the test is skipped
//! with a message, unless `CUMULO_REQUIRE_BINS=1` or `CUMULO_REQUIRE_OPENSTACK=1` (CI) make that
//! a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;

mod common;

use common::SimCluster;
use cumulo::client::{ClientError, Connection};
use serde_json::{Value, json};

/// The second project, its user's name and password.
const OTHER: &str = "other";
const OTHER_PASSWORD: &str = "other-pass-word";

/// The `ID` column of `openstack <what> list` with `env`.
fn listed(bin: &Path, env: &[(String, String)], what: &str) -> Vec<String> {
    let list = common::openstack_json(bin, env, &[what, "list"]);
    list.as_array()
        .unwrap()
        .iter()
        .map(|row| row["ID"].as_str().unwrap().to_string())
        .collect()
}

/// Runs `openstack args` with `env`, which must fail saying `want`.
fn refused(bin: &Path, env: &[(String, String)], args: &[&str], want: &str) {
    let out = common::openstack(bin, env, args);
    let text = common::output_text(&out);
    assert!(
        !out.status.success(),
        "openstack {args:?} succeeded: {text}"
    );
    assert!(
        text.contains(want),
        "openstack {args:?}: not {want:?}: {text}"
    );
}

/// Sends `method path body` on `conn`, which must fail with `status` saying `want`.
fn api_refused(
    conn: &Connection,
    (method, path, body): (&str, &str, Option<Value>),
    status: u16,
    want: &str,
) {
    match conn.request(method, path, body.as_ref()) {
        Err(ClientError::Api {
            status: got,
            message,
        }) => {
            assert_eq!(got, status, "{method} {path}: {message}");
            assert!(
                message.contains(want),
                "{method} {path}: not {want:?}: {message}"
            );
        }
        other => panic!("{method} {path}: {other:?}"),
    }
}

/// Uploads `file` as a private image `name` of `format` (disk and container) with `env`; its
/// `image show`.
fn private_image(
    bin: &Path,
    env: &[(String, String)],
    file: &Path,
    format: (&str, &str),
    extra: &[&str],
    name: &str,
) -> Value {
    let file = file.to_str().unwrap();
    let mut args = vec![
        "image",
        "create",
        "--private",
        "--disk-format",
        format.0,
        "--container-format",
        format.1,
        "--file",
        file,
    ];
    args.extend_from_slice(extra);
    args.push(name);
    let made = common::openstack_json(bin, env, &args);
    let shown = common::openstack_json(bin, env, &["image", "show", made["id"].as_str().unwrap()]);
    assert_eq!(shown["status"], "active", "{shown}");
    assert_eq!(shown["visibility"], "private", "{shown}");
    shown
}

#[test]
fn the_openstack_cli_keeps_each_projects_private_images_and_volumes_to_it() {
    let Some(cluster) = SimCluster::up_or_skip() else {
        return;
    };
    let bin = cluster.openstack.clone();
    let a = cluster.env.clone();
    cluster.project_with_member(OTHER, OTHER_PASSWORD);
    let b = cluster.env_of(OTHER, OTHER, OTHER_PASSWORD);

    // A's private disk image, private kernel image and volume.
    let disk_file = cluster.dir.path().join("disk.raw");
    std::fs::write(&disk_file, b"a private disk\n".repeat(1000)).unwrap();
    let kernel_file = cluster.dir.path().join("vmlinuz");
    std::fs::write(&kernel_file, b"a private kernel\n".repeat(100)).unwrap();
    let image = private_image(&bin, &a, &disk_file, ("raw", "bare"), &[], "a-disk");
    let image_id = image["id"].as_str().unwrap().to_string();
    let kernel = private_image(&bin, &a, &kernel_file, ("aki", "aki"), &[], "a-kernel");
    let kernel_id = kernel["id"].as_str().unwrap().to_string();
    let volume = common::openstack_json(&bin, &a, &["volume", "create", "--size", "1", "a-vol"]);
    assert_eq!(volume["status"], "available", "{volume}");
    let volume_id = volume["id"].as_str().unwrap().to_string();

    // B neither lists nor shows A's images, and boots none, nor makes a volume of one.
    let b_images = listed(&bin, &b, "image");
    assert!(!b_images.contains(&image_id), "{b_images:?}");
    assert!(!b_images.contains(&kernel_id), "{b_images:?}");
    for id in [&image_id, &kernel_id] {
        refused(&bin, &b, &["image", "show", id], "No Image found");
    }
    refused(
        &bin,
        &b,
        &[
            "server", "create", "--flavor", "tiny", "--image", &image_id, "stolen",
        ],
        "No Image found",
    );
    refused(
        &bin,
        &b,
        &[
            "volume", "create", "--size", "1", "--image", &image_id, "stolen",
        ],
        "No Image found",
    );

    // B neither lists nor shows A's volume, attaches it to no server of its own, deletes it not.
    let b_volumes = listed(&bin, &b, "volume");
    assert!(!b_volumes.contains(&volume_id), "{b_volumes:?}");
    let no_volume = format!("No Volume found for {volume_id}");
    refused(&bin, &b, &["volume", "show", &volume_id], &no_volume);
    let server = common::openstack_json(
        &bin,
        &b,
        &[
            "server", "create", "--flavor", "tiny", "--image", "tiny", "--wait", "b-server",
        ],
    );
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let server_id = server["id"].as_str().unwrap().to_string();
    refused(
        &bin,
        &b,
        &["server", "add", "volume", &server_id, &volume_id],
        &no_volume,
    );
    refused(&bin, &b, &["volume", "delete", &volume_id], &no_volume);
    let shown = common::openstack_json(&bin, &a, &["volume", "show", &volume_id]);
    assert_eq!(shown["status"], "available", "{shown}");

    // B's own disk image naming A's kernel: B may make it, not boot it (the Compute API looks
    // the kernel up as B sees images).
    let kernel_prop = format!("kernel_id={kernel_id}");
    let b_disk = private_image(
        &bin,
        &b,
        &disk_file,
        ("raw", "bare"),
        &["--property", &kernel_prop],
        "b-disk",
    );
    let b_disk_id = b_disk["id"].as_str().unwrap().to_string();
    refused(
        &bin,
        &b,
        &[
            "server", "create", "--flavor", "tiny", "--image", &b_disk_id, "b-kernel",
        ],
        &format!("kernel image {kernel_id} could not be found"),
    );

    // What the CLI never sends (it finds none of A's things first), sent as B: the Compute and
    // Block Storage APIs find none of A's things either.
    let conn = cluster.login(OTHER, OTHER, OTHER_PASSWORD);
    let volumes = format!("/volume/v3/{}/volumes", conn.project_id.as_ref().unwrap());
    let flavor = common::openstack_json(&bin, &b, &["flavor", "show", "tiny"]);
    let boot =
        json!({"server": {"name": "stolen", "flavorRef": flavor["id"], "imageRef": image_id}});
    for (request, status, want) in [
        (
            ("GET", format!("/image/v2/images/{image_id}"), None),
            404,
            "",
        ),
        (
            ("POST", "/compute/v2.1/servers".to_string(), Some(boot)),
            400,
            &*format!("Image {image_id} could not be found"),
        ),
        (
            (
                "POST",
                volumes.clone(),
                Some(json!({"volume": {"size": 1, "imageRef": image_id}})),
            ),
            400,
            "unable to access requested image",
        ),
        (
            (
                "POST",
                format!("/compute/v2.1/servers/{server_id}/os-volume_attachments"),
                Some(json!({"volumeAttachment": {"volumeId": volume_id}})),
            ),
            404,
            &*format!("Volume {volume_id} could not be found."),
        ),
        (
            ("DELETE", format!("{volumes}/{volume_id}"), None),
            404,
            &*format!("Volume {volume_id} could not be found"),
        ),
    ] {
        let (method, path, body) = request;
        api_refused(&conn, (method, &path, body), status, want);
    }
    let servers = common::openstack_json(&bin, &b, &["server", "list"]);
    let names: Vec<&str> = servers
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b-server"], "{servers}");

    // A's things are all there, as they were.
    for (id, was) in [(&image_id, &image), (&kernel_id, &kernel)] {
        let shown = common::openstack_json(&bin, &a, &["image", "show", id]);
        for field in ["status", "visibility", "owner", "checksum", "size"] {
            assert_eq!(shown[field], was[field], "{field}: {shown}");
        }
    }
    let a_images = listed(&bin, &a, "image");
    assert!(a_images.contains(&image_id) && a_images.contains(&kernel_id));
    assert!(!a_images.contains(&b_disk_id), "{a_images:?}");
    let a_volumes = listed(&bin, &a, "volume");
    assert_eq!(a_volumes, [volume_id.as_str()], "{a_volumes:?}");
    let shown = common::openstack_json(&bin, &a, &["volume", "show", &volume_id]);
    for field in ["status", "size", "name"] {
        assert_eq!(shown[field], volume[field], "{field}: {shown}");
    }
    assert_eq!(shown["attachments"], json!([]), "{shown}");
}
