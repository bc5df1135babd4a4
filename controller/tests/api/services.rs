//! `os-services` enable and disable (the drain), `os-hosts`, and the hypervisors' `search` and
//! `servers`: over HTTP with the fake cluster, and with the real engine, whose STARTs then avoid
//! the disabled nodes.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use store::{InstanceState, Scope};
use uuid::Uuid;

use crate::engine_rig::{EngineRig, NODE_A, NODE_B, id_of};
use crate::support::World;

#[tokio::test]
async fn admins_disable_and_enable_services_and_hosts() {
    let w = World::start().await;
    let admin = w.admin_token().await;
    let c = w.client();
    let up = crate::native::node();
    let mut other = crate::native::node();
    other.hostname = "host2".into();
    for n in [&up, &other] {
        w.cluster.add_node(n.clone());
    }
    let put = |path: &'static str, body: Value| {
        let c = c.clone();
        let admin = admin.clone();
        async move { c.send(Method::PUT, path, Some(&admin), Some(body)).await }
    };
    let (status, _, body) = put(
        "/compute/v2.1/os-services/disable-log-reason",
        json!({"host": "host1", "binary": "nova-compute", "disabled_reason": "disk swap"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["service"],
        json!({"host": "host1", "binary": "nova-compute", "status": "disabled", "disabled_reason": "disk swap"})
    );
    let (_, _, services) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-services?host=host1",
            Some(&admin),
            None,
        )
        .await;
    let services = services["services"].as_array().unwrap().clone();
    assert_eq!(services.len(), 1);
    assert_eq!(
        (&services[0]["status"], &services[0]["disabled_reason"]),
        (&json!("disabled"), &json!("disk swap"))
    );
    let (_, _, hv) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-hypervisors/host1",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(hv["hypervisor"]["status"], "disabled");
    assert_eq!(hv["hypervisor"]["service"]["disabled_reason"], "disk swap");
    assert_eq!(w.store.disabled_nodes().unwrap()[0].node, up.id);
    let (_, _, none) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-services?binary=nova-scheduler",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(none["services"], json!([]));

    // Enabled again, by its UUID this time; a plain disable by host name.
    let (status, _, body) = put(
        "/compute/v2.1/os-services/enable",
        json!({"host": up.id.to_string(), "binary": "nova-compute"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["service"]["status"], "enabled");
    assert!(w.store.disabled_nodes().unwrap().is_empty());
    let (status, _, body) = put(
        "/compute/v2.1/os-services/disable",
        json!({"host": "host2", "binary": "nova-compute"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(w.store.disabled_nodes().unwrap()[0].node, other.id);

    // Refused: unknown host or binary (404), a bad body (400), an empty reason (400).
    for (path, body, code) in [
        (
            "/compute/v2.1/os-services/disable",
            json!({"host": "nowhere", "binary": "nova-compute"}),
            404,
        ),
        (
            "/compute/v2.1/os-services/disable",
            json!({"host": "host1", "binary": "nova-scheduler"}),
            404,
        ),
        (
            "/compute/v2.1/os-services/disable",
            json!({"binary": "nova-compute"}),
            400,
        ),
        (
            "/compute/v2.1/os-services/disable-log-reason",
            json!({"host": "host1", "binary": "nova-compute", "disabled_reason": ""}),
            400,
        ),
        (
            "/compute/v2.1/os-services/freeze",
            json!({"host": "host1", "binary": "nova-compute"}),
            404,
        ),
    ] {
        let (status, _, answer) = put(path, body.clone()).await;
        assert_eq!(status.as_u16(), code, "{path} {body}: {answer}");
    }

    // A node that is gone, still disabled, is enabled by its UUID.
    let gone = Uuid::new_v4();
    w.store.disable_node(gone, None).unwrap();
    let (status, _, body) = put(
        "/compute/v2.1/os-services/enable",
        json!({"host": gone.to_string(), "binary": "nova-compute"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        w.store
            .disabled_nodes()
            .unwrap()
            .iter()
            .all(|d| d.node != gone)
    );

    // os-hosts: the list, one host's resources, enable and disable.
    let (status, _, hosts) = c
        .send(Method::GET, "/compute/v2.1/os-hosts", Some(&admin), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{hosts}");
    assert_eq!(
        hosts["hosts"],
        json!([
            {"host_name": "host1", "service": "compute", "zone": "nova"},
            {"host_name": "host2", "service": "compute", "zone": "nova"},
        ])
    );
    let (status, _, one) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-hosts/host1",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["host"][0]["resource"]["project"], "(total)");
    assert_eq!(one["host"][0]["resource"]["cpu"], 4);
    assert_eq!(one["host"][1]["resource"]["project"], "(used_now)");
    assert_eq!(one["host"][1]["resource"]["memory_mb"], 2048);
    let (status, _, body) = put("/compute/v2.1/os-hosts/host2", json!({"status": "enable"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"host": "host2", "status": "enabled"}));
    assert!(w.store.disabled_nodes().unwrap().is_empty());
    let (status, _, _) = put(
        "/compute/v2.1/os-hosts/host2",
        json!({"maintenance_mode": "enable"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = put(
        "/compute/v2.1/os-hosts/nowhere",
        json!({"status": "enable"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The zone with its hosts.
    let (status, _, zones) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-availability-zone/detail",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{zones}");
    let zone = &zones["availabilityZoneInfo"][0];
    assert_eq!(zone["zoneName"], "nova");
    assert_eq!(zone["hosts"]["host1"]["nova-compute"]["available"], true);
    assert_eq!(zone["hosts"]["host1"]["nova-compute"]["active"], true);

    // Hypervisor search and servers.
    let (status, _, found) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-hypervisors/host/search",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    assert_eq!(found["hypervisors"].as_array().unwrap().len(), 2);
    let (status, _, _) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-hypervisors/zzz/search",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let a = w.token_a().await;
    let id: Uuid = w.server_a(&a, "on-host1").await.parse().unwrap();
    w.store
        .update_instance(
            Scope::All,
            id,
            w.store.instance(Scope::All, id).unwrap().version,
            store::InstanceChange {
                node: Some(Some(up.id)),
                ..Default::default()
            },
        )
        .unwrap();
    let (status, _, servers) = c
        .send(
            Method::GET,
            "/compute/v2.1/os-hypervisors/host1/servers",
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{servers}");
    assert_eq!(
        servers["hypervisors"][0]["servers"],
        json!([{"uuid": id, "name": "on-host1"}])
    );

    // Members may do none of it.
    let (status, _, body) = c
        .send(
            Method::PUT,
            "/compute/v2.1/os-services/disable",
            Some(&a),
            Some(json!({"host": "host1", "binary": "nova-compute"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    w.stop().await;
}

#[tokio::test]
async fn starts_avoid_the_disabled_nodes_until_they_are_enabled() {
    let rig = EngineRig::start().await;
    let admin = rig.admin_token().await;
    let a = rig.token(&rig.a).await;
    let set = |action: &'static str, node: Uuid| {
        let c = rig.client();
        let admin = admin.clone();
        async move {
            c.call(
                Method::PUT,
                &format!("/compute/v2.1/os-services/{action}"),
                &admin,
                Some(json!({"host": node.to_string(), "binary": "nova-compute"})),
            )
            .await
        }
    };
    let (status, body) = set("disable", NODE_A).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let image = json!({"imageRef": rig.image.id});
    let (status, body) = rig.create_server(&a, "drained", image.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = id_of(&body, "server");
    let starts = rig.out.starts();
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0].requirements.avoid_nodes, vec![NODE_A]);

    // A restart of a server on the disabled node goes back there: pinned, nothing avoided.
    rig.stats(NODE_A, &[(id, &[])]);
    let token = a.clone();
    let stop = json!({"os-stop": null});
    let path = format!("/compute/v2.1/servers/{id}/action");
    let (status, _) = rig
        .client()
        .call(Method::POST, &path, &token, Some(stop))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    rig.store
        .update_instance(
            Scope::All,
            id,
            rig.store.instance(Scope::All, id).unwrap().version,
            store::InstanceChange {
                state: Some(InstanceState::Exited),
                ..Default::default()
            },
        )
        .unwrap();
    rig.out.take();
    let start = json!({"os-start": null});
    let (status, body) = rig
        .client()
        .call(Method::POST, &path, &token, Some(start))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let starts = rig.out.starts();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0].requirements.node_id, Some(NODE_A));
    assert!(starts[0].requirements.avoid_nodes.is_empty());

    // Both disabled, then both enabled again.
    let (status, _) = set("disable", NODE_B).await;
    assert_eq!(status, StatusCode::OK);
    rig.out.take();
    rig.create_server(&a, "two", image.clone()).await;
    assert_eq!(
        rig.out.starts()[0].requirements.avoid_nodes,
        vec![NODE_A, NODE_B]
    );
    for node in [NODE_A, NODE_B] {
        let (status, _) = set("enable", node).await;
        assert_eq!(status, StatusCode::OK);
    }
    rig.out.take();
    rig.create_server(&a, "free", image).await;
    assert!(rig.out.starts()[0].requirements.avoid_nodes.is_empty());
}

/// `openstack compute service set --disable/--enable`, `host list`, `host show`, `host set`,
/// `hypervisor list` (its status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_disables_and_enables_compute_services() {
    use crate::openstack::{admin_cli, fails, json, ok, openstack_or_skip, tenant_cli};
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let mut node = crate::native::node();
    node.last_stats = Some(std::time::SystemTime::now());
    world.cluster.add_node(node.clone());
    let admin = admin_cli(bin.clone(), &world);
    ok(
        &admin,
        &[
            "compute",
            "service",
            "set",
            "--disable",
            "--disable-reason",
            "disk swap",
            "host1",
            "nova-compute",
        ],
    )
    .await;
    let services = json(&admin, &["compute", "service", "list", "--long"]).await;
    assert_eq!(services[0]["Status"], "disabled", "{services}");
    assert_eq!(services[0]["Disabled Reason"], "disk swap", "{services}");
    let hypervisors = json(&admin, &["hypervisor", "list"]).await;
    assert_eq!(
        hypervisors[0]["Hypervisor Hostname"], "host1",
        "{hypervisors}"
    );
    assert_eq!(world.store.disabled_nodes().unwrap()[0].node, node.id);
    ok(
        &admin,
        &[
            "compute",
            "service",
            "set",
            "--enable",
            "host1",
            "nova-compute",
        ],
    )
    .await;
    let services = json(&admin, &["compute", "service", "list", "--host", "host1"]).await;
    assert_eq!(services[0]["Status"], "enabled", "{services}");
    assert!(world.store.disabled_nodes().unwrap().is_empty());
    let said = fails(
        &admin,
        &[
            "compute",
            "service",
            "set",
            "--disable",
            "nowhere",
            "nova-compute",
        ],
    )
    .await;
    assert!(said.contains("nowhere"), "{said}");
    let zones = json(
        &admin,
        &["availability", "zone", "list", "--compute", "--long"],
    )
    .await;
    assert!(
        zones.to_string().contains("host1") && zones.to_string().contains("nova-compute"),
        "{zones}"
    );
    let hosts = json(&admin, &["host", "list"]).await;
    assert_eq!(hosts[0]["Host Name"], "host1", "{hosts}");
    let shown = json(&admin, &["host", "show", "host1"]).await;
    assert_eq!(shown[0]["Project"], "(total)", "{shown}");
    assert_eq!(shown[0]["CPU"], 4, "{shown}");
    ok(&admin, &["host", "set", "--disable", "host1"]).await;
    assert_eq!(world.store.disabled_nodes().unwrap()[0].node, node.id);
    ok(&admin, &["host", "set", "--enable", "host1"]).await;
    assert!(world.store.disabled_nodes().unwrap().is_empty());
    // A member may not.
    let alice = tenant_cli(bin, &world, &world.a);
    let said = fails(
        &alice,
        &[
            "compute",
            "service",
            "set",
            "--disable",
            "host1",
            "nova-compute",
        ],
    )
    .await;
    // The CLI words a refusal its own way; nothing was disabled.
    assert!(said.contains("failed to set"), "{said}");
    assert!(world.store.disabled_nodes().unwrap().is_empty());
    world.stop().await;
}
