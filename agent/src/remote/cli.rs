//! The command line of `cumulo-agent --remote` and the replica's body.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use store::OperationQueue;
use support::units::parse_positive_duration;
use tokio_util::sync::CancellationToken;

use super::{RemoteConfig, RemoteError};
use crate::backend::libvirt::{LibvirtBackend, LibvirtConfig};
use crate::host::HostFigures;
use crate::sim::{SimBackend, SimConfig};

/// What runs the off-host host's instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RemoteBackend {
    /// libvirt at the `--remote` URI.
    Libvirt,
    /// Simulated instances in this process (benchmarks of the queue).
    Sim,
}

/// cumulo-agent --remote: an off-host launcher replica. Takes the operations of the off-host host
/// registered with this libvirt URI from the shared store and runs them against it.
#[derive(Debug, Parser)]
#[command(name = "cumulo-agent", version, args_override_self = true)]
pub struct RemoteArgs {
    /// The libvirt URI of the off-host host (as registered: `POST /cumulo/v1/nodes`).
    #[arg(long, env = "CUMULO_AGENT_REMOTE")]
    pub remote: String,
    /// The controller's store (`etcd://host:port[,..][/prefix]`).
    #[arg(long, env = "CUMULO_AGENT_STORE")]
    pub store: String,
    /// How the etcd store is reached (TLS flags: docs/etcd-store.md). The certificate's CN is
    /// the replica's etcd user: one with the launcher role only.
    #[command(flatten)]
    pub etcd: store::EtcdArgs,
    /// The replica's name in its claims (default: host name and process id).
    #[arg(long, env = "CUMULO_AGENT_REPLICA")]
    pub replica: Option<String>,
    /// What runs the instances.
    #[arg(
        long,
        env = "CUMULO_AGENT_BACKEND",
        value_enum,
        default_value = "libvirt"
    )]
    pub backend: RemoteBackend,
    /// Where per-operation state and the libvirt backend's files go.
    #[arg(long, env = "CUMULO_AGENT_STATE_DIR")]
    pub state_dir: PathBuf,
    /// libvirt backend: the image store (default: `images/` in the state directory).
    #[arg(long, env = "CUMULO_AGENT_IMAGE_DIR")]
    pub image_dir: Option<PathBuf>,
    /// libvirt backend: the accelerator.
    #[arg(long, env = "CUMULO_AGENT_ACCEL", value_enum, default_value = "auto")]
    pub accel: crate::daemon::cli::AccelArg,
    /// The lease of a claim (renewed every third of it while the operation runs).
    #[arg(long, env = "CUMULO_AGENT_LEASE", default_value = "10s", value_parser = parse_positive_duration)]
    pub lease: Duration,
    /// How many operations the replica runs at once (claimed in batches of up to 32 when half
    /// or more of these slots are free).
    #[arg(long, env = "CUMULO_AGENT_PARALLEL", default_value = "8", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// How often an empty queue is polled.
    #[arg(long, env = "CUMULO_AGENT_POLL", default_value = "200ms", value_parser = parse_positive_duration)]
    pub poll: Duration,
    /// The longest one operation may take.
    #[arg(long, env = "CUMULO_AGENT_OP_TIMEOUT", default_value = "300s", value_parser = parse_positive_duration)]
    pub op_timeout: Duration,
    /// sim backend: how long a simulated boot takes.
    #[arg(long, env = "CUMULO_AGENT_SIM_BOOT_DELAY", default_value = "0s", value_parser = support::units::parse_duration)]
    pub sim_boot_delay: Duration,
    /// sim backend: the simulated host's directory (replicas that share it share the host;
    /// default: `sim/` in the state directory).
    #[arg(long, env = "CUMULO_AGENT_SIM_DIR")]
    pub sim_dir: Option<PathBuf>,
    /// Keep the host's launcher credentials (issued by the controller, read from the store)
    /// in this directory, for a `qemu+tls://...?pkipath=DIR` URI (needs --creds-key).
    #[arg(long, env = "CUMULO_AGENT_TLS_PKI", requires = "creds_key")]
    pub tls_pki: Option<PathBuf>,
    /// The key that opens this host's launcher key, kept sealed in the store
    /// (`cumulo-controller launcher-key --host HOST --out FILE`; mode 0600; another host's key
    /// opens nothing). With --tls-pki.
    #[arg(long, env = "CUMULO_AGENT_CREDS_KEY", requires = "tls_pki")]
    pub creds_key: Option<PathBuf>,
    /// The remote host's memory, MiB (admission).
    #[arg(long, default_value = "65536")]
    pub mem_mb: u64,
    /// The remote host's disk, MiB (admission).
    #[arg(long, default_value = "1048576")]
    pub disk_mb: u64,
    /// The remote host's vCPUs (admission).
    #[arg(long, default_value = "64")]
    pub vcpus: u32,
    /// Log format.
    #[arg(
        long,
        env = "CUMULO_AGENT_LOG_FORMAT",
        default_value = "text",
        value_enum
    )]
    pub log_format: support::LogFormat,
}

/// Whether the command line asks for a remote replica.
pub fn wanted(args: &[String]) -> bool {
    args.iter()
        .any(|a| a == "--remote" || a.starts_with("--remote="))
}

impl RemoteArgs {
    /// The replica's configuration (reads the `--creds-key` file).
    pub fn config(&self) -> Result<RemoteConfig, RemoteError> {
        let creds_key = match &self.creds_key {
            Some(path) => Some(super::creds::read_key(path)?),
            None => None,
        };
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "replica".into());
        Ok(RemoteConfig {
            owner: self
                .replica
                .clone()
                .unwrap_or_else(|| format!("{host}-{}", std::process::id())),
            uri: self.remote.clone(),
            lease: self.lease,
            poll: self.poll,
            parallel: usize::from(self.parallel),
            op_timeout: self.op_timeout,
            work_dir: self.state_dir.join("ops"),
            pki_dir: self.tls_pki.clone(),
            creds_key,
            figures: HostFigures {
                mem_total_mb: self.mem_mb,
                mem_available_mb: self.mem_mb,
                disk_total_mb: self.disk_mb,
                disk_available_mb: self.disk_mb,
                vcpus: self.vcpus,
                load: 0,
            },
        })
    }
}

/// Opens the store, makes the backend, and runs the replica until `shutdown`.
pub async fn run(args: RemoteArgs, shutdown: CancellationToken) -> Result<(), RemoteError> {
    let config = args.config()?;
    let location = args.store.clone();
    let etcd = args.etcd.transport(&location)?;
    let store: Arc<dyn OperationQueue> =
        tokio::task::spawn_blocking(move || store::open_shared(&location, etcd.as_ref()))
            .await
            .map_err(|e| RemoteError::WorkDir(format!("store task: {e}")))??;
    match args.backend {
        RemoteBackend::Libvirt => {
            let mut l = LibvirtConfig::new(&args.remote, args.accel.accel(), &args.state_dir);
            if let Some(dir) = &args.image_dir {
                l.images = dir.clone();
            }
            // The host's domains are the host's, whichever replica made them.
            l.owner = Some(super::host_of(&store, &args.remote).await?.id);
            let backend = Arc::new(
                LibvirtBackend::new(l)
                    .map_err(|e| RemoteError::WorkDir(format!("libvirt backend: {e}")))?,
            );
            super::run(store, move |_| Ok(backend.clone()), config, shutdown).await
        }
        RemoteBackend::Sim => {
            let dir = args
                .sim_dir
                .clone()
                .unwrap_or_else(|| args.state_dir.join("sim"));
            let boot_delay = args.sim_boot_delay;
            let make = move |instance| {
                let config = SimConfig {
                    boot_delay,
                    dir: Some(dir.clone()),
                    ..SimConfig::default()
                };
                SimBackend::for_instance(config, instance)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            };
            super::run(store, make, config, shutdown).await
        }
    }
}
