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
use store::{
    FieldMask, ImageKind, InstanceFacts, InstanceState, InstanceWrite, NewFlavor, NewImage,
    NewWorkload, OperationFilter, OperationState, Placement, Store, StoreError,
};
use uuid::Uuid;

/// The deadline of every wait (generous: two cores shared with builds).
pub(crate) const T: Duration = Duration::from_secs(60);

/// A controller with no scheduler: only off-host hosts take its instances.
struct NoScheduler;

impl Outbound for NoScheduler {
    fn send(&self, _payload: &ssntp::Payload) -> Result<(), SendFailure> {
        Err(SendFailure("no scheduler in this test".into()))
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
    let store: Arc<dyn Store> = tokio::task::spawn_blocking(move || store::open(&location))
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
    pub(crate) fn start(
        store_url: &str,
        uri: &str,
        name: &str,
        dir: &std::path::Path,
        extra: &[&str],
    ) -> Replica {
        let state = dir.join(name);
        let sim = dir.join("sim-host");
        let child = Command::new(testkit::bins::path("cumulo-agent"))
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
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Replica { child }
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

pub(crate) async fn etcd_url() -> Option<(Arc<testkit::etcd::EtcdServer>, String)> {
    let etcd = testkit::etcd::shared()?;
    let url = format!(
        "etcd://{}/offhost-{}",
        etcd.endpoint(),
        Uuid::new_v4().simple()
    );
    Some((etcd, url))
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

/// The libvirt URI reached over TCP on loopback (`scripts/libvirt.sh` exports it), or `None`
/// (after saying why) when the test is skipped.
fn tcp_uri() -> Option<String> {
    match std::env::var("CUMULO_LIBVIRT_TCP_URI") {
        Ok(uri) if !uri.is_empty() => Some(uri),
        _ => {
            let required = std::env::var("CUMULO_LIBVIRT_REQUIRED").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "CUMULO_LIBVIRT_REQUIRED=1 but CUMULO_LIBVIRT_TCP_URI is not set (scripts/libvirt.sh)"
            );
            eprintln!(
                "SKIPPED: the off-host libvirt test needs CUMULO_LIBVIRT_TCP_URI (a libvirtd \
                 listening on loopback TCP; see scripts/libvirt.sh)"
            );
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_boot_a_real_vm_over_a_remote_libvirt_uri_and_fence_the_domain() {
    use agent::backend::Backend;
    use agent::backend::libvirt::{Accel, LibvirtBackend, LibvirtConfig};
    use agent::remote::fence::Fenced;

    let Some(uri) = tcp_uri() else {
        return;
    };
    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let _vms = testkit::libvirt::VMS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    // Both replicas keep the instance files in one directory (the remote host must see the
    // same paths: here it is this machine).
    let state = testkit::libvirt::state_dir(dir.path());
    let ctls = controllers(&url, 2).await;
    let host = register(&ctls[0], "edge-tcp", &uri).await;
    let workload = workload(&ctls[0], "tiny").await;
    let args = vm_args(state.to_str().unwrap(), "5s");
    let mut r1 = Replica::start(&url, &uri, "r1", dir.path(), &args);
    let mut r2 = Replica::start(&url, &uri, "r2", dir.path(), &args);

    let id = create(&ctls[0], workload, "vm").await;
    let instance = Uuid::parse_str(&id).unwrap();
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    let (_, body) = state_of(&ctls[1], &id).await.unwrap();
    assert_eq!(body["node"], host.as_str());
    // The guest boots (its console says so).
    let console = state
        .join("libvirt")
        .join("instances")
        .join(&id)
        .join("console.log");
    testkit::wait_until(Duration::from_secs(120), "the guest's marker", || async {
        std::fs::read_to_string(&console)
            .is_ok_and(|log| log.contains(&format!("CUMULO-GUEST-UP {id}")))
    })
    .await;
    // The domain carries the token of the claim that started it.
    let store = ctls[0].store.clone();
    let op = tokio::task::spawn_blocking(move || {
        store
            .operations(OperationFilter::default())
            .unwrap()
            .into_iter()
            .find(|o| o.instance == instance)
            .unwrap()
    })
    .await
    .unwrap();
    let token = op.claim.clone().unwrap().token;
    let backend =
        Arc::new(LibvirtBackend::new(LibvirtConfig::new(&uri, Accel::Tcg, &state)).unwrap());
    assert_eq!(backend.fence_token(instance).await.unwrap(), Some(token));
    // A replica with an older claim cannot touch it: stop and delete are refused, it runs on.
    let stale = Fenced::new(backend.clone(), token - 1);
    let refused = stale.stop(instance).await.unwrap_err();
    assert!(refused.to_string().contains("fenced"), "{refused}");
    assert!(stale.delete(instance).await.is_err());
    assert_eq!(backend.fence_token(instance).await.unwrap(), Some(token));
    assert_eq!(domain_of(&backend, instance).await, Some(true));

    // Stop, start, delete through the API.
    act(&ctls[1], &id, "stop").await;
    wait_state(&ctls, &id, "exited", Duration::from_secs(120)).await;
    // Powered off and kept: the same domain boots again on the start.
    assert_eq!(domain_of(&backend, instance).await, Some(false));
    let stopped_token = backend.fence_token(instance).await.unwrap();
    act(&ctls[0], &id, "start").await;
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    assert!(
        backend.fence_token(instance).await.unwrap() > stopped_token,
        "the start claimed the kept domain"
    );
    act(&ctls[1], &id, "delete").await;
    wait_gone(&ctls, &id, Duration::from_secs(120)).await;
    assert_eq!(domain_of(&backend, instance).await, None);

    // A replica SIGKILLed in the middle of a start, once it has defined the domain: the other
    // takes the operation over with a larger token, remakes the domain, and the guest boots.
    r1.kill();
    r2.kill();
    let short = vm_args(state.to_str().unwrap(), "2s");
    let (instance, op, old) = {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut victim = Replica::start(&url, &uri, "victim", dir.path(), &short);
            let id = create(&ctls[0], workload, &format!("taken-over-{tries}")).await;
            let instance = Uuid::parse_str(&id).unwrap();
            testkit::wait_until(Duration::from_secs(120), "the victim's domain", || async {
                backend
                    .list()
                    .await
                    .is_ok_and(|l| l.iter().any(|e| e.instance == instance))
            })
            .await;
            victim.kill();
            let op = operation_of(&ctls[0], instance).await;
            // The victim may have finished in the instant between the definition and the
            // kill (a loaded machine): then it was not in the middle; try again.
            if op.state == OperationState::Claimed {
                let old = op.claim.clone().unwrap();
                assert_eq!(old.owner, "victim");
                break (instance, op, old);
            }
            assert!(
                tries < 3,
                "the victim finished its start {tries} times before its kill"
            );
            act(&ctls[0], &id, "delete").await;
            let _heir = Replica::start(&url, &uri, "cleaner", dir.path(), &short);
            wait_gone(&ctls, &id, Duration::from_secs(120)).await;
        }
    };
    let id = instance.to_string();
    let _heir = Replica::start(&url, &uri, "heir", dir.path(), &short);
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    let done = operation_of(&ctls[1], instance).await;
    assert_eq!((done.id, done.state), (op.id, OperationState::Done));
    let new = done.claim.clone().unwrap();
    assert_eq!(new.owner, "heir");
    assert!(new.token > old.token, "{} > {}", new.token, old.token);
    assert_eq!(
        backend.fence_token(instance).await.unwrap(),
        Some(new.token)
    );
    let console = state
        .join("libvirt")
        .join("instances")
        .join(&id)
        .join("console.log");
    let marker = format!("CUMULO-GUEST-UP {id}");
    testkit::wait_until(Duration::from_secs(120), "the guest's marker", || async {
        std::fs::read_to_string(&console).is_ok_and(|log| log.contains(&marker))
    })
    .await;
    // One domain, running, and the dead replica's stale claim can no longer touch it.
    let listed = backend.list().await.unwrap();
    assert_eq!(listed.iter().filter(|e| e.instance == instance).count(), 1);
    assert_eq!(domain_of(&backend, instance).await, Some(true));
    assert!(
        Fenced::new(backend.clone(), old.token)
            .stop(instance)
            .await
            .is_err()
    );
    act(&ctls[1], &id, "delete").await;
    wait_gone(&ctls, &id, Duration::from_secs(120)).await;
    assert_eq!(domain_of(&backend, instance).await, None);
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

/// The instance's domain as `backend` lists it: `Some(running)`, `None` when there is none.
async fn domain_of(
    backend: &agent::backend::libvirt::LibvirtBackend,
    instance: Uuid,
) -> Option<bool> {
    use agent::backend::Backend;
    let listed = backend.list().await.unwrap();
    listed
        .iter()
        .find(|e| e.instance == instance)
        .map(|e| e.power.is_active())
}

/// The operation about `instance` with the newest claim.
async fn operation_of(ctl: &Ctl, instance: Uuid) -> store::Operation {
    let store = ctl.store.clone();
    tokio::task::spawn_blocking(move || {
        store
            .operations(OperationFilter::default())
            .unwrap()
            .into_iter()
            .filter(|o| o.instance == instance)
            .max_by_key(|o| o.claim.as_ref().map_or(0, |c| c.token))
            .unwrap()
    })
    .await
    .unwrap()
}

/// A libvirt replica's arguments: TCG, a `lease`, the instances' files under `state`.
fn vm_args<'a>(state: &'a str, lease: &'a str) -> [&'a str; 8] {
    [
        "--backend",
        "libvirt",
        "--accel",
        "tcg",
        "--lease",
        lease,
        "--state-dir",
        state,
    ]
}

/// The TLS libvirt URI and the CA behind it (`scripts/libvirt.sh` exports them when it starts
/// libvirtd): (URI, CA certificate PEM, CA key PEM), or `None` (after saying why) when the test
/// is skipped.
fn tls_uri() -> Option<(String, String, String)> {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let found = (|| {
        let uri = var("CUMULO_LIBVIRT_TLS_URI")?;
        let ca = std::fs::read_to_string(var("CUMULO_LIBVIRT_TLS_CA")?).ok()?;
        let key = std::fs::read_to_string(var("CUMULO_LIBVIRT_TLS_CA_KEY")?).ok()?;
        Some((uri, ca, key))
    })();
    if found.is_none() {
        let required = std::env::var("CUMULO_LIBVIRT_REQUIRED").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "CUMULO_LIBVIRT_REQUIRED=1 but CUMULO_LIBVIRT_TLS_URI, _CA and _CA_KEY are not set \
             (scripts/libvirt.sh exports them when it starts libvirtd)"
        );
        eprintln!(
            "SKIPPED: the libvirt TLS test needs CUMULO_LIBVIRT_TLS_URI, CUMULO_LIBVIRT_TLS_CA and \
             CUMULO_LIBVIRT_TLS_CA_KEY (scripts/libvirt.sh)"
        );
    }
    found
}

/// A replica reaches a libvirtd that only lets in clients with a certificate from its CA,
/// with no credentials of its own: the controller holding that CA's key issues the host's
/// launcher certificate, the replica copies it into its pki directory, and runs a VM through
/// that TLS connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reaches_a_tls_libvirt_with_the_credentials_the_controller_issues() {
    use controller::creds::CredsIssuer;

    let Some((tls, ca_pem, ca_key)) = tls_uri() else {
        return;
    };
    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let _vms = testkit::libvirt::VMS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let state = testkit::libvirt::state_dir(dir.path());
    let pki = dir.path().join("pki");
    // libvirt's client finds its certificate, key and CA in `pkipath`.
    let uri = format!("{tls}?pkipath={}", pki.display());
    let issuer =
        Arc::new(CredsIssuer::from_pem(&ca_pem, &ca_key, Duration::from_secs(3600)).unwrap());
    let ctl = controller_with(&url, move |c| c.launcher_creds = Some(issuer)).await;
    let host = register(&ctl, "edge-tls", &uri).await;
    let workload = workload(&ctl, "tiny").await;
    let (status, body) = call(
        &ctl,
        "POST",
        &format!("/cumulo/v1/nodes/{host}/credentials"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let _replica = Replica::start(
        &url,
        &uri,
        "r1",
        dir.path(),
        &[
            &vm_args(state.to_str().unwrap(), "5s")[..],
            &["--tls-pki", pki.to_str().unwrap()],
        ]
        .concat(),
    );
    let id = create(&ctl, workload, "over-tls").await;
    let ctls = [ctl];
    wait_state(&ctls, &id, "active", Duration::from_secs(120)).await;
    // The replica's connection was TLS with the issued certificate: it is what sits in pki.
    let cert = std::fs::read_to_string(pki.join("clientcert.pem")).unwrap();
    assert!(cert.contains("BEGIN CERTIFICATE"));
    let instance = Uuid::parse_str(&id).unwrap();
    let backend =
        agent::backend::libvirt::LibvirtBackend::new(agent::backend::libvirt::LibvirtConfig::new(
            &uri,
            agent::backend::libvirt::Accel::Tcg,
            &state,
        ))
        .unwrap();
    assert_eq!(domain_of(&backend, instance).await, Some(true));
    act(&ctls[0], &id, "delete").await;
    wait_gone(&ctls, &id, Duration::from_secs(120)).await;
    assert_eq!(domain_of(&backend, instance).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launcher_credentials_are_renewed_on_demand_and_replicas_pick_them_up() {
    use controller::creds::CredsIssuer;
    use std::os::unix::fs::PermissionsExt;

    let Some((_etcd, url)) = etcd_url().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The controller's CA (made here).
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test cluster CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_pem = params.self_signed(&ca_key).unwrap().pem();
    let issuer = Arc::new(
        CredsIssuer::from_pem(&ca_pem, &ca_key.serialize_pem(), Duration::from_secs(3600)).unwrap(),
    );
    // One controller without the CA key, one with it.
    let mut ctls = controllers(&url, 1).await;
    let with_key = issuer.clone();
    ctls.push(
        controller_with(&url, move |c| {
            c.launcher_creds = Some(with_key);
        })
        .await,
    );

    let uri = "qemu+tls://edge-tls/system";
    let host = register(&ctls[0], "edge-tls", uri).await;
    let path = format!("/cumulo/v1/nodes/{host}/credentials");
    let (status, body) = call(&ctls[0], "POST", &path, None).await;
    assert_eq!(status, 409, "no CA key on this controller: {body}");
    let pki = dir.path().join("pki");
    let _replica = Replica::start(
        &url,
        uri,
        "r1",
        dir.path(),
        &[
            "--backend",
            "sim",
            "--lease",
            "1s",
            "--tls-pki",
            pki.to_str().unwrap(),
        ],
    );
    let host_id = Uuid::parse_str(&host).unwrap();
    for round in 0..2 {
        let (status, body) = call(&ctls[1], "POST", &path, None).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.get("key").is_none() && body["not_after"].is_string(),
            "{body}"
        );
        let store = ctls[0].store.clone();
        let creds = tokio::task::spawn_blocking(move || store.launcher_creds(host_id))
            .await
            .unwrap()
            .unwrap();
        assert!(creds.cert_pem.contains("BEGIN CERTIFICATE"));
        assert_eq!(creds.ca_pem, ca_pem);
        let (cert, key) = (pki.join("clientcert.pem"), pki.join("clientkey.pem"));
        testkit::wait_until(T, &format!("round {round}: the replica's copy"), || async {
            std::fs::read_to_string(&cert).is_ok_and(|c| c == creds.cert_pem)
                && std::fs::read_to_string(&key).is_ok_and(|k| k == creds.key_pem)
        })
        .await;
        assert_eq!(
            std::fs::read_to_string(pki.join("cacert.pem")).unwrap(),
            ca_pem
        );
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    // Unknown host: 404.
    let (status, _) = call(
        &ctls[1],
        "POST",
        &format!("/cumulo/v1/nodes/{}/credentials", Uuid::new_v4()),
        None,
    )
    .await;
    assert_eq!(status, 404);
}
