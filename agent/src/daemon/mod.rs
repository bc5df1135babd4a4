//! The launcher as a daemon: the core wired to SSNTP. [`run`] takes the state directory's lock,
//! finds the node's UUID (bound in the certificate, else kept in the state directory), starts
//! the backend (sim or libvirt), the SSNTP client and the core, and then hands the scheduler's frames to the
//! core until it is told to stop.
//!
//! - Outbound: [`SsntpReporter`] turns the core's reports into frames ([`crate::wire`]).
//! - On every connect the client first sends the latest status it knows (READY, FULL or
//!   MAINTENANCE) and the instance events kept while there was no session ([`Outbound`]); then
//!   the core is asked to announce, which sends a fresh status and STATS.
//! - Inbound: [`inbound()`] decides what each frame is for; commands go to the core without
//!   waiting, and a command the core has no room for is answered at once ([`wire::busy_reply`]).
//! - Stopping: the core finishes what its instance tasks are doing and stops; instances keep
//!   running in the backend, and the next run re-attaches to them. Then the session is closed
//!   after its queued frames are written.
//!
//! - Tenant networking (`--network cn|dual` with the libvirt backend): the backend is wrapped in
//!   a [`NetBackend`] over [`RtNetOps`]; its [`NetBackend::rebuild`] runs before the core
//!   re-attaches the instances, and every [`TenantChange`] becomes TENANT_ADDED or
//!   TENANT_REMOVED, sent like an instance event (kept in the backlog while disconnected:
//!   [`EventSender`]). `--network none` and `nn`, and the sim backend, plumb nothing.
//!   [`run_networked`] runs any backend with any [`NetOps`] (tests use a fake).
//!
//! - The node endpoint ([`console`], `--console-listen`): HTTPS beside SSNTP, for the
//!   controller only, once the core runs: it serves the backend's console logs and takes port
//!   firewall updates (to the core, [`Core::set_firewall`]). Bound before the agent dials: an
//!   address that cannot be bound stops the agent ([`DaemonError::Console`]).
//!
//! [`cli`] parses the command line into a [`DaemonConfig`].

pub mod cli;
pub mod console;
pub mod export;
pub mod inbound;
pub mod reporter;
pub mod traces;

use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp_net::client::Backoff;
use ssntp_net::{Client, ClientConfig, ClientError, ClientEvent, ClientHandle, TlsIdentity};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use support::identity::{IdentityError, endpoint_uuid};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use inbound::{Inbound, inbound};
pub use reporter::{EventSender, Outbound, SsntpReporter};

use crate::backend::container::{ContainerBackend, ContainerConfig};
use crate::backend::libvirt::{LibvirtBackend, LibvirtConfig, LibvirtError};
use crate::backend::mixed::WithContainers;
use crate::backend::{Backend, BackendError};
use crate::cnci::launch::{CnciLauncher, LaunchConfig};
use crate::config::{Config, Limits};
use crate::core::{Core, CoreError};
use crate::host::HostSource;
use crate::net::{
    NetArgs, NetArgsError, NetBackend, NetOps, Network, OpsError, RtNetOps, TenantChange,
};
use crate::sim::{SimBackend, SimConfig, SimError};
use crate::wire;

/// How many tenant changes may wait for the SSNTP side.
const TENANT_CHANGES: usize = 64;

/// How long a stopping agent waits for its last frames to be written.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// Everything the daemon runs with, checked once ([`cli::Args::into_config`]).
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// CA, certificate and key.
    pub tls: TlsIdentity,
    /// The role claimed in CONNECT (within the certificate's roles).
    pub claim: Role,
    /// The schedulers, `host:port`: one at a time, starting at one picked by the node's UUID,
    /// the next one after a drop.
    pub servers: Vec<String>,
    /// Where instance records, the maintenance flag and a stored UUID live.
    pub state_dir: PathBuf,
    /// The host name reported.
    pub hostname: String,
    /// The availability zone reported (`None`: the default one).
    pub zone: Option<String>,
    /// How often status and STATS are sent.
    pub stats_interval: Duration,
    /// The shortest time between two STATS sent because instances changed state.
    pub change_report_gap: Duration,
    /// Admission watermarks.
    pub limits: Limits,
    /// vCPUs offered instead of the host's count.
    pub vcpus: Option<u32>,
    /// The sim backend's settings.
    pub sim: SimConfig,
    /// The libvirt backend's settings, when it runs the instances (`--backend libvirt`).
    pub libvirt: Option<LibvirtConfig>,
    /// Tenant networking's flags, when instances here get VNICs: `--network cn|dual` with the
    /// libvirt backend, or with the sim backend and a node address. `None`: no bridges, tunnels
    /// or taps (a START's NIC is ignored).
    pub net: Option<NetArgs>,
    /// How this node runs CNCIs (`--network nn|dual` with `--cnci-cert`): `None`, it runs
    /// none.
    pub cnci: Option<LaunchConfig>,
    /// SSNTP handshake and session limits.
    pub handshake: HandshakeConfig,
    /// Reconnection delays.
    pub backoff: Backoff,
    /// Containers beside the VMs (`--containers`): where they live and what runs them.
    pub containers: Option<ContainerConfig>,
    /// Where the console endpoint listens ([`console`]); `None`: it is off.
    pub console: Option<SocketAddr>,
    /// The address reported for it (STATS `networks`; `None`: none is reported).
    pub console_address: Option<IpAddr>,
}

impl DaemonConfig {
    /// The core's configuration for node `node`: host figures read from this host (disk: the
    /// state directory's file system).
    pub fn core_config(&self, node: Uuid) -> Config {
        let host = HostSource::Probe {
            disk_path: self.state_dir.clone(),
        };
        let mut config = Config::new(node, self.hostname.clone(), host, self.state_dir.clone());
        config.stats_interval = self.stats_interval;
        config.change_report_gap = self.change_report_gap;
        config.limits = self.limits;
        config.vcpus = self.vcpus;
        config.zone.clone_from(&self.zone);
        config.networks = self
            .console_address
            .map(|ip| vec![crate::model::NodeAddress { ip, mac: [0; 6] }])
            .unwrap_or_default();
        config
    }
}

/// Why the daemon could not run, or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another agent holds the state directory.
    #[error("another cumulo-agent is using the state directory {0}")]
    Locked(PathBuf),
    /// The state directory cannot be made or locked.
    #[error("state directory {path}: {source}")]
    StateDir {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The node's UUID.
    #[error("node UUID: {0}")]
    Identity(#[from] IdentityError),
    /// The sim backend's directory.
    #[error("{0}")]
    Sim(#[from] SimError),
    /// The libvirt backend could not be set up.
    #[error("{0}")]
    Libvirt(#[from] LibvirtError),
    /// Tenant networking's flags do not make a network (no `--node-ip`, a tunnel kind the
    /// kernel lacks).
    #[error("tenant networking: {0}")]
    NetArgs(#[from] NetArgsError),
    /// Netlink could not be opened.
    #[error("tenant networking: {0}")]
    NetOps(#[from] OpsError),
    /// The container backend could not start (`--containers`: its directory, its runtime).
    #[error("containers: {0}")]
    Containers(BackendError),
    /// The tenant networks could not be rebuilt from the kernel at start.
    #[error("tenant networking: rebuilding at start: {0}")]
    NetRebuild(BackendError),
    /// The CNCI launcher could not read its records.
    #[error("CNCI launcher: {0}")]
    Cnci(BackendError),
    /// The SSNTP client refused its configuration, or gave up for good (the scheduler aborted
    /// the session: another agent took our UUID, or our role was refused).
    #[error("ssntp: {0}")]
    Client(#[from] ClientError),
    /// The core could not start, or stopped.
    #[error("{0}")]
    Core(#[from] CoreError),
    /// The node endpoint (`--console-listen`) cannot be set up: another process holds its port
    /// (the controller would reach that process instead), or its TLS or disk-copy directory
    /// cannot be made.
    #[error("node endpoint (--console-listen {addr}; off turns it off): {source}")]
    Console {
        /// Where it was to listen.
        addr: SocketAddr,
        /// Why it cannot.
        source: ConsoleError,
    },
}

/// Why the node endpoint cannot be set up ([`DaemonError::Console`]).
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// Its TLS configuration cannot be made from the agent's identity.
    #[error("TLS: {0}")]
    Tls(#[source] ssntp_net::TlsError),
    /// Its directory for disk copies cannot be made.
    #[error("directory for disk copies {path}: {source}")]
    Exports {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Its address cannot be bound: most often, another process holds the port.
    #[error("cannot listen: {0}")]
    Listen(#[source] std::io::Error),
}

/// Holds `<state-dir>/agent.lock` while the daemon runs: one agent per state directory, whether
/// or not its UUID is stored there. A state directory made here is the agent's alone (0700,
/// whatever the umask; the libvirt backend then lets QEMU's group through it); one that was
/// there keeps its mode.
fn lock_state_dir(dir: &Path) -> Result<File, DaemonError> {
    let err = |source| DaemonError::StateDir {
        path: dir.to_owned(),
        source,
    };
    if !dir.exists() {
        support::private::dir(dir).map_err(err)?;
    }
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(support::private::FILE)
        .open(dir.join("agent.lock"))
        .map_err(err)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(DaemonError::Locked(dir.to_owned())),
        Err(std::fs::TryLockError::Error(e)) => Err(err(e)),
    }
}

/// Says in the log at start-up when QEMU cannot reach the instances' files (every START would
/// fail, each with the same cause in its fault), and gives the backend's directories to QEMU's
/// group before the first START needs them.
fn check_reach(backend: &LibvirtBackend) {
    let backend = backend.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(e) = backend.check_reach() {
            tracing::error!(error = %e, "the libvirt backend cannot run VMs yet");
        }
    });
}

/// Runs the agent until `shutdown` is cancelled (`Ok`), or until it cannot go on (`Err`).
pub async fn run(config: DaemonConfig, shutdown: CancellationToken) -> Result<(), DaemonError> {
    let (_locks, node) = claim(&config)?;
    // Bound first: a port another process holds stops the agent before it registers anywhere.
    let console = open_console(&config).await?;
    let cnci = config.cnci.clone();
    // The node's domains are marked as its own: other agents on the same libvirt leave them be.
    let libvirt = config.libvirt.clone().map(|l| LibvirtConfig {
        owner: Some(node),
        ..l
    });
    let containers = match &config.containers {
        Some(c) => {
            let backend = ContainerBackend::new(c.clone()).map_err(DaemonError::Containers)?;
            tracing::info!(runtime = %c.runtime.display(), images = %c.images.display(), "containers run here");
            Some(backend)
        }
        None => None,
    };
    match (&libvirt, &config.net) {
        (Some(l), Some(net)) if net.node_ip.is_some() => {
            let backend = LibvirtBackend::new(l.clone())?;
            check_reach(&backend);
            let vms = Some(backend.clone());
            let network = net.network(RtNetOps::new()?).await?;
            let backend = WithContainers::new(backend, containers);
            let prepare = with_cncis(networked(backend, network), cnci, vms);
            run_with(&config, node, prepare, console, shutdown).await
        }
        (Some(l), net) => {
            if net.is_some() {
                tracing::warn!("no --node-ip: tenant networking off (VMs start without a NIC)");
            }
            let backend = LibvirtBackend::new(l.clone())?;
            check_reach(&backend);
            let vms = Some(backend.clone());
            let backend = WithContainers::new(backend, containers);
            run_with(
                &config,
                node,
                with_cncis(ready(backend), cnci, vms),
                console,
                shutdown,
            )
            .await
        }
        // Simulated guests on real tenant networks: with a node address, each instance's tap,
        // bridge and tunnel are made as for a VM (something standing in for the guest may plug
        // into its bridge).
        (None, Some(net)) if net.node_ip.is_some() => {
            let backend = WithContainers::new(SimBackend::new(config.sim.clone())?, containers);
            let network = net.network(RtNetOps::new()?).await?;
            run_with(
                &config,
                node,
                with_cncis(networked(backend, network), cnci, None),
                console,
                shutdown,
            )
            .await
        }
        (None, _) => {
            let backend = WithContainers::new(SimBackend::new(config.sim.clone())?, containers);
            run_with(
                &config,
                node,
                with_cncis(ready(backend), cnci, None),
                console,
                shutdown,
            )
            .await
        }
    }
}

/// Runs the agent as [`run`] does, over `backend` with tenant networking on `network` (its
/// node address and tunnel kind; [`NetArgs::network`] makes one), and the CNCIs of
/// `config.cnci` as processes. `config.net` and `config.libvirt` are not looked at.
pub async fn run_networked<B: Backend, O: NetOps>(
    config: DaemonConfig,
    backend: B,
    network: Network<O>,
    shutdown: CancellationToken,
) -> Result<(), DaemonError> {
    let (_locks, node) = claim(&config)?;
    let console = open_console(&config).await?;
    let prepare = with_cncis(networked(backend, network), config.cnci.clone(), None);
    run_with(&config, node, prepare, console, shutdown).await
}

/// The state directory's lock and the node's UUID (with its lock).
fn claim(config: &DaemonConfig) -> Result<((File, impl Sized), Uuid), DaemonError> {
    let state_lock = lock_state_dir(&config.state_dir)?;
    // One UUID per state directory, whichever role --network claims: the node stays the same
    // node (with the same instances) if its role changes.
    let own = config.tls.own();
    let (node, uuid_lock) = endpoint_uuid(&own, Some(&config.state_dir), Role::AGENT)?;
    Ok(((state_lock, uuid_lock), node))
}

/// Makes the backend once the SSNTP client runs, given the sender of events: for a backend
/// that must do something (send, look at the kernel) before the core re-attaches instances.
type Prepare<B> = Box<
    dyn FnOnce(EventSender, Uuid) -> Pin<Box<dyn Future<Output = Result<B, DaemonError>> + Send>>
        + Send,
>;

/// The prepared backend wrapped in a [`CnciLauncher`]: a network node runs the CNCIs placed
/// on it (`cnci` set) as processes, or as VMs through `vms` with a CNCI image; every other
/// instance in the backend.
fn with_cncis<B: Backend>(
    prepare: Prepare<B>,
    cnci: Option<LaunchConfig>,
    vms: Option<LibvirtBackend>,
) -> Prepare<CnciLauncher<B>> {
    Box::new(move |events, node| {
        Box::pin(async move {
            let backend = prepare(events, node).await?;
            if let Some(c) = &cnci {
                let how = match &c.vm_image {
                    Some(image) => format!("VMs of image {image}"),
                    None => "processes".into(),
                };
                tracing::info!(uplink = %c.uplink, addresses = %c.addresses, "CNCIs run here as {how}");
            }
            let launcher = CnciLauncher::new(backend, cnci).map_err(DaemonError::Cnci)?;
            Ok(match vms {
                Some(vms) => launcher.with_vms(vms),
                None => launcher,
            })
        })
    })
}

/// A backend with nothing to prepare.
fn ready<B: Backend>(backend: B) -> Prepare<B> {
    Box::new(move |_, _| Box::pin(async move { Ok(backend) }))
}

/// `backend` wrapped in tenant networking: the tenant changes are forwarded as events, then
/// the networks are rebuilt from the kernel.
fn networked<B: Backend, O: NetOps>(backend: B, network: Network<O>) -> Prepare<NetBackend<B, O>> {
    let node_ip = network.config().node_ip;
    tracing::info!(node_ip = %node_ip, tunnel = %network.config().tunnel, "tenant networking on");
    Box::new(move |events, node| {
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(TENANT_CHANGES);
            tokio::spawn(forward_tenant_changes(rx, events, node, node_ip));
            let metadata = network.config().metadata;
            let mut backend = NetBackend::new(backend, network, tx);
            if metadata {
                backend = backend.with_metadata(crate::net::metadata::Metadata::new(node));
            }
            let rebuilt = backend.rebuild().await.map_err(DaemonError::NetRebuild)?;
            tracing::info!(
                vnics = rebuilt.vnics.len(),
                gone = rebuilt.removed.len(),
                "tenant networks rebuilt"
            );
            Ok(backend)
        })
    })
}

/// How often a node announces again (TENANT_ADDED) every subnet it has VNICs of: a CNCI that
/// restarted as a VM (a new kernel, no tunnel ends) learns of the node again within this.
pub const TENANT_REANNOUNCE: Duration = Duration::from_secs(30);

/// Sends every tenant change as TENANT_ADDED or TENANT_REMOVED, and the node's subnets as
/// TENANT_ADDED again every [`TENANT_REANNOUNCE`] (a CNCI takes an add it has already as
/// nothing to do), until the backend is gone.
async fn forward_tenant_changes(
    mut changes: mpsc::Receiver<TenantChange>,
    events: EventSender,
    node: Uuid,
    node_ip: IpAddr,
) {
    let mut here: Vec<crate::net::SubnetId> = Vec::new();
    let mut again = tokio::time::interval_at(
        tokio::time::Instant::now() + TENANT_REANNOUNCE,
        TENANT_REANNOUNCE,
    );
    again.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            change = changes.recv() => {
                let Some(change) = change else { return };
                tracing::info!(?change, "tenant change");
                match change {
                    TenantChange::Added(s) if !here.contains(&s) => here.push(s),
                    TenantChange::Removed(s) => here.retain(|h| *h != s),
                    TenantChange::Added(_) => {}
                }
                events.send(change.payload(node, node_ip)).await;
            }
            _ = again.tick() => {
                for s in &here {
                    tracing::debug!(subnet = ?s, "tenant subnet announced again");
                    events.send(TenantChange::Added(*s).payload(node, node_ip)).await;
                }
            }
        }
    }
}

/// Runs the agent over the backend `prepare` makes, as [`run`] says.
async fn run_with<B: Backend>(
    config: &DaemonConfig,
    node: Uuid,
    prepare: Prepare<B>,
    console: Option<ConsoleSetup>,
    shutdown: CancellationToken,
) -> Result<(), DaemonError> {
    let outbound = Outbound::default();
    let mut client_config = ClientConfig::new(
        config.tls.clone(),
        node,
        config.claim,
        config.servers.clone(),
    );
    client_config.handshake = config.handshake;
    client_config.backoff = config.backoff;
    let first = outbound.clone();
    client_config.announce = Some(Arc::new(move || first.announce()));
    let (client, mut events) = Client::start(client_config)?;
    let sender = EventSender::new(client.clone(), node, outbound.clone());
    let backend = match prepare(sender, node).await {
        Ok(backend) => backend,
        Err(e) => {
            close(&client, &mut events).await;
            return Err(e);
        }
    };
    let traces = traces::Traces::default();
    let reporter = SsntpReporter::new(client.clone(), node, outbound.clone(), traces.clone());
    let backend = Arc::new(backend);
    let core = match Core::spawn(config.core_config(node), backend.clone(), reporter).await {
        Ok(core) => core,
        Err(e) => {
            close(&client, &mut events).await;
            return Err(e.into());
        }
    };
    let console_stop = shutdown.child_token();
    let console = console.map(|c| c.serve(config, backend, core.clone(), console_stop.clone()));
    tracing::info!(
        %node,
        role = %config.claim,
        schedulers = ?config.servers,
        "cumulo-agent running"
    );
    let ended = serve(
        &core,
        &client,
        (&outbound, &traces),
        &mut events,
        node,
        config,
        &shutdown,
    )
    .await;
    tracing::info!("stopping: instances keep running");
    console_stop.cancel();
    if let Some(console) = console {
        let _ = console.await;
    }
    if let Err(e) = core.shutdown().await {
        tracing::warn!(error = %e, "stopping the core");
    }
    close(&client, &mut events).await;
    ended
}

/// The node endpoint, bound and ready to serve once the core runs.
struct ConsoleSetup {
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    exports: Arc<export::Exports>,
}

/// Binds the node endpoint when it is on (`--console-listen`), with its TLS configuration and
/// its directory for disk copies; any of them failing stops the agent with the cause.
async fn open_console(config: &DaemonConfig) -> Result<Option<ConsoleSetup>, DaemonError> {
    let Some(addr) = config.console else {
        return Ok(None);
    };
    let failed = |source| DaemonError::Console { addr, source };
    let tls = config
        .tls
        .server_config()
        .map_err(|e| failed(ConsoleError::Tls(e)))?;
    let path = config.state_dir.join("exports");
    let exports = match export::Exports::open(&path) {
        Ok(exports) => exports,
        Err(source) => return Err(failed(ConsoleError::Exports { path, source })),
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| failed(ConsoleError::Listen(e)))?;
    Ok(Some(ConsoleSetup {
        listener,
        tls,
        exports: Arc::new(exports),
    }))
}

impl ConsoleSetup {
    /// Serves the endpoint over `backend` and `core` until `stop`.
    fn serve<B: Backend>(
        self,
        config: &DaemonConfig,
        backend: Arc<B>,
        core: Core,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let addr = self.listener.local_addr().ok().or(config.console);
        let addr = addr.map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(%addr, reported = ?config.console_address, "console endpoint listening");
        tokio::spawn(console::serve(
            self.listener,
            self.tls,
            backend,
            Arc::new(core),
            self.exports,
            stop,
        ))
    }
}

/// Hands the client's events to the core until `shutdown`, or until the client or the core
/// stops for good.
async fn serve(
    core: &Core,
    client: &ClientHandle,
    (outbound, traces): (&Outbound, &traces::Traces),
    events: &mut mpsc::Receiver<ClientEvent>,
    node: Uuid,
    config: &DaemonConfig,
    shutdown: &CancellationToken,
) -> Result<(), DaemonError> {
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            event = events.recv() => event,
        };
        match event {
            Some(ClientEvent::Connected {
                server_uuid,
                cluster,
                ..
            }) => {
                tracing::info!(scheduler = %server_uuid, "connected");
                if let Some(warning) = slower_than_told(
                    config.stats_interval,
                    config.handshake.session.idle_timeout,
                    &cluster,
                ) {
                    tracing::warn!("{warning}");
                }
                // Events that joined the backlog after the client's announce hook ran.
                outbound.flush(client);
                match core.announce() {
                    Ok(()) => {}
                    // The next stats interval reports anyway.
                    Err(CoreError::Busy) => {
                        tracing::warn!("busy: the announce waits for the next interval")
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Some(ClientEvent::Disconnected { reason }) => {
                tracing::warn!(%reason, "disconnected; reconnecting");
            }
            Some(ClientEvent::Frames { messages, .. }) => {
                let cnci_dir = config.cnci.as_ref().map(|c| c.dir.as_path());
                for message in messages {
                    let traced = match &message.payload {
                        ssntp::Payload::Start(start) => {
                            traces.arrived(start.instance_uuid, &message.frame);
                            Some(start.instance_uuid)
                        }
                        _ => None,
                    };
                    let to_core = handle(core, client, node, cnci_dir, &message.payload)?;
                    // A START answered at once (refused, or the core busy) is done now.
                    if !to_core
                        && let Some(instance) = traced
                        && let Some(report) = traces.done(instance, reporter::unix_ns())
                    {
                        reply_to(client, &ssntp::Payload::TraceReport(report));
                    }
                }
            }
            Some(ClientEvent::Stopped(e)) => return Err(e.into()),
            None => return Err(CoreError::Stopped.into()),
        }
    }
}

/// One frame from the scheduler. A CNCI's START leaves its credentials in `cnci_dir` (a node
/// that runs CNCIs) before the core sees it (without them). Whether the core took it (else it
/// was answered at once, or only logged).
fn handle(
    core: &Core,
    client: &ClientHandle,
    node: Uuid,
    cnci_dir: Option<&std::path::Path>,
    payload: &ssntp::Payload,
) -> Result<bool, DaemonError> {
    if let (Some(dir), ssntp::Payload::Start(start)) = (cnci_dir, payload)
        && let Err(e) = crate::cnci::launch::credentials::take_credentials(dir, start)
    {
        // The CNCI then fails to start, saying it has no credentials.
        tracing::error!(cnci = %start.instance_uuid, "{e}");
    }
    match inbound(payload, node) {
        Inbound::Command(command) => match core.submit(command.clone()) {
            Ok(()) => return Ok(true),
            Err(CoreError::Busy) => {
                tracing::warn!(?command, "busy: command refused");
                if let Some(reply) = wire::busy_reply(&command, node) {
                    reply_to(client, &reply);
                }
            }
            Err(e) => return Err(e.into()),
        },
        Inbound::Reply(reply) => {
            tracing::info!(operand = %payload.operand(), answer = %reply.operand(), "answered without the core");
            reply_to(client, &reply);
        }
        Inbound::Log { what, warn: true } => {
            tracing::warn!(operand = %payload.operand(), ?payload, "{what}");
        }
        Inbound::Log { what, warn: false } => {
            tracing::debug!(operand = %payload.operand(), "{what}");
        }
    }
    Ok(false)
}

/// What to tell the operator when this agent's STATS interval is longer than the one the
/// scheduler counts (CONNECTED's `scheduler.stats_interval_s`). The scheduler loses a node that
/// sends nothing at all for three of its intervals; this agent writes a STATS every
/// `stats_interval`, and a HEARTBEAT when it has written nothing for a third of `idle_timeout`.
fn slower_than_told(
    stats_interval: Duration,
    idle_timeout: Duration,
    told: &ssntp::payload::ClusterConfig,
) -> Option<String> {
    let secs = told.scheduler.as_ref()?.stats_interval_s?;
    let told = Duration::from_secs(u64::from(secs));
    if stats_interval <= told {
        return None;
    }
    let lost_after = told * 3;
    let quiet = stats_interval.min(idle_timeout / 3);
    let outcome = if quiet >= lost_after {
        format!("it will be lost after {lost_after:?} without a frame")
    } else {
        "its HEARTBEATs keep it connected, but its figures are older than the scheduler expects"
            .to_string()
    };
    Some(format!(
        "the scheduler expects STATS every {told:?}, this agent sends them every \
         {stats_interval:?}: {outcome}; set --stats-interval {secs}s"
    ))
}

fn reply_to(client: &ClientHandle, reply: &ssntp::Payload) {
    if let Err(e) = client.send_payload(reply) {
        tracing::warn!(operand = %reply.operand(), error = %e, "answer not sent");
    }
}

/// Closes the client: queued frames are written, then the session is shut down; waits (at most
/// [`CLOSE_GRACE`]) until the client has finished.
async fn close(client: &ClientHandle, events: &mut mpsc::Receiver<ClientEvent>) {
    client.close();
    let drained = tokio::time::timeout(CLOSE_GRACE, async {
        while events.recv().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("the SSNTP client did not finish within {CLOSE_GRACE:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::payload::{ClusterConfig, SchedulerConfig};

    fn told(secs: Option<u32>) -> ClusterConfig {
        ClusterConfig {
            scheduler: Some(SchedulerConfig {
                stats_interval_s: secs,
            }),
            ..ClusterConfig::default()
        }
    }

    #[test]
    fn an_agent_slower_than_the_scheduler_expects_says_so() {
        let secs = Duration::from_secs;
        let idle = secs(30);
        // Told nothing, or no slower than told: nothing to say.
        assert_eq!(
            slower_than_told(secs(5), idle, &ClusterConfig::default()),
            None
        );
        assert_eq!(slower_than_told(secs(5), idle, &told(None)), None);
        assert_eq!(slower_than_told(secs(5), idle, &told(Some(5))), None);
        assert_eq!(slower_than_told(secs(1), idle, &told(Some(5))), None);
        // Slower, but its HEARTBEATs (every 10 s at most) come within three intervals of 5 s.
        let kept = slower_than_told(secs(20), idle, &told(Some(5))).unwrap();
        assert!(kept.contains("HEARTBEATs keep it connected"), "{kept}");
        // Quiet for 5 s against three intervals of 1 s: lost.
        let lost = slower_than_told(secs(5), idle, &told(Some(1))).unwrap();
        assert!(lost.contains("lost after 3s"), "{lost}");
        assert!(lost.contains("--stats-interval 1s"), "{lost}");
    }
}
