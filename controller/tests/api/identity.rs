//! Identity v3: discovery, login, token validation, expiry, forgery, revocation (by
//! `DELETE /v3/auth/tokens`, a password change, a role removal), the admin bootstrap keeping a
//! changed password, projects and users.

use std::time::{Duration, SystemTime};

use axum::http::{Method, StatusCode};
use controller::api::bootstrap_with;
use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, TEST_ITERATIONS};
use serde_json::json;
use store::Role;

use crate::support::{Client, PASSWORD, World, login_body};

#[tokio::test]
async fn version_discovery() {
    let w = World::start().await;
    let (status, _, body) = w.client().send(Method::GET, "/", None, None).await;
    assert_eq!(status, StatusCode::MULTIPLE_CHOICES);
    assert_eq!(body["versions"]["values"][0]["id"], "v3.14");
    let (status, _, body) = w.client().send(Method::GET, "/v3", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["version"]["links"][0]["href"],
        format!("{}/v3/", w.api.url)
    );
    w.stop().await;
}

#[tokio::test]
async fn login_gives_a_scoped_token_and_a_catalog() {
    let w = World::start().await;
    let body = login_body(&w.a.user_name, PASSWORD, &w.a.name);
    let (status, headers, token) = w
        .client()
        .send(Method::POST, "/v3/auth/tokens", None, Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{token}");
    assert!(headers.contains_key("x-subject-token"));
    let token = &token["token"];
    assert_eq!(token["project"]["id"], w.a.id.to_string());
    assert_eq!(token["user"]["id"], w.a.user.to_string());
    assert_eq!(token["roles"][0]["name"], "member");
    assert!(token["expires_at"].as_str().unwrap().ends_with('Z'));
    let catalog = token["catalog"].to_string();
    for kind in ["identity", "compute", "image"] {
        assert!(
            catalog.contains(&format!("\"type\":\"{kind}\"")),
            "{catalog}"
        );
    }
    assert!(catalog.contains(&format!("{}/compute/v2.1", w.api.url)));

    // Login by ids works too.
    let by_id = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "id": w.a.user, "password": PASSWORD}}}, "scope": {"project": {"id": w.a.id}}}});
    let (status, _, _) = w
        .client()
        .send(Method::POST, "/v3/auth/tokens", None, Some(by_id))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    w.stop().await;
}

#[tokio::test]
async fn bad_logins_are_refused() {
    let w = World::start().await;
    let c = w.client();
    let cases = [
        // Wrong password, unknown user, unknown project, another tenant's project.
        (login_body(&w.a.user_name, "wrong", &w.a.name), 401),
        (login_body("nobody", PASSWORD, &w.a.name), 401),
        (login_body(&w.a.user_name, PASSWORD, "no-such-project"), 401),
        (login_body(&w.a.user_name, PASSWORD, &w.b.name), 401),
        // Another domain.
        (
            json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": w.a.user_name, "domain": {"name": "Other"}, "password": PASSWORD}}},
            "scope": {"project": {"name": w.a.name, "domain": {"name": "Default"}}}}}),
            401,
        ),
        // A bad token; another method; two methods; no user; wrong shapes (no scope is an
        // unscoped token: identity_scopes.rs).
        (
            json!({"auth": {"identity": {"methods": ["token"], "token": {"id": "x"}}}}),
            401,
        ),
        (
            json!({"auth": {"identity": {"methods": ["totp"], "totp": {}}}}),
            401,
        ),
        (
            json!({"auth": {"identity": {"methods": ["password", "token"], "password": {"user": {
            "name": w.a.user_name, "password": PASSWORD}}, "token": {"id": "x"}}}}),
            401,
        ),
        (
            json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "password": PASSWORD}}}}}),
            400,
        ),
        (json!({"auth": {"identity": {"methods": []}}}), 400),
        (
            json!({"auth": {"identity": {"methods": ["password"]}}}),
            400,
        ),
        (json!({"auth": 5}), 400),
        (json!([]), 400),
    ];
    for (body, expected) in cases {
        let (status, _, reply) = c
            .send(Method::POST, "/v3/auth/tokens", None, Some(body.clone()))
            .await;
        assert_eq!(status.as_u16(), expected, "{body} -> {reply}");
        assert_eq!(reply["error"]["code"], expected, "{reply}");
    }
    let (status, _, _) = c
        .raw(Method::POST, "/v3/auth/tokens", None, b"{not json".to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    w.stop().await;
}

#[tokio::test]
async fn tokens_validate_expire_and_cannot_be_forged() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let validate = |caller: String, subject: String| {
        let c = w.client();
        async move {
            c.send_with(
                Method::GET,
                "/v3/auth/tokens",
                &[("x-auth-token", &caller), ("x-subject-token", &subject)],
                None,
            )
            .await
        }
    };
    let (status, headers, body) = validate(a.clone(), a.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["x-subject-token"], a.as_str());
    assert_eq!(body["token"]["project"]["name"], w.a.name);
    // A member may not validate another user's token; an admin may.
    let (status, _, _) = validate(b.clone(), a.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = validate(w.admin_token().await, a.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = validate(a.clone(), format!("{a}x")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Expired: issued two hours ago with a one-hour life.
    let (expired, _) = w
        .api
        .state
        .signer
        .issue(
            w.a.user,
            w.a.id,
            0,
            SystemTime::now() - Duration::from_secs(7200),
        )
        .unwrap();
    // Forged: the claims of A's token signed with another key.
    let other = controller::api::TokenSigner::random(Duration::from_secs(3600)).unwrap();
    let (forged, _) = other.issue(w.a.user, w.a.id, 0, SystemTime::now()).unwrap();
    // The last character changed (to one it is not: a token that ends in 'A' gets a 'B').
    let last = if a.ends_with('A') { 'B' } else { 'A' };
    let tampered = format!("{}{last}", &a[..a.len() - 1]);
    for (token, what) in [
        (expired.as_str(), "expired"),
        (forged.as_str(), "forged"),
        (tampered.as_str(), "tampered"),
        ("", "empty"),
        ("garbage", "garbage"),
    ] {
        for path in [
            "/v3/auth/projects",
            "/compute/v2.1/servers",
            "/image/v2/images",
            "/cumulo/v1/instances",
        ] {
            let (status, headers, body) = c.send(Method::GET, path, Some(token), None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{what} on {path}: {body}");
            assert!(headers.contains_key("www-authenticate"));
        }
    }
    let (status, _, _) = c.send(Method::GET, "/v3/auth/projects", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A revoked role ends the token at once.
    w.store.revoke_role(w.a.user, w.a.id, Role::Member).unwrap();
    let (status, _, _) = c
        .send(Method::GET, "/v3/auth/projects", Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A user revokes its own token: 204, then it is refused.
    assert_eq!(revoke(&c, &b, &b).await, StatusCode::NO_CONTENT);
    let (status, _, _) = c
        .send(Method::GET, "/v3/auth/projects", Some(&b), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.stop().await;
}

/// `DELETE /v3/auth/tokens` with `caller`'s token for `subject`: the status.
async fn revoke(c: &Client, caller: &str, subject: &str) -> StatusCode {
    let headers = [("x-auth-token", caller), ("x-subject-token", subject)];
    c.send_with(Method::DELETE, "/v3/auth/tokens", &headers, None)
        .await
        .0
}

/// `GET /v3/auth/tokens` with `caller`'s token for `subject`: the status.
async fn validate(c: &Client, caller: &str, subject: &str) -> StatusCode {
    let headers = [("x-auth-token", caller), ("x-subject-token", subject)];
    c.send_with(Method::GET, "/v3/auth/tokens", &headers, None)
        .await
        .0
}

/// The status of `token` on a few routes of every family (all the same, or the first differing).
async fn status_with(c: &Client, token: &str) -> StatusCode {
    let mut seen = Vec::new();
    for path in [
        "/v3/auth/projects",
        "/compute/v2.1/servers",
        "/image/v2/images",
        "/cumulo/v1/instances",
    ] {
        seen.push(c.send(Method::GET, path, Some(token), None).await.0);
    }
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
    seen[0]
}

/// Changes `user`'s password through the native API with the `admin` token.
async fn set_password(c: &Client, admin: &str, user: uuid::Uuid, password: &str) {
    let path = format!("/cumulo/v1/users/{user}");
    let body = json!({"password": password});
    let (status, _, reply) = c.send(Method::PATCH, &path, Some(admin), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
}

/// Keystone's answers: a revoked token is 401 on use, 404 on validation and on a second
/// revocation; a token of the same user issued apart stays good; only its user or an admin
/// revokes it.
#[tokio::test]
async fn a_revoked_token_is_refused() {
    let w = World::start().await;
    let c = w.client();
    let (a1, a2, b, admin) = (
        w.token_a().await,
        w.token_a().await,
        w.token_b().await,
        w.admin_token().await,
    );
    assert_eq!(revoke(&c, &b, &a1).await, StatusCode::FORBIDDEN);
    assert_eq!(status_with(&c, &a1).await, StatusCode::OK);
    assert_eq!(revoke(&c, &a1, &a1).await, StatusCode::NO_CONTENT);
    assert_eq!(status_with(&c, &a1).await, StatusCode::UNAUTHORIZED);
    assert_eq!(validate(&c, &admin, &a1).await, StatusCode::NOT_FOUND);
    assert_eq!(validate(&c, &a2, &a1).await, StatusCode::NOT_FOUND);
    assert_eq!(revoke(&c, &a2, &a1).await, StatusCode::NOT_FOUND);
    // The other token of the same user is untouched; an admin revokes it.
    assert_eq!(status_with(&c, &a2).await, StatusCode::OK);
    assert_eq!(validate(&c, &a2, &a2).await, StatusCode::OK);
    assert_eq!(revoke(&c, &admin, &a2).await, StatusCode::NO_CONTENT);
    assert_eq!(status_with(&c, &a2).await, StatusCode::UNAUTHORIZED);
    // Bad requests stay typed: no subject, or junk.
    let (status, _, _) = c
        .send_with(
            Method::DELETE,
            "/v3/auth/tokens",
            &[("x-auth-token", &admin)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(revoke(&c, &admin, "junk").await, StatusCode::NOT_FOUND);
    // A new login works.
    assert_eq!(status_with(&c, &w.token_a().await).await, StatusCode::OK);
    w.stop().await;
}

/// A password changed through the API ends the user's tokens (and the old password); so does
/// the removal of any of its roles, even in another project than the token's.
#[tokio::test]
async fn a_password_change_or_a_role_removal_ends_the_users_tokens() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let user = format!("/cumulo/v1/users/{}", w.a.user);
    set_password(&c, &admin, w.a.user, "new-pass").await;
    assert_eq!(status_with(&c, &a).await, StatusCode::UNAUTHORIZED);
    assert_eq!(validate(&c, &admin, &a).await, StatusCode::NOT_FOUND);
    let (status, _, _) = c.login(&w.a.user_name, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let a = w.token(&w.a.user_name, "new-pass", &w.a.name).await;
    assert_eq!(status_with(&c, &a).await, StatusCode::OK);

    // A's user gets a role in B's project, then loses it: its token for A's project ends too.
    let (status, _, body) = c
        .send(
            Method::POST,
            &format!("{user}/roles"),
            Some(&admin),
            Some(json!({"tenant": w.b.id, "role": "member"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(status_with(&c, &a).await, StatusCode::OK);
    let (status, _, _) = c
        .send(
            Method::DELETE,
            &format!("{user}/roles/{}/member", w.b.id),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(status_with(&c, &a).await, StatusCode::UNAUTHORIZED);
    let a = w.token(&w.a.user_name, "new-pass", &w.a.name).await;
    assert_eq!(status_with(&c, &a).await, StatusCode::OK);
    // The admin's own token outlived both changes (they were not its user's).
    assert_eq!(status_with(&c, &admin).await, StatusCode::OK);
    w.stop().await;
}

/// The admin bootstrap at the next start (same store, the configured password) does not undo
/// an admin password changed through the API.
#[tokio::test]
async fn a_restart_keeps_the_admin_password_changed_through_the_api() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    set_password(&c, &admin, w.api.admin.user, "changed-admin-pass").await;
    let store = w.store.clone();
    let again = tokio::task::spawn_blocking(move || {
        bootstrap_with(
            store.as_ref(),
            ADMIN_NAME,
            ADMIN_PASSWORD,
            ADMIN_PROJECT,
            TEST_ITERATIONS,
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!((again.user, again.created), (w.api.admin.user, false));
    let (status, _, _) = c.login(ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let admin = w
        .token(ADMIN_NAME, "changed-admin-pass", ADMIN_PROJECT)
        .await;
    let (status, _, _) = c.send(Method::GET, "/v3/users", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);
    w.stop().await;
}

#[tokio::test]
async fn projects_and_users_are_scoped() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let admin = w.admin_token().await;
    // Keystone's: only admins list every project; a member lists its own elsewhere.
    let (status, _, _) = c.send(Method::GET, "/v3/projects", Some(&a), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    for path in [
        "/v3/auth/projects",
        &format!("/v3/users/{}/projects", w.a.user),
    ] {
        let (status, _, body) = c.send(Method::GET, path, Some(&a), None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        let names: Vec<_> = body["projects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].clone())
            .collect();
        assert_eq!(names, [json!(w.a.name)], "{path}");
    }
    let (_, _, body) = c
        .send(Method::GET, "/v3/projects", Some(&admin), None)
        .await;
    assert_eq!(body["projects"].as_array().unwrap().len(), 3);
    let (_, _, body) = c
        .send(
            Method::GET,
            &format!("/v3/projects?name={}", w.b.name),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(body["projects"][0]["id"], w.b.id.to_string());

    // Tenant A's user sees neither B's project nor B's user: Keystone's 403, the same for ids
    // that name nothing (nothing tells the two apart).
    let nobody = uuid::Uuid::new_v4();
    for path in [
        format!("/v3/projects/{}", w.b.id),
        format!("/v3/projects/{nobody}"),
        format!("/v3/users/{}", w.b.user),
        format!("/v3/users/{nobody}"),
        format!("/v3/users/{}/projects", w.b.user),
    ] {
        let (status, _, body) = c.send(Method::GET, &path, Some(&a), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert!(!body.to_string().contains(&w.b.name), "{body}");
    }
    let (status, _, _) = c
        .send(Method::GET, "/v3/projects/not-a-uuid", Some(&a), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = c.send(Method::GET, "/v3/users", Some(&a), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, body) = c.send(Method::GET, "/v3/users", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["users"].as_array().unwrap().len(), 3);
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("/v3/projects/{}", w.a.id),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    w.stop().await;
}
