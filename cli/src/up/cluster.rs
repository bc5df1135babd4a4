//! Starting, finding and stopping the local cluster's services: certificates, the binaries,
//! the scheduler, the controller and one dual-role agent, each a detached child process.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use super::cnci::{CNCI_IMAGE, ComputeNet, TenantNetwork};
use super::error::{UpError, binary, io_err};
use super::layout::Layout;
use super::procs::{self, Spec};

/// The services of a local cluster, in start order (stopped in reverse).
pub const SERVICES: [&str; 3] = ["scheduler", "controller", "agent"];

/// What runs the instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// Real VMs through libvirt and qemu.
    Libvirt,
    /// Simulated instances.
    Sim,
}

impl Backend {
    /// The agent's `--backend` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Libvirt => "libvirt",
            Backend::Sim => "sim",
        }
    }
}

/// Makes (or keeps) the certificate set for `host`.
pub fn certificates(layout: &Layout, host: &str) -> Result<bool, UpError> {
    let spec = certtool::cluster::ClusterSpec {
        directory: layout.certs(),
        hosts: vec![host.to_string(), "localhost".into(), "127.0.0.1".into()]
            .into_iter()
            .fold(Vec::new(), |mut v, h| {
                if !v.contains(&h) {
                    v.push(h);
                }
                v
            }),
        ips: layout.public_ips(),
        organization: "cumulo".into(),
        key_type: certtool::key::KeyType::default(),
        days: 365,
        force: false,
    };
    std::fs::create_dir_all(layout.certs()).map_err(io_err(&layout.certs()))?;
    let made = match certtool::cluster::cluster(&spec, SystemTime::now()) {
        Ok(outcome) => matches!(outcome, certtool::cluster::Outcome::Made(_)),
        // Made by an earlier `up` for other addresses (no --address then): say how to go on.
        Err(certtool::cluster::ClusterError::Invalid { reason, .. })
            if reason.contains("does not name") =>
        {
            return Err(UpError::Other(format!(
                "the certificates in {} were made for other addresses ({reason}): `cumulo down \
                 --purge`, then `cumulo up` with the addresses, makes them again",
                layout.certs().display()
            )));
        }
        Err(e) => return Err(e.into()),
    };
    revocation_list(layout)?;
    Ok(made)
}

/// The CA's revocation list, which the scheduler reads and the controller extends when a
/// joined host is removed: an empty one when there is none, or when the one there is not this
/// CA's (the set was made again).
fn revocation_list(layout: &Layout) -> Result<(), UpError> {
    let path = layout.crl();
    let (ca, ca_key) = layout.cert(certtool::cluster::CA);
    let read = |p: &Path| std::fs::read(p).map_err(io_err(p));
    let anchor = certtool::build::Anchor::from_pem(&read(&ca)?, &read(&ca_key)?, SystemTime::now())
        .map_err(|e| UpError::Other(format!("{}: {e}", ca.display())))?;
    // Made when missing; one that is there is read (and so checked) but never replaced: that
    // would lift its revocations.
    certtool::crl::update(&path, &anchor, SystemTime::now(), |_| Vec::new()).map_err(|e| {
        UpError::Other(format!(
            "{}: {e} (a list of another CA: remove it if the certificates were made anew)",
            path.display()
        ))
    })?;
    Ok(())
}

/// Makes a random password file (mode 0600) if there is none; returns the password.
pub fn password_file(path: &Path) -> Result<String, UpError> {
    if let Ok(text) = std::fs::read_to_string(path) {
        let p = text.trim().to_string();
        if !p.is_empty() {
            return Ok(p);
        }
    }
    let password: String = uuid::Uuid::new_v4().simple().to_string();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode_0600()
        .open(path)
        .map_err(io_err(path))?;
    writeln!(f, "{password}").map_err(io_err(path))?;
    Ok(password)
}

/// Writes `text` to `path`, readable by this user alone (it holds a password).
pub fn write_private(path: &Path, text: &str) -> Result<(), UpError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode_0600()
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(text.as_bytes()).map_err(io_err(path))?;
    // An older file keeps its mode when opened: make sure.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io_err(path))
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// The command line of each service; with `cnci` (the host's compute-network address),
/// tenant networks go through CNCIs that the agent runs.
pub fn specs(
    layout: &Layout,
    backend: Backend,
    host: &str,
    cnci: Option<(ComputeNet, &str)>,
) -> Result<Vec<Spec>, UpError> {
    let cert = |name: &str| {
        let (c, k) = layout.cert(name);
        (c.display().to_string(), k.display().to_string())
    };
    let ca = layout.ca().display().to_string();
    let (sched_cert, sched_key) = cert("scheduler");
    let (ctl_cert, ctl_key) = cert("controller");
    let (agent_cert, agent_key) = cert("agent");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let scheduler = Spec {
        name: "scheduler".into(),
        program: binary("cumulo-scheduler")?,
        args: s(&[
            "--ca-cert",
            &ca,
            "--cert",
            &sched_cert,
            "--key",
            &sched_key,
            "--listen",
            &layout.scheduler,
            "--state-dir",
            &layout.state("scheduler").display().to_string(),
            "--crl",
            &layout.crl().display().to_string(),
        ]),
        env: plain_logs(),
    };
    // Dialled where it listens: another host's agent is told this address too.
    let scheduler_at = super::layout::dial(&layout.scheduler);
    let mut controller_args = s(&[
        "--ca-cert",
        &ca,
        "--cert",
        &ctl_cert,
        "--key",
        &ctl_key,
        "--scheduler",
        &scheduler_at,
        "--state-dir",
        &layout.state("controller").display().to_string(),
        "--api-listen",
        &layout.api,
        "--admin-password-file",
        &layout.admin_password().display().to_string(),
        "--agent-console-port",
        port(&layout.console),
        "--image-listen",
        &layout.images,
    ]);
    // Off loopback (`--address`) the API speaks HTTPS, with the controller's certificate (it
    // names the address); its URL is the one clients are given.
    if layout.api_ca().is_some() {
        controller_args.extend(s(&["--api-cert", &ctl_cert, "--api-key", &ctl_key]));
    }
    controller_args.extend(s(&["--public-url", &layout.api_url()]));
    let tenant_network = if cnci.is_some() {
        TenantNetwork::Cnci
    } else {
        TenantNetwork::None
    };
    controller_args.extend(s(&["--tenant-network", tenant_network.as_str()]));
    if cnci.is_some() {
        // The agent routes the floating IPs of the same range to their CNCIs.
        controller_args.extend(s(&["--floating-range", ComputeNet::FLOATING_RANGE]));
    }
    // With the CA key the controller issues each CNCI its own certificate (and off-host
    // launchers theirs).
    let (_, ca_key) = cert(certtool::cluster::CA);
    controller_args.extend(s(&["--ca-key", &ca_key]));
    // Hosts joined with `cumulo join` and removed go on the CA's revocation list, which the
    // scheduler reads.
    controller_args.extend(s(&["--crl", &layout.crl().display().to_string()]));
    let controller = Spec {
        name: "controller".into(),
        program: binary("cumulo-controller")?,
        args: controller_args,
        env: plain_logs(),
    };
    let mut agent_args = s(&[
        "--ca-cert",
        &ca,
        "--cert",
        &agent_cert,
        "--key",
        &agent_key,
        "--scheduler",
        &scheduler_at,
        "--network",
        "dual",
        "--backend",
        backend.as_str(),
        "--state-dir",
        &layout.state("agent").display().to_string(),
        "--hostname",
        host,
        "--console-listen",
        &layout.console,
    ]);
    // One host plays the whole cloud: offer more vCPUs than it has (tiny guests mostly idle).
    agent_args.extend(s(&["--vcpus", "32"]));
    if backend == Backend::Libvirt {
        // The controller's certificate names localhost (and 127.0.0.1), and --address.
        let images_at = super::layout::dial(&layout.images);
        agent_args.extend(s(&[
            "--libvirt-uri",
            &layout.libvirt_uri(),
            "--image-server",
            &images_at,
        ]));
    }
    // A developer's disk is not a data centre's: the agent's disk watermarks (full below 8 GB
    // free) would refuse tiny guests on a laptop with a few GB left; a disk really full fails the
    // start with its cause instead. Simulated instances use no memory either.
    agent_args.push("--no-disk-limit".into());
    if backend == Backend::Sim {
        agent_args.push("--no-mem-limit".into());
    }
    if let Some((net, uplink)) = cnci {
        agent_args.extend(s(&[
            "--node-ip",
            &net.address.to_string(),
            "--tunnel",
            "vxlan",
            "--cnci-uplink",
            uplink,
            "--cnci-addresses",
            &net.cnci_addresses(),
            "--cnci-prefix",
            &net.prefix.to_string(),
            "--cnci-binary",
            &binary("cumulo-cnci")?.display().to_string(),
            "--floating-range",
            ComputeNet::FLOATING_RANGE,
        ]));
        if backend == Backend::Libvirt {
            agent_args.extend(s(&["--cnci-image", CNCI_IMAGE]));
        }
    }
    let agent = Spec {
        name: "agent".into(),
        program: binary("cumulo-agent")?,
        args: agent_args,
        env: plain_logs(),
    };
    Ok(vec![scheduler, controller, agent])
}

/// Logs written to files are read by people and tools: no terminal colour codes.
fn plain_logs() -> Vec<(String, String)> {
    vec![("NO_COLOR".into(), "1".into())]
}

fn port(addr: &str) -> &str {
    addr.rsplit(':').next().unwrap_or("8888")
}

/// Polls `ready` every 50 ms until it holds or `within` passes; when `process` is given and
/// ends meanwhile, fails at once with the end of its log.
pub fn wait_for(
    service: &str,
    log: &Path,
    within: Duration,
    process: Option<&procs::Running>,
    mut ready: impl FnMut() -> bool,
) -> Result<Duration, UpError> {
    let start = Instant::now();
    loop {
        if ready() {
            return Ok(start.elapsed());
        }
        if let Some(p) = process
            && procs::ended(p.pid)
        {
            return Err(UpError::Exited {
                service: service.into(),
                log: log.display().to_string(),
                tail: tail(log, 15),
            });
        }
        if start.elapsed() >= within {
            return Err(UpError::NotReady {
                service: service.into(),
                waited: within,
                log: log.display().to_string(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last `lines` lines of a log, indented, without terminal colour codes.
pub fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| format!("  {}", strip_ansi(l)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `line` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether something accepts TCP connections at `addr`.
pub fn listening(addr: &str) -> bool {
    addr.parse()
        .ok()
        .and_then(|a| TcpStream::connect_timeout(&a, Duration::from_millis(200)).ok())
        .is_some()
}

/// The services that run now, with their PIDs.
pub fn running(layout: &Layout) -> Vec<(String, Option<procs::Running>)> {
    SERVICES
        .iter()
        .chain(DAEMONS.iter())
        .map(|s| (s.to_string(), procs::running(&layout.pid_file(s))))
        .collect()
}

/// The daemons `up` may start for the libvirt backend, stopped after the services.
pub const DAEMONS: [&str; 2] = ["libvirtd", "virtlogd"];

/// Stops every service (reverse start order), then the libvirt daemons `up` started,
/// gracefully then forcefully; returns those that were running.
pub fn stop_all(layout: &Layout, grace: Duration) -> Result<Vec<String>, UpError> {
    let mut stopped = stop(layout, SERVICES.iter().rev(), grace)?;
    stopped.extend(stop(layout, DAEMONS.iter(), grace)?);
    Ok(stopped)
}

/// Stops `services` in this order; returns those that were running.
pub fn stop<'a>(
    layout: &Layout,
    services: impl Iterator<Item = &'a &'a str>,
    grace: Duration,
) -> Result<Vec<String>, UpError> {
    let mut stopped = Vec::new();
    for service in services {
        if procs::stop(service, &layout.pid_file(service), grace)? {
            stopped.push(service.to_string());
        }
    }
    Ok(stopped)
}
