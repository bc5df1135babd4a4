//! Containers for real: the runc backend with a busybox root file system made here (root,
//! `runc` and a static busybox: `scripts/deps.sh` installs them). The user data runs as the
//! container's command and its output is the console; the flavor's memory is the cgroup's
//! limit; a stop keeps the writable layer and a start runs the command again over it; an exit
//! of its own ends `wait_exit`; a tenant NIC's veth end becomes `eth0` with the START's address
//! and MAC; a delete leaves nothing (directory, runtime state, namespace).
//!
//! Without root, runc or a static busybox the tests say why and pass, unless
//! `CUMULO_REQUIRE_NETNS=1` (CI) makes that a failure.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agent::backend::container::{ContainerBackend, ContainerConfig, RUNTIME_ROOT, netns_name};
use agent::backend::{Backend, BackendError, Power};
use agent::model::{Firmware, InstanceRole, InstanceSpec, NicSpec, Resources, VmKind};
use testkit::wait_until;
use uuid::Uuid;

const T: Duration = Duration::from_secs(30);

/// `<dir>/images/bb.tar`: a busybox root file system; the image store.
fn busybox_image(dir: &Path) -> PathBuf {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    testkit::containers::busybox_tarball(&images, "bb");
    images
}

fn backend(dir: &Path) -> ContainerBackend {
    ContainerBackend::new(ContainerConfig {
        dir: dir.join("containers"),
        images: busybox_image(dir),
        runtime: "runc".into(),
        source: None,
        cache_cap: 1 << 30,
    })
    .unwrap()
}

fn spec(user_data: &str) -> InstanceSpec {
    InstanceSpec {
        instance: Uuid::new_v4(),
        tenant: Uuid::from_u128(7),
        workload: Uuid::nil(),
        kind: VmKind::Container,
        role: InstanceRole::Workload,
        firmware: Firmware::Legacy,
        image: "bb".into(),
        resources: Resources {
            vcpus: 1,
            mem_mb: 64,
            disk_mb: 0,
        },
        nic: None,
        disks: Vec::new(),
        volumes: Vec::new(),
        user_data: Some(user_data.into()),
        meta_data: BTreeMap::from([("hostname".to_string(), "box-1".to_string())]),
        restart: false,
        kernel: None,
    }
}

/// Deletes the container when dropped (also when the test fails).
struct Cleanup(ContainerBackend, Uuid);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (b, id) = (self.0.clone(), self.1);
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(b.delete(id))
        })
        .join();
    }
}

async fn console_has(b: &ContainerBackend, id: Uuid, text: &str) -> String {
    wait_until(T, &format!("the console to say {text:?}"), || async {
        b.console(id, 100).await.unwrap_or_default().contains(text)
    })
    .await;
    b.console(id, 100).await.unwrap()
}

async fn power(b: &ContainerBackend, id: Uuid) -> Option<Power> {
    b.list()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.instance == id)
        .map(|e| e.power)
}

/// A backend in a temporary directory and a spec with `user_data` whose container is
/// deleted when the guard goes; `None` (said why) when the tests cannot run here.
fn setup(user_data: &str) -> Option<(tempfile::TempDir, ContainerBackend, InstanceSpec, Cleanup)> {
    if !testkit::containers::can_run("containers") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let s = spec(user_data);
    let cleanup = Cleanup(b.clone(), s.instance);
    Some((dir, b, s, cleanup))
}

const LOOP: &str = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done";

#[tokio::test]
async fn a_container_runs_its_user_data_keeps_its_layer_across_a_stop_and_leaves_nothing() {
    let Some((dir, b, s, _cleanup)) = setup(&format!(
        "#!/bin/sh\necho \"hello from $CUMULO_INSTANCE on $(hostname)\"\n[ -f /kept ] && echo 'layer kept'\necho x > /kept\n{LOOP}\n"
    )) else {
        return;
    };
    let id = s.instance;
    b.create(&s).await.unwrap();
    assert_eq!(b.create(&s).await, Err(BackendError::Exists));
    assert_eq!(power(&b, id).await, Some(Power::Off));
    b.start(id).await.unwrap();
    console_has(&b, id, &format!("hello from {id} on box-1")).await;
    assert_eq!(power(&b, id).await, Some(Power::Running));
    // The flavor's memory is the cgroup's limit.
    let limit = ["memory/cumulo", "cumulo"]
        .iter()
        .find_map(|at| {
            let base = format!("/sys/fs/cgroup/{at}/{id}");
            std::fs::read_to_string(format!("{base}/memory.limit_in_bytes"))
                .or_else(|_| std::fs::read_to_string(format!("{base}/memory.max")))
                .ok()
        })
        .unwrap();
    assert_eq!(limit.trim(), (64u64 << 20).to_string());
    let stats = b.stats().await;
    assert!(stats.iter().any(|(i, _)| *i == id), "{stats:?}");
    // Paused and back.
    b.action(id, agent::model::Action::Pause).await.unwrap();
    assert_eq!(power(&b, id).await, Some(Power::Paused));
    b.action(id, agent::model::Action::Unpause).await.unwrap();
    // A stop keeps the root file system: the next start finds what the last run wrote.
    b.stop(id).await.unwrap();
    assert_eq!(power(&b, id).await, Some(Power::Off));
    b.start(id).await.unwrap();
    console_has(&b, id, "layer kept").await;
    b.delete(id).await.unwrap();
    assert!(!b.has(id));
    assert!(!dir.path().join("containers").join(id.to_string()).exists());
    assert!(!Path::new("/run/netns").join(netns_name(id)).exists());
    assert!(
        !Path::new(RUNTIME_ROOT)
            .join(format!("cumulo-{id}"))
            .exists()
    );
    assert_eq!(power(&b, id).await, None);
}

#[tokio::test]
async fn a_container_that_ends_is_off_and_bad_images_are_refused() {
    let Some((_dir, b, s, _cleanup)) = setup("echo bye") else {
        return;
    };
    let id = s.instance;
    b.create(&s).await.unwrap();
    b.start(id).await.unwrap();
    tokio::time::timeout(T, b.wait_exit(id)).await.unwrap();
    console_has(&b, id, "bye").await;
    assert_eq!(power(&b, id).await, Some(Power::Off));
    // It runs again from a start.
    b.start(id).await.unwrap();
    tokio::time::timeout(T, b.wait_exit(id)).await.unwrap();
    assert_eq!(
        b.console(id, 100).await.unwrap().matches("bye").count(),
        2,
        "the command ran twice"
    );
    for image in ["nothing", "../bb", "a/b"] {
        let mut bad = spec("true");
        bad.image = image.into();
        assert!(
            matches!(b.create(&bad).await, Err(BackendError::Image(_))),
            "{image}"
        );
        assert!(!b.has(bad.instance), "{image}: leftovers");
    }
}

#[tokio::test]
async fn a_tenant_nic_becomes_eth0_with_the_starts_address() {
    let Some((_dir, b, mut s, _cleanup)) = setup(&format!(
        "#!/bin/sh\nip -o addr show eth0\nip -o link show eth0\nip route\n{LOOP}\n"
    )) else {
        return;
    };
    let id = s.instance;
    s.nic = Some(NicSpec {
        mac: [0x02, 0, 0x0a, 0, 0, 0x05],
        vnic_uuid: Uuid::new_v4(),
        concentrator_uuid: Uuid::new_v4(),
        concentrator_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 9)),
        subnet_addr: IpAddr::V4(Ipv4Addr::new(10, 7, 0, 0)),
        subnet_prefix: 24,
        subnet_key: 77,
        private_ip: IpAddr::V4(Ipv4Addr::new(10, 7, 0, 5)),
        public_ip: false,
        firewall: None,
    });
    // What the tenant network layer makes for a container: a veth pair on the node.
    let (host, peer) = (agent::net::tap_name(id), agent::net::veth_peer_name(id));
    let made = Command::new("ip")
        .args(["link", "add", &host, "type", "veth", "peer", "name", &peer])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    b.create(&s).await.unwrap();
    b.start(id).await.unwrap();
    let said = console_has(&b, id, "default via").await;
    assert!(said.contains("inet 10.7.0.5/24"), "{said}");
    assert!(said.contains("link/ether 02:00:0a:00:00:05"), "{said}");
    assert!(said.contains("default via 10.7.0.1"), "{said}");
    b.delete(id).await.unwrap();
    // The pair went with the delete.
    let left = Command::new("ip")
        .args(["link", "show", &host])
        .output()
        .unwrap();
    assert!(!left.status.success(), "{host} is still there");
}
