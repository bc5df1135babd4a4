//! A local cluster of real processes for fault tests: `cumulo up --backend sim` in a temporary
//! directory, more agents beside it, and the means to kill, restart, stop and partition them.
//!
//! Every process is ours: killed and waited for by PID, never by name. Mounts and network
//! namespaces the tests make are removed when the [`Cluster`] is dropped.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cumulo::client::{ClientError, Connection, Credentials};
use cumulo::routes;
use rustix::process::{Pid, Signal, kill_process};
use serde_json::{Value, json};

mod reality;

pub const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

/// The directory of the cluster's binaries (cargo puts them together).
pub fn bin(name: &str) -> PathBuf {
    Path::new(CUMULO).parent().unwrap().join(name)
}

/// Whether the cluster's binaries are built ([`crate::common::binaries_or_skip`]).
pub fn binaries_or_skip() -> bool {
    crate::common::binaries_or_skip(&[
        "cumulo-scheduler",
        "cumulo-controller",
        "cumulo-agent",
        "cumulo-cert",
    ])
}

/// Whether this process is root (for mounts and network namespaces); without root the test is
/// skipped unless `require` (a `CUMULO_REQUIRE_*` variable) is `1`.
pub fn root_or_skip(require: &str, what: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var(require).as_deref() != Ok("1"),
        "{require}=1 but not root: {what} needs root"
    );
    eprintln!("SKIPPED: {what} needs root (set {require}=1 to make this a failure)");
    false
}

pub use testkit::procfs::free_port;

/// Polls `f` every 50 ms until it returns `Some`, or panics with `what` after `within`.
pub fn wait_for<T>(what: &str, within: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll_every(Duration::from_millis(50), what, within, f)
}

/// Polls `f` every `every` until it returns `Some`, or panics with `what` after `within`.
pub fn poll_every<T>(
    every: Duration,
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?}: {what}"
        );
        std::thread::sleep(every);
    }
}

/// Whether `pid` is a live process (zombies count as gone).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

pub fn signal(pid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = kill_process(p, sig);
    }
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// How one process of the cluster runs: its command line and environment (read back from
/// /proc for the processes `up` started), so that it can be started again the same way.
#[derive(Debug, Clone)]
pub struct Proc {
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub pid: i32,
    pub log: PathBuf,
    /// The network namespace it runs in, if not ours.
    pub netns: Option<String>,
}

impl Proc {
    fn from_pid(pid: i32, log: PathBuf) -> Proc {
        let split = |bytes: Vec<u8>| -> Vec<OsString> {
            bytes
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| OsString::from_vec(s.to_vec()))
                .collect()
        };
        let argv = split(std::fs::read(format!("/proc/{pid}/cmdline")).unwrap());
        let env = split(std::fs::read(format!("/proc/{pid}/environ")).unwrap())
            .into_iter()
            .filter_map(|kv| {
                let s = kv.into_vec();
                let eq = s.iter().position(|b| *b == b'=')?;
                Some((
                    OsString::from_vec(s[..eq].to_vec()),
                    OsString::from_vec(s[eq + 1..].to_vec()),
                ))
            })
            .collect();
        Proc {
            argv,
            env,
            pid,
            log,
            netns: None,
        }
    }

    /// The value of `--flag` on its command line (the last one).
    pub fn flag(&self, flag: &str) -> Option<String> {
        let args: Vec<String> = self
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        args.windows(2)
            .rev()
            .find(|w| w[0] == flag)
            .map(|w| w[1].clone())
    }
}

/// Sets `flags` (`--flag value` pairs, or a lone `--flag`) on `argv`: a flag it has takes the
/// new value in place (a list flag given twice would add up), the others go at its end.
fn set_flags(argv: &mut Vec<OsString>, flags: &[&str]) {
    let mut i = 0;
    while i < flags.len() {
        let flag = flags[i];
        let value = flags.get(i + 1).filter(|v| !v.starts_with("--"));
        i += if value.is_some() { 2 } else { 1 };
        let at = argv.iter().position(|a| a.as_os_str() == flag);
        match (at, value) {
            (Some(at), Some(v)) if at + 1 < argv.len() => argv[at + 1] = OsString::from(v),
            (Some(_), None) => {}
            (_, value) => {
                argv.push(OsString::from(flag));
                argv.extend(value.map(OsString::from));
            }
        }
    }
}

/// What a cluster starts with.
#[derive(Debug, Default, Clone)]
pub struct Options {
    /// Environment for `up` (and so for the services it starts).
    pub env: Vec<(String, String)>,
    /// The host name in the certificates (an IP address becomes an IP name).
    pub host: Option<String>,
    /// The scheduler listens on every address (for agents in network namespaces).
    pub scheduler_on_all: bool,
    /// Service state directories to mount a tmpfs of this many MiB on before `up`.
    pub tmpfs: Vec<(&'static str, u32)>,
    /// Real VMs: `up --backend libvirt` against the libvirtd at this URI (which must answer);
    /// the agents run their domains under TCG. `None`: the sim backend.
    pub libvirt: Option<String>,
}

/// A running cluster.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub scheduler_port: u16,
    pub demo: Connection,
    pub admin: Connection,
    pub workload: String,
    procs: Mutex<BTreeMap<String, Proc>>,
    children: Mutex<Vec<Child>>,
    mounts: Vec<PathBuf>,
    netns: Mutex<Vec<String>>,
    /// The libvirt URI, for a cluster of real VMs.
    libvirt: Option<String>,
}

impl Cluster {
    pub fn up(options: &Options) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let mut cluster = Cluster {
            dir,
            scheduler_port: free_port(),
            demo: Connection::anonymous("http://127.0.0.1:1", None).unwrap(),
            admin: Connection::anonymous("http://127.0.0.1:1", None).unwrap(),
            workload: String::new(),
            procs: Mutex::new(BTreeMap::new()),
            children: Mutex::new(Vec::new()),
            mounts: Vec::new(),
            netns: Mutex::new(Vec::new()),
            libvirt: options.libvirt.clone(),
        };
        if options.libvirt.is_some() {
            // QEMU runs as another user under qemu:///system: it must reach the agents' files.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for (service, mib) in &options.tmpfs {
            let at = root.join(service);
            std::fs::create_dir_all(&at).unwrap();
            let size = format!("size={mib}m,mode=0700");
            run(
                "mount",
                &["-t", "tmpfs", "-o", &size, "tmpfs", at.to_str().unwrap()],
            );
            cluster.mounts.push(at);
        }
        let sched = if options.scheduler_on_all {
            format!("0.0.0.0:{}", cluster.scheduler_port)
        } else {
            format!("127.0.0.1:{}", cluster.scheduler_port)
        };
        let api = format!("127.0.0.1:{}", free_port());
        // Never the default ports: the tests of this file run side by side, each its own cluster.
        let console = format!("127.0.0.1:{}", free_port());
        let images = format!("127.0.0.1:{}", free_port());
        let backend = if options.libvirt.is_some() {
            "libvirt"
        } else {
            "sim"
        };
        let mut args = vec![
            "up",
            "--backend",
            backend,
            "--tenant-network",
            "none",
            "--no-instance",
            "--dir",
            root.to_str().unwrap(),
            "--scheduler-listen",
            &sched,
            "--api-listen",
            &api,
            "--console-listen",
            &console,
            "--image-listen",
            &images,
        ];
        if let Some(host) = &options.host {
            args.extend(["--host", host.as_str()]);
        }
        let mut env = options.env.clone();
        if let Some(uri) = &options.libvirt {
            env.push(("CUMULO_AGENT_LIBVIRT_URI".into(), uri.clone()));
            env.push(("CUMULO_AGENT_ACCEL".into(), "tcg".into()));
        }
        let out = Command::new(CUMULO)
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cumulo up: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        let wanted = format!("cumulo is up ({backend} backend)");
        assert!(said.contains(&wanted), "cumulo up fell back: {said}");
        for service in ["scheduler", "controller", "agent"] {
            let pid: i32 = std::fs::read_to_string(root.join("run").join(format!("{service}.pid")))
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let log = root.join("logs").join(format!("{service}.log"));
            cluster
                .procs
                .lock()
                .unwrap()
                .insert(service.to_string(), Proc::from_pid(pid, log));
        }
        let url = format!("http://{api}");
        let login = |user: &str, file: &str| {
            Connection::login(&Credentials {
                url: url.clone(),
                username: user.into(),
                password: std::fs::read_to_string(root.join(file))
                    .unwrap()
                    .trim()
                    .to_string(),
                project: user.into(),
                ca_cert: None,
            })
            .unwrap()
        };
        cluster.admin = login("admin", "admin-password");
        cluster.demo = login("demo", "demo-password");
        let workloads = cluster.demo.get(routes::WORKLOADS).unwrap();
        cluster.workload = routes::items(&workloads)
            .iter()
            .find(|w| w["name"] == "tiny")
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        // Room for the tests' batches.
        let tenants = cluster.admin.get(routes::TENANTS).unwrap();
        let demo = routes::items(&tenants)
            .into_iter()
            .find(|t| t["name"] == "demo")
            .unwrap();
        cluster
            .admin
            .put(
                &routes::quota(demo["id"].as_str().unwrap()),
                &json!({"instances": 1000, "vcpus": 1000, "memory_mb": 1_000_000}),
            )
            .unwrap();
        cluster
    }

    /// Switches the cluster's instances to a flavor that needs no disk (64 MiB, one vCPU):
    /// for agents whose state directory is a small file system.
    pub fn use_diskless_workload(&mut self) {
        let flavor = routes::item(
            self.admin
                .post(
                    routes::FLAVORS,
                    &json!({"name": "nodisk", "vcpus": 1, "memory_mb": 64, "disk_gb": 0}),
                )
                .unwrap(),
        );
        let images = self.admin.get(routes::IMAGES).unwrap();
        let image = routes::items(&images)
            .into_iter()
            .find(|i| i["name"] == "tiny")
            .unwrap();
        let workload = routes::item(
            self.demo
                .post(
                    routes::WORKLOADS,
                    &json!({"name": "nodisk", "flavor": flavor["id"], "image": image["id"], "user_data": ""}),
                )
                .unwrap(),
        );
        self.workload = workload["id"].as_str().unwrap().to_string();
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// How `name` runs.
    pub fn proc(&self, name: &str) -> Proc {
        self.procs.lock().unwrap()[name].clone()
    }

    /// Kills `name` with SIGKILL and waits until it is gone.
    pub fn kill9(&self, name: &str) {
        self.end(name, Signal::KILL, Duration::from_secs(10));
    }

    /// Sends `name` `sig` and waits (`within` at most) until it is gone.
    fn end(&self, name: &str, sig: Signal, within: Duration) {
        let pid = self.proc(name).pid;
        signal(pid, sig);
        wait_for(&format!("{name} (pid {pid}) to end"), within, || {
            (!alive(pid)).then_some(())
        });
        self.reap();
    }

    /// Sends `sig` to `name`.
    pub fn signal(&self, name: &str, sig: Signal) {
        signal(self.proc(name).pid, sig);
    }

    /// Starts `name` again with its command line and environment; updates its PID file (so
    /// that `cumulo down` finds it).
    pub fn restart(&self, name: &str) {
        let proc = self.proc(name);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&proc.log)
            .unwrap();
        let mut cmd = match &proc.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&proc.argv[0]);
                c
            }
            None => Command::new(&proc.argv[0]),
        };
        let child = cmd
            .args(&proc.argv[1..])
            .env_clear()
            .envs(proc.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        self.children.lock().unwrap().push(child);
        let program = Path::new(&proc.argv[0])
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        std::fs::write(
            self.root().join("run").join(format!("{name}.pid")),
            format!("{pid} {program}\n"),
        )
        .unwrap();
        self.procs.lock().unwrap().get_mut(name).unwrap().pid = pid;
    }

    fn reap(&self) {
        for child in self.children.lock().unwrap().iter_mut() {
            let _ = child.try_wait();
        }
    }

    /// A certificate for another agent (role agent, bound to a fresh UUID), optionally with
    /// extra `cumulo-cert` flags; returns (cert, key).
    pub fn agent_cert(&self, name: &str, extra: &[&str]) -> (PathBuf, PathBuf) {
        self.cert(name, "agent", name, extra)
    }

    /// A certificate `name` for `role` and `host` (bound to a fresh UUID), optionally with
    /// extra `cumulo-cert` flags; returns (cert, key).
    pub fn cert(&self, name: &str, role: &str, host: &str, extra: &[&str]) -> (PathBuf, PathBuf) {
        let certs = self.root().join("certs");
        let mut args = vec![
            "--role",
            role,
            "--host",
            host,
            "--anchor-cert",
            certs.join("ca.pem").to_str().unwrap(),
            "--directory",
            certs.to_str().unwrap(),
            "--out",
            name,
        ]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(bin("cumulo-cert").to_str().unwrap(), &args);
        (
            certs.join(format!("{name}.pem")),
            certs.join(format!("{name}.key")),
        )
    }

    /// Starts another compute agent `name` (host name `name`, its own state directory and
    /// certificate), like the first one but for `overrides` (later flags win), in `netns` if
    /// given.
    pub fn add_agent(&self, name: &str, netns: Option<&str>, overrides: &[&str]) {
        if !self
            .root()
            .join("certs")
            .join(format!("{name}.pem"))
            .exists()
        {
            self.agent_cert(name, &[]);
        }
        let certs = self.root().join("certs");
        let mut proc = self.proc("agent");
        let cert = certs.join(format!("{name}.pem"));
        let key = certs.join(format!("{name}.key"));
        let state = self.root().join(name);
        let mut add = vec![
            "--cert".to_string(),
            cert.display().to_string(),
            "--key".into(),
            key.display().to_string(),
            "--state-dir".into(),
            state.display().to_string(),
            "--hostname".into(),
            name.into(),
            "--network".into(),
            "cn".into(),
            // The first agent holds this host's node endpoint port (the controller dials every
            // node on it): another agent here serves none.
            "--console-listen".into(),
            "off".into(),
        ];
        add.extend(overrides.iter().map(|s| s.to_string()));
        let add: Vec<&str> = add.iter().map(String::as_str).collect();
        set_flags(&mut proc.argv, &add);
        proc.log = self.root().join("logs").join(format!("{name}.log"));
        proc.netns = netns.map(str::to_string);
        self.procs.lock().unwrap().insert(name.to_string(), proc);
        self.restart(name);
    }

    /// Starts another scheduler `name` (its own certificate for localhost, port and state
    /// directory) beside the first; returns its address for `--scheduler`.
    pub fn add_scheduler(&self, name: &str) -> String {
        let (cert, key) = self.cert(name, "scheduler", "localhost", &[]);
        let port = free_port();
        let mut proc = self.proc("scheduler");
        let add = [
            "--cert".to_string(),
            cert.display().to_string(),
            "--key".into(),
            key.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--state-dir".into(),
            self.root().join(name).display().to_string(),
        ];
        let add: Vec<&str> = add.iter().map(String::as_str).collect();
        set_flags(&mut proc.argv, &add);
        proc.log = self.root().join("logs").join(format!("{name}.log"));
        self.procs.lock().unwrap().insert(name.to_string(), proc);
        self.restart(name);
        format!("localhost:{port}")
    }

    /// Stops `name` (SIGTERM, and waits until it is gone) and starts it again with `flags`
    /// (`--flag value` pairs) set on its command line.
    pub fn reconfigure(&self, name: &str, flags: &[&str]) {
        self.end(name, Signal::TERM, Duration::from_secs(30));
        if let Some(proc) = self.procs.lock().unwrap().get_mut(name) {
            set_flags(&mut proc.argv, flags);
        }
        self.restart(name);
    }

    /// The node whose host name is `host`, once it is ready.
    pub fn node_ready(&self, host: &str) -> String {
        wait_for(
            &format!("node {host} to be ready"),
            Duration::from_secs(60),
            || self.node(host).filter(|n| n["status"] == "ready"),
        )["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The node whose host name is `host`.
    pub fn node(&self, host: &str) -> Option<Value> {
        let nodes = self.admin.get(routes::NODES).ok()?;
        routes::items(&nodes)
            .into_iter()
            .find(|n| n["hostname"] == host)
    }

    /// Creates `count` instances named `name`; returns their ids.
    pub fn create(&self, name: &str, count: u32) -> Result<Vec<String>, ClientError> {
        let made = self.demo.post(
            routes::INSTANCES,
            &json!({"workload": self.workload, "name": name, "count": count}),
        )?;
        Ok(routes::items(&made)
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_string())
            .collect())
    }

    /// Every instance the API lists (all pages).
    pub fn instances(&self) -> Result<Vec<Value>, ClientError> {
        let mut all = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let path = match &marker {
                Some(m) => format!("{}?limit=500&marker={m}", routes::INSTANCES),
                None => format!("{}?limit=500", routes::INSTANCES),
            };
            let page = routes::items(&self.demo.get(&path)?);
            let n = page.len();
            marker = page
                .last()
                .and_then(|i| i["id"].as_str().map(str::to_string));
            all.extend(page);
            if n < 500 {
                return Ok(all);
            }
        }
    }

    /// Waits until every one of `ids` is in state `want`.
    pub fn wait_states(&self, ids: &[String], want: &str, within: Duration) {
        wait_for(&format!("{ids:?} to be {want}"), within, || {
            let all = self.instances().ok()?;
            let by_id: HashMap<&str, &Value> =
                all.iter().map(|i| (i["id"].as_str().unwrap(), i)).collect();
            ids.iter()
                .all(|id| by_id.get(id.as_str()).is_some_and(|i| i["state"] == want))
                .then_some(())
        });
    }

    /// Prints the last `n` lines of every service's log (for a test that failed).
    pub fn print_log_tails(&self, n: usize) {
        let procs = self.procs.lock().map(|p| p.clone()).unwrap_or_default();
        for (name, proc) in &procs {
            let text = std::fs::read_to_string(&proc.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(n);
            eprintln!(
                "--- {name}: the last {} lines of {}",
                lines.len() - from,
                proc.log.display()
            );
            for line in &lines[from..] {
                eprintln!("{line}");
            }
        }
    }

    /// Makes a network namespace with a veth to it: `10.<net>.0.1/30` here, `.2` there.
    /// Returns (namespace, the veth's name here).
    pub fn netns(&self, net: u8) -> (String, String) {
        let ns = format!("cumulo-faults-{}-{net}", std::process::id());
        let here = format!("cfh{}n{net}", std::process::id() % 100_000);
        let there = format!("cft{}n{net}", std::process::id() % 100_000);
        run("ip", &["netns", "add", &ns]);
        self.netns.lock().unwrap().push(ns.clone());
        run(
            "ip",
            &["link", "add", &here, "type", "veth", "peer", "name", &there],
        );
        run("ip", &["link", "set", &there, "netns", &ns]);
        run(
            "ip",
            &["addr", "add", &format!("10.{net}.0.1/30"), "dev", &here],
        );
        run("ip", &["link", "set", &here, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns.as_str(), "ip"];
            all.extend_from_slice(args);
            run("ip", &all);
        };
        inside(&["addr", "add", &format!("10.{net}.0.2/30"), "dev", &there]);
        inside(&["link", "set", &there, "up"]);
        inside(&["link", "set", "lo", "up"]);
        (ns, here)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_log_tails(60);
        }
        // Our extra agents first (not in `up`'s services), then `down` for the rest.
        let procs = self.procs.lock().map(|p| p.clone()).unwrap_or_default();
        for (name, proc) in &procs {
            signal(proc.pid, Signal::CONT);
            if !["scheduler", "controller", "agent"].contains(&name.as_str()) {
                signal(proc.pid, Signal::KILL);
            }
        }
        let _ = Command::new(CUMULO)
            .args(["down", "--dir", self.root().to_str().unwrap_or_default()])
            .output();
        if let Ok(children) = self.children.get_mut() {
            for child in children.iter_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // With every agent gone: whatever VMs are left of this cluster (`down` only powers off
        // the first agent's, and undefines none).
        self.remove_domains();
        for ns in self.netns.lock().map(|n| n.clone()).unwrap_or_default() {
            let _ = Command::new("ip").args(["netns", "delete", &ns]).output();
        }
        for at in self.mounts.iter().rev() {
            let _ = Command::new("umount").arg(at).output();
        }
        if std::env::var("CUMULO_FAULTS_KEEP").is_ok() {
            let kept = self.dir.path().to_path_buf();
            eprintln!("kept {}", kept.display());
            std::mem::forget(std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().unwrap(),
            ));
        }
    }
}
