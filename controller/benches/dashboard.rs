//! The dashboard in a real browser (Chromium headless through WebDriver, `testkit::browser`)
//! over the API served in-process (SQLite store, the fake cluster: instances active at once) with
//! `--instances` instances (10,000 unless told): the overview's time to first paint, and the
//! instance page's data request (`GET /ui/instances/live`, what the page fetches every 2 s),
//! timed by the page itself (`fetch` and `performance.now()`): the first page, a page near the
//! end (a marker past nine tenths of the instances), and the first page sorted by name (a sort
//! reads every instance of the scope). `--rounds` of each (50 unless told).
//!
//! ```text
//! cargo bench -p controller --bench dashboard -- --instances 10000 --rounds 50
//! ```
//!
//! Figures: docs/benchmarks.md (## The dashboard).
// A bench binary prints its figures and fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, FakeCluster, TestApi};
use serde_json::{Value, json};
use store::{NewFlavor, NewImage, SqliteStore, Store};
use testkit::browser::Browser;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().unwrap())
}

/// The p-th percentile of `ms` (sorted here).
fn percentile(ms: &mut [f64], p: f64) -> f64 {
    ms.sort_by(f64::total_cmp);
    let i = ((ms.len() as f64 - 1.0) * p).round() as usize;
    ms[i.min(ms.len() - 1)]
}

/// Times `rounds` fetches of `path` made by the page: milliseconds each.
fn fetches(b: &Browser, path: &str, rounds: usize) -> Vec<f64> {
    let script = "const [path, rounds] = arguments; const out = []; \
        return (async () => { for (let i = 0; i < rounds; i++) { \
          const t = performance.now(); \
          const r = await fetch(path, {credentials: 'same-origin', cache: 'no-store'}); \
          const text = await r.text(); \
          if (!r.ok || text.length === 0) { throw new Error(path + ': ' + r.status); } \
          out.push(performance.now() - t); } return out; })();";
    let got = b.run(script, vec![json!(path), json!(rounds)]).unwrap();
    got.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

fn report(what: &str, mut ms: Vec<f64>) {
    let n = ms.len();
    let p50 = percentile(&mut ms, 0.5);
    let p99 = percentile(&mut ms, 0.99);
    println!("{what:<48} p50 {p50:8.2} ms   p99 {p99:8.2} ms   ({n} rounds)");
}

fn main() {
    let instances = arg("--instances", 10_000);
    let rounds = arg("--rounds", 50);
    let Some(b) = Browser::start_or_skip() else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let flavor = store
        .create_flavor(NewFlavor {
            name: "tiny".into(),
            vcpus: 1,
            memory_mb: 64,
            disk_gb: 0,
            is_public: true,
        })
        .unwrap();
    let image = store
        .create_image(NewImage {
            owner: None,
            name: "tiny".into(),
            kind: store::ImageKind::Qcow2,
            reference: "/images/tiny.qcow2".into(),
        })
        .unwrap();
    let cluster = Arc::new(FakeCluster::new(store.clone()));
    let api = runtime
        .block_on(TestApi::start(store.clone(), cluster, None))
        .unwrap();
    let url = api.url.clone();

    // The instances, through the Compute API, 1,000 a request.
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let login = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": ADMIN_NAME, "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
        "scope": {"project": {"name": ADMIN_PROJECT, "domain": {"name": "Default"}}}}});
    let response = http
        .post(&format!("{url}/v3/auth/tokens"))
        .send_json(&login)
        .unwrap();
    let token = response.headers()["x-subject-token"]
        .to_str()
        .unwrap()
        .to_string();
    let started = Instant::now();
    let mut made = 0;
    while made < instances {
        let count = (instances - made).min(1000);
        let mut response = http
            .post(&format!("{url}/compute/v2.1/servers"))
            .header("x-auth-token", &token)
            .send_json(
                json!({"server": {"name": format!("vm-{made:05}"), "flavorRef": flavor.id,
                "imageRef": image.id, "min_count": count, "max_count": count}}),
            )
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.body_mut().read_json().unwrap_or(Value::Null);
        assert_eq!(status, 202, "creating instances: {body}");
        made += count;
    }
    eprintln!(
        "{instances} instances made in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The browser logs in through the form.
    b.goto(&format!("{url}/ui/login")).unwrap();
    b.type_in(&b.find("#username").unwrap(), ADMIN_NAME)
        .unwrap();
    b.type_in(&b.find("#password").unwrap(), ADMIN_PASSWORD)
        .unwrap();
    b.type_in(&b.find("#project").unwrap(), ADMIN_PROJECT)
        .unwrap();
    b.click(&b.find("form.login button").unwrap()).unwrap();
    b.wait_for("the overview", Duration::from_secs(30), |b| {
        b.find("#count-all").ok().map(|_| ())
    })
    .unwrap();

    // The overview's first paint, from a fresh navigation each round.
    let mut paint = Vec::new();
    let mut served = Vec::new();
    for _ in 0..rounds {
        b.goto(&format!("{url}/ui/")).unwrap();
        let entry = b
            .wait_for("the first paint", Duration::from_secs(30), |b| {
                let v = b
                    .run(
                        "const p = performance.getEntriesByName('first-contentful-paint')[0]; \
                         const n = performance.getEntriesByType('navigation')[0]; \
                         return p && n ? [p.startTime, n.responseEnd - n.requestStart] : null;",
                        vec![],
                    )
                    .ok()?;
                v.as_array().cloned()
            })
            .unwrap();
        paint.push(entry[0].as_f64().unwrap());
        served.push(entry[1].as_f64().unwrap());
    }
    let shown = b.text(&b.find("#count-all").unwrap()).unwrap();
    assert_eq!(shown, instances.to_string(), "the overview counts them all");
    report("overview: first contentful paint", paint);
    report("overview: the page's request (sent to last byte)", served);

    // The instance page's data request.
    b.goto(&format!("{url}/ui/instances")).unwrap();
    b.wait_for("the instance table", Duration::from_secs(30), |b| {
        b.find("#instances table").ok().map(|_| ())
    })
    .unwrap();
    report(
        "instances: first page (/ui/instances/live)",
        fetches(&b, "/ui/instances/live", rounds),
    );
    let deep = {
        // Walk the store's pages to the instance past nine tenths of them.
        let mut marker = None;
        let mut seen = 0;
        let target = instances * 9 / 10;
        loop {
            let page = store
                .instances(
                    store::Scope::All,
                    store::InstanceFilter::default(),
                    store::Page {
                        marker,
                        limit: store::Page::MAX_LIMIT,
                    },
                )
                .unwrap();
            if seen + page.items.len() > target || page.next.is_none() {
                break page.items[(target - seen).min(page.items.len() - 1)].id;
            }
            seen += page.items.len();
            marker = page.next;
        }
    };
    report(
        "instances: a page past nine tenths (marker)",
        fetches(
            &b,
            &format!("/ui/instances/live?marker={deep}&page=181"),
            rounds,
        ),
    );
    report(
        "instances: first page sorted by name",
        fetches(&b, "/ui/instances/live?sort=name", rounds),
    );
    drop(b);
    runtime.block_on(api.stop()).unwrap();
}
