//! What `up` does through the API once the services run: the admin's login, waiting for the
//! node, the seed objects (flavors, the tiny image, a demo project and user, a workload), the
//! first instance; and the backend choice before anything starts.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::cluster::{Backend, password_file, wait_for};
use super::error::UpError;
use super::layout::{Layout, SESSION_URI, SYSTEM_URI};
use super::{UpOptions, libvirt};
use crate::client::{Connection, Credentials};
use crate::routes;

/// The demo project and user.
pub const DEMO: &str = "demo";
/// The first instance's name.
pub const FIRST: &str = "first";
/// The image `up` registers (the agents' image store names it the same).
pub const TINY_IMAGE: &str = "tiny";

/// What `seed` made, for the first instance and the exports.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// The API URL.
    pub url: String,
    /// The demo user's password.
    pub demo_password: String,
    /// The demo workload's UUID.
    pub workload: String,
}

/// Whether the API answers its health check.
pub fn healthy(url: &str, ca: Option<&std::path::Path>) -> bool {
    Connection::anonymous(url, ca)
        .and_then(|c| c.get(routes::HEALTHZ))
        .is_ok()
}

/// Logs in as the first admin (password from the cluster's directory).
pub fn admin_login(layout: &Layout) -> Result<Connection, UpError> {
    let password = password_file(&layout.admin_password())?;
    Ok(Connection::login(&Credentials {
        url: layout.api_url(),
        username: "admin".into(),
        password,
        project: "admin".into(),
        ca_cert: layout.api_ca(),
    })?)
}

/// Whether a compute node has joined and reported its resources.
pub fn node_ready(admin: &Connection) -> bool {
    admin
        .get(routes::NODES)
        .ok()
        .map(|v| routes::items(&v))
        .is_some_and(|nodes| {
            nodes.iter().any(|n| {
                n["status"].as_str() == Some("ready")
                    && n["hostname"].as_str().is_some_and(|h| !h.is_empty())
            })
        })
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether `program` is installed: on `PATH`, or in the system directories (daemons live in
/// /usr/sbin, which a user's `PATH` may lack).
fn have(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(std::path::PathBuf::from))
        .any(|dir| dir.join(program).is_file())
}

/// The Debian packages the libvirt backend needs.
pub const LIBVIRT_PACKAGES: &str = "libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients \
     qemu-system-x86 qemu-utils busybox-static cpio";

/// What `up` runs instances with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The backend.
    pub backend: Backend,
    /// With libvirt: the URI the agent uses.
    pub uri: Option<&'static str>,
    /// One line on the choice, for the progress line.
    pub note: String,
}

fn sim(note: String) -> Chosen {
    Chosen {
        backend: Backend::Sim,
        uri: None,
        note,
    }
}

/// Chooses the backend: libvirt if asked and it can be had (installing it when allowed), else
/// sim, with a note that says why and what to install. As root libvirt's system daemon
/// (`qemu:///system`; a private one is started when none answers); as another user a daemon of
/// the user's own (`qemu:///session`), so that QEMU runs as the user and reaches the user's
/// files.
pub fn choose_backend(options: &UpOptions) -> Result<Chosen, UpError> {
    if options.backend == Backend::Sim {
        return Ok(sim("sim (asked)".into()));
    }
    let missing = || !(have("virsh") && have("libvirtd") && have("qemu-system-x86_64"));
    if missing() && (is_root() || options.install_deps) {
        let sudo = if is_root() { "" } else { "sudo " };
        let script = format!(
            "{sudo}apt-get update -q && DEBIAN_FRONTEND=noninteractive {sudo}apt-get install -y -q \
             --no-install-recommends {LIBVIRT_PACKAGES}"
        );
        let installed = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            return Ok(sim(format!(
                "sim: installing libvirt failed; try: {script}"
            )));
        }
    }
    if missing() {
        return Ok(sim(format!(
            "sim — WARNING: libvirt/qemu are not installed; for real VMs run: \
             sudo apt-get install --no-install-recommends {LIBVIRT_PACKAGES} \
             (or cumulo up --install-deps)"
        )));
    }
    let libvirt = |uri, note: &str| Chosen {
        backend: Backend::Libvirt,
        uri: Some(uri),
        note: note.to_string(),
    };
    if !is_root() {
        if libvirt::answers(SESSION_URI) {
            return Ok(libvirt(SESSION_URI, "libvirt (qemu:///session)"));
        }
        return Ok(match libvirt::start_session(&options.layout) {
            Ok(()) => libvirt(
                SESSION_URI,
                "libvirt (qemu:///session: this user's libvirtd started; cumulo down stops it)",
            ),
            Err(e) => sim(format!(
                "sim — WARNING: this user's libvirtd (qemu:///session) could not be started \
                 ({e}); run cumulo up as root for the system's"
            )),
        });
    }
    if libvirt::answers(SYSTEM_URI) {
        return Ok(libvirt(SYSTEM_URI, "libvirt (qemu:///system)"));
    }
    Ok(match libvirt::start_private(&options.layout) {
        Ok(()) => libvirt(
            SYSTEM_URI,
            "libvirt (a private libvirtd started; cumulo down stops it)",
        ),
        Err(e) => sim(format!(
            "sim — WARNING: libvirtd could not be started ({e})"
        )),
    })
}

/// Finds an object by name in a listing, or makes it with `create`.
fn find_or_create(
    conn: &Connection,
    list: &str,
    name: &str,
    create: &Value,
) -> Result<Value, UpError> {
    let listing = conn.get(list)?;
    if let Some(found) = routes::items(&listing)
        .into_iter()
        .find(|o| o["name"].as_str() == Some(name))
    {
        return Ok(found);
    }
    Ok(routes::item(conn.post(list, create)?))
}

fn id_of(value: &Value) -> Result<String, UpError> {
    value["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| UpError::Other(format!("the API's answer has no id: {value}")))
}

/// Makes the flavors, the tiny image, the demo project, user and workload (each only if it is
/// not there yet).
pub fn seed(layout: &Layout, admin: &Connection, _backend: Backend) -> Result<Seeded, UpError> {
    for (name, vcpus, ram, disk) in [
        ("tiny", 1, 256, 1),
        ("small", 1, 512, 5),
        ("medium", 2, 2048, 20),
    ] {
        find_or_create(
            admin,
            routes::FLAVORS,
            name,
            &json!({"name": name, "vcpus": vcpus, "memory_mb": ram, "disk_gb": disk}),
        )?;
    }
    find_or_create(
        admin,
        routes::IMAGES,
        TINY_IMAGE,
        &json!({"name": TINY_IMAGE, "kind": "raw", "reference": TINY_IMAGE, "public": true}),
    )?;
    let tenant = find_or_create(
        admin,
        routes::TENANTS,
        DEMO,
        &json!({"name": DEMO, "quota": {"instances": 20, "vcpus": 40, "memory_mb": 40960}}),
    )?;
    let tenant_id = id_of(&tenant)?;
    let demo_password = password_file(&layout.demo_password())?;
    let user = find_or_create(
        admin,
        routes::USERS,
        DEMO,
        &json!({"name": DEMO, "password": demo_password}),
    )?;
    let user_id = id_of(&user)?;
    admin.post(
        &routes::roles(&user_id),
        &json!({"tenant": tenant_id, "role": "member"}),
    )?;
    let url = layout.api_url();
    let demo = demo_login(&url, layout.api_ca(), &demo_password)?;
    let flavors = admin.get(routes::FLAVORS)?;
    let tiny = routes::items(&flavors)
        .into_iter()
        .find(|f| f["name"].as_str() == Some("tiny"))
        .ok_or_else(|| UpError::Other("the tiny flavor is missing".into()))?;
    let images = admin.get(routes::IMAGES)?;
    let image = routes::items(&images)
        .into_iter()
        .find(|i| i["name"].as_str() == Some(TINY_IMAGE))
        .ok_or_else(|| UpError::Other("the tiny image is missing".into()))?;
    let workload = find_or_create(
        &demo,
        routes::WORKLOADS,
        "tiny",
        &json!({"name": "tiny", "flavor": id_of(&tiny)?, "image": id_of(&image)?, "user_data": ""}),
    )?;
    Ok(Seeded {
        url,
        demo_password,
        workload: id_of(&workload)?,
    })
}

fn demo_login(
    url: &str,
    ca: Option<std::path::PathBuf>,
    password: &str,
) -> Result<Connection, UpError> {
    Ok(Connection::login(&Credentials {
        url: url.to_string(),
        username: DEMO.into(),
        password: password.to_string(),
        project: DEMO.into(),
        ca_cert: ca,
    })?)
}

/// Boots the first instance (once: an existing one is reused) and waits until it is active.
pub fn first_instance(
    layout: &Layout,
    seeded: &Seeded,
    backend: Backend,
) -> Result<String, UpError> {
    let demo = demo_login(&seeded.url, layout.api_ca(), &seeded.demo_password)?;
    let listing = demo.get(routes::INSTANCES)?;
    let existing = routes::items(&listing)
        .into_iter()
        .find(|i| i["name"].as_str() == Some(FIRST));
    // A console log left by an earlier boot does not count: only what is written from now on.
    let console_seen =
        |id: &str| std::fs::metadata(libvirt::console_path(layout, id)).map_or(0, |m| m.len());
    let mut skip = 0;
    let id = match existing {
        Some(existing) => {
            let id = id_of(&existing)?;
            skip = console_seen(&id);
            match existing["state"].as_str() {
                // Stopped by `cumulo down`: start it again.
                Some("exited") => {
                    demo.post(&routes::instance_action(&id, "start"), &json!({}))?;
                }
                Some("error") => {
                    return Err(UpError::Other(format!(
                        "the first instance {id} is in error ({}); delete it with \
                         `cumulo instance delete {id}` and run up again",
                        routes::fault_text(&existing).unwrap_or_else(|| "no reason given".into())
                    )));
                }
                _ => {}
            }
            id
        }
        None => {
            let made = demo.post(
                routes::INSTANCES,
                &json!({"workload": seeded.workload, "name": FIRST, "count": 1}),
            )?;
            let first = routes::items(&made)
                .into_iter()
                .next()
                .unwrap_or_else(|| routes::item(made.clone()));
            id_of(&first)?
        }
    };
    let path = routes::instance(&id);
    let console = libvirt::console_path(layout, &id);
    let marker = format!("CUMULO-GUEST-UP {id}");
    let booted = || {
        std::fs::read(&console).is_ok_and(|bytes| {
            let from = usize::try_from(skip).unwrap_or(0);
            String::from_utf8_lossy(bytes.get(from..).unwrap_or_default()).contains(&marker)
        })
    };
    // Done when it is active (for a VM: and its console shows that it booted); an instance in
    // error, or a VM that stopped before it booted, ends the wait at once with its cause.
    let mut failed = None;
    // A start asked of an exited instance shows `exited` until the agent takes it.
    let mut left_exited = false;
    let waited = wait_for(
        "first instance",
        &layout.log("agent"),
        Duration::from_secs(240),
        None,
        || {
            let Ok(instance) = demo.get(&path).map(routes::item) else {
                return false;
            };
            let state = instance["state"].as_str();
            left_exited |= state != Some("exited");
            match state {
                Some("active") => backend == Backend::Sim || booted(),
                Some("error") => {
                    failed = Some(
                        routes::fault_text(&instance).unwrap_or_else(|| "no reason given".into()),
                    );
                    true
                }
                Some("exited") if backend == Backend::Libvirt && left_exited => {
                    failed = Some(format!(
                        "the VM stopped before its console showed that it booted; the end of \
                         its console ({}):\n{}",
                        console.display(),
                        super::cluster::tail(&console, 10)
                    ));
                    true
                }
                _ => false,
            }
        },
    );
    if let Some(cause) = failed {
        return Err(UpError::InstanceFailed {
            what: "the first instance".into(),
            id,
            cause,
            log: layout.log("agent").display().to_string(),
        });
    }
    waited?;
    Ok(id)
}

/// The exports for `cumulo` and `openstack`.
pub fn exports(layout: &Layout, seeded: &Seeded) -> String {
    // Over HTTPS the clients trust the cluster's CA.
    let ca = layout.api_ca().map_or_else(String::new, |ca| {
        format!(
            "export CUMULO_CA_CERT={ca}\nexport OS_CACERT={ca}\n",
            ca = ca.display()
        )
    });
    let exports = format!(
        "export CUMULO_CONTROLLER={url}\nexport CUMULO_USERNAME={DEMO}\nexport CUMULO_PASSWORD={pw}\n\
         export CUMULO_PROJECT={DEMO}\n\
         export OS_AUTH_URL={url}/v3\nexport OS_IDENTITY_API_VERSION=3\nexport OS_USERNAME={DEMO}\n\
         export OS_PASSWORD={pw}\nexport OS_PROJECT_NAME={DEMO}\nexport OS_USER_DOMAIN_NAME=Default\n\
         export OS_PROJECT_DOMAIN_NAME=Default\n",
        url = seeded.url,
        pw = seeded.demo_password,
    );
    exports + &ca
}
