//! Instances booted from volumes (the engine's part is `super::super::{launch, boot}`): their
//! STARTs, a restart's, what a restarted engine learns of their volumes, and the volumes that go
//! with them.

use super::*;
use ssntp::payload::Start;
use store::{Volume, VolumeLimits, VolumeStatus};

/// Launches one instance booting from a new 2 GiB volume made from the workload's image.
fn launch_booted(w: &World, delete_on_termination: bool) -> (Instance, Volume) {
    let instances = w
        .engine
        .launch_from_volume(
            Scope::Tenant(w.tenant),
            Launch {
                tenant: w.tenant,
                workload: w.workload,
                name: "bfv".into(),
                count: 1,
                key: None,
                groups: Vec::new(),
                metadata: store::Metadata::new(),
                user: None,
                server_group: None,
                reservation: store::Instance::new_reservation(),
                zone: None,
            },
            BootVolume::Image {
                size_gb: 2,
                delete_on_termination,
                limits: VolumeLimits::default(),
            },
            &Caller::default(),
        )
        .unwrap();
    let instance = instances[0].clone();
    let volume = crate::volumes::boot_volume(w.engine.store().as_ref(), &instance)
        .unwrap()
        .unwrap();
    (instance, volume)
}

fn starts(w: &World) -> Vec<Start> {
    w.out
        .take()
        .into_iter()
        .filter_map(|p| match p {
            Payload::Start(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// A STATS of `node` listing `id` active with `volumes`.
fn stats_listing(w: &World, node: Uuid, id: Uuid, volumes: &[Uuid]) {
    w.event(stats_with_volumes(node, &[(id, volumes)]));
}

#[test]
fn a_restart_boots_the_volume_on_its_node() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let (instance, v) = launch_booted(&w, false);
    assert_eq!(
        (v.status, v.node, v.size_gb),
        (VolumeStatus::InUse, None, 2)
    );
    let first = starts(&w);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].image, "tiny-ref");
    assert_eq!(first[0].requirements.node_id, None);
    stats_listing(&w, NODE, instance.id, &[v.id]);
    assert_eq!(volume(&w, v.id).node, Some(NODE));
    // Stopped, then started: the restart carries the volume too, pinned to the node.
    w.engine
        .stop(Scope::All, instance.id, &Caller::default())
        .unwrap();
    w.event(Payload::InstanceStopped(InstanceEvent {
        instance_uuid: instance.id,
    }));
    w.out.take();
    w.engine
        .start(Scope::All, instance.id, &Caller::default())
        .unwrap();
    let restart = starts(&w);
    assert_eq!(restart.len(), 1, "{restart:?}");
    assert!(restart[0].restart);
    assert_eq!(restart[0].requirements.node_id, Some(NODE));
    let storage = restart[0].storage.clone().unwrap();
    assert_eq!(
        (storage[0].id, storage[0].boot, storage[0].size_mb),
        (v.id, true, 2048)
    );
}

#[test]
fn a_restarted_engine_learns_the_boot_volumes_no_node_holds_yet() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let (instance, v) = launch_booted(&w, false);
    // Another engine over the same store (a restart): the node's STATS still places it.
    let again = w.another_engine();
    again
        .handle(&Payload::NodeConnected(ssntp::payload::NodeEvent {
            node_uuid: NODE,
            node_type: NodeType::ComputeNode,
        }))
        .unwrap();
    again
        .handle(&stats_with_volumes(NODE, &[(instance.id, &[v.id])]))
        .unwrap();
    assert_eq!(volume(&w, v.id).node, Some(NODE));
}

#[test]
fn a_stale_copy_elsewhere_does_not_place_a_boot_volume() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let (instance, v) = launch_booted(&w, false);
    stats_listing(&w, NODE, instance.id, &[]);
    assert_eq!(w.instance(instance.id).node, Some(NODE));
    // Another node lists it with the volume: not its node's word.
    let other = Uuid::from_bytes([0xdd; 16]);
    w.node_connected(other, NodeType::ComputeNode);
    stats_listing(&w, other, instance.id, &[v.id]);
    assert_eq!(volume(&w, v.id).node, None);
    stats_listing(&w, NODE, instance.id, &[v.id]);
    assert_eq!(volume(&w, v.id).node, Some(NODE));
}

#[test]
fn volumes_going_with_their_instances_are_removed_by_the_sweep() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let (instance, v) = launch_booted(&w, true);
    stats_listing(&w, NODE, instance.id, &[v.id]);
    w.engine
        .delete(Scope::All, instance.id, &Caller::default())
        .unwrap();
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: instance.id,
    }));
    assert!(w.gone(instance.id));
    let going = volume(&w, v.id);
    assert_eq!(
        (going.status, going.attachment),
        (VolumeStatus::Deleting, None)
    );
    // A restarted engine finds it too; this engine reaches no node endpoint: error_deleting.
    let again = w.another_engine();
    again.sweep(SystemTime::now()).unwrap();
    assert_eq!(volume(&w, v.id).status, VolumeStatus::ErrorDeleting);
    // (Both engines record their events in the one store.)
    assert!(w.events().iter().any(|e| e.contains("error_deleting")));
}

/// A server whose node removed it while it lived (its domain lost, the restarted agent said
/// INSTANCE_DELETED) keeps its boot volume, even one to be deleted with the server: `exited`,
/// the volume still in use, and a start boots it from the volume on the volume's node.
#[test]
fn a_server_its_node_removed_keeps_its_boot_volume() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let (instance, v) = launch_booted(&w, true);
    stats_listing(&w, NODE, instance.id, &[v.id]);
    w.out.take();
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: instance.id,
    }));
    assert_eq!(w.placed(instance.id), (InstanceState::Exited, None));
    let kept = volume(&w, v.id);
    assert_eq!(kept.status, VolumeStatus::InUse);
    assert_eq!(kept.node, Some(NODE));
    assert_eq!(kept.attachment.map(|a| a.instance), Some(instance.id));
    w.engine
        .start(Scope::All, instance.id, &Caller::default())
        .unwrap();
    let start = starts(&w);
    assert_eq!(start.len(), 1, "{start:?}");
    assert_eq!(start[0].requirements.node_id, Some(NODE));
    assert_eq!(start[0].storage.as_ref().unwrap()[0].id, v.id);
}
