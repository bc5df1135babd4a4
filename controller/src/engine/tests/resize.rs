//! Resize of a stopped instance on its node (the rule is in `crate::resize`): no frame until its
//! next start, whose START carries the new requirements, pinned to the node.

use super::*;
use crate::cluster::ResizeStep;

impl World {
    /// A workload of the world's image with a flavor of `vcpus`, `memory_mb` and `disk_gb`.
    fn sized_workload(&self, name: &str, vcpus: u32, memory_mb: u64, disk_gb: u64) -> Uuid {
        let store = self.engine.store();
        let base = store.workload(Scope::All, self.workload).unwrap();
        let flavor = store
            .create_flavor(NewFlavor {
                name: name.into(),
                vcpus,
                memory_mb,
                disk_gb,
                is_public: true,
            })
            .unwrap();
        store
            .create_workload(NewWorkload {
                owner: Some(self.tenant),
                name: name.into(),
                flavor: flavor.id,
                image: base.image,
                user_data: base.user_data,
                ephemeral: false,
            })
            .unwrap()
            .id
    }

    fn resize(&self, id: Uuid, step: ResizeStep) -> Result<Instance, ClusterError> {
        self.engine.resize(Scope::All, id, step, &Caller::default())
    }

    /// An instance stopped on NODE.
    fn stopped(&self) -> Uuid {
        let id = self.active();
        self.engine
            .stop(Scope::All, id, &Caller::default())
            .unwrap();
        self.event(Payload::InstanceStopped(InstanceEvent {
            instance_uuid: id,
        }));
        self.out.take();
        id
    }
}

#[test]
fn a_confirmed_resize_boots_the_kept_instance_with_the_new_requirements() {
    let w = world();
    let id = w.stopped();
    let big = w.sized_workload("big", 2, 512, 2);
    let resized = w.resize(id, ResizeStep::To(big)).unwrap();
    assert_eq!(
        (resized.state, resized.vcpus, resized.memory_mb),
        (InstanceState::Resized, 2, 512)
    );
    assert!(w.out.take().is_empty(), "nothing goes to the node");
    // Not startable until confirmed or reverted.
    assert!(matches!(
        w.engine.start(Scope::All, id, &Caller::default()),
        Err(ClusterError::InvalidState { .. })
    ));
    let confirmed = w.resize(id, ResizeStep::Confirm).unwrap();
    assert_eq!(
        (confirmed.state, confirmed.node, confirmed.previous_workload),
        (InstanceState::Exited, Some(NODE), None)
    );
    w.engine.start(Scope::All, id, &Caller::default()).unwrap();
    let sent = w.out.take();
    let start = starts(&sent);
    assert!(start[0].restart);
    let r = &start[0].requirements;
    assert_eq!(
        (r.vcpus, r.mem_mb, r.disk_mb, r.node_id),
        (2, 512, 2048, Some(NODE))
    );
    let actions = w.engine.store().instance_actions(Scope::All, id).unwrap();
    let names: Vec<&str> = actions.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(names[..3], ["start", "confirmResize", "resize"]);
}

#[test]
fn a_reverted_resize_goes_back_and_bad_resizes_are_refused() {
    let w = world();
    let id = w.stopped();
    let before = w.instance(id);
    let big = w.sized_workload("big", 2, 512, 2);
    w.resize(id, ResizeStep::To(big)).unwrap();
    let reverted = w.resize(id, ResizeStep::Revert).unwrap();
    assert_eq!(
        (
            reverted.state,
            reverted.workload,
            reverted.vcpus,
            reverted.memory_mb
        ),
        (
            InstanceState::Exited,
            before.workload,
            before.vcpus,
            before.memory_mb
        )
    );
    // A smaller disk, or the same flavor: refused, nothing changes.
    let small = w.sized_workload("small-disk", 1, 256, 0);
    for workload in [small, before.workload] {
        assert!(matches!(
            w.resize(id, ResizeStep::To(workload)),
            Err(ClusterError::Invalid(_))
        ));
    }
    // Only a stopped instance; confirm and revert only a resized one.
    assert!(matches!(
        w.resize(id, ResizeStep::Confirm),
        Err(ClusterError::InvalidState { .. })
    ));
    let running = w.active();
    assert!(matches!(
        w.resize(running, ResizeStep::To(big)),
        Err(ClusterError::InvalidState { .. })
    ));
    assert_eq!(w.state(id), InstanceState::Exited);
    assert!(w.out.take().is_empty());
}
