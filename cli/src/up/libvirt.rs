//! What the libvirt backend needs on this host: a libvirt daemon (a private one started when
//! none answers and we are root), and the tiny guest in the agent's image store.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::cluster::{UpError, io_err, wait_for};
use super::layout::Layout;
use super::procs::{self, Spec};

/// The image name the tiny guest gets in the agent's image store.
pub const TINY: &str = "tiny";

/// Whether `virsh` reaches a libvirt daemon at `qemu:///system`.
pub fn answers() -> bool {
    quiet("virsh", &["-c", "qemu:///system", "version"])
}

fn quiet(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
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

fn program(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from(name)
}

/// Starts virtlogd and libvirtd as the cluster's own services (PID files in the cluster's
/// directory, stopped by `cumulo down`) and waits until libvirtd answers.
pub fn start_private(layout: &Layout) -> Result<(), UpError> {
    accounts();
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
        let spec = Spec {
            name: "virtlogd".into(),
            program: program("virtlogd"),
            args: vec![],
            env: vec![],
        };
        procs::spawn(&spec, &layout.log("virtlogd"), &layout.pid_file("virtlogd"))?;
        wait_for(
            "virtlogd",
            &layout.log("virtlogd"),
            Duration::from_secs(20),
            || Path::new("/run/libvirt/virtlogd-sock").exists(),
        )?;
    }
    let spec = Spec {
        name: "libvirtd".into(),
        program: program("libvirtd"),
        args: vec![],
        env: vec![],
    };
    procs::spawn(&spec, &layout.log("libvirtd"), &layout.pid_file("libvirtd"))?;
    wait_for(
        "libvirtd",
        &layout.log("libvirtd"),
        Duration::from_secs(90),
        answers,
    )?;
    Ok(())
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
    if !answers() {
        return 0;
    }
    let mut stopped = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if uuid::Uuid::parse_str(&name).is_err() || skip.contains(&name) {
            continue;
        }
        let domain = format!("cumulo-{name}");
        if quiet("virsh", &["-c", "qemu:///system", "destroy", &domain]) {
            stopped += 1;
        }
        if undefine {
            quiet("virsh", &["-c", "qemu:///system", "undefine", &domain]);
        }
    }
    stopped
}
