//! Volumes made from images (Block Storage's `imageRef`) and servers booted from volumes
//! (Compute's `block_device_mapping_v2`), in process: the APIs over the real engine, whose frames
//! a recorder keeps (the START's `storage`, `image` and pinning; ATTACH_VOLUME's `image`), with
//! the nodes' answers fed to it as the scheduler forwards them; and over the fake cluster for a
//! volume that goes with its server from a node. No waiting: the engine applies a frame before
//! `handle` returns.

use std::ops::Deref;

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use ssntp::Payload;
use ssntp::payload::{InstanceEvent, NodeEvent, NodeType};
use store::{Image, ImageChange, ImageKind, ImageProps, NewImage, Scope, Visibility, VolumeStatus};
use uuid::Uuid;

use crate::engine_rig::{EngineRig, NODE_A, NODE_B, id_of};
use crate::support::{TestTenant, World, uploaded};

const GIB: u64 = 1 << 30;

/// The API over the real engine ([`EngineRig`]) with a public uploaded qcow2 image.
struct Rig {
    rig: EngineRig,
    /// A public uploaded qcow2 image of 300 MiB.
    disk: Image,
}

impl Deref for Rig {
    type Target = EngineRig;

    fn deref(&self) -> &EngineRig {
        &self.rig
    }
}

impl Rig {
    async fn start() -> Rig {
        let rig = EngineRig::start().await;
        let disk = uploaded(
            rig.store.as_ref(),
            None,
            "debian",
            ImageKind::Qcow2,
            300 << 20,
        );
        Rig { rig, disk }
    }

    /// A volume of `t` made from `image`, of `size` GiB.
    async fn volume_from(&self, token: &str, t: &TestTenant, image: Uuid, size: u32) -> Uuid {
        self.new_volume(token, t, json!({"size": size, "imageRef": image}))
            .await
    }

    /// A server booted from `mapping` (one block device), `imageRef` empty: its id.
    async fn server_from(&self, token: &str, mapping: Value) -> Uuid {
        let (status, body) = self
            .create_server(
                token,
                "bfv",
                json!({"imageRef": "", "block_device_mapping_v2": [mapping]}),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        id_of(&body, "server")
    }

    fn volume(&self, id: Uuid) -> store::Volume {
        self.store.volume(Scope::All, id).unwrap()
    }

    fn volumes_of(&self, t: &TestTenant) -> Vec<store::Volume> {
        self.store.volumes(Scope::Tenant(t.id)).unwrap()
    }

    fn servers_of(&self, t: &TestTenant) -> usize {
        self.store.usage(t.id).unwrap().instances as usize
    }

    async fn stop(self) {
        self.rig.stop().await;
    }
}

/// The message of an error body (Nova's or Cinder's).
fn message(body: &Value) -> String {
    body.as_object()
        .and_then(|o| o.values().next())
        .and_then(|inner| inner["message"].as_str())
        .unwrap_or_else(|| panic!("not a fault: {body}"))
        .to_string()
}

fn sha512_name(image: &Image) -> String {
    image.reference.clone()
}

#[tokio::test]
async fn volumes_are_made_from_disk_images_the_project_may_boot() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    // A volume from an uploaded disk image: bootable, with the image's metadata, available.
    let (status, body) = r
        .create_volume(
            &a,
            &r.a,
            json!({"size": 1, "name": "root", "imageRef": r.disk.id}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let shown = &body["volume"];
    assert_eq!(shown["status"], "available");
    assert_eq!(shown["bootable"], "true");
    assert_eq!(shown["size"], 1);
    let meta = &shown["volume_image_metadata"];
    assert_eq!(meta["image_id"], r.disk.id.to_string());
    assert_eq!(meta["image_name"], "debian");
    assert_eq!(meta["disk_format"], "qcow2");
    assert_eq!(meta["size"], (300u64 << 20).to_string());
    let id = id_of(&body, "volume");
    let record = r.volume(id);
    assert_eq!((record.image, record.bootable), (Some(r.disk.id), true));
    assert_eq!(record.status, VolumeStatus::Available);
    assert_eq!(
        r.show_volume(&a, &r.a, id).await["volume_image_metadata"],
        *meta
    );
    // `image_id` (python-cinderclient's older key) too; a blank volume has no image metadata.
    let (status, body) = r
        .create_volume(
            &a,
            &r.a,
            json!({"size": 2, "image_id": r.disk.id.to_string()}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, body) = r.create_volume(&a, &r.a, json!({"size": 1})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["volume"]["bootable"], "false");
    assert!(
        body["volume"].get("volume_image_metadata").is_none(),
        "{body}"
    );

    // What is refused, and why.
    let store = r.store.as_ref();
    let kernel = store
        .create_image(NewImage {
            owner: None,
            name: "tiny".into(),
            kind: ImageKind::Raw,
            reference: "tiny".into(),
        })
        .unwrap();
    let iso = uploaded(store, None, "installer", ImageKind::Iso, 50 << 20);
    let big = uploaded(store, None, "big", ImageKind::Raw, 3 * GIB);
    let private_b = uploaded(store, Some(r.b.id), "b-only", ImageKind::Qcow2, 1 << 20);
    let queued = store
        .create_queued_image(
            NewImage {
                owner: Some(r.a.id),
                name: "queued".into(),
                kind: ImageKind::Qcow2,
                reference: String::new(),
            },
            Visibility::Private,
            ImageProps::default(),
        )
        .unwrap();
    let needs_4 = uploaded(store, None, "needs-4", ImageKind::Qcow2, 1 << 20);
    store
        .change_image(
            Scope::All,
            needs_4.id,
            ImageChange {
                props: Some(ImageProps {
                    min_disk: 4,
                    ..ImageProps::default()
                }),
                ..ImageChange::default()
            },
        )
        .unwrap();
    let before = r.volumes_of(&r.a).len();
    for (image, size, says) in [
        (kernel.id, 1, "registered by reference"),
        (r.image.id, 1, "registered by reference"),
        (iso.id, 1, "ISO"),
        (
            big.id,
            2,
            "Size of specified image 3GB is larger than volume size 2GB.",
        ),
        (
            needs_4.id,
            2,
            "cannot be smaller than the image minDisk size 4GB",
        ),
        (
            private_b.id,
            1,
            "Invalid image identifier or unable to access requested image.",
        ),
        (queued.id, 1, "is not active"),
        (Uuid::new_v4(), 1, "Invalid image identifier"),
    ] {
        let (status, body) = r
            .create_volume(&a, &r.a, json!({"size": size, "imageRef": image}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{image}: {body}");
        assert!(message(&body).contains(says), "{says}: {body}");
    }
    let (status, body) = r
        .create_volume(&a, &r.a, json!({"size": 1, "imageRef": "not an image"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(r.volumes_of(&r.a).len(), before, "nothing made");
    // The big image fits in 3 GiB; B's image is B's to use.
    r.volume_from(&a, &r.a, big.id, 3).await;
    let b = r.token(&r.b).await;
    r.volume_from(&b, &r.b, private_b.id, 1).await;
    r.stop().await;
}

#[tokio::test]
async fn a_volume_from_an_image_is_filled_by_the_node_that_first_attaches_it() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let (status, body) = r
        .create_server(&a, "bfv", json!({"imageRef": r.image.id}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let server = id_of(&body, "server");
    r.stats(NODE_A, &[(server, &[])]);
    r.out.take();
    let v = r.volume_from(&a, &r.a, r.disk.id, 2).await;
    let (status, body) = r.attach(&a, server, v, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let sent = r.out.take();
    let Some(Payload::AttachVolume(command)) = sent.first() else {
        panic!("{sent:?}")
    };
    assert_eq!(
        command.image.as_deref(),
        Some(sha512_name(&r.disk).as_str())
    );
    assert_eq!(command.size_mb, Some(2048));
    assert_eq!(command.device.as_deref(), Some("vdb"));
    r.stats(NODE_A, &[(server, &[v])]);
    assert_eq!(r.volume(v).node, Some(NODE_A));
    // Detached and attached again: the node holds its file now, no image is sent.
    let (status, body) = r.detach(&a, server, v).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    r.stats(NODE_A, &[(server, &[])]);
    assert_eq!(r.volume(v).status, VolumeStatus::Available);
    r.out.take();
    let (status, body) = r.attach(&a, server, v, None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let sent = r.out.take();
    let Some(Payload::AttachVolume(command)) = sent.first() else {
        panic!("{sent:?}")
    };
    assert_eq!(command.image, None);
    r.stop().await;
}

#[tokio::test]
async fn a_server_boots_from_an_existing_volume() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let v = r.volume_from(&a, &r.a, r.disk.id, 2).await;
    // `openstack server create --volume V`.
    let server = r
        .server_from(
            &a,
            json!({"uuid": v, "boot_index": 0, "source_type": "volume",
                "destination_type": "volume"}),
        )
        .await;
    // The START: the volume as its boot storage, the volume's image, not pinned (no node holds
    // the volume yet), room for the volume's file.
    let starts = r.out.starts();
    assert_eq!(starts.len(), 1, "{starts:?}");
    let start = &starts[0];
    assert_eq!(start.instance_uuid, server);
    assert_eq!(start.image, sha512_name(&r.disk));
    let storage = start.storage.as_ref().unwrap();
    assert_eq!(storage.len(), 1);
    assert_eq!(
        (
            storage[0].id,
            storage[0].boot,
            storage[0].size_mb,
            storage[0].ephemeral
        ),
        (v, true, 2048, false)
    );
    assert_eq!(start.requirements.node_id, None);
    assert_eq!(start.requirements.disk_mb, 2048);
    // The volume is its root disk, in use from the start.
    let record = r.volume(v);
    assert_eq!(record.status, VolumeStatus::InUse);
    let attachment = record.attachment.clone().unwrap();
    assert_eq!(
        (attachment.instance, attachment.device.as_str()),
        (server, "/dev/vda")
    );
    assert!(!attachment.delete_on_termination);
    let shown = r.show_volume(&a, &r.a, v).await;
    assert_eq!(shown["status"], "in-use");
    assert_eq!(shown["attachments"][0]["device"], "/dev/vda");
    assert_eq!(shown["attachments"][0]["server_id"], server.to_string());
    // Its node's STATS lists it: the volume is on that node from then on.
    r.stats(NODE_A, &[(server, &[v])]);
    assert_eq!(r.volume(v).node, Some(NODE_A));
    assert_eq!(r.volume(v).status, VolumeStatus::InUse);
    // Nova's view: no image, the volume attached.
    let s = r.show_server(&a, server).await;
    assert_eq!(s["status"], "ACTIVE");
    assert_eq!(s["image"], "");
    assert_eq!(
        s["os-extended-volumes:volumes_attached"],
        json!([{"id": v, "delete_on_termination": false}])
    );
    let attachments = format!("/compute/v2.1/servers/{server}/os-volume_attachments");
    let (status, list) = r.client().call(Method::GET, &attachments, &a, None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["volumeAttachments"][0]["device"], "/dev/vda");
    // The root disk is not detached, by its owner nor (while the server is) by an admin.
    let (status, body) = r.detach(&a, server, v).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        message(&body).contains("Cannot detach a root device volume"),
        "{body}"
    );
    let admin = r.admin_token().await;
    let force = format!("/volume/v3/{}/volumes/{v}/action", r.api.admin.project);
    let (status, body) = r
        .client()
        .call(
            Method::POST,
            &force,
            &admin,
            Some(json!({"os-force_detach": {}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("root disk"), "{body}");
    // Nor deleted, nor rebuilt from another image.
    let path = format!("/volume/v3/{}/volumes/{v}", r.a.id);
    let (status, body) = r.client().call(Method::DELETE, &path, &a, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let rebuild = json!({"rebuild": {"imageRef": r.image.id}});
    let path = format!("/compute/v2.1/servers/{server}/action");
    let (status, body) = r
        .client()
        .call(Method::POST, &path, &a, Some(rebuild))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(message(&body).contains("volume-backed"), "{body}");
    r.out.take();

    // Deleted: the volume is released once the node confirms, available, still on its node.
    r.delete_server(&a, server).await;
    assert_eq!(r.volume(v).status, VolumeStatus::InUse);
    r.frame(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: server,
    }));
    let record = r.volume(v);
    assert_eq!(record.status, VolumeStatus::Available);
    assert_eq!((record.attachment, record.node), (None, Some(NODE_A)));
    r.out.take();

    // A second server from it: its START is pinned to the node that holds the volume, which
    // has its file already.
    let again = r
        .server_from(
            &a,
            json!({"uuid": v, "boot_index": "0", "source_type": "volume",
                "destination_type": "volume", "delete_on_termination": false}),
        )
        .await;
    let starts = r.out.starts();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0].instance_uuid, again);
    assert_eq!(starts[0].requirements.node_id, Some(NODE_A));
    assert_eq!(starts[0].requirements.disk_mb, 0);
    assert_eq!(starts[0].image, sha512_name(&r.disk));
    r.stats(NODE_A, &[(again, &[v])]);
    r.delete_server(&a, again).await;
    r.frame(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: again,
    }));
    assert_eq!(r.volume(v).status, VolumeStatus::Available);

    // Its node gone: a server booted from it is refused, naming the node.
    r.frame(Payload::NodeDisconnected(NodeEvent {
        node_uuid: NODE_A,
        node_type: NodeType::ComputeNode,
    }));
    let (status, body) = r
        .create_server(
            &a,
            "bfv",
            json!({"block_device_mapping_v2": [{"uuid": v, "boot_index": 0,
                "source_type": "volume", "destination_type": "volume"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let said = message(&body);
    assert!(
        said.contains(&NODE_A.to_string()) && said.contains("not connected"),
        "{said}"
    );
    assert_eq!(r.volume(v).status, VolumeStatus::Available);
    assert_eq!(r.servers_of(&r.a), 0, "no server left behind");
    r.stop().await;
}

#[tokio::test]
async fn a_server_boots_from_a_new_volume_made_from_its_image() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    // `openstack server create --image debian --boot-from-volume 2`.
    let mapping = json!({"uuid": r.disk.id, "boot_index": 0, "source_type": "image",
        "destination_type": "volume", "volume_size": 2});
    let server = r.server_from(&a, mapping.clone()).await;
    let volumes = r.volumes_of(&r.a);
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    let v = &volumes[0];
    // Named as Nova names them (empty), of the image, bootable, its root disk.
    assert_eq!((v.name.as_str(), v.size_gb), ("", 2));
    assert_eq!((v.image, v.bootable), (Some(r.disk.id), true));
    assert_eq!(v.status, VolumeStatus::InUse);
    let attachment = v.attachment.clone().unwrap();
    assert_eq!(
        (attachment.instance, attachment.device.as_str()),
        (server, "/dev/vda")
    );
    assert!(!attachment.delete_on_termination, "Nova's default");
    let starts = r.out.starts();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0].image, sha512_name(&r.disk));
    let storage = starts[0].storage.clone().unwrap();
    assert_eq!(
        (storage[0].id, storage[0].boot, storage[0].size_mb),
        (v.id, true, 2048)
    );
    let s = r.show_server(&a, server).await;
    assert_eq!(s["image"], "");
    assert_eq!(
        s["os-extended-volumes:volumes_attached"],
        json!([{"id": v.id, "delete_on_termination": false}])
    );
    // Deleted: the volume stays, available.
    r.stats(NODE_B, &[(server, &[v.id])]);
    assert_eq!(r.volume(v.id).node, Some(NODE_B));
    r.delete_server(&a, server).await;
    r.frame(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: server,
    }));
    assert_eq!(r.volume(v.id).status, VolumeStatus::Available);
    let kept = v.id;

    // With delete_on_termination, two servers (a volume each).
    let mut mapping = mapping;
    mapping["delete_on_termination"] = json!(true);
    let (status, body) = r
        .create_server(
            &a,
            "bfv",
            json!({"imageRef": "", "block_device_mapping_v2": [mapping], "min_count": 2}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let going: Vec<store::Volume> = r
        .volumes_of(&r.a)
        .into_iter()
        .filter(|v| v.id != kept)
        .collect();
    assert_eq!(going.len(), 2, "{going:?}");
    assert!(
        going
            .iter()
            .all(|v| v.attachment.as_ref().unwrap().delete_on_termination)
    );
    let servers: Vec<Uuid> = going
        .iter()
        .map(|v| v.attachment.as_ref().unwrap().instance)
        .collect();
    assert_ne!(servers[0], servers[1]);
    let s = r.show_server(&a, servers[0]).await;
    assert_eq!(
        s["os-extended-volumes:volumes_attached"][0]["delete_on_termination"],
        true
    );
    r.stats(NODE_A, &[(servers[1], &[going[1].id])]);
    assert_eq!(r.volume(going[1].id).node, Some(NODE_A));
    // One that no node reported goes once its delete is given up waiting for (the
    // confirmation timeout): its volume with it, at once (no node holds a file).
    r.delete_server(&a, servers[0]).await;
    assert_eq!(r.volume(going[0].id).status, VolumeStatus::InUse);
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    r.engine.sweep(later).unwrap();
    assert!(
        r.store.volume(Scope::All, going[0].id).is_err(),
        "gone with its server"
    );
    // The other one's node holds its file: the sweep asks the node to remove it; this rig's
    // engine reaches no node endpoint, so the volume stays, error_deleting, for a new delete.
    r.delete_server(&a, servers[1]).await;
    r.frame(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: servers[1],
    }));
    assert_eq!(r.volume(going[1].id).status, VolumeStatus::Deleting);
    r.engine.sweep(std::time::SystemTime::now()).unwrap();
    let left = r.volume(going[1].id);
    assert_eq!(
        (left.status, left.node),
        (VolumeStatus::ErrorDeleting, Some(NODE_A))
    );
    assert_eq!(r.volume(kept).status, VolumeStatus::Available);
    r.stop().await;
}

#[tokio::test]
async fn other_block_device_mappings_are_refused_and_leave_nothing() {
    let r = Rig::start().await;
    let a = r.token(&r.a).await;
    let b = r.token(&r.b).await;
    let bootable = r.volume_from(&a, &r.a, r.disk.id, 1).await;
    let blank = r.new_volume(&a, &r.a, json!({"size": 1})).await;
    let of_b = r.volume_from(&b, &r.b, r.disk.id, 1).await;
    let big = uploaded(r.store.as_ref(), None, "big", ImageKind::Raw, 3 * GIB);
    let volume = |id: Uuid| json!({"uuid": id, "boot_index": 0, "source_type": "volume", "destination_type": "volume"});
    let image = |id: Uuid, size: Value| {
        json!({"uuid": id, "boot_index": 0, "source_type": "image",
            "destination_type": "volume", "volume_size": size})
    };
    let other = Uuid::new_v4();
    for (server, says) in [
        (
            json!({"block_device_mapping_v2": [volume(bootable), volume(blank)]}),
            "only one",
        ),
        (
            json!({"block_device_mapping_v2": [{"boot_index": 0, "source_type": "blank",
                "destination_type": "volume", "volume_size": 1}]}),
            "source_type blank",
        ),
        (
            json!({"block_device_mapping_v2": [{"uuid": other, "boot_index": 0,
                "source_type": "snapshot", "destination_type": "volume"}]}),
            "source_type snapshot",
        ),
        (
            json!({"block_device_mapping_v2": [{"uuid": bootable, "boot_index": 1,
                "source_type": "volume", "destination_type": "volume"}]}),
            "boot_index 1",
        ),
        (
            json!({"imageRef": r.image.id, "block_device_mapping_v2": [{"uuid": r.disk.id,
                "boot_index": 0, "source_type": "image", "destination_type": "local"}]}),
            "own image",
        ),
        (
            json!({"block_device_mapping": [{"volume_id": bootable, "device_name": "vda"}]}),
            "legacy",
        ),
        (
            json!({"block_device_mapping_v2": [volume(blank)]}),
            "is not bootable",
        ),
        (
            json!({"block_device_mapping_v2": [volume(of_b)]}),
            "failed to get volume",
        ),
        (
            json!({"block_device_mapping_v2": [volume(bootable)], "max_count": 2}),
            "multiple instances",
        ),
        (
            json!({"block_device_mapping_v2": [image(r.disk.id, json!(null))]}),
            "non-zero size",
        ),
        (
            json!({"block_device_mapping_v2": [image(big.id, json!(2))]}),
            "larger than volume size",
        ),
        (
            json!({"block_device_mapping_v2": [image(other, json!(1))]}),
            "could not be found",
        ),
        (json!({"imageRef": ""}), "imageRef is required"),
    ] {
        let (status, body) = r.create_server(&a, "bfv", server.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{server}: {body}");
        assert!(message(&body).contains(says), "{says}: {body}");
    }
    assert_eq!(r.servers_of(&r.a), 0);
    assert_eq!(r.volumes_of(&r.a).len(), 2);
    assert!(r.out.starts().is_empty());
    // A volume in use is not booted from again.
    r.server_from(&a, volume(bootable)).await;
    let (status, body) = r
        .create_server(
            &a,
            "bfv",
            json!({"block_device_mapping_v2": [volume(bootable)]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        message(&body).contains("status must be 'available'"),
        "{body}"
    );
    // The image itself as a local boot device is a server booted from its image.
    let (status, body) = r
        .create_server(
            &a,
            "bfv",
            json!({"imageRef": r.disk.id, "block_device_mapping_v2": [{"uuid": r.disk.id,
                "boot_index": 0, "source_type": "image", "destination_type": "local",
                "delete_on_termination": true}]}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = id_of(&body, "server");
    let s = r.show_server(&a, id).await;
    assert_eq!(s["image"]["id"], r.disk.id.to_string());
    assert_eq!(s["os-extended-volumes:volumes_attached"], json!([]));
    let starts = r.out.starts();
    assert_eq!(starts.last().unwrap().storage, None);
    r.stop().await;
}

/// With the fake cluster: a volume that goes with its server has its file removed from the node
/// that holds it.
#[tokio::test]
async fn a_volume_that_goes_with_its_server_is_removed_from_its_node() {
    let w = World::start().await;
    let a = w.token_a().await;
    let disk = uploaded(w.store.as_ref(), None, "debian", ImageKind::Qcow2, 1 << 20);
    let c = w.client();
    let server = json!({"server": {"name": "bfv", "flavorRef": w.flavor.id, "imageRef": "",
        "block_device_mapping_v2": [{"uuid": disk.id, "boot_index": 0,
            "source_type": "image", "destination_type": "volume", "volume_size": 1,
            "delete_on_termination": true}]}});
    let (status, body) = c
        .call(Method::POST, "/compute/v2.1/servers", &a, Some(server))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let server = id_of(&body, "server");
    let volumes = w.store.volumes(Scope::Tenant(w.a.id)).unwrap();
    assert_eq!(volumes.len(), 1);
    let v = volumes[0].id;
    // As a node's report would: the volume's file is on NODE_A.
    w.store
        .change_volume(
            Scope::All,
            v,
            store::VolumeChange {
                node: Some(Some(NODE_A)),
                ..store::VolumeChange::default()
            },
            store::VolumeLimits::default(),
        )
        .unwrap();
    let path = format!("/compute/v2.1/servers/{server}");
    let (status, body) = c.call(Method::DELETE, &path, &a, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert!(
        w.store.volume(Scope::All, v).is_err(),
        "gone with its server"
    );
    assert_eq!(w.cluster.removed_volume_data(), vec![(NODE_A, v)]);
    w.stop().await;
}
