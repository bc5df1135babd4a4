//! The Networking v2.0 subset: version discovery and the catalog, networks and subnets, ports,
//! security groups and rules, floating IPs, quotas; Neutron's codes and error bodies, and
//! tenant isolation (another project's objects are 404s).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Client, World};

const NET: &str = "/network/v2.0";

async fn get(c: &Client, token: &str, path: &str) -> (StatusCode, Value) {
    let (status, _, body) = c
        .send(Method::GET, &format!("{NET}{path}"), Some(token), None)
        .await;
    (status, body)
}

/// `GET /compute/v2.1{path}`: the Compute API's view.
async fn compute_get(c: &Client, token: &str, path: &str) -> Value {
    let (status, _, body) = c
        .send(
            Method::GET,
            &format!("/compute/v2.1{path}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    body
}

async fn call(
    c: &Client,
    method: Method,
    token: &str,
    path: &str,
    body: Value,
) -> (StatusCode, Value) {
    let (status, _, body) = c
        .send(method, &format!("{NET}{path}"), Some(token), Some(body))
        .await;
    (status, body)
}

async fn delete(c: &Client, token: &str, path: &str) -> StatusCode {
    c.send(Method::DELETE, &format!("{NET}{path}"), Some(token), None)
        .await
        .0
}

fn neutron_type(body: &Value) -> &str {
    body["NeutronError"]["type"]
        .as_str()
        .unwrap_or_else(|| panic!("not a Neutron error: {body}"))
}

#[tokio::test]
async fn versions_catalog_networks_and_subnets() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let (status, _, versions) = c.send(Method::GET, "/network/", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(versions["versions"][0]["id"], "v2.0");
    let (_, _, token) = c
        .login(&w.a.user_name, crate::support::PASSWORD, &w.a.name)
        .await;
    let catalog = token["token"]["catalog"].to_string();
    assert!(catalog.contains("\"type\":\"network\""), "{catalog}");
    assert!(
        catalog.contains(&format!("{}/network", w.api.url)),
        "{catalog}"
    );
    // Unauthenticated: Neutron's shape.
    let (status, _, body) = c
        .send(Method::GET, &format!("{NET}/networks"), None, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(neutron_type(&body), "HTTPUnauthorized");

    // Before any server: only the external network.
    let (status, nets) = get(&c, &a, "/networks").await;
    assert_eq!(status, StatusCode::OK, "{nets}");
    assert_eq!(nets["networks"].as_array().unwrap().len(), 1);
    let public = &nets["networks"][0];
    assert_eq!(public["name"], "public");
    assert_eq!(public["router:external"], true);
    let (_, subnets) = get(&c, &a, "/subnets").await;
    assert_eq!(subnets["subnets"][0]["cidr"], "192.168.233.0/24");
    assert_eq!(subnets["subnets"][0]["gateway_ip"], "192.168.233.1");

    w.server_a(&a, "vm1").await;
    let (_, nets) = get(&c, &a, "/networks?router:external=False").await;
    let nets = nets["networks"].as_array().unwrap();
    assert_eq!(nets.len(), 1, "{nets:?}");
    let private = nets[0].clone();
    assert_eq!(private["project_id"], w.a.id.to_string());
    let (status, shown) = get(
        &c,
        &a,
        &format!("/networks/{}", private["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["network"], private);
    let subnet_id = private["subnets"][0].as_str().unwrap();
    let (_, subnet) = get(&c, &a, &format!("/subnets/{subnet_id}")).await;
    assert!(
        subnet["subnet"]["cidr"]
            .as_str()
            .unwrap()
            .starts_with("172."),
        "{subnet}"
    );
    assert_eq!(subnet["subnet"]["network_id"], private["id"]);
    // B sees neither.
    let b = w.token_b().await;
    let (status, body) = get(
        &c,
        &b,
        &format!("/networks/{}", private["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(neutron_type(&body), "NetworkNotFound");
    let (status, _) = get(&c, &b, &format!("/subnets/{subnet_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = get(&c, &a, "/networks/not-an-id").await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::NOT_FOUND, "NetworkNotFound")
    );
    // Paging.
    let (_, page) = get(&c, &a, "/networks?limit=1").await;
    assert_eq!(page["networks"].as_array().unwrap().len(), 1);
    assert!(
        page["networks_links"][0]["href"]
            .as_str()
            .unwrap()
            .contains("marker=")
    );
}

#[tokio::test]
async fn ports_show_instances_and_take_security_groups() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let server = w.server_a(&a, "vm1").await;
    let (status, ports) = get(&c, &a, &format!("/ports?device_id={server}")).await;
    assert_eq!(status, StatusCode::OK);
    let ports = ports["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1);
    let port = &ports[0];
    assert_eq!(port["device_owner"], "compute:nova");
    assert_eq!(port["device_id"], server);
    let ip = port["fixed_ips"][0]["ip_address"].as_str().unwrap();
    assert!(ip.starts_with("172."));
    let (_, by_ip) = get(&c, &a, &format!("/ports?fixed_ips=ip_address%3D{ip}")).await;
    assert_eq!(by_ip["ports"].as_array().unwrap().len(), 1);
    let (_, none) = get(
        &c,
        &a,
        &format!("/ports?device_id={}", uuid::Uuid::new_v4()),
    )
    .await;
    assert!(none["ports"].as_array().unwrap().is_empty());
    let (_, groups) = get(&c, &a, "/security-groups?name=default").await;
    let default = groups["security_groups"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(port["security_groups"], json!([default]));

    let (status, made) = call(
        &c,
        Method::POST,
        &a,
        "/security-groups",
        json!({"security_group": {"name": "web"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let web = made["security_group"]["id"].as_str().unwrap().to_string();
    let port_path = format!("/ports/{server}");
    let (status, set) = call(
        &c,
        Method::PUT,
        &a,
        &port_path,
        json!({"port": {"security_groups": [web]}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["port"]["security_groups"], json!([web]));
    // Other fields are read-only; B cannot see or change the port.
    let (status, body) = call(
        &c,
        Method::PUT,
        &a,
        &port_path,
        json!({"port": {"mac_address": "02:00:00:00:00:01"}}),
    )
    .await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::BAD_REQUEST, "HTTPBadRequest")
    );
    let (status, body) = get(&c, &b, &port_path).await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::NOT_FOUND, "PortNotFound")
    );
    let (status, _) = call(
        &c,
        Method::PUT,
        &b,
        &port_path,
        json!({"port": {"security_groups": []}}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = call(
        &c,
        Method::PUT,
        &a,
        &port_path,
        json!({"port": {"security_groups": [uuid::Uuid::new_v4()]}}),
    )
    .await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::NOT_FOUND, "SecurityGroupNotFound")
    );
    // A group a port is in stays.
    let status_body = c
        .send(
            Method::DELETE,
            &format!("{NET}/security-groups/{web}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(status_body.0, StatusCode::CONFLICT);
    assert_eq!(neutron_type(&status_body.2), "SecurityGroupInUse");
}

#[tokio::test]
async fn security_groups_and_rules() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let (_, groups) = get(&c, &a, "/security-groups").await;
    let groups = groups["security_groups"].as_array().unwrap().clone();
    assert_eq!(groups.len(), 1);
    let default = &groups[0];
    assert_eq!(default["name"], "default");
    let rules = default["security_group_rules"].as_array().unwrap();
    assert_eq!(rules.len(), 4);
    assert_eq!(
        rules
            .iter()
            .filter(|r| r["direction"] == "ingress" && r["remote_group_id"] == default["id"])
            .count(),
        2
    );
    let default_id = default["id"].as_str().unwrap().to_string();
    let status = delete(&c, &a, &format!("/security-groups/{default_id}")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = call(
        &c,
        Method::POST,
        &a,
        "/security-groups",
        json!({"security_group": {"name": "default"}}),
    )
    .await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::CONFLICT, "SecurityGroupDefaultAlreadyExists")
    );
    let (status, body) = call(
        &c,
        Method::POST,
        &a,
        "/security-groups",
        json!({"security_group": {"name": "x".repeat(256)}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (status, made) = call(
        &c,
        Method::POST,
        &a,
        "/security-groups",
        json!({"security_group": {"name": "web", "description": "front"}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let web = made["security_group"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        made["security_group"]["security_group_rules"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let ssh = json!({"security_group_rule": {"security_group_id": web, "direction": "ingress",
        "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 22, "port_range_max": 22,
        "remote_ip_prefix": "0.0.0.0/0"}});
    let (status, rule) = call(&c, Method::POST, &a, "/security-group-rules", ssh.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{rule}");
    let rule_id = rule["security_group_rule"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rule["security_group_rule"]["port_range_min"], 22);
    let (status, body) = call(&c, Method::POST, &a, "/security-group-rules", ssh.clone()).await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::CONFLICT, "SecurityGroupRuleExists")
    );
    assert!(
        body["NeutronError"]["message"]
            .as_str()
            .unwrap()
            .contains(&rule_id)
    );
    for (bad, kind) in [
        (
            json!({"protocol": "tcp", "port_range_min": 30, "port_range_max": 20}),
            "HTTPBadRequest",
        ),
        (json!({"protocol": "bogus"}), "HTTPBadRequest"),
        (json!({"direction": "sideways"}), "InvalidInput"),
        (
            json!({"remote_group_id": web, "remote_ip_prefix": "10.0.0.0/8"}),
            "SecurityGroupRemoteGroupAndRemoteIpPrefix",
        ),
        (json!({"port_range_min": 70000}), "InvalidInput"),
    ] {
        let mut body = ssh.clone();
        for (k, v) in bad.as_object().unwrap() {
            body["security_group_rule"][k] = v.clone();
        }
        let (status, answer) = call(&c, Method::POST, &a, "/security-group-rules", body).await;
        assert_eq!(
            (status, neutron_type(&answer)),
            (StatusCode::BAD_REQUEST, kind),
            "{bad}: {answer}"
        );
    }
    let (_, listed) = get(
        &c,
        &a,
        &format!("/security-group-rules?security_group_id={web}"),
    )
    .await;
    assert_eq!(listed["security_group_rules"].as_array().unwrap().len(), 3);
    let (status, shown) = get(&c, &a, &format!("/security-group-rules/{rule_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        shown["security_group_rule"]["remote_ip_prefix"],
        "0.0.0.0/0"
    );
    // Renamed; B sees and touches none of it.
    let (status, renamed) = call(
        &c,
        Method::PUT,
        &a,
        &format!("/security-groups/{web}"),
        json!({"security_group": {"name": "www"}}),
    )
    .await;
    assert_eq!(
        (status, renamed["security_group"]["name"].as_str()),
        (StatusCode::OK, Some("www"))
    );
    let (status, body) = get(&c, &b, &format!("/security-groups/{web}")).await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::NOT_FOUND, "SecurityGroupNotFound")
    );
    assert_eq!(
        delete(&c, &b, &format!("/security-group-rules/{rule_id}")).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        delete(&c, &b, &format!("/security-groups/{web}")).await,
        StatusCode::NOT_FOUND
    );
    let (status, _) = call(&c, Method::POST, &b, "/security-group-rules", ssh.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, theirs) = get(&c, &b, "/security-groups").await;
    assert_eq!(theirs["security_groups"].as_array().unwrap().len(), 1);
    // Deleted.
    assert_eq!(
        delete(&c, &a, &format!("/security-group-rules/{rule_id}")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        delete(&c, &a, &format!("/security-group-rules/{rule_id}")).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        delete(&c, &a, &format!("/security-groups/{web}")).await,
        StatusCode::NO_CONTENT
    );

    // Server create names groups; an unknown one is Nova's 400.
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(
                json!({"server": {"name": "s", "flavorRef": w.flavor.id, "imageRef": w.image.id,
            "security_groups": [{"name": "nope"}]}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, made) = call(
        &c,
        Method::POST,
        &a,
        "/security-groups",
        json!({"security_group": {"name": "db"}}),
    )
    .await;
    let db = made["security_group"]["id"].as_str().unwrap().to_string();
    let (status, _, body) = c
        .send(
            Method::POST,
            "/compute/v2.1/servers",
            Some(&a),
            Some(
                json!({"server": {"name": "s", "flavorRef": w.flavor.id, "imageRef": w.image.id,
            "security_groups": [{"name": "db"}, {"name": "default"}]}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let server = body["server"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        body["server"]["security_groups"],
        json!([{"name": "db"}, {"name": "default"}])
    );
    let (_, port) = get(&c, &a, &format!("/ports/{server}")).await;
    assert_eq!(port["port"]["security_groups"], json!([db, default_id]));
    // The server's own view says so too (by name, sorted), in show and in the detailed list.
    let shown = compute_get(&c, &a, &format!("/servers/{server}")).await;
    assert_eq!(
        shown["server"]["security_groups"],
        json!([{"name": "db"}, {"name": "default"}])
    );
    let listed = compute_get(&c, &a, "/servers/detail").await;
    let listed = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == server.as_str())
        .unwrap()
        .clone();
    assert_eq!(
        listed["security_groups"],
        shown["server"]["security_groups"]
    );
}

#[tokio::test]
async fn floating_ips_are_allocated_associated_and_released() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let (_, nets) = get(&c, &a, "/networks?router:external=True").await;
    let public = nets["networks"][0]["id"].as_str().unwrap().to_string();
    let (status, made) = call(
        &c,
        Method::POST,
        &a,
        "/floatingips",
        json!({"floatingip": {"floating_network_id": public}}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let fip = made["floatingip"].clone();
    let id = fip["id"].as_str().unwrap().to_string();
    assert_eq!(fip["floating_ip_address"], "192.168.233.2");
    assert_eq!(fip["status"], "DOWN");
    assert_eq!(fip["port_id"], Value::Null);
    // The same address for B: 409; outside the pool: 400; no network: 400; unknown one: 404.
    let (status, body) = call(&c, Method::POST, &b, "/floatingips",
        json!({"floatingip": {"floating_network_id": public, "floating_ip_address": "192.168.233.2"}})).await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::CONFLICT, "IpAddressAlreadyAllocated")
    );
    let (status, body) = call(
        &c,
        Method::POST,
        &b,
        "/floatingips",
        json!({"floatingip": {"floating_network_id": public, "floating_ip_address": "10.0.0.9"}}),
    )
    .await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::BAD_REQUEST, "InvalidIpForNetwork")
    );
    let (status, _) = call(
        &c,
        Method::POST,
        &b,
        "/floatingips",
        json!({"floatingip": {}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, body) = call(
        &c,
        Method::POST,
        &b,
        "/floatingips",
        json!({"floatingip": {"floating_network_id": uuid::Uuid::new_v4()}}),
    )
    .await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::NOT_FOUND, "NetworkNotFound")
    );

    // Associate with A's server; B's port and B's view are 404s.
    let server = w.server_a(&a, "vm1").await;
    let path = format!("/floatingips/{id}");
    let (status, assoc) = call(
        &c,
        Method::PUT,
        &a,
        &path,
        json!({"floatingip": {"port_id": server}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{assoc}");
    assert_eq!(assoc["floatingip"]["port_id"], server);
    assert!(
        assoc["floatingip"]["fixed_ip_address"]
            .as_str()
            .unwrap()
            .starts_with("172.")
    );
    let (_, by_port) = get(&c, &a, &format!("/floatingips?port_id={server}")).await;
    assert_eq!(by_port["floatingips"].as_array().unwrap().len(), 1);
    // The server shows it among its addresses, as Nova does.
    let shown = compute_get(&c, &a, &format!("/servers/{server}")).await;
    let addresses = shown["server"]["addresses"]["private"].as_array().unwrap();
    assert_eq!(addresses.len(), 2, "{shown}");
    assert_eq!(addresses[1]["addr"], "192.168.233.2");
    assert_eq!(addresses[1]["OS-EXT-IPS:type"], "floating");
    assert_eq!(addresses[0]["OS-EXT-IPS:type"], "fixed");
    let (_, by_addr) = get(&c, &a, "/floatingips?floating_ip_address=192.168.233.2").await;
    assert_eq!(by_addr["floatingips"][0]["id"], id);
    let (status, body) = get(&c, &b, &path).await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::NOT_FOUND, "FloatingIPNotFound")
    );
    let (status, _) = call(
        &c,
        Method::PUT,
        &b,
        &path,
        json!({"floatingip": {"port_id": null}}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(delete(&c, &b, &path).await, StatusCode::NOT_FOUND);
    let (_, theirs) = get(&c, &b, "/floatingips").await;
    assert!(theirs["floatingips"].as_array().unwrap().is_empty());
    let (status, body) = call(
        &c,
        Method::PUT,
        &a,
        &path,
        json!({"floatingip": {"port_id": uuid::Uuid::new_v4()}}),
    )
    .await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::NOT_FOUND, "PortNotFound")
    );
    let (status, _) = call(
        &c,
        Method::PUT,
        &a,
        &path,
        json!({"floatingip": {"floating_ip_address": "192.168.233.9"}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Disassociate, release.
    let (status, off) = call(
        &c,
        Method::PUT,
        &a,
        &path,
        json!({"floatingip": {"port_id": null}}),
    )
    .await;
    assert_eq!(
        (status, &off["floatingip"]["port_id"]),
        (StatusCode::OK, &Value::Null)
    );
    assert_eq!(delete(&c, &a, &path).await, StatusCode::NO_CONTENT);
    assert_eq!(delete(&c, &a, &path).await, StatusCode::NOT_FOUND);
    let (status, _) = get(&c, &a, "/floatingips/192.168.233.2").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn quotas_are_neutrons_and_enforced() {
    let w = World::start().await;
    let c = w.client();
    let a = w.token_a().await;
    let b = w.token_b().await;
    let admin = w.admin_token().await;
    let project = w.a.id.to_string();
    let (status, q) = get(&c, &a, &format!("/quotas/{project}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        q["quota"],
        json!({"floatingip": 50, "security_group": 10, "security_group_rule": 100})
    );
    let (status, _) = get(&c, &b, &format!("/quotas/{project}")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        &c,
        Method::PUT,
        &a,
        &format!("/quotas/{project}"),
        json!({"quota": {"floatingip": 1}}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = call(
        &c,
        Method::PUT,
        &admin,
        &format!("/quotas/{project}"),
        json!({"quota": {"floatingip": -1}}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, q) = call(
        &c,
        Method::PUT,
        &admin,
        &format!("/quotas/{project}"),
        json!({"quota": {"floatingip": 1, "security_group": 1}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{q}");
    assert_eq!(q["quota"]["floatingip"], 1);
    let (_, nets) = get(&c, &a, "/networks?router:external=True").await;
    let public = nets["networks"][0]["id"].as_str().unwrap().to_string();
    let fip = json!({"floatingip": {"floating_network_id": public}});
    let (status, _) = call(&c, Method::POST, &a, "/floatingips", fip.clone()).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = call(&c, Method::POST, &a, "/floatingips", fip).await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::CONFLICT, "OverQuota")
    );
    assert!(
        body["NeutronError"]["message"]
            .as_str()
            .unwrap()
            .contains("floatingip")
    );
    let (status, body) = call(
        &c,
        Method::POST,
        &a,
        "/security-groups",
        json!({"security_group": {"name": "web"}}),
    )
    .await;
    assert_eq!(
        (status, neutron_type(&body)),
        (StatusCode::CONFLICT, "OverQuota")
    );
    let (status, details) = get(&c, &a, &format!("/quotas/{project}/details.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        details["quota"]["floatingip"],
        json!({"limit": 1, "used": 1, "reserved": 0})
    );
    assert_eq!(details["quota"]["security_group_rule"]["used"], 4);
    let (_, defaults) = get(&c, &a, &format!("/quotas/{project}/default")).await;
    assert_eq!(defaults["quota"]["floatingip"], 50);
}
