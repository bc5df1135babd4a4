//! The whole control plane under load: the real `cumulo-scheduler` and `cumulo-controller`
//! binaries (SQLite store, plain HTTP API on loopback), a child process of simulated agents
//! (in-process SSNTP clients that READY with room for everything, answer each START by running
//! the instance and report their instances, active, in STATS every `--stats-interval` seconds,
//! default 10, also the scheduler's setting, and after a change as an agent reports one: at
//! once, or 50 ms after its last report), instances created
//! through the native REST API (`POST /cumulo/v1/instances`, 1,000 per request), then a steady
//! state held for a while, sampled every `--sample` seconds:
//!
//! - CPU (share of one core) and RSS of the scheduler and the controller;
//! - frames/s in and out of the scheduler (its `/metrics`);
//! - p50/p99 of API `GET`s (a page of 100 instances at a random place, one instance) issued
//!   by a client thread all along.
//!
//! At the end: the API lists exactly the instances created, all `active`; the agents hold the
//! same number; RSS growth from the sample nearest two minutes into the steady state to the end.
//!
//! ```text
//! cargo bench -p controller --bench load -- --agents 10000 --instances 100000 --seconds 600
//! cargo bench -p controller --bench load -- --agents 500 --instances 5000 --seconds 60
//! cargo bench -p controller --bench load -- --agents 10000 --instances 100000 --seconds 0 \
//!     --api compute --store etcd
//! ```
//!
//! `--api compute` creates through the Compute API (`POST /compute/v2.1/servers`, `max_count`
//! 1,000) and probes `servers/detail` pages; `--store etcd` gives the controller an etcd of its
//! own (started here) instead of SQLite. The GETs also run while the instances are created; their
//! p50/p99 in that phase and the rate against issue 26's goal (100,000 active in 60 s) are
//! printed. `--pace agents` keeps one POST in flight beyond what the agents run, not beyond what
//! the controller counts active: an overload of the controller's frame loop when it is slower
//! than the agents (over etcd). An instance in `error` ends any run at once.
//!
//! Figures: docs/benchmarks.md and docs/reliability.md (## Load). Exit status 1 if anything was
//! lost or a daemon died; the daemons' logs are then kept (and always with `LOAD_KEEP_LOGS` set).
// A bench binary prints its figures and fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::procfs::{cpu_ticks, free_port, rss_mib};

use serde_json::{Value, json};
use ssntp::{Role, Uuid};
use testkit::TestPki;

#[path = "load/agents.rs"]
mod agents;
use agents::agents;

const SCHED: Uuid = Uuid::from_bytes([0x5c; 16]);

struct Opts {
    agents: usize,
    instances: usize,
    seconds: u64,
    sample: u64,
    stats: u64,
    /// Create through the Compute API (`POST /v2.1/servers`, `max_count` 1,000) instead of the
    /// native one.
    compute: bool,
    /// The store: SQLite (the default) or an etcd started here.
    etcd: bool,
    /// Pace the POSTs on what the simulated agents run instead of what the controller counts
    /// active: the controller may then fall behind the nodes' reports (an overload test).
    pace_agents: bool,
}

fn parse_opts(args: &[String]) -> Opts {
    let mut o = Opts {
        agents: 10_000,
        instances: 100_000,
        seconds: 600,
        sample: 10,
        stats: 10,
        compute: false,
        etcd: false,
        pace_agents: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        // `--api compute|native` and `--store etcd|sqlite`: whether the first is chosen.
        let mut choice = |yes: &str, no: &str| match it.next().map(String::as_str) {
            Some(v) if v == yes => true,
            Some(v) if v == no => false,
            _ => panic!("{a} wants {yes} or {no}"),
        };
        match a.as_str() {
            "--api" => o.compute = choice("compute", "native"),
            "--store" => o.etcd = choice("etcd", "sqlite"),
            "--pace" => o.pace_agents = choice("agents", "controller"),
            _ => {
                let v = it.next().and_then(|v| v.parse::<u64>().ok());
                let v = || v.unwrap_or_else(|| panic!("{a} wants a number"));
                match a.as_str() {
                    "--agents" => o.agents = v() as usize,
                    "--instances" => o.instances = v() as usize,
                    "--seconds" => o.seconds = v(),
                    "--sample" => o.sample = v().max(1),
                    "--stats-interval" => o.stats = v().max(1),
                    other => panic!("unknown argument {other}"),
                }
            }
        }
    }
    o
}

struct Daemon {
    child: Child,
    name: &'static str,
}

impl Daemon {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

struct Api {
    url: String,
    token: String,
    agent: ureq::Agent,
}

impl Api {
    fn get(&self, path: &str) -> (u16, Value) {
        let mut r = self
            .agent
            .get(&format!("{}{path}", self.url))
            .header("X-Auth-Token", &self.token)
            .call()
            .unwrap();
        let status = r.status().as_u16();
        let body = r.body_mut().read_json::<Value>().unwrap_or(Value::Null);
        (status, body)
    }

    fn send(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let req = match method {
            "PUT" => self.agent.put(&url),
            _ => self.agent.post(&url),
        };
        let mut r = req
            .header("X-Auth-Token", &self.token)
            .send_json(body)
            .unwrap();
        let status = r.status().as_u16();
        let body = r.body_mut().read_json::<Value>().unwrap_or(Value::Null);
        (status, body)
    }
}

fn metric_sum(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name))
        .filter(|l| {
            let rest = &l[name.len()..];
            rest.starts_with(' ') || rest.starts_with('{')
        })
        .filter(|l| label.is_none_or(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

fn scrape(agent: &ureq::Agent, url: &str) -> String {
    scrape_as(agent, url, None)
}

/// As [`scrape`], with `token` in `X-Auth-Token` when given.
fn scrape_as(agent: &ureq::Agent, url: &str, token: Option<&str>) -> String {
    let mut request = agent.get(url);
    if let Some(token) = token {
        request = request.header("X-Auth-Token", token);
    }
    request
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn wait_for(what: &str, deadline: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// When to count the active instances again, from how far the count is from what is awaited
/// (`deficit`): half the time that takes at the rate the counts have shown (at least 100/s
/// assumed), between 50 ms and 1 s. Each count is a scrape of the controller's `/metrics`, which
/// counts every instance by state: over etcd 3.4 a walk of every instance's state key in etcd.
/// Scraped every 100 ms, as until 2026-12-06, the count was about a quarter of etcd's CPU at
/// 100,000 instances (a profile of etcd mid-run), a load of the bench's own that no deployment
/// (a Prometheus scrape every 15 s or so) puts on it.
struct Pace {
    /// The last count and when it was read.
    last: Option<(Instant, usize)>,
    /// Instances that became active per second over the last interval in which the count
    /// rose.
    rate: f64,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            last: None,
            rate: 100.0,
        }
    }

    /// The pause before the next count, given this one (`active`) and the `deficit` left.
    fn after(&mut self, active: usize, deficit: usize) -> Duration {
        let now = Instant::now();
        match self.last {
            // A count below the last (a scrape that failed reads 0): not a count to go by.
            Some((_, before)) if active < before => {}
            Some((then, before)) => {
                let secs = now.duration_since(then).as_secs_f64();
                if active > before && secs > 0.0 {
                    self.rate = (active - before) as f64 / secs;
                }
                self.last = Some((now, active));
            }
            None => self.last = Some((now, active)),
        }
        let secs = deficit as f64 / self.rate.max(100.0) / 2.0;
        Duration::from_secs_f64(secs.clamp(0.05, 1.0))
    }
}

fn bin(name: &str) -> PathBuf {
    // target/debug/cumulo-controller is this package's; the scheduler's binary sits beside it.
    Path::new(env!("CARGO_BIN_EXE_cumulo-controller"))
        .parent()
        .unwrap()
        .join(name)
}

#[derive(Clone, Copy)]
struct Row {
    t: f64,
    sched_cpu: f64,
    sched_rss: f64,
    ctl_cpu: f64,
    ctl_rss: f64,
    frames_in: f64,
    frames_out: f64,
    gets: usize,
    p50: f64,
    p99: f64,
}

fn run(o: &Opts) -> bool {
    let dir = std::env::temp_dir().join(format!("cumulo-load-{}", std::process::id()));
    // A run that failed keeps its directory (for its logs); a later process given the same PID
    // must not start from that run's store.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki = TestPki::new();
    pki.leaf(Role::SCHEDULER, Some(SCHED))
        .write(&dir, "scheduler");
    pki.leaf(Role::CONTROLLER, None).write(&dir, "controller");
    pki.leaf(Role::AGENT, None).write(&dir, "agent");
    std::fs::write(dir.join("admin-password"), "load-bench-password\n").unwrap();
    let (sport, mport, aport) = (free_port(), free_port(), free_port());
    let log = |name: &str| std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();

    let mut sched = Daemon {
        name: "scheduler",
        child: Command::new(bin("cumulo-scheduler"))
            .args(["--ca-cert", &p("ca.pem"), "--cert", &p("scheduler.pem")])
            .args(["--key", &p("scheduler.key")])
            .args(["--listen", &format!("127.0.0.1:{sport}")])
            .args(["--metrics-listen", &format!("127.0.0.1:{mport}")])
            .args(["--stats-interval", &format!("{}s", o.stats)])
            .env("RUST_LOG", "warn")
            .stdout(log("scheduler"))
            .stderr(log("scheduler"))
            .spawn()
            .unwrap(),
    };
    std::fs::create_dir_all(dir.join("controller-state")).unwrap();
    // The etcd store: an etcd of its own, reached over TLS as its root user.
    let etcd = o
        .etcd
        .then(|| testkit::etcd::EtcdServer::start().expect("start etcd (etcd-server)"));
    let mut store_args: Vec<std::ffi::OsString> = Vec::new();
    if let Some(etcd) = &etcd {
        store_args.push("--store".into());
        store_args.push(format!("etcd://{}/load-{}/", etcd.endpoint(), std::process::id()).into());
        store_args.extend(etcd.client_args(testkit::etcd::ROOT));
    }
    let mut ctl = Daemon {
        name: "controller",
        child: Command::new(env!("CARGO_BIN_EXE_cumulo-controller"))
            .args(["--ca-cert", &p("ca.pem"), "--cert", &p("controller.pem")])
            .args(["--key", &p("controller.key")])
            .args(["--scheduler", &format!("localhost:{sport}")])
            .args(["--state-dir", &p("controller-state")])
            .args(&store_args)
            .args(["--api-listen", &format!("127.0.0.1:{aport}")])
            .args(["--admin-password-file", &p("admin-password")])
            .env("RUST_LOG", "warn")
            .stdout(log("controller"))
            .stderr(log("controller"))
            .spawn()
            .unwrap(),
    };
    let url = format!("http://127.0.0.1:{aport}");
    let metrics_url = format!("http://127.0.0.1:{mport}/metrics");
    let agent = http();
    wait_for(
        "the controller's API and its scheduler",
        Duration::from_secs(60),
        || {
            agent
                .get(&format!("{url}/cumulo/v1/healthz"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_json::<Value>().ok())
                .is_some_and(|v| {
                    v["scheduler"] == "connected"
                        || v["scheduler"] == "ok"
                        || v["scheduler"] == true
                })
        },
    );

    // The simulated agents.
    let t = Instant::now();
    let mut agents = Daemon {
        name: "agents",
        child: Command::new(std::env::current_exe().unwrap())
            .args(["agents", &dir.to_string_lossy(), &sport.to_string()])
            .arg(o.agents.to_string())
            .arg(o.stats.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    };
    let agent_count = Arc::new(AtomicU64::new(0));
    let agent_connected = Arc::new(AtomicU64::new(0));
    let agent_drops = Arc::new(AtomicU64::new(0));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    {
        let out = agents.child.stdout.take().unwrap();
        let (count, connected, drops) = (
            agent_count.clone(),
            agent_connected.clone(),
            agent_drops.clone(),
        );
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if line == "ready" {
                    let _ = ready_tx.send(());
                }
                let w: Vec<&str> = line.split_whitespace().collect();
                if let ["instances", n, "connected", c, "drops", d] = w[..] {
                    count.store(n.parse().unwrap_or(0), Ordering::Relaxed);
                    connected.store(c.parse().unwrap_or(0), Ordering::Relaxed);
                    drops.store(d.parse().unwrap_or(0), Ordering::Relaxed);
                }
            }
        });
    }
    ready_rx.recv_timeout(Duration::from_secs(600)).unwrap();
    let connect_time = t.elapsed();
    println!(
        "load: {} agents connected and READY in {connect_time:.1?}",
        o.agents
    );

    // Admin login, a flavor, an image and a workload; no quota on the admin project.
    let body = json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"name": "Default"}, "password": "load-bench-password"}}},
        "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}});
    let r = agent
        .post(&format!("{url}/v3/auth/tokens"))
        .send_json(&body)
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let token = r.headers()["x-subject-token"].to_str().unwrap().to_string();
    let api = Api {
        url: url.clone(),
        token,
        agent: agent.clone(),
    };
    let (s, projects) = api.get("/cumulo/v1/tenants");
    assert_eq!(s, 200, "{projects}");
    let tenant = projects["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "admin")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, v) = api.send(
        "PUT",
        &format!("/cumulo/v1/tenants/{tenant}/quota"),
        &json!({"instances": null, "vcpus": null, "memory_mb": null}),
    );
    assert_eq!(s, 200, "quota: {v}");
    let (s, flavor) = api.send(
        "POST",
        "/cumulo/v1/flavors",
        &json!({"name": "load", "vcpus": 1, "memory_mb": 64, "disk_gb": 0}),
    );
    assert_eq!(s, 201, "flavor: {flavor}");
    let (s, image) = api.send(
        "POST",
        "/cumulo/v1/images",
        &json!({"name": "load", "kind": "raw", "reference": "load", "public": true}),
    );
    assert_eq!(s, 201, "image: {image}");
    let (s, workload) = api.send(
        "POST",
        "/cumulo/v1/workloads",
        &json!({"name": "load", "flavor": flavor["id"], "image": image["id"], "public": true}),
    );
    assert_eq!(s, 201, "workload: {workload}");

    // API GETs all along, from a client thread of their own: a page of 100 instances after a
    // random one (the Compute API's `servers/detail` with `--api compute`) and one instance, in
    // turn, every 100 ms. Their latencies go to `pages` and `ones`; the main thread takes them
    // per phase.
    let stop = Arc::new(AtomicBool::new(false));
    let pages: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let ones: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let errors = Arc::new(AtomicU64::new(0));
    let prober = {
        let (stop, pages, ones, errors) =
            (stop.clone(), pages.clone(), ones.clone(), errors.clone());
        let compute = o.compute;
        let api = Api {
            url: url.clone(),
            token: api.token.clone(),
            agent: http(),
        };
        std::thread::spawn(move || {
            // Instance ids known so far, extended by a page of 1,000 every 20 probes (not timed).
            let mut ids: Vec<String> = Vec::new();
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if k.is_multiple_of(20) {
                    let path = match ids.last() {
                        Some(m) => format!("/cumulo/v1/instances?limit=1000&marker={m}"),
                        None => "/cumulo/v1/instances?limit=1000".to_string(),
                    };
                    let (s, v) = api.get(&path);
                    if s == 200 {
                        ids.extend(
                            v["instances"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(|i| i["id"].as_str().map(str::to_string)),
                        );
                    }
                }
                let id = (!ids.is_empty()).then(|| ids[(k * 7919) % ids.len()].clone());
                let one = k.is_multiple_of(2) && id.is_some();
                let path = match (one, compute, &id) {
                    (true, false, Some(id)) => format!("/cumulo/v1/instances/{id}"),
                    (true, true, Some(id)) => format!("/compute/v2.1/servers/{id}"),
                    (_, false, Some(id)) => format!("/cumulo/v1/instances?limit=100&marker={id}"),
                    (_, true, Some(id)) => {
                        format!("/compute/v2.1/servers/detail?limit=100&marker={id}")
                    }
                    (_, false, None) => "/cumulo/v1/instances?limit=100".to_string(),
                    (_, true, None) => "/compute/v2.1/servers/detail?limit=100".to_string(),
                };
                let t = Instant::now();
                let (s, _) = api.get(&path);
                let d = t.elapsed();
                if s != 200 {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                if one { &ones } else { &pages }.lock().unwrap().push(d);
                k += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let take = |v: &Arc<Mutex<Vec<Duration>>>| {
        let mut l = std::mem::take(&mut *v.lock().unwrap());
        l.sort_unstable();
        l
    };

    // The instances, 1,000 per request, one request in flight beyond what is active (or, with
    // `--pace agents`, beyond what the agents run). The controller's /metrics needs an admin:
    // the admin token. An instance in error (a START declared lost, say) ends the run at once:
    // it would never be active.
    let active = |agent: &ureq::Agent| {
        let text = scrape_as(agent, &format!("{url}/metrics"), Some(&api.token));
        let failed = metric_sum(&text, "cumulo_instances", Some("state=\"error\""));
        assert!(
            failed == 0.0,
            "{failed} instances in error (the controller's log says why: {})",
            dir.join("controller.log").display()
        );
        metric_sum(&text, "cumulo_instances", Some("state=\"active\"")) as usize
    };
    let ahead = |agent: &ureq::Agent| {
        if o.pace_agents {
            agent_count.load(Ordering::Relaxed) as usize
        } else {
            active(agent)
        }
    };
    let t = Instant::now();
    let mut left = o.instances;
    let mut n = 0;
    let mut pace = Pace::new();
    while left > 0 {
        let created = o.instances - left;
        let t = Instant::now();
        loop {
            let now = ahead(&agent);
            if now + 1000 >= created || t.elapsed() >= Duration::from_secs(120) {
                break;
            }
            std::thread::sleep(pace.after(now, created - 1000 - now));
        }
        let count = left.min(1000);
        let name = format!("load-{n}");
        let (s, v) = if o.compute {
            api.send(
                "POST",
                "/compute/v2.1/servers",
                &json!({"server": {"name": name, "flavorRef": flavor["id"], "imageRef": image["id"],
                    "min_count": 1, "max_count": count, "networks": "auto"}}),
            )
        } else {
            api.send(
                "POST",
                "/cumulo/v1/instances",
                &json!({"workload": workload["id"], "name": name, "count": count}),
            )
        };
        assert_eq!(s, 202, "create: {v}");
        left -= count;
        n += 1;
    }
    let posted = t.elapsed();
    // Progress every 5 s: how many are active, how many the agents run.
    let mut shown = Instant::now();
    loop {
        let n = active(&agent);
        if shown.elapsed() >= Duration::from_secs(5) {
            shown = Instant::now();
            println!(
                "load: {:>6.1} s: {n} active, the agents run {}",
                t.elapsed().as_secs_f64(),
                agent_count.load(Ordering::Relaxed)
            );
        }
        if n >= o.instances {
            break;
        }
        assert!(
            t.elapsed() < posted + Duration::from_secs(900),
            "timed out waiting for every instance active"
        );
        std::thread::sleep(pace.after(n, o.instances - n));
    }
    let all_active = t.elapsed();
    let (run_pages, run_ones) = (take(&pages), take(&ones));
    println!(
        "load: {} instances through the {} API: POSTs in {posted:.1?} ({:.0}/s), all active in {all_active:.1?} ({:.0}/s)",
        o.instances,
        if o.compute { "Compute" } else { "native" },
        o.instances as f64 / posted.as_secs_f64(),
        o.instances as f64 / all_active.as_secs_f64()
    );
    println!(
        "load: API GETs while creating: page of 100: {} GETs, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; one instance: {} GETs, p50 {:.1} ms, p99 {:.1} ms",
        run_pages.len(),
        percentile(&run_pages, 0.5),
        percentile(&run_pages, 0.99),
        percentile(&run_pages, 1.0),
        run_ones.len(),
        percentile(&run_ones, 0.5),
        percentile(&run_ones, 0.99)
    );
    println!(
        "load: issue 26 item 3 (100,000 active in <= 60 s, page p99 < 50 ms): {:.2} of the goal's rate ({:.0}/s of 1,667/s), page p99 {:.1} ms",
        o.instances as f64 / all_active.as_secs_f64() / (100_000.0 / 60.0),
        o.instances as f64 / all_active.as_secs_f64(),
        percentile(&run_pages, 0.99)
    );

    println!(
        "\n{:>6} | {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9} | {:>5} {:>8} {:>8}",
        "t (s)",
        "sched CPU",
        "sched RSS",
        "ctl CPU",
        "ctl RSS",
        "frames in",
        "out /s",
        "GETs",
        "p50 ms",
        "p99 ms"
    );
    let mut rows: Vec<Row> = Vec::new();
    let mut all_lat: Vec<Duration> = Vec::new();
    let start = Instant::now();
    let mut last = (
        Instant::now(),
        cpu_ticks(sched.pid()),
        cpu_ticks(ctl.pid()),
        scrape(&agent, &metrics_url),
    );
    let mut died = None;
    while start.elapsed() < Duration::from_secs(o.seconds) {
        std::thread::sleep(Duration::from_secs(o.sample));
        for d in [&mut sched, &mut ctl, &mut agents] {
            if !d.alive() {
                died = Some(d.name);
            }
        }
        if died.is_some() {
            break;
        }
        let now = Instant::now();
        let (sc, cc, text) = (
            cpu_ticks(sched.pid()),
            cpu_ticks(ctl.pid()),
            scrape(&agent, &metrics_url),
        );
        let dt = now.duration_since(last.0).as_secs_f64();
        let fin = metric_sum(&text, "cumulo_scheduler_frames_in_total", None)
            - metric_sum(&last.3, "cumulo_scheduler_frames_in_total", None);
        let fout = metric_sum(&text, "cumulo_scheduler_frames_out_total", None)
            - metric_sum(&last.3, "cumulo_scheduler_frames_out_total", None);
        let mut l = take(&pages);
        l.extend(take(&ones));
        l.sort_unstable();
        let row = Row {
            t: start.elapsed().as_secs_f64(),
            sched_cpu: 100.0 * (sc - last.1) as f64 / 100.0 / dt,
            sched_rss: rss_mib(sched.pid()),
            ctl_cpu: 100.0 * (cc - last.2) as f64 / 100.0 / dt,
            ctl_rss: rss_mib(ctl.pid()),
            frames_in: fin / dt,
            frames_out: fout / dt,
            gets: l.len(),
            p50: percentile(&l, 0.5),
            p99: percentile(&l, 0.99),
        };
        all_lat.extend(l);
        println!(
            "{:>6.0} | {:>8.1}% {:>5.0} MiB | {:>8.1}% {:>5.0} MiB | {:>9.0} {:>9.0} | {:>5} {:>8.1} {:>8.1}",
            row.t,
            row.sched_cpu,
            row.sched_rss,
            row.ctl_cpu,
            row.ctl_rss,
            row.frames_in,
            row.frames_out,
            row.gets,
            row.p50,
            row.p99
        );
        rows.push(row);
        last = (now, sc, cc, text);
    }
    stop.store(true, Ordering::Relaxed);
    let _ = prober.join();
    all_lat.sort_unstable();

    if let Some(name) = died {
        println!(
            "load: FAILED: the {name} process died (logs in {})",
            dir.display()
        );
        return false;
    }

    // Nothing lost: every instance listed once, all active, and the agents hold as many.
    let mut seen = HashSet::new();
    let mut not_active = 0usize;
    let mut marker: Option<String> = None;
    loop {
        let path = match &marker {
            Some(m) => format!("/cumulo/v1/instances?limit=1000&marker={m}"),
            None => "/cumulo/v1/instances?limit=1000".to_string(),
        };
        let (s, v) = api.get(&path);
        assert_eq!(s, 200, "{v}");
        let page = v["instances"].as_array().unwrap();
        for i in page {
            seen.insert(i["id"].as_str().unwrap().to_string());
            if i["state"] != "active" {
                not_active += 1;
            }
        }
        if page.len() < 1000 {
            break;
        }
        marker = page.last().map(|i| i["id"].as_str().unwrap().to_string());
    }
    // The agents' process prints what it holds once a second: a count read right after the
    // last instances went active can be a second old (short of the last POST's). Polled until
    // it is whole, for 10 s at most: a count still short then is a loss.
    let counted = Instant::now();
    while (agent_count.load(Ordering::Relaxed) as usize) < o.instances
        && counted.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = agent_count.load(Ordering::Relaxed) as usize;
    let connected = agent_connected.load(Ordering::Relaxed) as usize;
    let drops = agent_drops.load(Ordering::Relaxed);
    let dead = metric_sum(
        &scrape(&agent, &metrics_url),
        "cumulo_scheduler_dead_nodes_total",
        None,
    );

    let mean = |f: fn(&Row) -> f64| rows.iter().map(f).sum::<f64>() / rows.len().max(1) as f64;
    let at2 = rows.iter().find(|r| r.t >= 120.0).or(rows.first()).copied();
    let end = rows.last().copied();
    println!(
        "\nload: {} agents (STATS every {} s), {} instances, {} s steady state (samples every {} s)",
        o.agents, o.stats, o.instances, o.seconds, o.sample
    );
    println!(
        "load: agents connected in {connect_time:.1?}; instances all active {all_active:.1?} after the first POST"
    );
    if !rows.is_empty() {
        println!(
            "load: mean CPU: scheduler {:.1}%, controller {:.1}% of one core; frames/s in {:.0}, out {:.0}",
            mean(|r| r.sched_cpu),
            mean(|r| r.ctl_cpu),
            mean(|r| r.frames_in),
            mean(|r| r.frames_out)
        );
        println!(
            "load: API GETs during the steady state: {} (errors {}), p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            all_lat.len(),
            errors.load(Ordering::Relaxed),
            percentile(&all_lat, 0.5),
            percentile(&all_lat, 0.99),
            percentile(&all_lat, 1.0)
        );
    }
    let mut ok = true;
    if let (Some(a), Some(e)) = (at2, end) {
        println!(
            "load: RSS from t={:.0} s to the end: scheduler {:.0} → {:.0} MiB ({:+.1}%), controller {:.0} → {:.0} MiB ({:+.1}%)",
            a.t,
            a.sched_rss,
            e.sched_rss,
            100.0 * (e.sched_rss - a.sched_rss) / a.sched_rss,
            a.ctl_rss,
            e.ctl_rss,
            100.0 * (e.ctl_rss - a.ctl_rss) / a.ctl_rss
        );
    }
    println!(
        "load: at the end the API lists {} instances ({} not active); the agents hold {held}, {connected} agents connected, {drops} agent sessions lost over the whole run, {dead} nodes dropped as silent by the scheduler",
        seen.len(),
        not_active
    );
    if seen.len() != o.instances || not_active != 0 || held != o.instances {
        println!("load: FAILED: instances lost or not active");
        ok = false;
    }
    if errors.load(Ordering::Relaxed) != 0 {
        println!("load: FAILED: API GETs answered other than 200");
        ok = false;
    }
    if ok && std::env::var_os("LOAD_KEEP_LOGS").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        println!("load: logs kept in {}", dir.display());
    }
    ok
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("agents") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(agents(
            PathBuf::from(&args[1]),
            args[2].parse().unwrap(),
            args[3].parse().unwrap(),
            args[4].parse().unwrap(),
        ));
        return;
    }
    let o = parse_opts(&args);
    if !run(&o) {
        std::process::exit(1);
    }
}
