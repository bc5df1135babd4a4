//! Failures reach the user at once, with their cause: `cumulo up --backend sim` in a temporary
//! directory, then an instance whose image the sim agent never boots. `instance create --wait`
//! fails as soon as it is in error, with the agent's message on stderr; `instance show` (by
//! name) shows the fault; `instance start --wait` fails the same way; every instance verb takes
//! a name; `cumulo down` at the end.
//!
//! The cluster's binaries must be built (`cargo build --bins`): without them the test is skipped
//! with a message, unless `CUMULO_REQUIRE_BINS=1` (CI), which makes that a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;

use serde_json::Value;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

/// What the sim agent says about an image it never boots (`agent::sim::IMAGE_FAIL_LAUNCH`).
const NEVER_BOOTS: &str = "simulated: the image fail-launch never boots";

/// A sim cluster in a temporary directory; `cumulo down --purge` when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    env: HashMap<String, String>,
}

impl Cluster {
    fn up() -> Cluster {
        let mut cluster = Cluster {
            dir: tempfile::tempdir().unwrap(),
            env: HashMap::new(),
        };
        let root = cluster.root();
        let up = common::sim_up_args(&root);
        cluster.ok(&up.iter().map(String::as_str).collect::<Vec<_>>());
        cluster.env = common::up_exports(cluster.dir.path()).into_iter().collect();
        cluster
    }

    fn root(&self) -> String {
        self.dir.path().to_str().unwrap().to_string()
    }

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
        common::succeeded(args, self.cumulo(args))
    }

    /// Runs a command that must succeed as the cluster's admin; returns its stdout.
    fn admin(&self, args: &[&str]) -> String {
        let out = common::cumulo_as_admin(self.dir.path(), &self.env, args);
        common::succeeded(args, out)
    }

    /// Runs a command that must fail; returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.cumulo(args);
        assert!(
            !out.status.success(),
            "cumulo {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
    }

    fn wait_state(&self, name: &str, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state = self.json(&["instance", "show", name])["state"].clone();
            if state == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "instance {name} is {state}, not {want}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let root = self.root();
        let _ = self.cumulo(&["down", "--dir", &root, "--purge"]);
    }
}

#[test]
fn a_failed_start_stops_the_wait_and_shows_its_cause() {
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let cluster = Cluster::up();
    // Registering a node file by reference is for admins.
    cluster.admin(&[
        "image",
        "create",
        "--name",
        "broken",
        "--reference",
        "fail-launch",
        "--public",
    ]);
    cluster.ok(&[
        "workload", "create", "--name", "broken", "--flavor", "tiny", "--image", "broken",
    ]);

    // create --wait: fails at once (long before its 300 s), with the reason and the agent's
    // message on stderr, in its last line.
    let started = Instant::now();
    let err = cluster.fails(&[
        "instance",
        "create",
        "--workload",
        "broken",
        "--name",
        "doomed",
        "--wait",
    ]);
    assert!(started.elapsed() < Duration::from_secs(60), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("cumulo: instance "), "{err}");
    assert!(
        last.ends_with(&format!(
            "(doomed) failed to start: launch_failure: {NEVER_BOOTS}"
        )),
        "{err}"
    );

    // show, by name: the fault in the table, and as an object in JSON.
    let table = cluster.ok(&["instance", "show", "doomed"]);
    let fault_line = table
        .lines()
        .find(|l| l.starts_with("fault"))
        .unwrap_or_else(|| panic!("no fault line: {table}"));
    assert!(
        fault_line.contains(&format!("launch_failure: {NEVER_BOOTS} (")),
        "{fault_line}"
    );
    let shown = cluster.json(&["instance", "show", "doomed"]);
    assert_eq!(shown["state"], "error");
    assert_eq!(shown["fault"]["reason"], "launch_failure");
    assert_eq!(shown["fault"]["message"], NEVER_BOOTS);
    assert!(shown["fault"]["created"].is_string(), "{shown}");
    let id = shown["id"].as_str().unwrap().to_string();
    assert_eq!(cluster.json(&["instance", "show", &id])["id"], id.as_str());

    // start --wait, by name: it fails again, the same way.
    let err = cluster.fails(&["instance", "start", "--wait", "doomed"]);
    assert!(
        err.lines()
            .last()
            .unwrap_or_default()
            .ends_with(&format!("failed to start: launch_failure: {NEVER_BOOTS}")),
        "{err}"
    );

    // Every verb takes a name: a good instance stopped, started (and waited for), restarted,
    // its console log fetched from its node (the sim agent's: a marker per boot), then deleted;
    // a name nothing has is an error.
    cluster.ok(&[
        "instance",
        "create",
        "--workload",
        "tiny",
        "--name",
        "good",
        "--wait",
    ]);
    cluster.ok(&["instance", "stop", "good"]);
    cluster.wait_state("good", "exited");
    let started = cluster.json(&["instance", "start", "--wait", "good"]);
    assert_eq!(started[0]["state"], "active", "{started}");
    cluster.ok(&["instance", "restart", "good"]);
    let good = cluster.json(&["instance", "show", "good"])["id"].clone();
    let marker = format!("CUMULO-GUEST-UP {}\n", good.as_str().unwrap());
    let console = cluster.ok(&["instance", "console", "good"]);
    assert!(console.ends_with(&marker), "{console}");
    assert!(
        console.lines().count() >= 4,
        "two boots at least: {console}"
    );
    assert_eq!(
        cluster.ok(&["instance", "console", "good", "--lines", "1"]),
        marker
    );
    let json = cluster.json(&["instance", "console", "good", "--lines", "2"]);
    assert_eq!(
        json["output"].as_str().unwrap().lines().count(),
        2,
        "{json}"
    );
    // An instance that never ran anywhere has no console log.
    let none = cluster.fails(&["instance", "console", "doomed"]);
    assert!(none.contains("console log"), "{none}");
    cluster.ok(&["instance", "delete", "--wait", "good"]);
    cluster.ok(&["instance", "delete", "--wait", "doomed"]);
    let gone = cluster.fails(&["instance", "show", "doomed"]);
    assert!(gone.contains("no \"doomed\" found"), "{gone}");
}
