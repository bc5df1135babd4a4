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
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod common;

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
        testkit::poll_for(Duration::from_secs(120), || {
            let log = std::fs::read_to_string(self.console(id)).unwrap_or_default();
            // (A serial console's lines end in CR LF.)
            if log.lines().any(|l| l.trim_end() == line) {
                Ok(())
            } else {
                Err(format!("no {line:?} on the guest's console:\n{log}"))
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

#[test]
fn the_openstack_cli_uploads_an_image_that_the_node_fetches_once_and_boots() {
    let Some(disk) = common::tiny_disk_or_skip() else {
        return;
    };
    let Some(up) = Up::start_or_skip("an uploaded image on real VMs") else {
        return;
    };

    let disk = disk.to_str().unwrap();
    let image = up.json(&[
        "image",
        "create",
        "--disk-format",
        "qcow2",
        "--container-format",
        "bare",
        "--private",
        "--file",
        disk,
        "tiny-disk",
    ]);
    let image_id = image["id"].as_str().unwrap().to_string();
    let shown = up.json(&["image", "show", &image_id]);
    assert_eq!(shown["status"], "active", "{shown}");
    // (The CLI shows the hash among the properties.)
    let props = &shown["properties"];
    assert_eq!(props["os_hash_algo"], "sha512", "{shown}");
    let hash = props["os_hash_value"].as_str().unwrap().to_string();
    // The node's image cache holds nothing yet.
    let cache = up.dir.join("agent/images/sha512");
    assert!(!cache.join(&hash).exists(), "not fetched before a START");

    // The first START fetches the image (its time includes the fetch), the second finds it.
    let mut booted = Vec::new();
    for name in ["disk-a", "disk-b"] {
        let started = Instant::now();
        let server = up.json(&[
            "server", "create", "--flavor", "tiny", "--image", &image_id, "--wait", name,
        ]);
        let active = started.elapsed();
        assert_eq!(server["status"], "ACTIVE", "{server}");
        let id = server["id"].as_str().unwrap().to_string();
        // The guest on the disk has no meta-data of its own: it names itself from its kernel
        // command line (scripts/tiny-disk.sh).
        up.wait_console(&id, "CUMULO-GUEST-UP 00000000-0000-4000-8000-00000000d15c");
        // Its own disk, first boot: the guest counts in the disk's spare sector.
        up.wait_console(
            &id,
            "CUMULO-DISK-WROTE 00000000-0000-4000-8000-00000000d15c 1",
        );
        println!(
            "{name}: ACTIVE {} ms after server create, guest up after {} ms",
            active.as_millis(),
            started.elapsed().as_millis()
        );
        booted.push(id);
    }
    let data = std::fs::read(cache.join(&hash)).unwrap();
    assert_eq!(
        data,
        std::fs::read(disk).unwrap(),
        "the node keeps the data it was sent"
    );
    let log = std::fs::read_to_string(up.dir.join("logs/agent.log")).unwrap();
    let fetches: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("image data fetched"))
        .collect();
    assert_eq!(
        fetches.len(),
        1,
        "one fetch for two STARTs; the agent's log:\n{log}"
    );
    println!("{}", fetches[0]);
    // The node's time from START to a running VM: the first with the fetch, the second without.
    for id in &booted {
        let launched = log
            .lines()
            .find(|l| l.contains("launched") && l.contains(id.as_str()));
        println!("{}", launched.unwrap_or("(no launch line)"));
    }

    // A snapshot of the running disk-a (paused for the copy): what its guest counted on its
    // disk (boot 1) is in the image, and a server booted from it counts boot 2.
    let snap = up.json(&[
        "server", "image", "create", "--name", "snap", "--wait", &booted[0],
    ]);
    let snap_id = snap["id"].as_str().unwrap().to_string();
    let shown = up.json(&["image", "show", &snap_id]);
    assert_eq!(shown["status"], "active", "{shown}");
    assert_eq!(shown["disk_format"], "qcow2", "{shown}");
    let props = shown["properties"].to_string();
    assert!(
        props.contains("snapshot") && props.contains(&booted[0]),
        "{shown}"
    );
    up.wait_status(&booted[0], "ACTIVE");
    let server = up.json(&[
        "server",
        "create",
        "--flavor",
        "tiny",
        "--image",
        &snap_id,
        "--wait",
        "from-snap",
    ]);
    let from_snap = server["id"].as_str().unwrap().to_string();
    up.wait_console(
        &from_snap,
        "CUMULO-DISK-WROTE 00000000-0000-4000-8000-00000000d15c 2",
    );
    booted.push(from_snap);

    // In use, the image stays in the cache; the servers go, then the images.
    for id in &booted {
        up.ok(&["server", "delete", "--wait", id]);
    }
    // A server's record goes once its node has removed it (after the API stops showing it):
    // until then its image is in use.
    for image in [&image_id, &snap_id] {
        testkit::poll_for(Duration::from_secs(60), || {
            let out = up.openstack(&["image", "delete", image]);
            match out.status.success() {
                true => Ok(()),
                false => Err(format!("image delete {image}: {}", text(&out))),
            }
        });
    }
    for image in [&image_id, &snap_id] {
        let out = up.openstack(&["image", "show", image]);
        assert!(!out.status.success(), "deleted: {}", text(&out));
    }
}

/// The volume's status and the device of its attachment (if any), as `volume show` gives them.
fn volume_state(up: &Up, volume: &str) -> (String, Option<String>) {
    let shown = up.json(&["volume", "show", volume]);
    let status = shown["status"].as_str().unwrap_or_default().to_string();
    let device = shown["attachments"]
        .as_array()
        .and_then(|a| a.first())
        .and_then(|a| a["device"].as_str())
        .map(str::to_string);
    (status, device)
}

/// Waits until the volume is `want`; how long that took.
fn wait_volume(up: &Up, volume: &str, want: &str) -> Duration {
    let t0 = Instant::now();
    testkit::poll_for(Duration::from_secs(120), || {
        match volume_state(up, volume) {
            (now, _) if now == want => Ok(()),
            (now, _) => Err(format!("volume {volume} still {now}, not {want}")),
        }
    });
    t0.elapsed()
}

/// The first 20 hex digits of a volume's UUID: the serial its disk carries in the guest.
fn serial(volume: &str) -> String {
    volume.replace('-', "").chars().take(20).collect()
}

#[test]
fn the_openstack_cli_attaches_a_volume_that_guests_see_and_that_keeps_its_data() {
    let Some(up) = Up::start_or_skip("volumes on real VMs") else {
        return;
    };
    let first = up.json(&["server", "show", "first"]);
    let a = first["id"].as_str().unwrap().to_string();
    up.wait_disk_count(&a, 1);
    let second = up.json(&[
        "server", "create", "--flavor", "tiny", "--image", "tiny", "--wait", "second",
    ]);
    let b = second["id"].as_str().unwrap().to_string();
    up.wait_disk_count(&b, 1);

    let made = up.json(&["volume", "create", "--size", "1", "data"]);
    let volume = made["id"].as_str().unwrap().to_string();
    wait_volume(&up, &volume, "available");
    let serial = serial(&volume);

    // Attach to the running first server: hot-plugged, seen blank, marked.
    let t0 = Instant::now();
    up.ok(&["server", "add", "volume", &a, &volume]);
    let api = t0.elapsed();
    wait_volume(&up, &volume, "in-use");
    let in_use = t0.elapsed();
    assert_eq!(volume_state(&up, &volume).1.as_deref(), Some("/dev/vdb"));
    up.wait_console(&a, &format!("CUMULO-VOLUME-SEEN {a} vdb {serial} blank"));
    let seen = t0.elapsed();
    up.wait_console(&a, &format!("CUMULO-VOLUME-WROTE {a} {serial}"));
    let listed = up.json(&["server", "volume", "list", &a]);
    assert!(listed.to_string().contains(&volume), "{listed}");
    let file = up.dir.join("agent/volumes").join(format!("{volume}.qcow2"));
    assert!(file.is_file(), "made on the node at the first attach");

    // Detach: the guest lets it go.
    let t0 = Instant::now();
    up.ok(&["server", "remove", "volume", &a, &volume]);
    wait_volume(&up, &volume, "available");
    let detached = t0.elapsed();
    up.wait_console(&a, &format!("CUMULO-VOLUME-GONE {a} {serial}"));

    // Attach to the second server: its guest finds the first one's mark.
    up.ok(&["server", "add", "volume", &b, &volume]);
    wait_volume(&up, &volume, "in-use");
    up.wait_console(
        &b,
        &format!("CUMULO-VOLUME-SEEN {b} vdb {serial} CUMULO-VOLUME-MARK {a}"),
    );
    // Not while attached.
    let out = up.openstack(&["volume", "delete", &volume]);
    assert!(
        !out.status.success(),
        "deleted while attached: {}",
        text(&out)
    );
    println!(
        "FIGURES: volume attach: API {} ms, in-use {} ms, seen by the guest {} ms; detach: \
         available {} ms",
        api.as_millis(),
        in_use.as_millis(),
        seen.as_millis(),
        detached.as_millis()
    );

    // The server goes: the volume is free again; deleted, its file leaves the node.
    up.ok(&["server", "delete", "--wait", &b]);
    wait_volume(&up, &volume, "available");
    up.ok(&["volume", "delete", &volume]);
    testkit::poll_for(Duration::from_secs(60), || {
        let out = up.openstack(&["volume", "show", &volume]);
        match out.status.success() {
            false => Ok(()),
            true => Err(format!("volume {volume} still shown")),
        }
    });
    assert!(!file.exists(), "the volume's file left the node");
}
