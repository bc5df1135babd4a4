//! Containers through the whole cluster with the real `openstack` CLI: `cumulo up --backend
//! sim` whose agent also runs containers (`--containers`, fetching uploaded images from the
//! controller's node image endpoint), a busybox root file system uploaded as an image
//! (`--disk-format raw --container-format docker`), a server of it whose user data is its
//! command, its output as the server's console log, a stop that keeps its writable layer, a
//! start, and a delete that leaves nothing on the node.
//!
//! Needs root, runc and a static busybox (skipped with a message otherwise, a failure under
//! `CUMULO_REQUIRE_NETNS=1`), the cluster's binaries and the `openstack` CLI (as the other
//! `up_*` tests).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

mod common;

use common::SimCluster;

const SCRIPT: &str = "#!/bin/sh
echo \"container $CUMULO_INSTANCE up\"
[ -f /kept ] && echo 'layer kept'
echo x > /kept
trap 'exit 0' TERM
while :; do sleep 1 & wait $!; done
";

fn status(cluster: &SimCluster, id: &str) -> String {
    cluster.json(&["server", "show", id])["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn wait_status(cluster: &SimCluster, id: &str, want: &str) {
    testkit::poll_for(Duration::from_secs(60), || match status(cluster, id) {
        now if now == want => Ok(()),
        now => Err(format!("server {id} still {now}, not {want}")),
    });
}

fn wait_console(cluster: &SimCluster, id: &str, text: &str) -> String {
    testkit::poll_for(Duration::from_secs(60), || {
        let out = cluster.openstack(&["console", "log", "show", id]);
        let said = common::output_text(&out);
        if out.status.success() && said.contains(text) {
            Ok(said)
        } else {
            Err(format!("the console of {id} does not say {text:?}: {said}"))
        }
    })
}

#[test]
fn a_server_of_a_container_image_runs_its_user_data_and_keeps_its_layer_across_a_stop() {
    if !testkit::containers::can_run("up_containers") {
        return;
    }
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let Some(openstack) = common::openstack_or_skip() else {
        return;
    };
    let cluster = SimCluster::up_with(openstack, |args| {
        // The agent fetches uploaded images from the controller's node image endpoint.
        let at = args.iter().position(|a| a == "--image-listen").unwrap();
        let port = args[at + 1].rsplit_once(':').unwrap().1.to_string();
        vec![
            ("CUMULO_AGENT_CONTAINERS".into(), "true".into()),
            (
                "CUMULO_AGENT_IMAGE_SERVER".into(),
                format!("localhost:{port}"),
            ),
        ]
    });
    let work = tempfile::tempdir().unwrap();
    let tarball = testkit::containers::busybox_tarball(work.path(), "busybox");
    let upload = common::container_image_create(&tarball, "busybox");
    let image = cluster.json(&upload.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(image["container_format"], "docker", "{image}");
    assert_eq!(image["disk_format"], "raw", "{image}");
    let script = work.path().join("init.sh");
    std::fs::write(&script, SCRIPT).unwrap();
    let server = cluster.json(&[
        "server",
        "create",
        "--flavor",
        "tiny",
        "--image",
        "busybox",
        "--user-data",
        script.to_str().unwrap(),
        "--wait",
        "box",
    ]);
    let id = server["id"].as_str().unwrap().to_string();
    assert_eq!(server["status"], "ACTIVE", "{server}");
    wait_console(&cluster, &id, &format!("container {id} up"));
    // On the node: a container, whose root file system has what its command wrote.
    let dir = std::path::Path::new(&cluster.root()).join("agent/containers");
    assert!(dir.join(&id).join("bundle/rootfs/kept").exists());
    cluster.ok(&["server", "stop", &id]);
    wait_status(&cluster, &id, "SHUTOFF");
    cluster.ok(&["server", "start", &id]);
    wait_status(&cluster, &id, "ACTIVE");
    wait_console(&cluster, &id, "layer kept");
    cluster.ok(&["server", "delete", "--wait", &id]);
    testkit::poll_for(Duration::from_secs(30), || {
        if dir.join(&id).exists() {
            Err(format!("{} is still there", dir.join(&id).display()))
        } else {
            Ok(())
        }
    });
}
