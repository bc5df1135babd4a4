//! Containers, beside VMs: OCI containers run by `runc` (Debian's package), driven directly.
//!
//! Why runc, and directly: no daemon (the agent is the only long-lived process, as with VMs
//! under libvirt, and a container outlives an agent restart as a VM does); no image store or
//! registry (none is reachable here: an image is a root file system tarball the node keeps, as it
//! keeps VM images); and it runs on cgroup v1, v2 and the hybrid layout of this machine (crun
//! 1.8, the other daemonless runtime in Debian, refuses a hybrid layout whose unified hierarchy
//! has a controller; podman would add its own store and state beside ours).
//!
//! Each container has `<dir>/<uuid>/`: `bundle/config.json` (`oci`), `bundle/rootfs/` (the
//! image unpacked: the container's writable layer, kept across stops until the delete) and
//! `console.log` (its output: the console). Its network namespace is
//! `cumulo-ct-<12 hex of the UUID>`, made here and kept across stops; a tenant NIC is the veth
//! pair the tenant network layer made (its host end `tap_name` on the subnet's bridge, filtered
//! like a VM's tap; its other end `veth_peer_name`), whose other end goes into the namespace as
//! `eth0` with the START's MAC and address and the subnet's gateway (the CNCI, which a VM's DHCP
//! would name) as the default route. Limits come from the flavor (`oci::resources`): memory,
//! CPU quota (one period per vCPU), a pids cap, no devices beyond the runtime's defaults.
//!
//! - **create**: the image `<images>/<name>.tar` (or `.tar.gz`, `.tgz`) unpacked, the user data
//!   as the command (`oci::command`), the namespace and NIC, `config.json`.
//! - **start**: `runc run --detach`; its output appended to `console.log`.
//! - **stop**: SIGTERM, SIGKILL after [`STOP_GRACE`], the runtime's state removed: the root
//!   file system stays; a start runs it again from there.
//! - **delete**: the container, its NIC's veth pair, its namespace and its directory.
//! - pause/unpause: the freezer; reboot: a stop and a start; suspend: not for containers.

pub mod oci;

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::console::{self, ConsoleError};
use super::libvirt::cache::{ImageCache, Lease, Source, named_hash};
use super::{Backend, BackendError, Existing, Power};
use crate::model::{Action, InstanceSpec, NicSpec, Resources, Usage};

/// How long a container has to exit after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How often a running container's init is looked at for its exit.
pub const EXIT_POLL: Duration = Duration::from_millis(250);

/// The runtime's state directory (its own, apart from other users of runc on the node).
pub const RUNTIME_ROOT: &str = "/run/cumulo-runc";

/// Where the node's containers are and what runs them.
#[derive(Debug, Clone)]
pub struct ContainerConfig {
    /// The containers' directories.
    pub dir: PathBuf,
    /// The container images (root file system tarballs).
    pub images: PathBuf,
    /// The OCI runtime (`runc`).
    pub runtime: PathBuf,
    /// Where the data of uploaded images (a START's `sha512/<hash>`) comes from: the
    /// controller's node image endpoint (`--image-server`), into the image store's cache.
    pub source: Option<Source>,
    /// The most the image cache keeps, bytes.
    pub cache_cap: u64,
}

/// The runc backend (see the module docs).
#[derive(Debug, Clone)]
pub struct ContainerBackend {
    config: Arc<ContainerConfig>,
    cache: ImageCache,
}

/// The network namespace of a container.
pub fn netns_name(instance: Uuid) -> String {
    format!("cumulo-ct-{}", &instance.simple().to_string()[..12])
}

fn launch(e: impl std::fmt::Display) -> BackendError {
    BackendError::Launch(e.to_string())
}

/// The runtime's status of a container, and its init process.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    status: String,
    pid: i32,
}

impl ContainerBackend {
    /// Over `config`: its directory is made (0700) and the runtime must answer `--version`.
    pub fn new(config: ContainerConfig) -> Result<ContainerBackend, BackendError> {
        std::fs::create_dir_all(&config.dir)
            .and_then(|()| {
                std::fs::set_permissions(&config.dir, std::fs::Permissions::from_mode(0o700))
            })
            .map_err(|e| BackendError::Other(format!("{}: {e}", config.dir.display())))?;
        let version = std::process::Command::new(&config.runtime)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                BackendError::Other(format!(
                    "the container runtime {}: {e} (Debian's package: runc)",
                    config.runtime.display()
                ))
            })?;
        if !version.status.success() {
            return Err(BackendError::Other(format!(
                "{} --version: {}",
                config.runtime.display(),
                String::from_utf8_lossy(&version.stderr).trim()
            )));
        }
        let cache = ImageCache::open(
            &config.images,
            &config.dir,
            config.cache_cap,
            config.source.clone().map(|s| s.0),
        )
        .map_err(|e| BackendError::Other(format!("{}: {e}", config.images.display())))?;
        Ok(ContainerBackend {
            config: Arc::new(config),
            cache,
        })
    }

    /// Whether this backend has `instance` (its directory exists).
    pub fn has(&self, instance: Uuid) -> bool {
        self.dir(instance).exists()
    }

    fn dir(&self, instance: Uuid) -> PathBuf {
        self.config.dir.join(instance.to_string())
    }

    fn bundle(&self, instance: Uuid) -> PathBuf {
        self.dir(instance).join("bundle")
    }

    fn log(&self, instance: Uuid) -> PathBuf {
        self.dir(instance).join("console.log")
    }

    fn name(instance: Uuid) -> String {
        format!("cumulo-{instance}")
    }

    /// Runs the runtime with `args`: its stdout, or its stderr as the error.
    async fn runtime(&self, args: &[&str]) -> Result<String, String> {
        let out = tokio::process::Command::new(&self.config.runtime)
            .args(["--root", RUNTIME_ROOT])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("{}: {e}", self.config.runtime.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "runc {}: {}",
                args.first().copied().unwrap_or_default(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// The runtime's state of the container: `None` when it has none (never started, or
    /// stopped and removed).
    async fn state(&self, instance: Uuid) -> Option<State> {
        let out = self.runtime(&["state", &Self::name(instance)]).await.ok()?;
        let v: serde_json::Value = serde_json::from_str(&out).ok()?;
        Some(State {
            status: v["status"].as_str()?.to_string(),
            pid: i32::try_from(v["pid"].as_i64()?).ok()?,
        })
    }

    /// The tarball of image `name`, and the cache's hold on it for an uploaded image (fetched
    /// first if the node has not got it).
    async fn image(&self, name: &str) -> Result<(PathBuf, Option<Lease>), BackendError> {
        if let Some(hash) = named_hash(name) {
            let lease = self
                .cache
                .ensure(hash)
                .await
                .map_err(|e| BackendError::Image(e.to_string()))?;
            return Ok((self.cache.path(hash), Some(lease)));
        }
        self.local_image(name).map(|path| (path, None))
    }

    fn local_image(&self, name: &str) -> Result<PathBuf, BackendError> {
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains('/')
            && !name.contains('\0');
        if !plain {
            return Err(BackendError::Image(format!(
                "{name:?} is not a container image name"
            )));
        }
        ["tar", "tar.gz", "tgz"]
            .iter()
            .map(|ext| self.config.images.join(format!("{name}.{ext}")))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                BackendError::Image(format!(
                    "no container image {name} in {} (a root file system tarball {name}.tar or {name}.tar.gz)",
                    self.config.images.display()
                ))
            })
    }

    async fn make(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        let (image, _lease) = self.image(&spec.image).await?;
        let rootfs = self.bundle(spec.instance).join("rootfs");
        std::fs::create_dir_all(&rootfs).map_err(launch)?;
        let out = tokio::process::Command::new("tar")
            .args(["--extract", "--numeric-owner", "--file"])
            .arg(&image)
            .arg("--directory")
            .arg(&rootfs)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| BackendError::Image(format!("tar: {e}")))?;
        if !out.status.success() {
            return Err(BackendError::Image(format!(
                "unpacking {}: {}",
                image.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let (args, script) = oci::command(spec.user_data.as_deref());
        if let Some(script) = script {
            write_script(&rootfs, &script).map_err(launch)?;
        }
        let ns = netns_name(spec.instance);
        // A namespace of an earlier container with this UUID is a leftover.
        let _ = ip(&["netns", "delete", &ns]).await;
        ip(&["netns", "add", &ns]).await.map_err(launch)?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])
            .await
            .map_err(launch)?;
        if let Some(nic) = &spec.nic {
            plug(spec.instance, &ns, nic)
                .await
                .map_err(BackendError::Network)?;
        }
        let config = oci::config(spec, &args, &format!("/run/netns/{ns}"));
        let text = serde_json::to_vec_pretty(&config).map_err(launch)?;
        std::fs::write(self.bundle(spec.instance).join("config.json"), text).map_err(launch)
    }

    /// Waits until the container's init exits (or `within` passes): `true` if it did.
    async fn exited_within(&self, instance: Uuid, within: Duration) -> bool {
        tokio::time::timeout(within, self.wait_exit(instance))
            .await
            .is_ok()
    }
}

/// Writes the user-data script into the root file system, never through what the image put
/// at its path (a link out of the root file system, say).
fn write_script(rootfs: &Path, script: &str) -> std::io::Result<()> {
    let path = rootfs.join(oci::INIT_SCRIPT.trim_start_matches('/'));
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path)?,
        Ok(_) => std::fs::remove_file(&path)?,
        Err(_) => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o755)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)?;
    file.write_all(script.as_bytes())
}

/// `ip ARGS`: its error output when it fails.
async fn ip(args: &[&str]) -> Result<(), String> {
    crate::net::metadata::run("ip", args).await
}

/// Moves the NIC's veth end into namespace `ns` as `eth0`, with the START's MAC and address
/// and a default route through the subnet's gateway.
async fn plug(instance: Uuid, ns: &str, nic: &NicSpec) -> Result<(), String> {
    let peer = crate::net::veth_peer_name(instance);
    ip(&["link", "set", &peer, "netns", ns]).await?;
    let mac = nic
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    ip(&[
        "-n", ns, "link", "set", &peer, "name", "eth0", "address", &mac,
    ])
    .await?;
    let addr = format!("{}/{}", nic.private_ip, nic.subnet_prefix);
    ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"]).await?;
    ip(&["-n", ns, "link", "set", "eth0", "up"]).await?;
    let subnet = ssntp::payload::Cidr {
        addr: nic.subnet_addr,
        prefix: nic.subnet_prefix,
    };
    if let Some(gw) = crate::cnci::dhcp::gateway(&subnet) {
        ip(&["-n", ns, "route", "add", "default", "via", &gw.to_string()]).await?;
    }
    Ok(())
}

impl Backend for ContainerBackend {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        if self.has(spec.instance) {
            return Err(BackendError::Exists);
        }
        match self.make(spec).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = self.delete(spec.instance).await;
                Err(e)
            }
        }
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        if !self.has(instance) {
            return Err(BackendError::NotFound);
        }
        let name = Self::name(instance);
        match self.state(instance).await {
            Some(s) if s.status == "running" => return Ok(()),
            Some(s) if s.status == "paused" => {
                return self
                    .runtime(&["resume", &name])
                    .await
                    .map(drop)
                    .map_err(launch);
            }
            Some(_) => {
                // Stopped (exited on its own): its runtime state goes, its files stay.
                self.runtime(&["delete", "--force", &name])
                    .await
                    .map_err(launch)?;
            }
            None => {}
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.log(instance))
            .map_err(launch)?;
        let out = tokio::process::Command::new(&self.config.runtime)
            .args(["--root", RUNTIME_ROOT, "run", "--detach", "--bundle"])
            .arg(self.bundle(instance))
            .arg("--pid-file")
            .arg(self.dir(instance).join("pid"))
            .arg(&name)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(launch)?)
            .stderr(log)
            .status()
            .await
            .map_err(launch)?;
        if out.success() {
            return Ok(());
        }
        let said = console::tail_file(&self.log(instance), 3).unwrap_or_default();
        let _ = self.runtime(&["delete", "--force", &name]).await;
        Err(BackendError::Launch(format!(
            "runc run failed ({out}): {}",
            said.trim()
        )))
    }

    async fn wait_exit(&self, instance: Uuid) {
        let Some(state) = self.state(instance).await else {
            return;
        };
        if state.status != "running" && state.status != "paused" {
            return;
        }
        let Ok(pid) = rustix::process::Pid::from_raw(state.pid).ok_or(()) else {
            return;
        };
        // The init's pidfd turns readable when it exits: looked at every EXIT_POLL (a
        // zero-timeout poll, no process spawned).
        let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) else {
            return;
        };
        let mut tick = tokio::time::interval(EXIT_POLL);
        loop {
            tick.tick().await;
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())) {
                Ok(0) => {}
                Ok(_) | Err(_) => return,
            }
        }
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        if !self.has(instance) {
            return Err(BackendError::NotFound);
        }
        let name = Self::name(instance);
        if let Some(state) = self.state(instance).await {
            if state.status == "paused" {
                self.runtime(&["resume", &name]).await.map_err(launch)?;
            }
            if state.status == "running" || state.status == "paused" {
                let _ = self.runtime(&["kill", &name, "TERM"]).await;
                if !self.exited_within(instance, STOP_GRACE).await {
                    let _ = self.runtime(&["kill", &name, "KILL"]).await;
                    if !self.exited_within(instance, STOP_GRACE).await {
                        return Err(launch(format!("container {name} did not exit")));
                    }
                }
            }
            self.runtime(&["delete", "--force", &name])
                .await
                .map_err(launch)?;
        }
        Ok(())
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        if !self.has(instance) {
            return Err(BackendError::NotFound);
        }
        let name = Self::name(instance);
        match action {
            Action::Pause => self.runtime(&["pause", &name]).await.map(drop),
            Action::Unpause => self.runtime(&["resume", &name]).await.map(drop),
            Action::Reboot | Action::RebootHard => {
                self.stop(instance).await?;
                return self.start(instance).await;
            }
            Action::Suspend | Action::Resume => {
                return Err(BackendError::Unsupported(
                    "a container cannot be suspended".into(),
                ));
            }
        }
        .map_err(launch)
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        let path = self.bundle(instance).join("config.json");
        let text = std::fs::read(&path).map_err(|_| BackendError::NotFound)?;
        let mut config: serde_json::Value = serde_json::from_slice(&text).map_err(launch)?;
        config["linux"]["resources"] = oci::resources(resources);
        let text = serde_json::to_vec_pretty(&config).map_err(launch)?;
        std::fs::write(&path, text).map_err(launch)
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        let name = Self::name(instance);
        if self.state(instance).await.is_some() {
            let _ = self.runtime(&["kill", &name, "KILL"]).await;
            let _ = self.exited_within(instance, STOP_GRACE).await;
            self.runtime(&["delete", "--force", &name])
                .await
                .map_err(launch)?;
        }
        let ns = netns_name(instance);
        if Path::new("/run/netns").join(&ns).exists() {
            // The NIC's pair first, at once (a namespace's devices go after its deletion, in the
            // kernel's own time: a START of the same instance right after could meet the host
            // end still there). A container without a NIC has no `eth0`: nothing to delete.
            let _ = ip(&["-n", &ns, "link", "delete", "eth0"]).await;
            ip(&["netns", "delete", &ns]).await.map_err(launch)?;
        }
        let dir = self.dir(instance);
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(launch(format!("{}: {e}", dir.display()))),
        })
        .await
        .map_err(launch)?
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        let Ok(existing) = self.list().await else {
            return Vec::new();
        };
        existing
            .into_iter()
            .filter(|e| e.power.is_active())
            .map(|e| {
                let mem = memory_in_use(e.instance).unwrap_or(0);
                let usage = Usage {
                    mem_mb: u32::try_from(mem / (1024 * 1024)).unwrap_or(u32::MAX),
                    disk_mb: 0,
                    cpu_percent: None,
                };
                (e.instance, usage)
            })
            .collect()
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        let entries = std::fs::read_dir(&self.config.dir)
            .map_err(|e| BackendError::Other(format!("{}: {e}", self.config.dir.display())))?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Some(instance) = entry
                .file_name()
                .to_str()
                .and_then(|n| Uuid::parse_str(n).ok())
            else {
                continue;
            };
            let power = match self.state(instance).await.map(|s| s.status) {
                Some(s) if s == "running" => Power::Running,
                Some(s) if s == "paused" => Power::Paused,
                _ => Power::Off,
            };
            out.push(Existing { instance, power });
        }
        Ok(out)
    }

    async fn console(&self, instance: Uuid, lines: usize) -> Result<String, ConsoleError> {
        if !self.has(instance) {
            return Err(ConsoleError::NotFound);
        }
        let log = self.log(instance);
        tokio::task::spawn_blocking(move || console::tail_file(&log, lines))
            .await
            .map_err(|e| ConsoleError::Io(e.to_string()))?
    }

    async fn filter_port(&self, instance: Uuid, nic: &NicSpec) -> Result<(), BackendError> {
        // The tenant network layer filters the NIC's host end, as it filters a VM's tap.
        let _ = (instance, nic);
        Ok(())
    }
}

/// The memory a container's cgroup uses, bytes (cgroup v1 or v2).
fn memory_in_use(instance: Uuid) -> Option<u64> {
    let cgroup = oci::cgroup(instance);
    let rel = cgroup.trim_start_matches('/');
    [
        format!("/sys/fs/cgroup/memory/{rel}/memory.usage_in_bytes"),
        format!("/sys/fs/cgroup/{rel}/memory.current"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .and_then(|s| s.trim().parse().ok())
}
