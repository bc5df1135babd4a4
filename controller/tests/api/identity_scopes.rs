//! Identity v3 scopes: unscoped tokens, re-scoping with the token method, the default project,
//! disabled users, services validating other users' tokens (`?nocatalog`), and the one domain.

use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};
use store::{Role, UserChange};

use crate::support::{Client, PASSWORD, World};

/// A password login body for `user` with `scope` (none if `Value::Null`).
fn password_body(user: &str, scope: Value) -> Value {
    let mut body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": user, "domain": {"id": "default"}, "password": PASSWORD}}}}});
    if !scope.is_null() {
        body["auth"]["scope"] = scope;
    }
    body
}

/// A token method body for `token` with `scope`.
fn token_body(token: &str, scope: Value) -> Value {
    let mut body = json!({"auth": {"identity": {"methods": ["token"], "token": {"id": token}}}});
    if !scope.is_null() {
        body["auth"]["scope"] = scope;
    }
    body
}

/// `POST /v3/auth/tokens` (at `path`): the status, the token and the body.
async fn login(c: &Client, path: &str, body: Value) -> (StatusCode, String, Value) {
    let (status, headers, body) = c.send(Method::POST, path, None, Some(body)).await;
    (status, subject(&headers), body)
}

fn subject(headers: &HeaderMap) -> String {
    headers
        .get("x-subject-token")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

fn role_names(token: &Value) -> Vec<String> {
    token["token"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn an_unscoped_token_lists_projects_and_is_exchanged_for_scoped_ones() {
    let w = World::start().await;
    let c = w.client();
    let (status, unscoped, body) = login(
        &c,
        "/v3/auth/tokens",
        password_body(&w.a.user_name, Value::Null),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let token = &body["token"];
    assert_eq!(token["user"]["id"], w.a.user.to_string());
    for absent in ["project", "roles", "catalog"] {
        assert!(token.get(absent).is_none(), "{absent} in {token}");
    }
    // It lists its projects, and reads nothing else; it changes nothing.
    let (status, projects) = c
        .call(Method::GET, "/v3/auth/projects", &unscoped, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(projects["projects"][0]["id"], w.a.id.to_string());
    let (status, _) = c
        .call(Method::GET, "/compute/v2.1/servers", &unscoped, None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let server = json!({"server": {"name": "x", "flavorRef": w.flavor.id, "imageRef": w.image.id}});
    let (status, _) = c
        .call(
            Method::POST,
            "/compute/v2.1/servers",
            &unscoped,
            Some(server),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = c
        .call(Method::GET, "/v3/auth/catalog", &unscoped, None)
        .await;
    assert_eq!(status, StatusCode::OK);

    // Exchanged for a token of its project, which expires with it.
    let alpha = json!({"project": {"name": w.a.name, "domain": {"name": "Default"}}});
    let (status, scoped, body) =
        login(&c, "/v3/auth/tokens", token_body(&unscoped, alpha.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["token"]["project"]["id"], w.a.id.to_string());
    assert_eq!(role_names(&body), ["member", "reader"]);
    assert!(body["token"]["catalog"].is_array());
    let (_, _, first) = c
        .send_with(
            Method::GET,
            "/v3/auth/tokens",
            &[("x-auth-token", &unscoped), ("x-subject-token", &unscoped)],
            None,
        )
        .await;
    assert_eq!(body["token"]["expires_at"], first["token"]["expires_at"]);
    let (status, _) = c
        .call(Method::GET, "/compute/v2.1/servers", &scoped, None)
        .await;
    assert_eq!(status, StatusCode::OK);

    // A scoped token is re-scoped to another project of the user's (by id); not to one where
    // it has no role, and not with a bad or revoked token.
    w.store.grant_role(w.a.user, w.b.id, Role::Reader).unwrap();
    let beta = json!({"project": {"id": w.b.id}});
    let (status, rescoped, body) =
        login(&c, "/v3/auth/tokens", token_body(&scoped, beta.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["token"]["project"]["name"], w.b.name);
    assert_eq!(role_names(&body), ["reader"]);
    let (status, _) = c
        .call(Method::GET, "/compute/v2.1/servers", &rescoped, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let admin_project = json!({"project": {"name": "admin", "domain": {"id": "default"}}});
    for (token, scope) in [
        (scoped.as_str(), admin_project),
        ("cu1.not.a-token", alpha.clone()),
        (scoped.as_str(), json!({"domain": {"id": "default"}})),
        (scoped.as_str(), json!({"system": {"all": true}})),
    ] {
        let (status, _, body) = login(&c, "/v3/auth/tokens", token_body(token, scope)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let headers = [
        ("x-auth-token", scoped.as_str()),
        ("x-subject-token", scoped.as_str()),
    ];
    let (status, _, _) = c
        .send_with(Method::DELETE, "/v3/auth/tokens", &headers, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = login(&c, "/v3/auth/tokens", token_body(&scoped, alpha)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.stop().await;
}

#[tokio::test]
async fn a_login_without_a_scope_goes_to_the_default_project_and_a_disabled_user_is_refused() {
    let w = World::start().await;
    let c = w.client();
    let user = w.store.user(w.a.user).unwrap();
    let change = UserChange {
        default_project: Some(Some(w.a.id)),
        ..UserChange::default()
    };
    let user = w.store.update_user(user.id, user.version, change).unwrap();
    let (status, _, body) = login(
        &c,
        "/v3/auth/tokens",
        password_body(&w.a.user_name, Value::Null),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["token"]["project"]["id"], w.a.id.to_string(), "{body}");
    // "unscoped" asks for no project whatever the default.
    let (status, _, body) = login(
        &c,
        "/v3/auth/tokens",
        password_body(&w.a.user_name, json!("unscoped")),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(body["token"].get("project").is_none(), "{body}");
    // A default project where the user has no role: unscoped.
    let change = UserChange {
        default_project: Some(Some(w.b.id)),
        ..UserChange::default()
    };
    let user = w.store.update_user(user.id, user.version, change).unwrap();
    let (status, _, body) = login(
        &c,
        "/v3/auth/tokens",
        password_body(&w.a.user_name, Value::Null),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(body["token"].get("project").is_none(), "{body}");

    // Disabled: its tokens end and it cannot log in; enabled again, it can.
    let token = w.token_a().await;
    let change = UserChange {
        enabled: Some(false),
        ..UserChange::default()
    };
    let user = w.store.update_user(user.id, user.version, change).unwrap();
    let (status, _) = c.call(Method::GET, "/v3/auth/projects", &token, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = c.login(&w.a.user_name, PASSWORD, &w.a.name).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disabled")
    );
    let change = UserChange {
        enabled: Some(true),
        ..UserChange::default()
    };
    w.store.update_user(user.id, user.version, change).unwrap();
    w.token_a().await;
    w.stop().await;
}

#[tokio::test]
async fn a_service_validates_other_users_tokens_with_or_without_the_catalog() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let validate = |path: &'static str, subject: String| {
        let (c, admin) = (c.clone(), admin.clone());
        async move {
            let headers = [
                ("x-auth-token", admin.as_str()),
                ("x-subject-token", &subject),
            ];
            let (status, _, body) = c.send_with(Method::GET, path, &headers, None).await;
            (status, body)
        }
    };
    let (status, body) = validate("/v3/auth/tokens", a.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["token"]["user"]["id"], w.a.user.to_string());
    assert_eq!(body["token"]["project"]["id"], w.a.id.to_string());
    assert_eq!(role_names(&body), ["member", "reader"]);
    assert!(body["token"]["catalog"].is_array());
    for path in ["/v3/auth/tokens?nocatalog", "/v3/auth/tokens?nocatalog=1"] {
        let (status, body) = validate(path, a.clone()).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body["token"].get("catalog").is_none(), "{body}");
        assert_eq!(body["token"]["project"]["id"], w.a.id.to_string());
    }
    // An unscoped token validates as one.
    let (_, unscoped, _) = login(
        &c,
        "/v3/auth/tokens",
        password_body(&w.b.user_name, Value::Null),
    )
    .await;
    let (status, body) = validate("/v3/auth/tokens", unscoped).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["token"]["user"]["id"], w.b.user.to_string());
    assert!(body["token"].get("project").is_none(), "{body}");
    // A login asks for no catalog as well.
    let (status, _, body) = login(
        &c,
        "/v3/auth/tokens?nocatalog",
        crate::support::login_body(&w.a.user_name, PASSWORD, &w.a.name),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(body["token"].get("catalog").is_none(), "{body}");
    assert!(body["token"]["roles"].is_array());
    // HEAD checks a token (keystonemiddleware's and openstacksdk's check_token).
    let headers = [
        ("x-auth-token", admin.as_str()),
        ("x-subject-token", a.as_str()),
    ];
    let (status, _, _) = c
        .send_with(Method::HEAD, "/v3/auth/tokens", &headers, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    w.stop().await;
}

#[tokio::test]
async fn the_default_domain_is_listed_and_shown() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let (status, body) = c.call(Method::GET, "/v3/domains", &admin, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["domains"].as_array().unwrap().len(), 1);
    assert_eq!(body["domains"][0]["id"], "default");
    assert_eq!(body["domains"][0]["name"], "Default");
    assert_eq!(body["domains"][0]["enabled"], true);
    let (_, body) = c
        .call(Method::GET, "/v3/domains?name=Default", &admin, None)
        .await;
    assert_eq!(body["domains"].as_array().unwrap().len(), 1);
    let (_, body) = c
        .call(Method::GET, "/v3/domains?name=Other", &admin, None)
        .await;
    assert_eq!(body["domains"], json!([]));
    // A member: Keystone's 403 for the list, its own domain shown.
    let (status, body) = c.call(Method::GET, "/v3/domains", &a, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("identity:list_domains")
    );
    let (status, body) = c.call(Method::GET, "/v3/domains/default", &a, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["domain"]["name"], "Default");
    for other in ["Default", "other", &"x".repeat(300)] {
        let (status, body) = c
            .call(Method::GET, &format!("/v3/domains/{other}"), &admin, None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{other}");
        assert_eq!(body["error"]["code"], 404);
    }
    let (status, _) = c.call(Method::GET, "/v3/domains/default", "", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.stop().await;
}
