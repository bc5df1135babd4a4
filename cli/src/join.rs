//! `cumulo join`: this host joins a running cluster with a join token (`cumulo node token
//! create` on the cluster, `docs/deploy.md`). It fetches the cluster CA and checks it against
//! the SHA-256 the token names (so the token goes only to that cluster's controller), makes its
//! own key (which never leaves the host) and a certificate signing request, proves the token
//! (`POST /cumulo/v1/join`), writes its certificate, key and agent configuration under its
//! directory, and starts its agent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

use crate::client::{ClientError, Connection};
use crate::up::layout::{host_part, loopback_host, own_host};
use crate::up::procs::{self, Spec};

/// Why the host could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The token is not one.
    #[error("not a join token (it is <id>.<secret>.<ca>: 32, 64 and 64 hex digits)")]
    Token,
    /// The controller's CA is not the one the token names.
    #[error(
        "the controller at {0} is not the cluster the token names (its CA's SHA-256 differs): the token was not sent"
    )]
    OtherCluster(String),
    /// The controller refused or could not be reached.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// An answer lacks something.
    #[error("the controller's answer: {0}")]
    Answer(String),
    /// Making the key or the request.
    #[error("making this host's key: {0}")]
    Key(String),
    /// Files.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The daemon (agent or controller) did not start.
    #[error("{0}")]
    Agent(String),
    /// Options that do not go together.
    #[error("{0}")]
    Usage(String),
}

/// What `cumulo join` was asked.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// The controller's API URL.
    pub controller: String,
    /// The join token.
    pub token: String,
    /// Where this host's certificate, configuration, agent state and logs go.
    pub dir: PathBuf,
    /// This host's name (its certificate names it).
    pub hostname: String,
    /// The agent's backend (`libvirt` or `sim`).
    pub backend: String,
    /// The schedulers to dial, instead of those the controller names.
    pub schedulers: Option<Vec<String>>,
    /// Extra `CUMULO_AGENT_*` settings for the agent's configuration.
    pub settings: Vec<(String, String)>,
    /// Start the agent.
    pub start: bool,
    /// A packaged host's configuration directory (`/etc/cumulo`): the certificate goes to its
    /// `pki/`, the settings into its `agent.conf` (the package's file, edited), and the agent
    /// is started with `systemctl enable --now cumulo-agent`.
    pub system: Option<PathBuf>,
    /// What the host joins as.
    pub role: JoinRole,
    /// A controller's copy of the cluster CA's key (a controller issues CNCI and host
    /// certificates); never sent anywhere.
    pub ca_key: Option<PathBuf>,
}

/// What a host joins as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum JoinRole {
    /// A node: its agent (a token for agent, netagent or both).
    #[default]
    Agent,
    /// A second controller on the cluster's etcd store (a controller token).
    Controller,
}

impl JoinRole {
    /// The daemon's name (`agent`, `controller`): its files' and its unit's.
    pub fn daemon(self) -> &'static str {
        match self {
            JoinRole::Agent => "agent",
            JoinRole::Controller => "controller",
        }
    }

    /// Its settings' prefix.
    fn prefix(self) -> &'static str {
        match self {
            JoinRole::Agent => "CUMULO_AGENT_",
            JoinRole::Controller => "CUMULO_CONTROLLER_",
        }
    }
}

/// What joining gave.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The node's UUID.
    pub node_id: String,
    /// The agent's configuration file.
    pub config: PathBuf,
    /// The agent's PID, when started.
    pub pid: Option<i32>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The token's parts: (id, secret, CA hash), checked for form only.
fn token_parts(token: &str) -> Result<(&str, &str, &str), JoinError> {
    let mut parts = token.trim().split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(id), Some(secret), Some(ca), None)
            if id.len() == 32
                && secret.len() == 64
                && ca.len() == 64
                && [id, secret, ca]
                    .iter()
                    .all(|p| p.bytes().all(|b| b.is_ascii_hexdigit())) =>
        {
            Ok((id, secret, ca))
        }
        _ => Err(JoinError::Token),
    }
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), JoinError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let err = |e: std::io::Error| JoinError::File {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(path)
        .map_err(err)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

/// The host of a URL (`https://ctl.example:8889/x` → `ctl.example`).
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?.to_string(),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .to_string(),
    };
    (!host.is_empty()).then_some(host)
}

/// An address (a scheduler's, the image endpoint's) as the controller names it, as this host
/// should dial it: a loopback or unspecified host (the controller's own) becomes the
/// controller's host.
fn reachable(scheduler: &str, controller_host: &str) -> String {
    let port = scheduler.rsplit_once(':').map_or("8888", |(_, p)| p);
    if own_host(host_part(scheduler)) {
        if controller_host.contains(':') {
            format!("[{controller_host}]:{port}")
        } else {
            format!("{controller_host}:{port}")
        }
    } else {
        scheduler.to_string()
    }
}

/// The id of group `name` (from `/etc/group`).
fn group_id(name: &str) -> Option<u32> {
    std::fs::read_to_string("/etc/group")
        .ok()?
        .lines()
        .find_map(|line| {
            let mut fields = line.split(':');
            (fields.next()? == name)
                .then(|| fields.nth(1)?.parse().ok())
                .flatten()
        })
}

/// This host's address on the way to the controller at `url` (the source address the kernel
/// picks for it; nothing is sent), unless that is a loopback address.
fn address_towards(url: &str) -> Option<std::net::IpAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs, UdpSocket};
    let host = url_host(url)?;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    // Only the route matters, not the port.
    let port = authority
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .unwrap_or(443);
    let to = (host.as_str(), port).to_socket_addrs().ok()?.next()?;
    let local: IpAddr = if to.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        Ipv6Addr::UNSPECIFIED.into()
    };
    let socket = UdpSocket::bind((local, 0)).ok()?;
    socket.connect(to).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// The agent's `--network` for the certificate's roles.
fn network_for(roles: &str) -> &'static str {
    let agent = roles.split(['|', ',']).any(|r| r.trim() == "agent");
    let net = roles.split(['|', ',']).any(|r| r.trim() == "netagent");
    match (agent, net) {
        (true, true) => "dual",
        (false, true) => "nn",
        _ => "cn",
    }
}

/// Joins this host: see the module documentation.
pub fn join(options: &JoinOptions, out: &mut dyn std::io::Write) -> Result<Joined, JoinError> {
    let (_, _, ca_hash) = token_parts(&options.token)?;
    if options.role == JoinRole::Controller && options.ca_key.is_none() {
        return Err(JoinError::Usage(
            "a controller holds the cluster CA's key: --ca-key FILE, copied from the first \
             controller's host over a channel you trust (cumulo join never sends it)"
                .into(),
        ));
    }
    // 1. The cluster's CA, checked against the token before the token goes anywhere.
    // Over plain HTTP anyone on the way reads the token: only to this host itself.
    if options.controller.starts_with("http://") {
        let host = url_host(&options.controller).unwrap_or_default();
        if !loopback_host(&host) {
            return Err(JoinError::Answer(format!(
                "{}: a join goes over https (plain http only to a loopback address)",
                options.controller
            )));
        }
    }
    let answer = Connection::unverified(&options.controller)?.get("/cumulo/v1/join/ca")?;
    let answered = answer["ca"]
        .as_str()
        .ok_or_else(|| JoinError::Answer("no CA".into()))?;
    // Exactly one certificate, the one the token names; only that one is trusted from here on
    // (another certificate beside it would be trusted too).
    let certs: Vec<_> = CertificateDer::pem_slice_iter(answered.as_bytes()).collect();
    let ca_der = match certs.as_slice() {
        [Ok(der)] => der.clone(),
        _ => {
            return Err(JoinError::Answer(
                "the CA answer is not exactly one PEM certificate".into(),
            ));
        }
    };
    if !sha256_hex(&ca_der).eq_ignore_ascii_case(ca_hash) {
        return Err(JoinError::OtherCluster(options.controller.clone()));
    }
    let ca_pem = certtool::build::pem_of(&ca_der);
    // A controller brings the CA's key (copied by the admin): it must be this CA's, checked
    // before the token is sent.
    let ca_key = match (options.role, &options.ca_key) {
        (JoinRole::Controller, None) => {
            return Err(JoinError::Usage(
                "a controller holds the cluster CA's key: --ca-key FILE, copied from the first \
                 controller's host over a channel you trust (cumulo join never sends it)"
                    .into(),
            ));
        }
        (JoinRole::Controller, Some(path)) => {
            let key = std::fs::read(path).map_err(|e| JoinError::File {
                path: path.clone(),
                why: e.to_string(),
            })?;
            certtool::build::Anchor::from_pem(
                ca_pem.as_bytes(),
                &key,
                std::time::SystemTime::now(),
            )
            .map_err(|e| JoinError::File {
                path: path.clone(),
                why: format!("not the cluster CA's key: {e}"),
            })?;
            Some(String::from_utf8_lossy(&key).into_owned())
        }
        (JoinRole::Agent, None) => None,
        (JoinRole::Agent, Some(_)) => {
            return Err(JoinError::Usage(
                "--ca-key is for a controller (--role controller): an agent never holds the CA key"
                    .into(),
            ));
        }
    };
    let daemon = options.role.daemon();
    let prefix = options.role.prefix();
    let pki = match &options.system {
        Some(etc) => etc.join("pki"),
        None => options.dir.join("pki"),
    };
    let config = match &options.system {
        Some(etc) => {
            let file = etc.join(format!("{daemon}.conf"));
            if !file.is_file() {
                return Err(JoinError::File {
                    path: file,
                    why: format!("missing: install the cumulo-{daemon} package first"),
                });
            }
            file
        }
        None => options.dir.join(format!("{daemon}.conf")),
    };
    let ca_path = pki.join("ca.pem");
    write(&ca_path, &ca_pem, 0o644)?;
    // 2. This host's key and its request; the key stays here.
    let key = rcgen::KeyPair::generate().map_err(|e| JoinError::Key(e.to_string()))?;
    let csr = rcgen::CertificateParams::new(vec![options.hostname.clone()])
        .and_then(|p| p.serialize_request(&key))
        .and_then(|r| r.pem())
        .map_err(|e| JoinError::Key(e.to_string()))?;
    // 3. The join, over TLS verified against that CA (when the URL is https).
    let conn = Connection::anonymous(&options.controller, Some(&ca_path))?;
    let mut request =
        json!({"token": options.token.trim(), "csr": csr, "hostname": options.hostname});
    // Named only for a controller: an agent's request stays what controllers before roles take.
    if options.role == JoinRole::Controller {
        request["role"] = json!(daemon);
    }
    let joined = conn.post("/cumulo/v1/join", &request)?;
    let field = |name: &str| {
        joined[name]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| JoinError::Answer(format!("no {name}")))
    };
    let node_id = field("node_id")?;
    let certificate = field("certificate")?;
    let roles = ssntp_roles(&certificate)?;
    let (cert_path, key_path) = (
        pki.join(format!("{daemon}.pem")),
        pki.join(format!("{daemon}.key")),
    );
    // The packaged controller runs as the cumulo group's user: its keys are 0640 there.
    let secret_mode = if options.system.is_some() && options.role == JoinRole::Controller {
        0o640
    } else {
        0o600
    };
    write(&key_path, &key.serialize_pem(), secret_mode)?;
    write(&cert_path, &certificate, 0o644)?;
    let ca_key_path = pki.join("ca.key");
    if let Some(text) = &ca_key {
        write(&ca_key_path, text, secret_mode)?;
    }
    if secret_mode == 0o640 {
        // The packaged controller's user reads them through its group.
        match group_id("cumulo") {
            Some(gid) => {
                for path in [&key_path, &ca_key_path] {
                    std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
                        JoinError::File {
                            path: path.clone(),
                            why: format!("giving it to the cumulo group: {e}"),
                        }
                    })?;
                }
            }
            // It could not start: said before anything is started.
            None if options.start => {
                return Err(JoinError::File {
                    path: "/etc/group".into(),
                    why: "no cumulo group, whose user runs the packaged controller: install \
                          the cumulo package first"
                        .into(),
                });
            }
            None => {
                writeln!(
                    out,
                    "warning: no cumulo group yet: give it {} and {} before the controller starts",
                    key_path.display(),
                    ca_key_path.display()
                )
                .ok();
            }
        }
    }
    // 4. The agent's configuration, in the unit's format (docs/deploy.md).
    let controller_host = url_host(&options.controller).unwrap_or_else(|| "localhost".into());
    let schedulers = match &options.schedulers {
        Some(s) => s.clone(),
        None => joined["schedulers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str())
                    .map(|s| reachable(s, &controller_host))
                    .collect()
            })
            .unwrap_or_default(),
    };
    if schedulers.is_empty() {
        return Err(JoinError::Answer("no scheduler to dial".into()));
    }
    let state = options.dir.join(daemon);
    let named = |name: &str, value: String| (format!("{prefix}{name}"), value);
    let mut settings: Vec<(String, String)> = vec![
        named("CA_CERT", ca_path.display().to_string()),
        named("CERT", cert_path.display().to_string()),
        named("KEY", key_path.display().to_string()),
        named("SCHEDULER", schedulers.join(",")),
    ];
    if options.role == JoinRole::Controller {
        let store = joined["store"]
            .as_str()
            .ok_or_else(|| JoinError::Answer("no shared store for a controller".into()))?;
        let endpoints = store
            .trim_start_matches("etcd://")
            .split('/')
            .next()
            .unwrap_or_default();
        if !own_host(&controller_host) && endpoints.split(',').any(|e| own_host(host_part(e))) {
            writeln!(
                out,
                "warning: the cluster's store {store} names a loopback address, which is this \
                 host's own here: --set CUMULO_CONTROLLER_STORE=etcd://... with the etcd \
                 members' addresses"
            )
            .ok();
        }
        settings.extend([
            named("STORE", store.to_string()),
            named(
                "TENANT_NETWORK",
                joined["tenant_network"]
                    .as_str()
                    .unwrap_or("none")
                    .to_string(),
            ),
            named("LAUNCHER_CA_KEY", ca_key_path.display().to_string()),
        ]);
        if options.system.is_none() {
            settings.push(named("STATE_DIR", state.display().to_string()));
        }
        return finish(
            options, &node_id, &roles, &cert_path, &config, settings, out,
        );
    }
    settings.extend([
        ("CUMULO_AGENT_NETWORK".into(), network_for(&roles).into()),
        ("CUMULO_AGENT_BACKEND".into(), options.backend.clone()),
        ("CUMULO_AGENT_HOSTNAME".into(), options.hostname.clone()),
    ]);
    let local = own_host(&controller_host);
    // Uploaded images come from the controller's node image endpoint; one on loopback serves
    // only the controller's own host.
    match joined["image_server"].as_str() {
        Some(at) if local || !own_host(host_part(at)) => settings.push((
            "CUMULO_AGENT_IMAGE_SERVER".into(),
            reachable(at, &controller_host),
        )),
        Some(at) => {
            writeln!(
                out,
                "warning: the controller's image endpoint listens on {at}, which this host cannot \
                 reach (cumulo up --address on the controller's host): instances from uploaded \
                 images will not start here"
            )
            .ok();
        }
        None => {}
    }
    // The end of this host's tenant tunnels: the address it reaches the controller from (a
    // loopback one says nothing: the cluster is this host).
    match address_towards(&options.controller) {
        Some(ip) => settings.push(("CUMULO_AGENT_NODE_IP".into(), ip.to_string())),
        None if !local => {
            writeln!(
                out,
                "warning: no address of this host towards {controller_host} was found: tenant \
                 networks are off here until CUMULO_AGENT_NODE_IP is set (--set)"
            )
            .ok();
        }
        None => {}
    }
    if options.system.is_none() {
        // A packaged agent keeps the package's (/var/lib/cumulo/agent), and its tunnel kind.
        settings.push(("CUMULO_AGENT_STATE_DIR".into(), state.display().to_string()));
        // `cumulo up`'s CNCIs speak VXLAN.
        settings.push(("CUMULO_AGENT_TUNNEL".into(), "vxlan".into()));
    }
    finish(
        options, &node_id, &roles, &cert_path, &config, settings, out,
    )
}

/// Writes the daemon's configuration (`settings`, then the user's `--set`s) and starts it.
fn finish(
    options: &JoinOptions,
    node_id: &str,
    roles: &str,
    cert_path: &Path,
    config: &Path,
    mut settings: Vec<(String, String)>,
    out: &mut dyn std::io::Write,
) -> Result<Joined, JoinError> {
    let daemon = options.role.daemon();
    for (k, v) in &options.settings {
        settings.retain(|(name, _)| name != k);
        settings.push((k.clone(), v.clone()));
    }
    let text = if options.system.is_some() {
        let old = std::fs::read_to_string(config).map_err(|e| JoinError::File {
            path: config.to_path_buf(),
            why: e.to_string(),
        })?;
        configure(&old, &settings)
    } else {
        std::iter::once(format!(
            "# cumulo-{daemon}'s settings, written by `cumulo join` (node {node_id}); NAME=VALUE, the\n# variables of `cumulo-{daemon} --help` (packaging/etc/{daemon}.conf documents each).\n"
        ))
        .chain(settings.iter().map(|(k, v)| format!("{k}={v}\n")))
        .collect()
    };
    write(
        config,
        &text,
        if options.system.is_some() {
            0o640
        } else {
            0o600
        },
    )?;
    writeln!(
        out,
        "joined as node {node_id} ({roles}); certificate {}, configuration {}",
        cert_path.display(),
        config.display()
    )
    .ok();
    // 5. The daemon.
    let pid = match (options.start, &options.system) {
        (false, _) => None,
        (true, Some(_)) => {
            systemctl_start(daemon, out)?;
            None
        }
        (true, None) => Some(start_daemon(options.role, &options.dir, settings, out)?),
    };
    Ok(Joined {
        node_id: node_id.to_string(),
        config: config.to_path_buf(),
        pid,
    })
}

/// `text` (a configuration file) with each of `settings` set: its line (or its commented-out
/// line, `#NAME=...`) replaced, or added at the end.
pub fn configure(text: &str, settings: &[(String, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for (name, value) in settings {
        let line = format!("{name}={value}");
        let at = lines.iter().position(|l| {
            l.strip_prefix('#')
                .unwrap_or(l)
                .split_once('=')
                .is_some_and(|(k, _)| k.trim() == name)
        });
        match at {
            Some(i) => lines[i] = line,
            None => lines.push(line),
        }
    }
    lines.join("\n") + "\n"
}

/// `systemctl enable --now cumulo-<daemon>.service`.
fn systemctl_start(daemon: &str, out: &mut dyn std::io::Write) -> Result<(), JoinError> {
    let unit = format!("cumulo-{daemon}.service");
    let done = std::process::Command::new("systemctl")
        .args(["enable", "--now", &unit])
        .output()
        .map_err(|e| JoinError::Agent(format!("the {daemon} did not start: systemctl: {e}")))?;
    if !done.status.success() {
        return Err(JoinError::Agent(format!(
            "the {daemon} did not start: systemctl enable --now {unit}: {}",
            String::from_utf8_lossy(&done.stderr).trim()
        )));
    }
    writeln!(
        out,
        "{unit} enabled and started (journalctl -u cumulo-{daemon})"
    )
    .ok();
    Ok(())
}

/// The roles of the certificate (PEM), as text.
fn ssntp_roles(pem: &str) -> Result<String, JoinError> {
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| JoinError::Answer("the certificate is not PEM".into()))?;
    let info = ssntp::cert::CertInfo::parse(&der).map_err(|e| JoinError::Answer(e.to_string()))?;
    Ok(info.roles.to_string())
}

/// Starts the daemon detached with `settings` as its environment, and waits until it says it
/// is ready (an agent: connected to a scheduler; a controller: its API listens and it is
/// connected to a scheduler) or ends (its log's last lines are then the error).
fn start_daemon(
    role: JoinRole,
    dir: &Path,
    settings: Vec<(String, String)>,
    out: &mut dyn std::io::Write,
) -> Result<i32, JoinError> {
    let daemon = role.daemon();
    let program = crate::up::error::binary(&format!("cumulo-{daemon}"))
        .map_err(|e| JoinError::Agent(format!("the {daemon} did not start: {e}")))?;
    let mut env = settings;
    env.push(("NO_COLOR".into(), "1".into()));
    let spec = Spec {
        name: daemon.into(),
        program,
        args: Vec::new(),
        env,
    };
    let ready: &[&str] = match role {
        JoinRole::Agent => &["agent::daemon: connected"],
        JoinRole::Controller => &[
            "cumulo_controller: API listening",
            "controller::engine::run: connected to the scheduler",
        ],
    };
    let log = dir.join(format!("{daemon}.log"));
    let pid_file = dir.join(format!("{daemon}.pid"));
    if let Some(running) = procs::running(&pid_file) {
        return Err(JoinError::Agent(format!(
            "the {daemon} did not start: one already runs from {} (pid {})",
            dir.display(),
            running.pid
        )));
    }
    let start_len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let running = procs::spawn(&spec, &log, &pid_file)
        .map_err(|e| JoinError::Agent(format!("the {daemon} did not start: {e}")))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let new = text
            .get(usize::try_from(start_len).unwrap_or(0)..)
            .unwrap_or("");
        if ready.iter().all(|line| new.contains(line)) {
            writeln!(
                out,
                "{daemon} started (pid {}), connected; log {}",
                running.pid,
                log.display()
            )
            .ok();
            return Ok(running.pid);
        }
        if procs::ended(running.pid) {
            let tail: Vec<&str> = new.lines().rev().take(10).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(JoinError::Agent(format!(
                "the {daemon} did not start: it exited; {}:\n{}",
                log.display(),
                tail.join("\n")
            )));
        }
        if std::time::Instant::now() >= deadline {
            return Err(JoinError::Agent(format!(
                "the {daemon} is not ready after 60 s (it runs, pid {}); see {}",
                running.pid,
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunnels_end_where_the_controller_is_reached_from() {
        assert_eq!(address_towards("http://127.0.0.1:8889"), None);
        assert_eq!(address_towards("https://localhost:8889/"), None);
        assert_eq!(address_towards("not a url"), None);
    }

    #[test]
    fn tokens_urls_and_schedulers_are_read() {
        let good = format!("{}.{}.{}", "a".repeat(32), "b".repeat(64), "c".repeat(64));
        assert!(token_parts(&good).is_ok());
        for bad in [
            "",
            "a.b.c",
            &good[1..],
            &format!("{good}.x"),
            &good.replace('a', "g"),
        ] {
            assert!(token_parts(bad).is_err(), "{bad}");
        }
        assert_eq!(
            url_host("https://ctl.example:8889/x").as_deref(),
            Some("ctl.example")
        );
        assert_eq!(url_host("http://[::1]:8889").as_deref(), Some("::1"));
        assert_eq!(url_host("http://10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(reachable("localhost:8888", "10.0.0.1"), "10.0.0.1:8888");
        assert_eq!(reachable("127.0.0.1:9", "ctl"), "ctl:9");
        assert_eq!(reachable("[::1]:9", "fd00::1"), "[fd00::1]:9");
        assert_eq!(reachable("sched.example:8888", "ctl"), "sched.example:8888");
        assert_eq!(reachable("0.0.0.0:8891", "ctl"), "ctl:8891");
        assert_eq!(network_for("agent|netagent"), "dual");
        assert_eq!(network_for("netagent"), "nn");
        assert_eq!(network_for("agent"), "cn");
    }

    #[test]
    fn configure_sets_commented_and_present_lines_and_adds_the_rest() {
        let text = "# help\n#CUMULO_AGENT_ZONE=\nCUMULO_AGENT_CERT=/old\n";
        let set = |k: &str, v: &str| (k.to_string(), v.to_string());
        let out = configure(
            text,
            &[
                set("CUMULO_AGENT_ZONE", "z1"),
                set("CUMULO_AGENT_CERT", "/new"),
                set("CUMULO_AGENT_VCPUS", "4"),
            ],
        );
        assert_eq!(
            out,
            "# help\nCUMULO_AGENT_ZONE=z1\nCUMULO_AGENT_CERT=/new\nCUMULO_AGENT_VCPUS=4\n"
        );
    }
}
