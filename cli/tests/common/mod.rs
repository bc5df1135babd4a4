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

/// Runs `cumulo args` as the admin of the cluster in `dir` (its `admin-password`), with only
/// `PATH` and `env` (a cluster's exports) from the environment.
#[allow(dead_code)]
pub fn cumulo_as_admin<'a>(
    dir: &Path,
    env: impl IntoIterator<Item = (&'a String, &'a String)>,
    args: &[&str],
) -> std::process::Output {
    let password = std::fs::read_to_string(dir.join("admin-password")).expect("the admin password");
    std::process::Command::new(env!("CARGO_BIN_EXE_cumulo"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env)
        .env("CUMULO_USERNAME", "admin")
        .env("CUMULO_PASSWORD", password.trim())
        .env("CUMULO_PROJECT", "admin")
        .output()
        .expect("cumulo runs")
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

/// The test artifact `var` names (`what`, made by `scripts/<script>`), if `usable`, or `None`:
/// the test says it skips, unless `CUMULO_LIBVIRT_REQUIRED=1` (CI) makes that a failure.
fn artifact_or_skip(
    var: &str,
    what: &str,
    script: &str,
    usable: fn(&Path) -> bool,
) -> Option<std::path::PathBuf> {
    let found = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .filter(|p| usable(p));
    if found.is_none() {
        assert!(
            std::env::var("CUMULO_LIBVIRT_REQUIRED").as_deref() != Ok("1"),
            "CUMULO_LIBVIRT_REQUIRED=1 but {var} names no {what} (scripts/{script} makes one)"
        );
        eprintln!("SKIPPED: no {what} ({var}, scripts/{script})");
    }
    found
}

/// The tiny guest as a bootable qcow2 disk image (`CUMULO_TINY_DISK`), or `None`
/// ([`artifact_or_skip`]).
#[allow(dead_code)]
pub fn tiny_disk_or_skip() -> Option<std::path::PathBuf> {
    artifact_or_skip("CUMULO_TINY_DISK", "tiny disk image", "tiny-disk.sh", |p| {
        p.is_file()
    })
}

/// The tiny guest's directory (`CUMULO_TINY_GUEST`: `kernel` and `initrd`), or `None`
/// ([`artifact_or_skip`]).
#[allow(dead_code)]
pub fn tiny_guest_or_skip() -> Option<std::path::PathBuf> {
    artifact_or_skip("CUMULO_TINY_GUEST", "tiny guest", "tiny-guest.sh", |p| {
        p.join("kernel").is_file() && p.join("initrd").is_file()
    })
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

/// `openstack image create` of `tarball` (a root file system) as container image `name`: raw
/// data in a docker container.
#[allow(dead_code)]
pub fn container_image_create(tarball: &Path, name: &str) -> Vec<String> {
    let file = tarball.to_str().expect("a UTF-8 path");
    [
        "image",
        "create",
        "--disk-format",
        "raw",
        "--container-format",
        "docker",
        "--file",
        file,
        name,
    ]
    .map(String::from)
    .to_vec()
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

/// A `cumulo up --backend sim` cluster (see [`sim_up_args`]) in a temporary directory, with the
/// login `up` exports and the `openstack` CLI to use it; `cumulo down --purge` when dropped.
#[allow(dead_code)]
pub struct SimCluster {
    pub dir: tempfile::TempDir,
    /// What `up` exported (the demo project's login, the controller's URL...).
    pub env: Vec<(String, String)>,
    /// The `openstack` CLI.
    pub openstack: std::path::PathBuf,
}

#[allow(dead_code)]
impl SimCluster {
    /// The cluster, if its binaries are built and the `openstack` CLI is there (else the test
    /// says it skips, see [`binaries_or_skip`] and [`openstack_or_skip`]).
    pub fn up_or_skip() -> Option<SimCluster> {
        if !binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
            return None;
        }
        openstack_or_skip().map(SimCluster::up)
    }

    /// Brings the cluster up, which must succeed.
    pub fn up(openstack: std::path::PathBuf) -> SimCluster {
        SimCluster::up_with(openstack, |_| Vec::new())
    }

    /// As [`SimCluster::up`], with the environment `env` gives for `up`'s arguments (which
    /// the services it starts inherit).
    pub fn up_with(
        openstack: std::path::PathBuf,
        env: impl FnOnce(&[String]) -> Vec<(String, String)>,
    ) -> SimCluster {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap().to_string();
        let args = sim_up_args(&root);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cumulo"))
            .envs(env(&args))
            .args(&args)
            .output()
            .unwrap();
        // Made before the check, so that a failed `up` is brought down too.
        let cluster = SimCluster {
            env: if out.status.success() {
                up_exports(dir.path())
            } else {
                Vec::new()
            },
            dir,
            openstack,
        };
        assert!(out.status.success(), "cumulo up: {}", output_text(&out));
        cluster
    }

    /// What `up` exported as `name`.
    pub fn export(&self, name: &str) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("up exports no {name}"))
    }

    /// The exports with the login of `user` in project `project` instead of the demo one's.
    pub fn env_of(&self, user: &str, project: &str, password: &str) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(k, v)| match k.as_str() {
                "OS_USERNAME" => (k.clone(), user.to_string()),
                "OS_PROJECT_NAME" => (k.clone(), project.to_string()),
                "OS_PASSWORD" => (k.clone(), password.to_string()),
                _ => (k.clone(), v.clone()),
            })
            .collect()
    }

    /// The admin's password, as `up` wrote it.
    pub fn admin_password(&self) -> String {
        let password = std::fs::read_to_string(self.dir.path().join("admin-password")).unwrap();
        password.trim().to_string()
    }

    /// A connection to the controller's native API as `user` in `project`.
    pub fn login(&self, user: &str, project: &str, password: &str) -> cumulo::client::Connection {
        cumulo::client::Connection::login(&cumulo::client::Credentials {
            url: self.export("CUMULO_CONTROLLER"),
            username: user.into(),
            password: password.into(),
            project: project.into(),
            ca_cert: None,
        })
        .unwrap()
    }

    /// A project `name` with a member user `name` (`password`), made by the admin; its id.
    pub fn project_with_member(&self, name: &str, password: &str) -> String {
        use serde_json::json;
        let admin = self.login("admin", "admin", &self.admin_password());
        let tenant = admin
            .post(cumulo::routes::TENANTS, &json!({"name": name}))
            .unwrap();
        let tenant = cumulo::routes::item(tenant);
        let user = admin
            .post(
                cumulo::routes::USERS,
                &json!({"name": name, "password": password}),
            )
            .unwrap();
        let user = cumulo::routes::item(user);
        admin
            .post(
                &cumulo::routes::roles(user["id"].as_str().unwrap()),
                &json!({"tenant": tenant["id"], "role": "member"}),
            )
            .unwrap();
        tenant["id"].as_str().unwrap().to_string()
    }

    /// Its directory, as `cumulo --dir` takes it.
    pub fn root(&self) -> String {
        self.dir.path().to_str().unwrap().to_string()
    }

    /// Runs `openstack args` with the exported login (see [`openstack`]).
    pub fn openstack(&self, args: &[&str]) -> std::process::Output {
        openstack(&self.openstack, &self.env, args)
    }

    /// As [`SimCluster::openstack`], which must succeed.
    pub fn ok(&self, args: &[&str]) {
        openstack_ok(&self.openstack, &self.env, args);
    }

    /// As [`SimCluster::openstack`] with `-f json`, which must succeed: its JSON output.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        openstack_json(&self.openstack, &self.env, args)
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        let root = self.root();
        let _ = std::process::Command::new(env!("CARGO_BIN_EXE_cumulo"))
            .args(["down", "--dir", &root, "--purge"])
            .output();
    }
}
