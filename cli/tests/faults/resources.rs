//! Slow and broken resources under a running cluster (see the crate's documentation): a
//! SIGSTOPped agent beside healthy ones, a full file system under the controller's store and
//! under an agent's state directory, an agent certificate that expires.

use super::*;

/// Creates one instance at a time, `n` times, each waited for until it is active or `budget`
/// passed (one on a stopped agent stays pending; the budget only ends the measurement).
/// Returns (id, milliseconds from the POST to active, if it went active within the budget).
fn timed_starts(
    cluster: &Cluster,
    tag: &str,
    n: usize,
    budget: Duration,
) -> Vec<(String, Option<f64>)> {
    let mut figures = Vec::new();
    for k in 0..n {
        let start = Instant::now();
        let id = cluster.create(&format!("{tag}-{k}"), 1).unwrap().remove(0);
        let mut took = None;
        while start.elapsed() < budget {
            let i = routes::item(cluster.demo.get(&routes::instance(&id)).unwrap());
            if i["state"] == "active" {
                took = Some(start.elapsed().as_secs_f64() * 1000.0);
                break;
            }
            // Anything but on its way to active is a failure the cluster already knows: say it
            // now, not when the budget ends.
            assert_eq!(i["state"], "pending", "instance {tag}-{k}: {i}");
            std::thread::sleep(Duration::from_millis(5));
        }
        figures.push((id, took));
    }
    figures
}

fn summary(ms: &mut [f64]) -> String {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((ms.len() as f64 - 1.0) * q).round() as usize;
        ms[i]
    };
    format!(
        "n={} p50={:.0} ms p90={:.0} ms max={:.0} ms",
        ms.len(),
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

#[test]
fn stopped_agent_does_not_slow_the_others() {
    if !binaries_or_skip() {
        return;
    }
    let mut cluster = Cluster::up(&Options::default());
    // 21 instances of 1 GiB each on agents that share one file system: a machine with a few GiB
    // free would refuse some (full_cloud), and disk is not what this test is about.
    cluster.use_diskless_workload();
    cluster.add_agent("h2", None, &[]);
    cluster.node_ready("h2");
    let n = 12;
    let budget = Duration::from_secs(3);
    let quiet = timed_starts(&cluster, "quiet", n, Duration::from_secs(60));
    let mut quiet: Vec<f64> = quiet
        .iter()
        .map(|(id, t)| {
            t.unwrap_or_else(|| {
                let i = routes::item(cluster.demo.get(&routes::instance(id)).unwrap());
                panic!("not active 60 s after its POST, with two healthy agents: {i}")
            })
        })
        .collect();

    cluster.add_agent("slow", None, &[]);
    let slow = cluster.node_ready("slow");
    cluster.signal("slow", Signal::STOP);
    let timed = timed_starts(&cluster, "slow", 9, budget);
    cluster.signal("slow", Signal::CONT);
    // Everything placed, on the slow agent too, goes active once it runs again.
    let all: Vec<String> = cluster
        .instances()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    cluster.wait_states(&all, "active", Duration::from_secs(60));
    assert_booted_once(&cluster, &all);
    let on_slow = on_node(&cluster, &all, &slow);
    let mut with_slow = Vec::new();
    let mut over_budget = 0;
    for (id, took) in &timed {
        if on_slow.contains(id) {
            continue;
        }
        // A figure, not a verdict: one over the budget is counted, not failed.
        match took {
            Some(ms) => with_slow.push(*ms),
            None => over_budget += 1,
        }
    }
    assert!(
        !on_slow.is_empty(),
        "placement put nothing on the stopped agent"
    );
    eprintln!(
        "FIGURE slow agent: POST to active on healthy agents, 2 healthy agents: {}",
        summary(&mut quiet)
    );
    eprintln!(
        "FIGURE slow agent: POST to active on healthy agents, plus one SIGSTOPped agent ({} of {} placed on it): {}, {over_budget} over {budget:?}",
        on_slow.len(),
        timed.len(),
        summary(&mut with_slow)
    );
}

/// Fills the file system under `dir` with a file `dir/filler`, until it is full.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    loop {
        if f.write_all(&chunk).is_err() {
            break;
        }
    }
    // What is left of the last block too.
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
    path
}

#[test]
fn disk_full_under_store_and_agent() {
    if !binaries_or_skip() || !root_or_skip("CUMULO_REQUIRE_NETNS", "tmpfs mounts") {
        return;
    }
    let mut cluster = Cluster::up(&Options {
        tmpfs: vec![("controller", 16), ("agent", 16)],
        ..Options::default()
    });
    // The agent's 16 MiB could not hold a 1 GiB disk: placement would refuse (full_cloud)
    // before the agent saw a START. The agent's own failure is what is tested here.
    cluster.use_diskless_workload();
    let before = cluster.create("before", 2).unwrap();
    cluster.wait_states(&before, "active", Duration::from_secs(60));

    // The controller's store.
    let filler = fill(&cluster.root().join("controller"));
    let mut made_while_full = Vec::new();
    let mut refusal = None;
    for k in 0..200 {
        match cluster.create(&format!("full-{k}"), 1) {
            Ok(ids) => made_while_full.extend(ids),
            Err(ClientError::Api { status, message }) => {
                refusal = Some((status, message));
                break;
            }
            Err(e) => panic!("create on a full store: {e}"),
        }
    }
    let (status, message) = refusal.expect("a full store never refused a create");
    assert_eq!(status, 503, "{message}");
    assert!(message.contains("disk is full"), "{message}");
    // Reads still work, nothing is lost.
    let listed = cluster.instances().unwrap();
    for id in &before {
        assert!(listed.iter().any(|i| i["id"] == id.as_str()), "{id} lost");
    }
    assert!(alive(cluster.proc("controller").pid), "the controller died");
    std::fs::remove_file(&filler).unwrap();
    let after = wait_for(
        "a create once space is back",
        Duration::from_secs(30),
        || cluster.create("after", 1).ok(),
    );
    let mut everything: Vec<String> = before.clone();
    everything.extend(made_while_full.iter().cloned());
    everything.extend(after);
    cluster.wait_states(&everything, "active", Duration::from_secs(60));
    let db = cluster.root().join("controller").join("controller.db");
    let conn =
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");

    // The agent's state directory.
    let filler = fill(&cluster.root().join("agent"));
    let failed = cluster.create("agent-full", 2).unwrap();
    cluster.wait_states(&failed, "error", Duration::from_secs(60));
    for id in &failed {
        let shown = routes::item(cluster.demo.get(&routes::instance(id)).unwrap());
        let error = shown["error"].as_str().unwrap_or_default();
        assert!(!error.is_empty(), "{shown}");
    }
    assert!(alive(cluster.proc("agent").pid), "the agent died");
    std::fs::remove_file(&filler).unwrap();
    let again = cluster.create("agent-back", 2).unwrap();
    cluster.wait_states(&again, "active", Duration::from_secs(60));
    everything.extend(again);
    cluster.wait_states(&everything, "active", Duration::from_secs(10));
    assert_booted_once(&cluster, &everything);
    for id in &failed {
        cluster.demo.delete(&routes::instance(id)).unwrap();
    }
    wait_for(
        "the failed instances to go",
        Duration::from_secs(60),
        || {
            let listed = cluster.instances().ok()?;
            (!listed
                .iter()
                .any(|i| failed.iter().any(|f| i["id"] == f.as_str())))
            .then_some(())
        },
    );
    eprintln!(
        "FIGURE disk full: {} creates accepted on the full store before the 503 ({message})",
        made_while_full.len()
    );
}

#[test]
fn expired_agent_certificate_refused_then_renewed() {
    if !binaries_or_skip() {
        return;
    }
    let cluster = Cluster::up(&Options::default());
    let made = SystemTime::now();
    let valid = Duration::from_secs(15);
    let (cert, _key) = cluster.agent_cert("short", &["--not-after", "+15s"]);
    cluster.add_agent("short", None, &[]);
    let node = cluster.node_ready("short");
    let ids = cluster.create("c", 2).unwrap();
    cluster.wait_states(&ids, "active", Duration::from_secs(60));

    // Past its end, the next connect is refused.
    wait_for(
        "the certificate to expire",
        valid + Duration::from_secs(60),
        || (made.elapsed().unwrap_or_default() > valid + Duration::from_secs(1)).then_some(()),
    );
    cluster.kill9("short");
    cluster.restart("short");
    let log = cluster.proc("short").log;
    wait_for(
        "the agent to log the refusal",
        Duration::from_secs(30),
        || {
            let text = std::fs::read_to_string(&log).ok()?;
            text.lines()
                .any(|l| l.contains("cannot connect") && l.to_lowercase().contains("expired"))
                .then_some(())
        },
    );
    let scheduler_log = std::fs::read_to_string(cluster.proc("scheduler").log).unwrap();
    assert!(
        scheduler_log.contains("peer certificate refused"),
        "{scheduler_log}"
    );
    let shown = cluster.node("short").unwrap();
    assert_ne!(shown["status"], "ready", "{shown}");

    // Renewed (same UUID, roles, names), restarted: back as the same node.
    let certs = cluster.root().join("certs");
    let out = std::process::Command::new(harness::bin("cumulo-cert"))
        .arg("renew")
        .arg(&cert)
        .arg("--anchor-cert")
        .arg(certs.join("ca.pem"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    cluster.kill9("short");
    cluster.restart("short");
    assert_eq!(cluster.node_ready("short"), node);
    cluster.wait_states(&ids, "active", Duration::from_secs(60));
    assert_booted_once(&cluster, &ids);
}
