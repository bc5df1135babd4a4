//! Rebuild: a DELETE to the instance's node, then, once the node has removed it, a START from
//! the image pinned to that node (the rule is in `super::super::rebuild`).

use super::*;
use crate::cluster::Rebuild;
use ssntp::payload::{DeleteFailure, DeleteFailureReason};

impl World {
    /// A workload of the world's flavor with another image (`other-ref`).
    fn other_image_workload(&self) -> Uuid {
        let store = self.engine.store();
        let base = store.workload(Scope::All, self.workload).unwrap();
        let image = store
            .create_image(NewImage {
                owner: Some(self.tenant),
                name: "other".into(),
                kind: ImageKind::Raw,
                reference: "other-ref".into(),
            })
            .unwrap();
        store
            .create_workload(NewWorkload {
                owner: Some(self.tenant),
                name: "rebuilt".into(),
                flavor: base.flavor,
                image: image.id,
                user_data: "#cloud-config\nnew: 1\n".into(),
                ephemeral: false,
            })
            .unwrap()
            .id
    }

    fn rebuild(&self, id: Uuid, workload: Uuid) -> Result<Instance, ClusterError> {
        let rebuild = Rebuild {
            workload,
            name: None,
        };
        self.engine
            .rebuild(Scope::All, id, rebuild, &Caller::default())
    }
}

#[test]
fn a_rebuild_removes_the_disk_then_starts_from_the_new_image_pinned_to_its_node() {
    let w = world();
    let id = w.active();
    let other = w.other_image_workload();
    let rebuilding = w
        .engine
        .rebuild(
            Scope::All,
            id,
            Rebuild {
                workload: other,
                name: Some("web2".into()),
            },
            &Caller::default(),
        )
        .unwrap();
    assert_eq!(
        (
            rebuilding.state,
            rebuilding.workload,
            rebuilding.name.as_str()
        ),
        (InstanceState::Rebuilding, other, "web2")
    );
    let sent = w.out.take();
    assert_eq!(sent.len(), 1, "only the DELETE: {sent:?}");
    let delete = deletes(&sent)[0];
    assert_eq!(
        (
            delete.instance_uuid,
            delete.workload_agent_uuid,
            delete.stop
        ),
        (id, NODE, false)
    );
    // The old copy, still listed, changes nothing and starts nothing.
    w.stats(NODE, &[(id, Reported::Active)]);
    assert_eq!(w.state(id), InstanceState::Rebuilding);
    assert!(w.out.take().is_empty());
    // Removed: the START, from the new image, not a restart, pinned to the node.
    w.event(Payload::InstanceDeleted(InstanceEvent {
        instance_uuid: id,
    }));
    let sent = w.out.take();
    let start = starts(&sent);
    assert_eq!(start.len(), 1);
    assert_eq!(
        (
            start[0].instance_uuid,
            start[0].image.as_str(),
            start[0].restart,
            start[0].requirements.node_id
        ),
        (id, "other-ref", false, Some(NODE))
    );
    assert_eq!(
        start[0].user_data.as_deref(),
        Some("#cloud-config\nnew: 1\n")
    );
    w.stats(NODE, &[(id, Reported::Pending)]);
    assert_eq!(w.state(id), InstanceState::Rebuilding);
    w.stats(NODE, &[(id, Reported::Active)]);
    assert_eq!(
        (w.state(id), w.instance(id).node),
        (InstanceState::Active, Some(NODE))
    );
    let actions = w.engine.store().instance_actions(Scope::All, id).unwrap();
    assert_eq!(actions[0].action, "rebuild");
    let events: Vec<(&str, Option<store::ActionResult>)> = actions[0]
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.result))
        .collect();
    assert_eq!(
        events,
        [
            ("controller_rebuild", Some(store::ActionResult::Success)),
            (
                crate::actions::NODE_START,
                Some(store::ActionResult::Success)
            ),
        ]
    );
}

#[test]
fn a_stopped_instance_is_rebuilt_when_its_node_no_longer_lists_it() {
    let w = world();
    let id = w.active();
    w.engine.stop(Scope::All, id, &Caller::default()).unwrap();
    w.event(Payload::InstanceStopped(InstanceEvent {
        instance_uuid: id,
    }));
    w.out.take();
    w.rebuild(id, w.workload).unwrap();
    assert_eq!(deletes(&w.out.take()).len(), 1);
    // Its INSTANCE_DELETED was lost; the node's STATS without it is enough, once.
    w.stats(NODE, &[]);
    w.stats(NODE, &[]);
    w.event(Payload::DeleteFailure(DeleteFailure {
        instance_uuid: id,
        node_uuid: Some(NODE),
        reason: DeleteFailureReason::NoInstance,
    }));
    let sent = w.out.take();
    let start = starts(&sent);
    assert_eq!(start.len(), 1, "{sent:?}");
    assert_eq!(
        (start[0].image.as_str(), start[0].requirements.node_id),
        ("tiny-ref", Some(NODE))
    );
    // A fatal START_FAILURE: in error (its old disk is gone).
    w.event(Payload::StartFailure(StartFailure::new(
        id,
        Some(NODE),
        StartFailureReason::ImageFailure,
        false,
    )));
    assert!(matches!(w.state(id), InstanceState::Error(_)));
}

#[test]
fn a_rebuild_is_refused_in_other_states_and_for_a_workload_of_another_size() {
    let w = world();
    w.node_connected(NODE, NodeType::ComputeNode);
    let id = w.launch(1)[0].id;
    w.out.take();
    // Pending: 409, nothing sent.
    assert!(matches!(
        w.rebuild(id, w.workload),
        Err(ClusterError::InvalidState { .. })
    ));
    w.stats(NODE, &[(id, Reported::Active)]);
    w.stats(NODE, &[(id, Reported::Paused)]);
    assert!(matches!(
        w.rebuild(id, w.workload),
        Err(ClusterError::InvalidState { .. })
    ));
    // Active, but a workload of another flavor: refused by the store, nothing changes.
    w.stats(NODE, &[(id, Reported::Active)]);
    let store = w.engine.store();
    let image = store.workload(Scope::All, w.workload).unwrap().image;
    let big = store
        .create_flavor(NewFlavor {
            name: "big".into(),
            vcpus: 4,
            memory_mb: 4096,
            disk_gb: 10,
            is_public: true,
        })
        .unwrap();
    let bigger = store
        .create_workload(NewWorkload {
            owner: Some(w.tenant),
            name: "big".into(),
            flavor: big.id,
            image,
            user_data: String::new(),
            ephemeral: false,
        })
        .unwrap();
    assert!(matches!(
        w.rebuild(id, bigger.id),
        Err(ClusterError::Store(StoreError::Invalid(_)))
    ));
    assert_eq!(w.state(id), InstanceState::Active);
    assert!(w.out.take().is_empty());
}
