//! `cumulo join`: a second host (here a directory of its own with its own agent, on loopback)
//! joins a `cumulo up --backend sim` cluster with a join token, its node becomes ready, the
//! token cannot be used again, and `cumulo node remove` revokes its certificate: the scheduler
//! ends its session and refuses it from then on.
//!
//! The cluster's binaries must be built (`cargo build --bins`), as for `up.rs`.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;
use std::time::Duration;

mod common;

use serde_json::Value;

const CUMULO: &str = env!("CARGO_BIN_EXE_cumulo");

/// The cluster and the joined host, brought down (by PID) whatever happens.
struct Hosts {
    first: tempfile::TempDir,
    second: tempfile::TempDir,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = cumulo::up::procs::stop(
            "agent",
            &self.second.path().join("agent.pid"),
            Duration::from_secs(5),
        );
        let root = self.first.path().to_str().unwrap_or_default().to_string();
        let _ = std::process::Command::new(CUMULO)
            .args(["down", "--dir", &root])
            .output();
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn json(dir: &Path, env: &[(String, String)], args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = common::cumulo_as_admin(dir, env.iter().map(|(k, v)| (k, v)), &all);
    let shown = common::succeeded(&all, out);
    serde_json::from_str(&shown).unwrap_or_else(|e| panic!("{args:?}: {e}: {shown}"))
}

/// The node named `hostname` as `cumulo node list` shows it, if listed.
fn node(dir: &Path, env: &[(String, String)], hostname: &str) -> Option<Value> {
    let nodes = json(dir, env, &["node", "list"]);
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["hostname"] == hostname)
        .cloned()
}

#[test]
fn a_host_joins_with_a_token_and_is_refused_once_removed() {
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let hosts = Hosts {
        first: tempfile::tempdir().unwrap(),
        second: tempfile::tempdir().unwrap(),
    };
    let first = hosts.first.path();
    let args = common::sim_up_args(first.to_str().unwrap());
    let out = std::process::Command::new(CUMULO)
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "cumulo up: {}", text(&out));
    let env = common::up_exports(first);
    let controller = env
        .iter()
        .find(|(k, _)| k == "CUMULO_CONTROLLER")
        .map(|(_, v)| v.clone())
        .unwrap();

    let made = json(
        first,
        &env,
        &[
            "node", "token", "create", "--roles", "agent", "--ttl", "10m",
        ],
    );
    let token = made["token"].as_str().unwrap().to_string();

    // The second host joins: its own key, certificate and agent.
    let second = hosts.second.path();
    let join = |token: &str| {
        std::process::Command::new(CUMULO)
            .args(["join", "--to", &controller, "--token", token, "--dir"])
            .arg(second)
            .args(["--hostname", "host2", "--backend", "sim"])
            .args([
                "--set",
                &format!(
                    "CUMULO_AGENT_CONSOLE_LISTEN=127.0.0.1:{}",
                    testkit::procfs::free_port()
                ),
                "--set",
                "CUMULO_AGENT_DISK_LIMIT=false",
                "--set",
                "CUMULO_AGENT_MEM_LIMIT=false",
            ])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .unwrap()
    };
    // Plain http to another host: refused before anything is sent.
    let out = std::process::Command::new(CUMULO)
        .args([
            "join",
            "--to",
            "http://192.0.2.1:8889",
            "--token",
            &token,
            "--dir",
        ])
        .arg(second)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("over https"), "{}", text(&out));
    // Another cluster's token (another CA's hash) is not even sent.
    let foreign = format!("{}{}", &token[..98], "0".repeat(64));
    let out = join(&foreign);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("not the cluster the token names"),
        "{}",
        text(&out)
    );
    let out = join(&token);
    assert!(out.status.success(), "cumulo join: {}", text(&out));
    let said = text(&out);
    assert!(
        said.contains("joined as node") && said.contains("connected"),
        "{said}"
    );
    let key = second.join("pki/agent.key");
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions())
            & 0o777,
        0o600
    );

    let id = testkit::poll_for(Duration::from_secs(60), || {
        match node(first, &env, "host2") {
            Some(n) if n["status"] == "ready" => Ok(n["id"].as_str().unwrap().to_string()),
            other => Err(format!("host2: {other:?}")),
        }
    });
    let joined = json(first, &env, &["node", "joined"]);
    assert_eq!(joined["joined_nodes"][0]["id"], id.as_str());

    // A packaged host: the package's files edited, nothing started here (no systemd).
    let etc = tempfile::tempdir().unwrap();
    let packaged = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/etc/agent.conf");
    std::fs::copy(&packaged, etc.path().join("agent.conf")).unwrap();
    let made = json(
        first,
        &env,
        &["node", "token", "create", "--roles", "agent,netagent"],
    );
    let out = std::process::Command::new(CUMULO)
        .args(["join", "--to", &controller, "--token"])
        .arg(made["token"].as_str().unwrap())
        .arg("--system")
        .arg(etc.path())
        .args(["--hostname", "host3", "--no-start"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cumulo join --system: {}", text(&out));
    let conf = std::fs::read_to_string(etc.path().join("agent.conf")).unwrap();
    let cert = etc.path().join("pki/agent.pem");
    for want in [
        format!("\nCUMULO_AGENT_CERT={}\n", cert.display()),
        "\nCUMULO_AGENT_NETWORK=dual\n".to_string(),
        "\nCUMULO_AGENT_HOSTNAME=host3\n".to_string(),
        "\nCUMULO_AGENT_STATE_DIR=/var/lib/cumulo/agent\n".to_string(),
        "\n# --zone: ".to_string(),
    ] {
        assert!(conf.contains(&want), "{want:?} not in\n{conf}");
    }
    assert!(!conf.contains("\nCUMULO_AGENT_NETWORK=cn\n"), "{conf}");
    assert!(etc.path().join("pki/agent.key").is_file() && cert.is_file());

    // Used once.
    let out = join(&token);
    assert!(!out.status.success());
    assert!(text(&out).contains("401"), "{}", text(&out));

    // Only a joined host is removed: another node is left alone, nothing done.
    let other = uuid::Uuid::new_v4().to_string();
    let out = common::cumulo_as_admin(
        first,
        env.iter().map(|(k, v)| (k, v)),
        &["node", "remove", &other],
    );
    assert!(!out.status.success());
    assert!(
        text(&out).contains("did not join with a token"),
        "{}",
        text(&out)
    );

    // Removed: revoked, its session ended, and it stays out.
    let removed = json(first, &env, &["node", "remove", &id]);
    assert!(removed["revoked"].is_string(), "{removed}");
    testkit::poll_for(Duration::from_secs(30), || {
        match node(first, &env, "host2") {
            Some(n) if n["status"] == "ready" => Err(format!("host2 is still ready: {n}")),
            _ => Ok(()),
        }
    });
    let scheduler_log = std::fs::read_to_string(first.join("logs/scheduler.log")).unwrap();
    assert!(
        scheduler_log.contains("session ended: its certificate is revoked"),
        "{scheduler_log}"
    );
    // Its agent keeps trying and is refused at the TLS handshake: the scheduler logs it.
    testkit::poll_for(Duration::from_secs(30), || {
        let log = std::fs::read_to_string(first.join("logs/scheduler.log")).unwrap();
        if log.contains("peer certificate refused") {
            Ok(())
        } else {
            Err("no refusal logged yet".into())
        }
    });
    let joined = json(first, &env, &["node", "joined"]);
    let host2 = joined["joined_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["hostname"] == "host2")
        .unwrap();
    assert!(host2["revoked"].is_string(), "{joined}");
}
