//! What `up` does through the API once the services run: the admin's login, waiting for the
//! node, the seed objects (flavors, the tiny image, a demo project and user, a workload), the
//! first instance; and the backend choice before anything starts.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::UpOptions;
use super::cluster::{Backend, UpError, password_file, wait_for};
use super::layout::Layout;
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
pub fn healthy(url: &str) -> bool {
    Connection::anonymous(url, None)
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
        ca_cert: None,
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

fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The Debian packages the libvirt backend needs.
pub const LIBVIRT_PACKAGES: &str = "libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients \
     qemu-system-x86 qemu-utils busybox-static cpio";

/// Chooses the backend: libvirt if asked and it can be had (installing it when allowed), else
/// sim, with a note that says why and what to install.
pub fn choose_backend(options: &UpOptions) -> Result<(Backend, String), UpError> {
    if options.backend == Backend::Sim {
        return Ok((Backend::Sim, "sim (asked)".into()));
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
            return Ok((
                Backend::Sim,
                format!("sim: installing libvirt failed; try: {script}"),
            ));
        }
    }
    if missing() {
        return Ok((
            Backend::Sim,
            format!(
                "sim — WARNING: libvirt/qemu are not installed; for real VMs run: \
                 sudo apt-get install --no-install-recommends {LIBVIRT_PACKAGES} \
                 (or cumulo up --install-deps)"
            ),
        ));
    }
    if !libvirt_answers() {
        return Ok((
            Backend::Sim,
            "sim — WARNING: no libvirt daemon answers at qemu:///system; start libvirtd \
             (scripts/libvirt.sh start, as root) for real VMs"
                .into(),
        ));
    }
    Ok((Backend::Libvirt, "libvirt (qemu:///system)".into()))
}

fn libvirt_answers() -> bool {
    Command::new("virsh")
        .args(["-c", "qemu:///system", "version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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
    let demo = demo_login(&url, &demo_password)?;
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

fn demo_login(url: &str, password: &str) -> Result<Connection, UpError> {
    Ok(Connection::login(&Credentials {
        url: url.to_string(),
        username: DEMO.into(),
        password: password.to_string(),
        project: DEMO.into(),
        ca_cert: None,
    })?)
}

/// Boots the first instance (once: an existing one is reused) and waits until it is active.
pub fn first_instance(
    layout: &Layout,
    seeded: &Seeded,
    _backend: Backend,
) -> Result<String, UpError> {
    let demo = demo_login(&seeded.url, &seeded.demo_password)?;
    let listing = demo.get(routes::INSTANCES)?;
    let id = match routes::items(&listing)
        .into_iter()
        .find(|i| i["name"].as_str() == Some(FIRST))
    {
        Some(existing) => id_of(&existing)?,
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
    wait_for(
        "first instance",
        &layout.log("agent"),
        Duration::from_secs(120),
        || {
            demo.get(&path)
                .map(routes::item)
                .is_ok_and(|i| i["state"].as_str() == Some("active"))
        },
    )?;
    Ok(id)
}

/// The exports for `cumulo` and `openstack`.
pub fn exports(layout: &Layout, seeded: &Seeded) -> String {
    let _ = layout;
    format!(
        "export CUMULO_CONTROLLER={url}\nexport CUMULO_USERNAME={DEMO}\nexport CUMULO_PASSWORD={pw}\n\
         export CUMULO_PROJECT={DEMO}\n\
         export OS_AUTH_URL={url}/v3\nexport OS_IDENTITY_API_VERSION=3\nexport OS_USERNAME={DEMO}\n\
         export OS_PASSWORD={pw}\nexport OS_PROJECT_NAME={DEMO}\nexport OS_USER_DOMAIN_NAME=Default\n\
         export OS_PROJECT_DOMAIN_NAME=Default\n",
        url = seeded.url,
        pw = seeded.demo_password,
    )
}

/// Whether `path` holds a console log with the guest's marker for `id`.
pub fn console_shows(path: &Path, id: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| text.contains(id))
}
