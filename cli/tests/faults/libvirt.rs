//! The libvirt variant of the kill test (`kill9_libvirt_mid_create_and_delete`, see the
//! crate's documentation): real VMs under TCG, two libvirt agents on one libvirtd, the agent
//! killed at chosen points of a create and of a delete, the churn with every process killed,
//! and late STARTs; reality is libvirt's domains and the agents' files.

use super::*;

/// The libvirt URI for the VM variant (`CUMULO_LIBVIRT_URI`, a libvirtd that answers, as
/// root), or `None` after saying why it is skipped; a failure instead when
/// `CUMULO_LIBVIRT_REQUIRED=1` (CI) or `CUMULO_REQUIRE_LIBVIRT=1`.
fn libvirt_or_skip() -> Option<String> {
    if !binaries_or_skip() {
        return None;
    }
    let required = ["CUMULO_LIBVIRT_REQUIRED", "CUMULO_REQUIRE_LIBVIRT"]
        .iter()
        .any(|v| std::env::var(v).as_deref() == Ok("1"));
    let why = match std::env::var("CUMULO_LIBVIRT_URI") {
        Ok(uri) if !uri.is_empty() => {
            if !rustix::process::geteuid().is_root() {
                format!("{uri} for `cumulo up --backend libvirt` needs root")
            } else if uri != "qemu:///system" {
                format!("`cumulo up --backend libvirt` uses qemu:///system, not {uri}")
            } else {
                let answers = std::process::Command::new("virsh")
                    .args(["-c", &uri, "version"])
                    .output()
                    .is_ok_and(|o| o.status.success());
                if answers {
                    return Some(uri);
                }
                format!("no libvirtd answers at {uri}")
            }
        }
        _ => "CUMULO_LIBVIRT_URI is not set (start libvirtd: scripts/libvirt.sh)".to_string(),
    };
    assert!(!required, "CUMULO_LIBVIRT_REQUIRED=1 but {why}");
    eprintln!("SKIPPED: the libvirt fault test: {why}");
    None
}

/// The libvirt churn: four to six VMs alive, one per create.
const VM_SHAPE: Shape = Shape {
    batch: 1,
    low: 4,
    high: 6,
};

/// Compares the API's list with the ledger and with reality for a libvirt cluster: the
/// cluster's domains in libvirt, and the agents' instance directories, records and taps.
fn vms_consistent(cluster: &Cluster, ledger: &Ledger) -> Result<(usize, usize), String> {
    let listed = listed_as_asked(cluster, ledger)?;
    let hosts = cluster.hosts();
    let owners = cluster.domain_owners();
    let domains: HashMap<String, bool> =
        owners.iter().map(|(id, (r, _))| (id.clone(), *r)).collect();
    let files = cluster.vm_files();
    let mut failed = 0;
    for i in &listed {
        let id = i["id"].as_str().unwrap();
        let state = i["state"].as_str().unwrap();
        let error = i["error"].as_str().unwrap_or_default();
        let domain = domains.get(id);
        let held = files.get(id);
        // As for sim: failed to start because of the fault, or lost mid-boot with the agent
        // before anything of it was made (forgotten, exited on no node); nothing of it may be
        // left.
        if state == "error" || (state == "exited" && i["node"].is_null()) {
            if domain.is_some() || held.is_some() {
                return Err(format!(
                    "instance {id} is {state} ({error}) but its domain is {domain:?}, files {held:?}"
                ));
            }
            failed += 1;
            continue;
        }
        // Lost mid-boot with the agent, its domain already made: the restarted agent found it
        // powered off and kept it, stopped, on its node (a `start` boots it there).
        if state == "exited" {
            let host = hosts.get(i["node"].as_str().unwrap_or_default());
            match (domain, held.map(Vec::as_slice)) {
                (Some(false), Some([(h, true, true, _)])) if Some(h) == host => {}
                other => {
                    return Err(format!(
                        "instance {id} is exited on {host:?}; its domain (running) and the agents' (host, directory, record, boots) are {other:?}"
                    ));
                }
            }
            failed += 1;
            continue;
        }
        if state != "active" {
            return Err(format!("instance {id} is {state} {error}"));
        }
        if domain != Some(&true) {
            return Err(format!(
                "instance {id} is active but its domain is {domain:?} (Some(running))"
            ));
        }
        let node = i["node"].as_str().unwrap_or_default();
        let owner = owners.get(id).and_then(|(_, n)| n.as_deref());
        if owner != Some(node) {
            return Err(format!(
                "instance {id} is active on node {node} but its domain names {owner:?} as its owner"
            ));
        }
        let host = hosts.get(node);
        match held.map(Vec::as_slice) {
            Some([(h, true, true, boots)]) if Some(h) == host => {
                assert!(*boots <= 1, "instance {id} was booted {boots} times on {h}");
            }
            other => {
                return Err(format!(
                    "instance {id} is active on {host:?}; the agents hold (host, directory, record, boots) {other:?}"
                ));
            }
        }
    }
    let seen: HashSet<&str> = listed.iter().map(|i| i["id"].as_str().unwrap()).collect();
    for (id, running) in &domains {
        if !seen.contains(id.as_str()) {
            let deleted = ledger.deleted.contains(id) || ledger.unsure_deletes.contains(id);
            return Err(format!(
                "libvirt domain cumulo-{id} (running={running}) is leaked: the API does not list it (deleted through the API: {deleted})"
            ));
        }
    }
    for (id, held) in &files {
        if !seen.contains(id.as_str()) {
            return Err(format!(
                "the agents hold files of {id}, which the API does not list: {held:?}"
            ));
        }
    }
    // Tenant networking makes a tap per instance (`ct-` and 12 hex digits of its UUID): none
    // may outlive its instance.
    let active: HashSet<&str> = listed
        .iter()
        .filter(|i| i["state"] == "active")
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    for id in ledger
        .created
        .keys()
        .map(String::as_str)
        .chain(seen.iter().copied())
    {
        let tap = format!("ct-{}", &id.replace('-', "")[..12]);
        if !active.contains(id) && std::path::Path::new("/sys/class/net").join(&tap).exists() {
            return Err(format!("tap {tap} of instance {id} is leaked"));
        }
    }
    Ok((listed.len(), failed))
}

/// The agent process (its name in the cluster) whose host name is `host`.
fn agent_of(cluster: &Cluster, host: &str) -> String {
    ["agent", "a2"]
        .into_iter()
        .find(|name| cluster.proc(name).flag("--hostname").as_deref() == Some(host))
        .unwrap()
        .to_string()
}

/// Polls `f` every millisecond (a SIGKILL aimed at a short window) until it returns `Some`.
fn poll_fast<T>(what: &str, within: Duration, f: impl FnMut() -> Option<T>) -> T {
    harness::poll_every(Duration::from_millis(1), what, within, f)
}

/// Where the libvirt agent stands with an instance: what libvirt, its instance directory and
/// its record hold, in words.
fn vm_phase(cluster: &Cluster, state: &Path, id: &str) -> String {
    let domain = match cluster.domains().get(id) {
        None => "no domain",
        Some(false) => "domain defined, not running",
        Some(true) => "domain running",
    };
    let files = if state.join("libvirt").join("instances").join(id).is_dir() {
        "files"
    } else {
        "no files"
    };
    let record = match std::fs::read_to_string(state.join("instances").join(format!("{id}.json"))) {
        Ok(text) if text.contains("\"removing\"") => "record: removing",
        Ok(_) => "record: running",
        Err(_) => "no record",
    };
    format!("{domain}, {files}, {record}")
}

/// libvirtd's own marks of a domain (read only): its persistent definition, and the PID file
/// of its running QEMU.
fn libvirt_defined(id: &str) -> bool {
    Path::new("/etc/libvirt/qemu")
        .join(format!("cumulo-{id}.xml"))
        .exists()
}

fn libvirt_running(id: &str) -> bool {
    Path::new("/run/libvirt/qemu")
        .join(format!("cumulo-{id}.pid"))
        .exists()
}

/// The moments of a create at which the agent is killed.
#[derive(Debug, Clone, Copy)]
enum CreatePoint {
    /// Its record is written (nothing made yet).
    Record,
    /// Its instance directory is made (the VM's files are being written).
    Files,
    /// The domain's definition is written (the domain is being defined or started).
    Definition,
    /// QEMU runs (the agent may not have reported it active yet).
    Started,
}

/// The moments of a delete at which the agent is killed.
#[derive(Debug, Clone, Copy)]
enum DeletePoint {
    /// The removal is recorded (the domain is about to be powered off).
    Recorded,
    /// The domain is powered off (about to be undefined).
    PoweredOff,
    /// The domain is undefined (its files are about to be removed).
    Undefined,
}

/// Creates one instance and kills its agent with SIGKILL at `point`, then starts the agent
/// again and waits until everything is consistent. Returns a figure line.
fn kill_agent_mid_create(
    cluster: &Cluster,
    ledger: &Mutex<Ledger>,
    tag: &str,
    point: CreatePoint,
) -> String {
    let id = cluster.create(tag, 1).unwrap().remove(0);
    ledger
        .lock()
        .unwrap()
        .created
        .insert(id.clone(), tag.to_string());
    let dirs = cluster.agent_dirs();
    let (host, state) = poll_fast(
        &format!("an agent to reach {point:?} for {id}"),
        Duration::from_secs(60),
        || {
            dirs.iter().find_map(|(host, state)| {
                let files = state.join("libvirt").join("instances").join(&id);
                let reached = match point {
                    CreatePoint::Record => {
                        state.join("instances").join(format!("{id}.json")).exists()
                    }
                    CreatePoint::Files => files.is_dir(),
                    CreatePoint::Definition => files.join("domain.xml").exists(),
                    CreatePoint::Started => files.is_dir() && libvirt_running(&id),
                };
                reached.then(|| (host.clone(), state.clone()))
            })
        },
    );
    let victim = agent_of(cluster, &host);
    cluster.kill9(&victim);
    let phase = vm_phase(cluster, &state, &id);
    cluster.restart(&victim);
    let n = settle_with(cluster, ledger, Duration::from_secs(90), vms_consistent);
    let shown = routes::item(cluster.demo.get(&routes::instance(&id)).unwrap());
    format!(
        "{tag}: {victim} killed mid-create at {point:?}, then: {phase}; after the restart {} ({}); {} instances listed",
        shown["state"],
        shown["error"].as_str().unwrap_or("no error"),
        n.0
    )
}

/// Deletes an active instance and kills its agent with SIGKILL at `point` of the removal (or
/// as soon as the removal is seen to be over, if it went faster than the poll), then starts
/// it again and waits until everything is consistent. Returns a figure line.
fn kill_agent_mid_delete(
    cluster: &Cluster,
    ledger: &Mutex<Ledger>,
    tag: &str,
    point: DeletePoint,
) -> String {
    let hosts = cluster.hosts();
    let listed = cluster.instances().unwrap();
    let target = listed
        .iter()
        .find(|i| i["state"] == "active" && hosts.contains_key(i["node"].as_str().unwrap_or("")))
        .expect("an active instance to delete");
    let id = target["id"].as_str().unwrap().to_string();
    let host = hosts[target["node"].as_str().unwrap()].clone();
    let victim = agent_of(cluster, &host);
    let state = cluster.agent_dirs()[&host].clone();
    let record = state.join("instances").join(format!("{id}.json"));
    cluster.demo.delete(&routes::instance(&id)).unwrap();
    ledger.lock().unwrap().deleted.insert(id.clone());
    let when = poll_fast(
        &format!("the agent to reach {point:?} removing {id}"),
        Duration::from_secs(60),
        || {
            let Ok(text) = std::fs::read_to_string(&record) else {
                return Some("late: the delete was over");
            };
            let reached = text.contains("\"removing\"")
                && match point {
                    DeletePoint::Recorded => true,
                    DeletePoint::PoweredOff => !libvirt_running(&id),
                    DeletePoint::Undefined => !libvirt_defined(&id),
                };
            reached.then_some("on time")
        },
    );
    cluster.kill9(&victim);
    let phase = vm_phase(cluster, &state, &id);
    cluster.restart(&victim);
    let n = settle_with(cluster, ledger, Duration::from_secs(90), vms_consistent);
    format!(
        "{tag}: {victim} killed mid-delete at {point:?} ({when}), then: {phase}; {} instances listed after the restart",
        n.0
    )
}

/// STARTs that reach their agent only after the controller gave them up (fix 9 in
/// docs/reliability.md): both agents are SIGSTOPped; two instances are created; one is deleted
/// at once (pending, no node: forgotten after the confirmation timeout), the other becomes
/// `error` (`start_lost`) and is deleted then (removed at once). The agents run again, get the
/// STARTs and boot the VMs: the controller must have them deleted, none may be left.
fn late_starts_after_the_records_went(cluster: &Cluster, ledger: &Mutex<Ledger>) -> String {
    let started = Instant::now();
    for agent in ["agent", "a2"] {
        cluster.signal(agent, Signal::STOP);
    }
    let ids = cluster.create("late", 2).unwrap();
    let (forgotten, errored) = (ids[0].clone(), ids[1].clone());
    {
        let mut l = ledger.lock().unwrap();
        for id in &ids {
            l.created.insert(id.clone(), "late".to_string());
        }
    }
    cluster.demo.delete(&routes::instance(&forgotten)).unwrap();
    ledger.lock().unwrap().deleted.insert(forgotten.clone());
    cluster.wait_states(
        std::slice::from_ref(&errored),
        "error",
        Duration::from_secs(60),
    );
    wait_for(
        "the deleted pending instance to be forgotten",
        Duration::from_secs(60),
        || {
            let listed = cluster.instances().ok()?;
            (!listed.iter().any(|i| i["id"] == forgotten.as_str())).then_some(())
        },
    );
    cluster.demo.delete(&routes::instance(&errored)).unwrap();
    ledger.lock().unwrap().deleted.insert(errored.clone());
    let gave_up = started.elapsed();
    for agent in ["agent", "a2"] {
        cluster.signal(agent, Signal::CONT);
    }
    // The VMs come (the agents take the STARTs they were sent) and must go again.
    let n = settle_with(cluster, ledger, Duration::from_secs(90), vms_consistent);
    let log = std::fs::read_to_string(cluster.proc("controller").log).unwrap();
    let redeleted: Vec<&String> = ids
        .iter()
        .filter(|id| {
            log.lines().any(|l| {
                l.contains(id.as_str()) && l.contains("deleted before any node reported it")
            })
        })
        .collect();
    // Both STARTs were delivered: both VMs were booted, reported, and deleted on the
    // controller's DELETE.
    assert_eq!(
        redeleted.len(),
        2,
        "the late VMs were not deleted by the controller"
    );
    format!(
        "late STARTs: both records gone {:.1} s after the create (agents stopped), no VM left {:.1} s after the agents ran again ({} of 2 booted late and deleted on the controller's DELETE); {} instances listed",
        gave_up.as_secs_f64(),
        started.elapsed().as_secs_f64() - gave_up.as_secs_f64(),
        redeleted.len(),
        n.0
    )
}

#[test]
fn kill9_libvirt_mid_create_and_delete() {
    let Some(uri) = libvirt_or_skip() else {
        return;
    };
    let began = Instant::now();
    let rounds: usize = std::env::var("CUMULO_FAULTS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let cluster = Cluster::up(&Options {
        env: vec![("CUMULO_CONTROLLER_CONFIRM_TIMEOUT".into(), "10s".into())],
        libvirt: Some(uri),
        ..Options::default()
    });
    // The second agent boots the same tiny guest: `up` put it in the first agent's store.
    let images = cluster.root().join("agent").join("images");
    cluster.add_agent("a2", None, &["--image-dir", images.to_str().unwrap()]);
    cluster.node_ready("a2");
    let up_took = began.elapsed();
    let ledger = Mutex::new(Ledger::default());
    let first = cluster.create("seed", 4).unwrap();
    ledger
        .lock()
        .unwrap()
        .created
        .extend(first.iter().map(|id| (id.clone(), "seed".to_string())));
    settle_with(&cluster, &ledger, Duration::from_secs(90), vms_consistent);
    let mut figures = vec![format!(
        "cluster up with two libvirt agents in {:.1} s, 4 VMs active after {:.1} s",
        up_took.as_secs_f64(),
        began.elapsed().as_secs_f64()
    )];
    let mut figure = |f: String| {
        eprintln!("FIGURE kill9 libvirt {f}");
        figures.push(f);
    };
    // `CUMULO_FAULTS_LIBVIRT_CHURN=0` leaves out the kills amid churn (a shorter run by hand).
    let churn = std::env::var("CUMULO_FAULTS_LIBVIRT_CHURN").map_or(true, |v| v != "0");
    for round in 0..rounds {
        for point in [
            CreatePoint::Record,
            CreatePoint::Files,
            CreatePoint::Definition,
            CreatePoint::Started,
        ] {
            let at = Instant::now();
            let tag = format!("r{round}-create-{point:?}");
            let f = kill_agent_mid_create(&cluster, &ledger, &tag, point);
            figure(format!("{f} ({:.1} s)", at.elapsed().as_secs_f64()));
        }
        for point in [
            DeletePoint::Recorded,
            DeletePoint::PoweredOff,
            DeletePoint::Undefined,
        ] {
            let at = Instant::now();
            let tag = format!("r{round}-delete-{point:?}");
            let f = kill_agent_mid_delete(&cluster, &ledger, &tag, point);
            figure(format!("{f} ({:.1} s)", at.elapsed().as_secs_f64()));
        }
        if !churn {
            eprintln!("r{round}: the kills amid churn skipped (CUMULO_FAULTS_LIBVIRT_CHURN=0)");
            continue;
        }
        for victim in ["scheduler", "agent", "controller", "a2"] {
            let tag = format!("r{round}-churn-{victim}");
            figure(kill_amid_churn(
                &cluster,
                &ledger,
                &tag,
                victim,
                VM_SHAPE,
                vms_consistent,
            ));
        }
    }
    figure(late_starts_after_the_records_went(&cluster, &ledger));
    // What the faults left exited (lost mid-create) or in error boots on a `start`, once.
    let stopped: Vec<String> = cluster
        .instances()
        .unwrap()
        .iter()
        .filter(|i| i["state"] == "exited" || i["state"] == "error")
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    let at = Instant::now();
    for id in &stopped {
        cluster
            .demo
            .post(
                &routes::instance_action(id, "start"),
                &serde_json::json!({}),
            )
            .unwrap();
    }
    cluster.wait_states(&stopped, "active", Duration::from_secs(90));
    let n = settle_with(&cluster, &ledger, Duration::from_secs(60), vms_consistent);
    assert_eq!(
        n.1, 0,
        "instances still exited or in error after their start"
    );
    figure(format!(
        "{} instances exited or in error after the faults, all active on a start within {:.1} s",
        stopped.len(),
        at.elapsed().as_secs_f64()
    ));
    let domains = cluster.domains();
    let (created, deleted) = {
        let l = ledger.lock().unwrap();
        (l.created.len(), l.deleted.len())
    };
    figure(format!(
        "{created} instances created, {deleted} deleted through the API, {} domains at the end, {:.1} s in all",
        domains.len(),
        began.elapsed().as_secs_f64()
    ));
    eprintln!("all figures:");
    for f in &figures {
        eprintln!("FIGURE kill9 libvirt {f}");
    }
}
