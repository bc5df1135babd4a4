//! `cumulo up --backend sim --tenant-network cnci` inside a network namespace this test makes
//! (so nothing touches the machine's own network): a tenant's instance through the CLI, its
//! subnet's CNCI active (a `cumulo-cnci` process in a namespace of its own, on the compute
//! network link `up` made) and the instance active; the instance deleted; `cumulo down` leaves
//! no CNCI namespace, no link, no process. `down` after the agent was killed with SIGKILL (its
//! CNCI left running); a `cumulo0` that `up` did not make, refused and left alone; and
//! `--tenant-network cnci` refused without root. The same with real VMs, each CNCI a VM of its
//! own: `up_cnci/vms.rs`.
//!
//! Needs root, `ip`, and the cluster's binaries (`cargo build --bins`, `cumulo-cnci` included):
//! without them the test is skipped with a message, unless `CUMULO_REQUIRE_NETNS=1` (root) or
//! `CUMULO_REQUIRE_BINS=1` (the binaries) make that a failure (CI sets both).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
#[path = "up_cnci/probe.rs"]
mod probe;
#[path = "up_cnci/reach.rs"]
mod reach;
#[path = "up_cnci/vms.rs"]
mod vms;

use reach::{
    a_container_reaches_its_tenant_network, security_groups_guard_a_real_guest,
    tenants_do_not_reach_the_control_plane, the_openstack_cli_reaches_a_real_guest,
};

use serde_json::{Value, json};

/// What these tests run.
const BINS: &[&str] = &[
    "cumulo-scheduler",
    "cumulo-controller",
    "cumulo-agent",
    "cumulo-cnci",
];

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn have_ip() -> bool {
    Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn netns_or_skip() -> bool {
    let why = if !is_root() {
        "not root"
    } else if !have_ip() {
        "no ip binary (iproute2)"
    } else {
        return true;
    };
    assert!(
        std::env::var("CUMULO_REQUIRE_NETNS").as_deref() != Ok("1"),
        "CUMULO_REQUIRE_NETNS=1 but {why}"
    );
    eprintln!("SKIPPED: {why}: cumulo up --tenant-network cnci needs root and network namespaces");
    false
}

fn ip(args: &[&str]) -> Output {
    Command::new("ip").args(args).output().unwrap()
}

/// The global list of network namespace names.
fn namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `pid` is a live process (zombies count as gone).
fn alive(pid: i32) -> bool {
    let stat = PathBuf::from(format!("/proc/{pid}/stat"));
    std::fs::read_to_string(stat).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Polls `ready` every 100 ms until it gives a value, or fails after `within` saying `what`.
fn poll<T>(what: &str, within: Duration, mut ready: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = ready() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A cluster in a network namespace of its own. Dropped (also when the test fails): its logs
/// shown on failure, `cumulo down`, the namespace deleted.
struct Cluster {
    ns: String,
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
    /// With a private /run: a process that holds the namespaces every command enters.
    holder: Option<Child>,
}

impl Cluster {
    /// A cluster in namespace `cumulo-up-<tag>-<pid>` (one tag per test: they run in parallel).
    fn new(tag: &str) -> Cluster {
        let ns = format!("cumulo-up-{tag}-{}", std::process::id());
        let _ = ip(&["netns", "del", &ns]);
        let made = ip(&["netns", "add", &ns]);
        assert!(made.status.success(), "ip netns add: {made:?}");
        let cluster = Cluster {
            ns,
            dir: tempfile::tempdir().unwrap(),
            env: HashMap::new(),
            holder: None,
        };
        let lo = cluster.in_ns("ip", &["link", "set", "lo", "up"]);
        assert!(lo.status.success(), "{lo:?}");
        cluster
    }

    /// A cluster in its own network namespace and a mount namespace with a private `/run`, so
    /// that the libvirtd `cumulo up` starts there (as root, when none answers) is its own: its
    /// sockets, its QEMUs' taps in the cluster's network namespace. The CNCIs' namespaces are
    /// named under that `/run` too; the machine's cgroup file systems are mounted there again.
    /// Commands enter both namespaces of a holder process.
    fn with_private_run(tag: &str) -> Cluster {
        let mut cluster = Cluster::new(tag);
        // QEMU runs as another user: it must reach the images under the cluster's directory.
        std::fs::set_permissions(cluster.dir.path(), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let holder = Command::new("ip")
            .args([
                "netns",
                "exec",
                &cluster.ns,
                "unshare",
                "-m",
                "--propagation",
                "private",
            ])
            // `ip netns exec` mounts a sysfs of its own over /sys, which hides the cgroup file
            // systems under it: mounted again as the machine has them (for containers' limits).
            .args([
                "sh",
                "-c",
                "mount -t tmpfs tmpfs /run && \
                 mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup && \
                 grep -E '^[^ ]+ /sys/fs/cgroup[^ ]* cgroup2? ' /proc/1/mounts | \
                 while read -r src dir type opts _; do \
                   mkdir -p \"$dir\" && mount -t \"$type\" -o \"$opts\" \"$src\" \"$dir\"; \
                 done; exec sleep 3600",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = holder.id();
        cluster.holder = Some(holder);
        // Ready once it runs `sleep`, after the mount (every step execs in the same process).
        poll("the namespace holder", Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "sleep")
                .then_some(())
        });
        cluster
    }

    fn root(&self) -> String {
        self.dir.path().to_str().unwrap().to_string()
    }

    /// `program ARGS` inside the cluster's namespace(s).
    fn in_ns(&self, program: &str, args: &[&str]) -> Output {
        self.command_in_ns(program, args).output().unwrap()
    }

    /// `program ARGS` inside the cluster's namespace(s), to run or spawn.
    fn command_in_ns(&self, program: &str, args: &[&str]) -> Command {
        let mut command = match &self.holder {
            Some(holder) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &holder.id().to_string(), "-m", "-n", "--"]);
                c
            }
            None => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &self.ns]);
                c
            }
        };
        command
            .arg(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            // Where the guest images' caches are (`scripts/tiny-guest.sh`).
            .envs(cache_env())
            .envs(&self.env);
        command
    }

    /// A `cumulo` command that must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        common::succeeded(args, self.in_ns(CUMULO, args))
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    }

    /// `cumulo up --backend sim --tenant-network cnci --no-instance`, then the exports it wrote
    /// for the CLI; returns what `up` printed.
    fn up(&mut self) -> String {
        let root = self.root();
        let shown = self.ok(&[
            "up",
            "--backend",
            "sim",
            "--tenant-network",
            "cnci",
            "--no-instance",
            "--dir",
            &root,
        ]);
        let env = std::fs::read_to_string(self.dir.path().join("env")).unwrap();
        for line in env.lines() {
            if let Some((k, v)) = line.trim_start_matches("export ").split_once('=') {
                self.env.insert(k.to_string(), v.to_string());
            }
        }
        shown
    }

    /// Creates an instance and waits until it and its subnet's CNCI are active; returns the
    /// instance and the CNCI as the API shows them.
    fn instance_and_cnci(&self, name: &str) -> (Value, Value) {
        let made = self.json(&[
            "instance",
            "create",
            "--workload",
            "tiny",
            "--name",
            name,
            "--wait",
        ]);
        let made = made.as_array().unwrap();
        assert_eq!(made.len(), 1, "{made:?}");
        assert_eq!(made[0]["state"], "active");
        let cnci = poll("an active CNCI", Duration::from_secs(60), || {
            let list = self.json(&["cnci", "list"]);
            list["cncis"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["state"] == "active").cloned())
        });
        (made[0].clone(), cnci)
    }

    /// A request to the cluster's API as its demo user (a Keystone token, then `method path`
    /// with `body`), from inside the cluster's namespace; the answer's JSON (`{}` when empty).
    fn api(&self, method: &str, path: &str, body: &Value) -> Value {
        const CLIENT: &str = r#"
import json, os, sys, urllib.request
url = os.environ["CUMULO_CONTROLLER"]
auth = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
    "name": os.environ["OS_USERNAME"], "domain": {"name": "Default"},
    "password": os.environ["OS_PASSWORD"]}}},
    "scope": {"project": {"name": os.environ["OS_PROJECT_NAME"], "domain": {"name": "Default"}}}}}
req = urllib.request.Request(url + "/v3/auth/tokens", data=json.dumps(auth).encode(),
    headers={"Content-Type": "application/json"}, method="POST")
token = urllib.request.urlopen(req).headers["X-Subject-Token"]
method, path, body = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(url + path, data=None if body == "null" else body.encode(),
    headers={"X-Auth-Token": token, "Content-Type": "application/json"}, method=method)
with urllib.request.urlopen(req) as r:
    print(r.read().decode() or "{}")
"#;
        let body = body.to_string();
        let out = self.in_ns("python3", &["-c", CLIENT, method, path, &body]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{method} {path}: {out:?}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
    }

    /// Allocates a floating IP from the external network `public`: (its id, its address).
    fn floating_ip(&self) -> (String, String) {
        let fip = self.api(
            "POST",
            "/network/v2.0/floatingips",
            &json!({"floatingip": {"floating_network_id": "5f0a7e1c-9c3b-4d2a-8e61-70b5c0ffee01"}}),
        );
        let text = |k: &str| fip["floatingip"][k].as_str().unwrap().to_string();
        (text("id"), text("floating_ip_address"))
    }

    fn pids(&self) -> Vec<(i32, String)> {
        let run = self.dir.path().join("run");
        std::fs::read_dir(&run)
            .map(|entries| {
                entries
                    .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                    .filter_map(|text| {
                        let mut words = text.split_whitespace();
                        Some((words.next()?.parse().ok()?, words.next()?.to_string()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The agent's CNCI records: (namespace, pid).
    fn cnci_records(&self) -> Vec<(String, Option<i64>)> {
        let dir = self.dir.path().join("agent/cnci");
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .filter_map(|e| std::fs::read(e.path()).ok())
                    .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
                    .map(|r| {
                        (
                            r["ns"].as_str().unwrap_or("").to_string(),
                            r["pid"].as_i64(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for log in ["agent", "controller", "scheduler"] {
                let path = self.dir.path().join(format!("logs/{log}.log"));
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                eprintln!("--- {} (last lines)", path.display());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
        let root = self.root();
        // --purge: a VM's domain is undefined too.
        let _ = self.in_ns(CUMULO, &["down", "--dir", &root, "--purge"]);
        if let Some(mut holder) = self.holder.take() {
            let _ = holder.kill();
            let _ = holder.wait();
        }
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// The environment that says where the guest images' caches are.
fn cache_env() -> Vec<(String, String)> {
    ["HOME", "XDG_CACHE_HOME", "CUMULO_TINY_GUEST_CACHE"]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
        .collect()
}

#[test]
fn up_with_tenant_networks_through_cncis_in_a_namespace() {
    if !common::binaries_or_skip(BINS) || !netns_or_skip() {
        return;
    }
    let mut cluster = Cluster::new("cnci");
    let root = cluster.root();
    let started = Instant::now();
    let shown = cluster.up();
    eprintln!(
        "cumulo up --tenant-network cnci: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(shown.contains("cumulo is up (sim backend)"), "{shown}");
    assert!(shown.contains("Tenant networks: through CNCIs"), "{shown}");
    assert!(
        shown.contains("compute network 198.18.255.1/24 (cumulo0; CNCIs take 198.18.255.128/25)"),
        "{shown}"
    );
    // The compute network's link, in the test's namespace only.
    let link = cluster.in_ns("ip", &["-4", "-o", "addr", "show", "dev", "cumulo0"]);
    assert!(
        String::from_utf8_lossy(&link.stdout).contains("198.18.255.1/24"),
        "{link:?}"
    );
    // Not in the machine's own namespace.
    let outside = ip(&["-4", "-o", "addr", "show", "dev", "cumulo0"]);
    assert!(
        !String::from_utf8_lossy(&outside.stdout).contains("198.18.255.1/24"),
        "{outside:?}"
    );
    let services = cluster.pids();
    assert_eq!(services.len(), 3, "{services:?}");

    // A tenant's instance: its subnet's CNCI is launched, announces itself, and the instance
    // is released to it.
    let (instance, cnci) = cluster.instance_and_cnci("net");
    let id = instance["id"].as_str().unwrap().to_string();
    let cnci_ip = cnci["ip"].as_str().unwrap();
    assert!(cnci_ip.starts_with("198.18.255."), "{cnci}");
    let last: u8 = cnci_ip.rsplit('.').next().unwrap().parse().unwrap();
    assert!(last >= 128, "the CNCIs take the upper half: {cnci}");
    let cnci_id = cnci["id"].as_str().unwrap().replace('-', "");
    let ns = format!("cumulo-cnci-{}", &cnci_id[..12]);
    assert!(namespaces().contains(&ns), "{ns} not in {:?}", namespaces());
    let records = cluster.cnci_records();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].0, ns);
    let cnci_pid = i32::try_from(records[0].1.unwrap()).unwrap();
    assert!(alive(cnci_pid), "the CNCI process {cnci_pid}");
    // The host reaches its CNCI over the compute network (the veth pair and proxy ARP).
    let ping = cluster.in_ns("ping", &["-c", "1", "-W", "5", cnci_ip]);
    assert!(ping.status.success(), "{ping:?}");
    let shown = cluster.json(&["instance", "show", &id]);
    assert_eq!(shown["state"], "active");

    // A floating IP associated with the instance's port: the CNCI maps it (its nftables maps
    // and the address on its uplink), and the API says ACTIVE; disassociated, it is unmapped.
    let (fip_id, public) = cluster.floating_ip();
    let private = shown["ip"].as_str().unwrap_or_default().to_string();
    let asked = Instant::now();
    cluster.api(
        "PUT",
        &format!("/network/v2.0/floatingips/{fip_id}"),
        &json!({"floatingip": {"port_id": id}}),
    );
    let fip_path = format!("/network/v2.0/floatingips/{fip_id}");
    poll("the floating IP ACTIVE", Duration::from_secs(30), || {
        let f = cluster.api("GET", &fip_path, &Value::Null);
        (f["floatingip"]["status"] == "ACTIVE").then_some(())
    });
    eprintln!(
        "floating IP {public} -> {private}: ACTIVE {:.0} ms after the association",
        asked.elapsed().as_secs_f64() * 1000.0
    );
    // In the CNCI's network namespace, entered through its process (the namespace's name is
    // bound in the cluster's mount namespace, not necessarily in this one).
    let in_cnci = |args: &[&str]| {
        let pid = cnci_pid.to_string();
        let out = Command::new("nsenter")
            .args(["-t", &pid, "-n", "--"])
            .args(args)
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let maps = in_cnci(&["nft", "list", "map", "ip", "cumulo_cnci", "public_in"]);
    assert!(
        maps.contains(&format!("{public} : {private}")),
        "{public} -> {private} not in the CNCI's map: {maps}"
    );
    let addrs = in_cnci(&["ip", "-4", "-o", "addr"]);
    assert!(addrs.contains(&format!("{public}/32")), "{addrs}");
    // The CNCI told its node (the route channel): the node routes the floating IP to the
    // CNCI's link.
    let link = format!("cn{}", &cnci_id[..12]);
    let route_to = |addr: &str| {
        let out = cluster.in_ns(
            "ip",
            &["-4", "-o", "route", "show", "exact", &format!("{addr}/32")],
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let routed = poll(
        "the floating IP routed to the CNCI",
        Duration::from_secs(30),
        || {
            let got = cluster.in_ns("ip", &["route", "get", &public]);
            let got = String::from_utf8_lossy(&got.stdout).into_owned();
            got.contains(&format!("dev {link} ")).then_some(got)
        },
    );
    eprintln!(
        "floating IP {public}: routed on the node to {link} {:.0} ms after the association ({})",
        asked.elapsed().as_secs_f64() * 1000.0,
        routed.trim()
    );
    cluster.api("PUT", &fip_path, &json!({"floatingip": {"port_id": null}}));
    poll(
        "the floating IP's route gone",
        Duration::from_secs(30),
        || route_to(&public).trim().is_empty().then_some(()),
    );
    poll(
        "the mapping gone from the CNCI",
        Duration::from_secs(30),
        || {
            let maps = in_cnci(&["nft", "list", "map", "ip", "cumulo_cnci", "public_in"]);
            (!maps.contains(&public)).then_some(())
        },
    );
    let f = cluster.api("GET", &fip_path, &Value::Null);
    assert_eq!(f["floatingip"]["status"], "DOWN", "{f}");
    cluster.api("DELETE", &fip_path, &Value::Null);

    // `instance create --floating-ip`: the instance comes with one, which its CNCI maps.
    let made = cluster.json(&[
        "instance",
        "create",
        "--workload",
        "tiny",
        "--name",
        "with-fip",
        "--wait",
        "--floating-ip",
    ]);
    let address = made[0]["floating_ip"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(address.starts_with("192.168.233."), "{made}");
    poll(
        "the new instance's floating IP ACTIVE",
        Duration::from_secs(30),
        || {
            let listed = cluster.api("GET", "/network/v2.0/floatingips", &Value::Null);
            listed["floatingips"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|f| f["floating_ip_address"] == address.as_str() && f["status"] == "ACTIVE")
                .then_some(())
        },
    );
    let with_fip = made[0]["id"].as_str().unwrap().to_string();
    cluster.ok(&["instance", "delete", "--wait", &with_fip]);
    cluster.ok(&["instance", "delete", "--wait", &id]);
    // A second `up` that asks for none finds it running, and says how it runs.
    let again = cluster.ok(&[
        "up",
        "--backend",
        "sim",
        "--tenant-network",
        "none",
        "--dir",
        &root,
    ]);
    assert!(again.contains("already up"), "{again}");
    assert!(
        again.contains("It runs with tenant networks through CNCIs"),
        "{again}"
    );

    // The controller removes an idle subnet's CNCI only after a while (--cnci-linger, 60 s):
    // it is still there, and `down` deletes what the agent leaves of it.
    let lingering = !cluster.cnci_records().is_empty();
    let down = cluster.ok(&["down", "--dir", &root]);
    assert!(down.contains("deleted link cumulo0"), "{down}");
    if lingering {
        assert!(
            down.contains(&format!("deleted CNCI namespace(s) {ns}")),
            "{down}"
        );
    }
    for (pid, program) in &services {
        assert!(!alive(*pid), "{program} (pid {pid}) still runs after down");
    }
    assert!(
        !alive(cnci_pid),
        "the CNCI (pid {cnci_pid}) still runs after down"
    );
    let left: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| n.starts_with("cumulo-cnci-"))
        .collect();
    assert!(!left.contains(&ns), "{ns} left after down: {left:?}");
    let link = cluster.in_ns("ip", &["link", "show", "dev", "cumulo0"]);
    assert!(!link.status.success(), "cumulo0 left after down");
    let routes = cluster.in_ns("ip", &["-4", "-o", "route"]);
    let routes = String::from_utf8_lossy(&routes.stdout).into_owned();
    assert!(
        !routes.contains(" dev cn"),
        "a CNCI's route left after down: {routes}"
    );
    assert!(cluster.cnci_records().is_empty());
    // A second down has nothing to do.
    let again = cluster.ok(&["down", "--dir", &root]);
    assert!(!again.contains("deleted"), "{again}");
}

#[test]
fn down_after_the_agent_was_killed_leaves_no_cnci() {
    if !common::binaries_or_skip(BINS) || !netns_or_skip() {
        return;
    }
    let mut cluster = Cluster::new("kill");
    let root = cluster.root();
    cluster.up();
    let (instance, cnci) = cluster.instance_and_cnci("net");
    let node = instance["node"].as_str().unwrap().replace('-', "");
    let cnci_id = cnci["id"].as_str().unwrap().replace('-', "");
    let ns = format!("cumulo-cnci-{}", &cnci_id[..12]);
    let records = cluster.cnci_records();
    assert_eq!(records.len(), 1, "{records:?}");
    let cnci_pid = i32::try_from(records[0].1.unwrap()).unwrap();
    // kill -9: the agent cleans nothing up; its CNCI process and namespace stay.
    let agent: Vec<i32> = cluster
        .pids()
        .into_iter()
        .filter(|(_, program)| program == "cumulo-agent")
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(agent.len(), 1);
    let pid = rustix::process::Pid::from_raw(agent[0]).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    poll("the agent gone", Duration::from_secs(10), || {
        (!alive(agent[0])).then_some(())
    });
    assert!(namespaces().contains(&ns));

    let down = cluster.ok(&["down", "--dir", &root]);
    assert!(
        down.contains(&format!("deleted CNCI namespace(s) {ns}")),
        "{down}"
    );
    assert!(down.contains("deleted link cumulo0"), "{down}");
    assert!(
        !alive(cnci_pid),
        "the CNCI (pid {cnci_pid}) still runs after down"
    );
    assert!(!namespaces().contains(&ns));
    assert!(cluster.cnci_records().is_empty());
    // The metadata responder's namespace goes too, even if the agent was killed before it
    // moved its port there (down finds it by the node's name, not through the port).
    let metadata = format!("cumulo-md-{node}-");
    let left: Vec<String> = namespaces()
        .into_iter()
        .filter(|n| n.starts_with(&metadata))
        .collect();
    assert!(left.is_empty(), "left after down: {left:?}");
}

#[test]
fn a_cumulo0_that_up_did_not_make_is_left_alone() {
    if !common::binaries_or_skip(BINS) || !netns_or_skip() {
        return;
    }
    let cluster = Cluster::new("taken");
    let root = cluster.root();
    let made = cluster.in_ns("ip", &["link", "add", "cumulo0", "type", "bridge"]);
    assert!(made.status.success(), "{made:?}");
    let up = cluster.in_ns(
        CUMULO,
        &[
            "up",
            "--backend",
            "sim",
            "--tenant-network",
            "cnci",
            "--dir",
            &root,
        ],
    );
    assert_eq!(up.status.code(), Some(1), "{up:?}");
    let err = String::from_utf8_lossy(&up.stderr);
    assert!(
        err.contains("a link cumulo0 exists that cumulo up did not make"),
        "{err}"
    );
    assert!(cluster.pids().is_empty(), "nothing started");
    let down = cluster.ok(&["down", "--dir", &root]);
    assert!(!down.contains("deleted"), "{down}");
    let link = cluster.in_ns("ip", &["link", "show", "dev", "cumulo0"]);
    assert!(link.status.success(), "the link is still there");
}

#[test]
fn tenant_networks_through_cncis_need_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_string();
    let args = ["up", "--tenant-network", "cnci", "--dir", &root];
    let out = if is_root() {
        // As nobody: the refusal comes before anything is made. A copy of cumulo in a directory
        // nobody may enter (the checkout may be under a private home).
        let bin = tempfile::tempdir().unwrap();
        std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = bin.path().join("cumulo");
        std::fs::copy(CUMULO, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        let Ok(o) = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&copy)
            .args(args)
            .output()
        else {
            eprintln!("SKIPPED: no setpriv (util-linux) to drop root");
            return;
        };
        o
    } else {
        Command::new(CUMULO).args(args).output().unwrap()
    };
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("cumulo: --tenant-network cnci needs root"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!dir.path().join("certs").exists());
}
