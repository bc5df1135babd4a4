//! A second node that never had an image fetches it itself, and its snapshot boots there.

use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};

use rustix::process::{Pid, Signal, kill_process};

use super::*;

/// Whether `pid` is a live process (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn signal(pid: i32, sig: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = kill_process(p, sig);
    }
}

/// The NUL-separated strings of a /proc file (a command line, an environment).
fn proc_strings(pid: i32, file: &str) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/{file}"))
        .unwrap()
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// The value of `--flag` on a command line (the last one).
fn flag(argv: &[String], flag: &str) -> Option<String> {
    argv.windows(2)
        .rev()
        .find(|w| w[0] == flag)
        .map(|w| w[1].clone())
}

/// Stops `up`'s agent gracefully (SIGTERM by its PID; its VMs keep running) and waits until it
/// is gone; its command line and environment, read before, to start another like it.
fn stop_first_agent(up: &Up) -> (Vec<String>, Vec<String>) {
    let pid = up.agent_pid();
    let argv = proc_strings(pid, "cmdline");
    assert!(
        argv[0].ends_with("cumulo-agent"),
        "run/agent.pid names {pid}, which runs {argv:?}"
    );
    let env = proc_strings(pid, "environ");
    signal(pid, Signal::TERM);
    testkit::poll_for(Duration::from_secs(30), || match alive(pid) {
        false => Ok(()),
        true => Err(format!("the agent (pid {pid}) still runs after SIGTERM")),
    });
    (argv, env)
}

/// A second agent the test started on this host, like `up`'s (`argv`, `env`) but for its own
/// certificate (role agent, bound to a fresh node UUID), host name and state directory, with
/// its log in the cluster's `logs/`. Stopped by its PID when dropped, before the cluster's
/// `down` (which knows only `up`'s services).
struct Agent {
    child: Child,
    /// Its state directory: image cache, instance files.
    state: PathBuf,
    log: PathBuf,
}

impl Agent {
    fn start(up: &Up, name: &str, argv: &[String], env: &[String]) -> Agent {
        let certs = up.dir.join("certs");
        let out = Command::new(bin("cumulo-cert"))
            .args(["--role", "agent", "--host", name, "--anchor-cert"])
            .arg(certs.join("ca.pem"))
            .arg("--directory")
            .arg(&certs)
            .args(["--out", name])
            .output()
            .unwrap();
        assert!(out.status.success(), "cumulo-cert: {}", text(&out));
        let state = up.dir.join(name);
        let log_path = up.dir.join("logs").join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        // Later flags win.
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .arg("--cert")
            .arg(certs.join(format!("{name}.pem")))
            .arg("--key")
            .arg(certs.join(format!("{name}.key")))
            .arg("--state-dir")
            .arg(&state)
            .args(["--hostname", name, "--network", "cn"])
            .env_clear()
            .envs(env.iter().filter_map(|kv| kv.split_once('=')))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        Agent {
            child,
            state,
            log: log_path,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its log's lines that have all of `words`.
    fn lines_with(&self, words: &[&str]) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| words.iter().all(|w| l.contains(w)))
            .map(str::to_string)
            .collect()
    }

    fn instance_dir(&self, id: &str) -> PathBuf {
        self.state.join("libvirt/instances").join(id)
    }

    fn wait_console(&self, id: &str, line: &str) {
        wait_console_line(&self.instance_dir(id).join("console.log"), line);
    }

    /// Stops it: SIGTERM by its PID, SIGKILL if it has not ended 30 s later; reaped.
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let pid = i32::try_from(self.child.id()).unwrap();
        signal(pid, Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_tail(&self.log, 60);
        }
        self.stop();
        // What a failed test left of its VMs (`down` knows only the first agent's): their
        // domains go before `down --purge` removes their files.
        let Ok(instances) = std::fs::read_dir(self.state.join("libvirt/instances")) else {
            return;
        };
        for dir in instances.flatten() {
            let domain = format!("cumulo-{}", dir.file_name().to_string_lossy());
            for verb in ["destroy", "undefine"] {
                let _ = Command::new("virsh")
                    .args(["-c", "qemu:///system", verb, &domain])
                    .output();
            }
        }
    }
}

/// The cluster's binary `name` (cargo puts them beside `cumulo`).
fn bin(name: &str) -> PathBuf {
    Path::new(CUMULO).parent().unwrap().join(name)
}

/// The figure after `took=` on a log line.
fn took(line: &str) -> &str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("took="))
        .unwrap_or("?")
}

#[test]
fn an_uploaded_image_boots_on_a_second_node_that_fetches_it_and_snapshots_there() {
    let Some(disk) = common::tiny_disk_or_skip() else {
        return;
    };
    if !common::binaries_or_skip(&["cumulo-cert"]) {
        return;
    }
    let Some(up) = Up::start_or_skip("an image on two nodes with real VMs") else {
        return;
    };
    let disk = disk.to_str().unwrap();
    let (image_id, hash) = up.upload(disk, "qcow2", "tiny-disk", &[]);
    const UP: &str = "CUMULO-GUEST-UP 00000000-0000-4000-8000-00000000d15c";
    const BOOT_1: &str = "CUMULO-DISK-WROTE 00000000-0000-4000-8000-00000000d15c 1";
    const BOOT_2: &str = "CUMULO-DISK-WROTE 00000000-0000-4000-8000-00000000d15c 2";

    // Node A, `up`'s (the only node): fetches the image from the controller and boots it.
    let server = up.json(&[
        "server", "create", "--flavor", "tiny", "--image", &image_id, "--wait", "on-a",
    ]);
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let on_a = server["id"].as_str().unwrap().to_string();
    up.wait_console(&on_a, UP);
    up.wait_console(&on_a, BOOT_1);
    let node_a = up.admin_json(&["server", "show", &on_a])["OS-EXT-SRV-ATTR:host"]
        .as_str()
        .unwrap()
        .to_string();
    let a_data = up.dir.join("agent/images/sha512").join(&hash);
    assert_eq!(
        std::fs::read(&a_data).unwrap(),
        std::fs::read(disk).unwrap()
    );
    let a_log = std::fs::read_to_string(up.dir.join("logs/agent.log")).unwrap();
    let a_fetches = a_log
        .lines()
        .filter(|l| l.contains("image data fetched"))
        .count();
    assert_eq!(a_fetches, 1, "node A's log:\n{a_log}");
    // Gone from A (files, and the record its confirmation drops) before A goes: a record left
    // on a node that is away would keep the image in use.
    up.ok(&["server", "delete", "--wait", &on_a]);
    testkit::poll_for(Duration::from_secs(60), || {
        match up.instance_dir(&on_a).exists() {
            false => Ok(()),
            true => Err("a delete removes the files".to_string()),
        }
    });
    up.wait_record_gone(&on_a);

    // A stops (the controller reaches every node's endpoint on one port, which B takes); B
    // starts on this host with an empty image cache.
    let (argv, env) = stop_first_agent(&up);
    let mut node_b = Agent::start(&up, "node-b", &argv, &env);
    let listen = flag(&argv, "--console-listen").unwrap();
    testkit::poll_for(Duration::from_secs(60), || {
        match node_b
            .lines_with(&["console endpoint listening", &listen])
            .len()
        {
            1 => Ok(()),
            _ => Err(format!("node-b's endpoint is not up:\n{}", node_b.log())),
        }
    });
    // Ready once its STATS reached the controller (after its READY, on the same session: the
    // scheduler places on it).
    let node_b_id = testkit::poll_for(Duration::from_secs(60), || {
        let list = up.admin_json(&["hypervisor", "list", "--long"]);
        let b = list
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["Hypervisor Hostname"] == "node-b")
            .cloned();
        match b {
            Some(b) if b["State"] == "up" && b["vCPUs"] == 32 => {
                Ok(b["ID"].as_str().unwrap().to_string())
            }
            _ => Err(format!("node-b is not ready: {list}")),
        }
    });
    assert_ne!(node_b_id, node_a);
    let b_cache = node_b.state.join("images/sha512");
    assert!(!b_cache.join(&hash).exists(), "B never had the image");

    // B fetches the image itself and boots it.
    let started = Instant::now();
    let server = up.json(&[
        "server", "create", "--flavor", "tiny", "--image", &image_id, "--wait", "on-b",
    ]);
    let active = started.elapsed();
    assert_eq!(server["status"], "ACTIVE", "{server}");
    let on_b = server["id"].as_str().unwrap().to_string();
    let shown = up.admin_json(&["server", "show", &on_b]);
    assert_eq!(shown["OS-EXT-SRV-ATTR:host"], node_b_id.as_str(), "{shown}");
    node_b.wait_console(&on_b, UP);
    node_b.wait_console(&on_b, BOOT_1);
    let guest_up = started.elapsed();
    assert_eq!(
        std::fs::read(b_cache.join(&hash)).unwrap(),
        std::fs::read(disk).unwrap(),
        "B keeps the data it was sent"
    );
    let fetched = node_b.lines_with(&["image data fetched"]);
    assert_eq!(fetched.len(), 1, "node-b's log:\n{}", node_b.log());
    assert!(fetched[0].contains(&hash[..16]), "{}", fetched[0]);
    let launched = node_b.lines_with(&["launched", &on_b]);
    assert_eq!(launched.len(), 1, "node-b's log:\n{}", node_b.log());
    println!(
        "FIGURES: node-b without the image: START -> running {} (the fetch {}); server create \
         -> ACTIVE {} ms, guest up {} ms",
        took(&launched[0]),
        took(&fetched[0]),
        active.as_millis(),
        guest_up.as_millis()
    );
    println!("{}\n{}", fetched[0], launched[0]);

    // A snapshot of the server on B: the controller copies its disk from B's endpoint; a
    // server booted from it lands on B, which fetches the snapshot, and its guest counts boot 2.
    let started = Instant::now();
    let snap = up.json(&[
        "server", "image", "create", "--name", "snap-b", "--wait", &on_b,
    ]);
    let snapshot = started.elapsed();
    let snap_id = snap["id"].as_str().unwrap().to_string();
    let shown = up.json(&["image", "show", &snap_id]);
    assert_eq!(shown["status"], "active", "{shown}");
    let snap_hash = shown["properties"]["os_hash_value"]
        .as_str()
        .unwrap()
        .to_string();
    up.wait_status(&on_b, "ACTIVE");
    let server = up.json(&[
        "server",
        "create",
        "--flavor",
        "tiny",
        "--image",
        &snap_id,
        "--wait",
        "from-snap-b",
    ]);
    let from_snap = server["id"].as_str().unwrap().to_string();
    let shown = up.admin_json(&["server", "show", &from_snap]);
    assert_eq!(shown["OS-EXT-SRV-ATTR:host"], node_b_id.as_str(), "{shown}");
    node_b.wait_console(&from_snap, BOOT_2);
    assert!(b_cache.join(&snap_hash).is_file(), "B fetched the snapshot");
    let fetched = node_b.lines_with(&["image data fetched"]);
    assert_eq!(fetched.len(), 2, "node-b's log:\n{}", node_b.log());
    assert!(fetched[1].contains(&snap_hash[..16]), "{}", fetched[1]);
    let launched = node_b.lines_with(&["launched", &from_snap]);
    assert_eq!(launched.len(), 1, "node-b's log:\n{}", node_b.log());
    println!(
        "FIGURES: server image create --wait {} ms; from the snapshot on node-b: START -> \
         running {} (the fetch {})",
        snapshot.as_millis(),
        took(&launched[0]),
        took(&fetched[1])
    );
    println!("{}\n{}", fetched[1], launched[0]);

    // The servers go (B removes their files and domains), then the images.
    let on_b_servers = [on_b, from_snap];
    for id in &on_b_servers {
        up.ok(&["server", "delete", "--wait", id]);
    }
    for id in &on_b_servers {
        testkit::poll_for(Duration::from_secs(60), || {
            match node_b.instance_dir(id).exists() {
                false => Ok(()),
                true => Err(format!("node-b still has {id}'s files")),
            }
        });
        up.wait_record_gone(id);
    }
    up.delete_images(&[&image_id, &snap_id]);
    node_b.stop();
    let out = Command::new("virsh")
        .args(["-c", "qemu:///system", "list", "--all", "--name"])
        .output()
        .unwrap();
    let domains = String::from_utf8_lossy(&out.stdout);
    for id in on_b_servers.iter().chain([&on_a]) {
        assert!(
            !domains.contains(id.as_str()),
            "domain of {id} left:\n{domains}"
        );
    }
}
