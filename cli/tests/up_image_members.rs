//! The real `openstack` CLI sharing an image between two projects (Glance's image members):
//! `cumulo up --backend sim` in a temporary directory on free ports, a second project with a
//! user of its own; the demo project uploads an image and `image set --shared` it; `image add
//! project` shares it with the second one; `image member list` shows it pending; the second
//! project does not list it until `image set --accept`, then lists it and boots a server of it;
//! once `image remove project` it sees it no more. `cumulo down --purge` at the end.
//!
//! The owner runs `image add project` and `image remove project` with the other project's id:
//! the CLI first looks the project up in the Identity API, which answers a non-member Keystone's
//! 403, and the CLI then uses the id as given.
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
use serde_json::Value;

/// The second project, its user's name and password.
const GUEST: &str = "guest";
const GUEST_PASSWORD: &str = "guest-pass-word";

fn text(out: &Output) -> String {
    common::output_text(out)
}

/// The ids of the images `openstack image list` shows with `env`.
fn image_ids(bin: &std::path::Path, env: &[(String, String)]) -> Vec<String> {
    let list = common::openstack_json(bin, env, &["image", "list"]);
    list.as_array()
        .unwrap()
        .iter()
        .map(|i| i["ID"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_openstack_cli_shares_an_image_with_another_project() {
    let Some(cluster) = SimCluster::up_or_skip() else {
        return;
    };
    let bin = cluster.openstack.clone();
    let owner = cluster.env.clone();
    let guest = cluster.env_of(GUEST, GUEST, GUEST_PASSWORD);
    let guest_id = cluster.project_with_member(GUEST, GUEST_PASSWORD);

    // The demo project's image, shared.
    let file = cluster.dir.path().join("data.raw");
    std::fs::write(&file, b"an image to share\n".repeat(1000)).unwrap();
    let made = common::openstack_json(
        &bin,
        &owner,
        &[
            "image",
            "create",
            "--disk-format",
            "raw",
            "--container-format",
            "bare",
            "--file",
            file.to_str().unwrap(),
            "shared-img",
        ],
    );
    let id = made["id"].as_str().unwrap().to_string();
    common::openstack_ok(&bin, &owner, &["image", "set", "--shared", "shared-img"]);
    let shown = common::openstack_json(&bin, &owner, &["image", "show", "shared-img"]);
    assert_eq!(shown["visibility"], "shared", "{shown}");
    assert_eq!(shown["status"], "active", "{shown}");

    // Not shared with the guest yet: it does not see it.
    let out = common::openstack(&bin, &guest, &["image", "show", &id]);
    assert!(!out.status.success(), "{}", text(&out));

    // Shared with the guest by its owner (the project by its id): pending.
    let member = common::openstack_json(&bin, &owner, &["image", "add", "project", &id, &guest_id]);
    assert_eq!(member["member_id"], guest_id.as_str(), "{member}");
    assert_eq!(member["status"], "pending", "{member}");
    let members = common::openstack_json(&bin, &owner, &["image", "member", "list", "shared-img"]);
    let rows = members.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{members}");
    assert_eq!(rows[0]["Member ID"], guest_id.as_str(), "{members}");
    assert_eq!(rows[0]["Status"], "pending", "{members}");

    // Pending: the guest sees it by id, but does not list it until it accepts it.
    let shown = common::openstack_json(&bin, &guest, &["image", "show", &id]);
    assert_eq!(shown["id"], id.as_str(), "{shown}");
    assert!(!image_ids(&bin, &guest).contains(&id));
    // The owner may not answer (Glance's 403).
    let out = common::openstack(&bin, &owner, &["image", "set", "--accept", "shared-img"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("403"), "{}", text(&out));
    common::openstack_ok(&bin, &guest, &["image", "set", "--accept", &id]);
    assert!(image_ids(&bin, &guest).contains(&id));
    let members = common::openstack_json(&bin, &owner, &["image", "member", "list", "shared-img"]);
    assert_eq!(members[0]["Status"], "accepted", "{members}");

    // The guest boots a server of it (by name now that it lists it).
    let server = common::openstack_json(
        &bin,
        &guest,
        &[
            "server",
            "create",
            "--flavor",
            "tiny",
            "--image",
            "shared-img",
            "--wait",
            "borrowed",
        ],
    );
    assert_eq!(server["status"], "ACTIVE", "{server}");
    common::openstack_ok(&bin, &guest, &["server", "delete", "--wait", "borrowed"]);

    // No longer shared with the guest: it sees it no more.
    common::openstack_ok(
        &bin,
        &owner,
        &["image", "remove", "project", &id, &guest_id],
    );
    let members = common::openstack_json(&bin, &owner, &["image", "member", "list", "shared-img"]);
    assert_eq!(members, Value::Array(Vec::new()), "{members}");
    let out = common::openstack(&bin, &guest, &["image", "show", &id]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(!image_ids(&bin, &guest).contains(&id));
}
