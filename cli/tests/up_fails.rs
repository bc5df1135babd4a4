//! `cumulo up` with real VMs when something is wrong: the cause reaches the user at once, not
//! after a timeout.
//!
//! - A cluster directory that QEMU (libvirt's own user under `qemu:///system`) cannot reach is
//!   refused before any service starts, naming the directory that keeps QEMU out.
//! - A broken guest image: `up` stops waiting as soon as the first instance is in error, prints
//!   its fault (the reason and the agent's words) and the log to read, and exits non-zero.
//!
//! Both need root and a system libvirtd (`CUMULO_LIBVIRT_URI=qemu:///system`, as
//! `scripts/test.sh` sets up); skipped otherwise, failed under `CUMULO_LIBVIRT_REQUIRED=1`.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

mod common;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

fn up(dir: &Path, env: &[(&str, &str)]) -> Output {
    let sched = format!("127.0.0.1:{}", testkit::procfs::free_port());
    let api = format!("127.0.0.1:{}", testkit::procfs::free_port());
    Command::new(CUMULO)
        .args([
            "up",
            "--backend",
            "libvirt",
            "--tenant-network",
            "none",
            "--dir",
        ])
        .arg(dir)
        .args(["--scheduler-listen", &sched, "--api-listen", &api])
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn down(dir: &Path) {
    let out = Command::new(CUMULO)
        .args(["down", "--purge", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_directory_qemu_cannot_reach_is_refused_before_anything_starts() {
    let Some(_uri) = common::system_libvirt_or_skip("QEMU's reach") else {
        return;
    };
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    // As /root is on Debian: closed to everyone else.
    let closed = tempfile::tempdir().unwrap();
    set_mode(closed.path(), 0o700);
    let dir = closed.path().join("cluster");
    let out = up(&dir, &[]);
    let shown = text(&out);
    down(&dir);
    assert!(!out.status.success(), "{shown}");
    let mode = format!("{} (mode 0700", closed.path().display());
    assert!(
        shown.contains("cannot reach") && shown.contains(&mode),
        "the cause names the closed directory: {shown}"
    );
    assert!(
        !shown.contains("start scheduler"),
        "nothing started: {shown}"
    );
}

#[test]
fn a_broken_image_fails_up_at_once_with_its_cause() {
    let Some(_uri) = common::system_libvirt_or_skip("broken image") else {
        return;
    };
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    set_mode(work.path(), 0o755);
    // A tiny guest cache whose kernel is not a kernel: the agent refuses to boot it.
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/tiny-guest.sh"),
    )
    .unwrap();
    let version = script
        .lines()
        .find_map(|l| l.strip_prefix("VERSION="))
        .unwrap()
        .trim()
        .to_string();
    let cache = work.path().join("guest-cache");
    let guest = cache.join(format!("v{version}"));
    std::fs::create_dir_all(&guest).unwrap();
    std::fs::write(guest.join("kernel"), vec![0x5a; 8192]).unwrap();
    std::fs::write(guest.join("initrd"), vec![0xa5; 8192]).unwrap();
    let dir = work.path().join("cluster");
    let out = up(
        &dir,
        &[("CUMULO_TINY_GUEST_CACHE", cache.to_str().unwrap())],
    );
    let ended = SystemTime::now();
    let shown = text(&out);
    // The instance's fault, as the API has it, before the cluster goes.
    let fault = fault_of_first(&dir);
    down(&dir);
    assert!(!out.status.success(), "{shown}");
    assert!(
        shown.contains("the first instance")
            && shown.contains("failed: image_failure: image \"tiny\" is corrupt: kernel is not"),
        "the fault with the agent's words: {shown}"
    );
    assert!(shown.contains("agent.log"), "the log to read: {shown}");
    let created = fault["created"].as_str().unwrap();
    let created = parse_rfc3339(created);
    let after = ended.duration_since(created).unwrap_or_default();
    assert!(
        after < Duration::from_secs(6),
        "up ended {after:?} after the instance's error ({fault})"
    );
}

/// The first instance's fault, read through the API with the demo login `up` made.
fn fault_of_first(dir: &Path) -> serde_json::Value {
    let addresses = std::fs::read_to_string(dir.join("addresses")).unwrap();
    let api = addresses.lines().nth(1).unwrap().trim().to_string();
    let password = std::fs::read_to_string(dir.join("demo-password")).unwrap();
    let out = Command::new(CUMULO)
        .args(["--json", "instance", "show", "first"])
        .env("CUMULO_CONTROLLER", format!("http://{api}"))
        .env("CUMULO_USERNAME", "demo")
        .env("CUMULO_PASSWORD", password.trim())
        .env("CUMULO_PROJECT", "demo")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["state"], "error", "{shown}");
    shown["fault"].clone()
}

/// `2026-12-01T15:23:31Z` (or with fractional seconds) as a time.
fn parse_rfc3339(text: &str) -> SystemTime {
    let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    let secs = u64::try_from(t.unix_timestamp()).unwrap();
    SystemTime::UNIX_EPOCH
        + Duration::from_secs(secs)
        + Duration::from_nanos(u64::from(t.nanosecond()))
}
