//! A user's change of its own password (`POST /v3/users/{id}/password`, Keystone's "Change
//! password for user"), over HTTP and through `openstack user password set`.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use controller::api::testing::OpenStackCli;
use serde_json::{Value, json};

use crate::openstack::{fails, json as cli_json, ok, openstack_or_skip};
use crate::support::{PASSWORD, World};

fn change(new: &str, original: &str) -> Value {
    json!({"user": {"password": new, "original_password": original}})
}

#[tokio::test]
async fn a_user_changes_its_own_password_and_its_tokens_end() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let other = w.token_a().await;
    let alice = w.a.user;
    let path = format!("/v3/users/{alice}/password");

    // A wrong original password: Keystone's 401; nothing changes.
    let (status, body) = c
        .call(Method::POST, &path, &a, Some(change("new-pw", "wrong")))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"]["code"], 401, "{body}");
    // Another user's id, or no user id: 403, whatever the password.
    for id in [w.b.user.to_string(), "not-a-user".to_string()] {
        let (status, body) = c
            .call(
                Method::POST,
                &format!("/v3/users/{id}/password"),
                &a,
                Some(change("new-pw", PASSWORD)),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{id}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("identity:change_password"),
            "{body}"
        );
    }
    // Empty, overlong or missing fields: 400.
    for bad in [
        change("", PASSWORD),
        change(&"x".repeat(1025), PASSWORD),
        change("new-pw", ""),
        json!({"user": {"password": "new-pw"}}),
        json!({"password": "new-pw", "original_password": PASSWORD}),
    ] {
        let (status, body) = c.call(Method::POST, &path, &a, Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    // Without a token: 401.
    let (status, _, _) = c
        .send(Method::POST, &path, None, Some(change("new-pw", PASSWORD)))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Still the old password, and both tokens still valid.
    assert_eq!(
        c.call(Method::GET, "/compute/v2.1/servers", &other, None)
            .await
            .0,
        StatusCode::OK
    );

    // The right one: 204, no body.
    let (status, body) = c
        .call(Method::POST, &path, &a, Some(change("new-pw", PASSWORD)))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    // Every token of the user ends, the caller's too; the new password logs in, the old not.
    for token in [&a, &other] {
        let (status, body) = c
            .call(Method::GET, "/compute/v2.1/servers", token, None)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let (status, _, _) = c.login(&w.a.user_name, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let fresh = w.token(&w.a.user_name, "new-pw", &w.a.name).await;
    // Bob is not affected.
    let b = w.token_b().await;
    assert_eq!(
        c.call(Method::GET, "/compute/v2.1/servers", &b, None)
            .await
            .0,
        StatusCode::OK
    );
    // The reader role is enough to change one's own password (it needs no role).
    let admin = w.admin_token().await;
    for (method, role) in [(Method::DELETE, "member"), (Method::PUT, "reader")] {
        let assignment = format!("/v3/projects/{}/users/{alice}/roles/{role}", w.a.id);
        let (status, body) = c.call(method, &assignment, &admin, None).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    let reader = w.token(&w.a.user_name, "new-pw", &w.a.name).await;
    let (status, body) = c
        .call(
            Method::POST,
            &path,
            &reader,
            Some(change("newer-pw", "new-pw")),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    drop(fresh);
    w.token(&w.a.user_name, "newer-pw", &w.a.name).await;
    w.stop().await;
}

#[tokio::test]
async fn wrong_original_passwords_count_against_the_login_limits() {
    let w = World::start_with(None, |c| {
        c.login.per_user = 2;
        c.login.per_source = 0;
    })
    .await;
    let c = w.client();
    let a = w.token_a().await;
    let path = format!("/v3/users/{}/password", w.a.user);
    for _ in 0..2 {
        let (status, body) = c
            .call(Method::POST, &path, &a, Some(change("new-pw", "guess")))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    // Past the limit, even the right password waits: 429 with Retry-After.
    let (status, headers, body) = c
        .send(
            Method::POST,
            &path,
            Some(&a),
            Some(change("new-pw", PASSWORD)),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(headers.contains_key("retry-after"));
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_sets_a_users_own_password() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let cli = |password: &str| {
        Arc::new(OpenStackCli::new(
            bin.clone(),
            &world.api.url,
            &world.a.user_name,
            password,
            &world.a.name,
        ))
    };
    let alice = cli(PASSWORD);
    let set = |original: &'static str| {
        [
            "user",
            "password",
            "set",
            "--password",
            "cli-new",
            "--original-password",
            original,
        ]
    };
    let err = fails(&alice, &set("wrong")).await;
    assert!(err.contains("401"), "{err}");
    ok(&alice, &set(PASSWORD)).await;
    // The old password no longer logs in; the new one does.
    let err = fails(&alice, &["token", "issue"]).await;
    assert!(err.contains("401"), "{err}");
    let token = cli_json(&cli("cli-new"), &["token", "issue"]).await;
    assert_eq!(token["user_id"], world.a.user.to_string(), "{token}");
    world.stop().await;
}
