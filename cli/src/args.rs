//! `cumulo`'s command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::up::cluster::Backend;
use crate::up::cnci::{ComputeNet, TenantNetwork};

/// cumulo: run and use a cumulo cluster.
#[derive(Debug, Parser)]
#[command(name = "cumulo", version, args_override_self = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// How to reach and log in to the controller.
    #[command(flatten)]
    pub login: Login,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Where the controller is and who logs in.
#[derive(Debug, Clone, Args)]
pub struct Login {
    /// The controller's API URL.
    #[arg(long, global = true, env = "CUMULO_CONTROLLER")]
    pub controller: Option<String>,
    /// The user name.
    #[arg(long, global = true, env = "CUMULO_USERNAME")]
    pub username: Option<String>,
    /// The password.
    #[arg(long, global = true, env = "CUMULO_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The project (tenant).
    #[arg(long, global = true, env = "CUMULO_PROJECT")]
    pub project: Option<String>,
    /// The CA certificate of the controller's HTTPS certificate.
    #[arg(long, global = true, env = "CUMULO_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring a whole cluster up on this host and boot a first instance.
    Up(UpArgs),
    /// Stop the local cluster (its state is kept unless --purge).
    Down(DownArgs),
    /// Join this host to a running cluster with a join token, and start its agent.
    Join(JoinArgs),
    /// Show what of the local cluster runs.
    Status(DirArg),
    /// Print the local cluster's exports for the cumulo and openstack CLIs (for
    /// `eval "$(cumulo env)"`).
    Env(DirArg),
    /// Instances.
    #[command(subcommand)]
    Instance(InstanceCmd),
    /// Workloads (what instances run: flavor, image, user data).
    #[command(subcommand)]
    Workload(WorkloadCmd),
    /// Flavors (sizes).
    #[command(subcommand)]
    Flavor(FlavorCmd),
    /// Images.
    #[command(subcommand)]
    Image(ImageCmd),
    /// Compute and network nodes.
    #[command(subcommand)]
    Node(NodeCmd),
    /// Tenants (projects), their quotas and users.
    #[command(subcommand)]
    Tenant(TenantCmd),
    /// Tenant network concentrators.
    #[command(subcommand)]
    Cnci(CnciCmd),
    /// The event log.
    Events(EventsArgs),
    /// Recent SSNTP frame traces (`cumulo trace show LABEL`: one, hop by hop).
    Trace {
        /// `list` (the default) or `show LABEL`.
        #[command(subcommand)]
        cmd: Option<TraceCmd>,
    },
}

/// `cumulo trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCmd {
    /// List the recent traces (the default).
    List,
    /// Show the newest trace with this label, hop by hop, with its times.
    Show {
        /// Its label.
        label: String,
    },
}

/// The local cluster's directory.
#[derive(Debug, Clone, Args)]
pub struct DirArg {
    /// The cluster's directory (default: /var/lib/cumulo as root; otherwise
    /// $XDG_DATA_HOME/cumulo, else ~/.local/share/cumulo).
    #[arg(long, env = "CUMULO_DIR")]
    pub dir: Option<PathBuf>,
}

/// `cumulo up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// What runs the instances (default libvirt; sim when libvirt cannot be had).
    #[arg(long, value_enum, default_value = "libvirt")]
    pub backend: Backend,
    /// The cluster's directory.
    #[command(flatten)]
    pub dir: DirArg,
    /// This host's name in the certificates (default: the host name).
    #[arg(long)]
    pub host: Option<String>,
    /// Install missing system packages (libvirt, qemu) with apt-get even when not root.
    #[arg(long)]
    pub install_deps: bool,
    /// Do not boot the first instance.
    #[arg(long)]
    pub no_instance: bool,
    /// The address other hosts reach this one at (hosts that `cumulo join`): the scheduler,
    /// the API (then over HTTPS, with the controller's certificate) and the image endpoint listen
    /// there, and the certificates name it. Give it when the certificates are made (the first
    /// `up`); the flags below still choose each address.
    #[arg(long, value_name = "IP", value_parser = public_address)]
    pub address: Option<std::net::IpAddr>,
    /// Where the scheduler listens (default 127.0.0.1:8888, or what the last `up` used).
    #[arg(long)]
    pub scheduler_listen: Option<String>,
    /// Where the controller's API listens (default 127.0.0.1:8889, or what the last `up` used).
    #[arg(long)]
    pub api_listen: Option<String>,
    /// Where the agent serves console logs to the controller (default 127.0.0.1:8890, or what
    /// the last `up` used).
    #[arg(long)]
    pub console_listen: Option<String>,
    /// Where the controller serves uploaded images' data to the agent (default
    /// 127.0.0.1:8891, or what the last `up` used).
    #[arg(long)]
    pub image_listen: Option<String>,
    /// How tenant instances are networked: cnci: one CNCI per tenant subnet, run by this
    /// host's agent in a network namespace of its own (root only; the host gets a
    /// compute-network link, cumulo0, that `cumulo down` deletes); none: addresses only; auto
    /// (the default): cnci where this host allows it, else none with the reason.
    #[arg(long, value_enum, default_value = "auto")]
    pub tenant_network: TenantNetwork,
    /// With --tenant-network cnci: this host's address on its compute network, with the
    /// network's prefix length (put on cumulo0; the CNCIs take the upper half).
    #[arg(long, default_value = crate::up::cnci::DEFAULT_ADDRESS)]
    pub compute_address: ComputeNet,
    /// With --tenant-network cnci: a link of this host's that already holds --compute-address
    /// (its network interface on a compute network shared with other hosts), instead of the
    /// link `up` makes; `down` leaves it. The CNCIs take the upper half of that network.
    #[arg(long, value_name = "LINK")]
    pub compute_link: Option<String>,
    /// The controller's store: `etcd://host:port[,host:port...][/prefix]`, an etcd cluster you
    /// run, which a second controller can share (`cumulo join --role controller`); default:
    /// SQLite in the cluster's directory. Kept for the next `up`.
    #[arg(long, value_name = "URL", requires_all = ["etcd_ca", "etcd_cert", "etcd_key"])]
    pub store: Option<String>,
    /// With --store: the CA that issued etcd's server certificate.
    #[arg(long, value_name = "FILE", requires = "store")]
    pub etcd_ca: Option<PathBuf>,
    /// With --store: the controller's etcd client certificate (its CN is its etcd user).
    #[arg(long, value_name = "FILE", requires = "store")]
    pub etcd_cert: Option<PathBuf>,
    /// With --store: that certificate's key.
    #[arg(long, value_name = "FILE", requires = "store")]
    pub etcd_key: Option<PathBuf>,
}

/// `--address`: an address other hosts can reach (not loopback, unspecified or multicast: the
/// certificates must name the one they dial).
fn public_address(s: &str) -> Result<std::net::IpAddr, String> {
    let ip: std::net::IpAddr = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() {
        return Err(format!(
            "{ip}: an address other hosts reach this one at (not loopback, unspecified or multicast)"
        ));
    }
    Ok(ip)
}

/// `cumulo down`.
#[derive(Debug, Clone, Args)]
pub struct DownArgs {
    /// The cluster's directory.
    #[command(flatten)]
    pub dir: DirArg,
    /// Also remove the cluster's state, certificates and logs.
    #[arg(long)]
    pub purge: bool,
}

/// Instance commands.
#[derive(Debug, Subcommand)]
pub enum InstanceCmd {
    /// Create instances of a workload.
    Create {
        /// The workload (name or UUID).
        #[arg(long)]
        workload: String,
        /// The instances' name.
        #[arg(long, default_value = "instance")]
        name: String,
        /// How many.
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Wait until they are active; fail (with the cause) as soon as one is in error.
        #[arg(long)]
        wait: bool,
        /// Give each a floating IP from the cluster's external network (reachable from this
        /// host when the cluster has tenant networks; a security group rule lets traffic in).
        #[arg(long)]
        floating_ip: bool,
        /// Trace their STARTs under this label (controller, scheduler, agent: `cumulo trace
        /// show LABEL`, the dashboard's traces).
        #[arg(long, value_name = "LABEL")]
        trace: Option<String>,
    },
    /// List instances.
    List,
    /// Show one instance (with its fault when it is in error).
    Show {
        /// Its name or UUID.
        id: String,
    },
    /// Delete an instance.
    Delete {
        /// Its name or UUID.
        id: String,
        /// Wait until it is gone.
        #[arg(long)]
        wait: bool,
    },
    /// Stop an instance.
    Stop {
        /// Its name or UUID.
        id: String,
        /// Wait until it is stopped (exited).
        #[arg(long)]
        wait: bool,
    },
    /// Start a stopped (or failed) instance.
    Start {
        /// Its name or UUID.
        id: String,
        /// Wait until it is active; fail (with the cause) if it ends in error.
        #[arg(long)]
        wait: bool,
    },
    /// Reboot an instance on its node (same disks): an orderly reboot, or a reset with --hard.
    Restart {
        /// Its name or UUID.
        id: String,
        /// A reset rather than an orderly reboot.
        #[arg(long)]
        hard: bool,
    },
    /// Pause a running instance (frozen in memory).
    Pause {
        /// Its name or UUID.
        id: String,
    },
    /// Unpause a paused instance.
    Unpause {
        /// Its name or UUID.
        id: String,
    },
    /// Suspend a running or paused instance (its memory saved to its node's disk).
    Suspend {
        /// Its name or UUID.
        id: String,
    },
    /// Resume a suspended instance.
    Resume {
        /// Its name or UUID.
        id: String,
    },
    /// Rebuild an active or stopped instance on its node: its disk made anew from an image
    /// (its own unless --image), its user data kept unless --user-data.
    Rebuild {
        /// Its name or UUID.
        id: String,
        /// Another image (name or UUID).
        #[arg(long)]
        image: Option<String>,
        /// A file of new cloud-init user data.
        #[arg(long)]
        user_data: Option<PathBuf>,
    },
    /// Resize a stopped instance on its node: `--flavor X` (then it waits, `resized`, for
    /// `--confirm` or `--revert`); its next start boots it with the flavor's resources.
    Resize {
        /// Its name or UUID.
        id: String,
        /// The new flavor (name or UUID).
        #[arg(long, conflicts_with_all = ["confirm", "revert"], required_unless_present_any = ["confirm", "revert"])]
        flavor: Option<String>,
        /// Keep the new flavor.
        #[arg(long, conflicts_with = "revert")]
        confirm: bool,
        /// Go back to the flavor it had.
        #[arg(long)]
        revert: bool,
    },
    /// What was asked of an instance, by whom and when, and how it went (newest first; a
    /// deleted instance's too, by UUID).
    Actions {
        /// Its name or UUID.
        id: String,
    },
    /// Show the last lines of an instance's serial console log (fetched by the controller
    /// from the instance's node).
    Console {
        /// Its name or UUID.
        id: String,
        /// How many lines, from the end (at most 10,000).
        #[arg(long, default_value_t = 100)]
        lines: usize,
    },
}

/// Workload commands.
#[derive(Debug, Subcommand)]
pub enum WorkloadCmd {
    /// List workloads.
    List,
    /// Show one.
    Show {
        /// Name or UUID.
        id: String,
    },
    /// Create one.
    Create {
        /// Its name.
        #[arg(long)]
        name: String,
        /// A flavor (name or UUID).
        #[arg(long)]
        flavor: String,
        /// An image (name or UUID).
        #[arg(long)]
        image: String,
        /// A file of cloud-init user data.
        #[arg(long)]
        user_data: Option<PathBuf>,
        /// Public (admins only).
        #[arg(long)]
        public: bool,
        /// Its instances hold nothing worth keeping: when their node is evacuated or lost,
        /// they start again elsewhere from the image.
        #[arg(long)]
        ephemeral: bool,
    },
    /// Delete one.
    Delete {
        /// Name or UUID.
        id: String,
    },
}

/// Flavor commands.
#[derive(Debug, Subcommand)]
pub enum FlavorCmd {
    /// List flavors.
    List,
    /// Create one (admins). A limit not given is the controller's default quota
    /// (`--default-quota`: 10 instances, 20 vCPUs, 51200 MiB unless set otherwise).
    Create {
        /// Its name.
        #[arg(long)]
        name: String,
        /// vCPUs.
        #[arg(long)]
        vcpus: u32,
        /// Memory, MiB.
        #[arg(long)]
        ram: u64,
        /// Disk, GiB.
        #[arg(long, default_value_t = 0)]
        disk: u64,
    },
    /// Delete one (admins).
    Delete {
        /// Name or UUID.
        id: String,
    },
}

/// Image commands.
#[derive(Debug, Subcommand)]
pub enum ImageCmd {
    /// List images.
    List,
    /// Show one.
    Show {
        /// Name or UUID.
        id: String,
    },
    /// Register one.
    Create {
        /// Its name.
        #[arg(long)]
        name: String,
        /// qcow2, raw, iso, kernel or ramdisk.
        #[arg(long, default_value = "raw")]
        kind: String,
        /// Where the agents find it (their image store's name for it).
        #[arg(long)]
        reference: String,
        /// Public (admins only).
        #[arg(long)]
        public: bool,
    },
    /// Delete one.
    Delete {
        /// Name or UUID.
        id: String,
    },
}

/// Node commands.
#[derive(Debug, Subcommand)]
pub enum NodeCmd {
    /// List nodes.
    List,
    /// Join tokens: what lets a new host join (`cumulo join` on it).
    #[command(subcommand)]
    Token(TokenCmd),
    /// List the hosts that joined with a token.
    Joined,
    /// Remove a joined host: drain it (an evacuation: its ephemeral instances start again
    /// elsewhere) and revoke its certificate (the scheduler ends its session and refuses it from
    /// then on). Refused while instances that live on the host (not ephemeral) are there.
    Remove {
        /// Its UUID.
        id: String,
        /// Remove it even with instances that live on it: they are lost with the host.
        #[arg(long)]
        force: bool,
        /// How long the drain may take, in seconds; the certificate is not revoked when it
        /// does not end in time.
        #[arg(long, default_value_t = 120)]
        drain_timeout: u64,
    },
    /// Show one.
    Show {
        /// Its UUID.
        id: String,
    },
    /// Evacuate one.
    Evacuate {
        /// Its UUID.
        id: String,
    },
    /// Let an evacuated node take work again.
    Restore {
        /// Its UUID.
        id: String,
    },
}

/// Join token commands.
#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Make a token; it is shown once.
    Create {
        /// The roles of the joining host's certificate: agent, netagent, or agent,netagent; or
        /// controller, for a second controller (`cumulo join --role controller`; the cluster's
        /// store must be etcd).
        #[arg(long, default_value = "agent,netagent")]
        roles: String,
        /// How long it is accepted (90s, 10m, 1h, at most 7d).
        #[arg(long, default_value = "1h")]
        ttl: String,
    },
    /// List tokens (without their secrets).
    List,
    /// Delete a token.
    Delete {
        /// Its id.
        id: String,
    },
}

/// `cumulo join`'s arguments.
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The controller's API URL (https://HOST:8889).
    #[arg(long = "to", value_name = "URL")]
    pub to: String,
    /// The join token (`cumulo node token create` prints it).
    #[arg(long, env = "CUMULO_JOIN_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Where this host's certificate, agent configuration, agent state and log go [default:
    /// the `cumulo up` directory's `joined/`].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// This host's name, as its certificate names it [default: the host name].
    #[arg(long)]
    pub hostname: Option<String>,
    /// What runs the instances: libvirt or sim.
    #[arg(long, default_value = "libvirt", value_parser = ["libvirt", "sim"])]
    pub backend: String,
    /// The scheduler(s) to dial, host:port, comma-separated [default: those the controller
    /// names, a loopback one as the controller's host].
    #[arg(long, value_delimiter = ',')]
    pub scheduler: Option<Vec<String>>,
    /// Another setting of the daemon, NAME=VALUE (a `CUMULO_AGENT_*` variable; with --role
    /// controller `CUMULO_CONTROLLER_*` or `CUMULO_ETCD_*`); repeat for several.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Write the configuration but do not start the agent (or controller).
    #[arg(long)]
    pub no_start: bool,
    /// A host with the cumulo-agent package: the certificate goes to ETC/pki, the settings
    /// into ETC/agent.conf, and the agent starts with `systemctl enable --now cumulo-agent`.
    #[arg(long, value_name = "ETC", num_args = 0..=1, default_missing_value = "/etc/cumulo", conflicts_with = "dir")]
    pub system: Option<PathBuf>,
    /// What this host joins as: agent (a node) or controller (a second controller on the
    /// cluster's etcd store: its settings in controller.conf, `--set CUMULO_ETCD_*` for its
    /// etcd client certificate). The token must be of that kind.
    #[arg(long, value_enum, default_value = "agent")]
    pub role: crate::join::JoinRole,
    /// With --role controller: the cluster CA's key, copied from the first controller's host
    /// (the controller issues CNCI and host certificates); checked against the cluster's CA,
    /// never sent.
    #[arg(long, value_name = "FILE")]
    pub ca_key: Option<PathBuf>,
}

/// Tenant commands.
#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    /// List tenants.
    List,
    /// Show one.
    Show {
        /// Name or UUID.
        id: String,
    },
    /// Create one (admins).
    Create {
        /// Its name.
        #[arg(long)]
        name: String,
        /// Most instances.
        #[arg(long)]
        instances: Option<u32>,
        /// Most vCPUs.
        #[arg(long)]
        vcpus: Option<u32>,
        /// Most memory, MiB.
        #[arg(long)]
        ram: Option<u64>,
    },
    /// Delete one (admins).
    Delete {
        /// Name or UUID.
        id: String,
    },
    /// Show (or, as admin, set) a tenant's quota and usage; a limit not given is left as it is.
    Quota {
        /// Name or UUID.
        id: String,
        /// New instance limit.
        #[arg(long)]
        instances: Option<u32>,
        /// New vCPU limit.
        #[arg(long)]
        vcpus: Option<u32>,
        /// New memory limit, MiB.
        #[arg(long)]
        ram: Option<u64>,
    },
}

/// CNCI commands.
#[derive(Debug, Subcommand)]
pub enum CnciCmd {
    /// List CNCIs.
    List,
}

/// `cumulo events`.
#[derive(Debug, Clone, Args)]
pub struct EventsArgs {
    /// Only events after this sequence number.
    #[arg(long)]
    pub after: Option<u64>,
    /// Delete the events (admins).
    #[arg(long)]
    pub clear: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_address_is_one_other_hosts_reach() {
        assert_eq!(
            public_address("10.77.0.1"),
            Ok("10.77.0.1".parse().unwrap())
        );
        assert!(public_address("fd00::1").is_ok());
        for bad in [
            "127.0.0.1",
            "0.0.0.0",
            "::",
            "::1",
            "224.0.0.1",
            "ctl.example",
        ] {
            assert!(public_address(bad).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from(["cumulo", "up", "--address", "0.0.0.0"]);
        assert!(cli.is_err());
    }
}
