//! Availability zones: the zones the nodes report (an agent's `--zone`) listed by
//! `os-availability-zone`, services and hosts, and a server create's `availability_zone`
//! checked against them and carried by the START; through the real engine.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::engine_rig::{EngineRig, NODE_A, NODE_B, id_of};

fn zone_names(body: &Value) -> Vec<String> {
    body["availabilityZoneInfo"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["zoneName"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn zones_come_from_the_nodes_and_keep_servers_to_their_nodes() {
    let rig = EngineRig::start().await;
    let a = rig.token(&rig.a).await;
    let admin = rig.admin_token().await;
    rig.stats_in(NODE_A, Some("edge"), &[]);
    rig.stats(NODE_B, &[]);
    let c = rig.client();

    let (status, zones) = c
        .call(Method::GET, "/compute/v2.1/os-availability-zone", &a, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{zones}");
    assert_eq!(zone_names(&zones), ["edge", "nova"]);
    let (_, detail) = c
        .call(
            Method::GET,
            "/compute/v2.1/os-availability-zone/detail",
            &admin,
            None,
        )
        .await;
    assert_eq!(zone_names(&detail), ["edge", "nova"]);
    let edge_hosts = detail["availabilityZoneInfo"][0]["hosts"]
        .as_object()
        .unwrap();
    assert_eq!(edge_hosts.len(), 1, "{detail}");
    assert!(
        edge_hosts.contains_key(&format!("host-{NODE_A}")),
        "{detail}"
    );
    let (_, services) = c
        .call(Method::GET, "/compute/v2.1/os-services", &admin, None)
        .await;
    let zone_of = |host: String| {
        services["services"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["host"] == host.as_str())
            .map(|s| s["zone"].clone())
    };
    assert_eq!(zone_of(format!("host-{NODE_A}")), Some(json!("edge")));
    assert_eq!(zone_of(format!("host-{NODE_B}")), Some(json!("nova")));

    // A create names a zone some node is in; its START carries it; the server shows it.
    let server = |zone: Value| json!({"imageRef": rig.image.id, "availability_zone": zone});
    for (bad, why) in [
        (
            json!("moon"),
            "The requested availability zone is not available",
        ),
        (json!("edge:host-1"), "Forcing a host"),
        (
            json!("no zone"),
            "The requested availability zone is not available",
        ),
        (json!(7), "not a string"),
    ] {
        let (status, body) = rig.create_server(&a, "x", server(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body.to_string().contains(why), "{bad}: {body}");
    }
    assert!(rig.out.starts().is_empty());
    let (status, body) = rig
        .create_server(&a, "in-edge", server(json!("edge")))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let id = id_of(&body, "server");
    let starts = rig.out.starts();
    assert_eq!(starts[0].requirements.zone.as_deref(), Some("edge"));
    let path = format!("/compute/v2.1/servers/{id}");
    let (_, shown) = c.call(Method::GET, &path, &a, None).await;
    assert_eq!(shown["server"]["OS-EXT-AZ:availability_zone"], "edge");
    // Without a zone: any node; shown as the zone of the node it landed on.
    rig.out.take();
    let (_, body) = rig
        .create_server(&a, "anywhere", json!({"imageRef": rig.image.id}))
        .await;
    let other = id_of(&body, "server");
    assert_eq!(rig.out.starts()[0].requirements.zone, None);
    rig.stats_in(NODE_A, Some("edge"), &[(id, &[]), (other, &[])]);
    let (_, shown) = c
        .call(
            Method::GET,
            &format!("/compute/v2.1/servers/{other}"),
            &a,
            None,
        )
        .await;
    assert_eq!(shown["server"]["OS-EXT-AZ:availability_zone"], "edge");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_lists_zones_and_creates_a_server_in_one() {
    use crate::openstack::{fails, json, openstack_or_skip, tenant_cli};
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = crate::support::World::start().await;
    let mut edge = crate::native::node();
    edge.zone = "edge".into();
    world.cluster.add_node(edge);
    let alice = tenant_cli(bin, &world, &world.a);
    let zones = json(&alice, &["availability", "zone", "list", "--compute"]).await;
    let names: Vec<&str> = zones
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["Zone Name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["edge"], "{zones}");
    let made = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--availability-zone",
            "edge",
            "--wait",
            "web-1",
        ],
    )
    .await;
    assert_eq!(made["OS-EXT-AZ:availability_zone"], "edge", "{made}");
    let refused = fails(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--availability-zone",
            "moon",
            "web-2",
        ],
    )
    .await;
    assert!(refused.contains("availability zone"), "{refused}");
    world.stop().await;
}
