//! Compute `os-keypairs`: generate (the private key answered once), import, list, show, delete,
//! per user; Nova's codes and error bodies for duplicates, bad names and keys, missing key
//! pairs and the per-user limit.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::World;

const KEYS: &str = "/compute/v2.1/os-keypairs";
const ED25519: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDqQAmShDSQy5PElKTKfr2Xx0D8ZW+CSzdNTY+7C0SPx me@home";

fn create(name: &str, public_key: Option<&str>) -> Value {
    match public_key {
        Some(key) => json!({"keypair": {"name": name, "public_key": key}}),
        None => json!({"keypair": {"name": name}}),
    }
}

#[tokio::test]
async fn keypair_lifecycle() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;

    // Generate: 200 at 2.1, the private key once.
    let (status, _, made) = c
        .send(Method::POST, KEYS, Some(&a), Some(create("k1", None)))
        .await;
    assert_eq!(status, StatusCode::OK, "{made}");
    let k1 = &made["keypair"];
    assert_eq!(k1["name"], "k1");
    assert_eq!(k1["user_id"], w.a.user.to_string());
    assert!(
        k1["private_key"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
    );
    assert!(
        k1["public_key"]
            .as_str()
            .unwrap()
            .starts_with("ssh-ed25519 ")
    );
    assert_eq!(k1["fingerprint"].as_str().unwrap().len(), 47);

    // Import.
    let (status, _, imported) = c
        .send(
            Method::POST,
            KEYS,
            Some(&a),
            Some(create("k2", Some(ED25519))),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{imported}");
    assert_eq!(imported["keypair"]["public_key"], ED25519);
    assert!(imported["keypair"].get("private_key").is_none());

    // List and show: never a private key.
    let (status, _, list) = c.send(Method::GET, KEYS, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = list["keypairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["keypair"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["k1", "k2"]);
    assert!(!list.to_string().contains("PRIVATE"));
    let (status, _, shown) = c
        .send(Method::GET, &format!("{KEYS}/k2"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        shown["keypair"]["fingerprint"],
        imported["keypair"]["fingerprint"]
    );
    assert_eq!(shown["keypair"]["deleted"], false);
    assert!(shown["keypair"]["created_at"].is_string());

    // Per user: B sees none of A's, and may use the same names.
    let (_, _, list_b) = c.send(Method::GET, KEYS, Some(&b), None).await;
    assert_eq!(list_b["keypairs"], json!([]));
    let (status, _, body) = c
        .send(Method::GET, &format!("{KEYS}/k2"), Some(&b), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["itemNotFound"]["code"], 404, "{body}");
    let (status, _, _) = c
        .send(
            Method::POST,
            KEYS,
            Some(&b),
            Some(create("k2", Some(ED25519))),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // Refusals in Nova's shapes.
    let (status, _, body) = c
        .send(Method::POST, KEYS, Some(&a), Some(create("k2", None)))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["conflictingRequest"]["message"],
        "Key pair 'k2' already exists."
    );
    for bad in [
        create("a/b", None),
        create("", None),
        create(&"k".repeat(256), None),
        create("k3", Some("ssh-rsa AAAA")),
        create("k3", Some("not a key")),
        json!({"keypair": {"name": "k3", "type": "x509"}}),
        json!({"keypair": {}}),
    ] {
        let (status, _, body) = c
            .send(Method::POST, KEYS, Some(&a), Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["badRequest"]["code"], 400, "{body}");
    }

    // Delete: 202, then 404.
    let (status, _, _) = c
        .send(Method::DELETE, &format!("{KEYS}/k1"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, _, _) = c
        .send(Method::DELETE, &format!("{KEYS}/k1"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, _, list) = c.send(Method::GET, KEYS, Some(&a), None).await;
    assert_eq!(list["keypairs"].as_array().unwrap().len(), 1);
    let (status, _, _) = c.send(Method::GET, KEYS, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.stop().await;
}

#[tokio::test]
async fn names_with_spaces_are_reached_by_their_escaped_path() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let (status, _, _) = c
        .send(
            Method::POST,
            KEYS,
            Some(&a),
            Some(create("my key", Some(ED25519))),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = c
        .send(Method::GET, &format!("{KEYS}/my%20key"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["keypair"]["name"], "my key");
    w.stop().await;
}

#[tokio::test]
async fn a_user_holds_at_most_a_hundred_key_pairs() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    for n in 0..100 {
        let (status, _, body) = c
            .send(
                Method::POST,
                KEYS,
                Some(&a),
                Some(create(&format!("k{n}"), Some(ED25519))),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{n}: {body}");
    }
    let (status, _, body) = c
        .send(Method::POST, KEYS, Some(&a), Some(create("one-more", None)))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["forbidden"]["message"],
        "Quota exceeded, too many key pairs."
    );
    let (_, _, limits) = c
        .send(Method::GET, "/compute/v2.1/limits", Some(&a), None)
        .await;
    assert_eq!(limits["limits"]["absolute"]["maxTotalKeypairs"], 100);
    w.stop().await;
}

#[tokio::test]
async fn servers_are_created_with_a_key_pair_of_the_caller() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let (status, _, _) = c
        .send(
            Method::POST,
            KEYS,
            Some(&a),
            Some(create("k2", Some(ED25519))),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = c
        .send(Method::POST, KEYS, Some(&b), Some(create("only-b", None)))
        .await;
    assert_eq!(status, StatusCode::OK);
    let server = |key: Value| {
        json!({"server": {"name": "web", "flavorRef": w.flavor.id, "imageRef": w.image.id,
            "key_name": key}})
    };
    let (status, _, made) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(server(json!("k2"))),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{made}");
    let id = made["server"]["id"].as_str().unwrap();
    let (_, _, shown) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1/servers/{id}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(shown["server"]["key_name"], "k2");
    let instance = w
        .store
        .instance(store::Scope::All, id.parse().unwrap())
        .unwrap();
    assert_eq!(instance.key.unwrap().public_key, ED25519);
    let (status, _, native) = c
        .send(
            Method::GET,
            &format!("/cumulo/v1/instances/{id}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{native}");
    assert_eq!(native["key_name"], "k2", "{native}");

    // The instance keeps its key when the key pair goes.
    let (status, _, _) = c
        .send(Method::DELETE, &format!("{KEYS}/k2"), Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, _, detail) = c
        .send(Method::GET, "/compute/v2.1/servers/detail", Some(&a), None)
        .await;
    assert_eq!(detail["servers"][0]["key_name"], "k2");

    // Unknown, deleted, another user's, malformed: 400, nothing created.
    for key in [
        json!("nope"),
        json!("k2"),
        json!("only-b"),
        json!("a/b"),
        json!(5),
    ] {
        let (status, _, body) = c
            .send(
                Method::POST,
                "/compute/v2.1/servers",
                Some(&a),
                Some(server(key.clone())),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}: {body}");
        assert!(body["badRequest"]["message"].is_string(), "{body}");
    }
    let (_, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(server(json!("nope"))),
        )
        .await;
    assert_eq!(body["badRequest"]["message"], "Invalid key_name provided.");
    let (_, _, list) = c
        .send(Method::GET, "/compute/v2.1/servers", Some(&a), None)
        .await;
    assert_eq!(list["servers"].as_array().unwrap().len(), 1);

    // Without a key: null.
    let (_, _, made) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(server(Value::Null)),
        )
        .await;
    let id = made["server"]["id"].as_str().unwrap();
    let (_, _, shown) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1/servers/{id}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(shown["server"]["key_name"], Value::Null);
    w.stop().await;
}
