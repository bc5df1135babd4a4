//! The dashboard in a real browser: Chromium headless (Debian's `chromium` and
//! `chromium-driver`, which `scripts/deps.sh` installs) driven through WebDriver, against
//! `cumulo up --backend sim` in a temporary directory on free ports.
//!
//! A browser at the controller's root lands on the login form; the demo user logs in, creates an
//! instance and watches it become active without the page reloading, stops it, deletes it, sees
//! the Compute API's refusal of a request over quota in words, and logs out. Along the way: the
//! cookies are `HttpOnly` and `SameSite=Strict`, every form control has a label, the keyboard
//! reaches the skip link and the navigation, and a screenshot of each page is saved for review
//! in `target/screenshots/dashboard/`.
//!
//! Needs the cluster's binaries (`cargo build --bins`) and the browser; without them the test is
//! skipped with a message, unless `CUMULO_REQUIRE_BINS=1` or `CUMULO_REQUIRE_BROWSER=1` (CI)
//! make that a failure.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use testkit::browser::{Browser, TAB};

mod common;

/// How long the sim backend may take to make an instance active, or gone.
const STATE_CHANGE: Duration = Duration::from_secs(60);
/// How long a page may take to load.
const PAGE: Duration = Duration::from_secs(20);

/// A `cumulo up --backend sim` cluster, brought down (and its directory removed) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Cluster {
    fn up() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap().to_string();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cumulo"))
            .args(common::sim_up_args(&root))
            .output()
            .unwrap();
        let ok = out.status.success();
        let cluster = Cluster {
            env: if ok {
                common::up_exports(dir.path())
            } else {
                Vec::new()
            },
            dir,
        };
        assert!(ok, "cumulo up: {}", common::output_text(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("{}/ui/", cluster.export("CUMULO_CONTROLLER"))),
            "up prints the dashboard's address: {text}"
        );
        cluster
    }

    fn export(&self, name: &str) -> String {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("up exported no {name}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(env!("CARGO_BIN_EXE_cumulo"))
            .args([
                "down",
                "--purge",
                "--dir",
                self.dir.path().to_str().unwrap(),
            ])
            .output();
    }
}

fn shots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots/dashboard")
}

fn shot(b: &Browser, name: &str) {
    let path = shots().join(format!("{name}.png"));
    b.screenshot(&path).unwrap();
    eprintln!("screenshot: {}", path.display());
}

/// The text of the first element `css` selects, if there is one.
fn text_of(b: &Browser, css: &str) -> Option<String> {
    let e = b.find(css).ok()?;
    b.text(&e).ok()
}

/// Clicks what `css` selects, which leaves the page (a link, a form's button): the page is
/// marked first, so that [`wait_path`] waits for the next one.
fn click_away(b: &Browser, css: &str) {
    b.run("window.cumuloOld = true; return null", vec![])
        .unwrap();
    b.click(&b.find(css).unwrap()).unwrap();
}

/// Waits until a new page (not one [`click_away`] left) with `path` in its URL is loaded.
fn wait_path(b: &Browser, path: &str) {
    b.wait_for(&format!("the page {path}"), PAGE, |b| {
        let url = b.url().ok()?;
        let loaded = b
            .run(
                "return document.readyState === 'complete' && !window.cumuloOld",
                vec![],
            )
            .ok()?
            == true;
        (loaded
            && url
                .split_once("://")?
                .1
                .split_once('/')?
                .1
                .starts_with(path.trim_start_matches('/')))
        .then_some(())
    })
    .unwrap();
}

/// Marks the page, so that a reload (which forgets the mark) is seen.
fn mark(b: &Browser) {
    b.run("window.cumuloMark = 'kept'; return null", vec![])
        .unwrap();
}

fn still_marked(b: &Browser) -> bool {
    b.run("return window.cumuloMark || null", vec![]).unwrap() == "kept"
}

/// Every visible form control of the page has a label (or an `aria-label`).
fn all_labelled(b: &Browser, page: &str) {
    let unlabelled = b
        .run(
            "return Array.from(document.querySelectorAll('input:not([type=hidden]),select,textarea'))\
             .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label'))\
             .map(e => e.outerHTML)",
            vec![],
        )
        .unwrap();
    assert_eq!(
        unlabelled,
        serde_json::json!([]),
        "{page}: controls without a label"
    );
    let nameless = b
        .run(
            "return Array.from(document.querySelectorAll('button,a'))\
             .filter(e => !(e.getAttribute('aria-label') || e.textContent.trim()))\
             .map(e => e.outerHTML)",
            vec![],
        )
        .unwrap();
    assert_eq!(
        nameless,
        serde_json::json!([]),
        "{page}: buttons or links without a name"
    );
}

/// Chooses the option with text `label` in the select `css`.
fn choose(b: &Browser, css: &str, label: &str) {
    let options = b.all(&format!("{css} option")).unwrap();
    let option = options
        .iter()
        .find(|o| b.text(o).unwrap() == label)
        .unwrap_or_else(|| panic!("no option {label:?} in {css}"));
    b.click(option).unwrap();
}

/// The create form filled and sent (traced under `trace`, if given).
fn create(b: &Browser, name: &str, count: u32, trace: Option<&str>) {
    b.type_in(&b.find("#c-name").unwrap(), name).unwrap();
    if let Some(label) = trace {
        b.type_in(&b.find("#c-trace").unwrap(), label).unwrap();
    }
    choose(b, "#c-flavor", "tiny");
    choose(b, "#c-image", "tiny");
    b.type_in(&b.find("#c-count").unwrap(), &count.to_string())
        .unwrap();
    click_away(b, "form.create button[type=submit]");
}

#[test]
fn a_user_logs_in_runs_an_instance_and_logs_out_in_a_real_browser() {
    if !common::binaries_or_skip(&["cumulo-scheduler", "cumulo-controller", "cumulo-agent"]) {
        return;
    }
    let Some(b) = Browser::start_or_skip() else {
        return;
    };
    let cluster = Cluster::up();
    let url = cluster.export("CUMULO_CONTROLLER");

    // The root sends a browser to the login form.
    b.goto(&format!("{url}/")).unwrap();
    wait_path(&b, "/ui/login");
    assert_eq!(b.title().unwrap(), "Log in · cumulo");
    all_labelled(&b, "login");
    shot(&b, "01-login");

    b.type_in(
        &b.find("#username").unwrap(),
        &cluster.export("CUMULO_USERNAME"),
    )
    .unwrap();
    b.type_in(
        &b.find("#password").unwrap(),
        &cluster.export("CUMULO_PASSWORD"),
    )
    .unwrap();
    b.type_in(
        &b.find("#project").unwrap(),
        &cluster.export("CUMULO_PROJECT"),
    )
    .unwrap();
    click_away(&b, "form.login button");
    wait_path(&b, "/ui/");
    assert_eq!(text_of(&b, "h1").as_deref(), Some("Overview"));
    assert_eq!(text_of(&b, "#count-all").as_deref(), Some("0"));
    all_labelled(&b, "overview");
    shot(&b, "02-overview");

    // The session's cookies are out of scripts' reach and never sent cross-site.
    let cookies = b.cookies().unwrap();
    let session = cookies
        .iter()
        .find(|c| c["name"] == "cumulo_session")
        .expect("a session cookie");
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Strict", "{session}");
    assert!(
        b.run("return document.cookie", vec![]).unwrap() == "",
        "no cookie is readable by scripts"
    );

    // The keyboard: the skip link first, then the navigation.
    b.run(
        "document.activeElement.blur(); window.focus(); return null",
        vec![],
    )
    .unwrap();
    b.press(TAB).unwrap();
    assert_eq!(b.text(&b.active().unwrap()).unwrap(), "Skip to content");
    b.press(TAB).unwrap();
    assert_eq!(b.text(&b.active().unwrap()).unwrap(), "Overview");
    b.press(TAB).unwrap();
    assert_eq!(b.text(&b.active().unwrap()).unwrap(), "Instances");

    // Create an instance; it becomes active while the page stays (no reload).
    click_away(&b, "nav a[href=\"/ui/instances\"]");
    wait_path(&b, "/ui/instances");
    all_labelled(&b, "instances");
    shot(&b, "03-instances-empty");
    create(&b, "web", 1, None);
    wait_path(&b, "/ui/instances");
    assert!(
        text_of(&b, "#flash")
            .unwrap()
            .contains("Creating the instance web"),
        "{:?}",
        text_of(&b, "#flash")
    );
    mark(&b);
    b.wait_for("web active in the table", STATE_CHANGE, |b| {
        let table = text_of(b, "#instances")?;
        (table.contains("web") && table.contains("ACTIVE")).then_some(())
    })
    .unwrap();
    assert!(still_marked(&b), "the table changed without a reload");
    shot(&b, "04-instances-active");

    // Its page: details, action log, console; stop it and watch it stop.
    click_away(&b, "#instances th a");
    wait_path(&b, "/ui/instances/");
    assert_eq!(text_of(&b, "#state").as_deref(), Some("ACTIVE"));
    assert!(text_of(&b, "#h-actions").is_some() && text_of(&b, "#h-console").is_some());
    all_labelled(&b, "instance");
    shot(&b, "05-instance");
    click_away(&b, "button[aria-label=\"Stop web\"]");
    wait_path(&b, "/ui/instances/");
    mark(&b);
    b.wait_for("web stopped", STATE_CHANGE, |b| {
        (text_of(b, "#state")? == "SHUTOFF").then_some(())
    })
    .unwrap();
    assert!(still_marked(&b), "the state changed without a reload");
    b.wait_for("the stop in the action log", STATE_CHANGE, |b| {
        text_of(b, "#instance")?.contains("stop").then_some(())
    })
    .unwrap();
    shot(&b, "06-instance-stopped");

    // Delete it (after the confirmation); the list no longer has it.
    click_away(&b, "button[aria-label=\"Delete web\"]");
    b.accept_dialog().unwrap();
    wait_path(&b, "/ui/instances");
    mark(&b);
    b.wait_for("web gone", STATE_CHANGE, |b| {
        (!text_of(b, "#instances")?.contains("web")).then_some(())
    })
    .unwrap();
    assert!(still_marked(&b));

    // Over quota: the API's refusal, in words.
    create(&b, "many", 1000, None);
    wait_path(&b, "/ui/instances");
    let flash = text_of(&b, "#flash[role=alert]").expect("an error shown");
    assert!(
        flash.contains("The instance was not created") && flash.contains("Quota exceeded"),
        "{flash}"
    );
    shot(&b, "07-over-quota");

    // The controller restarts under the page: the page says so, keeps trying, carries on
    // (no reload), and the session is still good.
    restart_controller(&b, &cluster);
    create(&b, "after", 1, Some("after from the dashboard"));
    wait_path(&b, "/ui/instances");
    mark(&b);
    b.wait_for("after active in the table", STATE_CHANGE, |b| {
        let table = text_of(b, "#instances")?;
        (table.contains("after") && table.contains("ACTIVE")).then_some(())
    })
    .unwrap();
    assert!(still_marked(&b));

    // Log out: back to the form, and the pages are closed.
    click_away(&b, "header form button");
    wait_path(&b, "/ui/login");
    b.goto(&format!("{url}/ui/instances")).unwrap();
    wait_path(&b, "/ui/login");
    shot(&b, "08-logged-out");

    admin_pages(&b, &cluster, &url);
    drop(cluster);
}

/// Stops the cluster's controller (SIGTERM, as `cumulo down` does) and starts it again as it
/// ran (same program, arguments and environment, same log and PID file), checking that the page
/// says it lost the controller while it is down and stops saying so once it is back.
fn restart_controller(b: &Browser, cluster: &Cluster) {
    use cumulo::up::{layout::Layout, procs};
    let layout = Layout::new(cluster.dir.path());
    let pid_file = layout.pid_file("controller");
    let running = procs::running(&pid_file).expect("the controller runs");
    let words = |file: &str| -> Vec<String> {
        std::fs::read(format!("/proc/{}/{file}", running.pid))
            .unwrap()
            .split(|c| *c == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect()
    };
    let argv = words("cmdline");
    let env: Vec<(String, String)> = words("environ")
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    mark(b);
    procs::stop_process("controller", &running, Duration::from_secs(20)).unwrap();
    let conn_shown = |b: &Browser| {
        b.run("return !document.getElementById('conn').hidden", vec![])
            .ok()
    };
    b.wait_for("the notice that the controller is lost", PAGE, |b| {
        (conn_shown(b)? == true).then_some(())
    })
    .unwrap();
    shot(b, "09-controller-restarting");
    let spec = procs::Spec {
        name: "controller".into(),
        program: argv[0].clone().into(),
        args: argv[1..].to_vec(),
        env,
    };
    procs::spawn(&spec, &layout.log("controller"), &pid_file).unwrap();
    b.wait_for("the page back in contact", Duration::from_secs(60), |b| {
        (conn_shown(b)? == false).then_some(())
    })
    .unwrap();
    assert!(still_marked(b), "the page carried on without a reload");
}

/// The admin's pages: nodes with their plots, a node, tenants, images, flavors, networks,
/// events, traces; each labelled, each photographed.
fn admin_pages(b: &Browser, cluster: &Cluster, url: &str) {
    let layout = cumulo::up::layout::Layout::new(cluster.dir.path());
    let password = std::fs::read_to_string(layout.admin_password()).unwrap();
    b.type_in(&b.find("#username").unwrap(), "admin").unwrap();
    b.type_in(&b.find("#password").unwrap(), password.trim())
        .unwrap();
    b.type_in(&b.find("#project").unwrap(), "admin").unwrap();
    click_away(b, "form.login button");
    wait_path(b, "/ui/");
    // The admin's overview has the nodes with their use.
    b.wait_for("the nodes on the overview", PAGE, |b| {
        b.find("#main table meter").ok().map(|_| ())
    })
    .unwrap();
    shot(b, "10-admin-overview");
    click_away(b, "nav a[href=\"/ui/nodes\"]");
    wait_path(b, "/ui/nodes");
    b.wait_for("a node's plot", PAGE, |b| {
        b.find("#nodes svg.plot").ok().map(|_| ())
    })
    .unwrap();
    all_labelled(b, "nodes");
    shot(b, "11-nodes");
    click_away(b, "#nodes th a");
    wait_path(b, "/ui/nodes/");
    b.wait_for("the node's plots", PAGE, |b| {
        (b.all("#node figure svg").ok()?.len() == 4).then_some(())
    })
    .unwrap();
    all_labelled(b, "node");
    shot(b, "12-node");
    // The create traced from the dashboard (after the restart: traces are kept in memory), as a
    // waterfall: two hops and the agent's work.
    b.goto(&format!("{url}/ui/traces")).unwrap();
    wait_path(b, "/ui/traces");
    let trace = b
        .find("section.trace")
        .and_then(|t| b.text(&t))
        .unwrap_or_default();
    assert!(trace.contains("after from the dashboard"), "{trace}");
    assert!(
        trace.contains("controller")
            && trace.contains("scheduler")
            && trace.contains("final consumer"),
        "{trace}"
    );
    assert_eq!(b.all("section.trace svg rect").unwrap().len(), 3);
    for (n, page, heading) in [
        (13, "tenants", "Tenants and quotas"),
        (14, "images", "Images"),
        (15, "flavors", "Flavors"),
        (16, "networks", "Networks and CNCIs"),
        (17, "events", "Events"),
        (18, "traces", "Traces"),
    ] {
        b.goto(&format!("{url}/ui/{page}")).unwrap();
        wait_path(b, &format!("/ui/{page}"));
        assert_eq!(text_of(b, "h1").as_deref(), Some(heading));
        assert!(
            text_of(b, "[role=alert]").is_none(),
            "{page}: an error shown"
        );
        all_labelled(b, page);
        shot(b, &format!("{n}-{page}"));
    }
}
