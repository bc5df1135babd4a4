//! What container tests need: whether this machine can run containers (root, runc, a static
//! busybox), and a busybox root file system tarball to run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why containers cannot run here, if they cannot: not root, no runc, no static busybox
/// (`scripts/deps.sh` installs runc and busybox-static).
pub fn missing() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root".into());
    }
    if !Command::new("runc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some("runc is not installed (scripts/deps.sh installs it)".into());
    }
    // A static binary has no dynamic section: ldd says so (and fails).
    let ldd = Command::new("sh")
        .args(["-c", "ldd \"$(command -v busybox)\" 2>&1"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if !ldd.contains("not a dynamic executable") && !ldd.contains("statically linked") {
        return Some("no static busybox (scripts/deps.sh installs busybox-static)".into());
    }
    None
}

/// Whether `test` can run containers here; says why not on stderr, or panics under
/// `CUMULO_REQUIRE_NETNS=1` (CI), which requires it.
pub fn can_run(test: &str) -> bool {
    let Some(why) = missing() else { return true };
    if std::env::var("CUMULO_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("{test}: CUMULO_REQUIRE_NETNS=1 but {why}");
    }
    eprintln!("skipping {test}: {why}");
    false
}

/// `<dir>/<name>.tar`: busybox and some of its applets as a root file system (made in
/// `<dir>/<name>-root`). Panics if it cannot be made.
pub fn busybox_tarball(dir: &Path, name: &str) -> PathBuf {
    let root = dir.join(format!("{name}-root"));
    std::fs::create_dir_all(root.join("bin")).expect("the root file system's bin");
    let busybox = Command::new("sh")
        .args(["-c", "command -v busybox"])
        .output()
        .expect("sh");
    let busybox = String::from_utf8_lossy(&busybox.stdout).trim().to_string();
    std::fs::copy(&busybox, root.join("bin/busybox")).expect("busybox copied");
    for applet in [
        "sh", "echo", "cat", "sleep", "ip", "ls", "mkdir", "grep", "hostname", "ping",
    ] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).expect("applet");
    }
    let tarball = dir.join(format!("{name}.tar"));
    let out = Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&root)
        .arg(".")
        .output()
        .expect("tar");
    assert!(out.status.success(), "tar: {out:?}");
    tarball
}
