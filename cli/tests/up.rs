//! `cumulo up --backend sim` in a temporary directory (under umask 0: nothing of the cluster may
//! count on the umask), the CLI through create, list, show, stop, start and delete with `--json`
//! checked, every file of the cluster's directory against the modes it must have, a second `up`
//! that finds the cluster running, then `cumulo down`, and no process left behind.
//!
//! The cluster's binaries must be built (`cargo build --bins`): without them the test is skipped
//! with a message, unless `CUMULO_REQUIRE_BINS=1` (CI), which makes that a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;

use serde_json::Value;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

struct Cluster {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

/// A test that fails leaves no cluster running (after the test's own `down`, nothing to do).
impl Drop for Cluster {
    fn drop(&mut self) {
        let root = self.dir.path().to_str().unwrap_or_default().to_string();
        let _ = self.cumulo(&["down", "--dir", &root]);
    }
}

impl Cluster {
    fn cumulo(&self, args: &[&str]) -> Output {
        self.command(Command::new(CUMULO).args(args))
    }

    /// `cumulo` with umask 0 (and so the services it starts): the most a file may be opened.
    fn cumulo_umask_0(&self, args: &[&str]) -> Output {
        self.command(
            Command::new("sh")
                .args(["-c", "umask 0 && exec \"$0\" \"$@\"", CUMULO])
                .args(args),
        )
    }

    fn command(&self, command: &mut Command) -> Output {
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(&self.env)
            .output()
            .unwrap()
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        common::succeeded(args, self.cumulo(args))
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    }

    fn state(&self, id: &str) -> String {
        self.json(&["instance", "show", id])["state"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn wait_state(&self, id: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state = self.state(id);
            if state == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "instance {id} is {state}, not {want}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
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
}

/// Every file and directory a sim cluster writes in its directory, by path (`*` stands for any
/// part of a name), with its mode under umask 0: secrets (keys, passwords, the store, instance
/// records and disks, logs) the owner's alone, public files (certificates, addresses, PIDs)
/// readable by all and writable by the owner, directories the owner's alone. A file that is not
/// here fails the test: a new one must be classified.
const MODES: &[(&str, u32)] = &[
    ("addresses", 0o644),
    ("admin-password", 0o600),
    ("demo-password", 0o600),
    ("env", 0o600),
    ("agent", 0o700),
    ("agent/agent.lock", 0o600),
    ("agent/exports", 0o700),
    ("agent/exports/*.qcow2", 0o600),
    ("agent/instances", 0o700),
    ("agent/instances/*.json", 0o600),
    ("agent/instances/.*.json.tmp", 0o600),
    ("agent/sim", 0o700),
    ("agent/sim/*", 0o600),
    ("certs", 0o700),
    ("certs/*.pem", 0o644),
    ("certs/*.key", 0o600),
    ("certs/crl.lock", 0o600),
    ("controller", 0o700),
    ("controller/controller.db", 0o600),
    ("controller/controller.db-wal", 0o600),
    ("controller/controller.db-shm", 0o600),
    ("controller/token.key", 0o600),
    ("controller/images", 0o700),
    ("controller/images/sha512", 0o700),
    ("controller/images/sha512/*", 0o600),
    ("controller/images/staging", 0o700),
    ("controller/images/staging/*.part", 0o600),
    ("logs", 0o700),
    ("logs/*.log", 0o600),
    ("run", 0o700),
    ("run/*.pid", 0o644),
    ("scheduler", 0o700),
];

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => name.strip_prefix(head).is_some_and(|rest| {
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && matches(tail, &rest[i..]))
        }),
    }
}

/// What under `root` is not as [`MODES`] says, one line each.
fn modes_off(root: &Path) -> Vec<String> {
    let mut off = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue; // gone meanwhile (a temporary file)
            };
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                dirs.push(path.clone());
            } else if !meta.is_file() {
                off.push(format!("{rel}: neither a file nor a directory"));
                continue;
            }
            match MODES.iter().find(|(pattern, _)| matches(pattern, &rel)) {
                Some((_, want)) if *want == mode => {}
                Some((_, want)) => off.push(format!("{rel}: mode {mode:04o}, not {want:04o}")),
                None => off.push(format!("{rel}: mode {mode:04o}, not classified in MODES")),
            }
        }
    }
    off.sort();
    off
}

#[test]
fn the_mode_patterns_match_as_meant() {
    assert!(matches("logs/*.log", "logs/agent.log"));
    assert!(!matches("logs/*.log", "logs/agent.log.1"));
    assert!(matches(
        "agent/instances/.*.json.tmp",
        "agent/instances/.a.json.tmp"
    ));
    assert!(!matches(
        "agent/instances/*.json",
        "agent/instances/a.json.tmp"
    ));
    assert!(matches("env", "env") && !matches("env", "envy"));
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

#[test]
fn up_drive_and_down() {
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster {
        dir,
        env: HashMap::new(),
    };
    let root = cluster.dir.path().to_str().unwrap().to_string();
    let sched = format!("127.0.0.1:{}", testkit::procfs::free_port());
    let api = format!("127.0.0.1:{}", testkit::procfs::free_port());
    let console = format!("127.0.0.1:{}", testkit::procfs::free_port());
    let images = format!("127.0.0.1:{}", testkit::procfs::free_port());
    let up = [
        "up",
        "--backend",
        "sim",
        "--tenant-network",
        "none",
        "--dir",
        &root,
        "--scheduler-listen",
        &sched,
        "--api-listen",
        &api,
        "--console-listen",
        &console,
        "--image-listen",
        &images,
    ];
    let shown = common::succeeded(&up, cluster.cumulo_umask_0(&up));
    assert!(shown.contains("cumulo is up (sim backend)"), "{shown}");
    // The exports `up` wrote are all the CLI needs.
    let env = std::fs::read_to_string(cluster.dir.path().join("env")).unwrap();
    for line in env.lines() {
        if let Some((k, v)) = line.trim_start_matches("export ").split_once('=') {
            cluster.env.insert(k.to_string(), v.to_string());
        }
    }
    let started = cluster.pids();
    assert_eq!(started.len(), 3, "{started:?}");

    // The first instance is there and active.
    let list = cluster.json(&["instance", "list"]);
    let first = &list["instances"][0];
    assert_eq!(first["name"], "first");
    assert_eq!(first["state"], "active");

    let made = cluster.json(&[
        "instance",
        "create",
        "--workload",
        "tiny",
        "--name",
        "e2e",
        "--count",
        "2",
        "--wait",
    ]);
    let made = made.as_array().unwrap();
    assert_eq!(made.len(), 2);
    assert!(made.iter().all(|i| i["state"] == "active"));
    let id = made[0]["id"].as_str().unwrap().to_string();
    let shown = cluster.json(&["instance", "show", &id]);
    assert_eq!(shown["name"], "e2e");
    assert!(shown["ip"].as_str().unwrap().starts_with("172."));
    let names: Vec<String> = cluster.json(&["instance", "list"])["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["first", "e2e", "e2e"]);

    cluster.ok(&["instance", "stop", &id]);
    cluster.wait_state(&id, "exited");
    cluster.ok(&["instance", "start", &id]);
    cluster.wait_state(&id, "active");
    cluster.ok(&["instance", "delete", "--wait", &id]);
    let gone = cluster.cumulo(&["instance", "show", &id]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("404"));

    // A traced create: its START's hops (controller, then scheduler) and the agent's report of
    // when it was done reach `cumulo trace show` (an admin's).
    cluster.ok(&[
        "instance",
        "create",
        "--workload",
        "tiny",
        "--name",
        "traced",
        "--trace",
        "e2e trace",
        "--wait",
    ]);
    let as_admin = |args: &[&str]| common::cumulo_as_admin(cluster.dir.path(), &cluster.env, args);
    let shown = testkit::poll_for(Duration::from_secs(30), || {
        let out = as_admin(&["trace", "show", "e2e trace"]);
        match out.status.success() {
            true => Ok(String::from_utf8(out.stdout).unwrap()),
            false => Err(format!(
                "no trace: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    });
    for want in [
        "frame  START",
        "controller",
        "scheduler",
        "final consumer done",
    ] {
        assert!(shown.contains(want), "no {want:?} in:\n{shown}");
    }
    let listed = common::succeeded(&["trace"], as_admin(&["--json", "trace"]));
    let traces: Value = serde_json::from_str(&listed).unwrap();
    let trace = traces["traces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["label"] == "e2e trace")
        .unwrap()
        .clone();
    let hops = trace["hops"].as_array().unwrap();
    assert_eq!(hops.len(), 2, "{trace}");
    assert!(
        hops.iter()
            .all(|h| h["rx_ns"].as_u64() >= h["tx_ns"].as_u64()),
        "{trace}"
    );
    assert!(trace["total_ns"].as_u64().unwrap() > 0, "{trace}");
    // A label that is not one is refused, saying why.
    let bad = cluster.cumulo(&["instance", "create", "--workload", "tiny", "--trace", "é"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("X-Cumulo-Trace"));

    // Bad input: one clear line and a non-zero exit.
    let bad = cluster.cumulo(&["instance", "create", "--workload", "no-such-workload"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("cumulo: "), "{err}");

    // Everything the cluster wrote so far (secrets included: passwords, keys, the store, the
    // instances' records and disks) has the mode it must have, whatever the umask.
    let off = modes_off(cluster.dir.path());
    assert!(
        off.is_empty(),
        "files with the wrong mode:\n{}",
        off.join("\n")
    );

    // A second `up` finds it running and leaves it alone.
    let again = cluster.ok(&up);
    assert!(again.contains("already up"), "{again}");

    cluster.ok(&["down", "--dir", &root]);
    for (pid, program) in &started {
        assert!(!alive(*pid), "{program} (pid {pid}) still runs after down");
    }
    let status = cluster.cumulo(&["status", "--dir", &root]);
    assert_eq!(status.status.code(), Some(3));
    cluster.ok(&["down", "--dir", &root, "--purge"]);
    assert!(!cluster.dir.path().join("certs").exists());
}

/// The agent's node endpoint port held by another process: `up` fails at once, saying which
/// address and why (the agent stops before it dials: the controller would otherwise fetch
/// consoles from whatever holds the port), and `down` leaves nothing running.
#[test]
fn a_taken_node_endpoint_port_fails_up_naming_it() {
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let cluster = Cluster {
        dir: tempfile::tempdir().unwrap(),
        env: HashMap::new(),
    };
    let root = cluster.dir.path().to_str().unwrap().to_string();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let mut args = common::sim_up_args(&root);
    let at = args.iter().position(|a| a == "--console-listen").unwrap();
    args[at + 1].clone_from(&taken);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cluster.cumulo(&args);
    let said = common::output_text(&out);
    assert!(!out.status.success(), "{said}");
    // The agent's exit is seen, not waited out, with its cause from its log.
    assert!(said.contains("agent exited while starting"), "{said}");
    assert!(
        said.contains(&format!("--console-listen {taken}")) && said.contains("cannot listen"),
        "{said}"
    );
    let down = cluster.cumulo(&["down", "--dir", &root]);
    assert!(down.status.success(), "{}", common::output_text(&down));
    assert!(cluster.pids().is_empty(), "{:?}", cluster.pids());
}
