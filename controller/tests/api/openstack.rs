//! The real `openstack` CLI against the API with the fake cluster. Skipped with a message when
//! the CLI is not installed (`scripts/openstack-venv.sh` installs it), unless
//! `CUMULO_REQUIRE_OPENSTACK=1`, which makes a missing CLI a failure (CI sets it).

use std::path::PathBuf;
use std::sync::Arc;

use controller::api::testing::{
    ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, OpenStackCli, find_openstack,
};
use serde_json::Value;

use crate::support::{PASSWORD, TestTenant, World};

/// The CLI, or `None` (with a message) when the test should be skipped.
pub fn openstack_or_skip() -> Option<PathBuf> {
    let found = find_openstack();
    if found.is_none() {
        if std::env::var("CUMULO_REQUIRE_OPENSTACK").as_deref() == Ok("1") {
            panic!(
                "CUMULO_REQUIRE_OPENSTACK=1 but no openstack CLI: run scripts/openstack-venv.sh"
            );
        }
        eprintln!(
            "SKIPPED: no openstack CLI (run scripts/openstack-venv.sh, or set CUMULO_OPENSTACK)"
        );
    }
    found
}

/// Runs `run` with the CLI and `args` on the blocking pool (the CLI blocks).
async fn blocking<T: Send + 'static>(
    cli: &Arc<OpenStackCli>,
    args: &[&str],
    run: impl FnOnce(&OpenStackCli, &[&str]) -> T + Send + 'static,
) -> T {
    let (cli, args): (_, Vec<String>) = (cli.clone(), args.iter().map(|s| s.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&cli, &args)
    })
    .await
    .unwrap()
}

/// Runs a CLI command, which must succeed, as JSON.
pub(crate) async fn json(cli: &Arc<OpenStackCli>, args: &[&str]) -> Value {
    blocking(cli, args, |cli, args| cli.json(args))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a CLI command, which must succeed; its standard output.
pub(crate) async fn ok(cli: &Arc<OpenStackCli>, args: &[&str]) -> String {
    blocking(cli, args, |cli, args| cli.ok(args))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a CLI command that should fail; its standard error.
pub(crate) async fn fails(cli: &Arc<OpenStackCli>, args: &[&str]) -> String {
    blocking(cli, args, |cli, args| {
        let out = cli.run(args).unwrap();
        assert!(!out.success, "{args:?} succeeded: {}", out.stdout);
        out.stderr
    })
    .await
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["Name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_drives_the_api() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let debug = std::env::var("CUMULO_OPENSTACK_DEBUG").is_ok();
    let mut alice = OpenStackCli::new(
        bin.clone(),
        &world.api.url,
        &world.a.user_name,
        PASSWORD,
        &world.a.name,
    );
    alice.debug = debug;
    let alice = Arc::new(alice);

    let token = json(&alice, &["token", "issue"]).await;
    assert_eq!(token["project_id"], world.a.id.to_string());
    assert_eq!(token["user_id"], world.a.user.to_string());
    assert!(token["id"].as_str().unwrap().starts_with("cu1."));

    let flavors = json(&alice, &["flavor", "list"]).await;
    assert_eq!(names(&flavors), ["m1.tiny"]);
    let images = json(&alice, &["image", "list"]).await;
    assert_eq!(names(&images), ["cirros"]);

    let dir = tempfile::tempdir().unwrap();
    let user_data = dir.path().join("user-data.yaml");
    std::fs::write(&user_data, "#cloud-config\nhostname: vm1\n").unwrap();
    let created = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--user-data",
            user_data.to_str().unwrap(),
            "--wait",
            "vm1",
        ],
    )
    .await;
    assert_eq!(created["status"], "ACTIVE", "{created}");
    assert_eq!(created["name"], "vm1");
    let id = created["id"].as_str().unwrap().to_string();

    let list = json(&alice, &["server", "list"]).await;
    assert_eq!(names(&list), ["vm1"]);
    assert_eq!(list[0]["Status"], "ACTIVE");

    let shown = json(&alice, &["server", "show", "vm1"]).await;
    assert_eq!(shown["id"], id);
    assert!(shown["addresses"].to_string().contains("172."), "{shown}");

    ok(&alice, &["server", "stop", "vm1"]).await;
    let shown = json(&alice, &["server", "show", &id]).await;
    assert_eq!(shown["status"], "SHUTOFF");
    ok(&alice, &["server", "start", &id]).await;
    let shown = json(&alice, &["server", "show", &id]).await;
    assert_eq!(shown["status"], "ACTIVE");

    // What happened to it: `server event list` and `server event show`.
    let events = json(&alice, &["server", "event", "list", "--long", "vm1"]).await;
    let actions: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["start", "stop", "create"], "{events}");
    assert_eq!(events[0]["Server ID"], id);
    assert_eq!(events[0]["User ID"], world.a.user.to_string());
    let request_id = events[1]["Request ID"].as_str().unwrap().to_string();
    let stop = json(&alice, &["server", "event", "show", &id, &request_id]).await;
    assert_eq!(stop["action"], "stop", "{stop}");
    assert_eq!(stop["request_id"], request_id);
    assert_eq!(stop["events"][0]["event"], "controller_stop", "{stop}");
    assert_eq!(stop["events"][0]["result"], "Success", "{stop}");

    // Tenant B's user sees none of it.
    let bob = tenant_cli(bin.clone(), &world, &world.b);
    assert_eq!(json(&bob, &["server", "list"]).await, Value::Array(vec![]));

    ok(&alice, &["server", "delete", "vm1"]).await;
    assert_eq!(
        json(&alice, &["server", "list"]).await,
        Value::Array(vec![])
    );
    // A deleted server's events, by its id.
    let events = json(&alice, &["server", "event", "list", &id]).await;
    assert_eq!(events[0]["Action"], "delete", "{events}");

    let admin = admin_cli(bin, &world);
    let mut projects = names(&json(&admin, &["project", "list"]).await);
    projects.sort();
    assert_eq!(projects, ["admin", "alpha", "beta"]);
    world.stop().await;
}

/// The CLI as the member user of `t`.
pub(crate) fn tenant_cli(bin: PathBuf, world: &World, t: &TestTenant) -> Arc<OpenStackCli> {
    Arc::new(OpenStackCli::new(
        bin,
        &world.api.url,
        &t.user_name,
        PASSWORD,
        &t.name,
    ))
}

/// The CLI as the cluster admin.
pub(crate) fn admin_cli(bin: PathBuf, world: &World) -> Arc<OpenStackCli> {
    let mut cli = OpenStackCli::new(
        bin,
        &world.api.url,
        ADMIN_NAME,
        ADMIN_PASSWORD,
        ADMIN_PROJECT,
    );
    cli.debug = std::env::var("CUMULO_OPENSTACK_DEBUG").is_ok();
    Arc::new(cli)
}

/// `openstack keypair ...` and `server create --key-name`: a generated key pair's private key is
/// printed once, an imported public key is kept as given, and a server made with a key names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_manages_key_pairs() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let mut alice = OpenStackCli::new(
        bin.clone(),
        &world.api.url,
        &world.a.user_name,
        PASSWORD,
        &world.a.name,
    );
    alice.debug = std::env::var("CUMULO_OPENSTACK_DEBUG").is_ok();
    let alice = Arc::new(alice);

    // Generated: the CLI prints the private key.
    let private = ok(&alice, &["keypair", "create", "k1"]).await;
    assert!(
        private.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{private}"
    );
    // Imported from a file.
    let dir = tempfile::tempdir().unwrap();
    let public = dir.path().join("id.pub");
    let line =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDqQAmShDSQy5PElKTKfr2Xx0D8ZW+CSzdNTY+7C0SPx me@home";
    std::fs::write(&public, format!("{line}\n")).unwrap();
    let imported = json(
        &alice,
        &[
            "keypair",
            "create",
            "--public-key",
            public.to_str().unwrap(),
            "k2",
        ],
    )
    .await;
    assert_eq!(imported["name"], "k2", "{imported}");
    let fingerprint = imported["fingerprint"].as_str().unwrap().to_string();
    assert_eq!(fingerprint.len(), 47);

    let list = json(&alice, &["keypair", "list"]).await;
    assert_eq!(names(&list), ["k1", "k2"]);
    assert_eq!(list[1]["Fingerprint"], fingerprint.as_str());
    let shown = json(&alice, &["keypair", "show", "k2"]).await;
    assert_eq!(shown["fingerprint"], fingerprint.as_str(), "{shown}");
    assert_eq!(shown["user_id"], world.a.user.to_string());
    let key = ok(&alice, &["keypair", "show", "--public-key", "k2"]).await;
    assert_eq!(key.trim(), line);

    let created = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--key-name",
            "k2",
            "--wait",
            "vm-key",
        ],
    )
    .await;
    assert_eq!(created["key_name"], "k2", "{created}");
    let shown = json(&alice, &["server", "show", "vm-key"]).await;
    assert_eq!(shown["key_name"], "k2", "{shown}");
    let refused = fails(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--key-name",
            "nope",
            "vm-nokey",
        ],
    )
    .await;
    assert!(
        refused.contains("Invalid key_name provided.") && refused.contains("400"),
        "{refused}"
    );

    ok(&alice, &["keypair", "delete", "k1"]).await;
    assert_eq!(names(&json(&alice, &["keypair", "list"]).await), ["k2"]);
    let missing = fails(&alice, &["keypair", "show", "k1"]).await;
    assert!(missing.contains("k1"), "{missing}");
    ok(&alice, &["server", "delete", "vm-key"]).await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_over_https() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let pki = testkit::TestPki::new();
    let server = pki.leaf(ssntp::Role::CONTROLLER, Some(uuid::Uuid::new_v4()));
    let tls = controller::api::server_tls_config(
        server.ca_pem.as_bytes(),
        server.cert_pem.as_bytes(),
        server.key_pem.as_bytes(),
    )
    .unwrap();
    let world = World::start_tls(Some(tls)).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.ca_pem).unwrap();
    let mut cli = OpenStackCli::new(
        bin,
        &world.api.url,
        &world.a.user_name,
        PASSWORD,
        &world.a.name,
    );
    cli.cacert = Some(ca);
    let cli = Arc::new(cli);
    let token = json(&cli, &["token", "issue"]).await;
    assert_eq!(token["project_id"], world.a.id.to_string());
    let created = json(
        &cli,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "cirros", "--wait", "tls-vm",
        ],
    )
    .await;
    assert_eq!(created["status"], "ACTIVE");
    assert_eq!(names(&json(&cli, &["server", "list"]).await), ["tls-vm"]);
    ok(&cli, &["server", "delete", "tls-vm"]).await;
    world.stop().await;
}

/// The Networking API through the CLI: `network list`, `subnet list`, `security group ...`,
/// `server create --security-group`, `port list --server`, `floating ip ...`,
/// `server add/remove floating ip`, `quota show --network`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_drives_the_networking_api() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let mut alice = OpenStackCli::new(
        bin.clone(),
        &world.api.url,
        &world.a.user_name,
        PASSWORD,
        &world.a.name,
    );
    alice.debug = std::env::var("CUMULO_OPENSTACK_DEBUG").is_ok();
    let alice = Arc::new(alice);

    // Security groups and rules.
    let group = json(
        &alice,
        &[
            "security",
            "group",
            "create",
            "web",
            "--description",
            "front",
        ],
    )
    .await;
    assert_eq!(group["name"], "web", "{group}");
    let group_id = group["id"].as_str().unwrap().to_string();
    let mut groups = names(&json(&alice, &["security", "group", "list"]).await);
    groups.sort();
    assert_eq!(groups, ["default", "web"]);
    let shown = json(&alice, &["security", "group", "show", "web"]).await;
    assert_eq!(shown["id"], group_id);
    assert_eq!(shown["description"], "front");
    let rule = json(
        &alice,
        &[
            "security",
            "group",
            "rule",
            "create",
            "--protocol",
            "tcp",
            "--dst-port",
            "22",
            "--remote-ip",
            "0.0.0.0/0",
            "web",
        ],
    )
    .await;
    assert_eq!(rule["port_range_min"], 22, "{rule}");
    assert_eq!(rule["remote_ip_prefix"], "0.0.0.0/0");
    let rule_id = rule["id"].as_str().unwrap().to_string();
    let duplicate = fails(
        &alice,
        &[
            "security",
            "group",
            "rule",
            "create",
            "--protocol",
            "tcp",
            "--dst-port",
            "22",
            "--remote-ip",
            "0.0.0.0/0",
            "web",
        ],
    )
    .await;
    assert!(duplicate.contains("already exists"), "{duplicate}");
    let rules = json(&alice, &["security", "group", "rule", "list", "web"]).await;
    let rules = rules.as_array().unwrap();
    assert_eq!(rules.len(), 3, "{rules:?}");
    assert!(
        rules
            .iter()
            .any(|r| r["ID"] == rule_id && r["Port Range"] == "22:22"),
        "{rules:?}"
    );

    // A server in the group, and its port.
    let created = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "cirros",
            "--security-group",
            "web",
            "--wait",
            "vm1",
        ],
    )
    .await;
    assert_eq!(created["status"], "ACTIVE", "{created}");
    let server = created["id"].as_str().unwrap().to_string();
    let ports = json(&alice, &["port", "list", "--server", "vm1"]).await;
    let ports = ports.as_array().unwrap();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0]["ID"], server);
    let port = json(&alice, &["port", "show", &server]).await;
    assert_eq!(port["device_id"], server);
    assert_eq!(
        port["security_group_ids"],
        serde_json::json!([group_id]),
        "{port}"
    );
    let in_use = fails(&alice, &["security", "group", "delete", "web"]).await;
    assert!(in_use.contains("in use"), "{in_use}");

    // Networks and subnets: the external one and the project's.
    let networks = json(&alice, &["network", "list"]).await;
    let mut network_names = names(&networks);
    network_names.sort();
    assert_eq!(network_names.len(), 2, "{networks}");
    assert_eq!(network_names[1], "public");
    assert!(network_names[0].starts_with("private-172."), "{networks}");
    let subnets = json(&alice, &["subnet", "list"]).await;
    let subnets = subnets.as_array().unwrap();
    assert_eq!(subnets.len(), 2);
    assert!(
        subnets.iter().any(|s| s["Subnet"] == "192.168.233.0/24"),
        "{subnets:?}"
    );

    // Floating IPs.
    let fip = json(&alice, &["floating", "ip", "create", "public"]).await;
    let address = fip["floating_ip_address"].as_str().unwrap().to_string();
    assert_eq!(address, "192.168.233.2", "{fip}");
    ok(
        &alice,
        &["server", "add", "floating", "ip", "vm1", &address],
    )
    .await;
    let listed = json(&alice, &["floating", "ip", "list"]).await;
    assert_eq!(
        listed[0]["Floating IP Address"],
        address.as_str(),
        "{listed}"
    );
    assert_eq!(listed[0]["Port"], server, "{listed}");
    assert!(
        listed[0]["Fixed IP Address"]
            .as_str()
            .unwrap()
            .starts_with("172."),
        "{listed}"
    );
    // `server show`: the floating address among the server's, its group by name.
    let shown = json(&alice, &["server", "show", "vm1"]).await;
    assert!(shown["addresses"].to_string().contains(&address), "{shown}");
    assert!(
        shown["security_groups"].to_string().contains("web"),
        "{shown}"
    );
    ok(
        &alice,
        &["server", "remove", "floating", "ip", "vm1", &address],
    )
    .await;
    let listed = json(&alice, &["floating", "ip", "list"]).await;
    assert_eq!(listed[0]["Port"], Value::Null, "{listed}");
    ok(&alice, &["floating", "ip", "delete", &address]).await;
    assert_eq!(
        json(&alice, &["floating", "ip", "list"]).await,
        Value::Array(vec![])
    );

    // Quotas.
    let quota = json(&alice, &["quota", "show", "--network"]).await;
    let text = quota.to_string();
    assert!(text.contains("floating"), "{text}");
    assert!(text.contains("50") && text.contains("100"), "{text}");

    // Clean up: the rule, the server, the group.
    ok(&alice, &["security", "group", "rule", "delete", &rule_id]).await;
    ok(&alice, &["server", "delete", "--wait", "vm1"]).await;
    ok(&alice, &["security", "group", "delete", "web"]).await;
    assert_eq!(
        names(&json(&alice, &["security", "group", "list"]).await),
        ["default"]
    );
    world.stop().await;
}

/// `openstack quota show` (Compute's `os-quota-sets` with Networking's and Block Storage's
/// quotas), `--usage`, `--default`, `--volume`, and an admin's `quota set` (Compute's figures,
/// and Block Storage's `--volumes` and `--gigabytes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_shows_and_sets_quotas() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin.clone(), &world, &world.a);
    let admin = admin_cli(bin, &world);
    // One row per resource: `{"Resource": ..., "Limit": ...}` (OSC 7+), or one object.
    let limit = |shown: &Value, name: &str| -> Value {
        match shown {
            Value::Array(rows) => rows
                .iter()
                .find(|r| r["Resource"] == name)
                .map(|r| r.get("Limit").cloned().unwrap_or_else(|| r.clone()))
                .unwrap_or(Value::Null),
            other => other[name].clone(),
        }
    };
    let shown = json(&alice, &["quota", "show"]).await;
    assert_eq!(limit(&shown, "cores"), -1, "{shown}");
    assert_eq!(limit(&shown, "instances"), -1, "{shown}");
    assert_eq!(limit(&shown, "floating_ips"), 50, "{shown}");
    assert_eq!(limit(&shown, "key-pairs"), 100, "{shown}");
    // Block Storage's, the controller's defaults.
    assert_eq!(limit(&shown, "volumes"), 10, "{shown}");
    assert_eq!(limit(&shown, "gigabytes"), 1000, "{shown}");

    ok(
        &admin,
        &[
            "quota",
            "set",
            "--cores",
            "6",
            "--instances",
            "3",
            &world.a.name,
        ],
    )
    .await;
    let shown = json(&alice, &["quota", "show"]).await;
    assert_eq!(limit(&shown, "cores"), 6, "{shown}");
    assert_eq!(limit(&shown, "instances"), 3, "{shown}");
    // Block Storage's, the project's own (Cinder's `PUT os-quota-sets`), binding its creations;
    // a quota this server does not keep is refused, not ignored.
    ok(
        &admin,
        &[
            "quota",
            "set",
            "--volumes",
            "3",
            "--gigabytes",
            "5",
            &world.a.name,
        ],
    )
    .await;
    let shown = json(&alice, &["quota", "show", "--volume"]).await;
    assert_eq!(limit(&shown, "volumes"), 3, "{shown}");
    assert_eq!(limit(&shown, "gigabytes"), 5, "{shown}");
    json(&alice, &["volume", "create", "--size", "4", "big"]).await;
    let err = fails(&alice, &["volume", "create", "--size", "2", "over"]).await;
    assert!(err.contains("gigabytes"), "{err}");
    ok(&alice, &["volume", "delete", "big"]).await;
    let err = fails(&admin, &["quota", "set", "--snapshots", "2", &world.a.name]).await;
    assert!(err.contains("snapshots"), "{err}");
    // What a member may not do.
    let err = fails(&alice, &["quota", "set", "--cores", "60", &world.a.name]).await;
    assert!(
        err.contains("403") || err.to_lowercase().contains("forbidden"),
        "{err}"
    );
    // With usage: one server of the test flavor.
    ok(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            &world.flavor.name,
            "--image",
            &world.image.name,
            "--wait",
            "q1",
        ],
    )
    .await;
    let usage = json(&alice, &["quota", "show", "--usage"]).await;
    let cores = usage
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["Resource"] == "cores"))
        .unwrap_or_else(|| panic!("no cores row: {usage}"));
    assert_eq!(cores["In Use"], world.flavor.vcpus, "{usage}");
    let defaults = json(&alice, &["quota", "show", "--default"]).await;
    assert_eq!(limit(&defaults, "floating_ips"), 50, "{defaults}");
    ok(&alice, &["server", "delete", "--wait", "q1"]).await;
    world.stop().await;
}

#[tokio::test]
async fn the_openstack_cli_lists_hypervisors_and_services() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let mut node = crate::native::node();
    node.instances = 2;
    node.last_stats = Some(std::time::SystemTime::now());
    world.cluster.add_node(node.clone());
    let admin = admin_cli(bin, &world);
    let listed = json(&admin, &["hypervisor", "list"]).await;
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["Hypervisor Hostname"], "host1", "{listed}");
    assert_eq!(rows[0]["State"], "up", "{listed}");
    let shown = json(&admin, &["hypervisor", "show", "host1"]).await;
    assert_eq!(shown["vcpus"], 4, "{shown}");
    assert_eq!(shown["running_vms"], 2, "{shown}");
    assert_eq!(shown["host_ip"], "127.0.0.1", "{shown}");
    let services = json(&admin, &["compute", "service", "list"]).await;
    let rows = services.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{services}");
    assert_eq!(rows[0]["Binary"], "nova-compute", "{services}");
    assert_eq!(rows[0]["Host"], "host1", "{services}");
    assert_eq!(rows[0]["Status"], "enabled", "{services}");
    assert_eq!(rows[0]["State"], "up", "{services}");
    world.stop().await;
}

#[tokio::test]
async fn the_openstack_cli_renames_a_server_and_lists_its_addresses() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin, &world, &world.a);
    let made = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            &world.flavor.name,
            "--image",
            &world.image.name,
            "--wait",
            "before",
        ],
    )
    .await;
    let id = made["id"].as_str().unwrap().to_string();
    ok(&alice, &["server", "set", "--name", "after", &id]).await;
    let shown = json(&alice, &["server", "show", &id]).await;
    assert_eq!(shown["name"], "after", "{shown}");
    world.stop().await;
}

/// `openstack server add volume`, `server volume list`, `server remove volume`, with `volume
/// show` between (the fake cluster attaches and detaches at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_attaches_and_detaches_volumes() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let alice = tenant_cli(bin, &world, &world.a);
    let server = json(
        &alice,
        &[
            "server",
            "create",
            "--flavor",
            &world.flavor.name,
            "--image",
            &world.image.name,
            "--wait",
            "vm",
        ],
    )
    .await;
    let server = server["id"].as_str().unwrap().to_string();
    let volume = json(&alice, &["volume", "create", "--size", "1", "data"]).await;
    let volume = volume["id"].as_str().unwrap().to_string();

    let added = json(&alice, &["server", "add", "volume", "vm", "data"]).await;
    assert_eq!(added["Device"], "/dev/vdb", "{added}");
    assert_eq!(added["Volume ID"], volume.as_str(), "{added}");
    assert_eq!(added["Server ID"], server.as_str(), "{added}");
    let listed = json(&alice, &["server", "volume", "list", "vm"]).await;
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["Device"], "/dev/vdb", "{listed}");
    assert_eq!(rows[0]["Volume ID"], volume.as_str(), "{listed}");
    let shown = json(&alice, &["volume", "show", "data"]).await;
    assert_eq!(shown["status"], "in-use", "{shown}");
    // Attached: not deleted.
    fails(&alice, &["volume", "delete", "data"]).await;

    ok(&alice, &["server", "remove", "volume", "vm", "data"]).await;
    let shown = json(&alice, &["volume", "show", "data"]).await;
    assert_eq!(shown["status"], "available", "{shown}");
    let listed = json(&alice, &["server", "volume", "list", "vm"]).await;
    assert_eq!(listed, serde_json::json!([]), "{listed}");
    // Not attached any more: the CLI reports the 409.
    fails(&alice, &["server", "remove", "volume", "vm", "data"]).await;
    world.stop().await;
}

/// `openstack image create --file`, `image show`, `image save`, `image set` (name, property,
/// tag), `image list`, `image delete`: the data comes back as it went, with its checksum; the
/// other project sees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_uploads_saves_sets_and_deletes_an_image() {
    use sha2::Digest as _;
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let world = World::start().await;
    let cli = |user: &str, project: &str| {
        Arc::new(OpenStackCli::new(
            bin.clone(),
            &world.api.url,
            user,
            PASSWORD,
            project,
        ))
    };
    let alice = cli(&world.a.user_name, &world.a.name);
    let bob = cli(&world.b.user_name, &world.b.name);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("disk.raw");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let made = json(
        &alice,
        &[
            "image",
            "create",
            "--file",
            file.to_str().unwrap(),
            "--disk-format",
            "raw",
            "--container-format",
            "bare",
            "--property",
            "os_distro=busybox",
            "uploaded",
        ],
    )
    .await;
    assert_eq!(made["status"], "active", "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    let shown = json(&alice, &["image", "show", &id]).await;
    assert_eq!(shown["size"], data.len(), "{shown}");
    let md5: String = md5::Md5::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(shown["checksum"], md5, "{shown}");
    // (The CLI shows the fields it does not know among the properties.)
    let field = |k: &str| {
        shown
            .get(k)
            .or_else(|| shown["properties"].get(k))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(field("os_hash_algo"), "sha512", "{shown}");
    let sha512: String = sha2::Sha512::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(field("os_hash_value"), sha512.as_str(), "{shown}");

    let saved = dir.path().join("saved.raw");
    ok(
        &alice,
        &["image", "save", "--file", saved.to_str().unwrap(), &id],
    )
    .await;
    assert!(
        std::fs::read(&saved).unwrap() == data,
        "the saved data differs"
    );

    ok(
        &alice,
        &[
            "image",
            "set",
            "--name",
            "renamed",
            "--property",
            "hw_disk_bus=virtio",
            "--tag",
            "blue",
            &id,
        ],
    )
    .await;
    let shown = json(&alice, &["image", "show", &id]).await;
    assert_eq!(shown["name"], "renamed", "{shown}");
    assert!(shown.to_string().contains("hw_disk_bus"), "{shown}");
    assert!(shown.to_string().contains("blue"), "{shown}");

    let listed = json(&alice, &["image", "list"]).await;
    assert!(names(&listed).contains(&"renamed".to_string()), "{listed}");
    let theirs = json(&bob, &["image", "list"]).await;
    assert!(!names(&theirs).contains(&"renamed".to_string()), "{theirs}");
    fails(&bob, &["image", "delete", &id]).await;

    ok(&alice, &["image", "delete", &id]).await;
    let listed = json(&alice, &["image", "list"]).await;
    assert!(!names(&listed).contains(&"renamed".to_string()), "{listed}");
    world.stop().await;
}
