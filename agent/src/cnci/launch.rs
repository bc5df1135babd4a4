//! [`CnciLauncher`]: a network node's agent runs the CNCIs placed on it, each in a network
//! namespace of its own, as `cumulo-cnci` processes or (with a CNCI image,
//! [`LaunchConfig::vm_image`]) as VMs booted from the CNCI guest (`scripts/cnci-guest.sh`: the
//! tiny guest with the same `cumulo-cnci` inside), wrapping the node's [`Backend`] (which runs
//! every other instance).
//!
//! A START is a CNCI's when its meta data says `cumulo-role: cnci` (what the controller's CNCI
//! START carries). For one:
//!
//! - **create**: a namespace `cumulo-cnci-<12 hex of the UUID>` with loopback up and a veth
//!   pair, `u0` inside, `cn<12 hex>` on the node with a `/32` route to the CNCI's address (the
//!   lowest address of `--cnci-addresses` no other CNCI of this node holds); the node forwards
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
use crate::backend::{Backend, BackendError, Existing};
use crate::model::{InstanceSpec, Usage};
use crate::net::Cidr;
use controller::store::{MemoryReservations, ReservationStore, StoreError};

/// The reservation pool of CNCI addresses (keys: the address; owners: the CNCI's UUID).
pub const ADDRESS_POOL: &str = "cnci-ip";

/// How a network node runs its CNCIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchConfig {
    /// `cumulo-cnci`.
    pub binary: PathBuf,
    /// The cluster CA (PEM).
    pub ca_cert: PathBuf,
    /// The CNCIs' certificate (CNCIAGENT, no UUID bound) and key.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
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
}

/// Whether a START's spec is a CNCI's.
pub fn is_cnci(spec: &InstanceSpec) -> bool {
    spec.meta_data.get("cumulo-role").map(String::as_str) == Some("cnci")
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
/// The CNCI VM's own link-local address, beside its compute network address.
const GUEST_LINK_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 2);
/// The link-local network's prefix length.
const LINK_PREFIX: u8 = 24;
/// The relay's port.
const RELAY_PORT: u16 = 8443;
/// The bridge in a CNCI VM's namespace (its tap and `u0`).
const VM_BRIDGE: &str = "cb0";

/// A CNCI VM's MAC: `02:cc` and its IPv4 address.
pub fn vm_mac(addr: Ipv4Addr) -> [u8; 6] {
    let [a, b, c, d] = addr.octets();
    [2, 0xcc, a, b, c, d]
}

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

/// What a CNCI VM's guest reads from its user data (`scripts/cnci-guest.sh` documents the
/// format): `#cumulo-cnci`, then `KEY=value` lines for `cumulo-cnci`'s environment and the
/// guest's addresses, then the CA, certificate and key as `--- file NAME` sections.
pub fn vm_user_data(c: &LaunchConfig, id: Uuid, r: &Record) -> Result<String, BackendError> {
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).map_err(|e| launch(format!("{}: {e}", p.display())))
    };
    let mut out = String::from("#cumulo-cnci\n");
    let vars = [
        ("CUMULO_CNCI_UUID", id.to_string()),
        ("CUMULO_CNCI_TENANT", r.tenant.to_string()),
        ("CUMULO_CNCI_IP", r.ip.to_string()),
        ("CUMULO_CNCI_PREFIX", c.prefix.to_string()),
        (
            "CUMULO_CNCI_LINK_ADDR",
            format!("{GUEST_LINK_ADDR}/{LINK_PREFIX}"),
        ),
        ("CUMULO_CNCI_SCHEDULER", c.servers.join(",")),
        ("CUMULO_CNCI_VIA", format!("{RELAY_ADDR}:{RELAY_PORT}")),
        ("CUMULO_CNCI_TUNNEL", c.tunnel.clone()),
        ("CUMULO_CNCI_VXLAN_PORT", c.vxlan_port.to_string()),
    ];
    for (k, v) in vars {
        // The guest takes only plain values (it checks again).
        if !v
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ".:,/-_[]".contains(ch))
        {
            return Err(launch(format!("{k}: {v:?} is not a plain value")));
        }
        out.push_str(&format!("{k}={v}\n"));
    }
    for (name, path) in [
        ("ca.pem", &c.ca_cert),
        ("cert.pem", &c.cert),
        ("key.pem", &c.key),
    ] {
        out.push_str(&format!("--- file {name}\n"));
        let text = read(path)?;
        out.push_str(text.trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// Whether process `pid` runs (and is not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next())
        })
        .flatten()
        .is_some_and(|state| state != 'Z' && state != 'X')
}

fn signal(pid: i32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// A listener on `at` in namespace `ns` (bound from a thread moved there).
fn listen_in(ns: &str, at: (Ipv4Addr, u16)) -> std::io::Result<std::net::TcpListener> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let l = std::net::TcpListener::bind(at)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("the relay's thread panicked")))
}

/// Forwards every connection to `listener` to the first of `servers` that answers, until
/// `stop`.
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
                for s in &servers {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(s).await {
                        tokio::select! {
                            _ = stop.cancelled() => {}
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut out) => {}
                        }
                        return;
                    }
                }
            });
        }
    });
}

/// Watches a CNCI VM until it stops, then stops its relay: `true` on the channel then.
fn watch_vm(vms: LibvirtBackend, id: Uuid, relay: CancellationToken) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        vms.wait_exit(id).await;
        tracing::info!(cnci = %id, "CNCI VM stopped");
        relay.cancel();
        let _ = tx.send(true);
    });
    rx
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
        let pool = self.config()?.addresses;
        let std::net::IpAddr::V4(base) = pool.addr else {
            return Err(BackendError::Network(
                "--cnci-addresses must be IPv4".into(),
            ));
        };
        let prefix = u32::from(pool.prefix.min(32));
        let size = 1u64 << (32 - prefix);
        let start = u32::from(base) & u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
        let owner = id.to_string();
        for addr in (1..size.saturating_sub(1))
            .filter_map(|i| u32::try_from(i).ok())
            .map(|i| Ipv4Addr::from(start.wrapping_add(i)))
        {
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
        let record = Record {
            tenant: spec.tenant,
            ns: ns.clone(),
            ip: addr,
            pid: None,
            vm: vm.is_some(),
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
                self.save(id, &record)?;
                let mut guest = spec.clone();
                guest.image = image.to_string();
                guest.nic = None;
                guest.user_data = Some(vm_user_data(c, id, &record)?);
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

    async fn launch(&self, id: Uuid) -> Result<(), BackendError> {
        let Some(mut record) = self.lock().records.get(&id).cloned() else {
            return Err(BackendError::NotFound);
        };
        if self.lock().running.contains_key(&id) {
            return Ok(());
        }
        if record.vm {
            return self.launch_vm(id, &record).await;
        }
        let c = self.config()?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(c.dir.join(format!("{id}.log")))
            .map_err(launch)?;
        let listener = listen_in(&record.ns, (Ipv4Addr::LOCALHOST, 0)).map_err(launch)?;
        let port = listener.local_addr().map_err(launch)?.port();
        let stop_relay = CancellationToken::new();
        relay(listener, c.servers.clone(), stop_relay.clone());
        let spawned = tokio::process::Command::new("ip")
            .args(["netns", "exec", &record.ns])
            .arg(&c.binary)
            .arg("--ca-cert")
            .arg(&c.ca_cert)
            .arg("--cert")
            .arg(&c.cert)
            .arg("--key")
            .arg(&c.key)
            .args(["--scheduler", &c.servers.join(",")])
            .args(["--via", &format!("127.0.0.1:{port}")])
            .args(["--uuid", &id.to_string()])
            .args(["--tenant", &record.tenant.to_string()])
            .args(["--ip", &record.ip.to_string()])
            .args(["--tunnel", &c.tunnel])
            .args(["--vxlan-port", &c.vxlan_port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(false)
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                stop_relay.cancel();
                return Err(launch(format!("{}: {e}", c.binary.display())));
            }
        };
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| launch("the CNCI exited at once"))?;
        let (tx, rx) = watch::channel(false);
        let relay_stop = stop_relay.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            tracing::info!(cnci = %id, ?status, "CNCI process exited");
            relay_stop.cancel();
            let _ = tx.send(true);
        });
        record.pid = Some(pid);
        self.save(id, &record)?;
        let mut s = self.lock();
        s.records.insert(id, record);
        s.running.insert(
            id,
            Running {
                pid: Some(pid),
                exited: rx,
                relay: stop_relay,
            },
        );
        tracing::info!(cnci = %id, pid, "CNCI process started");
        Ok(())
    }

    /// Starts a CNCI VM: its tap where QEMU opens it, the relay, the domain; then the tap
    /// moves onto the bridge in the CNCI's namespace (before the guest has booted far enough
    /// to send anything).
    async fn launch_vm(&self, id: Uuid, record: &Record) -> Result<(), BackendError> {
        let c = self.config()?;
        let Some((vms, _)) = self.vm_mode()? else {
            return Err(launch(
                "a CNCI VM's record, but CNCIs do not run as VMs here",
            ));
        };
        let tap = crate::net::tap_name(id);
        let netns = c.tap_netns.as_deref();
        // A tap of an earlier start, where QEMU runs or in the CNCI's namespace.
        let _ = ip_in(netns, &["link", "del", &tap]).await;
        let _ = ip(&["-n", &record.ns, "link", "del", &tap]).await;
        ip_in(netns, &["tuntap", "add", "dev", &tap, "mode", "tap"]).await?;
        let listener = listen_in(&record.ns, (RELAY_ADDR, RELAY_PORT)).map_err(launch)?;
        let stop_relay = CancellationToken::new();
        relay(listener, c.servers.clone(), stop_relay.clone());
        let started = async {
            vms.start(id).await?;
            ip_in(netns, &["link", "set", &tap, "netns", &record.ns]).await?;
            ip(&["-n", &record.ns, "link", "set", &tap, "master", VM_BRIDGE]).await?;
            ip(&["-n", &record.ns, "link", "set", &tap, "up"]).await
        };
        if let Err(e) = started.await {
            stop_relay.cancel();
            let _ = vms.stop(id).await;
            let _ = ip_in(netns, &["link", "del", &tap]).await;
            return Err(e);
        }
        let exited = watch_vm(vms.clone(), id, stop_relay.clone());
        self.lock().running.insert(
            id,
            Running {
                pid: None,
                exited,
                relay: stop_relay,
            },
        );
        tracing::info!(cnci = %id, ns = %record.ns, %tap, "CNCI VM started");
        Ok(())
    }

    /// Takes over a CNCI VM an earlier run of the agent started: its relay again, and a
    /// watcher of its end.
    fn reattach_vm(&self, id: Uuid, record: &Record) -> Result<(), BackendError> {
        let c = self.config()?;
        let Some((vms, _)) = self.vm_mode()? else {
            return Err(launch("CNCIs do not run as VMs here"));
        };
        let listener = listen_in(&record.ns, (RELAY_ADDR, RELAY_PORT)).map_err(launch)?;
        let stop_relay = CancellationToken::new();
        relay(listener, c.servers.clone(), stop_relay.clone());
        let exited = watch_vm(vms.clone(), id, stop_relay.clone());
        self.lock().running.insert(
            id,
            Running {
                pid: None,
                exited,
                relay: stop_relay,
            },
        );
        tracing::info!(cnci = %id, "CNCI VM re-attached");
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
        self.lock().records.remove(&instance);
        self.release(instance);
        tracing::info!(cnci = %instance, "CNCI deleted");
        Ok(())
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        self.inner.stats().await
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
            .filter(|e| e.running && records.iter().any(|(id, r)| r.vm && *id == e.instance))
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
                running,
            });
        }
        Ok(all)
    }
}

/// What a node leaves of its CNCIs when it goes for good (`cumulo down`, a test's end): every
/// CNCI recorded in `dir` (the launcher's records, [`LaunchConfig::dir`]) has its process
/// stopped (SIGTERM, SIGKILL after `grace`; only a live `cumulo-cnci`), its namespace deleted
/// (only one named as this launcher names them) and its record and log removed. The agent must
/// be stopped first: it would start them again. Returns the namespaces deleted. CNCI VMs are
/// the libvirt backend's domains, stopped and undefined with the node's other domains.
pub fn clean_up(dir: &std::path::Path, grace: Duration) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut deleted = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<Uuid>().ok());
        let (Some(id), Some("json")) = (id, path.extension().and_then(|e| e.to_str())) else {
            continue;
        };
        // Records are small; anything large or unreadable is not one.
        let Some(r) = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.len() <= 64 * 1024)
            .and_then(|_| std::fs::read(&path).ok())
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
        else {
            continue;
        };
        if let Some(pid) = r.pid.filter(|p| is_cnci_process(*p)) {
            signal(pid, rustix::process::Signal::TERM);
            let until = std::time::Instant::now() + grace;
            while alive(pid) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(pid) {
                signal(pid, rustix::process::Signal::KILL);
            }
        }
        if r.ns == ns_name(id)
            && std::path::Path::new("/run/netns").join(&r.ns).exists()
            && std::process::Command::new("ip")
                .args(["netns", "del", &r.ns])
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| o.status.success())
        {
            deleted.push(r.ns);
        }
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(dir.join(format!("{id}.log")));
    }
    deleted
}

/// Whether `pid` is a live `cumulo-cnci` (a recorded PID may have been reused since).
fn is_cnci_process(pid: i32) -> bool {
    alive(pid)
        && std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|comm| comm.trim() == "cumulo-cnci")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::FakeBackend;

    fn config(dir: &std::path::Path) -> LaunchConfig {
        LaunchConfig {
            binary: "cumulo-cnci".into(),
            ca_cert: "ca.pem".into(),
            cert: "c.pem".into(),
            key: "c.key".into(),
            uplink: "u0".into(),
            addresses: "198.18.0.128/30".parse().unwrap(),
            prefix: 24,
            servers: vec!["localhost:8888".into()],
            tunnel: "vxlan".into(),
            vxlan_port: 4789,
            dir: dir.to_owned(),
            vm_image: None,
            tap_netns: None,
        }
    }

    #[test]
    fn addresses_are_the_lowest_free_hosts_of_the_pool_and_records_are_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let l = CnciLauncher::new(FakeBackend::default(), Some(config(dir.path()))).unwrap();
        let (a, b, c) = (Uuid::from_u128(7), Uuid::from_u128(8), Uuid::from_u128(9));
        assert_eq!(l.allocate(a).unwrap(), Ipv4Addr::new(198, 18, 0, 129));
        // Reserved for its owner: asking again for it gives it again, another gets the next.
        assert_eq!(l.allocate(a).unwrap(), Ipv4Addr::new(198, 18, 0, 129));
        let r = Record {
            tenant: Uuid::from_u128(1),
            ns: ns_name(a),
            ip: Ipv4Addr::new(198, 18, 0, 129),
            pid: None,
            vm: false,
        };
        l.save(a, &r).unwrap();
        l.lock().records.insert(a, r.clone());
        assert_eq!(l.allocate(b).unwrap(), Ipv4Addr::new(198, 18, 0, 130));
        assert!(
            matches!(l.allocate(c), Err(BackendError::Network(_))),
            "a /30 has two hosts"
        );
        // A released owner's address is free again.
        l.release(b);
        assert_eq!(l.allocate(c).unwrap(), Ipv4Addr::new(198, 18, 0, 130));
        std::fs::write(dir.path().join("junk.json"), b"{").unwrap();
        std::fs::write(dir.path().join("x.log"), b"log").unwrap();
        let again = CnciLauncher::new(FakeBackend::default(), Some(config(dir.path()))).unwrap();
        assert_eq!(again.lock().records.get(&a), Some(&r));
        assert_eq!(again.lock().records.len(), 1);
        // The recorded CNCI's address is held again after the restart.
        assert_eq!(again.allocate(b).unwrap(), Ipv4Addr::new(198, 18, 0, 130));
        assert!(ns_name(a).len() <= 24);
    }

    /// Two launchers sharing one reservation store (as off-host launchers share etcd) never
    /// hand out one address twice; a launcher whose recorded address another holds refuses
    /// to start.
    #[test]
    fn launchers_sharing_reservations_never_take_one_address_twice() {
        let shared: Arc<dyn ReservationStore> = Arc::new(MemoryReservations::new());
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let l1 = CnciLauncher::new(FakeBackend::default(), Some(config(d1.path())))
            .unwrap()
            .with_reservations(shared.clone())
            .unwrap();
        let l2 = CnciLauncher::new(FakeBackend::default(), Some(config(d2.path())))
            .unwrap()
            .with_reservations(shared.clone())
            .unwrap();
        let first = l1.allocate(Uuid::from_u128(1)).unwrap();
        let second = l2.allocate(Uuid::from_u128(2)).unwrap();
        assert_ne!(first, second);
        assert!(l1.allocate(Uuid::from_u128(3)).is_err(), "the /30 is full");
        let held = shared.reservations(ADDRESS_POOL).unwrap();
        assert_eq!(held.len(), 2);
        // A record of d1 whose address is held by another owner in the shared store.
        let r = Record {
            tenant: Uuid::from_u128(1),
            ns: ns_name(Uuid::from_u128(4)),
            ip: second,
            pid: None,
            vm: false,
        };
        std::fs::write(
            d1.path().join(format!("{}.json", Uuid::from_u128(4))),
            serde_json::to_vec(&r).unwrap(),
        )
        .unwrap();
        let clash = CnciLauncher::new(FakeBackend::default(), Some(config(d1.path())))
            .unwrap()
            .with_reservations(shared);
        assert!(matches!(clash, Err(BackendError::Network(_))));
    }

    /// The clean-up removes the records and logs, but signals only a live `cumulo-cnci` and
    /// deletes only a namespace named as the launcher names them.
    #[test]
    fn the_clean_up_touches_only_what_the_records_name_as_ours() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::from_u128(0xc1);
        // A live process that is not a CNCI under the recorded PID (reused since).
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let r = Record {
            tenant: Uuid::from_u128(1),
            // Not this CNCI's namespace name: never deleted.
            ns: "not-ours".into(),
            ip: Ipv4Addr::new(198, 18, 0, 129),
            pid: Some(i32::try_from(other.id()).unwrap()),
            vm: false,
        };
        let record = dir.path().join(format!("{id}.json"));
        std::fs::write(&record, serde_json::to_vec(&r).unwrap()).unwrap();
        std::fs::write(dir.path().join(format!("{id}.log")), b"log").unwrap();
        // Not records: left alone.
        let big = dir.path().join(format!("{}.json", Uuid::from_u128(0xc2)));
        std::fs::write(&big, vec![b' '; 100 * 1024]).unwrap();
        std::fs::write(dir.path().join("notes.json"), b"{}").unwrap();
        assert_eq!(
            clean_up(dir.path(), Duration::from_millis(100)),
            Vec::<String>::new()
        );
        assert!(!record.exists() && !dir.path().join(format!("{id}.log")).exists());
        assert!(big.exists() && dir.path().join("notes.json").exists());
        assert_eq!(other.try_wait().unwrap(), None, "not a CNCI: not signalled");
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(clean_up(&dir.path().join("missing"), Duration::ZERO).is_empty());
    }

    /// The same over a real etcd (skipped without one unless `CUMULO_REQUIRE_ETCD=1`): every
    /// reservation is an etcd transaction, so launchers in different processes agree too.
    #[test]
    fn launchers_sharing_an_etcd_store_never_take_one_address_twice() {
        let Some(etcd) = testkit::etcd::shared() else {
            return;
        };
        let prefix = format!("cnci-{}", Uuid::new_v4().simple());
        let open = || -> Arc<dyn ReservationStore> {
            Arc::new(controller::store::EtcdStore::connect(&[etcd.endpoint()], &prefix).unwrap())
        };
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let launchers: Vec<_> = dirs
            .iter()
            .map(|d| {
                CnciLauncher::new(FakeBackend::default(), Some(config(d.path())))
                    .unwrap()
                    .with_reservations(open())
                    .unwrap()
            })
            .collect();
        let got: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = launchers
                .iter()
                .enumerate()
                .map(|(n, l)| s.spawn(move || l.allocate(Uuid::from_u128(n as u128 + 1))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert_ne!(got[0], got[1]);
        let held = open().reservations(ADDRESS_POOL).unwrap();
        assert_eq!(held.len(), 2);
        launchers[0].release(Uuid::from_u128(1));
        assert_eq!(open().reservations(ADDRESS_POOL).unwrap().len(), 1);
    }

    #[test]
    fn a_vm_gets_its_settings_and_credentials_in_its_user_data() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        for (name, text) in [("ca.pem", "CA\n"), ("c.pem", "CERT"), ("c.key", "KEY\n\n")] {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        c.ca_cert = dir.path().join("ca.pem");
        c.cert = dir.path().join("c.pem");
        c.key = dir.path().join("c.key");
        let r = Record {
            tenant: Uuid::from_u128(1),
            ns: ns_name(Uuid::from_u128(7)),
            ip: Ipv4Addr::new(198, 18, 0, 129),
            pid: None,
            vm: true,
        };
        let text = vm_user_data(&c, Uuid::from_u128(7), &r).unwrap();
        assert_eq!(
            text,
            "#cumulo-cnci\n\
             CUMULO_CNCI_UUID=00000000-0000-0000-0000-000000000007\n\
             CUMULO_CNCI_TENANT=00000000-0000-0000-0000-000000000001\n\
             CUMULO_CNCI_IP=198.18.0.129\n\
             CUMULO_CNCI_PREFIX=24\n\
             CUMULO_CNCI_LINK_ADDR=169.254.0.2/24\n\
             CUMULO_CNCI_SCHEDULER=localhost:8888\n\
             CUMULO_CNCI_VIA=169.254.0.1:8443\n\
             CUMULO_CNCI_TUNNEL=vxlan\n\
             CUMULO_CNCI_VXLAN_PORT=4789\n\
             --- file ca.pem\nCA\n--- file cert.pem\nCERT\n--- file key.pem\nKEY\n"
        );
        assert_eq!(vm_mac(r.ip), [2, 0xcc, 198, 18, 0, 129]);
        // A value the guest's shell would have to quote is refused, not passed on.
        c.servers = vec!["localhost:8888; reboot".into()];
        assert!(matches!(
            vm_user_data(&c, Uuid::from_u128(7), &r),
            Err(BackendError::Launch(_))
        ));
        c.servers = vec!["localhost:8888".into()];
        c.key = dir.path().join("missing.key");
        assert!(vm_user_data(&c, Uuid::from_u128(7), &r).is_err());
    }

    #[test]
    fn only_cnci_starts_are_intercepted() {
        let mut meta = BTreeMap::new();
        meta.insert("cumulo-role".to_string(), "cnci".to_string());
        let spec = |meta_data| InstanceSpec {
            instance: Uuid::from_u128(7),
            tenant: Uuid::from_u128(1),
            workload: Uuid::nil(),
            kind: crate::model::VmKind::Sim,
            firmware: crate::model::Firmware::Legacy,
            image: "x".into(),
            resources: crate::model::Resources::default(),
            nic: None,
            disks: Vec::new(),
            user_data: None,
            meta_data,
            restart: false,
        };
        assert!(is_cnci(&spec(meta)));
        assert!(!is_cnci(&spec(BTreeMap::new())));
    }
}
