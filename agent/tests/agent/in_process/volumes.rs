//! Volumes: ATTACH_VOLUME and DETACH_VOLUME through the core, what STATS lists, refusals and
//! failures, and an attach or a detach cut short by the agent's death.

use super::*;
use agent::core::Command;
use agent::model::{VolumePhase, VolumeRefusal, VolumeSpec};

fn attach(instance: u128, volume: u128, device: &str) -> Command {
    Command::AttachVolume {
        instance: id(instance),
        volume: Box::new(VolumeSpec {
            id: id(volume),
            device: device.into(),
            size_mb: 1024,
            image: None,
            phase: VolumePhase::Attaching,
        }),
    }
}

fn detach(instance: u128, volume: u128) -> Command {
    Command::DetachVolume {
        instance: id(instance),
        volume: id(volume),
        force: false,
    }
}

fn volumes_of(snap: &Snapshot, instance: u128) -> Option<Vec<Uuid>> {
    snap.instances
        .iter()
        .find(|i| i.instance == id(instance))
        .map(|i| i.volumes.clone())
}

/// The VOLUME_FAILED event about `volume`, once it comes.
async fn volume_failed(
    reporter: &RecordingReporter,
    volume: u128,
) -> (bool, VolumeRefusal, Option<String>) {
    reporter
        .wait_for(WAIT, |reports| {
            reports.iter().find_map(|r| match r {
                Report::Event(InstanceEvent::VolumeFailed {
                    volume: v,
                    detach,
                    reason,
                    message,
                    ..
                }) if *v == id(volume) => Some((*detach, *reason, message.clone())),
                _ => None,
            })
        })
        .await
        .unwrap()
}

fn recorded_volumes(dir: &Path, instance: u128) -> Vec<VolumeSpec> {
    let records = Store::open(dir).unwrap().load().unwrap().records;
    records
        .into_iter()
        .find(|r| r.spec.instance == id(instance))
        .map(|r| r.spec.volumes)
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn volumes_attach_and_detach_and_show_in_stats() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;

    core.submit(attach(1, 0x50, "vdc")).unwrap();
    core.submit(attach(1, 0x51, "")).unwrap();
    let snap = wait_snapshot(&core, |s| volumes_of(s, 1).is_some_and(|v| v.len() == 2)).await;
    assert_eq!(volumes_of(&snap, 1), Some(vec![id(0x50), id(0x51)]));
    let held = backend.volumes();
    assert_eq!(
        held[&id(0x50)],
        (id(1), "vdc".to_string()),
        "the device asked"
    );
    assert_eq!(
        held[&id(0x51)],
        (id(1), "vdb".to_string()),
        "the first free"
    );
    // STATS carries them.
    reporter
        .wait_for(WAIT, |rs| {
            rs.iter()
                .any(|r| match r {
                    Report::Stats(_, is) => is
                        .iter()
                        .any(|i| i.instance == id(1) && i.volumes.len() == 2),
                    _ => false,
                })
                .then_some(())
        })
        .await
        .unwrap();
    let recorded = recorded_volumes(dir.path(), 1);
    assert!(recorded.iter().all(|v| v.phase == VolumePhase::Attached));

    // A repeat is nothing new; a device taken is refused with the cause.
    core.submit(attach(1, 0x50, "vdc")).unwrap();
    core.submit(attach(1, 0x52, "vdc")).unwrap();
    let (detach_, reason, message) = volume_failed(&reporter, 0x52).await;
    assert_eq!((detach_, reason), (false, VolumeRefusal::InvalidData));
    assert!(message.unwrap().contains("vdc"));
    let attaches = backend
        .ops(id(1))
        .into_iter()
        .filter(|op| *op == Op::Attach)
        .count();
    assert_eq!(attaches, 2, "the repeat did not reach the backend");

    core.submit(detach(1, 0x50)).unwrap();
    // A detach of a volume the instance does not have is nothing to do.
    core.submit(detach(1, 0x99)).unwrap();
    let snap = wait_snapshot(&core, |s| volumes_of(s, 1) == Some(vec![id(0x51)])).await;
    assert_eq!(snap.state(id(1)), Some(InstanceState::Active));
    assert!(!backend.volumes().contains_key(&id(0x50)));
    assert_eq!(recorded_volumes(dir.path(), 1).len(), 1);

    // A stopped instance takes and gives volumes too (its definition only).
    core.delete(id(1), true).unwrap();
    wait_stats(&reporter, id(1), InstanceState::Exited).await;
    core.submit(attach(1, 0x53, "")).unwrap();
    wait_snapshot(&core, |s| {
        volumes_of(s, 1) == Some(vec![id(0x51), id(0x53)])
    })
    .await;
    assert_eq!(backend.volumes()[&id(0x53)].1, "vdc");
}

#[tokio::test(start_paused = true)]
async fn refusals_and_failures_leave_volumes_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    let (core, reporter) = spawn(dir.path(), &backend).await;
    // No such instance.
    core.submit(attach(7, 0x60, "")).unwrap();
    let (_, reason, _) = volume_failed(&reporter, 0x60).await;
    assert_eq!(reason, VolumeRefusal::NoInstance);

    core.start(spec(1, "debian")).unwrap();
    wait_event(&reporter, active(1)).await;
    // A bad device name.
    core.submit(attach(1, 0x61, "sda")).unwrap();
    let (_, reason, _) = volume_failed(&reporter, 0x61).await;
    assert_eq!(reason, VolumeRefusal::InvalidData);
    // The backend fails the attach: nothing is kept, the cause goes out.
    backend.fail_next(Op::Attach, BackendError::Other("qemu said no".into()));
    core.submit(attach(1, 0x62, "")).unwrap();
    let (detach_, reason, message) = volume_failed(&reporter, 0x62).await;
    assert_eq!((detach_, reason), (false, VolumeRefusal::BackendFailure));
    assert_eq!(message.as_deref(), Some("qemu said no"));
    let snap = core.snapshot().await.unwrap();
    assert_eq!(volumes_of(&snap, 1), Some(Vec::new()));
    assert!(recorded_volumes(dir.path(), 1).is_empty());

    // The backend fails a detach: the volume stays attached.
    core.submit(attach(1, 0x63, "")).unwrap();
    wait_snapshot(&core, |s| volumes_of(s, 1) == Some(vec![id(0x63)])).await;
    backend.fail_next(
        Op::Detach,
        BackendError::Other("the guest did not release vdb".into()),
    );
    core.submit(detach(1, 0x63)).unwrap();
    let (detach_, reason, _) = volume_failed(&reporter, 0x63).await;
    assert_eq!((detach_, reason), (true, VolumeRefusal::BackendFailure));
    let snap = core.snapshot().await.unwrap();
    assert_eq!(volumes_of(&snap, 1), Some(vec![id(0x63)]));
    assert_eq!(
        recorded_volumes(dir.path(), 1)[0].phase,
        VolumePhase::Attached
    );

    // A suspended instance takes no volume.
    core.action(id(1), Action::Suspend).unwrap();
    wait_stats(&reporter, id(1), InstanceState::Suspended).await;
    core.submit(attach(1, 0x64, "")).unwrap();
    let (_, reason, message) = volume_failed(&reporter, 0x64).await;
    assert_eq!(reason, VolumeRefusal::InvalidState);
    assert!(message.unwrap().contains("suspended"));
}

/// An agent killed between writing "attaching" ("detaching") and the backend's answer finishes
/// the attach (the detach) when it starts again: both sides agree.
#[tokio::test(start_paused = true)]
async fn an_attach_or_detach_cut_short_is_finished_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new());
    backend.insert(id(1), Power::Running);
    let mut s = spec(1, "debian");
    let volume = |n: u128, device: &str, phase| VolumeSpec {
        id: id(n),
        device: device.into(),
        size_mb: 1024,
        image: None,
        phase,
    };
    s.volumes = vec![
        volume(0x70, "vdb", VolumePhase::Attaching),
        volume(0x71, "vdc", VolumePhase::Detaching { force: false }),
    ];
    let store = Store::open(dir.path()).unwrap();
    store.write(&Record::new(s, Desired::Running)).unwrap();

    let (core, _reporter) = spawn(dir.path(), &backend).await;
    let snap = wait_snapshot(&core, |s| volumes_of(s, 1) == Some(vec![id(0x70)])).await;
    assert_eq!(snap.state(id(1)), Some(InstanceState::Active));
    assert_eq!(backend.volumes()[&id(0x70)], (id(1), "vdb".to_string()));
    assert!(backend.ops(id(1)).contains(&Op::Detach));
    let recorded = recorded_volumes(dir.path(), 1);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].phase, VolumePhase::Attached);
}

/// An instance that boots from a volume lists it; the sim makes it on the first START, frees it
/// when the instance is deleted, and keeps it for the next instance booted from it.
#[tokio::test(start_paused = true)]
async fn a_boot_volume_is_listed_and_outlives_its_instance() {
    let dir = tempfile::tempdir().unwrap();
    let backend = sim(Duration::ZERO);
    let (core, reporter) = spawn(dir.path(), &backend).await;
    let from_volume = |n: u128| {
        let mut s = spec(n, "debian");
        s.disks = vec![agent::model::DiskSpec {
            id: id(0x80),
            boot: true,
            size_mb: 2048,
            ephemeral: false,
        }];
        s
    };
    core.start(from_volume(1)).unwrap();
    wait_event(&reporter, active(1)).await;
    let snap = core.snapshot().await.unwrap();
    assert_eq!(volumes_of(&snap, 1), Some(vec![id(0x80)]));
    assert_eq!(
        backend.volume_attachment(id(0x80)),
        Some((id(1), "vda".to_string()))
    );
    backend.write_volume(id(0x80), "written by 1").unwrap();
    // While 1 holds it, another instance cannot boot from it.
    core.start(from_volume(2)).unwrap();
    let message = start_failed(&reporter, 2, StartRefusal::LaunchFailure).await;
    assert!(message.unwrap().contains("in use"));
    core.delete(id(1), false).unwrap();
    wait_event(&reporter, InstanceEvent::Deleted { instance: id(1) }).await;
    assert_eq!(backend.volume_attachment(id(0x80)), None);
    core.start(from_volume(3)).unwrap();
    wait_event(&reporter, active(3)).await;
    assert_eq!(
        backend.volume_data(id(0x80)).as_deref(),
        Some("written by 1")
    );
}
