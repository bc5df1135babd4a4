//! The libvirt backend: one libvirt domain per instance, named `cumulo-<uuid>` and with the
//! instance's UUID, its vCPUs and memory from the START's requirements.
//!
//! - **Images** come from an [`ImageStore`]: a disk image boots from a qcow2
//!   overlay in the instance's directory; a kernel+initrd image boots directly, with the
//!   instance's cloud-init data appended to its initrd, and gets a blank qcow2 data disk of
//!   the flavor's size (`disk.qcow2`, the guest's `vda`). A missing or corrupt image is
//!   [`BackendError::Image`] (START_FAILURE `image_failure`).
//! - **cloud-init**: a NoCloud `cidata` ISO per instance ([`seed`]).
//! - **NIC**: an instance with a NIC gets a virtio NIC with its MAC on the tap that tenant
//!   networking made for it ([`crate::net::tap_name`], `<interface type='ethernet'>`, not
//!   managed by libvirt).
//! - **Files**: `<instances>/<uuid>/` holds the overlay or data disk, the initrd, the seed, the domain XML
//!   as defined, and `console.log`, the serial console.
//! - **Lifecycle**: create defines the domain (persistent, so that a stopped one is still
//!   listed after an agent restart), start boots it, stop destroys it (power off), delete
//!   undefines it, then powers it off, and removes its directory. An exit of its own is seen
//!   by **polling** the domain's state every [`LibvirtConfig::poll`] (libvirt's lifecycle
//!   events need an event loop thread driven through the C API; polling one cheap call per
//!   running instance does the same here).
//! - **Ours only**: every domain we define carries `<metadata>` in our namespace
//!   ([`xml::NAMESPACE`]) naming its owner ([`LibvirtConfig::owner`]: the node). A domain
//!   without it, or another node's (two agents may share one libvirt), is never listed,
//!   measured, stopped or undefined; a START whose name or UUID is taken by one is refused
//!   (`instance_exists`). A domain of ours that names no owner (made before owners were
//!   recorded) is taken by any backend, as it was then.
//! - **libvirt going away**: calls fail with a typed error (START_FAILURE `launch_failure`,
//!   DELETE_FAILURE), running instances are not reported as exited while libvirt cannot be
//!   asked, and the next call reconnects ([`conn`]).

pub mod access;
pub mod cache;
pub mod conn;
mod create;
mod domain;
pub mod fault;
mod fence;
pub mod fetch;
pub mod images;
pub mod seed;
pub mod volumes;
pub mod xml;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use uuid::Uuid;
use virt::domain::Domain;
use virt::error::ErrorNumber;

use crate::backend::{Backend, BackendError, ConsoleError, Existing, ExportError, Power, console};
use crate::model::{Action, InstanceSpec, NicSpec, Resources, Usage};
use access::QemuUser;
use conn::{Conn, ConnError};
use domain::{our_domain, ours, power_of, power_off, remove_domain, stop_domain};
use images::ImageStore;
use seed::Seed;
use xml::DomainType;

/// Which accelerator domains run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// KVM where it really works (`/dev/kvm` usable and the host is not itself a VM: nested
    /// KVM is left to an explicit `kvm`), else TCG.
    Auto,
    /// KVM.
    Kvm,
    /// QEMU's emulation (TCG).
    Tcg,
}

impl Accel {
    /// The domain type this accelerator means on this host.
    pub fn resolve(self) -> DomainType {
        match self {
            Accel::Kvm => DomainType::Kvm,
            Accel::Tcg => DomainType::Qemu,
            Accel::Auto => {
                let kvm = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/kvm")
                    .is_ok();
                let nested = std::fs::read_to_string("/proc/cpuinfo")
                    .map(|c| {
                        c.lines().any(|l| {
                            l.starts_with("flags")
                                && l.split_whitespace().any(|f| f == "hypervisor")
                        })
                    })
                    .unwrap_or(true);
                if kvm && !nested {
                    DomainType::Kvm
                } else {
                    DomainType::Qemu
                }
            }
        }
    }
}

/// The libvirt backend's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibvirtConfig {
    /// The libvirt URI (`qemu:///system`; `test:///default` in unit tests).
    pub uri: String,
    /// The accelerator.
    pub accel: Accel,
    /// The image store.
    pub images: PathBuf,
    /// Where each instance's directory is made.
    pub instances: PathBuf,
    /// Where volumes' files are kept ([`volumes`]).
    pub volumes: PathBuf,
    /// How long a detach waits for the guest to release the volume's device.
    pub detach_timeout: Duration,
    /// How often a running instance's state is polled.
    pub poll: Duration,
    /// How long a reboot waits for the guest to power off after the ACPI power button before it
    /// powers the domain off and boots it again (a hard reboot).
    pub reboot_timeout: Duration,
    /// The node whose domains these are, recorded on each domain defined: the agent's UUID,
    /// or the off-host host's for its replicas. `None`: none recorded, and every domain of ours
    /// is taken as this backend's (one backend per libvirt).
    pub owner: Option<Uuid>,
    /// The directory that `images` and `instances` are in (the agent's state directory). Under
    /// a local `qemu:///system`, it and the directories below it on the way to them are given
    /// to QEMU's group with mode 0710 ([`access`]), so that QEMU can reach the instances' files.
    pub top: Option<PathBuf>,
    /// Where the data of uploaded images (`sha512/<hash>` in a START) is fetched from when it
    /// is not in the cache ([`cache`]); `None`: only what is there already is booted.
    pub image_source: Option<cache::Source>,
    /// The most bytes the image cache keeps.
    pub image_cache: u64,
}

impl LibvirtConfig {
    /// Defaults under the agent's state directory: `images/`, `libvirt/instances/` and
    /// `volumes/`.
    pub fn new(uri: &str, accel: Accel, state_dir: &Path) -> LibvirtConfig {
        LibvirtConfig {
            uri: uri.to_string(),
            accel,
            images: state_dir.join("images"),
            instances: state_dir.join("libvirt").join("instances"),
            volumes: state_dir.join("volumes"),
            detach_timeout: Duration::from_secs(20),
            poll: Duration::from_millis(500),
            reboot_timeout: Duration::from_secs(60),
            owner: None,
            top: Some(state_dir.to_path_buf()),
            image_source: None,
            image_cache: cache::DEFAULT_CAP,
        }
    }
}

/// The backend could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LibvirtError {
    /// Its directories could not be made.
    #[error("libvirt backend directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The backend's state, shared with its blocking calls.
struct Inner {
    conn: Conn,
    config: LibvirtConfig,
    store: ImageStore,
    cache: cache::ImageCache,
    kind: DomainType,
    /// The last CPU time seen of each instance, for CPU %.
    cpu: Mutex<HashMap<Uuid, (Instant, u64)>>,
    /// Who QEMU runs as under a local `qemu:///system` (read from libvirt once it answers;
    /// `None` inside when QEMU runs as root).
    qemu: OnceLock<Option<QemuUser>>,
}

/// Whether libvirt's error says the domain is there already.
fn exists_error(e: &ConnError) -> bool {
    matches!(e, ConnError::Failed(m) if m.contains("already exists"))
}

/// Bytes a file or directory tree takes on disk.
fn disk_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    let children = std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| disk_bytes(&e.path()))
                .sum()
        })
        .unwrap_or(0);
    own + children
}

fn launch(e: ConnError) -> BackendError {
    fault::launch(e)
}

impl Inner {
    fn new(config: LibvirtConfig) -> Result<Inner, LibvirtError> {
        for dir in [&config.images, &config.instances, &config.volumes] {
            std::fs::create_dir_all(dir).map_err(|source| LibvirtError::Dir {
                path: dir.clone(),
                source,
            })?;
        }
        let kind = config.accel.resolve();
        tracing::info!(uri = %config.uri, accel = ?kind, images = %config.images.display(), "libvirt backend");
        let cache = cache::ImageCache::open(
            &config.images,
            &config.instances,
            config.image_cache,
            config.image_source.clone().map(|s| s.0),
        )
        .map_err(|source| LibvirtError::Dir {
            path: config.images.join("sha512"),
            source,
        })?;
        Ok(Inner {
            conn: Conn::new(&config.uri),
            store: ImageStore::new(&config.images),
            cache,
            kind,
            config,
            cpu: Mutex::new(HashMap::new()),
            qemu: OnceLock::new(),
        })
    }

    /// Under a local `qemu:///system` with the agent as root: who QEMU runs as (read from
    /// libvirt the first time, when the backend's own directories are also given to its group),
    /// and an error naming the directory that keeps it from any of `paths`. `None` where QEMU
    /// runs as the agent's own user or as root (blocking).
    fn reach(&self, paths: &[&Path]) -> Result<Option<&QemuUser>, BackendError> {
        if !access::is_local_system(&self.config.uri) || !rustix::process::geteuid().is_root() {
            return Ok(None);
        }
        let user = match self.qemu.get() {
            Some(user) => user.as_ref(),
            None => {
                let caps = self.conn.call(|c| c.get_capabilities()).map_err(launch)?;
                let user = QemuUser::from_host(&caps).filter(|u| u.uid != 0);
                if let (Some(user), Some(top)) = (&user, &self.config.top) {
                    let mut dirs = access::chain(top, &self.config.instances);
                    for target in [&self.config.images, &self.config.volumes] {
                        for dir in access::chain(top, target) {
                            if !dirs.contains(&dir) {
                                dirs.push(dir);
                            }
                        }
                    }
                    access::open_to(&dirs, user.gid, access::SEARCH_ONLY).map_err(|e| {
                        BackendError::Launch(format!(
                            "opening {} to QEMU's group {}: {e}",
                            top.display(),
                            user.gid
                        ))
                    })?;
                }
                let _ = self.qemu.set(user);
                self.qemu.get().and_then(Option::as_ref)
            }
        };
        let Some(user) = user else {
            return Ok(None);
        };
        for path in paths {
            if let Some(blocked) = user.blocked(path) {
                return Err(BackendError::Launch(format!(
                    "QEMU runs as uid {} (gid {}) under {} and cannot reach {}: {blocked} does \
                     not let it through. Keep the agent's state and images where QEMU can reach \
                     them (cumulo up's default as root is /var/lib/cumulo), or let it through \
                     that directory (chmod o+x {})",
                    user.uid,
                    user.gid,
                    self.config.uri,
                    path.display(),
                    blocked.dir.display()
                )));
            }
        }
        Ok(Some(user))
    }

    fn instance_dir(&self, instance: Uuid) -> PathBuf {
        self.config.instances.join(instance.to_string())
    }

    /// New vCPUs and memory in our (powered off) domain's definition, and its disk grown
    /// (blocking).
    fn resize_blocking(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        let owner = self.config.owner;
        let xml = self
            .conn
            .call(|c| match our_domain(c, instance, owner)? {
                Some(d) => d.get_xml_desc(virt::sys::VIR_DOMAIN_XML_INACTIVE).map(Some),
                None => Ok(None),
            })
            .map_err(|e| BackendError::Other(format!("resize: {e}")))?
            .ok_or(BackendError::NotFound)?;
        let xml = xml::resized(&xml, resources.vcpus.max(1), resources.mem_mb.max(16)).ok_or_else(
            || BackendError::Launch("resize: the domain has no vCPUs or memory".into()),
        )?;
        let disk = self.instance_dir(instance).join("disk.qcow2");
        if disk.exists() {
            images::grow(&disk, resources.disk_mb)
                .map_err(|e| BackendError::Launch(e.to_string()))?;
        }
        self.conn
            .call(|c| Domain::define_xml(c, &xml).map(|_| ()))
            .map_err(launch)?;
        tracing::info!(%instance, vcpus = resources.vcpus, mem_mb = resources.mem_mb, disk_mb = resources.disk_mb, "resized");
        Ok(())
    }

    /// Stop and undefine our domain, then remove the instance's files (blocking).
    fn delete_blocking(&self, instance: Uuid) -> Result<(), BackendError> {
        let owner = self.config.owner;
        self.conn
            .call(|c| {
                if let Some(d) = our_domain(c, instance, owner)? {
                    remove_domain(&d)?;
                }
                Ok(())
            })
            .map_err(|e| BackendError::Other(e.to_string()))?;
        self.cpu
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&instance);
        let dir = self.instance_dir(instance);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(BackendError::Other(format!("{}: {e}", dir.display()))),
        }
    }

    /// Our running domains' CPU time, vCPUs and memory (blocking).
    fn sample(&self) -> Result<Vec<(Uuid, u64, u32, u64)>, ConnError> {
        let owner = self.config.owner;
        self.conn.call(|c| {
            let flags = virt::sys::VIR_CONNECT_LIST_DOMAINS_ACTIVE;
            let mut out = Vec::new();
            for d in c.list_all_domains(flags)? {
                // A domain that went away since the list has no metadata either.
                if !ours(&d, owner).unwrap_or(false) {
                    continue;
                }
                // A domain that stopped between the list and these calls is skipped.
                let (Ok(id), Ok(info)) = (d.get_uuid(), d.get_info()) else {
                    continue;
                };
                out.push((id, info.cpu_time, info.nr_virt_cpu, info.memory));
            }
            Ok(out)
        })
    }

    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Inner) -> T + Send + 'static,
    ) -> Result<T, BackendError> {
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|e| BackendError::Other(format!("libvirt task: {e}")))
    }
}

/// The libvirt backend. Clones share it.
#[derive(Clone)]
pub struct LibvirtBackend(Arc<Inner>);

impl LibvirtBackend {
    /// The backend: makes its directories; connects to libvirt on first use.
    pub fn new(config: LibvirtConfig) -> Result<LibvirtBackend, LibvirtError> {
        Ok(LibvirtBackend(Arc::new(Inner::new(config)?)))
    }

    /// The directory of an instance's files.
    pub fn instance_dir(&self, instance: Uuid) -> PathBuf {
        self.0.instance_dir(instance)
    }

    /// Calls `f` on our domain of `instance` (`NotFound` if there is none); `what` names the
    /// call in the error.
    async fn on_domain(
        &self,
        instance: Uuid,
        what: &'static str,
        f: fn(&Domain) -> Result<u32, virt::error::Error>,
    ) -> Result<(), BackendError> {
        let owner = self.0.config.owner;
        let result = self
            .0
            .conn
            .run(move |c| match our_domain(c, instance, owner)? {
                Some(d) => f(&d).map(|_| true),
                None => Ok(false),
            })
            .await;
        match result {
            Ok(true) => Ok(()),
            Ok(false) | Err(ConnError::NoDomain) => Err(BackendError::NotFound),
            Err(e) => Err(BackendError::Other(format!("{what}: {e}"))),
        }
    }

    /// A reboot: the ACPI power button, a wait of up to `reboot_timeout` for the guest to power
    /// off, a power-off if it did not, then a boot. The disks are the same throughout.
    async fn reboot(&self, instance: Uuid) -> Result<(), BackendError> {
        self.on_domain(instance, "reboot: shutdown", Domain::shutdown)
            .await?;
        let deadline = Instant::now() + self.0.config.reboot_timeout;
        let owner = self.0.config.owner;
        loop {
            let active = self
                .0
                .conn
                .run(move |c| match our_domain(c, instance, owner)? {
                    Some(d) => d.is_active(),
                    None => Ok(false),
                })
                .await
                .map_err(|e| BackendError::Other(format!("reboot: {e}")))?;
            if !active {
                break;
            }
            if Instant::now() >= deadline {
                tracing::info!(%instance, "the guest did not power off in time: power off");
                self.on_domain(instance, "reboot: power off", |d| power_off(d).map(|()| 0))
                    .await?;
                break;
            }
            tokio::time::sleep(self.0.config.poll).await;
        }
        self.on_domain(instance, "reboot: boot", Domain::create)
            .await
    }

    /// The serial console log of an instance.
    pub fn console_path(&self, instance: Uuid) -> PathBuf {
        self.instance_dir(instance).join("console.log")
    }

    /// Checks before any instance that QEMU will reach the instances' and images' directories,
    /// giving the backend's own to its group ([`access`]; blocking: libvirt is asked who QEMU
    /// runs as). `Ok(Some(user))` under a local `qemu:///system` as root; `Ok(None)` where QEMU
    /// runs as the agent's own user or as root; the error says which directory keeps it out.
    pub fn check_reach(&self) -> Result<Option<QemuUser>, BackendError> {
        let inner = &self.0;
        inner
            .reach(&[&inner.config.instances, &inner.config.images])
            .map(Option::<&QemuUser>::cloned)
    }

    /// The domain type instances get.
    pub fn domain_type(&self) -> DomainType {
        self.0.kind
    }
}

impl LibvirtBackend {
    /// As [`Backend::create`], with the NIC on `tap`, a tap the caller makes before each start
    /// (named as it will exist where libvirt's QEMU runs), instead of the instance's tenant
    /// NIC: how a network node runs a CNCI as a VM.
    pub async fn create_on_tap(&self, spec: &InstanceSpec, tap: Tap) -> Result<(), BackendError> {
        let _leases = self.image_data(spec).await?;
        let spec = spec.clone();
        self.0
            .blocking(move |b| b.create_blocking(&spec, Some(tap)))
            .await?
    }

    /// For the cached data (`sha512/<hash>`) an instance is made from (its image, its kernel
    /// and initrd): makes sure the data is here, fetched if it was not, and holds it for the
    /// create under way.
    async fn image_data(&self, spec: &InstanceSpec) -> Result<Vec<cache::Lease>, BackendError> {
        let mut leases = Vec::new();
        for hash in cache::named_hashes(spec) {
            let lease = self.0.cache.ensure(&hash).await;
            leases.push(lease.map_err(|e| BackendError::Image(e.to_string()))?);
        }
        Ok(leases)
    }

    /// For an image that names cached data (`sha512/<hash>`): makes sure the data is here,
    /// fetched if it was not, and holds it for the create under way.
    async fn image_lease(&self, image: &str) -> Result<Option<cache::Lease>, BackendError> {
        match cache::named_hash(image) {
            Some(hash) => self
                .0
                .cache
                .ensure(hash)
                .await
                .map(Some)
                .map_err(|e| BackendError::Image(e.to_string())),
            None => Ok(None),
        }
    }

    /// Rewrites a powered-off instance's seed (its cloud-init CD-ROM) with `user_data` and
    /// `meta_data`, read at its next boot: how a CNCI VM restarted with new credentials gets
    /// them. The instance must have been made by this backend (its directory exists).
    pub async fn reseed(
        &self,
        instance: Uuid,
        user_data: String,
        meta_data: BTreeMap<String, String>,
    ) -> Result<(), BackendError> {
        let dir = self.instance_dir(instance);
        tokio::task::spawn_blocking(move || {
            if !dir.is_dir() {
                return Err(BackendError::NotFound);
            }
            Seed::new(instance, Some(&user_data), &meta_data)
                .write_iso(&dir.join("seed.iso"))
                .map_err(BackendError::Launch)
        })
        .await
        .map_err(|e| BackendError::Other(format!("reseed task: {e}")))?
    }
}

/// A tap made by the caller for a VM's one NIC ([`LibvirtBackend::create_on_tap`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tap {
    /// The tap's name.
    pub name: String,
    /// The NIC's MAC address.
    pub mac: [u8; 6],
}

impl Backend for LibvirtBackend {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        let _leases = self.image_data(spec).await?;
        let spec = spec.clone();
        self.0
            .blocking(move |b| b.create_blocking(&spec, None))
            .await?
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        let owner = self.0.config.owner;
        let result = self
            .0
            .conn
            .run(move |c| match our_domain(c, instance, owner)? {
                Some(d) => d.create().map(|_| true),
                None => Ok(false),
            })
            .await;
        match result {
            Ok(true) => Ok(()),
            Ok(false) | Err(ConnError::NoDomain) => Err(BackendError::NotFound),
            Err(e) => Err(launch(e)),
        }
    }

    async fn wait_exit(&self, instance: Uuid) {
        let owner = self.0.config.owner;
        loop {
            let state = self
                .0
                .conn
                .run(move |c| match our_domain(c, instance, owner)? {
                    Some(d) => d.is_active(),
                    None => Ok(false),
                })
                .await;
            match state {
                Ok(false) | Err(ConnError::NoDomain) => return,
                // Running, or libvirt cannot be asked now: not an exit.
                Ok(true) | Err(_) => tokio::time::sleep(self.0.config.poll).await,
            }
        }
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        let owner = self.0.config.owner;
        self.0
            .conn
            .run(move |c| match our_domain(c, instance, owner)? {
                Some(d) => stop_domain(&d),
                None => Ok(()),
            })
            .await
            .map_err(|e| BackendError::Other(e.to_string()))
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        match action {
            // A power cycle, as a power button held down then pressed again: QEMU's reset
            // would do for a disk image, but a kernel image's domain (`on_reboot` destroy,
            // QEMU's -no-reboot) would take a reset for a power-off.
            Action::RebootHard => {
                self.on_domain(instance, "hard reboot", |d| {
                    power_off(d)?;
                    d.create()
                })
                .await
            }
            Action::Pause => self.on_domain(instance, "pause", Domain::suspend).await,
            Action::Unpause => self.on_domain(instance, "unpause", Domain::resume).await,
            Action::Suspend => {
                self.on_domain(instance, "suspend", |d| d.managed_save(0))
                    .await
            }
            Action::Resume => self.on_domain(instance, "resume", Domain::create).await,
            Action::Reboot => self.reboot(instance).await,
        }
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        self.0
            .blocking(move |b| b.resize_blocking(instance, resources))
            .await?
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        self.0
            .blocking(move |b| b.delete_blocking(instance))
            .await?
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        let sampled = self
            .0
            .blocking(|b| {
                let samples = b.sample()?;
                Ok::<_, ConnError>(
                    samples
                        .into_iter()
                        .map(|s| (s, disk_bytes(&b.instance_dir(s.0))))
                        .collect::<Vec<_>>(),
                )
            })
            .await;
        let samples = match sampled {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "no stats from libvirt");
                return Vec::new();
            }
            Err(e) => {
                tracing::debug!(error = %e, "no stats from libvirt");
                return Vec::new();
            }
        };
        let now = Instant::now();
        let mut cpu = self.0.cpu.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(samples.len());
        for ((id, cpu_ns, vcpus, mem_kib), disk) in samples {
            let percent = cpu.get(&id).and_then(|(then, before)| {
                let wall = now.duration_since(*then).as_nanos();
                let used = u128::from(cpu_ns.checked_sub(*before)?);
                let capacity = wall * u128::from(vcpus.max(1));
                (capacity > 0)
                    .then(|| u32::try_from((used * 100 / capacity).min(100)).unwrap_or(100))
            });
            cpu.insert(id, (now, cpu_ns));
            out.push((
                id,
                Usage {
                    mem_mb: u32::try_from(mem_kib / 1024).unwrap_or(u32::MAX),
                    disk_mb: u32::try_from(disk / (1024 * 1024)).unwrap_or(u32::MAX),
                    cpu_percent: percent,
                },
            ));
        }
        out
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        let owner = self.0.config.owner;
        self.0
            .conn
            .run(move |c| {
                let mut out = Vec::new();
                for d in c.list_all_domains(0)? {
                    match ours(&d, owner) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        // Undefined since the list: not there any more.
                        Err(e) if e.code() == ErrorNumber::NoDomain => continue,
                        Err(e) => return Err(e),
                    }
                    let power = match power_of(&d) {
                        Ok(power) => power,
                        Err(e) if e.code() == ErrorNumber::NoDomain => continue,
                        Err(e) => return Err(e),
                    };
                    out.push(Existing {
                        instance: d.get_uuid()?,
                        power,
                    });
                }
                Ok(out)
            })
            .await
            .map_err(|e| BackendError::Other(e.to_string()))
    }

    /// The tail of `console.log` in the instance's directory (the domain's `<serial
    /// type='file'>`); `NotFound` when the directory is not there.
    async fn console(&self, instance: Uuid, lines: usize) -> Result<String, ConsoleError> {
        let dir = self.instance_dir(instance);
        let path = self.console_path(instance);
        tokio::task::spawn_blocking(move || {
            if !dir.is_dir() {
                return Err(ConsoleError::NotFound);
            }
            console::tail_file(&path, lines)
        })
        .await
        .map_err(|e| ConsoleError::Io(e.to_string()))?
    }

    /// `disk.qcow2` through its backing image, flattened by `qemu-img convert`; a running
    /// domain is paused around the copy (QEMU drains and flushes its disk on a pause), one that
    /// was paused, stopped or saved is copied as it is. (A kernel image's instance exports its
    /// data disk: the kernel is not on it.)
    async fn export_disk(&self, instance: Uuid, to: &Path) -> Result<(), ExportError> {
        let disk = self.instance_dir(instance).join("disk.qcow2");
        if !tokio::fs::try_exists(&disk).await.unwrap_or(false) {
            return Err(ExportError::NotFound);
        }
        let owner = self.0.config.owner;
        let paused = self
            .0
            .conn
            .run(move |c| match our_domain(c, instance, owner)? {
                Some(d) if power_of(&d)? == Power::Running => d.suspend().map(|_| true),
                _ => Ok(false),
            })
            .await
            .map_err(|e| ExportError::Failed(format!("pausing for the copy: {e}")))?;
        let to = to.to_path_buf();
        let copied = tokio::task::spawn_blocking(move || images::flatten(&disk, &to))
            .await
            .map_err(|e| ExportError::Failed(e.to_string()))
            .and_then(|r| r.map_err(|e| ExportError::Failed(e.to_string())));
        if paused && let Err(e) = self.on_domain(instance, "unpause", Domain::resume).await {
            tracing::warn!(%instance, error = %e, "resuming after the disk copy failed");
        }
        copied
    }

    async fn attach_volume(
        &self,
        instance: Uuid,
        volume: &crate::model::VolumeSpec,
    ) -> Result<(), BackendError> {
        self.attach(instance, volume).await
    }

    async fn detach_volume(
        &self,
        instance: Uuid,
        volume: &crate::model::VolumeSpec,
        force: bool,
    ) -> Result<(), BackendError> {
        self.detach(instance, volume, force).await
    }

    async fn delete_volume(&self, volume: Uuid) -> Result<(), BackendError> {
        self.remove_volume(volume).await
    }

    /// Tenant NICs are filtered by the net backend around this one.
    async fn filter_port(&self, _instance: Uuid, _nic: &NicSpec) -> Result<(), BackendError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
