//! Identity v3 write routes (admins): projects, users, role assignments; the roles and
//! `GET /v3/role_assignments`; what `reader` and `manager` may do.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::Role;

use crate::support::{Client, PASSWORD, World};

/// The status and body of a call with `token`.
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

fn message(body: &Value) -> String {
    body["error"]["message"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn admins_create_change_and_delete_projects() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let new = json!({"project": {"name": "gamma", "description": "third", "domain_id": "default",
        "enabled": true, "parent_id": "default", "is_domain": false, "tags": []}});
    let (status, body) = call(&c, Method::POST, "/v3/projects", &admin, Some(new.clone())).await;
    assert_eq!(status, 201, "{body}");
    let p = &body["project"];
    assert_eq!(
        (&p["name"], &p["description"]),
        (&json!("gamma"), &json!("third"))
    );
    assert_eq!(
        (&p["domain_id"], &p["enabled"]),
        (&json!("default"), &json!(true))
    );
    let id = p["id"].as_str().unwrap().to_string();
    let (status, body) = call(&c, Method::GET, &format!("/v3/projects/{id}"), &admin, None).await;
    assert_eq!(
        (status, &body["project"]["description"]),
        (200, &json!("third"))
    );
    // It got the default quota, like a tenant made natively.
    let tenant = w.store.tenant(id.parse().unwrap()).unwrap();
    assert_eq!(tenant.quota, controller::api::ApiConfig::DEFAULT_QUOTA);
    // Conflicts, bad input, another domain, a member.
    let (status, _) = call(&c, Method::POST, "/v3/projects", &admin, Some(new.clone())).await;
    assert_eq!(status, 409);
    let long = "p".repeat(65);
    for (bad, expected) in [
        (json!({"project": {"name": ""}}), 400),
        (json!({"project": {"name": "  "}}), 400),
        (json!({"project": {"name": long}}), 400),
        (json!({"project": {}}), 400),
        (
            json!({"project": {"name": "x", "description": "d".repeat(1025)}}),
            400,
        ),
        (json!({"project": {"name": "x", "enabled": false}}), 400),
        (json!({"project": {"name": "x", "parent_id": id}}), 400),
        (json!({"project": {"name": "x", "is_domain": true}}), 400),
        (json!({"project": {"name": "x", "tags": ["t"]}}), 400),
        (json!({"project": {"name": 5}}), 400),
        (json!({"project": "x"}), 400),
        (json!({"project": {"name": "x", "domain_id": "other"}}), 404),
    ] {
        let (status, body) =
            call(&c, Method::POST, "/v3/projects", &admin, Some(bad.clone())).await;
        assert_eq!(status, expected, "{bad} -> {body}");
        assert_eq!(body["error"]["code"], expected, "{body}");
    }
    let (status, body) = call(&c, Method::POST, "/v3/projects", &a, Some(new)).await;
    assert_eq!(status, 403);
    assert!(message(&body).contains("identity:create_project"), "{body}");

    // Renamed, described again; not to a name taken.
    let path = format!("/v3/projects/{id}");
    let change = json!({"project": {"name": "gamma2", "description": "changed"}});
    let (status, body) = call(&c, Method::PATCH, &path, &admin, Some(change.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["project"]["name"], &body["project"]["description"]),
        (&json!("gamma2"), &json!("changed"))
    );
    let taken = json!({"project": {"name": w.a.name}});
    assert_eq!(
        call(&c, Method::PATCH, &path, &admin, Some(taken)).await.0,
        409
    );
    let off = json!({"project": {"enabled": false}});
    assert_eq!(
        call(&c, Method::PATCH, &path, &admin, Some(off)).await.0,
        400
    );
    assert_eq!(
        call(&c, Method::PATCH, &path, &a, Some(change.clone()))
            .await
            .0,
        403
    );
    let nobody = format!("/v3/projects/{}", uuid::Uuid::new_v4());
    assert_eq!(
        call(&c, Method::PATCH, &nobody, &admin, Some(change))
            .await
            .0,
        404
    );

    // Deleted (not by a member; not a project with a server).
    assert_eq!(call(&c, Method::DELETE, &path, &a, None).await.0, 403);
    assert_eq!(call(&c, Method::DELETE, &path, &admin, None).await.0, 204);
    assert_eq!(call(&c, Method::DELETE, &path, &admin, None).await.0, 404);
    assert_eq!(call(&c, Method::GET, &path, &admin, None).await.0, 404);
    w.server_a(&a, "busy").await;
    let alpha = format!("/v3/projects/{}", w.a.id);
    assert_eq!(call(&c, Method::DELETE, &alpha, &admin, None).await.0, 409);
    w.stop().await;
}

#[tokio::test]
async fn admins_create_change_and_delete_users() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let new = json!({"user": {"name": "carol", "password": "carol-pw", "domain_id": "default",
        "default_project_id": w.a.id, "enabled": true, "email": "ignored@example.com"}});
    let (status, body) = call(&c, Method::POST, "/v3/users", &admin, Some(new.clone())).await;
    assert_eq!(status, 201, "{body}");
    let u = &body["user"];
    assert_eq!((&u["name"], &u["enabled"]), (&json!("carol"), &json!(true)));
    assert_eq!(u["default_project_id"], w.a.id.to_string());
    assert!(u.get("password").is_none(), "{u}");
    let id = u["id"].as_str().unwrap().to_string();
    // A default project is not a role: the login has no project to go to until one is given.
    let (status, _, body) = c.login("carol", "carol-pw", &w.a.name).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let grant = format!("/v3/projects/{}/users/{id}/roles/member", w.a.id);
    assert_eq!(call(&c, Method::PUT, &grant, &admin, None).await.0, 204);
    let carol = w.token("carol", "carol-pw", &w.a.name).await;
    assert_eq!(
        call(&c, Method::GET, "/compute/v2.1/servers", &carol, None)
            .await
            .0,
        200
    );

    let (status, _) = call(&c, Method::POST, "/v3/users", &admin, Some(new.clone())).await;
    assert_eq!(status, 409);
    for (bad, expected) in [
        (json!({"user": {"name": ""}}), 400),
        (json!({"user": {"name": "n".repeat(256)}}), 400),
        (json!({"user": {"name": "x", "password": ""}}), 400),
        (
            json!({"user": {"name": "x", "password": "p".repeat(1025)}}),
            400,
        ),
        (json!({"user": {"name": "x", "enabled": "yes"}}), 400),
        (json!({"user": {"password": "p"}}), 400),
        (
            json!({"user": {"name": "x", "default_project_id": uuid::Uuid::new_v4()}}),
            404,
        ),
        (
            json!({"user": {"name": "x", "default_project_id": "nope"}}),
            404,
        ),
        (json!({"user": {"name": "x", "domain_id": "other"}}), 404),
    ] {
        let (status, body) = call(&c, Method::POST, "/v3/users", &admin, Some(bad.clone())).await;
        assert_eq!(status, expected, "{bad} -> {body}");
    }
    let (status, body) = call(&c, Method::POST, "/v3/users", &a, Some(new)).await;
    assert_eq!(status, 403);
    assert!(message(&body).contains("identity:create_user"), "{body}");
    // Without a password: no login.
    let nopw = json!({"user": {"name": "dave"}});
    assert_eq!(
        call(&c, Method::POST, "/v3/users", &admin, Some(nopw))
            .await
            .0,
        201
    );
    let grant = format!(
        "/v3/projects/{}/users/{}/roles/member",
        w.a.id,
        w.store.user_by_name("dave").unwrap().id
    );
    assert_eq!(call(&c, Method::PUT, &grant, &admin, None).await.0, 204);
    assert_eq!(
        c.login("dave", "!", &w.a.name).await.0,
        StatusCode::UNAUTHORIZED
    );

    // A new password ends carol's tokens; renamed; disabled and enabled; no default project.
    let path = format!("/v3/users/{id}");
    let pw = json!({"user": {"password": "new-pw"}});
    assert_eq!(
        call(&c, Method::PATCH, &path, &admin, Some(pw)).await.0,
        200
    );
    assert_eq!(
        call(&c, Method::GET, "/v3/auth/projects", &carol, None)
            .await
            .0,
        401
    );
    let change = json!({"user": {"name": "caroline", "default_project_id": null}});
    let (status, body) = call(&c, Method::PATCH, &path, &admin, Some(change)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["user"]["name"], "caroline");
    assert!(body["user"].get("default_project_id").is_none(), "{body}");
    let caroline = w.token("caroline", "new-pw", &w.a.name).await;
    let off = json!({"user": {"enabled": false}});
    let (status, body) = call(&c, Method::PATCH, &path, &admin, Some(off.clone())).await;
    assert_eq!((status, &body["user"]["enabled"]), (200, &json!(false)));
    assert_eq!(
        call(&c, Method::GET, "/v3/auth/projects", &caroline, None)
            .await
            .0,
        401
    );
    assert_eq!(
        c.login("caroline", "new-pw", &w.a.name).await.0,
        StatusCode::UNAUTHORIZED
    );
    let on = json!({"user": {"enabled": true}});
    assert_eq!(
        call(&c, Method::PATCH, &path, &admin, Some(on)).await.0,
        200
    );
    w.token("caroline", "new-pw", &w.a.name).await;
    let taken = json!({"user": {"name": w.b.user_name}});
    assert_eq!(
        call(&c, Method::PATCH, &path, &admin, Some(taken)).await.0,
        409
    );
    let pw = json!({"user": {"password": "x"}});
    assert_eq!(call(&c, Method::PATCH, &path, &a, Some(pw)).await.0, 403);
    // An admin neither disables nor deletes itself.
    let me = w
        .store
        .user_by_name(controller::api::testing::ADMIN_NAME)
        .unwrap()
        .id;
    let mine = format!("/v3/users/{me}");
    assert_eq!(
        call(&c, Method::PATCH, &mine, &admin, Some(off)).await.0,
        409
    );
    assert_eq!(call(&c, Method::DELETE, &mine, &admin, None).await.0, 409);
    // Deleted.
    assert_eq!(call(&c, Method::DELETE, &path, &a, None).await.0, 403);
    assert_eq!(call(&c, Method::DELETE, &path, &admin, None).await.0, 204);
    assert_eq!(call(&c, Method::DELETE, &path, &admin, None).await.0, 404);
    assert_eq!(
        c.login("caroline", "new-pw", &w.a.name).await.0,
        StatusCode::UNAUTHORIZED
    );
    w.stop().await;
}

#[tokio::test]
async fn admins_grant_check_and_revoke_roles() {
    let w = World::start().await;
    let c = w.client();
    let admin = w.admin_token().await;
    let a = w.token_a().await;
    let (status, body) = call(&c, Method::GET, "/v3/roles", &a, None).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = body["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["admin", "manager", "member", "reader"]);
    let (_, body) = call(&c, Method::GET, "/v3/roles?name=reader", &a, None).await;
    assert_eq!(body["roles"][0]["id"], "reader");
    assert_eq!(
        call(&c, Method::GET, "/v3/roles/manager", &a, None).await.0,
        200
    );
    assert_eq!(
        call(&c, Method::GET, "/v3/roles/root", &a, None).await.0,
        404
    );

    // Alice gets reader in beta: 204, again 204; checked; listed.
    let (beta, alice) = (w.b.id, w.a.user);
    let path = format!("/v3/projects/{beta}/users/{alice}/roles/reader");
    assert_eq!(call(&c, Method::PUT, &path, &a, None).await.0, 403);
    assert_eq!(call(&c, Method::HEAD, &path, &admin, None).await.0, 404);
    assert_eq!(call(&c, Method::PUT, &path, &admin, None).await.0, 204);
    assert_eq!(call(&c, Method::PUT, &path, &admin, None).await.0, 204);
    assert_eq!(call(&c, Method::HEAD, &path, &admin, None).await.0, 204);
    assert_eq!(call(&c, Method::GET, &path, &admin, None).await.0, 204);
    let (status, body) = call(
        &c,
        Method::GET,
        &format!("/v3/projects/{beta}/users/{alice}/roles"),
        &admin,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["roles"][0]["name"], "reader");
    let reader = w.token(&w.a.user_name, PASSWORD, &w.b.name).await;
    let nobody = uuid::Uuid::new_v4();
    for (bad, expected) in [
        (format!("/v3/projects/{beta}/users/{alice}/roles/root"), 404),
        (
            format!("/v3/projects/{beta}/users/{nobody}/roles/member"),
            404,
        ),
        (
            format!("/v3/projects/{nobody}/users/{alice}/roles/member"),
            404,
        ),
        (format!("/v3/projects/x/users/{alice}/roles/member"), 404),
    ] {
        let (status, body) = call(&c, Method::PUT, &bad, &admin, None).await;
        assert_eq!(status, expected, "{bad}: {body}");
    }
    // Role assignments: by user and project (as `role assignment list --user --project`),
    // with names, effective.
    let q = format!("/v3/role_assignments?user.id={alice}&scope.project.id={beta}");
    let (status, body) = call(&c, Method::GET, &q, &admin, None).await;
    assert_eq!(status, 200, "{body}");
    let list = body["role_assignments"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{body}");
    assert_eq!(list[0]["role"]["id"], "reader");
    assert_eq!(list[0]["user"]["id"], alice.to_string());
    assert_eq!(list[0]["scope"]["project"]["id"], beta.to_string());
    let (_, body) = call(
        &c,
        Method::GET,
        &format!("/v3/role_assignments?user.id={alice}&include_names=True"),
        &admin,
        None,
    )
    .await;
    let list = body["role_assignments"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{body}");
    assert_eq!(
        list.iter()
            .filter(|a| a["user"]["name"] == w.a.user_name.as_str())
            .count(),
        2
    );
    assert!(
        list.iter()
            .any(|a| a["scope"]["project"]["name"] == "beta" && a["role"]["name"] == "reader")
    );
    let (_, body) = call(
        &c,
        Method::GET,
        &format!("/v3/role_assignments?scope.project.id={}&effective", w.a.id),
        &admin,
        None,
    )
    .await;
    let roles: Vec<&str> = body["role_assignments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["role"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["member", "reader"], "{body}");
    let (_, body) = call(
        &c,
        Method::GET,
        "/v3/role_assignments?role.id=admin",
        &admin,
        None,
    )
    .await;
    assert_eq!(body["role_assignments"].as_array().unwrap().len(), 1);
    for nothing in [
        "group.id=g",
        "scope.domain.id=default",
        "role.id=root",
        "user.id=x",
    ] {
        let (status, body) = call(
            &c,
            Method::GET,
            &format!("/v3/role_assignments?{nothing}"),
            &admin,
            None,
        )
        .await;
        assert_eq!(
            (status, &body["role_assignments"]),
            (200, &json!([])),
            "{nothing}"
        );
    }
    let (status, body) = call(&c, Method::GET, &q, &a, None).await;
    assert_eq!(status, 403);
    assert!(message(&body).contains("identity:list_role_assignments"));

    // Revoked: the reader token ends; again 404; not the admin's own role in its project.
    assert_eq!(call(&c, Method::DELETE, &path, &a, None).await.0, 403);
    assert_eq!(call(&c, Method::DELETE, &path, &admin, None).await.0, 204);
    assert_eq!(
        call(&c, Method::GET, "/v3/auth/projects", &reader, None)
            .await
            .0,
        401
    );
    let (status, body) = call(&c, Method::DELETE, &path, &admin, None).await;
    assert_eq!(status, 404);
    assert!(message(&body).contains("role assignment"), "{body}");
    let me = w
        .store
        .user_by_name(controller::api::testing::ADMIN_NAME)
        .unwrap()
        .id;
    let project = w.store.roles_of_user(me).unwrap()[0].tenant;
    let mine = format!("/v3/projects/{project}/users/{me}/roles/admin");
    assert_eq!(call(&c, Method::DELETE, &mine, &admin, None).await.0, 409);
    w.stop().await;
}

/// A reader reads its project's servers, images, volumes, networks and key pairs, and every
/// change is 403 (in each API's error shape); a manager changes what a member changes and also
/// reads its project's role assignments.
#[tokio::test]
async fn a_reader_only_reads_and_a_manager_also_reads_assignments() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let server = w.server_a(&a, "vm1").await;
    let dave = store::NewUser {
        name: "dave".into(),
        password_hash: controller::api::password::hash(
            PASSWORD,
            controller::api::testing::TEST_ITERATIONS,
        )
        .unwrap(),
    };
    let dave = w.store.create_user(dave).unwrap();
    w.store.grant_role(dave.id, w.a.id, Role::Reader).unwrap();
    let reader = w.token("dave", PASSWORD, &w.a.name).await;
    let (_, _, body) = c.login("dave", PASSWORD, &w.a.name).await;
    assert_eq!(
        body["token"]["roles"],
        json!([{"id": "reader", "name": "reader"}])
    );
    let vols = format!("/volume/v3/{}/volumes", w.a.id);
    for path in [
        "/compute/v2.1/servers".to_string(),
        format!("/compute/v2.1/servers/{server}"),
        "/compute/v2.1/flavors".into(),
        "/compute/v2.1/os-keypairs".into(),
        "/image/v2/images".into(),
        vols.clone(),
        "/network/v2.0/security-groups".into(),
        "/network/v2.0/networks".into(),
        "/cumulo/v1/instances".into(),
    ] {
        let (status, body) = call(&c, Method::GET, &path, &reader, None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, list) = call(&c, Method::GET, "/compute/v2.1/servers", &reader, None).await;
    assert_eq!(list["servers"][0]["id"], server);
    let writes = [
        (
            Method::POST,
            "/compute/v2.1/servers".to_string(),
            json!({"server": {"name": "x", "flavorRef": w.flavor.id, "imageRef": w.image.id}}),
            "forbidden",
        ),
        (
            Method::DELETE,
            format!("/compute/v2.1/servers/{server}"),
            Value::Null,
            "forbidden",
        ),
        (
            Method::POST,
            format!("/compute/v2.1/servers/{server}/action"),
            json!({"os-stop": null}),
            "forbidden",
        ),
        (
            Method::PUT,
            format!("/compute/v2.1/servers/{server}"),
            json!({"server": {"name": "y"}}),
            "forbidden",
        ),
        (
            Method::POST,
            "/compute/v2.1/os-keypairs".into(),
            json!({"keypair": {"name": "k"}}),
            "forbidden",
        ),
        (
            Method::POST,
            "/image/v2/images".into(),
            json!({"name": "i", "disk_format": "qcow2", "container_format": "bare"}),
            "error",
        ),
        (
            Method::POST,
            vols.clone(),
            json!({"volume": {"size": 1}}),
            "forbidden",
        ),
        (
            Method::POST,
            "/network/v2.0/security-groups".into(),
            json!({"security_group": {"name": "g"}}),
            "NeutronError",
        ),
        (
            Method::DELETE,
            format!("/cumulo/v1/instances/{server}"),
            Value::Null,
            "error",
        ),
        // Not a write, but console logs hold secrets: members only, in both APIs.
        (
            Method::GET,
            format!("/cumulo/v1/instances/{server}/console"),
            Value::Null,
            "error",
        ),
        (
            Method::POST,
            format!("/compute/v2.1/servers/{server}/action"),
            json!({"os-getConsoleOutput": {"length": 5}}),
            "forbidden",
        ),
    ];
    for (method, path, body, key) in writes {
        let body = (!body.is_null()).then_some(body);
        let (status, reply) = call(&c, method.clone(), &path, &reader, body).await;
        assert_eq!(status, 403, "{method} {path}: {reply}");
        assert!(reply.get(key).is_some(), "{method} {path}: {reply}");
    }
    // The server is still there; the reader revokes its own token.
    assert_eq!(
        call(
            &c,
            Method::GET,
            &format!("/compute/v2.1/servers/{server}"),
            &a,
            None
        )
        .await
        .0,
        200
    );
    let headers = [
        ("x-auth-token", reader.as_str()),
        ("x-subject-token", reader.as_str()),
    ];
    let (status, _, _) = c
        .send_with(Method::DELETE, "/v3/auth/tokens", &headers, None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    // A manager: a member's writes, and its project's role assignments (not another's).
    w.store.grant_role(dave.id, w.a.id, Role::Manager).unwrap();
    let manager = w.token("dave", PASSWORD, &w.a.name).await;
    let (_, _, body) = c.login("dave", PASSWORD, &w.a.name).await;
    let roles: Vec<&str> = body["token"]["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["manager", "member", "reader"]);
    w.server_a(&manager, "vm2").await;
    let (status, body) = call(
        &c,
        Method::GET,
        &format!("/v3/role_assignments?scope.project.id={}", w.a.id),
        &manager,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["role_assignments"].as_array().unwrap().len(),
        3,
        "{body}"
    );
    let theirs = format!("/v3/role_assignments?scope.project.id={}", w.b.id);
    assert_eq!(call(&c, Method::GET, &theirs, &manager, None).await.0, 403);
    assert_eq!(
        call(&c, Method::GET, "/v3/role_assignments", &manager, None)
            .await
            .0,
        403
    );
    let grant = format!("/v3/projects/{}/users/{}/roles/member", w.a.id, w.b.user);
    assert_eq!(call(&c, Method::PUT, &grant, &manager, None).await.0, 403);
    w.stop().await;
}
