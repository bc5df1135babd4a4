//! The libvirt backend against libvirt's `test:///default` driver (in process, no daemon): the
//! lifecycle, images, seeds, what is ours and what is not, and an unreachable libvirt.

use super::*;
use crate::backend::Power;
use crate::model::{Firmware, Resources, VmKind};
use std::collections::BTreeMap;

fn spec(instance: Uuid, image: &str) -> InstanceSpec {
    InstanceSpec {
        instance,
        tenant: Uuid::from_u128(7),
        workload: Uuid::nil(),
        kind: VmKind::Qemu,
        role: crate::model::InstanceRole::Workload,
        firmware: Firmware::Legacy,
        image: image.into(),
        resources: Resources {
            vcpus: 2,
            mem_mb: 256,
            disk_mb: 100,
        },
        nic: None,
        disks: Vec::new(),
        volumes: Vec::new(),
        user_data: Some("cumulo-test: hello\n".into()),
        meta_data: BTreeMap::from([("hostname".to_string(), "web-1".to_string())]),
        restart: false,
        kernel: None,
    }
}

/// A backend over `test:///default` in a temporary state directory, with a kernel image
/// `tiny`.
fn backend(dir: &Path) -> LibvirtBackend {
    let mut config = LibvirtConfig::new("test:///default", Accel::Tcg, dir);
    config.poll = Duration::from_millis(10);
    let b = LibvirtBackend::new(config).unwrap();
    images::tests::put_kernel_image(&dir.join("images"), "tiny");
    b
}

/// Fresh UUIDs: the test driver's state is shared by every connection of the process.
fn fresh() -> Uuid {
    Uuid::new_v4()
}

fn listed(list: &[Existing], instance: Uuid) -> Option<bool> {
    list.iter()
        .find(|e| e.instance == instance)
        .map(|e| e.power.is_active())
}

#[tokio::test]
async fn lifecycle_of_a_kernel_image() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let id = fresh();
    b.create(&spec(id, "tiny")).await.unwrap();
    let files = b.instance_dir(id);
    for f in ["seed.iso", "initrd", "domain.xml"] {
        assert!(files.join(f).is_file(), "{f}");
    }
    // The instance's initrd is the image's followed by the seed's archive.
    let initrd = std::fs::read(files.join("initrd")).unwrap();
    assert!(initrd.starts_with(b"070701rest-of-a-cpio"));
    let seed = Seed::new(
        id,
        Some("cumulo-test: hello\n"),
        &spec(id, "tiny").meta_data,
    );
    assert!(initrd.ends_with(&seed.cpio()));
    let xml = std::fs::read_to_string(files.join("domain.xml")).unwrap();
    assert!(xml.contains(&format!("<name>cumulo-{id}</name>")));
    assert!(xml.contains("<vcpu>2</vcpu>") && xml.contains("<memory unit='MiB'>256</memory>"));
    assert!(xml.contains(&format!("cumulo.instance={id}")));
    assert_eq!(b.console_path(id), files.join("console.log"));

    assert_eq!(listed(&b.list().await.unwrap(), id), Some(false));
    assert_eq!(b.create(&spec(id, "tiny")).await, Err(BackendError::Exists));
    b.start(id).await.unwrap();
    assert_eq!(listed(&b.list().await.unwrap(), id), Some(true));
    // Running: wait_exit does not resolve.
    let waiting = tokio::time::timeout(Duration::from_millis(100), b.wait_exit(id)).await;
    assert!(waiting.is_err(), "a running instance has not exited");

    let first = b.stats().await;
    let (_, usage) = first.iter().find(|(i, _)| *i == id).unwrap();
    assert_eq!(usage.mem_mb, 256);
    assert_eq!(usage.cpu_percent, None, "no CPU % before a second sample");
    let second = b.stats().await;
    let (_, usage) = second.iter().find(|(i, _)| *i == id).unwrap();
    assert!(usage.cpu_percent.is_some_and(|p| p <= 100));

    b.stop(id).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), b.wait_exit(id))
        .await
        .unwrap();
    assert!(!b.stats().await.iter().any(|(i, _)| *i == id));
    b.stop(id).await.unwrap();
    b.delete(id).await.unwrap();
    assert_eq!(listed(&b.list().await.unwrap(), id), None);
    assert!(!files.exists(), "the instance's directory is removed");
    assert_eq!(b.start(id).await, Err(BackendError::NotFound));
    b.delete(id).await.unwrap();
}

/// Actions on a domain: pause and unpause, suspend (a managed save) and resume, a hard reboot;
/// the power state listed follows; a stop keeps the domain and its files; a stop of a suspended
/// domain drops its saved memory.
#[tokio::test]
async fn actions_and_power_states() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let id = fresh();
    b.create(&spec(id, "tiny")).await.unwrap();
    b.start(id).await.unwrap();
    let power = |list: Vec<Existing>| list.iter().find(|e| e.instance == id).map(|e| e.power);
    b.action(id, Action::Pause).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), Some(Power::Paused));
    // Paused is not an exit.
    let waiting = tokio::time::timeout(Duration::from_millis(100), b.wait_exit(id)).await;
    assert!(waiting.is_err(), "a paused instance has not exited");
    b.action(id, Action::Unpause).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), Some(Power::Running));
    b.action(id, Action::RebootHard).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), Some(Power::Running));
    b.action(id, Action::Suspend).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), Some(Power::Saved));
    b.action(id, Action::Resume).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), Some(Power::Running));
    b.action(id, Action::Suspend).await.unwrap();
    b.stop(id).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), Some(Power::Off));
    assert!(b.instance_dir(id).join("domain.xml").is_file(), "kept");
    b.start(id).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), Some(Power::Running));
    assert_eq!(
        b.action(fresh(), Action::Pause).await,
        Err(BackendError::NotFound)
    );
    b.delete(id).await.unwrap();
    assert_eq!(power(b.list().await.unwrap()), None);
}

/// An instance that stops on its own (here: destroyed behind our back) is seen exiting.
#[tokio::test]
async fn an_exit_of_its_own_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let id = fresh();
    b.create(&spec(id, "tiny")).await.unwrap();
    b.start(id).await.unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.wait_exit(id).await })
    };
    b.0.conn
        .run(move |c| Domain::lookup_by_uuid(c, id)?.destroy())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    b.delete(id).await.unwrap();
}

#[tokio::test]
async fn missing_and_corrupt_images_are_image_failures_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    images::tests::put_kernel_image(&dir.path().join("images"), "broken");
    std::fs::write(dir.path().join("images/broken/kernel"), b"junk").unwrap();
    std::fs::write(dir.path().join("images/junk.qcow2"), b"junk").unwrap();
    for image in ["no-such-image", "broken", "junk", "../escape"] {
        let id = fresh();
        let err = b.create(&spec(id, image)).await.unwrap_err();
        assert!(matches!(err, BackendError::Image(_)), "{image}: {err:?}");
        assert!(!b.instance_dir(id).exists());
        assert_eq!(listed(&b.list().await.unwrap(), id), None);
    }
    let mut container = spec(fresh(), "tiny");
    container.kind = VmKind::Container;
    assert!(matches!(
        b.create(&container).await,
        Err(BackendError::Launch(_))
    ));
}

#[tokio::test]
async fn a_disk_image_boots_from_an_overlay() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let base = dir.path().join("images/disk.qcow2");
    let made = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(&base)
        .arg("8M")
        .status()
        .unwrap();
    assert!(made.success());
    let id = fresh();
    b.create(&spec(id, "disk")).await.unwrap();
    let overlay = b.instance_dir(id).join("disk.qcow2");
    assert!(overlay.is_file());
    let xml = std::fs::read_to_string(b.instance_dir(id).join("domain.xml")).unwrap();
    assert!(xml.contains(&format!("<source file='{}'/>", overlay.display())));
    assert!(xml.contains("<boot dev='hd'/>"));
    b.start(id).await.unwrap();
    b.delete(id).await.unwrap();
    assert!(!b.instance_dir(id).exists());
    assert!(base.is_file(), "the base stays");
}

/// Domains without our mark: never listed, stopped or removed; a START that clashes with one
/// (by UUID or by name) is refused as `Exists`.
#[tokio::test]
async fn domains_we_did_not_create_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let foreign = |name: String, uuid: Uuid| {
        format!(
            "<domain type='qemu'><name>{name}</name><uuid>{uuid}</uuid><memory unit='MiB'>64</memory><vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os></domain>"
        )
    };
    // Same UUID as the instance, another name.
    let by_uuid = fresh();
    let xml = foreign(format!("theirs-{by_uuid}"), by_uuid);
    b.0.conn
        .run(move |c| {
            let d = Domain::define_xml(c, &xml)?;
            d.create().map(|_| ())
        })
        .await
        .unwrap();
    // Our name, another UUID.
    let by_name = fresh();
    let xml = foreign(xml::domain_name(by_name), fresh());
    b.0.conn
        .run(move |c| Domain::define_xml(c, &xml).map(|_| ()))
        .await
        .unwrap();

    for id in [by_uuid, by_name] {
        assert_eq!(b.create(&spec(id, "tiny")).await, Err(BackendError::Exists));
        assert!(!b.instance_dir(id).exists());
    }
    let list = b.list().await.unwrap();
    assert_eq!(listed(&list, by_uuid), None, "not ours: not listed");
    b.stop(by_uuid).await.unwrap();
    b.delete(by_uuid).await.unwrap();
    b.delete(by_name).await.unwrap();
    assert_eq!(
        b.start(by_uuid).await,
        Err(BackendError::NotFound),
        "not ours: not started"
    );
    let (active, name_kept) =
        b.0.conn
            .run(move |c| {
                let d = Domain::lookup_by_uuid(c, by_uuid)?;
                let kept = Domain::lookup_by_name(c, &xml::domain_name(by_name)).is_ok();
                Ok((d.is_active()?, kept))
            })
            .await
            .unwrap();
    assert!(active, "still running");
    assert!(name_kept, "still defined");
    // The driver's own domain is not ours either.
    let theirs =
        b.0.conn
            .run(|c| Domain::lookup_by_name(c, "test")?.get_uuid())
            .await
            .unwrap();
    assert_eq!(listed(&b.list().await.unwrap(), theirs), None);
}

/// A removal cut short after the undefine (the agent killed in between) leaves a transient
/// running domain: it is still listed as ours, and the next delete powers it off.
#[tokio::test]
async fn a_transient_domain_left_by_a_cut_removal_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let b = backend(dir.path());
    let id = fresh();
    b.create(&spec(id, "tiny")).await.unwrap();
    b.start(id).await.unwrap();
    b.0.conn
        .run(move |c| Domain::lookup_by_uuid(c, id)?.undefine())
        .await
        .unwrap();
    assert_eq!(
        listed(&b.list().await.unwrap(), id),
        Some(true),
        "running, transient"
    );
    b.delete(id).await.unwrap();
    assert_eq!(listed(&b.list().await.unwrap(), id), None);
    assert!(!b.instance_dir(id).exists());
    let gone =
        b.0.conn
            .run(move |c| Ok(Domain::lookup_by_uuid(c, id).is_err()))
            .await
            .unwrap();
    assert!(gone);
    // Deleting what is gone is fine.
    b.delete(id).await.unwrap();
}

/// Two agents on one libvirt: each lists, measures, stops and deletes only the domains it
/// made (its node's); a domain of ours that names no owner is anybody's, as before owners.
#[tokio::test]
async fn another_nodes_domains_are_left_alone() {
    let owned = |dir: &Path, owner: Option<Uuid>| {
        let mut config = LibvirtConfig::new("test:///default", Accel::Tcg, dir);
        config.owner = owner;
        let b = LibvirtBackend::new(config).unwrap();
        images::tests::put_kernel_image(&dir.join("images"), "tiny");
        b
    };
    let (da, db, dl) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (node_a, node_b) = (fresh(), fresh());
    let a = owned(da.path(), Some(node_a));
    let b = owned(db.path(), Some(node_b));
    let legacy = owned(dl.path(), None);
    let (ia, ib, il) = (fresh(), fresh(), fresh());
    a.create(&spec(ia, "tiny")).await.unwrap();
    b.create(&spec(ib, "tiny")).await.unwrap();
    legacy.create(&spec(il, "tiny")).await.unwrap();
    for id in [ia, ib, il] {
        let by = [(ia, &a), (ib, &b), (il, &legacy)];
        by.iter()
            .find(|(i, _)| *i == id)
            .unwrap()
            .1
            .start(id)
            .await
            .unwrap();
    }
    let xml = std::fs::read_to_string(a.instance_dir(ia).join("domain.xml")).unwrap();
    assert!(xml.contains(&format!("<cumulo:node>{node_a}</cumulo:node>")));

    let (la, lb) = (a.list().await.unwrap(), b.list().await.unwrap());
    assert_eq!(listed(&la, ia), Some(true));
    assert_eq!(listed(&la, ib), None, "b's domain is not a's");
    assert_eq!(listed(&lb, ib), Some(true));
    assert_eq!(listed(&lb, ia), None, "a's domain is not b's");
    // An owner-less domain of ours is everybody's; a backend without an owner takes all.
    assert_eq!(listed(&la, il), Some(true));
    let ll = legacy.list().await.unwrap();
    assert!([ia, ib, il].iter().all(|i| listed(&ll, *i) == Some(true)));
    let measured: Vec<Uuid> = a.stats().await.into_iter().map(|(i, _)| i).collect();
    assert!(measured.contains(&ia) && !measured.contains(&ib));

    // b cannot stop, start, delete or fence a's domain.
    b.stop(ia).await.unwrap();
    b.delete(ia).await.unwrap();
    assert_eq!(b.start(ia).await, Err(BackendError::NotFound));
    assert_eq!(b.fence_token(ia).await, Ok(None));
    assert_eq!(b.set_fence_token(ia, 3).await, Err(BackendError::NotFound));
    assert_eq!(b.create(&spec(ia, "tiny")).await, Err(BackendError::Exists));
    assert_eq!(
        listed(&a.list().await.unwrap(), ia),
        Some(true),
        "still a's, running"
    );
    assert!(a.instance_dir(ia).is_dir());

    for (id, owner) in [(ia, &a), (ib, &b), (il, &legacy)] {
        owner.delete(id).await.unwrap();
        assert_eq!(listed(&legacy.list().await.unwrap(), id), None);
    }
}

/// libvirt that does not answer: typed failures, no panic, no exit reported.
#[tokio::test]
async fn an_unreachable_libvirt_fails_calls_but_reports_no_exit() {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!(
        "qemu:///system?socket={}",
        dir.path().join("nobody.sock").display()
    );
    let mut config = LibvirtConfig::new(&uri, Accel::Tcg, dir.path());
    config.poll = Duration::from_millis(10);
    let b = LibvirtBackend::new(config).unwrap();
    images::tests::put_kernel_image(&dir.path().join("images"), "tiny");
    let id = fresh();
    assert!(matches!(
        b.create(&spec(id, "tiny")).await,
        Err(BackendError::Launch(_))
    ));
    assert!(matches!(
        b.create(&spec(id, "missing")).await,
        Err(BackendError::Image(_))
    ));
    assert!(matches!(b.start(id).await, Err(BackendError::Launch(_))));
    assert!(b.stop(id).await.is_err());
    assert!(b.delete(id).await.is_err());
    assert!(b.list().await.is_err());
    assert!(b.stats().await.is_empty());
    let waiting = tokio::time::timeout(Duration::from_millis(100), b.wait_exit(id)).await;
    assert!(waiting.is_err(), "no answer is not an exit");
}

#[test]
fn accel_choices() {
    assert_eq!(Accel::Kvm.resolve(), DomainType::Kvm);
    assert_eq!(Accel::Tcg.resolve(), DomainType::Qemu);
    // Auto is one or the other; on a VM (this project's machines) TCG.
    let nested = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .contains(" hypervisor");
    if nested {
        assert_eq!(Accel::Auto.resolve(), DomainType::Qemu);
    }
}
