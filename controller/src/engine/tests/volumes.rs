//! Volumes attached and detached (the engine's part is `super::super::volumes`): what settles
//! them and what does not, after a restart too, and whose failures count.

use super::*;
use ssntp::payload::{AttachVolumeFailure, AttachVolumeFailureReason};
use store::{NewVolume, Volume, VolumeChange, VolumeLimits, VolumeStatus};

/// A node that holds none of the world's instances.
const OTHER: Uuid = Uuid::from_bytes([0xdd; 16]);

fn new_volume(w: &World) -> Uuid {
    w.engine
        .store()
        .create_volume(
            NewVolume {
                owner: w.tenant,
                name: "data".into(),
                description: String::new(),
                size_gb: 3,
                image: None,
                bootable: false,
            },
            VolumeLimits::default(),
        )
        .unwrap()
        .id
}

fn attach(w: &World, instance: Uuid, volume: Uuid) -> Volume {
    w.engine
        .attach_volume(
            Scope::Tenant(w.tenant),
            instance,
            volume,
            None,
            &Caller::default(),
        )
        .unwrap()
}

#[test]
fn only_the_instances_node_listing_the_volume_settles_an_attach() {
    let w = world();
    let id = w.active();
    let v = new_volume(&w);
    let attaching = attach(&w, id, v);
    assert_eq!(attaching.status, VolumeStatus::Attaching);
    let sent = w.out.take();
    let Some(Payload::AttachVolume(command)) = sent.first() else {
        panic!("{sent:?}")
    };
    assert_eq!(command.size_mb, Some(3 * 1024));
    // Another node that lists it (a stale copy), the node without it, the node without the
    // instance at all: nothing.
    w.event(stats_with_volumes(OTHER, &[(id, &[v])]));
    w.event(stats_with_volumes(NODE, &[(id, &[])]));
    assert_eq!(volume(&w, v).status, VolumeStatus::Attaching);
    w.event(stats_with_volumes(NODE, &[(id, &[v])]));
    let v = volume(&w, v);
    assert_eq!(v.status, VolumeStatus::InUse);
    assert_eq!(v.node, Some(NODE));
    assert!(
        w.events()
            .iter()
            .any(|e| e.contains("attached to instance") && e.contains("/dev/vdb")),
        "{:?}",
        w.events()
    );
}

#[test]
fn an_engine_that_starts_again_settles_what_the_last_one_sent() {
    let w = world();
    let id = w.active();
    let v = new_volume(&w);
    attach(&w, id, v);
    let again = w.another_engine();
    again
        .handle(&stats_with_volumes(NODE, &[(id, &[v])]))
        .unwrap();
    assert_eq!(volume(&w, v).status, VolumeStatus::InUse);
    // Its node event ended, found by name on the newest action that has it open.
    let actions = w.engine.store().instance_actions(Scope::All, id).unwrap();
    let attach = actions
        .iter()
        .find(|a| a.action == "attach_volume")
        .unwrap();
    let node_event = attach
        .events
        .iter()
        .find(|e| e.name == crate::actions::NODE_ATTACH_VOLUME)
        .unwrap();
    assert_eq!(node_event.result, Some(store::ActionResult::Success));
}

#[test]
fn a_sweep_learns_what_another_controller_started_and_forgets_what_it_settled() {
    let w = world();
    let id = w.active();
    let (v1, v2) = (new_volume(&w), new_volume(&w));
    // Another controller sharing the store attaches v1: this engine has not heard of it.
    let store = w.engine.store().clone();
    let plan = crate::volumes::plan_attach(store.as_ref(), Scope::All, id, v1, None).unwrap();
    crate::volumes::begin_attach(store.as_ref(), &plan, VolumeStatus::Attaching, None).unwrap();
    w.event(stats_with_volumes(NODE, &[(id, &[v1])]));
    assert_eq!(volume(&w, v1).status, VolumeStatus::Attaching);
    let later = SystemTime::now() + super::super::volumes::RESCAN;
    w.engine.sweep(later).unwrap();
    w.event(stats_with_volumes(NODE, &[(id, &[v1])]));
    assert_eq!(volume(&w, v1).status, VolumeStatus::InUse);

    // This engine attaches v2; the other controller settles it; the next sweep forgets it.
    attach(&w, id, v2);
    store
        .change_volume(
            Scope::All,
            v2,
            store::VolumeChange {
                expect: Some(VolumeStatus::Attaching),
                status: Some(VolumeStatus::InUse),
                ..store::VolumeChange::default()
            },
            VolumeLimits::default(),
        )
        .unwrap();
    w.engine
        .sweep(later + super::super::volumes::RESCAN)
        .unwrap();
    assert!(w.engine.state().volume_ops.is_empty());
}

#[test]
fn a_failure_counts_only_from_the_instances_node() {
    let w = world();
    let id = w.active();
    let v = new_volume(&w);
    attach(&w, id, v);
    let failure = |node: Uuid| {
        Payload::AttachVolumeFailure(
            AttachVolumeFailure::new(id, v, Some(node), AttachVolumeFailureReason::AttachFailure)
                .with_message("no room for the file"),
        )
    };
    // Naming itself, about an instance on another node: refused, counted.
    w.engine
        .handle_from(OTHER, &failure(OTHER), SystemTime::now())
        .unwrap();
    // Naming another node than itself: refused too.
    w.engine
        .handle_from(OTHER, &failure(NODE), SystemTime::now())
        .unwrap();
    assert_eq!(volume(&w, v).status, VolumeStatus::Attaching);
    let refused = w.engine.reports_refused();
    assert!(
        refused.contains(&("ATTACH_VOLUME_FAILURE", 2)),
        "{refused:?}"
    );
    w.engine
        .handle_from(NODE, &failure(NODE), SystemTime::now())
        .unwrap();
    let v = volume(&w, v);
    assert_eq!(v.status, VolumeStatus::Available);
    assert_eq!(v.attachment, None);
    assert!(
        w.events()
            .iter()
            .any(|e| e.contains("attach_failure: no room for the file")),
        "{:?}",
        w.events()
    );
}

#[test]
fn an_instance_its_node_removed_releases_its_volumes() {
    let w = world();
    let id = w.active();
    let v = new_volume(&w);
    attach(&w, id, v);
    w.event(stats_with_volumes(NODE, &[(id, &[v])]));
    assert_eq!(volume(&w, v).status, VolumeStatus::InUse);
    // Even one to go with the server: the server did not go, the volume is not deleted.
    let mut attachment = volume(&w, v).attachment.unwrap();
    attachment.delete_on_termination = true;
    let change = VolumeChange {
        attachment: Some(Some(attachment)),
        ..VolumeChange::default()
    };
    w.engine
        .store()
        .change_volume(Scope::All, v, change, VolumeLimits::default())
        .unwrap();
    w.event(deleted_event(id));
    assert_eq!(w.state(id), InstanceState::Exited);
    let v = volume(&w, v);
    assert_eq!(v.status, VolumeStatus::Available);
    assert_eq!(v.attachment, None);
    assert_eq!(v.node, Some(NODE));
}

#[test]
fn an_unsent_attach_puts_the_volume_back() {
    let w = world();
    let id = w.active();
    let v = new_volume(&w);
    // Connected when checked, refused when sent (the session's queue went).
    struct Refusing;
    impl Outbound for Refusing {
        fn send(&self, _: &Payload) -> Result<(), SendFailure> {
            Err(SendFailure::NotConnected)
        }
        fn connected(&self) -> bool {
            true
        }
    }
    let engine = Engine::new(
        w.engine.store().clone(),
        Arc::new(Refusing),
        EngineConfig::new(Uuid::from_bytes([0xc2; 16])),
    )
    .unwrap();
    let refused = engine.attach_volume(Scope::Tenant(w.tenant), id, v, None, &Caller::default());
    assert!(
        matches!(refused, Err(ClusterError::Unavailable(_))),
        "{refused:?}"
    );
    let v = volume(&w, v);
    assert_eq!(v.status, VolumeStatus::Available);
    assert_eq!(v.attachment, None);
}
