//! `os-hypervisors` and `os-services`: the nodes as Nova shows its compute hosts, for admins.

use axum::http::{Method, StatusCode};
use controller::cluster::NodeStatus;

use crate::support::World;

#[tokio::test]
async fn admins_see_the_compute_nodes_as_hypervisors_and_services() {
    let w = World::start().await;
    let admin = w.admin_token().await;
    let c = w.client();
    let mut up = crate::native::node();
    up.instances = 3;
    up.last_stats = Some(std::time::SystemTime::now());
    let mut gone = crate::native::node();
    gone.hostname = "host2".into();
    gone.status = NodeStatus::Disconnected;
    let mut drained = crate::native::node();
    drained.hostname = "host3".into();
    drained.status = NodeStatus::Maintenance;
    let mut network = crate::native::node();
    network.hostname = "net1".into();
    network.kinds.compute = false;
    for n in [&up, &gone, &drained, &network] {
        w.cluster.add_node(n.clone());
    }
    let get = |path: &'static str| c.send(Method::GET, path, Some(&admin), None);

    let (status, _, list) = get("/compute/v2.1/os-hypervisors").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let list = list["hypervisors"].as_array().unwrap().clone();
    // Network-only nodes run no tenant instances: not hypervisors.
    let names: Vec<&str> = list
        .iter()
        .map(|h| h["hypervisor_hostname"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["host1", "host2", "host3"]);
    assert_eq!(list[0]["id"], up.id.to_string());
    assert_eq!(list[0]["state"], "up");
    assert_eq!(list[0]["status"], "enabled");
    assert_eq!(list[1]["state"], "down");
    assert_eq!(list[2]["status"], "disabled");

    let (status, _, detail) = get("/compute/v2.1/os-hypervisors/detail").await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let first = &detail["hypervisors"][0];
    assert_eq!(first["vcpus"], 4);
    assert_eq!(first["vcpus_used"], 2);
    assert_eq!(first["memory_mb"], 4096);
    assert_eq!(first["memory_mb_used"], 2048);
    assert_eq!(first["free_ram_mb"], 2048);
    assert_eq!(first["local_gb"], 9);
    assert_eq!(first["free_disk_gb"], 4);
    assert_eq!(first["running_vms"], 3);
    assert_eq!(first["host_ip"], "127.0.0.1");
    assert_eq!(first["hypervisor_type"], "QEMU");
    assert_eq!(first["service"]["host"], "host1");

    let path = format!("/compute/v2.1/os-hypervisors/{}", up.id);
    let (status, _, one) = c.send(Method::GET, &path, Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["hypervisor"]["hypervisor_hostname"], "host1");
    let (status, _, by_name) = get("/compute/v2.1/os-hypervisors/host3").await;
    assert_eq!(status, StatusCode::OK, "{by_name}");
    assert_eq!(by_name["hypervisor"]["status"], "disabled");
    let (status, _, missing) = get("/compute/v2.1/os-hypervisors/nowhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing["itemNotFound"]["code"], 404, "{missing}");

    let (status, _, uptime) = get("/compute/v2.1/os-hypervisors/host1/uptime").await;
    assert_eq!(status, StatusCode::OK, "{uptime}");
    let line = uptime["hypervisor"]["uptime"].as_str().unwrap();
    assert!(
        line.contains(" up 0 days, 00:00, 0 users, load average: 0.50"),
        "{line}"
    );
    let (status, _, aggregates) = get("/compute/v2.1/os-aggregates").await;
    assert_eq!(status, StatusCode::OK, "{aggregates}");
    assert_eq!(aggregates["aggregates"], serde_json::json!([]));

    // The sums over the nodes that are up (host1 and host3).
    let (status, _, stats) = get("/compute/v2.1/os-hypervisors/statistics").await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    let stats = &stats["hypervisor_statistics"];
    assert_eq!(stats["count"], 2);
    assert_eq!(stats["vcpus"], 8);
    assert_eq!(stats["vcpus_used"], 4);
    assert_eq!(stats["memory_mb"], 8192);
    assert_eq!(stats["running_vms"], 3);

    let (status, _, services) = get("/compute/v2.1/os-services").await;
    assert_eq!(status, StatusCode::OK, "{services}");
    let services = services["services"].as_array().unwrap();
    assert_eq!(services.len(), 3);
    assert_eq!(services[0]["binary"], "nova-compute");
    assert_eq!(services[0]["host"], "host1");
    assert_eq!(services[0]["zone"], "nova");
    assert_eq!(services[0]["state"], "up");
    assert_eq!(services[1]["state"], "down");
    assert_eq!(services[2]["status"], "disabled");
    assert!(
        services[0]["updated_at"].as_str().unwrap().contains('T'),
        "{services:?}"
    );

    // Members see none of it, in Nova's error shape.
    let member = w.token_a().await;
    for path in [
        "/compute/v2.1/os-hypervisors",
        "/compute/v2.1/os-hypervisors/detail",
        "/compute/v2.1/os-hypervisors/statistics",
        "/compute/v2.1/os-services",
    ] {
        let (status, _, body) = c.send(Method::GET, path, Some(&member), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert_eq!(body["forbidden"]["code"], 403, "{path}: {body}");
    }
    w.stop().await;
}
