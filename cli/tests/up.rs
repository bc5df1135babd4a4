//! `cumulo up --backend sim` in a temporary directory, the CLI through create, list, show, stop,
//! start and delete with `--json` checked, a second `up` that finds the cluster running, then
//! `cumulo down`, and no process left behind.
//!
//! The cluster's binaries must be built (`cargo build --bins`): without them the test is skipped
//! with a message, unless `CUMULO_REQUIRE_BINS=1` (CI), which makes that a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;

use serde_json::Value;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

struct Cluster {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

impl Cluster {
    fn cumulo(&self, args: &[&str]) -> Output {
        Command::new(CUMULO)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(&self.env)
            .output()
            .unwrap()
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.cumulo(args);
        assert!(
            out.status.success(),
            "cumulo {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
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
    let up = [
        "up",
        "--backend",
        "sim",
        "--dir",
        &root,
        "--scheduler-listen",
        &sched,
        "--api-listen",
        &api,
    ];
    let shown = cluster.ok(&up);
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

    // Bad input: one clear line and a non-zero exit.
    let bad = cluster.cumulo(&["instance", "create", "--workload", "no-such-workload"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("cumulo: "), "{err}");

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
