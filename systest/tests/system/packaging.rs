//! The Debian packages (`scripts/package.sh`), their systemd units and configuration files
//! (`packaging/`): the files name every flag of their daemon; the units pass `systemd-analyze
//! verify`; the packages hold what they should; and the daemons, taken from the packages and
//! started as their units start them (the unit's `ExecStart`, `Environment` and
//! `EnvironmentFile`, nothing else in their environment but systemd's `PATH`), make a working
//! cluster.
//!
//! `CUMULO_BLESS=1` writes the configuration files again from the daemons' flags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clap::CommandFactory;
use support::envfile;

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each daemon, its command line, and the values its packaged file sets.
/// The values a packaged configuration file sets.
type Settings = Vec<(&'static str, &'static str)>;

fn daemons() -> Vec<(&'static str, clap::Command, Settings)> {
    vec![
        (
            "scheduler",
            scheduler::config::Args::command(),
            vec![
                ("CUMULO_SCHEDULER_CA_CERT", "/etc/cumulo/pki/ca.pem"),
                ("CUMULO_SCHEDULER_CERT", "/etc/cumulo/pki/scheduler.pem"),
                ("CUMULO_SCHEDULER_KEY", "/etc/cumulo/pki/scheduler.key"),
                ("CUMULO_SCHEDULER_STATE_DIR", "/var/lib/cumulo/scheduler"),
                // The controller's list (on the same host; copied to a scheduler elsewhere).
                ("CUMULO_SCHEDULER_CRL", "/var/lib/cumulo/controller/crl.pem"),
            ],
        ),
        (
            "controller",
            controller::config::Args::command(),
            vec![
                ("CUMULO_CONTROLLER_CA_CERT", "/etc/cumulo/pki/ca.pem"),
                ("CUMULO_CONTROLLER_CERT", "/etc/cumulo/pki/controller.pem"),
                ("CUMULO_CONTROLLER_KEY", "/etc/cumulo/pki/controller.key"),
                ("CUMULO_CONTROLLER_SCHEDULER", "localhost:8888"),
                ("CUMULO_CONTROLLER_STATE_DIR", "/var/lib/cumulo/controller"),
                (
                    "CUMULO_CONTROLLER_ADMIN_PASSWORD_FILE",
                    "/var/lib/cumulo/controller/admin-password",
                ),
                (
                    "CUMULO_CONTROLLER_LAUNCHER_CA_KEY",
                    "/etc/cumulo/pki/ca.key",
                ),
                (
                    "CUMULO_CONTROLLER_CRL",
                    "/var/lib/cumulo/controller/crl.pem",
                ),
            ],
        ),
        (
            "agent",
            agent::daemon::cli::Args::command(),
            vec![
                ("CUMULO_AGENT_CA_CERT", "/etc/cumulo/pki/ca.pem"),
                ("CUMULO_AGENT_CERT", "/etc/cumulo/pki/agent.pem"),
                ("CUMULO_AGENT_KEY", "/etc/cumulo/pki/agent.key"),
                ("CUMULO_AGENT_SCHEDULER", "localhost:8888"),
                ("CUMULO_AGENT_NETWORK", "cn"),
                ("CUMULO_AGENT_BACKEND", "libvirt"),
                ("CUMULO_AGENT_STATE_DIR", "/var/lib/cumulo/agent"),
            ],
        ),
    ]
}

fn preamble(name: &str) -> String {
    format!(
        "cumulo-{name}'s settings, read by its unit (cumulo-{name}.service, EnvironmentFile=):\n\
         one NAME=VALUE a line, each a flag of `cumulo-{name} --help` (a flag given on the\n\
         command line wins). A line that begins with # is a comment: the commented settings\n\
         show the daemon's default. After a change: systemctl restart cumulo-{name}.\n\
         \n\
         Made from the daemon's flags (systest's packaging test keeps it so): edit the values,\n\
         not the comments."
    )
}

#[test]
fn each_configuration_file_names_every_flag_of_its_daemon() {
    let bless = std::env::var_os("CUMULO_BLESS").is_some();
    let mut stale = Vec::new();
    for (name, cmd, set) in daemons() {
        let want = envfile::template(&cmd, &preamble(name), &set);
        let path = repo().join(format!("packaging/etc/{name}.conf"));
        if bless {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            stale.push(path.display().to_string());
        }
        // Every flag with a variable is in the file, set or commented out.
        for arg in cmd.get_arguments() {
            if let Some(env) = arg.get_env().and_then(|e| e.to_str()) {
                assert!(
                    want.contains(&format!("\n{env}=")) || want.contains(&format!("\n#{env}=")),
                    "{name}: {env} missing"
                );
            }
        }
        // What the file sets, the daemon's parser takes.
        let vars = envfile::parse(&want).unwrap();
        assert_eq!(vars.len(), set.len(), "{name}");
    }
    assert!(
        stale.is_empty(),
        "out of date (the daemons' flags changed): {stale:?}; run CUMULO_BLESS=1 cargo test -p systest --test system packaging"
    );
}

/// The machine's unit files with ours among them, under `root` (where the packages were
/// unpacked), so that `systemd-analyze verify --root` finds what ours refer to.
fn verify_units(root: &Path, units: &[&str]) {
    let sys = root.join("lib/systemd/system");
    for entry in std::fs::read_dir("/lib/systemd/system").unwrap() {
        let entry = entry.unwrap();
        let to = sys.join(entry.file_name());
        if !to.exists() {
            let from = std::fs::canonicalize(entry.path()).unwrap_or(entry.path());
            if from.is_file() {
                std::fs::copy(&from, &to).unwrap();
            }
        }
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args(units)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // An unknown or misspelt setting is only a warning to systemd: fail on any word from it.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {}\n{stderr}",
        out.status
    );
}

/// Whether systemd-analyze is here; CI (CUMULO_REQUIRE_BINS) needs it.
fn have_systemd_analyze() -> bool {
    let here = Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !here && std::env::var_os("CUMULO_REQUIRE_BINS").is_some() {
        panic!("systemd-analyze is missing (apt-get install systemd; scripts/deps.sh does)");
    }
    here
}

/// A unit's `[Service]` settings, each key with its values in order.
fn service_section(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut in_service = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_service = line == "[Service]";
            continue;
        }
        if !in_service || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line.split_once('=').unwrap();
        out.entry(k.to_string()).or_default().push(v.to_string());
    }
    out
}

/// A daemon as its unit starts it, from the unpacked packages under `root`: its `ExecStart`
/// (the path inside `root`), systemd's `PATH`, its `Environment=`, then its `EnvironmentFile=`
/// (inside `root`) read as systemd reads it. Logs to `log`.
fn start_as_unit(root: &Path, unit: &str, log: &Path) -> Child {
    let text = std::fs::read_to_string(root.join("lib/systemd/system").join(unit)).unwrap();
    let service = service_section(&text);
    let exec = &service["ExecStart"];
    assert_eq!(exec.len(), 1, "{unit}: one ExecStart");
    let mut words = exec[0].split_whitespace();
    let program = words.next().unwrap();
    assert!(program.starts_with("/usr/bin/"), "{unit}: {program}");
    let mut cmd = Command::new(root.join(program.trim_start_matches('/')));
    cmd.args(words).env_clear().env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    for setting in service.get("Environment").into_iter().flatten() {
        for pair in setting.split_whitespace() {
            let (k, v) = pair.split_once('=').unwrap();
            cmd.env(k, v);
        }
    }
    for file in &service["EnvironmentFile"] {
        let path = root.join(file.trim_start_matches('-').trim_start_matches('/'));
        let text = std::fs::read_to_string(&path).unwrap();
        for (k, v) in envfile::parse(&text).unwrap() {
            cmd.env(k, v);
        }
    }
    let log = std::fs::File::create(log).unwrap();
    cmd.stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Stops the daemons (by PID) when the test ends, whatever happened.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Replaces (or adds) `NAME=VALUE` settings in a configuration file, as a user editing it does.
fn configure(path: &Path, set: &[(&str, String)]) {
    let mut text = std::fs::read_to_string(path).unwrap();
    for (name, value) in set {
        let mut found = false;
        let lines: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{name}=")) || l.starts_with(&format!("#{name}=")) {
                    found = true;
                    format!("{name}={value}")
                } else {
                    l.to_string()
                }
            })
            .collect();
        assert!(found, "{name} is not in {}", path.display());
        text = lines.join("\n") + "\n";
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_packaged_daemons_started_as_their_units_say_make_a_cluster() {
    if !have_systemd_analyze() {
        eprintln!("skipped: no systemd-analyze");
        return;
    }
    let dpkg = Command::new("dpkg-deb").arg("--version").output();
    if dpkg.is_err() {
        eprintln!("skipped: no dpkg-deb (not Debian)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("debs");
    // The binaries of this build (cargo build --bins, as for every process test).
    let built = std::fs::canonicalize(testkit::bins::path("cumulo-agent")).unwrap();
    let profile = built
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .unwrap()
        .to_string();
    let made = Command::new("bash")
        .arg(repo().join("scripts/package.sh"))
        .args(["--profile", &profile, "--no-build", "--fast", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "package.sh: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let debs: Vec<PathBuf> = String::from_utf8(made.stdout)
        .unwrap()
        .lines()
        .map(PathBuf::from)
        .collect();
    assert_eq!(debs.len(), 4, "{debs:?}");

    // Each package's files, as dpkg would lay them out.
    let root = tmp.path().join("root");
    let mut contents = String::new();
    for deb in &debs {
        let x = Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(&root)
            .status()
            .unwrap();
        assert!(x.success(), "{}", deb.display());
        let listing = Command::new("dpkg-deb")
            .arg("-c")
            .arg(deb)
            .output()
            .unwrap();
        contents.push_str(&String::from_utf8_lossy(&listing.stdout));
        let info = Command::new("dpkg-deb")
            .arg("-I")
            .arg(deb)
            .output()
            .unwrap();
        assert!(info.status.success());
    }
    for want in [
        "./usr/bin/cumulo\n",
        "./usr/bin/cumulo-cert\n",
        "./usr/bin/cumulo-scheduler\n",
        "./usr/bin/cumulo-controller\n",
        "./usr/bin/cumulo-agent\n",
        "./usr/bin/cumulo-cnci\n",
        "./lib/systemd/system/cumulo-scheduler.service\n",
        "./lib/systemd/system/cumulo-controller.service\n",
        "./lib/systemd/system/cumulo-agent.service\n",
        "./etc/cumulo/scheduler.conf\n",
        "./etc/cumulo/controller.conf\n",
        "./etc/cumulo/agent.conf\n",
    ] {
        assert!(contents.contains(want), "no {want:?} in\n{contents}");
    }
    // The configuration files may name secrets: not for every user.
    for line in contents.lines().filter(|l| l.ends_with(".conf")) {
        assert!(line.starts_with("-rw-r----- root/root"), "{line}");
    }

    let units = [
        "cumulo-scheduler.service",
        "cumulo-controller.service",
        "cumulo-agent.service",
    ];
    verify_units(&root, &units);

    // A user's configuration: certificates from the packaged cumulo-cert, free ports on
    // loopback, state under the test's directory, simulated instances.
    let pki = tmp.path().join("pki");
    let certs = Command::new(root.join("usr/bin/cumulo-cert"))
        .args([
            "cluster",
            "--host",
            "localhost",
            "--ip",
            "127.0.0.1",
            "--directory",
        ])
        .arg(&pki)
        .output()
        .unwrap();
    assert!(
        certs.status.success(),
        "{}",
        String::from_utf8_lossy(&certs.stderr)
    );
    let p = |name: &str| pki.join(name).display().to_string();
    let state = |name: &str| tmp.path().join("state").join(name).display().to_string();
    let sched_port = testkit::procfs::free_port();
    let api_port = testkit::procfs::free_port();
    let console_port = testkit::procfs::free_port();
    let sched_at = format!("localhost:{sched_port}");
    let etc = root.join("etc/cumulo");
    configure(
        &etc.join("scheduler.conf"),
        &[
            ("CUMULO_SCHEDULER_CA_CERT", p("ca.pem")),
            ("CUMULO_SCHEDULER_CERT", p("scheduler.pem")),
            ("CUMULO_SCHEDULER_KEY", p("scheduler.key")),
            ("CUMULO_SCHEDULER_STATE_DIR", state("scheduler")),
            ("CUMULO_SCHEDULER_LISTEN", format!("127.0.0.1:{sched_port}")),
            (
                "CUMULO_SCHEDULER_CRL",
                format!("{}/crl.pem", state("controller")),
            ),
        ],
    );
    let password = tmp.path().join("state/controller/admin-password");
    configure(
        &etc.join("controller.conf"),
        &[
            ("CUMULO_CONTROLLER_CA_CERT", p("ca.pem")),
            ("CUMULO_CONTROLLER_CERT", p("controller.pem")),
            ("CUMULO_CONTROLLER_KEY", p("controller.key")),
            ("CUMULO_CONTROLLER_SCHEDULER", sched_at.clone()),
            ("CUMULO_CONTROLLER_STATE_DIR", state("controller")),
            (
                "CUMULO_CONTROLLER_ADMIN_PASSWORD_FILE",
                password.display().to_string(),
            ),
            ("CUMULO_CONTROLLER_LAUNCHER_CA_KEY", p("ca.key")),
            (
                "CUMULO_CONTROLLER_CRL",
                format!("{}/crl.pem", state("controller")),
            ),
            (
                "CUMULO_CONTROLLER_API_LISTEN",
                format!("127.0.0.1:{api_port}"),
            ),
            (
                "CUMULO_CONTROLLER_AGENT_CONSOLE_PORT",
                console_port.to_string(),
            ),
        ],
    );
    configure(
        &etc.join("agent.conf"),
        &[
            ("CUMULO_AGENT_CA_CERT", p("ca.pem")),
            ("CUMULO_AGENT_CERT", p("agent.pem")),
            ("CUMULO_AGENT_KEY", p("agent.key")),
            ("CUMULO_AGENT_SCHEDULER", sched_at),
            ("CUMULO_AGENT_STATE_DIR", state("agent")),
            ("CUMULO_AGENT_NETWORK", "dual".into()),
            ("CUMULO_AGENT_BACKEND", "sim".into()),
            ("CUMULO_AGENT_HOSTNAME", "packaged".into()),
            (
                "CUMULO_AGENT_CONSOLE_LISTEN",
                format!("127.0.0.1:{console_port}"),
            ),
            ("CUMULO_AGENT_DISK_LIMIT", "false".into()),
            ("CUMULO_AGENT_MEM_LIMIT", "false".into()),
        ],
    );
    // The edited files still pass (a unit reads them at start).
    verify_units(&root, &units);

    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut daemons = Daemons(Vec::new());
    for unit in units {
        daemons.0.push(start_as_unit(
            &root,
            unit,
            &logs.join(format!("{unit}.log")),
        ));
    }
    let log_tail = || {
        units
            .iter()
            .map(|u| {
                let text =
                    std::fs::read_to_string(logs.join(format!("{u}.log"))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "--- {u}\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    // The packaged CLI finds the node ready.
    let url = format!("http://127.0.0.1:{api_port}");
    let listed = testkit::try_poll_for(Duration::from_secs(60), || {
        for child in &mut daemons.0 {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("a daemon exited: {status}"));
            }
        }
        let password = std::fs::read_to_string(&password).map_err(|e| e.to_string())?;
        let out = Command::new(root.join("usr/bin/cumulo"))
            .args(["--json", "node", "list"])
            .env("CUMULO_CONTROLLER", &url)
            .env("CUMULO_USERNAME", "admin")
            .env("CUMULO_PASSWORD", password.trim())
            .env("CUMULO_PROJECT", "admin")
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let nodes: serde_json::Value = serde_json::from_str(&text)
            .map_err(|_| format!("cumulo node list: {}", String::from_utf8_lossy(&out.stderr)))?;
        let ready = nodes["nodes"].as_array().is_some_and(|all| {
            all.iter()
                .any(|n| n["hostname"] == "packaged" && n["status"] == "ready")
        });
        if ready {
            Ok(nodes)
        } else {
            Err(format!("nodes: {nodes}"))
        }
    });
    if let Err(seen) = listed {
        panic!(
            "the packaged cluster did not come up: {seen}\n{}",
            log_tail()
        );
    }
}
