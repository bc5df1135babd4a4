//! `os-simple-tenant-usage`, `os-quota-class-sets` and `os-migrations`: over HTTP and through
//! the real `openstack` CLI.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::openstack::{admin_cli, fails, json, openstack_or_skip, tenant_cli};
use crate::support::World;

const PERIOD: &str = "start=2000-01-01T00:00:00&end=2999-01-01T00:00:00";

#[tokio::test]
async fn usage_quota_classes_and_migrations_over_http() {
    let w = World::start().await;
    let a = w.token_a().await;
    let admin = w.admin_token().await;
    let c = w.client();
    let id = w.server_a(&a, "used").await;
    w.server_a(&a, "used-too").await;

    let (status, _, list) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1/os-simple-tenant-usage?{PERIOD}&detailed=1"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let usages = list["tenant_usages"].as_array().unwrap();
    assert_eq!(usages.len(), 1, "{list}");
    let usage = &usages[0];
    assert_eq!(usage["tenant_id"], w.a.id.to_string());
    let servers = usage["server_usages"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert!(servers.iter().any(|s| s["instance_id"] == id.as_str()));
    assert_eq!(servers[0]["vcpus"], w.flavor.vcpus);
    assert_eq!(servers[0]["flavor"], w.flavor.name.as_str());
    assert_eq!(servers[0]["ended_at"], json!(null));
    let hours = usage["total_hours"].as_f64().unwrap();
    assert!(hours > 0.0, "{usage}");
    let vcpu_hours = usage["total_vcpus_usage"].as_f64().unwrap();
    assert!(
        (vcpu_hours - hours * f64::from(w.flavor.vcpus)).abs() < 1e-6,
        "{usage}"
    );

    // A member reads its own project's, not another's nor the list.
    let own = format!("/compute/v2.1/os-simple-tenant-usage/{}?{PERIOD}", w.a.id);
    let (status, _, mine) = c.send(Method::GET, &own, Some(&a), None).await;
    assert_eq!(status, StatusCode::OK, "{mine}");
    assert_eq!(mine["tenant_usage"]["tenant_id"], w.a.id.to_string());
    // One project's usage always lists its servers, as Nova's.
    assert_eq!(
        mine["tenant_usage"]["server_usages"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let other = format!("/compute/v2.1/os-simple-tenant-usage/{}?{PERIOD}", w.b.id);
    let (status, _, _) = c.send(Method::GET, &other, Some(&a), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1/os-simple-tenant-usage?{PERIOD}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // B has nothing in the period; a period that ends before it starts is Nova's 400.
    let (_, _, none) = c.send(Method::GET, &other, Some(&admin), None).await;
    assert_eq!(none, json!({"tenant_usage": {}}));
    // Without start and end: an empty period, no usage (Nova's answer).
    let (status, _, empty) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-simple-tenant-usage",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(
        (status, empty),
        (StatusCode::OK, json!({"tenant_usages": []}))
    );
    for bad in [
        "start=2999-01-01T00:00:00&end=2000-01-01T00:00:00",
        "start=yesterday",
        "end=2000-01-01T00:00:00",
    ] {
        let (status, _, body) = c
            .send(
                Method::GET,
                &format!("/compute/v2.1/os-simple-tenant-usage?{bad}"),
                Some(&admin),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    // Quota classes show the defaults; they are not changed through the API.
    let (status, _, class) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-quota-class-sets/default",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{class}");
    assert_eq!(class["quota_class_set"]["id"], "default");
    assert_eq!(class["quota_class_set"]["instances"], 10);
    assert_eq!(class["quota_class_set"]["metadata_items"], 128);
    let (status, _, body) = c
        .send(
            Method::PUT,
            "/compute/v2.1/os-quota-class-sets/default",
            Some(&admin),
            Some(json!({"quota_class_set": {"instances": 20}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, _) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-quota-class-sets/default",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, migrations) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-migrations",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(
        (status, migrations),
        (StatusCode::OK, json!({"migrations": []}))
    );
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_shows_usage_quota_classes_and_migrations() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin.clone(), &world, &world.a);
    let admin = admin_cli(bin, &world);
    crate::openstack::ok(
        &alice,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "--wait", "vm",
        ],
    )
    .await;
    let period = ["--start", "2000-01-01", "--end", "2999-01-01"];
    let mut args = vec!["usage", "list"];
    args.extend(period);
    let listed = json(&admin, &args).await;
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    // `-f json` gives the servers' usages themselves.
    assert_eq!(rows[0]["Servers"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(rows[0]["Servers"][0]["name"], "vm", "{listed}");
    assert_eq!(rows[0]["Project"], world.a.id.to_string(), "{listed}");
    let project = world.a.id.to_string();
    let mut args = vec!["usage", "show", "--project", &project];
    args.extend(period);
    let shown = json(&alice, &args).await;
    assert!(shown.to_string().contains("Servers"), "{shown}");
    // OSC 10 reads no quota class (`quota show --class` is gone); setting one says why not.
    let said = fails(
        &admin,
        &["quota", "set", "--class", "--instances", "20", "default"],
    )
    .await;
    assert!(said.contains("--default-quota"), "{said}");
    let migrations = json(&admin, &["server", "migration", "list"]).await;
    assert_eq!(migrations, json!([]));
    let said = fails(&alice, &["usage", "list", "--start", "2000-01-01"]).await;
    assert!(said.contains("403") || said.contains("olicy"), "{said}");
    world.stop().await;
}
