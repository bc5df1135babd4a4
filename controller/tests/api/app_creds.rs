//! Application credentials over HTTP: create (secret generated or given, roles a subset of the
//! token's, expiry), list, show, delete; logging in with one (by id, by name and user); what a
//! restricted credential's token may not do; what ends a credential.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::Role;

use crate::support::{Client, World};

fn creds_path(user: uuid::Uuid) -> String {
    format!("/v3/users/{user}/application_credentials")
}

async fn call(
    c: &Client,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, body) = c.call(method, path, token, body).await;
    (status.as_u16(), body)
}

/// Logs in with `method` (the `application_credential` object): the status, token and body.
async fn login(c: &Client, method: Value) -> (StatusCode, String, Value) {
    let body = json!({"auth": {"identity": {"methods": ["application_credential"],
        "application_credential": method}}});
    let (status, headers, body) = c
        .send(Method::POST, "/v3/auth/tokens", None, Some(body))
        .await;
    let token = headers
        .get("x-subject-token")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, token, body)
}

fn role_names(roles: &Value) -> Vec<String> {
    roles
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_user_makes_lists_and_logs_in_with_application_credentials() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let path = creds_path(w.a.user);
    // Generated secret, the token's roles, no expiry.
    let (status, body) = call(
        &c,
        Method::POST,
        &path,
        &a,
        Some(json!({"application_credential": {"name": "ci"}})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let made = &body["application_credential"];
    let (id, secret) = (
        made["id"].as_str().unwrap().to_string(),
        made["secret"].as_str().unwrap().to_string(),
    );
    assert!(secret.len() >= 40, "{secret}");
    assert_eq!(made["project_id"], w.a.id.to_string());
    assert_eq!(role_names(&made["roles"]), ["member", "reader"]);
    assert_eq!(
        (&made["unrestricted"], &made["expires_at"]),
        (&json!(false), &Value::Null)
    );
    // Listed and shown, never with the secret; by name too.
    let (status, list) = call(&c, Method::GET, &path, &a, None).await;
    assert_eq!(status, 200);
    assert_eq!(list["application_credentials"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(&secret));
    let (_, named) = call(&c, Method::GET, &format!("{path}?name=ci"), &a, None).await;
    assert_eq!(named["application_credentials"][0]["id"], id.as_str());
    let (_, none) = call(&c, Method::GET, &format!("{path}?name=cd"), &a, None).await;
    assert_eq!(none["application_credentials"], json!([]));
    let (status, shown) = call(&c, Method::GET, &format!("{path}/{id}"), &a, None).await;
    assert_eq!(status, 200);
    assert_eq!(shown["application_credential"]["name"], "ci");
    assert!(shown["application_credential"].get("secret").is_none());

    // Logging in by id, and by name and user: a token of the project with its roles.
    let (status, token, body) = login(&c, json!({"id": id, "secret": secret})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let t = &body["token"];
    assert_eq!(t["methods"], json!(["application_credential"]));
    assert_eq!(t["project"]["id"], w.a.id.to_string());
    assert_eq!(t["user"]["id"], w.a.user.to_string());
    assert_eq!(t["application_credential"]["id"], id.as_str());
    assert_eq!(t["application_credential"]["restricted"], true);
    assert_eq!(role_names(&t["roles"]), ["member", "reader"]);
    assert!(t["catalog"].is_array());
    w.server_a(&token, "from-ci").await;
    for by_name in [
        json!({"name": "ci", "user": {"id": w.a.user}, "secret": secret}),
        json!({"name": "ci", "user": {"name": w.a.user_name, "domain": {"name": "Default"}}, "secret": secret}),
    ] {
        let (status, _, body) = login(&c, by_name).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    // A scope naming its own project is accepted, another project's is not.
    let scoped = |project: uuid::Uuid| {
        json!({"auth": {"identity": {"methods": ["application_credential"],
        "application_credential": {"id": id, "secret": secret}}, "scope": {"project": {"id": project}}}})
    };
    let (status, _, _) = c
        .send(Method::POST, "/v3/auth/tokens", None, Some(scoped(w.a.id)))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, _) = c
        .send(Method::POST, "/v3/auth/tokens", None, Some(scoped(w.b.id)))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Wrong secrets, unknown credentials, bad shapes.
    for (method, expected) in [
        (json!({"id": id, "secret": "wrong"}), 401),
        (json!({"id": uuid::Uuid::new_v4(), "secret": secret}), 401),
        (json!({"id": "not-a-uuid", "secret": secret}), 401),
        (
            json!({"name": "ci", "user": {"id": w.b.user}, "secret": secret}),
            401,
        ),
        (
            json!({"name": "ci", "user": {"name": w.a.user_name, "domain": {"id": "other"}}, "secret": secret}),
            401,
        ),
        (json!({"name": "ci", "secret": secret}), 400),
        (json!({"secret": secret}), 400),
        (json!({"id": id}), 400),
    ] {
        let (status, _, body) = login(&c, method.clone()).await;
        assert_eq!(status.as_u16(), expected, "{method}: {body}");
    }
    // An admin validates the token and sees the credential.
    let admin = w.admin_token().await;
    let headers = [
        ("x-auth-token", admin.as_str()),
        ("x-subject-token", token.as_str()),
    ];
    let (status, _, body) = c
        .send_with(Method::GET, "/v3/auth/tokens", &headers, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["token"]["application_credential"]["name"], "ci");

    // Deleted: its tokens end, it no longer logs in.
    assert_eq!(
        call(&c, Method::DELETE, &format!("{path}/{id}"), &a, None)
            .await
            .0,
        204
    );
    assert_eq!(
        call(&c, Method::GET, "/compute/v2.1/servers", &token, None)
            .await
            .0,
        401
    );
    let (status, _, _) = login(&c, json!({"id": id, "secret": secret})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(&c, Method::DELETE, &format!("{path}/{id}"), &a, None)
            .await
            .0,
        404
    );
    assert_eq!(
        call(&c, Method::GET, &format!("{path}/{id}"), &a, None)
            .await
            .0,
        404
    );
    w.stop().await;
}

#[tokio::test]
async fn credentials_are_bounded_by_their_roles_expiry_and_restriction() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let path = creds_path(w.a.user);
    // Given secret, reader only, expiring in an hour, as the CLI sends it (no offset: UTC).
    let expires = time::OffsetDateTime::now_utc() + time::Duration::hours(1);
    let expires_text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        expires.year(),
        u8::from(expires.month()),
        expires.day(),
        expires.hour(),
        expires.minute(),
        expires.second()
    );
    let body = json!({"application_credential": {"name": "ro", "secret": "s3cret", "description": "read only",
        "roles": [{"name": "reader"}], "expires_at": expires_text}});
    let (status, made) = call(&c, Method::POST, &path, &a, Some(body)).await;
    assert_eq!(status, 201, "{made}");
    let cred = &made["application_credential"];
    assert_eq!(cred["secret"], "s3cret");
    assert_eq!(cred["description"], "read only");
    assert_eq!(role_names(&cred["roles"]), ["reader"]);
    assert!(
        cred["expires_at"]
            .as_str()
            .unwrap()
            .starts_with(&expires_text),
        "{cred}"
    );
    let id = cred["id"].as_str().unwrap().to_string();
    let (status, ro, body) = login(&c, json!({"id": id, "secret": "s3cret"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(role_names(&body["token"]["roles"]), ["reader"]);
    // The token expires with the credential at the latest.
    assert!(body["token"]["expires_at"].as_str().unwrap() <= cred["expires_at"].as_str().unwrap());
    assert_eq!(
        call(&c, Method::GET, "/compute/v2.1/servers", &ro, None)
            .await
            .0,
        200
    );
    let server = json!({"server": {"name": "x", "flavorRef": w.flavor.id, "imageRef": w.image.id}});
    assert_eq!(
        call(&c, Method::POST, "/compute/v2.1/servers", &ro, Some(server))
            .await
            .0,
        403
    );
    // A restricted credential's token makes and deletes no credentials (it lists them).
    let another = json!({"application_credential": {"name": "more"}});
    let (status, body) = call(&c, Method::POST, &path, &ro, Some(another.clone())).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        call(&c, Method::DELETE, &format!("{path}/{id}"), &ro, None)
            .await
            .0,
        403
    );
    assert_eq!(call(&c, Method::GET, &path, &ro, None).await.0, 200);
    // An unrestricted one may; a credential's token is not re-scoped.
    let body = json!({"application_credential": {"name": "free", "unrestricted": true, "roles": [{"id": "member"}]}});
    let (status, made) = call(&c, Method::POST, &path, &a, Some(body)).await;
    assert_eq!(status, 201, "{made}");
    let free = made["application_credential"].clone();
    let (_, free_token, _) = login(&c, json!({"id": free["id"], "secret": free["secret"]})).await;
    let (status, body) = call(&c, Method::POST, &path, &free_token, Some(another)).await;
    assert_eq!(status, 201, "{body}");
    let rescope = json!({"auth": {"identity": {"methods": ["token"], "token": {"id": free_token}},
        "scope": {"project": {"id": w.a.id}}}});
    let (status, _, _) = c
        .send(Method::POST, "/v3/auth/tokens", None, Some(rescope))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Bad input: a role the token lacks (404, as Keystone), an unknown role, a past or bad
    // expiry, access rules, a long name, a taken name, another user's path, an unscoped token.
    for (body, expected) in [
        (json!({"name": "x", "roles": [{"name": "admin"}]}), 404),
        (json!({"name": "x", "roles": [{"name": "root"}]}), 404),
        (json!({"name": "x", "roles": [{}]}), 400),
        (
            json!({"name": "x", "expires_at": "2001-01-01T00:00:00Z"}),
            400,
        ),
        (json!({"name": "x", "expires_at": "soon"}), 400),
        (
            json!({"name": "x", "access_rules": [{"path": "/v2.1/servers", "method": "GET", "service": "compute"}]}),
            400,
        ),
        (json!({"name": "n".repeat(256)}), 400),
        (json!({"name": " "}), 400),
        (json!({"name": "x", "secret": ""}), 400),
        (json!({"name": "x", "description": "d".repeat(1025)}), 400),
        (json!({"name": "ro"}), 409),
        (json!({}), 400),
    ] {
        let (status, reply) = call(
            &c,
            Method::POST,
            &path,
            &a,
            Some(json!({"application_credential": body.clone()})),
        )
        .await;
        assert_eq!(status, expected, "{body}: {reply}");
    }
    let b = w.token_b().await;
    let new = json!({"application_credential": {"name": "x"}});
    assert_eq!(
        call(&c, Method::POST, &path, &b, Some(new.clone())).await.0,
        403
    );
    assert_eq!(call(&c, Method::GET, &path, &b, None).await.0, 403);
    assert_eq!(
        call(&c, Method::GET, &format!("{path}/{id}"), &b, None)
            .await
            .0,
        403
    );
    assert_eq!(
        call(
            &c,
            Method::GET,
            &format!("{}/{id}", creds_path(w.b.user)),
            &b,
            None
        )
        .await
        .0,
        404
    );
    let unscoped = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "id": w.a.user, "password": crate::support::PASSWORD}}}}});
    let (_, headers, _) = c
        .send(Method::POST, "/v3/auth/tokens", None, Some(unscoped))
        .await;
    let unscoped = headers["x-subject-token"].to_str().unwrap().to_string();
    assert_eq!(
        call(&c, Method::POST, &path, &unscoped, Some(new)).await.0,
        403
    );
    // An admin lists and deletes anyone's.
    let admin = w.admin_token().await;
    let (status, list) = call(&c, Method::GET, &path, &admin, None).await;
    assert_eq!(
        (
            status,
            list["application_credentials"].as_array().unwrap().len()
        ),
        (200, 3)
    );
    assert_eq!(
        call(
            &c,
            Method::DELETE,
            &format!("{path}/{}", free["id"].as_str().unwrap()),
            &admin,
            None
        )
        .await
        .0,
        204
    );
    assert_eq!(
        call(&c, Method::GET, "/v3/auth/projects", &free_token, None)
            .await
            .0,
        401
    );

    // The user loses the role: the credential no longer logs in, its tokens end.
    w.store.revoke_role(w.a.user, w.a.id, Role::Member).unwrap();
    assert_eq!(
        call(&c, Method::GET, "/compute/v2.1/servers", &ro, None)
            .await
            .0,
        401
    );
    let (status, _, _) = login(&c, json!({"id": id, "secret": "s3cret"})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    w.store.grant_role(w.a.user, w.a.id, Role::Reader).unwrap();
    let (status, _, _) = login(&c, json!({"id": id, "secret": "s3cret"})).await;
    assert_eq!(status, StatusCode::CREATED);
    w.stop().await;
}

/// At most 100 credentials per user: the 101st is Keystone's 403.
#[tokio::test]
async fn a_user_has_at_most_100_credentials() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let path = creds_path(w.a.user);
    for n in 0..100 {
        let body = json!({"application_credential": {"name": format!("c{n}"), "secret": "s"}});
        assert_eq!(
            call(&c, Method::POST, &path, &a, Some(body)).await.0,
            201,
            "{n}"
        );
    }
    let body = json!({"application_credential": {"name": "one-more"}});
    let (status, reply) = call(&c, Method::POST, &path, &a, Some(body)).await;
    assert_eq!(status, 403);
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum of 100"),
        "{reply}"
    );
    w.stop().await;
}
