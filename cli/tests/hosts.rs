//! A cluster of three hosts, each a network namespace with a state directory of its own, on one
//! LAN (a bridge in a namespace of its own): the first runs `cumulo up --address` (its API over
//! HTTPS, its CNCIs on its own LAN interface, `--compute-link`), the two others `cumulo join`
//! with join tokens. Instances land on every host; the tenant network spans the hosts through
//! the tenant's CNCI on the first (guests standing in for the sim instances: veths with the
//! instances' MACs on the joined hosts' tenant bridges, addresses by DHCP from the CNCI, a ping
//! from one joined host to the other); `cumulo node remove` drains a joined host (its instances
//! go to the others) and revokes it (its agent is refused from then on).
//!
//! Needs root, `ip`, `ping`, `nft`, busybox (udhcpc) and the cluster's binaries (`cargo build
//! --bins`): without them the test is skipped with a message, unless `CUMULO_REQUIRE_NETNS=1` /
//! `CUMULO_REQUIRE_BINS=1` (CI) make that a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

mod common;

use serde_json::Value;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");
const WITHIN: Duration = Duration::from_secs(90);

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace this test made, deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("cumulo-hosts-{}-{tag}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) -> String {
        run(Command::new("ip").args(["-n", &self.0]).args(args))
    }

    /// `program ARGS` in the namespace, with only `PATH` and `env` from the environment.
    fn command<'a>(
        &self,
        program: &str,
        args: &[&str],
        env: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env);
        c
    }

    fn ping(&self, to: &str) -> bool {
        self.command("ping", &["-n", "-q", "-c", "1", "-W", "1", to], [])
            .output()
            .unwrap()
            .status
            .success()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// One host: its namespace (on the LAN as `eth0`, `10.77.0.N/24`) and its directory.
struct Host {
    ns: Netns,
    dir: tempfile::TempDir,
    address: String,
}

/// The LAN and its hosts, brought down whatever happens: the joined hosts' agents (by PID),
/// the first host's cluster (`cumulo down`), then the namespaces.
struct Lan {
    hosts: Vec<Host>,
    /// The cluster's nodes (simple UUIDs): what is left of their metadata responders'
    /// namespaces (the machine's, named after the node) goes at the end.
    nodes: std::cell::RefCell<Vec<String>>,
    _switch: Netns,
}

impl Lan {
    fn new(hosts: usize) -> Lan {
        let switch = Netns::new("lan");
        switch.ip(&["link", "add", "br0", "type", "bridge"]);
        switch.ip(&["link", "set", "br0", "up"]);
        let hosts = (1..=hosts)
            .map(|n| {
                let ns = Netns::new(&format!("h{n}"));
                let port = format!("h{n}");
                switch.ip(&[
                    "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns.0,
                ]);
                switch.ip(&["link", "set", &port, "master", "br0", "up"]);
                let address = format!("10.77.0.{n}");
                ns.ip(&["addr", "add", &format!("{address}/24"), "dev", "eth0"]);
                ns.ip(&["link", "set", "eth0", "up"]);
                Host {
                    ns,
                    dir: tempfile::tempdir().unwrap(),
                    address,
                }
            })
            .collect();
        Lan {
            hosts,
            nodes: Default::default(),
            _switch: switch,
        }
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for host in self.hosts.iter().skip(1) {
            let _ = cumulo::up::procs::stop(
                "agent",
                &host.dir.path().join("agent.pid"),
                Duration::from_secs(5),
            );
        }
        if std::thread::panicking() {
            for host in &self.hosts {
                for log in [
                    "logs/scheduler.log",
                    "logs/controller.log",
                    "logs/agent.log",
                    "agent.log",
                ] {
                    let path = host.dir.path().join(log);
                    if let Ok(text) = std::fs::read_to_string(&path) {
                        let tail: Vec<&str> = text.lines().rev().take(30).collect();
                        eprintln!("--- {}:", path.display());
                        for line in tail.into_iter().rev() {
                            eprintln!("{line}");
                        }
                    }
                }
            }
        }
        let first = &self.hosts[0];
        let root = first.dir.path().to_str().unwrap_or_default().to_string();
        let _ = first
            .ns
            .command(CUMULO, &["down", "--dir", &root], [])
            .output();
        let left: Vec<String> = std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| {
                self.nodes
                    .borrow()
                    .iter()
                    .any(|n| name.starts_with(&format!("cumulo-md-{n}-")))
            })
            .collect();
        for name in left {
            let _ = Command::new("ip").args(["netns", "del", &name]).output();
        }
    }
}

/// `cumulo ARGS --json` on `host` with only `env` (a cluster's exports) in its environment.
fn cumulo_json(host: &Host, env: &HashMap<String, String>, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = host.ns.command(CUMULO, &all, env).output().unwrap();
    let shown = common::succeeded(&all, out);
    serde_json::from_str(&shown).unwrap_or_else(|e| panic!("{args:?}: {e}: {shown}"))
}

/// `env` with the credentials of the admin of the cluster in `dir`.
fn as_admin(env: &HashMap<String, String>, dir: &Path) -> HashMap<String, String> {
    let password = std::fs::read_to_string(dir.join("admin-password")).unwrap();
    let mut env = env.clone();
    for (k, v) in [
        ("CUMULO_USERNAME", "admin"),
        ("CUMULO_PASSWORD", password.trim()),
        ("CUMULO_PROJECT", "admin"),
    ] {
        env.insert(k.into(), v.into());
    }
    env
}

/// `count` instances of `workload` named `name`, active: as `cumulo instance create` shows them.
fn create(
    host: &Host,
    env: &HashMap<String, String>,
    workload: &str,
    name: &str,
    count: usize,
) -> Vec<Value> {
    let count = count.to_string();
    let args = [
        "instance",
        "create",
        "--workload",
        workload,
        "--name",
        name,
        "--count",
        &count,
        "--wait",
    ];
    cumulo_json(host, env, &args).as_array().unwrap().clone()
}

/// A guest standing in for `instance` on `host`: a namespace with a veth on the bridge that
/// holds the instance's tap, the instance's MAC, its address by DHCP from the tenant's CNCI.
fn guest(host: &Host, instance: &Value, n: usize, script: &Path) -> Netns {
    let id = instance["id"].as_str().unwrap().replace('-', "");
    let tap = format!("ct-{}", &id[..12]);
    let bridge = testkit::poll_for(WITHIN, || {
        let out = Command::new("ip")
            .args(["-n", &host.ns.0, "-o", "link", "show", "dev", &tap])
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut words = listing.split_whitespace();
        words
            .by_ref()
            .find(|w| *w == "master")
            .and(words.next())
            .map(str::to_string)
            .ok_or_else(|| format!("no tap {tap} on a bridge on {}: {listing}", host.ns.0))
    });
    let g = Netns::new(&format!("g{n}"));
    let port = format!("vg-{n}");
    host.ns.ip(&[
        "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &g.0,
    ]);
    host.ns.ip(&["link", "set", &port, "master", &bridge, "up"]);
    g.ip(&[
        "link",
        "set",
        "eth0",
        "address",
        instance["mac"].as_str().unwrap(),
    ]);
    g.ip(&["link", "set", "eth0", "up"]);
    let leased = g
        .command(
            "busybox",
            &[
                "udhcpc", "-i", "eth0", "-f", "-q", "-n", "-t", "10", "-T", "1", "-s",
            ],
            [],
        )
        .arg(script)
        .output()
        .unwrap();
    assert!(
        leased.status.success(),
        "guest {n}: no DHCP lease: {}",
        text(&leased)
    );
    let ip = instance["ip"].as_str().unwrap();
    assert!(
        g.ip(&["addr", "show", "eth0"])
            .contains(&format!("inet {ip}/")),
        "the lease is the instance's address {ip}"
    );
    g
}

#[test]
fn three_hosts_one_cluster_joined_with_tokens() {
    if let Some(why) = testkit::netns::missing() {
        assert!(
            std::env::var("CUMULO_REQUIRE_NETNS").as_deref() != Ok("1"),
            "CUMULO_REQUIRE_NETNS=1 but {why}"
        );
        eprintln!("SKIPPED: {why}");
        return;
    }
    if !common::binaries_or_skip(&[
        "cumulo-scheduler",
        "cumulo-controller",
        "cumulo-agent",
        "cumulo-cnci",
    ]) {
        return;
    }
    let lan = Lan::new(3);
    // Dropped before the hosts.
    let mut guests: Vec<Netns> = Vec::new();
    let first = &lan.hosts[0];
    let root = first.dir.path().to_str().unwrap().to_string();
    let compute = format!("{}/24", first.address);
    let up = first
        .ns
        .command(
            CUMULO,
            &[
                "up",
                "--backend",
                "sim",
                "--tenant-network",
                "cnci",
                "--no-instance",
                "--dir",
                &root,
                "--address",
                &first.address,
                "--compute-address",
                &compute,
                "--compute-link",
                "eth0",
            ],
            [],
        )
        .output()
        .unwrap();
    assert!(up.status.success(), "cumulo up: {}", text(&up));
    let env: HashMap<String, String> = common::up_exports(first.dir.path()).into_iter().collect();
    let url = env["CUMULO_CONTROLLER"].clone();
    assert_eq!(url, format!("https://{}:8889", first.address));
    assert!(
        env.contains_key("CUMULO_CA_CERT") && env.contains_key("OS_CACERT"),
        "{env:?}"
    );
    let admin = as_admin(&env, first.dir.path());

    // The two others join, each with a token of its own, over HTTPS across the LAN.
    for (n, host) in lan.hosts.iter().enumerate().skip(1) {
        let made = cumulo_json(
            first,
            &admin,
            &[
                "node", "token", "create", "--roles", "agent", "--ttl", "10m",
            ],
        );
        let token = made["token"].as_str().unwrap().to_string();
        let dir = host.dir.path().to_str().unwrap().to_string();
        let hostname = format!("host{}", n + 1);
        let joined = host
            .ns
            .command(
                CUMULO,
                &[
                    "join",
                    "--to",
                    &url,
                    "--dir",
                    &dir,
                    "--hostname",
                    &hostname,
                    "--backend",
                    "sim",
                    "--set",
                    "CUMULO_AGENT_DISK_LIMIT=false",
                    "--set",
                    "CUMULO_AGENT_MEM_LIMIT=false",
                    "--set",
                    "CUMULO_AGENT_VCPUS=8",
                ],
                [(&"CUMULO_JOIN_TOKEN".to_string(), &token)],
            )
            .output()
            .unwrap();
        assert!(
            joined.status.success(),
            "cumulo join on {hostname}: {}",
            text(&joined)
        );
        let conf = std::fs::read_to_string(host.dir.path().join("agent.conf")).unwrap();
        assert!(
            conf.contains(&format!("\nCUMULO_AGENT_NODE_IP={}\n", host.address))
                && conf.contains(&format!(
                    "\nCUMULO_AGENT_SCHEDULER={}:8888\n",
                    first.address
                )),
            "{conf}"
        );
    }
    let nodes: HashMap<String, String> = testkit::poll_for(WITHIN, || {
        let listed = cumulo_json(first, &admin, &["node", "list"]);
        let ready: HashMap<String, String> = listed["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["status"] == "ready")
            .map(|n| {
                (
                    n["id"].as_str().unwrap().to_string(),
                    n["hostname"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        if ready.len() == 3 {
            Ok(ready)
        } else {
            Err(format!("not three ready nodes: {listed}"))
        }
    });

    *lan.nodes.borrow_mut() = nodes.keys().map(|id| id.replace('-', "")).collect();

    // Instances land on every host: of an ephemeral workload, so that a drain moves them.
    let cattle = [
        "workload",
        "create",
        "--name",
        "cattle",
        "--flavor",
        "tiny",
        "--image",
        "tiny",
        "--ephemeral",
    ];
    cumulo_json(first, &env, &cattle);
    let instances = create(first, &env, "cattle", "spread", 6);
    let on = |i: &Value| nodes[i["node"].as_str().unwrap()].clone();
    let hosts_used: BTreeSet<String> = instances.iter().map(on).collect();
    assert_eq!(hosts_used.len(), 3, "placement: {instances:#?}");

    // The tenant network spans the hosts: a guest on host2 reaches one on host3 through the
    // tenant's CNCI on the first host (VXLAN over the LAN both ways).
    let script = testkit::netns::dhcp_script(lan.hosts[0].dir.path()).unwrap();
    let mut reached = Vec::new();
    for (n, name) in ["host2", "host3"].iter().enumerate() {
        let instance = instances.iter().find(|i| on(i) == *name).unwrap();
        let host = &lan.hosts[n + 1];
        guests.push(guest(host, instance, n, &script));
        reached.push(instance["ip"].as_str().unwrap().to_string());
    }
    for (from, to) in [(0, 1), (1, 0)] {
        testkit::poll_for(WITHIN, || {
            if guests[from].ping(&reached[to]) {
                Ok(())
            } else {
                Err(format!(
                    "host{}'s guest does not reach {}",
                    from + 2,
                    reached[to]
                ))
            }
        });
    }

    // Removing host2 drains it (its instances go elsewhere) and revokes it.
    let host2 = nodes.iter().find(|(_, h)| *h == "host2").unwrap().0.clone();
    let moved: Vec<String> = instances
        .iter()
        .filter(|i| on(i) == "host2")
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    // An instance that lives on host2 (not ephemeral) holds its removal back, until deleted.
    let pet = testkit::poll_for(WITHIN, || {
        let pet = create(first, &env, "tiny", "pet", 1).remove(0);
        if on(&pet) == "host2" {
            Ok(pet)
        } else {
            let id = pet["id"].as_str().unwrap();
            cumulo_json(first, &env, &["instance", "delete", id, "--wait"]);
            Err(format!("the pet landed on {}", on(&pet)))
        }
    });
    let pet_id = pet["id"].as_str().unwrap();
    let refused = first
        .ns
        .command(CUMULO, &["node", "remove", &host2], &admin)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("live on it") && text(&refused).contains(pet_id),
        "{}",
        text(&refused)
    );
    cumulo_json(first, &env, &["instance", "delete", pet_id, "--wait"]);
    let removed = cumulo_json(first, &admin, &["node", "remove", &host2]);
    assert!(removed["revoked"].is_string(), "{removed}");
    testkit::poll_for(WITHIN, || {
        let listed = cumulo_json(first, &env, &["instance", "list"]);
        let all = match &listed {
            Value::Array(all) => all.clone(),
            other => other["instances"].as_array().cloned().unwrap_or_default(),
        };
        let stuck: Vec<&Value> = all
            .iter()
            .filter(|i| moved.contains(&i["id"].as_str().unwrap_or_default().to_string()))
            .filter(|i| i["state"] != "active" || i["node"].as_str() == Some(host2.as_str()))
            .collect();
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(format!("not moved off host2 yet: {stuck:#?}"))
        }
    });
    testkit::poll_for(WITHIN, || {
        let log = std::fs::read_to_string(first.dir.path().join("logs/scheduler.log")).unwrap();
        if log.contains("session ended: its certificate is revoked")
            && log.contains("peer certificate refused")
        {
            Ok(())
        } else {
            Err("host2's session not ended and refused yet".to_string())
        }
    });
    let listed = cumulo_json(first, &admin, &["node", "list"]);
    assert!(
        !listed["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == host2.as_str() && n["status"] == "ready"),
        "{listed}"
    );

    // `down` stops everything but leaves the host's own link (--compute-link) as it was.
    let root = first.dir.path().to_str().unwrap();
    let down = first
        .ns
        .command(CUMULO, &["down", "--dir", root], [])
        .output()
        .unwrap();
    assert!(down.status.success(), "cumulo down: {}", text(&down));
    assert!(
        first
            .ns
            .ip(&["-o", "addr", "show", "dev", "eth0"])
            .contains(&format!("inet {compute}")),
        "eth0 and its address are kept"
    );
}
