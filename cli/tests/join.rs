//! `cumulo join`: a second host (here a directory of its own with its own agent, on loopback)
//! joins a `cumulo up --backend sim` cluster with a join token, its node becomes ready, the
//! token cannot be used again, and `cumulo node remove` revokes its certificate: the scheduler
//! ends its session and refuses it from then on.
//!
//!
//! A second controller joins (`cumulo join --role controller`) a cluster whose store is a real
//! etcd (`cumulo up --store etcd://...` with etcd's TLS client certificate), with a controller
//! token and the CA key its admin copied, and serves the same cluster: the same users, nodes
//! and instances, and an instance created through it becomes active. An agent token does not
//! make a controller (the token stays unused), a controller token is refused while the store
//! is SQLite, a CA key of another CA is refused before the token is sent; `--system` edits the
//! package's controller.conf (etcd: skipped without it unless `CUMULO_REQUIRE_ETCD=1`).
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
        for daemon in ["agent", "controller"] {
            let _ = cumulo::up::procs::stop(
                daemon,
                &self.second.path().join(format!("{daemon}.pid")),
                Duration::from_secs(5),
            );
        }
        if std::thread::panicking()
            && let Ok(log) = std::fs::read_to_string(self.second.path().join("controller.log"))
        {
            eprintln!("--- the second controller's log:\n{log}");
        }
        let root = self.first.path().to_str().unwrap_or_default().to_string();
        let _ = std::process::Command::new(CUMULO)
            .args(["down", "--dir", &root])
            .output();
    }
}

/// `cumulo up` of a sim cluster in `dir` with `extra` flags: its exports and its API's URL.
fn up(dir: &Path, extra: &[String]) -> (Vec<(String, String)>, String) {
    let mut args = common::sim_up_args(dir.to_str().unwrap());
    args.extend_from_slice(extra);
    let out = std::process::Command::new(CUMULO)
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "cumulo up: {}", text(&out));
    let env = common::up_exports(dir);
    let url = env
        .iter()
        .find(|(k, _)| k == "CUMULO_CONTROLLER")
        .map(|(_, v)| v.clone())
        .unwrap();
    (env, url)
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
    let (env, controller) = up(first, &[]);

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

/// `cumulo --json ARGS` as the first cluster's admin, against the API at `url`.
fn admin(first: &Path, env: &[(String, String)], url: &str, args: &[&str]) -> Value {
    let mut env = env.to_vec();
    env.retain(|(k, _)| k != "CUMULO_CONTROLLER");
    env.push(("CUMULO_CONTROLLER".into(), url.into()));
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = common::cumulo_as_admin(first, env.iter().map(|(k, v)| (k, v)), &all);
    let shown = common::succeeded(&all, out);
    serde_json::from_str(&shown).unwrap_or_else(|e| panic!("{args:?}: {e}: {shown}"))
}

fn join_controller(second: &Path, url: &str, token: &str, ca_key: &Path, extra: &[&str]) -> Output {
    std::process::Command::new(CUMULO)
        .args(["join", "--role", "controller", "--to", url, "--dir"])
        .arg(second)
        .arg("--ca-key")
        .arg(ca_key)
        .args(["--hostname", "ctl2"])
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CUMULO_JOIN_TOKEN", token)
        .output()
        .unwrap()
}

#[test]
fn a_second_controller_joins_on_the_clusters_etcd() {
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let Some(etcd) = testkit::etcd::shared() else {
        return;
    };
    let (etcd_ca, etcd_cert, etcd_key) = etcd.client_files("root");
    let store = format!(
        "etcd://{}/cumulo-join-{}",
        etcd.endpoint(),
        std::process::id()
    );
    let hosts = Hosts {
        first: tempfile::tempdir().unwrap(),
        second: tempfile::tempdir().unwrap(),
    };
    let (first, second) = (hosts.first.path(), hosts.second.path());

    // Without etcd: a controller token is refused (a SQLite store is one controller's).
    let sqlite = tempfile::tempdir().unwrap();
    {
        let (env, _) = up(sqlite.path(), &[]);
        let out = common::cumulo_as_admin(
            sqlite.path(),
            env.iter().map(|(k, v)| (k, v)),
            &["node", "token", "create", "--roles", "controller"],
        );
        let _ = std::process::Command::new(CUMULO)
            .args(["down", "--dir", sqlite.path().to_str().unwrap()])
            .output();
        assert!(!out.status.success());
        assert!(text(&out).contains("store is etcd"), "{}", text(&out));
    }

    let mut store_args = vec!["--store".to_string(), store.clone()];
    for (flag, file) in [
        ("--etcd-ca", &etcd_ca),
        ("--etcd-cert", &etcd_cert),
        ("--etcd-key", &etcd_key),
    ] {
        store_args.extend([flag.to_string(), file.display().to_string()]);
    }
    let (env, url) = up(first, &store_args);
    let ca_key = first.join("certs/ca.key");

    // A CA key of another cluster: refused before the token goes anywhere.
    let made = admin(
        first,
        &env,
        &url,
        &["node", "token", "create", "--roles", "controller"],
    );
    let token = made["token"].as_str().unwrap().to_string();
    let foreign = testkit::TestPki::new();
    let foreign_key = second.join("foreign-ca.key");
    std::fs::write(&foreign_key, foreign.ca_key_pem()).unwrap();
    let out = join_controller(second, &url, &token, &foreign_key, &[]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("not the cluster CA's key"),
        "{}",
        text(&out)
    );
    // An agent token does not make a controller, and stays usable.
    let agent_token = admin(
        first,
        &env,
        &url,
        &["node", "token", "create", "--roles", "agent"],
    );
    let out = join_controller(
        second,
        &url,
        agent_token["token"].as_str().unwrap(),
        &ca_key,
        &[],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("not as controller"), "{}", text(&out));
    let tokens = admin(first, &env, &url, &["node", "token", "list"]);
    assert!(
        cumulo::routes::items(&tokens)
            .iter()
            .all(|t| t["used"].is_null()),
        "{tokens}"
    );

    // The second controller: its own certificate, the cluster's etcd, its API on its own port.
    let port = testkit::procfs::free_port();
    let api = format!("127.0.0.1:{port}");
    let settings = [
        format!("CUMULO_CONTROLLER_API_LISTEN={api}"),
        format!("CUMULO_ETCD_CA={}", etcd_ca.display()),
        format!("CUMULO_ETCD_CERT={}", etcd_cert.display()),
        format!("CUMULO_ETCD_KEY={}", etcd_key.display()),
    ];
    let mut extra = Vec::new();
    for s in &settings {
        extra.extend(["--set", s.as_str()]);
    }
    let out = join_controller(second, &url, &token, &ca_key, &extra);
    assert!(
        out.status.success(),
        "cumulo join --role controller: {}",
        text(&out)
    );
    let conf = std::fs::read_to_string(second.join("controller.conf")).unwrap();
    assert!(
        conf.contains(&format!("\nCUMULO_CONTROLLER_STORE={store}\n")),
        "{conf}"
    );
    for key in ["pki/controller.key", "pki/ca.key"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(second.join(key)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }

    // One cluster through either controller: the same admin, the same node, and an instance
    // made through the second becomes active (its engine's START through its own session).
    let second_url = format!("http://{api}");
    let nodes = testkit::poll_for(Duration::from_secs(60), || {
        let listed = admin(first, &env, &second_url, &["node", "list"]);
        if cumulo::routes::items(&listed)
            .iter()
            .any(|n| n["status"] == "ready")
        {
            Ok(listed)
        } else {
            Err(format!(
                "no ready node through the second controller: {listed}"
            ))
        }
    });
    assert_eq!(cumulo::routes::items(&nodes).len(), 1, "{nodes}");
    let mut demo = env.clone();
    demo.retain(|(k, _)| k != "CUMULO_CONTROLLER");
    demo.push(("CUMULO_CONTROLLER".into(), second_url.clone()));
    let out = std::process::Command::new(CUMULO)
        .args([
            "--json",
            "instance",
            "create",
            "--workload",
            "tiny",
            "--name",
            "via2",
            "--wait",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(demo.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let made: Value =
        serde_json::from_str(&common::succeeded(&["instance", "create"], out)).unwrap();
    assert_eq!(made[0]["state"], "active", "{made}");
    let id = made[0]["id"].as_str().unwrap();
    // The first controller sees it too (one store).
    let shown = admin(first, &env, &url, &["instance", "show", id]);
    assert_eq!(shown["state"], "active", "{shown}");
    // It holds the CA key: it makes join tokens too.
    let through2 = admin(
        first,
        &env,
        &second_url,
        &["node", "token", "create", "--roles", "agent"],
    );
    assert!(through2["token"].is_string(), "{through2}");
    let joined = admin(first, &env, &url, &["node", "joined"]);
    assert!(
        cumulo::routes::items(&joined)
            .iter()
            .any(|n| n["hostname"] == "ctl2" && n["roles"] == "controller"),
        "{joined}"
    );

    // A packaged host: the package's controller.conf edited, nothing started here (no
    // systemd), the keys for the cumulo group.
    let etc = tempfile::tempdir().unwrap();
    let packaged = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/etc/controller.conf");
    std::fs::copy(&packaged, etc.path().join("controller.conf")).unwrap();
    let made = admin(
        first,
        &env,
        &url,
        &["node", "token", "create", "--roles", "controller"],
    );
    let out = std::process::Command::new(CUMULO)
        .args(["join", "--role", "controller", "--to", &url, "--token"])
        .arg(made["token"].as_str().unwrap())
        .arg("--ca-key")
        .arg(&ca_key)
        .arg("--system")
        .arg(etc.path())
        .args(["--hostname", "ctl3", "--no-start"])
        .output()
        .unwrap();
    assert!(out.status.success(), "cumulo join --system: {}", text(&out));
    let conf = std::fs::read_to_string(etc.path().join("controller.conf")).unwrap();
    for want in [
        format!("\nCUMULO_CONTROLLER_STORE={store}\n"),
        format!(
            "\nCUMULO_CONTROLLER_LAUNCHER_CA_KEY={}\n",
            etc.path().join("pki/ca.key").display()
        ),
        "\nCUMULO_CONTROLLER_TENANT_NETWORK=none\n".to_string(),
    ] {
        assert!(conf.contains(&want), "{want:?} not in\n{conf}");
    }
    assert!(!conf.contains("CUMULO_CONTROLLER_STATE_DIR=/tmp"), "{conf}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(etc.path().join("pki/controller.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o640);
}
