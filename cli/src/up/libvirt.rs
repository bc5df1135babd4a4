//! What the libvirt backend needs on this host: a libvirt daemon (as root, a private system
//! daemon started when none answers; otherwise a daemon of the user's own for
//! `qemu:///session`), QEMU able to reach the agent's files, and the tiny guest in the agent's
//! image store.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cluster::wait_for;
use super::error::{UpError, binary, io_err};
use super::layout::{Layout, SESSION_URI, SYSTEM_URI};
use super::procs::{self, Spec};

/// The image name the tiny guest gets in the agent's image store.
pub const TINY: &str = "tiny";

/// Whether `virsh` reaches a libvirt daemon at `uri` (without starting one: a session URI
/// would otherwise start a daemon of its own).
pub fn answers(uri: &str) -> bool {
    Command::new("virsh")
        .args(["-c", uri, "version"])
        .env("LIBVIRT_AUTOSTART", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn quiet(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .env("LIBVIRT_AUTOSTART", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The accounts the QEMU driver needs (Debian's packages make them under systemd).
fn accounts() {
    if !quiet("getent", &["group", "kvm"]) {
        quiet("groupadd", &["--system", "kvm"]);
    }
    if !quiet("getent", &["group", "libvirt-qemu"]) {
        quiet("groupadd", &["--system", "libvirt-qemu"]);
    }
    if !quiet("getent", &["passwd", "libvirt-qemu"]) {
        quiet(
            "useradd",
            &[
                "--system",
                "--gid",
                "libvirt-qemu",
                "--groups",
                "kvm",
                "--home-dir",
                "/var/lib/libvirt",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                "libvirt-qemu",
            ],
        );
    }
}

/// What udev does on a Debian host: `/dev/kvm` for group `kvm` (mode 0660). Without it the
/// private libvirtd probes QEMU as root (KVM found), then finds KVM unusable for QEMU's user,
/// judges its capability cache stale and probes QEMU again on every domain definition (about
/// 4 s a probe, a dozen probes per definition: the first instance took a minute). Domains still
/// run under TCG where the agent says so (`--accel auto` on a VM).
fn kvm_device() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dev = Path::new("/dev/kvm");
    let Ok(meta) = std::fs::metadata(dev) else {
        return;
    };
    if meta.gid() != 0 {
        return;
    }
    if quiet("chgrp", &["kvm", "/dev/kvm"]) {
        let _ = std::fs::set_permissions(dev, std::fs::Permissions::from_mode(0o660));
    }
}

fn program(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from(name)
}

/// Starts `spec` as one of the cluster's daemons (PID file in the cluster's directory, stopped
/// by `cumulo down`) and waits until `ready`; a daemon that exits meanwhile is an error at once.
fn start_daemon(
    layout: &Layout,
    spec: &Spec,
    within: Duration,
    ready: impl FnMut() -> bool,
) -> Result<(), UpError> {
    let started = procs::spawn(spec, &layout.log(&spec.name), &layout.pid_file(&spec.name))?;
    wait_for(
        &spec.name,
        &layout.log(&spec.name),
        within,
        Some(&started),
        ready,
    )?;
    Ok(())
}

fn daemon(name: &str) -> Spec {
    Spec {
        name: name.into(),
        program: program(name),
        args: vec![],
        env: vec![],
    }
}

/// Starts virtlogd and libvirtd as the cluster's own system daemons (root) and waits until
/// libvirtd answers at `qemu:///system`.
pub fn start_private(layout: &Layout) -> Result<(), UpError> {
    accounts();
    kvm_device();
    for dir in [
        "/run/libvirt",
        "/var/lib/libvirt/qemu",
        "/var/log/libvirt/qemu",
    ] {
        std::fs::create_dir_all(dir).map_err(io_err(Path::new(dir)))?;
    }
    if procs::running(&layout.pid_file("virtlogd")).is_none() {
        // A socket left by a virtlogd that was killed would look ready at once.
        let _ = std::fs::remove_file("/run/libvirt/virtlogd-sock");
        let _ = std::fs::remove_file("/run/libvirt/virtlogd-admin-sock");
        start_daemon(layout, &daemon("virtlogd"), Duration::from_secs(20), || {
            Path::new("/run/libvirt/virtlogd-sock").exists()
        })?;
    }
    start_daemon(layout, &daemon("libvirtd"), Duration::from_secs(90), || {
        answers(SYSTEM_URI)
    })
}

/// Where a user's libvirt daemons put their sockets: `$XDG_RUNTIME_DIR/libvirt`, else
/// `$XDG_CACHE_HOME/libvirt`, else `~/.cache/libvirt` (as libvirt itself decides).
fn session_runtime_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(run) = var("XDG_RUNTIME_DIR") {
        return PathBuf::from(run).join("libvirt");
    }
    if let Some(cache) = var("XDG_CACHE_HOME") {
        return PathBuf::from(cache).join("libvirt");
    }
    var("HOME")
        .map_or_else(|| PathBuf::from("."), PathBuf::from)
        .join(".cache/libvirt")
}

/// Starts virtlogd and libvirtd as this (non-root) user's own daemons, the cluster's (stopped
/// by `cumulo down`), and waits until libvirtd answers at `qemu:///session`: QEMU then runs as
/// this user and reaches the cluster's files in the user's own directories.
pub fn start_session(layout: &Layout) -> Result<(), UpError> {
    let run = session_runtime_dir();
    let socket = run.join("virtlogd-sock");
    if procs::running(&layout.pid_file("virtlogd")).is_none() {
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(run.join("virtlogd-admin-sock"));
        start_daemon(layout, &daemon("virtlogd"), Duration::from_secs(20), || {
            socket.exists()
        })?;
    }
    start_daemon(layout, &daemon("libvirtd"), Duration::from_secs(90), || {
        answers(SESSION_URI)
    })
}

/// Asks the agent whether QEMU will reach its files under `uri` (`cumulo-agent
/// check-libvirt`, which also gives the agent's directories to QEMU's group): the cause and
/// what to change when it will not. Returns the agent's one line ("QEMU runs as ...").
pub fn check_reach(layout: &Layout, uri: &str) -> Result<String, UpError> {
    let agent = binary("cumulo-agent")?;
    let state = layout.state("agent");
    let out = Command::new(&agent)
        .arg("check-libvirt")
        .arg("--state-dir")
        .arg(&state)
        .args(["--libvirt-uri", uri])
        .output()
        .map_err(io_err(&agent))?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    if out.status.success() {
        return Ok(text(&out.stdout));
    }
    let why = text(&out.stderr);
    Err(UpError::Other(
        why.strip_prefix("cumulo-agent: ")
            .unwrap_or(&why)
            .trim_start_matches("launch: ")
            .to_string(),
    ))
}

/// Builds (or finds in its cache) the tiny guest with the repository's script, and puts it in
/// the agent's image store as [`TINY`].
pub fn install_tiny_guest(layout: &Layout, scripts: &Path) -> Result<PathBuf, UpError> {
    let script = scripts.join("tiny-guest.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(io_err(&script))?;
    if !out.status.success() {
        return Err(UpError::Other(format!(
            "{} failed: the tiny guest could not be built",
            script.display()
        )));
    }
    let built = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let image = layout.state("agent").join("images").join(TINY);
    std::fs::create_dir_all(&image).map_err(io_err(&image))?;
    for file in ["kernel", "initrd"] {
        let from = built.join(file);
        let to = image.join(file);
        std::fs::copy(&from, &to).map_err(io_err(&from))?;
    }
    Ok(image)
}

/// The serial console log of an instance of the local agent.
pub fn console_path(layout: &Layout, instance: &str) -> PathBuf {
    layout
        .state("agent")
        .join("libvirt")
        .join("instances")
        .join(instance)
        .join("console.log")
}

/// Powers off (and with `undefine`, removes) the VMs of the local agent: the domains of the
/// instance directories in its state, and no other, except those of `skip` (instance UUIDs).
/// Returns how many were running.
pub fn stop_vms(layout: &Layout, undefine: bool, skip: &[String]) -> usize {
    let dir = layout.state("agent").join("libvirt").join("instances");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let uri = layout.libvirt_uri();
    if !answers(&uri) {
        return 0;
    }
    let mut stopped = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if uuid::Uuid::parse_str(&name).is_err() || skip.contains(&name) {
            continue;
        }
        let domain = format!("cumulo-{name}");
        if quiet("virsh", &["-c", &uri, "destroy", &domain]) {
            stopped += 1;
        }
        if undefine {
            quiet("virsh", &["-c", &uri, "undefine", &domain]);
        }
    }
    stopped
}
