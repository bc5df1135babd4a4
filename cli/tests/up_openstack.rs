//! `cumulo up --backend libvirt` (real VMs, TCG) driven by the real `openstack` CLI with the
//! login `up` prints: the first instance's tiny guest counts its boots on its data disk, and the
//! count goes on through `server stop` and `server start`, `server reboot --hard`, `server
//! reboot` (the guest's ACPI power button), `server pause`/`unpause` and `server
//! suspend`/`resume`: what the guest wrote is never lost; `console log show` fetches the whole
//! story from the node through the API. `server delete` removes its files.
//!
//! Needs root, a system libvirtd (`CUMULO_LIBVIRT_URI=qemu:///system`, `scripts/libvirt.sh`),
//! the cluster's binaries (`cargo build --bins`) and the `openstack` CLI (`CUMULO_OPENSTACK`,
//! made by `scripts/openstack-venv.sh`); without them the test is skipped with a message, unless
//! `CUMULO_LIBVIRT_REQUIRED=1`, `CUMULO_REQUIRE_BINS=1` or `CUMULO_REQUIRE_OPENSTACK=1` (CI sets
//! them) make that a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

mod common;

use serde_json::Value;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The cluster `up` made in a directory of its own; brought down (and purged) when dropped.
struct Up {
    dir: PathBuf,
    /// `up`'s exports for the `openstack` CLI.
    env: Vec<(String, String)>,
    openstack: PathBuf,
}

impl Up {
    fn start(dir: &Path, openstack: PathBuf) -> Up {
        let out = Command::new(CUMULO)
            .args([
                "up",
                "--backend",
                "libvirt",
                "--tenant-network",
                "none",
                "--dir",
            ])
            .arg(dir)
            .output()
            .unwrap();
        let mut up = Up {
            dir: dir.to_path_buf(),
            env: Vec::new(),
            openstack,
        };
        assert!(out.status.success(), "cumulo up: {}", text(&out));
        let exports = std::fs::read_to_string(dir.join("env")).unwrap();
        up.env = exports
            .lines()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        up
    }

    fn openstack(&self, args: &[&str]) -> Output {
        Command::new(&self.openstack)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) {
        let out = self.openstack(args);
        assert!(out.status.success(), "openstack {args:?}: {}", text(&out));
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-f", "json"]);
        let out = self.openstack(&all);
        assert!(out.status.success(), "openstack {args:?}: {}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn status(&self, id: &str) -> String {
        self.json(&["server", "show", id])["status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn wait_status(&self, id: &str, want: &str) {
        testkit::poll_for(Duration::from_secs(120), || match self.status(id) {
            now if now == want => Ok(()),
            now => Err(format!("server {id} still {now}, not {want}")),
        });
    }

    /// The instance's serial console log on this host (the agent's instance directory).
    fn console(&self, id: &str) -> PathBuf {
        self.instance_dir(id).join("console.log")
    }

    fn instance_dir(&self, id: &str) -> PathBuf {
        self.dir.join("agent/libvirt/instances").join(id)
    }

    /// Waits until the guest has counted boot `n` on its data disk.
    fn wait_disk_count(&self, id: &str, n: u32) {
        let line = format!("CUMULO-DISK-WROTE {id} {n}");
        testkit::poll_for(Duration::from_secs(120), || {
            let log = std::fs::read_to_string(self.console(id)).unwrap_or_default();
            // (A serial console's lines end in CR LF.)
            if log.lines().any(|l| l.trim_end() == line) {
                Ok(())
            } else {
                Err(format!(
                    "the guest did not count boot {n} on its disk; its console:\n{log}"
                ))
            }
        });
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new(CUMULO)
            .args(["down", "--purge", "--dir"])
            .arg(&self.dir)
            .output();
    }
}

#[test]
fn the_openstack_cli_stops_starts_reboots_pauses_and_suspends_a_vm_that_keeps_its_disk() {
    let Some(_uri) = common::system_libvirt_or_skip("openstack CLI on real VMs") else {
        return;
    };
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let Some(openstack) = common::openstack_or_skip() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let up = Up::start(&work.path().join("cluster"), openstack);

    // The first instance `up` booted, as the demo user sees it.
    let shown = up.json(&["server", "show", "first"]);
    assert_eq!(shown["status"], "ACTIVE", "{shown}");
    let id = shown["id"].as_str().unwrap().to_string();
    up.wait_disk_count(&id, 1);

    up.ok(&["server", "stop", &id]);
    up.wait_status(&id, "SHUTOFF");
    assert!(up.instance_dir(&id).join("disk.qcow2").is_file(), "kept");
    up.ok(&["server", "start", &id]);
    up.wait_status(&id, "ACTIVE");
    up.wait_disk_count(&id, 2);

    up.ok(&["server", "reboot", "--hard", &id]);
    up.wait_disk_count(&id, 3);
    up.wait_status(&id, "ACTIVE");
    up.ok(&["server", "reboot", &id]);
    up.wait_disk_count(&id, 4);
    up.wait_status(&id, "ACTIVE");

    up.ok(&["server", "pause", &id]);
    up.wait_status(&id, "PAUSED");
    up.ok(&["server", "unpause", &id]);
    up.wait_status(&id, "ACTIVE");
    up.ok(&["server", "reboot", "--hard", &id]);
    up.wait_disk_count(&id, 5);

    up.ok(&["server", "suspend", &id]);
    up.wait_status(&id, "SUSPENDED");
    up.ok(&["server", "resume", &id]);
    up.wait_status(&id, "ACTIVE");
    up.ok(&["server", "reboot", "--hard", &id]);
    up.wait_disk_count(&id, 6);
    // The same console through the API, fetched from the node (as from any host), appended to
    // across the power cycles.
    let out = up.openstack(&["console", "log", "show", &id]);
    assert!(out.status.success(), "console log show: {}", text(&out));
    let log = String::from_utf8_lossy(&out.stdout);
    for n in 1..=6 {
        let line = format!("CUMULO-DISK-WROTE {id} {n}");
        assert!(
            log.lines().any(|l| l.trim_end() == line),
            "{line} in:\n{log}"
        );
    }

    up.ok(&["server", "delete", "--wait", &id]);
    // The API forgets the server first; the node removes its files when the DELETE reaches it.
    testkit::poll_for(Duration::from_secs(60), || {
        match up.instance_dir(&id).exists() {
            false => Ok(()),
            true => Err("a delete removes the files".to_string()),
        }
    });
}
