//! Boot volumes after their launch (the launch is [`super::launch`]'s, the rules
//! [`crate::volumes`]'s):
//!
//! - **Where a boot volume's file is.** A boot volume is `in-use` from its server's creation; a
//!   volume no node holds yet gets its `node` from the first STATS of its server's node that
//!   lists it among the server's volumes (the node made its file, from the START's image). The
//!   engine keeps those volumes in memory ([`State::boot_unplaced`](super::State)), filled at
//!   launch and by the periodic volume scan, so that a STATS costs nothing more while there are
//!   none.
//! - **Volumes that go with their instance.** A boot volume attached with
//!   `delete_on_termination` (false unless the server create says so, as Nova's) is `deleting`
//!   once its instance goes ([`crate::volumes::release_instance`]). One that no node
//!   holds goes at once; the file of one a node holds is removed by the sweep (the node
//!   endpoint's `DELETE /v1/volumes/{id}`, blocking, so never on the path of a frame), then its
//!   record; a node that cannot leaves it `error_deleting`, and a delete through the Block
//!   Storage API tries again.

use std::collections::HashMap;

use ssntp::payload::Stats;
use uuid::Uuid;

use super::Engine;
use crate::cluster::ClusterError;
use crate::volumes as rules;
use store::{EventKind, Scope, StoreError, Volume, VolumeChange, VolumeLimits, VolumeStatus};

impl Engine {
    /// Sets the node of the boot volumes no node held that `node`'s STATS lists among their
    /// servers' volumes, for servers the store places on that node.
    pub(super) fn boot_volumes_on_stats(
        &self,
        node: Uuid,
        stats: &Stats,
    ) -> Result<(), ClusterError> {
        let due: Vec<(Uuid, Uuid)> = {
            let state = self.state();
            if state.boot_unplaced.is_empty() {
                return Ok(());
            }
            state.boot_unplaced.iter().map(|(v, i)| (*v, *i)).collect()
        };
        let listed: HashMap<Uuid, &[Uuid]> = stats
            .instances
            .iter()
            .map(|s| (s.instance_uuid, s.volumes.as_slice()))
            .collect();
        for (volume, instance) in due {
            if !listed
                .get(&instance)
                .is_some_and(|volumes| volumes.contains(&volume))
            {
                continue;
            }
            match self.store.instance(Scope::All, instance) {
                Ok(i) if i.node == Some(node) => {}
                // A stale copy on another node, or a server gone: not its node's word.
                Ok(_) | Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            let change = VolumeChange {
                node: Some(Some(node)),
                ..VolumeChange::default()
            };
            match self
                .store
                .change_volume(Scope::All, volume, change, VolumeLimits::default())
            {
                Ok(v) => self.event(
                    Some(v.owner),
                    EventKind::Info,
                    format!(
                        "volume {volume}, the root disk of instance {instance}, is on node {node}"
                    ),
                ),
                Err(StoreError::NotFound { .. }) => {}
                Err(StoreError::Conflict(why)) => {
                    tracing::warn!(%volume, %node, "a boot volume's node not set: {why}");
                }
                Err(e) => return Err(e.into()),
            }
            self.state().boot_unplaced.remove(&volume);
        }
        Ok(())
    }

    /// `released`, a volume its instance's going left `deleting` (it was attached with
    /// `delete_on_termination`): removed now when no node holds it, else by the next sweep.
    pub(super) fn volume_going(&self, released: &Volume) {
        self.state().boot_unplaced.remove(&released.id);
        if released.node.is_some() {
            self.state().volumes_going.insert(released.id);
            return;
        }
        match rules::remove_volume(self.store.as_ref(), Scope::All, released, |_, _| Ok(())) {
            Ok(_) => self.event(
                Some(released.owner),
                EventKind::Info,
                format!(
                    "volume {} deleted with its instance (delete_on_termination)",
                    released.id
                ),
            ),
            Err(e) => {
                // The sweep tries again.
                tracing::warn!(volume = %released.id, "a volume going with its instance not removed: {e}");
                self.state().volumes_going.insert(released.id);
            }
        }
    }

    /// Removes the volumes going with their instances (see the module docs): the file from its
    /// node, then the record; `error_deleting` when the node cannot.
    pub(super) fn sweep_going_volumes(&self) -> Result<(), ClusterError> {
        let going: Vec<Uuid> = self.state().volumes_going.drain().collect();
        for id in going {
            let volume = match self.store.volume(Scope::All, id) {
                Ok(v) if v.status == VolumeStatus::Deleting && v.attachment.is_none() => v,
                Ok(_) | Err(StoreError::NotFound { .. }) => continue,
                Err(e) => {
                    self.state().volumes_going.insert(id);
                    return Err(e.into());
                }
            };
            let removed = rules::remove_volume(self.store.as_ref(), Scope::All, &volume, |n, v| {
                self.remove_volume_data(n, v)
            });
            match removed {
                Ok(true) => self.event(
                    Some(volume.owner),
                    EventKind::Info,
                    format!("volume {id} deleted with its instance (delete_on_termination)"),
                ),
                Ok(false) => self.event(
                    Some(volume.owner),
                    EventKind::Error,
                    format!(
                        "volume {id} should have gone with its instance, but its node could not \
                         remove its file: error_deleting (delete it again)"
                    ),
                ),
                Err(e) => {
                    self.state().volumes_going.insert(id);
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// What the periodic volume scan found of boot volumes: those no node holds yet (with their
    /// instance), and those going with their instance.
    pub(super) fn learn_boot_volumes(&self, volumes: &[Volume]) {
        let mut state = self.state();
        for v in volumes {
            match (&v.status, &v.attachment) {
                (VolumeStatus::InUse, Some(a)) if v.node.is_none() && rules::is_root(v) => {
                    state.boot_unplaced.insert(v.id, a.instance);
                }
                (VolumeStatus::Deleting, None) => {
                    state.volumes_going.insert(v.id);
                }
                _ => {}
            }
        }
    }
}
