//! The OCI runtime configuration (`config.json`) of a container instance: what runs (the user
//! data), where (its root file system, its own namespaces, the network namespace the backend
//! made for it), and its limits (the flavor's memory and vCPUs, a pids cap).

use serde_json::{Value, json};
use uuid::Uuid;

use crate::model::{InstanceSpec, Resources};

/// Where a user-data script is written in the container's root file system.
pub const INIT_SCRIPT: &str = "/cumulo-init";

/// The most processes one container may have.
pub const PIDS_MAX: i64 = 4096;

/// The CPU quota period, µs.
const CPU_PERIOD: u64 = 100_000;

/// What the container runs, from its user data: a script (`#!` first) is written to
/// [`INIT_SCRIPT`] and run; other text is a shell command line; none: a shell that waits until
/// it is stopped.
pub fn command(user_data: Option<&str>) -> (Vec<String>, Option<String>) {
    match user_data.map(str::trim).filter(|u| !u.is_empty()) {
        Some(script) if script.starts_with("#!") => {
            (vec![INIT_SCRIPT.to_string()], Some(format!("{script}\n")))
        }
        Some(line) => (vec!["/bin/sh".into(), "-c".into(), line.to_string()], None),
        None => (
            vec![
                "/bin/sh".into(),
                "-c".into(),
                "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done".into(),
            ],
            None,
        ),
    }
}

/// The environment: a `PATH`, the instance's UUID, and its meta data as `CUMULO_META_<KEY>`
/// (keys upper-cased, anything but letters, digits and `_` as `_`).
fn env(spec: &InstanceSpec) -> Vec<String> {
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        format!("CUMULO_INSTANCE={}", spec.instance),
    ];
    for (k, v) in &spec.meta_data {
        let key: String = k
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        if !v.contains('\0') {
            env.push(format!("CUMULO_META_{key}={v}"));
        }
    }
    env
}

/// The cgroup (relative to each hierarchy's root) the runtime puts a container in.
pub fn cgroup(instance: Uuid) -> String {
    format!("/cumulo/{instance}")
}

/// The limits of `resources`, as the runtime configuration's `linux.resources`.
pub fn resources(resources: Resources) -> Value {
    let mem = i64::from(resources.mem_mb.max(4)) * 1024 * 1024;
    json!({
        "memory": { "limit": mem },
        "cpu": {
            "quota": i64::from(resources.vcpus.max(1)) * CPU_PERIOD as i64,
            "period": CPU_PERIOD,
        },
        "pids": { "limit": PIDS_MAX },
        "devices": [{ "allow": false, "access": "rwm" }],
    })
}

/// The whole `config.json` of `spec`'s container, joining the network namespace at `netns`.
pub fn config(spec: &InstanceSpec, args: &[String], netns: &str) -> Value {
    let caps = [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FSETID",
        "CAP_FOWNER",
        "CAP_MKNOD",
        "CAP_NET_RAW",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETFCAP",
        "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT",
        "CAP_KILL",
        "CAP_AUDIT_WRITE",
    ];
    let hostname = spec
        .meta_data
        .get("hostname")
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 63
                && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .cloned()
        .unwrap_or_else(|| spec.instance.simple().to_string()[..12].to_string());
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": { "uid": 0, "gid": 0 },
            "args": args,
            "env": env(spec),
            "cwd": "/",
            "capabilities": {
                "bounding": caps, "effective": caps, "permitted": caps,
            },
            "rlimits": [{ "type": "RLIMIT_NOFILE", "hard": 4096, "soft": 4096 }],
            "noNewPrivileges": true,
        },
        "root": { "path": "rootfs", "readonly": false },
        "hostname": hostname,
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc" },
            { "destination": "/dev", "type": "tmpfs", "source": "tmpfs",
              "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] },
            { "destination": "/dev/pts", "type": "devpts", "source": "devpts",
              "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"] },
            { "destination": "/dev/shm", "type": "tmpfs", "source": "shm",
              "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"] },
            { "destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
              "options": ["nosuid", "noexec", "nodev"] },
            { "destination": "/sys", "type": "sysfs", "source": "sysfs",
              "options": ["nosuid", "noexec", "nodev", "ro"] },
            { "destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
              "options": ["nosuid", "nodev", "mode=1777"] },
        ],
        "linux": {
            "cgroupsPath": cgroup(spec.instance),
            "resources": resources(spec.resources),
            "namespaces": [
                { "type": "pid" },
                { "type": "ipc" },
                { "type": "uts" },
                { "type": "mount" },
                { "type": "network", "path": netns },
            ],
            "maskedPaths": [
                "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                "/sys/firmware",
            ],
            "readonlyPaths": [
                "/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                "/proc/sysrq-trigger",
            ],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_becomes_the_command() {
        let (args, script) = command(Some("#!/bin/sh\necho hi"));
        assert_eq!(args, vec![INIT_SCRIPT]);
        assert_eq!(script.as_deref(), Some("#!/bin/sh\necho hi\n"));
        let (args, script) = command(Some("echo hi; sleep 1\n"));
        assert_eq!(args, vec!["/bin/sh", "-c", "echo hi; sleep 1"]);
        assert!(script.is_none());
        let (args, _) = command(None);
        assert_eq!(args[0], "/bin/sh");
        assert_eq!(command(Some("  ")).0, args);
    }

    #[test]
    fn limits_come_from_the_flavor() {
        let r = resources(Resources {
            vcpus: 2,
            mem_mb: 256,
            disk_mb: 0,
        });
        assert_eq!(r["memory"]["limit"], 256 * 1024 * 1024);
        assert_eq!(r["cpu"]["quota"], 200_000);
        assert_eq!(r["cpu"]["period"], 100_000);
        assert_eq!(r["pids"]["limit"], PIDS_MAX);
    }
}
