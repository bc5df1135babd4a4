//! Images through the Image API: create (queued), upload (streamed, hashed), download,
//! `PATCH`, tags, delete, schemas; another project sees none of it; a queued image does not
//! boot; an upload over the size cap leaves the image queued; so does one cut halfway, with
//! nothing kept and no staging file left; the `os_hidden` filter lists no image as hidden.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use controller::images::LocalBlobs;
use md5::Md5;
use serde_json::{Value, json};
use sha2::{Digest, Sha512};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Client, World};

const PATCH: &str = "application/openstack-images-v2.1-json-patch";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `POST /v2/images` with `body`: the status and the body.
pub(crate) async fn create(c: &Client, token: &str, body: Value) -> (StatusCode, Value) {
    let (status, _, body) = c
        .send(Method::POST, "/image/v2/images", Some(token), Some(body))
        .await;
    (status, body)
}

/// `PUT /v2/images/{id}/file` of `data`: the status and the body.
pub(crate) async fn upload(c: &Client, token: &str, id: &str, data: &[u8]) -> (StatusCode, Value) {
    let (status, _, body) = c
        .request(
            Method::PUT,
            &format!("/image/v2/images/{id}/file"),
            &[
                ("x-auth-token", token),
                ("content-type", "application/octet-stream"),
            ],
            data.to_vec(),
        )
        .await;
    (status, body)
}

/// `PATCH /v2/images/{id}` with the JSON patch `ops`: the status and the body.
pub(crate) async fn patch(c: &Client, token: &str, id: &str, ops: Value) -> (StatusCode, Value) {
    let (status, _, body) = c
        .request(
            Method::PATCH,
            &format!("/image/v2/images/{id}"),
            &[("x-auth-token", token), ("content-type", PATCH)],
            ops.to_string().into_bytes(),
        )
        .await;
    (status, body)
}

#[tokio::test]
async fn an_image_is_created_uploaded_downloaded_changed_and_deleted() {
    let w = World::start().await;
    let (a, b) = (w.token_a().await, w.token_b().await);
    let c = w.client();
    let (status, made) = create(
        &c,
        &a,
        json!({"name": "tiny", "disk_format": "raw", "container_format": "bare",
               "min_ram": 64, "tags": ["one"], "os_distro": "busybox"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["status"], "queued");
    assert_eq!(made["visibility"], "private");
    assert_eq!(made["owner"], w.a.id.to_string());
    assert_eq!(made["size"], Value::Null);
    assert_eq!(
        (&made["min_ram"], &made["tags"], &made["os_distro"]),
        (&json!(64), &json!(["one"]), &json!("busybox"))
    );
    let id = made["id"].as_str().unwrap().to_string();
    let path = format!("/image/v2/images/{id}");

    // No data yet: the download is empty, and it does not boot.
    let (status, _, _) = c
        .send(Method::GET, &format!("{path}/file"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(json!({"server": {"name": "x", "flavorRef": w.flavor.id, "imageRef": id}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("is not active"), "{body}");

    // Only octet streams; only the owner.
    let (status, _, body) = c
        .request(
            Method::PUT,
            &format!("{path}/file"),
            &[("x-auth-token", &a), ("content-type", "text/plain")],
            b"x".to_vec(),
        )
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    // Over the 1 MiB JSON body limit: image data is not held to it.
    let data = b"CUMULO test image data\n".repeat(60_000);
    let (status, body) = upload(&c, &b, &id, &data).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    let (status, body) = upload(&c, &a, &id, &data).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["status"], "active", "{shown}");
    assert_eq!(shown["size"], data.len());
    assert_eq!(shown["checksum"], hex(&Md5::digest(&data)));
    assert_eq!(shown["os_hash_algo"], "sha512");
    assert_eq!(shown["os_hash_value"], hex(&Sha512::digest(&data)));
    // A second upload is refused.
    let (status, body) = upload(&c, &a, &id, b"other").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, headers, got) = c
        .send(Method::GET, &format!("{path}/file"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got.as_str().unwrap().as_bytes(), &data[..]);
    assert_eq!(headers["content-md5"], hex(&Md5::digest(&data)).as_str());
    assert_eq!(headers["content-type"], "application/octet-stream");
    // Another project sees none of it.
    for p in [path.clone(), format!("{path}/file")] {
        let (status, _, body) = c.send(Method::GET, &p, Some(&b), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{p}: {body}");
    }
    let (_, _, listed) = c
        .send(Method::GET, "/image/v2/images", Some(&b), None)
        .await;
    assert!(!listed.to_string().contains(&id), "{listed}");

    // PATCH: rename, a property, tags; read-only fields and other content types refused.
    let (status, changed) = patch(
        &c,
        &a,
        &id,
        json!([
            {"op": "replace", "path": "/name", "value": "tiny-2"},
            {"op": "add", "path": "/hw_disk_bus", "value": "virtio"},
            {"op": "replace", "path": "/tags", "value": ["one", "two"]},
            {"op": "remove", "path": "/os_distro"},
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["name"], "tiny-2");
    assert_eq!(changed["hw_disk_bus"], "virtio");
    assert_eq!(changed["tags"], json!(["one", "two"]));
    assert_eq!(changed.get("os_distro"), None, "{changed}");
    assert_eq!(changed["size"], data.len(), "the data stays");
    for (ops, want) in [
        (
            json!([{"op": "replace", "path": "/size", "value": 1}]),
            StatusCode::FORBIDDEN,
        ),
        (
            json!([{"op": "replace", "path": "/visibility", "value": "public"}]),
            StatusCode::FORBIDDEN,
        ),
        (
            json!([{"op": "replace", "path": "/disk_format", "value": "qcow2"}]),
            StatusCode::FORBIDDEN,
        ),
        (
            json!([{"op": "move", "path": "/name", "from": "/x"}]),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!([{"op": "remove", "path": "/nothing"}]),
            StatusCode::CONFLICT,
        ),
    ] {
        let (status, body) = patch(&c, &a, &id, ops.clone()).await;
        assert_eq!(status, want, "{ops}: {body}");
    }
    let (status, _, body) = c
        .send(
            Method::PATCH,
            &path,
            Some(&a),
            Some(json!([{"op": "replace", "path": "/name", "value": "x"}])),
        )
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let (status, body) = patch(
        &c,
        &b,
        &id,
        json!([{"op": "replace", "path": "/name", "value": "stolen"}]),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // Tags one at a time.
    let tag = |m: Method, t: &str| {
        let (c, a, p) = (c.clone(), a.clone(), format!("{path}/tags/{t}"));
        async move { c.send(m, &p, Some(&a), None).await.0 }
    };
    assert_eq!(tag(Method::PUT, "three").await, StatusCode::NO_CONTENT);
    assert_eq!(tag(Method::DELETE, "one").await, StatusCode::NO_CONTENT);
    assert_eq!(tag(Method::DELETE, "one").await, StatusCode::NOT_FOUND);
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["tags"], json!(["two", "three"]));

    // It boots now (the fake cluster takes the server).
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(json!({"server": {"name": "x", "flavorRef": w.flavor.id, "imageRef": id}})),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");

    // A protected image stays; in use, it stays too (its workload refers to it).
    let (status, body) = patch(
        &c,
        &a,
        &id,
        json!([{"op": "replace", "path": "/protected", "value": true}]),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = c.send(Method::DELETE, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    patch(
        &c,
        &a,
        &id,
        json!([{"op": "replace", "path": "/protected", "value": false}]),
    )
    .await;
    let (status, _, body) = c.send(Method::DELETE, &path, Some(&a), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    // An image no one uses goes, and its data with it.
    let (_, other) = create(&c, &a, json!({"name": "gone", "disk_format": "qcow2"})).await;
    let other_id = other["id"].as_str().unwrap().to_string();
    let (status, _) = upload(&c, &a, &other_id, b"gone data").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let hash = hex(&Sha512::digest(b"gone data"));
    let blobs = w.api.state.config.images.clone().unwrap();
    assert!(blobs.open(&hash).is_ok());
    let (status, _, body) = c
        .send(
            Method::DELETE,
            &format!("/image/v2/images/{other_id}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert!(blobs.open(&hash).is_err(), "the data stayed");
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("/image/v2/images/{other_id}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    w.stop().await;
}

#[tokio::test]
async fn bad_creates_are_refused_and_admins_make_public_images() {
    let w = World::start().await;
    let (a, admin) = (w.token_a().await, w.admin_token().await);
    let c = w.client();
    for (body, want) in [
        (json!({"disk_format": "raw"}), StatusCode::BAD_REQUEST),
        (
            json!({"name": "x", "disk_format": "vmdk"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "x", "container_format": "ovf"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "x", "visibility": "hidden"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"name": "x", "visibility": "public"}),
            StatusCode::FORBIDDEN,
        ),
        (
            json!({"name": "x", "status": "active"}),
            StatusCode::FORBIDDEN,
        ),
        (
            json!({"name": "x", "os_hash_value": "00"}),
            StatusCode::FORBIDDEN,
        ),
        (json!({"name": "x", "min_ram": -1}), StatusCode::BAD_REQUEST),
        (json!({"name": "x", "prop": 1}), StatusCode::BAD_REQUEST),
    ] {
        let (status, got) = create(&c, &a, body.clone()).await;
        assert_eq!(status, want, "{body}: {got}");
    }
    let (status, made) = create(
        &c,
        &admin,
        json!({"name": "shared-base", "visibility": "public", "disk_format": "qcow2"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(made["visibility"], "public");
    assert_eq!(made["owner"], Value::Null);
    // A project sees it.
    let (_, _, listed) = c
        .send(Method::GET, "/image/v2/images", Some(&a), None)
        .await;
    assert!(listed.to_string().contains("shared-base"), "{listed}");
    // The schemas.
    for p in ["/image/v2/schemas/image", "/image/v2/schemas/images"] {
        let (status, _, body) = c.send(Method::GET, p, Some(&a), None).await;
        assert_eq!(status, StatusCode::OK, "{p}");
        assert!(body["name"].is_string(), "{body}");
    }
    w.stop().await;
}

#[tokio::test]
async fn an_upload_over_the_cap_leaves_the_image_queued() {
    let w = World::start_with(None, |config| config.image_size_cap = 10).await;
    let a = w.token_a().await;
    let c = w.client();
    let (_, made) = create(&c, &a, json!({"name": "small", "disk_format": "raw"})).await;
    let id = made["id"].as_str().unwrap().to_string();
    let (status, body) = upload(&c, &a, &id, b"eleven byte").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let (_, _, shown) = c
        .send(
            Method::GET,
            &format!("/image/v2/images/{id}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(shown["status"], "queued");
    assert_eq!(shown["size"], Value::Null);
    let (status, body) = upload(&c, &a, &id, b"ten bytes!").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    w.stop().await;
}

/// The names of the files in `dir`.
fn files_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Image `id`'s status as `token` sees it, once `done` accepts it (within 10 s); panics if it
/// is ever `active` meanwhile.
async fn status_when(c: &Client, token: &str, id: &str, done: impl Fn(&str) -> bool) -> Value {
    let path = format!("/image/v2/images/{id}");
    testkit::wait_for(Duration::from_secs(10), || {
        let (c, token, path) = (c.clone(), token.to_string(), path.clone());
        let done = &done;
        async move {
            let (status, _, shown) = c.send(Method::GET, &path, Some(&token), None).await;
            assert_eq!(status, StatusCode::OK, "{shown}");
            assert_ne!(shown["status"], "active", "a cut upload made it active");
            match shown["status"].as_str() {
                Some(s) if done(s) => Ok(shown),
                _ => Err(format!("image {id} is not there yet: {shown}")),
            }
        }
    })
    .await
}

/// How a client cuts an upload.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// Shuts its side of the connection (a FIN) and reads what the server answers.
    Shutdown,
    /// Closes the connection altogether.
    Close,
}

#[tokio::test]
async fn an_upload_cut_halfway_leaves_the_image_queued_and_nothing_stored() {
    // The image store in a directory of the test's own, to look into.
    let store = tempfile::tempdir().unwrap();
    let blobs = Arc::new(LocalBlobs::open(store.path()).unwrap());
    let w = World::start_with(None, |config| config.images = Some(blobs)).await;
    let (staging, kept) = (store.path().join("staging"), store.path().join("sha512"));
    let a = w.token_a().await;
    let c = w.client();
    let (_, made) = create(&c, &a, json!({"name": "cut", "disk_format": "raw"})).await;
    let id = made["id"].as_str().unwrap().to_string();
    let path = format!("/image/v2/images/{id}");
    // Text (the test client reads bodies as text), no two MiB alike.
    let data: Vec<u8> = (0..4u32 << 20).map(|i| b'a' + (i % 23) as u8).collect();
    let half = &data[..data.len() / 2];

    for cut in [Cut::Shutdown, Cut::Close] {
        // 4 MiB announced, 2 MiB sent: the image is saving; then the connection is cut.
        let mut tcp = tokio::net::TcpStream::connect(w.api.addr).await.unwrap();
        let head = format!(
            "PUT {path}/file HTTP/1.1\r\nHost: {}\r\nX-Auth-Token: {a}\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            w.api.addr,
            data.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp.write_all(half).await.unwrap();
        status_when(&c, &a, &id, |s| s == "saving").await;
        match cut {
            Cut::Shutdown => {
                tcp.shutdown().await.unwrap();
                let mut answer = Vec::new();
                tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
                    .await
                    .expect("the server closes a cut upload's connection")
                    .unwrap();
                let answer = String::from_utf8_lossy(&answer);
                assert!(
                    answer.starts_with("HTTP/1.1 400 "),
                    "a cut upload's answer: {answer}"
                );
                assert!(answer.contains("the upload was cut short"), "{answer}");
            }
            Cut::Close => drop(tcp),
        }

        // Queued again, as Glance's `_restore` leaves a failed upload (never active: see
        // `status_when`); no data, no staging file.
        let shown = status_when(&c, &a, &id, |s| s == "queued").await;
        for field in ["size", "checksum", "os_hash_value"] {
            assert_eq!(shown[field], Value::Null, "{cut:?}: {shown}");
        }
        testkit::wait_for(Duration::from_secs(10), || {
            let (staged, kept) = (files_in(&staging), files_in(&kept));
            async move {
                if staged.is_empty() && kept.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{cut:?}: staging {staged:?}, kept {kept:?}"))
                }
            }
        })
        .await;
        let (status, _, body) = c
            .send(Method::GET, &format!("{path}/file"), Some(&a), None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{cut:?}: {body}");
    }

    // Queued, it takes a whole upload afterwards: that one is kept, under its hash only.
    let (status, body) = upload(&c, &a, &id, &data).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, _, shown) = c.send(Method::GET, &path, Some(&a), None).await;
    assert_eq!(shown["status"], "active", "{shown}");
    assert_eq!(shown["size"], data.len(), "{shown}");
    assert_eq!(shown["checksum"], hex(&Md5::digest(&data)), "{shown}");
    let hash = hex(&Sha512::digest(&data));
    assert_eq!(shown["os_hash_value"], hash.as_str(), "{shown}");
    assert_eq!(files_in(&kept), vec![hash]);
    assert!(files_in(&staging).is_empty(), "{:?}", files_in(&staging));
    let (status, _, got) = c
        .send(Method::GET, &format!("{path}/file"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got.as_str().map(str::as_bytes), Some(&data[..]));
    w.stop().await;
}

/// Glance's `os_hidden` filter: no image is hidden here, so `true` (any case, as openstacksdk's
/// `find_image` sends `True`) lists none, `false` lists as without it, anything else is a 400.
#[tokio::test]
async fn the_os_hidden_filter_lists_no_image_as_hidden() {
    let w = World::start().await;
    let a = w.token_a().await;
    let c = w.client();
    let names = |body: &Value| -> Vec<String> {
        body["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap().to_string())
            .collect()
    };
    for (query, want) in [
        ("", vec!["cirros"]),
        ("?os_hidden=false", vec!["cirros"]),
        ("?os_hidden=true", vec![]),
        ("?os_hidden=True&name=cirros", vec![]),
    ] {
        let path = format!("/image/v2/images{query}");
        let (status, _, body) = c.send(Method::GET, &path, Some(&a), None).await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        assert_eq!(names(&body), want, "{query}");
    }
    let (status, _, body) = c
        .send(
            Method::GET,
            "/image/v2/images?os_hidden=maybe",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("os_hidden"), "{body}");
    w.stop().await;
}

#[tokio::test]
async fn raw_data_in_a_docker_container_is_a_containers_root_file_system() {
    let w = World::start().await;
    let a = w.token_a().await;
    let c = w.client();
    let (status, made) = create(
        &c,
        &a,
        json!({"name": "rootfs", "disk_format": "raw", "container_format": "docker"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(
        (&made["disk_format"], &made["container_format"]),
        (&json!("raw"), &json!("docker"))
    );
    let id = made["id"].as_str().unwrap().to_string();
    let kind = |w: &World| {
        let id = uuid::Uuid::parse_str(&id).unwrap();
        w.store.image(store::Scope::All, id).unwrap().kind
    };
    assert_eq!(kind(&w), store::ImageKind::Container);
    // Only raw data goes in a docker container.
    let (status, got) = create(
        &c,
        &a,
        json!({"name": "x", "disk_format": "qcow2", "container_format": "docker"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{got}");
    // While queued, the container format changes the kind both ways.
    let set =
        |format: &str| json!([{"op": "replace", "path": "/container_format", "value": format}]);
    let (status, got) = patch(&c, &a, &id, set("bare")).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(kind(&w), store::ImageKind::Raw);
    let (status, got) = patch(&c, &a, &id, set("docker")).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(kind(&w), store::ImageKind::Container);
    // Once it has data, no more.
    let (status, got) = upload(&c, &a, &id, b"not really a tarball").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{got}");
    let (status, got) = patch(&c, &a, &id, set("bare")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{got}");
    assert_eq!(kind(&w), store::ImageKind::Container);
    w.stop().await;
}
