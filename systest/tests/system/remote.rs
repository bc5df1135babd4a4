//! Off-host launching (issue 11) against a real etcd: three controllers (engine + REST API each)
//! on one etcd prefix, `cumulo-agent --remote` replicas as real processes (sim backend, and the
//! libvirt backend over a libvirt remote URI), instances created, stopped, started and deleted
//! through the API, a replica SIGKILLed in the middle of an operation (with each backend) and its
//! late write refused.

// Helpers outside #[test] functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, TestApi};
use controller::engine::{Engine, EngineConfig, Outbound, SendFailure};
use serde_json::{Value, json};
use store::etcd::EtcdOptions;
use store::{
    EtcdTransport, FieldMask, ImageKind, InstanceFacts, InstanceState, InstanceWrite, NewFlavor,
    NewImage, NewWorkload, OperationFilter, OperationState, Placement, Store, StoreError,
};
use uuid::Uuid;

mod credentials;
mod libvirt;

/// The deadline of every wait (generous: two cores shared with builds).
pub(crate) const T: Duration = Duration::from_secs(60);

/// A controller with no scheduler: only off-host hosts take its instances.
struct NoScheduler;

impl Outbound for NoScheduler {
    fn send(&self, _payload: &ssntp::Payload) -> Result<(), SendFailure> {
        Err(SendFailure::NotConnected)
    }

    fn connected(&self) -> bool {
        false
    }
}

/// One controller: its own store handle on the shared etcd prefix, its engine and API.
pub(crate) struct Ctl {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) api: TestApi,
    pub(crate) token: String,
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// A request to `ctl`'s API; returns the status and the JSON body (`null` when empty).
pub(crate) async fn call(ctl: &Ctl, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let url = format!("{}{path}", ctl.api.url);
    let token = ctl.token.clone();
    let method = method.to_string();
    tokio::task::spawn_blocking(move || {
        let agent = http();
        let mut response = match (method.as_str(), body) {
            ("GET", _) => agent.get(&url).header("X-Auth-Token", &token).call(),
            ("DELETE", _) => agent.delete(&url).header("X-Auth-Token", &token).call(),
            (_, Some(b)) => agent
                .post(&url)
                .header("X-Auth-Token", &token)
                .send_json(&b),
            (_, None) => agent.post(&url).header("X-Auth-Token", &token).send_empty(),
        }
        .unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    })
    .await
    .unwrap()
}

async fn login(url: &str) -> String {
    let url = format!("{url}/v3/auth/tokens");
    tokio::task::spawn_blocking(move || {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": ADMIN_NAME, "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
            "scope": {"project": {"name": ADMIN_PROJECT, "domain": {"name": "Default"}}}}});
        let response = http().post(&url).send_json(&body).unwrap();
        assert_eq!(response.status().as_u16(), 201);
        response.headers()["x-subject-token"]
            .to_str()
            .unwrap()
            .to_string()
    })
    .await
    .unwrap()
}

/// `n` controllers on the etcd prefix `url`.
pub(crate) async fn controllers(url: &str, n: usize) -> Vec<Ctl> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(controller_with(url, |_| {}).await);
    }
    out
}

/// A controller (store, engine without a scheduler, API, an admin token) on the etcd prefix
/// `url`, its API configuration changed by `tune` first.
pub(crate) async fn controller_with(
    url: &str,
    tune: impl FnOnce(&mut controller::api::ApiConfig),
) -> Ctl {
    let location = url.to_string();
    let etcd = controller_tls();
    let store: Arc<dyn Store> =
        tokio::task::spawn_blocking(move || store::open(&location, Some(&etcd)))
            .await
            .unwrap()
            .unwrap();
    let engine_store = store.clone();
    let engine = tokio::task::spawn_blocking(move || {
        Engine::new(
            engine_store,
            Arc::new(NoScheduler),
            EngineConfig::new(Uuid::new_v4()),
        )
    })
    .await
    .unwrap()
    .unwrap();
    let api = TestApi::start_with(store.clone(), Arc::new(engine), None, tune)
        .await
        .unwrap();
    let token = login(&api.url).await;
    Ctl { store, api, token }
}

/// A flavor, a public image and a workload of the admin project; returns the workload.
pub(crate) async fn workload(ctl: &Ctl, image: &str) -> Uuid {
    let store = ctl.store.clone();
    let project = ctl.api.admin.project;
    let image = image.to_string();
    tokio::task::spawn_blocking(move || {
        let flavor = store
            .create_flavor(NewFlavor {
                name: "tiny".into(),
                vcpus: 1,
                // What the tiny guest's kernel needs to boot.
                memory_mb: 256,
                disk_gb: 1,
                is_public: true,
            })
            .unwrap();
        let image = store
            .create_image(NewImage {
                owner: Some(project),
                name: "tiny".into(),
                kind: ImageKind::Raw,
                reference: image,
            })
            .unwrap();
        store
            .create_workload(NewWorkload {
                owner: Some(project),
                name: "tiny".into(),
                flavor: flavor.id,
                image: image.id,
                user_data: String::new(),
                ephemeral: false,
            })
            .unwrap()
            .id
    })
    .await
    .unwrap()
}

/// A `cumulo-agent --remote` replica process; SIGKILLed (by its PID) when dropped.
pub(crate) struct Replica {
    child: Child,
}

impl Replica {
    /// The command line of a replica of the host at `uri`, named `name`, with state under `dir`.
    fn command(
        store_url: &str,
        uri: &str,
        name: &str,
        dir: &std::path::Path,
        extra: &[&str],
    ) -> Command {
        let state = dir.join(name);
        let sim = dir.join("sim-host");
        let etcd = testkit::etcd::shared().expect("the test's etcd");
        // The replica's etcd user has the launcher role only.
        let mut command = Command::new(testkit::bins::path("cumulo-agent"));
        command
            .args(etcd.client_args(LAUNCHER))
            .args([
                "--remote",
                uri,
                "--store",
                store_url,
                "--replica",
                name,
                "--state-dir",
                state.to_str().unwrap(),
                "--poll",
                "20ms",
                "--sim-dir",
                sim.to_str().unwrap(),
            ])
            .args(extra)
            .stdin(Stdio::null());
        command
    }

    pub(crate) fn start(
        store_url: &str,
        uri: &str,
        name: &str,
        dir: &std::path::Path,
        extra: &[&str],
    ) -> Replica {
        let child = Replica::command(store_url, uri, name, dir, extra)
            .spawn()
            .unwrap();
        Replica { child }
    }

    /// Runs a replica that is expected to stop on its own (within [`T`]); returns its exit code
    /// and what it wrote on stderr (its log).
    pub(crate) async fn run_to_exit(
        store_url: &str,
        uri: &str,
        name: &str,
        dir: &std::path::Path,
        extra: &[&str],
    ) -> (Option<i32>, String) {
        let child = Replica::command(store_url, uri, name, dir, extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut replica = Replica { child };
        let mut status = None;
        testkit::wait_until(T, &format!("replica {name} to stop"), || {
            status = replica.child.try_wait().unwrap();
            std::future::ready(status.is_some())
        })
        .await;
        let mut log = String::new();
        if let Some(mut err) = replica.child.stderr.take() {
            std::io::Read::read_to_string(&mut err, &mut log).unwrap();
        }
        (status.and_then(|s| s.code()), log)
    }

    /// SIGKILL, and reap.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The instance's state as `ctl`'s API shows it (`None`: 404).
pub(crate) async fn state_of(ctl: &Ctl, id: &str) -> Option<(String, Value)> {
    let (status, body) = call(ctl, "GET", &format!("/cumulo/v1/instances/{id}"), None).await;
    match status {
        404 => None,
        200 => Some((body["state"].as_str().unwrap_or("").to_string(), body)),
        other => panic!("GET instance: {other} {body}"),
    }
}

pub(crate) async fn wait_state(ctls: &[Ctl], id: &str, want: &str, within: Duration) {
    testkit::wait_until(
        within,
        &format!("{id} {want} on every controller"),
        || async {
            for ctl in ctls {
                match state_of(ctl, id).await {
                    Some((s, _)) if s == want => {}
                    _ => return false,
                }
            }
            true
        },
    )
    .await;
}

pub(crate) async fn wait_gone(ctls: &[Ctl], id: &str, within: Duration) {
    testkit::wait_until(
        within,
        &format!("{id} gone on every controller"),
        || async {
            for ctl in ctls {
                if state_of(ctl, id).await.is_some() {
                    return false;
                }
            }
            true
        },
    )
    .await;
}

/// The etcd user of the controllers of these tests (the controller role on their prefix).
pub(crate) const CONTROLLER: &str = "cumulo-controller";
/// The etcd user of the launcher replicas of these tests (the launcher role on their prefix).
pub(crate) const LAUNCHER: &str = "cumulo-launcher";

/// The shared etcd (TLS) and a fresh prefix's `etcd://` URL, with the cluster's etcd users and
/// roles set up on that prefix ([`CONTROLLER`], [`LAUNCHER`]; authentication on).
pub(crate) async fn etcd_url() -> Option<(Arc<testkit::etcd::EtcdServer>, String)> {
    let etcd = testkit::etcd::shared()?;
    let prefix = format!("/offhost-{}/", Uuid::new_v4().simple());
    let url = format!("etcd://{}{prefix}", etcd.endpoint());
    let plan = store::etcd::auth::AuthPlan {
        prefix,
        controllers: vec![CONTROLLER.into()],
        launchers: vec![LAUNCHER.into()],
    };
    let root = EtcdTransport::Tls(etcd.identity(testkit::etcd::ROOT));
    let endpoint = etcd.endpoint();
    tokio::task::spawn_blocking(move || {
        store::etcd::auth::setup_auth(&[endpoint], &root, &plan, &EtcdOptions::default())
    })
    .await
    .unwrap()
    .expect("etcd users and roles");
    Some((etcd, url))
}

/// How the tests' controllers reach the shared etcd: TLS as [`CONTROLLER`].
pub(crate) fn controller_tls() -> EtcdTransport {
    EtcdTransport::Tls(
        testkit::etcd::shared()
            .expect("the test's etcd")
            .identity(CONTROLLER),
    )
}

/// Registers an off-host host through `ctl`'s API; returns its id.
pub(crate) async fn register(ctl: &Ctl, name: &str, uri: &str) -> String {
    let (status, body) = call(
        ctl,
        "POST",
        "/cumulo/v1/nodes",
        Some(json!({"name": name, "launcher_on_host": false, "libvirt_uri": uri})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["launcher_on_host"], false);
    body["id"].as_str().unwrap().to_string()
}

pub(crate) async fn create(ctl: &Ctl, workload: Uuid, name: &str) -> String {
    let (status, body) = call(
        ctl,
        "POST",
        "/cumulo/v1/instances",
        Some(json!({"workload": workload, "name": name})),
    )
    .await;
    assert!(status == 201 || status == 202, "create: {status} {body}");
    let list = body["instances"].as_array().cloned().unwrap_or_default();
    let first = list.first().cloned().unwrap_or(body);
    first["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_run_instances_through_the_api_and_a_killed_one_is_fenced() {
    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ctls = controllers(&url, 3).await;
    let uri = "sim+tcp://edge-1/system";
    let host = register(&ctls[0], "edge-1", uri).await;
    // Every controller lists it.
    for ctl in &ctls {
        let (status, body) = call(ctl, "GET", "/cumulo/v1/nodes", None).await;
        assert_eq!(status, 200);
        assert!(
            body["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["id"] == host.as_str()),
            "{body}"
        );
    }
    let workload = workload(&ctls[0], "tiny").await;
    let sim = ["--backend", "sim", "--lease", "2s"];
    let mut r1 = Replica::start(&url, uri, "r1", dir.path(), &sim);
    let mut r2 = Replica::start(&url, uri, "r2", dir.path(), &sim);

    // Create on one controller, watch all three; stop, start, delete through others.
    let id = create(&ctls[0], workload, "vm1").await;
    wait_state(&ctls, &id, "active", T).await;
    let (_, body) = state_of(&ctls[2], &id).await.unwrap();
    assert_eq!(body["node"], host.as_str(), "{body}");
    act(&ctls[1], &id, "stop").await;
    wait_state(&ctls, &id, "exited", T).await;
    act(&ctls[2], &id, "start").await;
    wait_state(&ctls, &id, "active", T).await;
    act(&ctls[0], &id, "delete").await;
    wait_gone(&ctls, &id, T).await;
    // Every operation finished once, done.
    let store = ctls[0].store.clone();
    let ops = tokio::task::spawn_blocking(move || store.operations(OperationFilter::default()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ops.len(), 4, "{ops:#?}");
    assert!(
        ops.iter().all(|o| o.state == OperationState::Done),
        "{ops:#?}"
    );

    // A replica dies in the middle of an operation. Only a slow one (its boots never end)
    // runs when the instance is created, so it is the one that claims the start.
    r1.kill();
    r2.kill();
    let mut slow = Replica::start(
        &url,
        uri,
        "slow",
        dir.path(),
        &[
            "--backend",
            "sim",
            "--lease",
            "1s",
            "--sim-boot-delay",
            "3600s",
        ],
    );
    let id = create(&ctls[1], workload, "vm2").await;
    let instance = Uuid::parse_str(&id).unwrap();
    let store = ctls[0].store.clone();
    let claimed = {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move {
                tokio::task::spawn_blocking(move || {
                    store
                        .operations(OperationFilter::default())
                        .unwrap()
                        .into_iter()
                        .find(|o| o.instance == instance)
                })
                .await
                .unwrap()
            }
        }
    };
    testkit::wait_until(T, "the slow replica's claim", || {
        let claimed = claimed.clone();
        async move {
            claimed()
                .await
                .is_some_and(|o| o.state == OperationState::Claimed)
        }
    })
    .await;
    let op = claimed().await.unwrap();
    let old = op.claim.clone().unwrap();
    assert_eq!(old.owner, "slow");
    // The other replica is up while the slow one holds the claim (and renews it).
    let _fast = Replica::start(&url, uri, "fast", dir.path(), &sim);
    slow.kill();
    wait_state(&ctls, &id, "active", T).await;
    let done = claimed().await.unwrap();
    assert_eq!(done.id, op.id);
    assert_eq!(done.state, OperationState::Done);
    let new = done.claim.clone().unwrap();
    assert_eq!(new.owner, "fast");
    assert!(new.token > old.token, "{} > {}", new.token, old.token);
    // The dead replica's late write, forced with its old token, is refused and changes nothing.
    let before = state_of(&ctls[0], &id).await.unwrap().1;
    let late = tokio::task::spawn_blocking(move || {
        let exited = InstanceFacts {
            state: InstanceState::Error("late".into()),
            placement: Placement::default(),
            fault: None,
        };
        store.fenced_write(
            op.id,
            old.token,
            &InstanceWrite::Update(FieldMask::all(), exited),
            Some((OperationState::Failed, "late")),
        )
    })
    .await
    .unwrap();
    assert!(matches!(late, Err(StoreError::Fenced { .. })), "{late:?}");
    assert_eq!(state_of(&ctls[2], &id).await.unwrap().1, before);
    let store = ctls[1].store.clone();
    let after = tokio::task::spawn_blocking(move || store.operation(done.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, done, "the operation completed once");
}

/// Asks `ctl` to `action` ("stop", "start" or "delete") the instance; asserts it was accepted.
async fn act(ctl: &Ctl, id: &str, action: &str) {
    let (method, path) = match action {
        "delete" => ("DELETE", format!("/cumulo/v1/instances/{id}")),
        _ => ("POST", format!("/cumulo/v1/instances/{id}/{action}")),
    };
    let (status, body) = call(ctl, method, &path, None).await;
    assert!(status < 300, "{action}: {status} {body}");
}
