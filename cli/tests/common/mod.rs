//! What the `cumulo` CLI's integration tests share.

use std::path::Path;

/// Whether `bins`, the cluster's binaries a test runs, are built next to `cumulo`; without them
/// the test is skipped (with a message) unless `CUMULO_REQUIRE_BINS=1`.
pub fn binaries_or_skip(bins: &[&str]) -> bool {
    let dir = Path::new(env!("CARGO_BIN_EXE_cumulo")).parent().unwrap();
    let missing: Vec<&str> = bins
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CUMULO_REQUIRE_BINS").as_deref() != Ok("1"),
        "CUMULO_REQUIRE_BINS=1 but {missing:?} are not built: cargo build --bins"
    );
    eprintln!("SKIPPED: {missing:?} not built (cargo build --bins)");
    false
}

/// The stdout of `cumulo args`, which must have succeeded (else its output is the failure).
#[allow(dead_code)]
pub fn succeeded(args: &[&str], out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "cumulo {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The libvirt URI for tests of `cumulo up --backend libvirt` (`CUMULO_LIBVIRT_URI`: a system
/// libvirtd that answers, as root), or `None` after saying why the test is skipped; a failure
/// instead under `CUMULO_LIBVIRT_REQUIRED=1` (CI) or `CUMULO_REQUIRE_LIBVIRT=1`.
#[allow(dead_code)]
pub fn system_libvirt_or_skip(test: &str) -> Option<String> {
    let required = ["CUMULO_LIBVIRT_REQUIRED", "CUMULO_REQUIRE_LIBVIRT"]
        .iter()
        .any(|v| std::env::var(v).as_deref() == Ok("1"));
    let why = match std::env::var("CUMULO_LIBVIRT_URI") {
        Ok(uri) if !uri.is_empty() => {
            if !rustix::process::geteuid().is_root() {
                format!("{uri} for `cumulo up --backend libvirt` needs root")
            } else if uri != "qemu:///system" {
                format!("`cumulo up --backend libvirt` as root uses qemu:///system, not {uri}")
            } else {
                let answers = std::process::Command::new("virsh")
                    .args(["-c", &uri, "version"])
                    .output()
                    .is_ok_and(|o| o.status.success());
                if answers {
                    return Some(uri);
                }
                format!("no libvirtd answers at {uri}")
            }
        }
        _ => "CUMULO_LIBVIRT_URI is not set (start libvirtd: scripts/libvirt.sh)".to_string(),
    };
    assert!(!required, "CUMULO_LIBVIRT_REQUIRED=1 but {why}");
    eprintln!("SKIPPED: {test}: {why}");
    None
}

/// The `openstack` CLI that `CUMULO_OPENSTACK` names (`scripts/openstack-venv.sh` makes one),
/// or `None`: the test says it skips, unless `CUMULO_REQUIRE_OPENSTACK=1` makes that a failure.
#[allow(dead_code)]
pub fn openstack_or_skip() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("CUMULO_OPENSTACK")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CUMULO_REQUIRE_OPENSTACK").as_deref() != Ok("1"),
            "CUMULO_REQUIRE_OPENSTACK=1 but CUMULO_OPENSTACK names no openstack CLI"
        );
        eprintln!("SKIPPED: no openstack CLI (CUMULO_OPENSTACK, scripts/openstack-venv.sh)");
    }
    found
}

/// The tiny guest as a bootable qcow2 disk image (`CUMULO_TINY_DISK`, made by
/// `scripts/tiny-disk.sh`), or `None`: the test says it skips, unless `CUMULO_LIBVIRT_REQUIRED=1`
/// (CI) makes that a failure.
#[allow(dead_code)]
pub fn tiny_disk_or_skip() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("CUMULO_TINY_DISK")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CUMULO_LIBVIRT_REQUIRED").as_deref() != Ok("1"),
            "CUMULO_LIBVIRT_REQUIRED=1 but CUMULO_TINY_DISK names no disk image \
             (scripts/tiny-disk.sh makes one)"
        );
        eprintln!("SKIPPED: no tiny disk image (CUMULO_TINY_DISK, scripts/tiny-disk.sh)");
    }
    found
}

/// `cumulo up` for a sim cluster with no tenant network and no first instance in `dir`, on free
/// loopback ports (never the default ones, which another cluster may hold).
#[allow(dead_code)]
pub fn sim_up_args(dir: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "up",
        "--backend",
        "sim",
        "--tenant-network",
        "none",
        "--no-instance",
        "--dir",
        dir,
    ]
    .map(String::from)
    .to_vec();
    for flag in [
        "--scheduler-listen",
        "--api-listen",
        "--console-listen",
        "--image-listen",
    ] {
        args.push(flag.into());
        args.push(format!("127.0.0.1:{}", testkit::procfs::free_port()));
    }
    args
}

/// The exports `cumulo up` wrote in `dir`'s `env` file, as `(name, value)`.
#[allow(dead_code)]
pub fn up_exports(dir: &Path) -> Vec<(String, String)> {
    let exports = std::fs::read_to_string(dir.join("env")).expect("up's env file");
    exports
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs the `openstack` CLI `bin` with only `PATH` and `env` in its environment.
#[allow(dead_code)]
pub fn openstack(bin: &Path, env: &[(String, String)], args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("the openstack CLI runs")
}

/// A finished command's stdout and stderr, for failure messages.
#[allow(dead_code)]
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `openstack args` (see [`openstack`]), which must succeed.
#[allow(dead_code)]
pub fn openstack_ok(bin: &Path, env: &[(String, String)], args: &[&str]) {
    let out = openstack(bin, env, args);
    assert!(
        out.status.success(),
        "openstack {args:?}: {}",
        output_text(&out)
    );
}

/// Runs `openstack args -f json` (see [`openstack`]), which must succeed; its JSON output.
#[allow(dead_code)]
pub fn openstack_json(bin: &Path, env: &[(String, String)], args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-f", "json"]);
    let out = openstack(bin, env, &all);
    assert!(
        out.status.success(),
        "openstack {args:?}: {}",
        output_text(&out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("openstack {args:?}: {e}: {}", output_text(&out)))
}
