//! `cumulo up --backend libvirt` (real VMs, TCG) driven by the real `openstack` CLI with the
//! login `up` prints: the first instance's tiny guest counts its boots on its data disk, and the
//! count goes on through `server stop` and `server start`, `server reboot --hard`, `server
//! reboot` (the guest's ACPI power button), `server pause`/`unpause` and `server
//! suspend`/`resume`: what the guest wrote is never lost; `console log show` fetches the whole
//! story from the node through the API. `server delete` removes its files.
//!
//! Then an image the user uploads (`image create --file`, the tiny guest as a bootable qcow2 disk
//! from `scripts/tiny-disk.sh`, `CUMULO_TINY_DISK`): the node has never seen it, fetches it from
//! the controller once, checks it, and boots two servers from it. A snapshot of one of them
//! (`server image create`) boots a third with the first one's disk.
//!
//! Two nodes: the uploaded image boots on `up`'s node, then on a second agent the test starts on
//! the same host with its own certificate, host name and state directory (once the first has
//! stopped: the controller reaches every node's endpoint on one port), which has never had it
//! and fetches it itself; a snapshot of that server is copied from the second node and boots
//! there, the node fetching the snapshot in turn.
//!
//! And a volume (`volume create`): attached to the running first server (`server add volume`),
//! hot-plugged, its guest sees the new disk and writes its mark on it; detached (`server remove
//! volume`), the guest sees it go; attached to a second server, that guest finds the first one's
//! mark. Deleted, its file leaves the node.
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
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod common;

use cumulo::client::{ClientError, Connection, Credentials};
use serde_json::Value;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

fn text(out: &Output) -> String {
    common::output_text(out)
}

/// One cluster at a time: `up` takes the default addresses.
fn one_cluster() -> MutexGuard<'static, ()> {
    static CLUSTER: Mutex<()> = Mutex::new(());
    CLUSTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The cluster `up` made in a directory of its own; brought down (and purged) when dropped.
struct Up {
    dir: PathBuf,
    /// `up`'s exports for the `openstack` CLI.
    env: Vec<(String, String)>,
    openstack: PathBuf,
    /// Holds `dir`; removed after `down`.
    _work: tempfile::TempDir,
    /// Released last.
    _one: MutexGuard<'static, ()>,
}

impl Up {
    /// A cluster on real VMs for `test`, in a directory of its own, once no other test's runs;
    /// `None` (the test skips) without root's libvirtd, the cluster's binaries or the
    /// `openstack` CLI.
    fn start_or_skip(test: &str) -> Option<Up> {
        common::system_libvirt_or_skip(test)?;
        if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
            return None;
        }
        let openstack = common::openstack_or_skip()?;
        let one = one_cluster();
        let work = tempfile::tempdir().unwrap();
        std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(Up::start(work, one, openstack))
    }

    fn start(work: tempfile::TempDir, one: MutexGuard<'static, ()>, openstack: PathBuf) -> Up {
        let dir = work.path().join("cluster");
        let out = Command::new(CUMULO)
            .args([
                "up",
                "--backend",
                "libvirt",
                "--tenant-network",
                "none",
                "--dir",
            ])
            .arg(&dir)
            .output()
            .unwrap();
        let mut up = Up {
            dir,
            env: Vec::new(),
            openstack,
            _work: work,
            _one: one,
        };
        assert!(out.status.success(), "cumulo up: {}", text(&out));
        up.env = common::up_exports(&up.dir);
        up
    }

    fn openstack(&self, args: &[&str]) -> Output {
        common::openstack(&self.openstack, &self.env, args)
    }

    fn ok(&self, args: &[&str]) {
        common::openstack_ok(&self.openstack, &self.env, args);
    }

    /// Uploads `file` as a private image `name` of `format` (its container format Glance's for
    /// it: `aki`/`ari`, else `bare`), with `extra` flags; once active, its id and SHA-512.
    fn upload(&self, file: &str, format: &str, name: &str, extra: &[&str]) -> (String, String) {
        let container = if matches!(format, "aki" | "ari") {
            format
        } else {
            "bare"
        };
        let mut args = vec![
            "image",
            "create",
            "--disk-format",
            format,
            "--container-format",
            container,
            "--private",
            "--file",
            file,
        ];
        args.extend_from_slice(extra);
        args.push(name);
        let id = self.json(&args)["id"].as_str().unwrap().to_string();
        let shown = self.json(&["image", "show", &id]);
        assert_eq!(shown["status"], "active", "{shown}");
        // (The CLI shows the hash among the properties.)
        let props = &shown["properties"];
        assert_eq!(props["os_hash_algo"], "sha512", "{shown}");
        let hash = props["os_hash_value"].as_str().unwrap().to_string();
        (id, hash)
    }

    /// Deletes `images` once no server uses them (a deleted server's record goes once its node
    /// has removed it, after the API stops showing it: until then its image is in use), then
    /// checks they are gone.
    fn delete_images(&self, images: &[&str]) {
        for image in images {
            testkit::poll_for(Duration::from_secs(60), || {
                let out = self.openstack(&["image", "delete", image]);
                match out.status.success() {
                    true => Ok(()),
                    false => Err(format!("image delete {image}: {}", text(&out))),
                }
            });
        }
        for image in images {
            let out = self.openstack(&["image", "show", image]);
            assert!(!out.status.success(), "deleted: {}", text(&out));
        }
    }

    fn json(&self, args: &[&str]) -> Value {
        common::openstack_json(&self.openstack, &self.env, args)
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
        self.wait_console(id, &format!("CUMULO-DISK-WROTE {id} {n}"));
    }

    /// Waits until the guest's console has the line `line`.
    fn wait_console(&self, id: &str, line: &str) {
        wait_console_line(&self.console(id), line);
    }

    /// The exports with the admin's login instead of the demo user's.
    fn admin_env(&self) -> Vec<(String, String)> {
        let password = std::fs::read_to_string(self.dir.join("admin-password")).unwrap();
        self.env
            .iter()
            .map(|(k, v)| match k.as_str() {
                "OS_USERNAME" | "OS_PROJECT_NAME" => (k.clone(), "admin".to_string()),
                "OS_PASSWORD" => (k.clone(), password.trim().to_string()),
                _ => (k.clone(), v.clone()),
            })
            .collect()
    }

    /// As [`Up::json`], logged in as the admin.
    fn admin_json(&self, args: &[&str]) -> Value {
        common::openstack_json(&self.openstack, &self.admin_env(), args)
    }

    /// The demo user's connection to the native API (`up`'s `CUMULO_*` exports).
    fn native(&self) -> Connection {
        let export = |name: &str| {
            self.env
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        Connection::login(&Credentials {
            url: export("CUMULO_CONTROLLER"),
            username: export("CUMULO_USERNAME"),
            password: export("CUMULO_PASSWORD"),
            project: export("CUMULO_PROJECT"),
            ca_cert: None,
        })
        .unwrap()
    }

    /// Waits until the controller has dropped the record of deleted server `id` (its node
    /// confirmed the delete): the native API no longer knows it.
    fn wait_record_gone(&self, id: &str) {
        let native = self.native();
        testkit::poll_for(Duration::from_secs(60), || {
            match native.get(&cumulo::routes::instance(id)) {
                Err(ClientError::Api { status: 404, .. }) => Ok(()),
                other => Err(format!("server {id}'s record is still there: {other:?}")),
            }
        });
    }

    /// The PID of `up`'s agent (its PID file: "PID PROGRAM").
    fn agent_pid(&self) -> i32 {
        std::fs::read_to_string(self.dir.join("run/agent.pid"))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Prints the last `n` lines of each service's log (for a test that failed).
    fn print_log_tails(&self, n: usize) {
        let Ok(logs) = std::fs::read_dir(self.dir.join("logs")) else {
            return;
        };
        for log in logs.flatten() {
            print_tail(&log.path(), n);
        }
    }
}

/// Prints the last `n` lines of `log`.
fn print_tail(log: &Path, n: usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    eprintln!(
        "--- the last {} lines of {}",
        lines.len() - from,
        log.display()
    );
    for line in &lines[from..] {
        eprintln!("{line}");
    }
}

/// Waits until the serial console log `console` has a line that starts with `line`: the kernel's
/// own messages share the console, and one may follow the guest's text on its line before the
/// guest's newline (seen: "CUMULO-DISK-WROTE <id> 6[    2.089439] tsc: ...").
fn wait_console_line(console: &Path, line: &str) {
    testkit::poll_for(Duration::from_secs(120), || {
        let log = std::fs::read_to_string(console).unwrap_or_default();
        // (A serial console's lines end in CR LF.)
        // After the text: nothing, or a kernel message ("[ time] ...").
        let ends = |rest: &str| rest.is_empty() || rest.starts_with('[');
        if log.lines().any(|l| {
            l.strip_prefix(line)
                .is_some_and(|rest| ends(rest.trim_end()))
        }) {
            Ok(())
        } else {
            Err(format!("no {line:?} on the guest's console:\n{log}"))
        }
    });
}

impl Drop for Up {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_log_tails(40);
        }
        let _ = Command::new(CUMULO)
            .args(["down", "--purge", "--dir"])
            .arg(&self.dir)
            .output();
    }
}

#[test]
fn the_openstack_cli_stops_starts_reboots_pauses_and_suspends_a_vm_that_keeps_its_disk() {
    let Some(up) = Up::start_or_skip("openstack CLI on real VMs") else {
        return;
    };

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

#[path = "up_openstack/images.rs"]
mod images;
#[path = "up_openstack/nodes.rs"]
mod nodes;
#[path = "up_openstack/volumes.rs"]
mod volumes;
