//! [`CnciLauncher`]: a network node's agent runs the CNCIs placed on it, each in a network
//! namespace of its own, as `cumulo-cnci` processes or (with a CNCI image,
//! [`LaunchConfig::vm_image`]) as VMs booted from the CNCI guest (`scripts/cnci-guest.sh`: the
//! tiny guest with the same `cumulo-cnci` inside), wrapping the node's [`Backend`] (which runs
//! every other instance).
//!
//! A START is a CNCI's when its spec's role is [`InstanceRole::Cnci`] (the agent's wire boundary
//! reads it from the START's meta data, `cumulo-role: cnci`, which the controller's CNCI START
//! carries). For one:
//!
//! - **create**: a namespace `cumulo-cnci-<12 hex of the UUID>` with loopback up and a veth
//!   pair, `u0` inside, `cn<12 hex>` on the node with a `/32` route to the CNCI's address (the
//!   lowest address of `--cnci-addresses` that no other CNCI holds in the launcher's
//!   reservations, [`ADDRESS_POOL`]); the node forwards
//!   and answers ARP for it on its uplink and for the compute network on the veth
//!   (`ip_forward`, `proxy_arp` on both), so the CNCI is reached from the other nodes and from
//!   the node itself (a dual node's own tunnels); a record in `<state>/cnci/<uuid>.json`
//!   (tenant, namespace, address, process or VM). A process CNCI's address (with the compute
//!   network's prefix length) goes on `u0`, with a default route out of `u0`, on link: the
//!   node's end (which answers ARP for whatever the node routes elsewhere) is the next hop to
//!   every network beyond the compute network's prefix (the CNCI's outbound NAT and public IPs
//!   reach what the node reaches); a VM's guest sets the same route out of its NIC. For a VM, `u0` goes on a bridge `cb0` that also
//!   holds the relay's link-local address, and the domain is defined from the CNCI image with
//!   its settings and credentials in its user data ([`vm_user_data`]) and one NIC
//!   ([`vm_mac`]) on the instance's tap.
//! - **start**: a relay in the namespace to the agent's schedulers (so that the CNCI reaches
//!   them whatever routes its namespace has; TLS goes through it end to end and still checks
//!   each scheduler's name: `cumulo-cnci --scheduler <the agent's> --via <relay>`). A process:
//!   the relay on the namespace's loopback, then `ip netns exec <ns> cumulo-cnci --uuid
//!   <instance> --tenant <tenant> --ip <address> ...` with the node's CNCI certificate
//!   (`--cnci-cert`: the CNCIAGENT role, no UUID bound, so it serves every CNCI of the node),
//!   tunnel kind and VXLAN port, its log in `<state>/cnci/<uuid>.log`. A VM: the tap is made
//!   where libvirt's QEMU runs (`--cnci-tap-netns`, default here), the relay listens on
//!   `169.254.0.1` on `cb0`, the domain boots, and the tap moves onto `cb0` in the namespace.
//! - **wait_exit** resolves when the process exits or the VM stops; **stop** sends SIGTERM
//!   (SIGKILL after 10 s) or powers the VM off (and removes its tap); **delete** stops it,
//!   undefines a VM, deletes the namespace (the veth pair and its route go with it) and the
//!   record.
//! - **list** (an agent restart): a CNCI VM that an earlier run left running is re-attached (a
//!   new relay; its `cumulo-cnci` reconnects through it) and listed as running; a process that
//!   an earlier run left is stopped (the relay it used died with that run) and listed as not
//!   running, as is every other CNCI with a record (the core reports those lost, and the
//!   controller starts them again). A CNCI VM is a domain of the node's libvirt backend too:
//!   it is listed once, as a CNCI.
//!
//! Namespaces and links are made with the `ip` binary (iproute2).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::backend::libvirt::{LibvirtBackend, Tap};
use crate::backend::{Backend, BackendError, ConsoleError, Existing, Power};
use crate::model::{Action, InstanceRole, InstanceSpec, NicSpec, Resources, Usage};
use crate::net::Cidr;
use crate::netns::listen_in;
use store::{MemoryReservations, ReservationStore, StoreError};

pub mod credentials;
mod process;
pub mod routes;
mod vm;

pub use process::clean_up;
use process::{alive, signal};
use vm::{LINK_PREFIX, VM_BRIDGE};
pub use vm::{vm_mac, vm_user_data};

/// The reservation pool of CNCI addresses (keys: the address; owners: the CNCI's UUID).
pub const ADDRESS_POOL: &str = "cnci-ip";

/// How a network node runs its CNCIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchConfig {
    /// `cumulo-cnci`.
    pub binary: PathBuf,
    /// The cluster CA (PEM).
    pub ca_cert: PathBuf,
    /// A certificate (CNCIAGENT, no UUID bound) and its key, both PEM files, for the CNCIs whose
    /// START carried no credentials of their own ([`credentials`]); `None`: such a CNCI fails
    /// to start, saying why.
    pub shared: Option<(PathBuf, PathBuf)>,
    /// The node's link on the compute network (where it answers ARP for its CNCIs).
    pub uplink: String,
    /// The addresses CNCIs take (IPv4).
    pub addresses: Cidr,
    /// The compute network's prefix length (the CNCIs' addresses get it).
    pub prefix: u8,
    /// The schedulers, `host:port`, as the agent reaches them.
    pub servers: Vec<String>,
    /// `--tunnel` for the CNCIs.
    pub tunnel: String,
    /// `--vxlan-port` for the CNCIs.
    pub vxlan_port: u16,
    /// Where records live (`<state>/cnci`).
    pub dir: PathBuf,
    /// CNCIs run as VMs booted from this image (the libvirt backend's image store), not as
    /// processes.
    pub vm_image: Option<String>,
    /// The network namespace libvirt's QEMU runs in (`None`: ours), where a CNCI VM's tap is
    /// made.
    pub tap_netns: Option<PathBuf>,
    /// The floating range (`--floating-range`): the public addresses a CNCI may have routed to
    /// it ([`routes`]).
    pub floating: ipnet::Ipv4Net,
    /// Management networks no tenant may open a connection to through its CNCI
    /// (`--cnci-protect`), beside the compute network and the node's own addresses
    /// ([`protected`]).
    pub protect: Vec<Cidr>,
}

/// What a CNCI at `ip` is told to protect (`cumulo-cnci --protect`): its compute network (`ip`
/// with `prefix`), each of `node_addresses` (the node's own IPv4 addresses, `/32`), and the
/// configured networks; as the `--protect` value.
pub fn protected(c: &LaunchConfig, ip: Ipv4Addr, node_addresses: &[Ipv4Addr]) -> String {
    let mut nets: Vec<Cidr> = Vec::new();
    if let Some(compute) = Cidr::new(std::net::IpAddr::V4(ip), c.prefix) {
        nets.push(compute);
    }
    nets.extend(
        node_addresses
            .iter()
            .filter_map(|a| Cidr::new(std::net::IpAddr::V4(*a), 32)),
    );
    nets.extend(c.protect.iter().copied());
    crate::cnci::nat::protected_elements(&nets).join(",")
}

/// This node's own IPv4 addresses (`ip -4 -o addr show`, in the agent's namespace), loopback
/// left out; none if they cannot be read (logged). A few milliseconds, once per CNCI start.
pub fn node_addresses() -> Vec<Ipv4Addr> {
    match std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
    {
        Ok(out) if out.status.success() => parse_addresses(&String::from_utf8_lossy(&out.stdout)),
        Ok(out) => {
            tracing::warn!(stderr = %String::from_utf8_lossy(&out.stderr), "the node's addresses not read: they are not protected");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "the node's addresses not read: they are not protected");
            Vec::new()
        }
    }
}

/// The IPv4 addresses in `ip -4 -o addr show` output (`inet A.B.C.D/N`), loopback left out.
pub fn parse_addresses(text: &str) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet")?;
            let addr: Ipv4Addr = words.next()?.split('/').next()?.parse().ok()?;
            (!addr.is_loopback()).then_some(addr)
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// What is kept of a CNCI.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// Its tenant.
    pub tenant: Uuid,
    /// Its namespace.
    pub ns: String,
    /// Its address on the compute network.
    pub ip: Ipv4Addr,
    /// The process of its last start.
    #[serde(default)]
    pub pid: Option<i32>,
    /// Whether it runs as a VM (else as a process).
    #[serde(default)]
    pub vm: bool,
    /// A VM's: the certificate (PEM) its seed holds; a start with other credentials kept for it
    /// (a restart's START brought new ones) rewrites the seed first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeded: Option<String>,
}

struct Running {
    /// The process (`None`: a VM).
    pid: Option<i32>,
    exited: watch::Receiver<bool>,
    relay: CancellationToken,
}

#[derive(Default)]
struct State {
    records: BTreeMap<Uuid, Record>,
    running: BTreeMap<Uuid, Running>,
}

/// See the module documentation.
pub struct CnciLauncher<B> {
    inner: B,
    config: Option<LaunchConfig>,
    state: Arc<Mutex<State>>,
    /// What runs CNCIs as VMs (with [`LaunchConfig::vm_image`]).
    vms: Option<LibvirtBackend>,
    /// Where CNCI addresses are reserved ([`ADDRESS_POOL`]): in memory on the node by
    /// default ([`CnciLauncher::with_reservations`] for a shared one).
    reservations: Arc<dyn ReservationStore>,
    /// Serializes the CNCIs' route changes ([`routes`]).
    route_lock: Arc<tokio::sync::Mutex<()>>,
}

/// Whether a START's spec is a CNCI's.
pub fn is_cnci(spec: &InstanceSpec) -> bool {
    spec.role == InstanceRole::Cnci
}

/// The namespace of a CNCI.
pub fn ns_name(instance: Uuid) -> String {
    format!("cumulo-cnci-{}", &instance.simple().to_string()[..12])
}

fn launch(e: impl std::fmt::Display) -> BackendError {
    BackendError::Launch(e.to_string())
}

/// The node's end of a CNCI's veth pair.
pub fn host_end(instance: Uuid) -> String {
    format!("cn{}", &instance.simple().to_string()[..12])
}

/// Runs `ip ARGS`; its stderr as the error.
async fn ip(args: &[&str]) -> Result<(), BackendError> {
    ip_in(None, args).await
}

/// Where a CNCI VM's relay to the schedulers listens, on the bridge in its namespace.
const RELAY_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);
/// The relay's port.
const RELAY_PORT: u16 = 8443;
/// Runs `ip ARGS` in network namespace `netns` (a path, entered with `nsenter`; `None`:
/// ours); its stderr as the error.
async fn ip_in(netns: Option<&std::path::Path>, args: &[&str]) -> Result<(), BackendError> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = tokio::process::Command::new("nsenter");
            c.arg(format!("--net={}", ns.display())).arg("ip");
            c
        }
        None => tokio::process::Command::new("ip"),
    };
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| BackendError::Network(format!("ip: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let place = netns.map(|ns| format!(" (in {})", ns.display()));
    Err(BackendError::Network(format!(
        "ip {}{}: {}",
        args.join(" "),
        place.unwrap_or_default(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// Forwards every connection to `listener` to the one of `servers` it asks for (its relay
/// request, `ssntp_net::relay`: a CNCI holds a session with every scheduler), until `stop`.
fn relay(listener: std::net::TcpListener, servers: Vec<String>, stop: CancellationToken) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                a = listener.accept() => a,
            };
            let Ok((mut inbound, _)) = accepted else {
                continue;
            };
            // Closed with a reset, never left in FIN_WAIT towards a peer that is gone (a
            // stopped VM): such a socket would keep the CNCI's namespace alive for minutes.
            let _ = inbound.set_zero_linger();
            let servers = servers.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let server = match ssntp_net::relay::read_request(&mut inbound, &servers).await {
                    Ok(server) => server,
                    Err(e) => {
                        tracing::warn!("CNCI relay: {e}");
                        return;
                    }
                };
                if let Ok(mut out) = tokio::net::TcpStream::connect(&server).await {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut out) => {}
                    }
                }
            });
        }
    });
}

impl<B: Backend> CnciLauncher<B> {
    /// Wraps `inner`; reads the records of an earlier run. Without a configuration every call
    /// goes to `inner` (a node that runs no CNCIs).
    pub fn new(inner: B, config: Option<LaunchConfig>) -> Result<CnciLauncher<B>, BackendError> {
        let mut state = State::default();
        let Some(config) = config else {
            return Ok(CnciLauncher {
                inner,
                config: None,
                state: Arc::new(Mutex::new(state)),
                vms: None,
                reservations: Arc::new(MemoryReservations::new()),
                route_lock: Arc::default(),
            });
        };
        std::fs::create_dir_all(&config.dir).map_err(launch)?;
        for entry in std::fs::read_dir(&config.dir).map_err(launch)? {
            let path = entry.map_err(launch)?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let id = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<Uuid>().ok());
            let record = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Record>(&b).ok());
            match (id, record) {
                (Some(id), Some(r)) => {
                    state.records.insert(id, r);
                }
                _ => tracing::warn!(path = %path.display(), "unreadable CNCI record: ignored"),
            }
        }
        let memory: Arc<dyn ReservationStore> = Arc::new(MemoryReservations::new());
        CnciLauncher {
            inner,
            config: Some(config),
            state: Arc::new(Mutex::new(state)),
            vms: None,
            reservations: memory.clone(),
            route_lock: Arc::default(),
        }
        .with_reservations(memory)
    }

    /// Reserves CNCI addresses in `reservations` (a store shared by several launchers: an
    /// etcd store off the host), holding there the addresses of the CNCIs recorded here.
    pub fn with_reservations(
        mut self,
        reservations: Arc<dyn ReservationStore>,
    ) -> Result<CnciLauncher<B>, BackendError> {
        let held: Vec<(Uuid, Ipv4Addr)> = self
            .lock()
            .records
            .iter()
            .map(|(id, r)| (*id, r.ip))
            .collect();
        for (id, ip) in held {
            reservations
                .reserve(ADDRESS_POOL, &ip.to_string(), &id.to_string())
                .map_err(|e| BackendError::Network(format!("CNCI {id}'s address {ip}: {e}")))?;
        }
        self.reservations = reservations;
        Ok(self)
    }

    /// Frees whatever `id` holds in the reservations (a deleted CNCI, or one whose start
    /// failed part-way).
    fn release(&self, id: Uuid) {
        if let Err(e) = self.reservations.release_owner(&id.to_string()) {
            tracing::warn!(cnci = %id, error = %e, "CNCI address not released");
        }
    }

    /// CNCIs run as VMs through `vms` (the node's libvirt backend, also inside `inner`) when
    /// the configuration names a VM image.
    pub fn with_vms(mut self, vms: LibvirtBackend) -> CnciLauncher<B> {
        self.vms = Some(vms);
        self
    }

    /// The VM backend and image when CNCIs run as VMs here.
    fn vm_mode(&self) -> Result<Option<(&LibvirtBackend, &str)>, BackendError> {
        let Some(image) = self.config()?.vm_image.as_deref() else {
            return Ok(None);
        };
        let vms = self.vms.as_ref().ok_or_else(|| {
            launch("--cnci-image: CNCIs run as VMs only with the libvirt backend")
        })?;
        Ok(Some((vms, image)))
    }

    /// Serves CNCI `id`'s route channel on `listener` until `stop`.
    fn serve_routes(
        &self,
        id: Uuid,
        listener: std::net::TcpListener,
        stop: CancellationToken,
    ) -> Result<(), BackendError> {
        let ctx = routes::RouteContext {
            cnci: id,
            link: host_end(id),
            range: self.config()?.floating,
            lock: self.route_lock.clone(),
        };
        routes::serve(listener, ctx, stop);
        Ok(())
    }

    fn config(&self) -> Result<&LaunchConfig, BackendError> {
        self.config
            .as_ref()
            .ok_or_else(|| BackendError::Launch("this node runs no CNCIs".into()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record_path(&self, id: Uuid) -> Result<PathBuf, BackendError> {
        Ok(self.config()?.dir.join(format!("{id}.json")))
    }

    fn save(&self, id: Uuid, r: &Record) -> Result<(), BackendError> {
        let bytes = serde_json::to_vec(r).map_err(launch)?;
        let path = self.record_path(id)?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes).map_err(launch)?;
        std::fs::rename(&tmp, &path).map_err(launch)
    }

    fn is_ours(&self, id: Uuid) -> bool {
        self.lock().records.contains_key(&id)
    }

    /// The lowest free address of the pool (not its network or broadcast address), reserved
    /// for `id`.
    fn allocate(&self, id: Uuid) -> Result<Ipv4Addr, BackendError> {
        let Some(pool) = self.config()?.addresses.v4() else {
            return Err(BackendError::Network(
                "--cnci-addresses must be IPv4".into(),
            ));
        };
        let owner = id.to_string();
        // A /31 or /32 has no address but its network and broadcast ones to give.
        let hosts = pool.trunc().hosts().filter(|_| pool.prefix_len() <= 30);
        for addr in hosts {
            match self
                .reservations
                .reserve(ADDRESS_POOL, &addr.to_string(), &owner)
            {
                Ok(()) => return Ok(addr),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => {
                    return Err(BackendError::Network(format!(
                        "reserving a CNCI address: {e}"
                    )));
                }
            }
        }
        Err(BackendError::Network("no free CNCI address".into()))
    }

    async fn make(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        let c = self.config()?;
        let id = spec.instance;
        if self.is_ours(id) {
            return Err(BackendError::Exists);
        }
        let vm = self.vm_mode()?;
        let addr = self.allocate(id)?;
        let ns = ns_name(id);
        let mut record = Record {
            tenant: spec.tenant,
            ns: ns.clone(),
            ip: addr,
            pid: None,
            vm: vm.is_some(),
            seeded: None,
        };
        // Held before the kernel is touched: a concurrent create takes another address.
        self.lock().records.insert(id, record.clone());
        let made = async {
            // A namespace of this instance without a record is a crash's leftover.
            let _ = ip(&["netns", "del", &ns]).await;
            ip(&["netns", "add", &ns]).await?;
            // A veth pair: `u0` in the CNCI's namespace, `cn<12 hex>` here, routed and
            // proxy-ARPed (so the node itself, e.g. a dual node's own tunnels, reaches the CNCI
            // as well as the rest of the compute network does).
            let host = host_end(id);
            ip(&[
                "link", "add", &host, "type", "veth", "peer", "name", "u0", "netns", &ns,
            ])
            .await?;
            ip(&["link", "set", &host, "up"]).await?;
            for knob in [
                "ip_forward".to_string(),
                format!("conf/{host}/proxy_arp"),
                format!("conf/{}/proxy_arp", c.uplink),
            ] {
                std::fs::write(format!("/proc/sys/net/ipv4/{knob}"), "1")
                    .map_err(|e| BackendError::Network(format!("sysctl {knob}: {e}")))?;
            }
            ip(&["route", "replace", &format!("{addr}/32"), "dev", &host]).await?;
            if let Some((vms, image)) = vm {
                // The VM holds the address: `u0` and its tap (once it runs) on a bridge, the
                // relay to the schedulers on a link-local address of the bridge.
                let relay = format!("{RELAY_ADDR}/{LINK_PREFIX}");
                ip(&["-n", &ns, "link", "add", VM_BRIDGE, "type", "bridge"]).await?;
                ip(&["-n", &ns, "link", "set", "u0", "master", VM_BRIDGE]).await?;
                ip(&["-n", &ns, "addr", "add", &relay, "dev", VM_BRIDGE]).await?;
                ip(&["-n", &ns, "link", "set", VM_BRIDGE, "up"]).await?;
                ip(&["-n", &ns, "link", "set", "u0", "up"]).await?;
                ip(&["-n", &ns, "link", "set", "lo", "up"]).await?;
                let mut guest = spec.clone();
                guest.image = image.to_string();
                guest.nic = None;
                guest.user_data = Some(vm_user_data(c, id, &record)?);
                record.seeded = Some(vm::seeded_cert(c, id)?);
                self.save(id, &record)?;
                self.lock().records.insert(id, record.clone());
                let tap = Tap {
                    name: crate::net::tap_name(id),
                    mac: vm_mac(addr),
                };
                return vms.create_on_tap(&guest, tap).await;
            }
            let cidr = format!("{addr}/{}", c.prefix);
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", "u0"]).await?;
            ip(&["-n", &ns, "link", "set", "u0", "up"]).await?;
            ip(&["-n", &ns, "link", "set", "lo", "up"]).await?;
            // Beyond the compute network: the node's end of the pair, which proxy-ARPs for
            // every address the node routes out of another link.
            ip(&["-n", &ns, "route", "replace", "default", "dev", "u0"]).await?;
            self.save(id, &record)
        };
        if let Err(e) = made.await {
            let _ = ip(&["netns", "del", &ns]).await;
            let _ = std::fs::remove_file(self.record_path(id)?);
            self.lock().records.remove(&id);
            self.release(id);
            return Err(e);
        }
        tracing::info!(cnci = %id, tenant = %spec.tenant, ip = %addr, %ns, "CNCI namespace made");
        Ok(())
    }

    async fn halt(&self, id: Uuid) {
        let running = self.lock().running.remove(&id);
        let Some(r) = running else {
            return;
        };
        let Some(pid) = r.pid else {
            // A VM: the relay closed, the VM powered off, its tap (made by us, so it outlives
            // QEMU) removed.
            r.relay.cancel();
            if let Some(vms) = &self.vms
                && let Err(e) = vms.stop(id).await
            {
                tracing::warn!(cnci = %id, error = %e, "CNCI VM not stopped");
            }
            let ns = self.lock().records.get(&id).map(|r| r.ns.clone());
            if let Some(ns) = ns {
                let _ = ip(&["-n", &ns, "link", "del", &crate::net::tap_name(id)]).await;
            }
            return;
        };
        signal(pid, rustix::process::Signal::TERM);
        let mut exited = r.exited.clone();
        let waited = tokio::time::timeout(Duration::from_secs(10), exited.wait_for(|e| *e))
            .await
            .is_ok();
        if !waited {
            tracing::warn!(cnci = %id, "CNCI did not stop within 10 s: killed");
            signal(pid, rustix::process::Signal::KILL);
            let _ = tokio::time::timeout(Duration::from_secs(5), exited.wait_for(|e| *e)).await;
        }
        r.relay.cancel();
    }
}

impl<B: Backend> Backend for CnciLauncher<B> {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        if is_cnci(spec) {
            self.make(spec).await
        } else {
            self.inner.create(spec).await
        }
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        if self.is_ours(instance) {
            self.launch(instance).await
        } else {
            self.inner.start(instance).await
        }
    }

    async fn wait_exit(&self, instance: Uuid) {
        if !self.is_ours(instance) {
            return self.inner.wait_exit(instance).await;
        }
        let rx = self.lock().running.get(&instance).map(|r| r.exited.clone());
        if let Some(mut rx) = rx {
            let _ = rx.wait_for(|e| *e).await;
        }
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        if self.is_ours(instance) {
            self.halt(instance).await;
            Ok(())
        } else {
            self.inner.stop(instance).await
        }
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        let Some(record) = self.lock().records.get(&instance).cloned() else {
            return self.inner.delete(instance).await;
        };
        self.halt(instance).await;
        if record.vm {
            match &self.vms {
                Some(vms) => vms.delete(instance).await?,
                None => {
                    tracing::warn!(cnci = %instance, "a CNCI VM's record, but no VM backend: its domain is left")
                }
            }
        }
        if let Err(e) = ip(&["netns", "del", &record.ns]).await {
            tracing::warn!(cnci = %instance, error = %e, "CNCI namespace not deleted");
        }
        match std::fs::remove_file(self.record_path(instance)?) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(launch(e)),
            _ => {}
        }
        let _ = std::fs::remove_file(self.config()?.dir.join(format!("{instance}.log")));
        credentials::remove(&self.config()?.dir, instance);
        self.lock().records.remove(&instance);
        self.release(instance);
        tracing::info!(cnci = %instance, "CNCI deleted");
        Ok(())
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        if self.is_ours(instance) {
            Err(BackendError::Other(format!(
                "a CNCI cannot {}: stop and start it instead",
                action.name()
            )))
        } else {
            self.inner.action(instance, action).await
        }
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        if self.is_ours(instance) {
            Err(BackendError::Other("a CNCI is not resized".into()))
        } else {
            self.inner.resize(instance, resources).await
        }
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        self.inner.stats().await
    }

    /// A tenant instance's volumes are the inner backend's; a CNCI takes none.
    async fn attach_volume(
        &self,
        instance: Uuid,
        volume: &crate::model::VolumeSpec,
    ) -> Result<(), BackendError> {
        if self.is_ours(instance) {
            return Err(BackendError::Unsupported("a CNCI takes no volumes".into()));
        }
        self.inner.attach_volume(instance, volume).await
    }

    async fn detach_volume(
        &self,
        instance: Uuid,
        volume: &crate::model::VolumeSpec,
        force: bool,
    ) -> Result<(), BackendError> {
        if self.is_ours(instance) {
            return Ok(());
        }
        self.inner.detach_volume(instance, volume, force).await
    }

    async fn delete_volume(&self, volume: Uuid) -> Result<(), BackendError> {
        self.inner.delete_volume(volume).await
    }

    /// A tenant instance's disk is the inner backend's; a CNCI's is not for snapshots.
    async fn export_disk(
        &self,
        instance: Uuid,
        to: &std::path::Path,
    ) -> Result<(), crate::backend::ExportError> {
        if self.is_ours(instance) {
            return Err(crate::backend::ExportError::Unsupported(
                "a CNCI's disk is not exported".into(),
            ));
        }
        self.inner.export_disk(instance, to).await
    }

    /// A CNCI VM's log is the VM backend's; a CNCI process has none.
    async fn console(&self, instance: Uuid, lines: usize) -> Result<String, ConsoleError> {
        if !self.is_ours(instance) {
            return self.inner.console(instance, lines).await;
        }
        match &self.vms {
            Some(vms) => vms.console(instance, lines).await,
            None => Err(ConsoleError::NotFound),
        }
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        let mut all = self.inner.list().await?;
        let records: Vec<(Uuid, Record)> = self
            .lock()
            .records
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        // A CNCI VM is a domain of the node's libvirt backend too: listed once, as ours.
        let vm_left_running: Vec<Uuid> = all
            .iter()
            .filter(|e| {
                e.power.is_active() && records.iter().any(|(id, r)| r.vm && *id == e.instance)
            })
            .map(|e| e.instance)
            .collect();
        all.retain(|e| !records.iter().any(|(id, _)| *id == e.instance));
        for (id, r) in records {
            let mut running = self.lock().running.contains_key(&id);
            if !running && vm_left_running.contains(&id) {
                // An earlier run's VM: re-attached with a new relay (its cumulo-cnci
                // reconnects through it), or powered off if that fails.
                match self.reattach_vm(id, &r) {
                    Ok(()) => running = true,
                    Err(e) => {
                        tracing::warn!(cnci = %id, error = %e, "CNCI VM not re-attached: stopped");
                        if let Some(vms) = &self.vms {
                            let _ = vms.stop(id).await;
                        }
                    }
                }
            }
            if !running && let Some(pid) = r.pid.filter(|p| alive(*p)) {
                // An earlier run's process, whose relay died with that run: stopped.
                tracing::info!(cnci = %id, pid, "stopping a CNCI an earlier run left");
                signal(pid, rustix::process::Signal::TERM);
            }
            all.push(Existing {
                instance: id,
                power: if running { Power::Running } else { Power::Off },
            });
        }
        Ok(all)
    }

    /// A CNCI's NIC is not on a tenant bridge: nothing to filter.
    async fn serve_metadata(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        if self.is_ours(spec.instance) {
            Ok(())
        } else {
            self.inner.serve_metadata(spec).await
        }
    }

    async fn filter_port(&self, instance: Uuid, nic: &NicSpec) -> Result<(), BackendError> {
        if self.is_ours(instance) {
            return Ok(());
        }
        self.inner.filter_port(instance, nic).await
    }
}

#[cfg(test)]
mod tests;
