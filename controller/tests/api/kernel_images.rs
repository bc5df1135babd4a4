//! Images that boot a kernel directly (Glance's `aki` and `ari`, and a disk's `kernel_id` and
//! `ramdisk_id` properties), in process: the Image API's format rules, and the STARTs the real
//! engine sends (recorded): a kernel image boots with no root image and its initrd, a disk with
//! a `kernel_id` is the root disk of that kernel; an initrd, another project's private kernel
//! or a kernel property naming the wrong kind of image is a 400 at server create.

use axum::http::StatusCode;
use serde_json::{Value, json};
use ssntp::payload::KernelBoot;
use store::{Image, ImageKind};
use uuid::Uuid;

use crate::engine_rig::{EngineRig, id_of};
use crate::images::{create, patch};
use crate::support::uploaded;

/// The message of a Nova or Glance error body.
fn message(body: &Value) -> String {
    body.to_string()
}

/// Sets the free-form properties `props` on image `id` through the Image API.
async fn set_props(r: &EngineRig, token: &str, id: Uuid, props: &[(&str, String)]) {
    let ops: Vec<Value> = props
        .iter()
        .map(|(k, v)| json!({"op": "add", "path": format!("/{k}"), "value": v}))
        .collect();
    let (status, body) = patch(&r.client(), token, &id.to_string(), json!(ops)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Boots a server of `image`: the status and the body.
async fn boot(r: &EngineRig, token: &str, image: Uuid) -> (StatusCode, Value) {
    r.create_server(token, "k", json!({"imageRef": image}))
        .await
}

/// The START of the last server booted.
fn last_start(r: &EngineRig) -> ssntp::payload::Start {
    r.out.starts().pop().expect("a START was sent")
}

#[tokio::test]
async fn kernel_and_initrd_images_keep_glances_format_rules() {
    let r = EngineRig::start().await;
    let a = r.token(&r.a).await;
    let c = r.client();
    for (disk, container) in [
        ("aki", "bare"),
        ("ari", "aki"),
        ("qcow2", "aki"),
        ("raw", "ari"),
    ] {
        let (status, body) = create(
            &c,
            &a,
            json!({"name": "x", "disk_format": disk, "container_format": container}),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "{disk}/{container}: {body}"
        );
        assert!(
            message(&body).contains("Invalid mix of disk and container formats"),
            "{body}"
        );
    }
    for format in ["aki", "ari"] {
        let (status, made) = create(
            &c,
            &a,
            json!({"name": format, "disk_format": format, "container_format": format}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        assert_eq!(
            (&made["disk_format"], &made["container_format"]),
            (&json!(format), &json!(format))
        );
        // Said without a container format, it shows the one its disk format implies.
        let (status, made) = create(&c, &a, json!({"name": format, "disk_format": format})).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        assert_eq!(made["container_format"], format);
        // A kernel does not become a bare disk by a patch.
        let ops = json!([{"op": "replace", "path": "/container_format", "value": "bare"}]);
        let (status, body) = patch(&c, &a, made["id"].as_str().unwrap(), ops).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    r.stop().await;
}

#[tokio::test]
async fn kernel_images_boot_with_their_initrd_and_disks_boot_the_kernel_they_name() {
    let r = EngineRig::start().await;
    let (a, b) = (r.token(&r.a).await, r.token(&r.b).await);
    let store = r.store.as_ref();
    let kernel = uploaded(store, Some(r.a.id), "vmlinuz", ImageKind::Kernel, 14 << 20);
    let initrd = uploaded(store, Some(r.a.id), "initrd", ImageKind::Ramdisk, 1 << 20);
    let disk = uploaded(store, Some(r.a.id), "root", ImageKind::Qcow2, 16 << 20);
    set_props(&r, &a, kernel.id, &[("ramdisk_id", initrd.id.to_string())]).await;

    // An initrd never boots by itself.
    let (status, body) = boot(&r, &a, initrd.id).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("is an initrd"), "{body}");

    // A kernel image: no root image, its initrd, no arguments of its own.
    let (status, body) = boot(&r, &a, kernel.id).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let start = last_start(&r);
    assert_eq!(start.instance_uuid, id_of(&body, "server"));
    assert_eq!(start.image, "");
    assert_eq!(
        start.kernel,
        Some(KernelBoot {
            kernel: kernel.reference.clone(),
            initrd: Some(initrd.reference.clone()),
            cmdline: None,
        })
    );

    // A disk that names the kernel is its root disk: `root=/dev/vda` unless the image says
    // its own command line.
    set_props(&r, &a, disk.id, &[("kernel_id", kernel.id.to_string())]).await;
    let (status, body) = boot(&r, &a, disk.id).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let start = last_start(&r);
    assert_eq!(start.image, disk.reference);
    let k = start.kernel.unwrap();
    assert_eq!(
        (k.kernel.as_str(), k.initrd, k.cmdline.as_deref()),
        (kernel.reference.as_str(), None, Some("root=/dev/vda"))
    );
    set_props(
        &r,
        &a,
        disk.id,
        &[
            ("ramdisk_id", initrd.id.to_string()),
            ("os_command_line", "root=/dev/vda1 quiet".into()),
        ],
    )
    .await;
    boot(&r, &a, disk.id).await;
    let k = last_start(&r).kernel.unwrap();
    assert_eq!(k.initrd.as_deref(), Some(initrd.reference.as_str()));
    assert_eq!(k.cmdline.as_deref(), Some("root=/dev/vda1 quiet"));

    // Properties that name what is not there for the project, or not of its kind.
    let other: Image = uploaded(store, Some(r.b.id), "b-root", ImageKind::Qcow2, 16 << 20);
    set_props(&r, &b, other.id, &[("kernel_id", kernel.id.to_string())]).await;
    let (status, body) = boot(&r, &b, other.id).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        message(&body).contains(&format!("kernel image {} could not be found", kernel.id)),
        "another project's private kernel: {body}"
    );
    for (key, value, says) in [
        ("kernel_id", disk.id.to_string(), "is not an aki image"),
        ("kernel_id", "vmlinuz".to_string(), "is not an image ID"),
        ("ramdisk_id", kernel.id.to_string(), "is not an ari image"),
    ] {
        let probe = uploaded(store, Some(r.a.id), "probe", ImageKind::Qcow2, 1 << 20);
        let mut props = vec![(key, value.clone())];
        if key == "ramdisk_id" {
            props.push(("kernel_id", kernel.id.to_string()));
        }
        set_props(&r, &a, probe.id, &props).await;
        let (status, body) = boot(&r, &a, probe.id).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}={value}: {body}");
        assert!(message(&body).contains(says), "{key}={value}: {body}");
    }
    // A command line a node would refuse is refused here.
    set_props(
        &r,
        &a,
        disk.id,
        &[("os_command_line", "quiet\u{1b}[2J".into())],
    )
    .await;
    let (status, body) = boot(&r, &a, disk.id).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("control character"), "{body}");
    r.stop().await;
}

/// `POST /servers/{id}/action` with `action`: the status and the body.
async fn act(r: &EngineRig, token: &str, server: Uuid, action: Value) -> (StatusCode, Value) {
    let path = format!("/compute/v2.1/servers/{server}/action");
    r.client()
        .call(axum::http::Method::POST, &path, token, Some(action))
        .await
}

#[tokio::test]
async fn a_kernel_that_is_gone_stops_new_boots_not_a_restart_nor_a_rebuilds_disk() {
    let r = EngineRig::start().await;
    let a = r.token(&r.a).await;
    let store = r.store.as_ref();
    let kernel = uploaded(store, Some(r.a.id), "vmlinuz", ImageKind::Kernel, 14 << 20);
    let initrd = uploaded(store, Some(r.a.id), "initrd", ImageKind::Ramdisk, 1 << 20);
    let disk = uploaded(store, Some(r.a.id), "root", ImageKind::Qcow2, 16 << 20);
    set_props(&r, &a, disk.id, &[("kernel_id", kernel.id.to_string())]).await;
    let (status, body) = boot(&r, &a, disk.id).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let server = id_of(&body, "server");
    r.stats(crate::engine_rig::NODE_A, &[(server, &[])]);
    r.stats(crate::engine_rig::NODE_B, &[(server, &[])]);
    r.out.take();

    // A rebuild to an image that cannot boot is refused before the server's disk goes.
    let (status, body) = act(&r, &a, server, json!({"rebuild": {"imageRef": initrd.id}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("is an initrd"), "{body}");
    assert!(r.out.take().is_empty(), "nothing sent to the node");

    // Stopped, its kernel deleted (as Glance lets it): a start boots the domain its node kept.
    let (status, body) = act(&r, &a, server, json!({"os-stop": null})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    r.frame(ssntp::Payload::InstanceStopped(
        ssntp::payload::InstanceEvent {
            instance_uuid: server,
        },
    ));
    r.out.take();
    let path = format!("/image/v2/images/{}", kernel.id);
    let (status, body) = r
        .client()
        .call(axum::http::Method::DELETE, &path, &a, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = act(&r, &a, server, json!({"os-start": null})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let start = last_start(&r);
    assert_eq!((start.instance_uuid, start.restart), (server, true));
    assert_eq!(start.kernel, None);
    // A new server of the disk is refused: its kernel is gone.
    let (status, body) = boot(&r, &a, disk.id).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("could not be found"), "{body}");
    r.stop().await;
}
