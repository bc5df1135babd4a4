//! [`ServerHandle`]: the application's way to send to the server's sessions and ask about them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use uuid::Uuid;

use super::shared::{Counters, Shared, Target};
use crate::conn::SendError;
use crate::forward::Directory;
use crate::revocation::RevocationList;
use ssntp::Role;
use ssntp::frame::Frame;
use ssntp::payload::{ClusterConfig, DeliveryFailureReason, Payload};

/// Sends to and asks about the server's sessions. Cheap to clone.
#[derive(Clone)]
pub struct ServerHandle {
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("uuid", &self.shared.uuid)
            .finish()
    }
}

impl ServerHandle {
    /// The server's UUID.
    pub fn uuid(&self) -> Uuid {
        self.shared.uuid
    }

    /// The server's roles (its certificate's).
    pub fn roles(&self) -> Role {
        self.shared.roles
    }

    /// Queues a frame for one session.
    pub fn send(&self, uuid: Uuid, frame: &Frame) -> Result<(), SendError> {
        let outbox = self.shared.outbox(uuid).ok_or(SendError::NotConnected)?;
        outbox.send(frame)?;
        self.shared.counters.count_out(frame.operand, 1);
        Ok(())
    }

    /// Frames received (after the receiving rules) and sent (made or forwarded), by operand;
    /// operands never seen are left out.
    pub fn frame_counts(&self) -> Vec<(ssntp::frame::Operand, u64, u64)> {
        let c = &self.shared.counters;
        ssntp::frame::Operand::ALL
            .iter()
            .filter_map(|op| {
                let i = Counters::slot(*op)?;
                let fin = c.frames_in[i].load(Ordering::Relaxed);
                let fout = c.frames_out[i].load(Ordering::Relaxed);
                (fin + fout > 0).then_some((*op, fin, fout))
            })
            .collect()
    }

    /// Queues a frame made by the server itself.
    pub fn send_payload(&self, uuid: Uuid, payload: &Payload) -> Result<(), SendError> {
        self.send(uuid, &Frame::new(self.shared.uuid, payload))
    }

    /// Queues a frame for every session whose role intersects `role`; returns how many took it.
    pub fn broadcast(&self, role: Role, frame: &Frame) -> Result<usize, SendError> {
        let bytes = frame.to_bytes(self.shared.max_frame)?;
        let registry = self.shared.read();
        let sent = registry
            .with_role(role)
            .filter(|(_, e)| e.outbox.send_encoded(bytes.clone()).is_ok())
            .count();
        self.shared.counters.count_out(frame.operand, sent);
        Ok(sent)
    }

    /// Forwards a frame received from `from` to `to` (never back to `from`): byte for byte, with
    /// the server's hop appended to its trace. Returns how many sessions took it; a frame its hop
    /// pushes over the size limit goes nowhere and `from` gets DELIVERY_FAILURE `too_large`.
    pub fn forward(&self, from: Uuid, frame: &Frame, to: Target) -> Result<usize, SendError> {
        let targets = self.shared.targets(to);
        self.shared.forward(from, frame, targets)
    }

    /// DELIVERY_FAILURE to `to` about `frame`, which could not reach `target`.
    pub fn delivery_failure(
        &self,
        to: Uuid,
        frame: &Frame,
        reason: DeliveryFailureReason,
        target: Option<Uuid>,
    ) {
        self.shared.fail(to, frame, reason, target);
    }

    /// Replaces the cluster configuration that CONNECTED carries to sessions from now on.
    pub fn set_cluster(&self, cluster: ClusterConfig) {
        *self
            .shared
            .cluster
            .write()
            .unwrap_or_else(|p| p.into_inner()) = cluster;
    }

    /// The claimed role of a connected peer.
    pub fn client_role(&self, uuid: Uuid) -> Option<Role> {
        self.shared.read().get(&uuid).map(|e| e.role)
    }

    /// Every connected peer and its role.
    pub fn sessions(&self) -> Vec<(Uuid, Role)> {
        self.shared
            .read()
            .iter()
            .map(|(u, e)| (*u, e.role))
            .collect()
    }

    /// When the session `generation` of `uuid` last received a frame, if it is still that peer's
    /// session: every frame counts, a HEARTBEAT included (which the application never sees), as
    /// does the CONNECT. The reader records it once per read, before it routes what it read; an
    /// application that judges peers by their silence reads it instead of counting messages.
    pub fn last_received(&self, uuid: Uuid, generation: u64) -> Option<Instant> {
        let registry = self.shared.read();
        let entry = registry.get(&uuid)?;
        (entry.generation == generation).then(|| entry.received.last())
    }

    /// Closes one session of a peer, if it is still the current one (a newer session with the
    /// same UUID is left alone); `false` otherwise.
    pub fn disconnect_session(&self, uuid: Uuid, generation: u64) -> bool {
        let registry = self.shared.read();
        match registry.get(&uuid) {
            Some(e) if e.generation == generation => {
                e.outbox.close();
                true
            }
            _ => false,
        }
    }

    /// Closes the sessions whose certificates `list` revokes (after their queued frames), and
    /// says whose they were.
    pub fn disconnect_revoked(&self, list: &RevocationList) -> Vec<(Uuid, Role)> {
        if list.is_empty() {
            return Vec::new();
        }
        let registry = self.shared.read();
        let mut ended = Vec::new();
        for (uuid, entry) in registry.iter() {
            if !entry.serial.is_empty() && list.revokes(&entry.serial) {
                entry.outbox.close();
                ended.push((*uuid, entry.role));
            }
        }
        ended
    }

    /// Closes a peer's session (after its queued frames); `false` if it is not connected.
    pub fn disconnect(&self, uuid: Uuid) -> bool {
        self.shared.outbox(uuid).map(|o| o.close()).is_some()
    }
}

impl Directory for ServerHandle {
    fn role_of(&self, uuid: Uuid) -> Option<Role> {
        self.client_role(uuid)
    }
}
