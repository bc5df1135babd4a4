//! Hosts joining: join tokens (admin), the join with one (no login), the joined hosts, and
//! their revocation onto the CA's revocation list.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::World;

/// A world whose controller holds the CA key (as `--ca-key` gives it), writing its revocation
/// list into `dir`.
async fn world(pki: &testkit::TestPki, dir: &std::path::Path) -> World {
    let issuer = controller::join::JoinIssuer::from_pem(
        pki.ca_pem(),
        &pki.ca_key_pem(),
        &dir.join("crl.pem"),
        vec!["localhost:8888".into()],
    )
    .unwrap();
    let issuer = Arc::new(issuer);
    World::start_with(None, move |config| config.joins = Some(issuer)).await
}

fn csr() -> (rcgen::KeyPair, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let csr = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .serialize_request(&key)
        .unwrap()
        .pem()
        .unwrap();
    (key, csr)
}

#[tokio::test]
async fn a_token_lets_one_host_join_once_and_a_revoked_host_goes_on_the_list() {
    let pki = testkit::TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let w = world(&pki, dir.path()).await;
    let c = w.client();
    let admin = w.admin_token().await;
    let tenant = w.token_a().await;
    let path = "/cumulo/v1/join-tokens";
    // Admins only; roles of a node only; a bounded TTL.
    let body = json!({"roles": "agent,netagent", "ttl": "10m"});
    let (status, _, _) = c
        .send(Method::POST, path, Some(&tenant), Some(body.clone()))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A controller joins only a cluster on etcd: this one's store is SQLite.
    let (status, _, b) = c
        .send(
            Method::POST,
            path,
            Some(&admin),
            Some(json!({"roles": "controller"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{b}");
    for bad in [
        json!({"roles": "controller,agent"}),
        json!({"roles": "scheduler"}),
        json!({"roles": "agent", "ttl": "8d"}),
        json!({"roles": "agent", "ttl": "soon"}),
        json!({"roles": "agent", "extra": 1}),
    ] {
        let (status, _, b) = c
            .send(Method::POST, path, Some(&admin), Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {b}");
    }
    let (status, _, made) = c.send(Method::POST, path, Some(&admin), Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let token = made["token"].as_str().unwrap().to_string();
    assert_eq!(made["roles"], "agent|netagent");
    let (_, _, listed) = c.send(Method::GET, path, Some(&admin), None).await;
    assert_eq!(listed["join_tokens"].as_array().unwrap().len(), 1);
    assert!(
        !listed.to_string().contains(&token[33..]),
        "the secret is never listed"
    );

    // The CA, for the new host to check against its token.
    let (status, _, ca) = c.send(Method::GET, "/cumulo/v1/join/ca", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ca["ca"], pki.ca_pem());

    // A wrong secret, another CA's token, junk: the same 401.
    let (key, csr) = csr();
    let join = |token: String| json!({"token": token, "csr": csr, "hostname": "host2"});
    let mut wrong = token.clone();
    wrong.replace_range(33..35, if &token[33..35] == "00" { "11" } else { "00" });
    for bad in [
        wrong,
        "junk".to_string(),
        format!("{}{}", &token[..98], "0".repeat(64)),
    ] {
        let (status, _, b) = c
            .send(Method::POST, "/cumulo/v1/join", None, Some(join(bad)))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{b}");
    }
    // A bad request with the right token does not use it.
    let (status, _, _) = c
        .send(
            Method::POST,
            "/cumulo/v1/join",
            None,
            Some(json!({"token": token, "csr": "junk", "hostname": "host2"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, joined) = c
        .send(
            Method::POST,
            "/cumulo/v1/join",
            None,
            Some(join(token.clone())),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{joined}");
    let node: uuid::Uuid = joined["node_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(joined["schedulers"], json!(["localhost:8888"]));
    // The certificate is for the host's own key, with the token's roles and a fresh UUID.
    let identity = ssntp_net::TlsIdentity::from_pem(
        joined["ca"].as_str().unwrap().as_bytes(),
        joined["certificate"].as_str().unwrap().as_bytes(),
        key.serialize_pem().as_bytes(),
    )
    .unwrap();
    assert_eq!(
        identity.own().roles,
        ssntp::Role::AGENT | ssntp::Role::NETAGENT
    );
    assert_eq!(identity.own().binding, ssntp::UuidBinding::Bound(node));
    // Once only.
    let (status, _, _) = c
        .send(Method::POST, "/cumulo/v1/join", None, Some(join(token)))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (_, _, nodes) = c
        .send(Method::GET, "/cumulo/v1/joined-nodes", Some(&admin), None)
        .await;
    assert_eq!(nodes["joined_nodes"][0]["hostname"], "host2");
    assert_eq!(nodes["joined_nodes"][0]["revoked"], serde_json::Value::Null);

    // Removed: its certificate's serial is on the CA's revocation list.
    let revoke = format!("/cumulo/v1/nodes/{node}/revoke");
    let (status, _, _) = c.send(Method::POST, &revoke, Some(&tenant), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, view) = c.send(Method::POST, &revoke, Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert!(view["revoked"].is_string());
    std::fs::write(dir.path().join("ca.pem"), pki.ca_pem()).unwrap();
    let list = ssntp_net::revocation::CrlFile::new(
        &dir.path().join("crl.pem"),
        &dir.path().join("ca.pem"),
    )
    .unwrap()
    .load()
    .unwrap();
    let serial = hex::decode(view["serial"].as_str().unwrap()).unwrap();
    assert!(list.revokes(&serial));
    let (status, _, _) = c
        .send(
            Method::POST,
            &format!("/cumulo/v1/nodes/{}/revoke", uuid::Uuid::new_v4()),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    w.stop().await;
}

#[tokio::test]
async fn without_the_ca_key_no_host_joins() {
    let w = World::start().await;
    let admin = w.admin_token().await;
    let (status, _, b) = w
        .client()
        .send(
            Method::POST,
            "/cumulo/v1/join-tokens",
            Some(&admin),
            Some(json!({"roles": "agent"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{b}");
    assert!(b.to_string().contains("--ca-key"), "{b}");
    w.stop().await;
}
