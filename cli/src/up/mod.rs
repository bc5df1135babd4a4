//! `cumulo up`, `down` and `status`: a whole cluster on this host.
//!
//! `up` makes (or reuses) the certificates, chooses the backend (libvirt when it can be had,
//! else sim with a warning that says what to install), starts the scheduler, the controller and
//! one dual-role agent as detached processes with logs and PID files in the cluster's directory,
//! waits for each, seeds the cluster (flavors, the tiny image, a demo project and user) and boots
//! a first instance, then prints the exports for `cumulo` and `openstack`.

pub mod bootstrap;
pub mod cluster;
pub mod cnci;
pub mod error;
pub mod layout;
pub mod libvirt;
pub mod procs;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster::Backend;
use cnci::{ComputeNet, TenantNetwork};
use error::{UpError, io_err};
use layout::Layout;

/// What `up` was asked.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The cluster's directory.
    pub layout: Layout,
    /// The backend asked for.
    pub backend: Backend,
    /// This host's name.
    pub host: String,
    /// Install missing packages even when not root.
    pub install_deps: bool,
    /// Boot a first instance.
    pub first_instance: bool,
    /// How tenant instances are networked.
    pub tenant_network: TenantNetwork,
    /// With CNCIs: the host's address on its compute network (on the link `up` makes).
    pub compute: ComputeNet,
    /// With CNCIs: the host's own link that holds `compute`, instead of the one `up` makes.
    pub compute_link: Option<String>,
    /// The controller's store and how etcd is reached (`--store`, `--etcd-*`): its flags;
    /// `None`: what the last `up` was given, else SQLite.
    pub store: Option<Vec<String>>,
}

/// How long each service may take to come up.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How long `down` waits after SIGTERM.
pub const GRACE: Duration = Duration::from_secs(10);

/// One line of progress: "  what ... ok (1.2 s)".
struct Progress<'a> {
    out: &'a mut dyn Write,
    step: usize,
    steps: usize,
}

impl Progress<'_> {
    fn run<T>(
        &mut self,
        what: &str,
        f: impl FnOnce() -> Result<(T, String), UpError>,
    ) -> Result<T, UpError> {
        self.step += 1;
        let _ = write!(self.out, "[{}/{}] {what} ... ", self.step, self.steps);
        let _ = self.out.flush();
        let start = Instant::now();
        match f() {
            Ok((value, note)) => {
                let _ = writeln!(self.out, "{note} ({:.1} s)", start.elapsed().as_secs_f64());
                Ok(value)
            }
            Err(e) => {
                let _ = writeln!(self.out, "failed");
                Err(e)
            }
        }
    }
}

/// Brings the cluster up; progress and the final exports go to `out`. A cluster that already
/// runs is reported and left alone.
pub fn up(options: &UpOptions, out: &mut dyn Write) -> Result<(), UpError> {
    let layout = &options.layout;
    let (with_cnci, without_why) = match options.tenant_network {
        TenantNetwork::Auto => match cnci::tenant_networks_possible() {
            Ok(()) => (true, None),
            Err(why) => (false, Some(why)),
        },
        chosen => (chosen == TenantNetwork::Cnci, None),
    };
    if with_cnci && !cnci::is_root() {
        return Err(UpError::NotRoot(cnci::UPLINK));
    }
    let up_now: Vec<String> = cluster::running(layout)
        .into_iter()
        .filter(|(name, p)| p.is_some() && cluster::SERVICES.contains(&name.as_str()))
        .map(|(name, _)| name)
        .collect();
    if up_now.len() == cluster::SERVICES.len() {
        let _ = writeln!(
            out,
            "cumulo is already up in {} ({}); `cumulo status` shows it, `cumulo down` stops it.",
            layout.root.display(),
            up_now.join(", ")
        );
        if options.tenant_network != TenantNetwork::Auto
            && with_cnci != cnci::uplink_recorded(layout)
        {
            let _ = writeln!(
                out,
                "It runs {} tenant networks through CNCIs: `cumulo down`, then `cumulo up` again \
                 to change that.",
                if with_cnci { "without" } else { "with" }
            );
        }
        return Ok(());
    }
    if !up_now.is_empty() {
        // Half a cluster (a crash, a kill): start afresh.
        cluster::stop_all(layout, GRACE)?;
    }
    layout.make_dirs().map_err(io_err(&layout.root))?;
    let mut progress = Progress {
        out,
        step: 0,
        steps: 7
            + usize::from(options.first_instance)
            + 2 * usize::from(options.backend == Backend::Libvirt)
            + usize::from(with_cnci)
            + usize::from(with_cnci && options.backend == Backend::Libvirt),
    };
    progress.run("certificates", || {
        let made = cluster::certificates(layout, &options.host)?;
        Ok(((), if made { "made" } else { "kept" }.to_string()))
    })?;
    // Kept for `status`, `down` and the next `up` once the certificates name them.
    layout.save_addresses().map_err(io_err(&layout.root))?;
    let chosen = progress.run("backend", || {
        let chosen = bootstrap::choose_backend(options)?;
        let note = chosen.note.clone();
        Ok((chosen, note))
    })?;
    let backend = chosen.backend;
    if let Some(uri) = chosen.uri {
        layout.save_libvirt_uri(uri).map_err(io_err(&layout.root))?;
        // Before anything else starts: QEMU must reach the agent's files.
        progress.run("QEMU can reach the agent's files", || {
            Ok(((), libvirt::check_reach(layout, uri)?))
        })?;
    }
    if backend == Backend::Libvirt {
        progress.run("tiny guest image", || {
            let image = libvirt::install_tiny_guest(layout, &scripts_dir())?;
            Ok(((), format!("{}", image.display())))
        })?;
        if with_cnci {
            progress.run("CNCI guest image", || {
                let cnci_binary = error::binary("cumulo-cnci")?;
                let image = cnci::install_cnci_guest(layout, &scripts_dir(), &cnci_binary)?;
                Ok(((), format!("{}", image.display())))
            })?;
        }
    }
    if with_cnci {
        progress.run("compute network link", || {
            let note = match &options.compute_link {
                Some(link) => cnci::use_link(layout, link, options.compute)?,
                None => cnci::make_uplink(layout, options.compute)?,
            };
            Ok(((), note))
        })?;
    }
    cluster::password_file(&layout.admin_password())?;
    let compute = with_cnci.then_some(options.compute);
    let uplink = options.compute_link.as_deref().unwrap_or(cnci::UPLINK);
    let mut specs = cluster::specs(layout, backend, &options.host, compute.map(|c| (c, uplink)))?;
    // The store: as given (kept for the next `up`), else as the last `up` had it.
    let store_file = layout.root.join("store");
    let store = match &options.store {
        Some(flags) => {
            cluster::write_private(&store_file, &(flags.join("\n") + "\n"))?;
            flags.clone()
        }
        None => std::fs::read_to_string(&store_file)
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default(),
    };
    if let Some(controller) = specs.iter_mut().find(|s| s.name == "controller") {
        controller.args.extend(store);
    }
    // The processes started, as spawned: one that has ended already is seen as ended (its PID
    // file would only say it is not running).
    let mut agent = None;
    for spec in &specs {
        let name = spec.name.clone();
        let started = progress.run(&format!("start {name}"), || {
            let started = procs::spawn(spec, &layout.log(&name), &layout.pid_file(&name))?;
            let log = layout.log(&name);
            let ready: Box<dyn FnMut() -> bool> = match name.as_str() {
                "scheduler" => Box::new(|| cluster::listening(&layout.scheduler)),
                "controller" => {
                    Box::new(|| bootstrap::healthy(&layout.api_url(), layout.api_ca().as_deref()))
                }
                _ => Box::new(|| true),
            };
            cluster::wait_for(&name, &log, READY_WITHIN, Some(&started), ready)?;
            let pid = started.pid;
            Ok((started, format!("pid {pid}")))
        })?;
        if name == "agent" {
            agent = Some(started);
        }
    }
    let admin = bootstrap::admin_login(layout)?;
    progress.run("agent joins", || {
        let log = layout.log("agent");
        let waited = cluster::wait_for("agent", &log, READY_WITHIN, agent.as_ref(), || {
            bootstrap::node_ready(&admin)
        })?;
        Ok(((), format!("ready after {:.1} s", waited.as_secs_f64())))
    })?;
    let seeded = progress.run("flavors, image, demo project", || {
        let seeded = bootstrap::seed(layout, &admin, backend)?;
        Ok((seeded, "ok".to_string()))
    })?;
    if options.first_instance {
        progress.run("first instance", || {
            let id = bootstrap::first_instance(layout, &seeded, backend)?;
            let how = if backend == Backend::Libvirt {
                "active, booted"
            } else {
                "active"
            };
            Ok(((), format!("{id} {how}")))
        })?;
    }
    let exports = bootstrap::exports(layout, &seeded);
    cluster::write_private(&layout.env_file(), &exports)?;
    let out = progress.out;
    let dashboard = format!(
        "Dashboard: {}/ui/   (user {demo}, password {}, project {demo})\n",
        seeded.url,
        seeded.demo_password,
        demo = bootstrap::DEMO,
    );
    let networks = match compute {
        Some(net) => format!(
            "Tenant networks: through CNCIs, one per tenant subnet (`cumulo cnci list`), on the \
             compute network {net} ({}; CNCIs take {}); floating IPs from {} are routed on this \
             host to the CNCIs that hold them\n",
            uplink,
            net.cnci_addresses(),
            cnci::ComputeNet::FLOATING_RANGE
        ),
        None => match &without_why {
            Some(why) => {
                format!("Tenant networks: off: {why}. Instances get addresses, but no network.\n")
            }
            None => "Tenant networks: none (addresses are allocated, nothing is plumbed; \
                     --tenant-network cnci for CNCIs)\n"
                .to_string(),
        },
    };
    let _ = writeln!(
        out,
        "\ncumulo is up ({} backend). For the cumulo and openstack CLIs:\n\n{exports}\n\
         (also in {}; `. {}` sets them)\n{dashboard}{networks}Logs: {}\nStop: cumulo down   (--purge removes the state)",
        backend.as_str(),
        layout.env_file().display(),
        layout.env_file().display(),
        layout.logs().display(),
    );
    Ok(())
}

/// Stops the local cluster; with `purge`, removes its directory.
pub fn down(layout: &Layout, purge: bool, out: &mut dyn Write) -> Result<(), UpError> {
    // The cluster's VMs first, while the agent still runs (it reports them stopped); not the
    // CNCIs' VMs: the controller would start a stopped CNCI again.
    let cncis = cnci::recorded(layout);
    let mut vms = libvirt::stop_vms(layout, purge, &cncis);
    let mut stopped = cluster::stop(layout, cluster::SERVICES.iter().rev(), GRACE)?;
    // Nothing starts them again now: the CNCIs' VMs, then what the agent leaves of its CNCIs
    // (processes, namespaces, records), while libvirtd still runs.
    vms += libvirt::stop_vms(layout, purge, &[]);
    if vms > 0 {
        let _ = writeln!(out, "powered off {vms} VM(s)");
    }
    let namespaces = cnci::clean_up(layout);
    // With tenant networks, what the agent made of them on this host goes too.
    let tenant_links = if cnci::uplink_recorded(layout) {
        cnci::remove_tenant_links(&cnci::own_metadata_prefixes(layout))
    } else {
        Vec::new()
    };
    stopped.extend(cluster::stop(layout, cluster::DAEMONS.iter(), GRACE)?);
    if stopped.is_empty() {
        let _ = writeln!(out, "nothing was running in {}", layout.root.display());
    } else {
        let _ = writeln!(out, "stopped {}", stopped.join(", "));
    }
    if !namespaces.is_empty() {
        let _ = writeln!(out, "deleted CNCI namespace(s) {}", namespaces.join(", "));
    }
    if !tenant_links.is_empty() {
        let _ = writeln!(
            out,
            "deleted tenant network link(s) {}",
            tenant_links.join(", ")
        );
    }
    // The link `up` made, if it did.
    if let Some(link) = cnci::remove_uplink(layout) {
        let _ = writeln!(out, "deleted link {link}");
    }
    if purge && layout.root.exists() {
        std::fs::remove_dir_all(&layout.root).map_err(io_err(&layout.root))?;
        let _ = writeln!(out, "removed {}", layout.root.display());
    }
    Ok(())
}

/// Prints the exports `up` wrote for the cluster's CLIs.
pub fn env(layout: &Layout, out: &mut dyn Write) -> Result<(), UpError> {
    let path = layout.env_file();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        UpError::Other(format!(
            "{}: {e} (is a cluster up there? `cumulo up` makes it)",
            path.display()
        ))
    })?;
    out.write_all(text.as_bytes()).map_err(io_err(&path))
}

/// Shows what runs. `Ok(true)`: the whole cluster runs.
pub fn status(layout: &Layout, out: &mut dyn Write) -> Result<bool, UpError> {
    let mut all = true;
    for (name, process) in cluster::running(layout) {
        let core = cluster::SERVICES.contains(&name.as_str());
        match process {
            Some(p) => {
                let _ = writeln!(out, "{name:<11} running  pid {}", p.pid);
            }
            None if core => {
                all = false;
                let _ = writeln!(out, "{name:<11} stopped");
            }
            None => {}
        }
    }
    let api = layout.api_url();
    let healthy = bootstrap::healthy(&api, layout.api_ca().as_deref());
    let _ = writeln!(
        out,
        "api         {api} {}",
        if healthy {
            "answers"
        } else {
            "does not answer"
        }
    );
    let _ = writeln!(out, "directory   {}", layout.root.display());
    Ok(all && healthy)
}

/// The host name for certificates: `--host`, else the kernel's host name, else localhost.
pub fn default_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && certtool::build::check_host(h).is_ok())
        .unwrap_or_else(|| "localhost".into())
}

/// The scripts directory (for the tiny guest): `CUMULO_SCRIPTS_DIR`, else the repository's,
/// where cumulo was built from a checkout.
pub fn scripts_dir() -> PathBuf {
    std::env::var_os("CUMULO_SCRIPTS_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts"),
            PathBuf::from,
        )
}
