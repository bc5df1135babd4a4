//! The real `openstack` CLI against cumulo-controller's API, its engine, a real scheduler and a
//! sim agent: log in, create a server, see it ACTIVE, stop, start, delete; a server whose image
//! does not boot shows ERROR and its fault; `server event list` and `server event show` tell
//! what was asked of each and how it went. Skipped with a message when the CLI is not installed
//! (`scripts/openstack-venv.sh`), unless `CUMULO_REQUIRE_OPENSTACK=1` (CI), which makes a
//! missing CLI a failure.

use std::sync::Arc;

use controller::api::testing::{OpenStackCli, find_openstack};
use controller::api::{self, ApiConfig, TokenSigner};
use controller::cluster::Cluster;
use controller::daemon::Controller;
use serde_json::Value;
use store::{ImageKind, NewFlavor, NewImage, NewTenant, NewUser, Quota, Role};
use testkit::TestPki;

use crate::support::*;

const PASSWORD: &str = "demo-secret";

fn openstack_or_skip() -> Option<std::path::PathBuf> {
    let found = find_openstack();
    if found.is_none() {
        assert!(
            std::env::var("CUMULO_REQUIRE_OPENSTACK").as_deref() != Ok("1"),
            "CUMULO_REQUIRE_OPENSTACK=1 but no openstack CLI: run scripts/openstack-venv.sh"
        );
        eprintln!("SKIPPED: no openstack CLI (run scripts/openstack-venv.sh)");
    }
    found
}

async fn run(cli: &Arc<OpenStackCli>, args: &[&str], json: bool) -> Value {
    let shown = args.join(" ");
    let (cli, args): (_, Vec<String>) = (cli.clone(), args.iter().map(|s| s.to_string()).collect());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if json {
            cli.json(&args)
        } else {
            cli.ok(&args).map(Value::String)
        }
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("openstack {shown}: {e}"))
}

async fn status_of(cli: &Arc<OpenStackCli>, id: &str) -> String {
    run(cli, &["server", "show", id], true).await["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn wait_status(cli: &Arc<OpenStackCli>, id: &str, want: &str) {
    testkit::wait_until(T, &format!("server {id} {want}"), || async {
        status_of(cli, id).await == want
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openstack_cli_runs_a_server_through_the_whole_cluster() {
    let Some(bin) = openstack_or_skip() else {
        return;
    };
    let pki = TestPki::new();
    let dir = tempfile::tempdir().unwrap();
    let sched = start_scheduler(&pki).await;
    let agent = start_agent(&pki, &sched.addr, dir.path());
    let mut config = controller_config(&pki, &sched.addr, dir.path());
    config.engine.console_port = agent.console_port;
    let mut controller = Controller::start(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    controller.serve_api(
        listener,
        None,
        TokenSigner::random(std::time::Duration::from_secs(600)).unwrap(),
        ApiConfig::new(url.clone()),
    );
    let store = controller.store.clone();
    tokio::task::spawn_blocking(move || {
        let tenant = store
            .create_tenant(NewTenant {
                name: "demo".into(),
                quota: Quota::default(),
                subnet_prefix: 24,
            })
            .unwrap();
        let user = store
            .create_user(NewUser {
                name: "demo".into(),
                password_hash: api::password::hash(PASSWORD, 1000).unwrap(),
            })
            .unwrap();
        store.grant_role(user.id, tenant.id, Role::Member).unwrap();
        store
            .create_flavor(NewFlavor {
                name: "m1.tiny".into(),
                vcpus: 1,
                memory_mb: 128,
                disk_gb: 1,
                is_public: true,
            })
            .unwrap();
        store
            .create_image(NewImage {
                owner: None,
                name: "tiny".into(),
                kind: ImageKind::Raw,
                reference: "tiny".into(),
            })
            .unwrap();
        // An image the sim agent never boots.
        store
            .create_image(NewImage {
                owner: None,
                name: "broken".into(),
                kind: ImageKind::Raw,
                reference: agent::sim::IMAGE_FAIL_LAUNCH.into(),
            })
            .unwrap();
    })
    .await
    .unwrap();
    testkit::wait_until(T, "a compute node", || async {
        !controller.engine.nodes().is_empty()
    })
    .await;

    let cli = Arc::new(OpenStackCli::new(bin, &url, "demo", PASSWORD, "demo"));
    let token = run(&cli, &["token", "issue"], true).await;
    assert!(token["id"].as_str().is_some_and(|t| !t.is_empty()));

    let user_data = dir.path().join("user-data");
    std::fs::write(&user_data, "#cloud-config\nhostname: vm1\n").unwrap();
    let created = run(
        &cli,
        &[
            "server",
            "create",
            "--flavor",
            "m1.tiny",
            "--image",
            "tiny",
            "--user-data",
            user_data.to_str().unwrap(),
            "--wait",
            "vm1",
        ],
        true,
    )
    .await;
    assert_eq!(created["status"], "ACTIVE", "{created}");
    let id = created["id"].as_str().unwrap().to_string();

    let list = run(&cli, &["server", "list"], true).await;
    assert_eq!(list[0]["Name"], "vm1");
    assert_eq!(list[0]["Status"], "ACTIVE");

    run(&cli, &["server", "stop", &id], false).await;
    wait_status(&cli, &id, "SHUTOFF").await;
    run(&cli, &["server", "start", &id], false).await;
    wait_status(&cli, &id, "ACTIVE").await;
    run(&cli, &["server", "reboot", &id], false).await;
    wait_status(&cli, &id, "ACTIVE").await;
    // Pause, suspend and their reverses act on the server in place.
    for (verb, status) in [
        ("pause", "PAUSED"),
        ("unpause", "ACTIVE"),
        ("suspend", "SUSPENDED"),
        ("resume", "ACTIVE"),
    ] {
        run(&cli, &["server", verb, &id], false).await;
        wait_status(&cli, &id, status).await;
    }

    // Its console log, fetched from its node: the sim guest's marker per boot (three: the
    // create, the start, the reboot), all of it or the last lines.
    let marker = format!("CUMULO-GUEST-UP {id}");
    let log = run(&cli, &["console", "log", "show", "vm1"], false).await;
    let log = log.as_str().unwrap();
    assert_eq!(log.matches(&marker).count(), 3, "{log}");
    let tail = run(
        &cli,
        &["console", "log", "show", "--lines", "5", &id],
        false,
    )
    .await;
    let tail = tail.as_str().unwrap().trim_end();
    assert_eq!(tail.lines().count(), 5, "{tail}");
    assert!(tail.ends_with(&marker), "{tail}");

    // What happened to it, newest first. A reboot, a pause, ... is an INSTANCE_ACTION to the
    // node: one controller event each.
    let events = run(&cli, &["server", "event", "list", &id], true).await;
    let actions: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["Action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "resume", "suspend", "unpause", "pause", "reboot", "start", "stop", "create"
        ],
        "{events}"
    );
    let reboot = events[4]["Request ID"].as_str().unwrap().to_string();
    let shown = run(&cli, &["server", "event", "show", &id, &reboot], true).await;
    let steps: Vec<(&str, &str)> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["result"].as_str().unwrap()))
        .collect();
    assert_eq!(steps, [("controller_reboot", "Success")], "{shown}");
    let create = events[7]["Request ID"].as_str().unwrap().to_string();
    let shown = run(&cli, &["server", "event", "show", &id, &create], true).await;
    assert_eq!(shown["action"], "create", "{shown}");
    let steps: Vec<(&str, &str)> = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [("controller_create", "Success"), ("node_start", "Success")],
        "{shown}"
    );

    // A server whose image does not boot: ERROR, and `server show` says why, with the agent's
    // words.
    let broken = run(
        &cli,
        &[
            "server", "create", "--flavor", "m1.tiny", "--image", "broken", "vm2",
        ],
        true,
    )
    .await;
    let broken = broken["id"].as_str().unwrap().to_string();
    wait_status(&cli, &broken, "ERROR").await;
    let shown = run(&cli, &["server", "show", &broken], true).await;
    assert!(
        shown["fault"]
            .to_string()
            .contains("simulated: the image fail-launch never boots"),
        "{shown}"
    );
    // Its create failed on the node, with the agent's words.
    let events = run(&cli, &["server", "event", "list", &broken], true).await;
    let create = events[0]["Request ID"].as_str().unwrap().to_string();
    let shown = run(&cli, &["server", "event", "show", &broken, &create], true).await;
    assert_eq!(shown["message"], "Error", "{shown}");
    let start = &shown["events"][1];
    assert_eq!(start["event"], "node_start", "{shown}");
    assert_eq!(start["result"], "Error", "{shown}");
    assert!(
        start["traceback"]
            .as_str()
            .is_some_and(|t| t.contains("simulated: the image fail-launch never boots")),
        "{shown}"
    );
    run(&cli, &["server", "delete", "--wait", &broken], false).await;

    run(&cli, &["server", "delete", "--wait", &id], false).await;
    assert_eq!(
        run(&cli, &["server", "list"], true).await,
        Value::Array(vec![])
    );
    controller.stop().await;
    agent.stop().await;
}
