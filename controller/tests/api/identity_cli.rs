//! The Identity API through the real `openstack` CLI: domains, projects, users, roles and role
//! assignments as the admin; a reader made with `role add`; unscoped tokens and re-scoping
//! (`--os-auth-type token`); application credentials, and logging in with one
//! (`--os-auth-type v3applicationcredential`).

use std::path::PathBuf;
use std::sync::Arc;

use controller::api::testing::{CliAuth, OpenStackCli};
use serde_json::Value;

use crate::openstack::{admin_cli, fails, json, ok, openstack_or_skip, tenant_cli};
use crate::support::{PASSWORD, World};

/// The CLI as `user` (password `password`) in `project`, authenticating as `auth` says.
fn cli(
    bin: PathBuf,
    world: &World,
    user: &str,
    password: &str,
    project: &str,
    auth: CliAuth,
) -> Arc<OpenStackCli> {
    let mut cli = OpenStackCli::new(bin, &world.api.url, user, password, project);
    cli.auth = auth;
    cli.debug = std::env::var("CUMULO_OPENSTACK_DEBUG").is_ok();
    Arc::new(cli)
}

fn column(list: &Value, key: &str) -> Vec<String> {
    let mut out: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v[key].as_str().unwrap_or("").to_string())
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_manages_projects_users_and_roles() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let admin = admin_cli(bin.clone(), &world);
    let alice = tenant_cli(bin.clone(), &world, &world.a);

    let domains = json(&admin, &["domain", "list"]).await;
    assert_eq!(column(&domains, "Name"), ["Default"], "{domains}");
    let domain = json(&admin, &["domain", "show", "default"]).await;
    assert_eq!(
        (&domain["id"], &domain["enabled"]),
        (&Value::from("default"), &Value::from(true))
    );

    // Projects.
    let made = json(
        &admin,
        &[
            "project",
            "create",
            "--description",
            "the third",
            "--domain",
            "default",
            "gamma",
        ],
    )
    .await;
    assert_eq!(
        (&made["name"], &made["description"]),
        (&Value::from("gamma"), &Value::from("the third")),
        "{made}"
    );
    let said = fails(&admin, &["project", "create", "gamma"]).await;
    assert!(
        said.contains("409") || said.contains("Conflict") || said.contains("exists"),
        "{said}"
    );
    let said = fails(&alice, &["project", "create", "mine"]).await;
    assert!(
        said.contains("403") || said.contains("identity:create_project"),
        "{said}"
    );
    ok(
        &admin,
        &[
            "project",
            "set",
            "--description",
            "renamed",
            "--name",
            "gamma2",
            "gamma",
        ],
    )
    .await;
    let shown = json(&admin, &["project", "show", "gamma2"]).await;
    assert_eq!(
        (&shown["id"], &shown["description"]),
        (&made["id"], &Value::from("renamed")),
        "{shown}"
    );
    let projects = json(&admin, &["project", "list"]).await;
    assert_eq!(
        column(&projects, "Name"),
        ["admin", "alpha", "beta", "gamma2"]
    );

    // Users: made with a password and a default project, given a role, logging in.
    let carol = json(
        &admin,
        &[
            "user",
            "create",
            "--password",
            "carol-pw",
            "--project",
            "gamma2",
            "carol",
        ],
    )
    .await;
    assert_eq!(carol["default_project_id"], made["id"], "{carol}");
    assert_eq!(carol["enabled"], true);
    let said = fails(&admin, &["user", "create", "--password", "x", "carol"]).await;
    assert!(
        said.contains("409") || said.contains("Conflict") || said.contains("exists"),
        "{said}"
    );
    let roles = json(&admin, &["role", "list"]).await;
    assert_eq!(
        column(&roles, "Name"),
        ["admin", "manager", "member", "reader"]
    );
    assert_eq!(
        json(&admin, &["role", "show", "reader"]).await["name"],
        "reader"
    );
    ok(
        &admin,
        &[
            "role",
            "add",
            "--user",
            "carol",
            "--project",
            "gamma2",
            "member",
        ],
    )
    .await;
    let assigned = json(
        &admin,
        &[
            "role",
            "assignment",
            "list",
            "--user",
            "carol",
            "--project",
            "gamma2",
            "--names",
        ],
    )
    .await;
    assert_eq!(assigned.as_array().unwrap().len(), 1, "{assigned}");
    assert_eq!(assigned[0]["Role"], "member", "{assigned}");
    assert!(
        assigned[0]["User"].as_str().unwrap().starts_with("carol"),
        "{assigned}"
    );
    assert!(
        assigned[0]["Project"]
            .as_str()
            .unwrap()
            .starts_with("gamma2"),
        "{assigned}"
    );
    let as_carol = cli(
        bin.clone(),
        &world,
        "carol",
        "carol-pw",
        "gamma2",
        CliAuth::Password,
    );
    let token = json(&as_carol, &["token", "issue"]).await;
    assert_eq!(token["project_id"], made["id"], "{token}");
    assert_eq!(
        json(&as_carol, &["server", "list"]).await,
        Value::Array(vec![])
    );

    // A reader: `role add reader` makes one; it lists servers and creates none.
    json(&admin, &["user", "create", "--password", "dave-pw", "dave"]).await;
    ok(
        &admin,
        &[
            "role",
            "add",
            "--user",
            "dave",
            "--project",
            &world.a.name,
            "reader",
        ],
    )
    .await;
    let dave = cli(
        bin.clone(),
        &world,
        "dave",
        "dave-pw",
        &world.a.name,
        CliAuth::Password,
    );
    json(
        &alice,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "--wait", "vm1",
        ],
    )
    .await;
    let servers = json(&dave, &["server", "list"]).await;
    assert_eq!(column(&servers, "Name"), ["vm1"]);
    let said = fails(
        &dave,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "vm2",
        ],
    )
    .await;
    assert!(
        said.contains("403") || said.contains("reader role"),
        "{said}"
    );
    let said = fails(&dave, &["server", "delete", "vm1"]).await;
    assert!(
        said.contains("403") || said.contains("reader role") || said.contains("Failed"),
        "{said}"
    );
    assert_eq!(
        column(&json(&alice, &["server", "list"]).await, "Name"),
        ["vm1"]
    );

    // Removed, disabled, deleted.
    ok(
        &admin,
        &[
            "role",
            "remove",
            "--user",
            "carol",
            "--project",
            "gamma2",
            "member",
        ],
    )
    .await;
    let assigned = json(
        &admin,
        &[
            "role",
            "assignment",
            "list",
            "--user",
            "carol",
            "--project",
            "gamma2",
        ],
    )
    .await;
    assert_eq!(assigned, Value::Array(vec![]));
    ok(
        &admin,
        &[
            "role",
            "add",
            "--user",
            "carol",
            "--project",
            "gamma2",
            "member",
        ],
    )
    .await;
    ok(&admin, &["user", "set", "--disable", "carol"]).await;
    assert_eq!(
        json(&admin, &["user", "show", "carol"]).await["enabled"],
        false
    );
    let said = fails(&as_carol, &["token", "issue"]).await;
    assert!(said.contains("401") || said.contains("disabled"), "{said}");
    ok(
        &admin,
        &[
            "user",
            "set",
            "--enable",
            "--password",
            "carol-pw2",
            "carol",
        ],
    )
    .await;
    let as_carol = cli(
        bin.clone(),
        &world,
        "carol",
        "carol-pw2",
        "gamma2",
        CliAuth::Password,
    );
    json(&as_carol, &["token", "issue"]).await;
    ok(&admin, &["user", "delete", "carol"]).await;
    fails(&admin, &["user", "show", "carol"]).await;
    ok(&admin, &["project", "delete", "gamma2"]).await;
    fails(&admin, &["project", "show", "gamma2"]).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_issues_unscoped_tokens_and_rescopes_them() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let (user, project) = (&world.a.user_name, &world.a.name);
    let unscoped = cli(
        bin.clone(),
        &world,
        user,
        PASSWORD,
        project,
        CliAuth::Unscoped,
    );
    let token = json(&unscoped, &["token", "issue"]).await;
    assert_eq!(token["user_id"], world.a.user.to_string(), "{token}");
    assert!(
        token.get("project_id").is_none_or(Value::is_null),
        "{token}"
    );
    let id = token["id"].as_str().unwrap().to_string();
    // `--os-auth-type token` exchanges it for a token of the project.
    let rescoped = cli(
        bin.clone(),
        &world,
        user,
        PASSWORD,
        project,
        CliAuth::Token(id),
    );
    let token = json(&rescoped, &["token", "issue"]).await;
    assert_eq!(token["project_id"], world.a.id.to_string(), "{token}");
    assert_eq!(
        json(&rescoped, &["server", "list"]).await,
        Value::Array(vec![])
    );
    let mine = json(&rescoped, &["project", "list", "--my-projects"]).await;
    assert_eq!(column(&mine, "Name"), [project.as_str()]);
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_makes_and_logs_in_with_application_credentials() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin.clone(), &world, &world.a);
    let made = json(
        &alice,
        &[
            "application",
            "credential",
            "create",
            "--description",
            "CI",
            "--role",
            "reader",
            "--expiration",
            "2099-01-01T00:00:00",
            "ci",
        ],
    )
    .await;
    let (id, secret) = (
        made["ID"].as_str().unwrap().to_string(),
        made["Secret"].as_str().unwrap().to_string(),
    );
    assert_eq!(made["Description"], "CI", "{made}");
    assert!(
        made["Roles"]
            .as_str()
            .unwrap_or(&made["Roles"].to_string())
            .contains("reader"),
        "{made}"
    );
    assert!(
        made["Expires At"]
            .as_str()
            .unwrap()
            .starts_with("2099-01-01T00:00:00"),
        "{made}"
    );
    let list = json(&alice, &["application", "credential", "list"]).await;
    assert_eq!(column(&list, "Name"), ["ci"]);
    assert!(!list.to_string().contains(&secret));
    let shown = json(&alice, &["application", "credential", "show", "ci"]).await;
    assert_eq!(shown["ID"], id.as_str());

    // Logging in with it: its project, its one role.
    let ci = cli(
        bin.clone(),
        &world,
        "",
        "",
        "",
        CliAuth::AppCredential {
            id: id.clone(),
            secret: secret.clone(),
        },
    );
    let token = json(&ci, &["token", "issue"]).await;
    assert_eq!(token["project_id"], world.a.id.to_string(), "{token}");
    assert_eq!(token["user_id"], world.a.user.to_string(), "{token}");
    assert_eq!(json(&ci, &["server", "list"]).await, Value::Array(vec![]));
    let said = fails(
        &ci,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "vm",
        ],
    )
    .await;
    assert!(
        said.contains("403") || said.contains("reader role"),
        "{said}"
    );
    // Restricted: it makes no credentials.
    let said = fails(&ci, &["application", "credential", "create", "more"]).await;
    assert!(
        said.contains("403") || said.contains("restricted"),
        "{said}"
    );
    let wrong = cli(
        bin.clone(),
        &world,
        "",
        "",
        "",
        CliAuth::AppCredential {
            id: id.clone(),
            secret: "wrong".into(),
        },
    );
    let said = fails(&wrong, &["token", "issue"]).await;
    assert!(
        said.contains("401") || said.contains("authentication"),
        "{said}"
    );

    // Deleted: it no longer logs in.
    ok(&alice, &["application", "credential", "delete", "ci"]).await;
    assert_eq!(
        json(&alice, &["application", "credential", "list"]).await,
        Value::Array(vec![])
    );
    fails(&ci, &["token", "issue"]).await;
    world.stop().await;
}
