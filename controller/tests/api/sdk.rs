//! openstacksdk (the Python SDK under the `openstack` CLI) against the API with the fake cluster:
//! the scripts of `controller/tests/sdk/` drive its identity, compute and image proxies, each
//! check with its assertions, and fail with the first check that does not hold. They run with
//! the python of the CLI's venv (`scripts/openstack-venv.sh` installs openstacksdk with the
//! CLI); skipped with a message when it is missing, unless `CUMULO_REQUIRE_OPENSTACK=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT};
use serde_json::{Value, json};

use crate::openstack::openstack_or_skip;
use crate::support::{PASSWORD, TestTenant, World};

/// The python of the venv that holds the `openstack` CLI (and so openstacksdk, which the CLI is
/// built on): `python`, else `python3`, beside the CLI; or `None` (with a message) when the test
/// should be skipped.
fn python_or_skip() -> Option<PathBuf> {
    let cli = openstack_or_skip()?;
    let python = ["python", "python3"]
        .into_iter()
        .map(|name| cli.with_file_name(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| cli.with_file_name("python"));
    if !python.is_file() {
        if std::env::var("CUMULO_REQUIRE_OPENSTACK").as_deref() == Ok("1") {
            panic!(
                "CUMULO_REQUIRE_OPENSTACK=1 but no {} next to the openstack CLI",
                python.display()
            );
        }
        eprintln!(
            "SKIPPED: no {} next to the openstack CLI (run scripts/openstack-venv.sh)",
            python.display()
        );
        return None;
    }
    Some(python)
}

fn account(t: &TestTenant) -> Value {
    json!({
        "user": t.user_name,
        "user_id": t.user,
        "password": PASSWORD,
        "project": t.name,
        "project_id": t.id,
    })
}

/// The world file the scripts read (`controller/tests/sdk/cumulo_sdk.py` describes it).
fn world_file(world: &World, dir: &Path, cacert: Option<&Path>) -> PathBuf {
    let body = json!({
        "auth_url": format!("{}/v3", world.api.url),
        "cacert": cacert,
        "admin": {"user": ADMIN_NAME, "password": ADMIN_PASSWORD, "project": ADMIN_PROJECT},
        "alice": account(&world.a),
        "bob": account(&world.b),
        "flavor": {
            "id": world.flavor.id,
            "name": world.flavor.name,
            "vcpus": world.flavor.vcpus,
            "ram": world.flavor.memory_mb,
            "disk": world.flavor.disk_gb,
        },
        "image": {"id": world.image.id, "name": world.image.name},
    });
    let path = dir.join("world.json");
    std::fs::write(&path, body.to_string()).unwrap();
    path
}

/// Runs `controller/tests/sdk/<script>` with `python` against `world` (on the blocking pool:
/// the script blocks); it must succeed. Its output goes to stderr (shown with `--nocapture`), and
/// is the failure's message. `CUMULO_OPENSTACK_DEBUG=1` has the SDK log every request.
async fn run_checks(python: PathBuf, script: &str, world: &World, cacert: Option<&Path>) {
    let dir = tempfile::tempdir().unwrap();
    let world_json = world_file(world, dir.path(), cacert);
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("sdk")
        .join(script);
    let (status, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let mut command = Command::new(&python);
        // As the CLI runs: nothing from the host's OS_* variables or clouds.yaml (the script
        // passes everything explicitly, and clears them too).
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OS_") {
                command.env_remove(&key);
            }
        }
        let output = command
            .env("OS_CLIENT_CONFIG_FILE", "/dev/null")
            .env("PYTHONWARNINGS", "ignore")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .arg(&script)
            .arg(&world_json)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        (
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    })
    .await
    .unwrap();
    eprintln!("{stdout}");
    if !stderr.is_empty() {
        // Empty unless something went wrong, or with CUMULO_OPENSTACK_DEBUG=1 (the SDK's log).
        eprintln!("{stderr}");
    }
    assert!(
        status.success(),
        "the openstacksdk checks failed ({status}):\n{stdout}\nstderr:\n{stderr}"
    );
}

/// `conn.identity`: tokens (issue, validate, check, revoke), the catalog's endpoints, users and
/// projects as the admin and as a member (Keystone's 403s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstacksdk_drives_the_identity_api() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let world = World::start().await;
    run_checks(python, "identity_checks.py", &world, None).await;
    world.stop().await;
}

/// The identity checks over HTTPS, the CA given to the SDK as `cacert`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstacksdk_over_https() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let pki = testkit::TestPki::new();
    let server = pki.leaf(ssntp::Role::CONTROLLER, Some(uuid::Uuid::new_v4()));
    let tls = controller::api::server_tls_config(
        server.ca_pem.as_bytes(),
        server.cert_pem.as_bytes(),
        server.key_pem.as_bytes(),
    )
    .unwrap();
    let world = World::start_tls(Some(tls)).await;
    assert!(world.api.url.starts_with("https://"));
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.ca_pem).unwrap();
    run_checks(python, "identity_checks.py", &world, Some(&ca)).await;
    world.stop().await;
}

/// `conn.compute`: flavors, servers (create, wait, list with filters, stop, start, reboot,
/// actions, console output, delete), key pairs, limits and quota sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstacksdk_drives_the_compute_api() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let world = World::start().await;
    run_checks(python, "compute_checks.py", &world, None).await;
    world.stop().await;
}

/// `conn.image`: create with data, get, list, find, download (bytes and checksums), update
/// (name, tags, properties), members, delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstacksdk_drives_the_image_api() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let world = World::start().await;
    run_checks(python, "image_checks.py", &world, None).await;
    world.stop().await;
}
