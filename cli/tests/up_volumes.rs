//! The real `openstack` CLI on Block Storage: `cumulo up --backend sim` in a temporary directory
//! on free ports, then `openstack volume create --size 1`, `volume list`, `volume show`, `volume
//! set --size 2` (extend), `volume set --name`, `volume delete` with the login `up` exports;
//! `cumulo down --purge` at the end. Volumes are records only for now: nothing reaches the
//! agent.
//!
//! Needs the cluster's binaries (`cargo build --bins`) and the `openstack` CLI
//! (`CUMULO_OPENSTACK`, made by `scripts/openstack-venv.sh`); without them the test is skipped
//! with a message, unless `CUMULO_REQUIRE_BINS=1` or `CUMULO_REQUIRE_OPENSTACK=1` (CI) make that
//! a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::process::Output;

mod common;

use common::SimCluster;

fn text(out: &Output) -> String {
    common::output_text(out)
}

#[test]
fn the_openstack_cli_creates_lists_shows_extends_renames_and_deletes_a_volume() {
    let Some(cluster) = SimCluster::up_or_skip() else {
        return;
    };

    let made = cluster.json(&["volume", "create", "--size", "1", "v1"]);
    assert_eq!(made["name"], "v1", "{made}");
    assert_eq!(made["size"], 1, "{made}");
    assert_eq!(made["status"], "available", "{made}");
    let id = made["id"].as_str().unwrap().to_string();

    let list = cluster.json(&["volume", "list"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["ID"], id.as_str(), "{list}");
    assert_eq!(rows[0]["Name"], "v1", "{list}");
    assert_eq!(rows[0]["Size"], 1, "{list}");

    let shown = cluster.json(&["volume", "show", "v1"]);
    assert_eq!(shown["id"], id.as_str(), "{shown}");
    // Cinder's "false"; openstacksdk shows it as a boolean.
    assert!(
        shown["bootable"] == "false" || shown["bootable"] == false,
        "{shown}"
    );

    cluster.ok(&["volume", "set", "--size", "2", "v1"]);
    assert_eq!(cluster.json(&["volume", "show", &id])["size"], 2);

    cluster.ok(&[
        "volume",
        "set",
        "--name",
        "v1b",
        "--description",
        "grown",
        &id,
    ]);
    let shown = cluster.json(&["volume", "show", "v1b"]);
    assert_eq!(shown["name"], "v1b", "{shown}");
    assert_eq!(shown["description"], "grown", "{shown}");

    // Shrinking is refused with Cinder's reason.
    let out = cluster.openstack(&["volume", "set", "--size", "1", "v1b"]);
    assert!(!out.status.success(), "{}", text(&out));

    cluster.ok(&["volume", "delete", "v1b"]);
    let list = cluster.json(&["volume", "list"]);
    assert_eq!(list, serde_json::json!([]), "{list}");
    let out = cluster.openstack(&["volume", "show", &id]);
    assert!(!out.status.success(), "{}", text(&out));
}
