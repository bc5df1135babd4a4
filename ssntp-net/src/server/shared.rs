//! The state the accept loop, every session's reader and every [`ServerHandle`] share
//! ([`Shared`]): the registry behind its lock, the frame counters, the cluster configuration, and
//! the primitives that send on from there (forward by [`Target`], DELIVERY_FAILURE).
//!
//! [`ServerHandle`]: crate::server::ServerHandle

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use uuid::Uuid;

use super::registry::Sessions;
use crate::conn::{self, Outbox, SendError};
use ssntp::Role;
use ssntp::frame::Frame;
use ssntp::payload::{ClusterConfig, DeliveryFailure, DeliveryFailureReason, Payload};

/// Frames in and out by operand (known operands only: type × 16 + operand).
pub(super) struct Counters {
    pub(super) frames_in: [AtomicU64; 64],
    pub(super) frames_out: [AtomicU64; 64],
}

impl Counters {
    pub(super) fn slot(operand: ssntp::frame::Operand) -> Option<usize> {
        let (ty, op) = operand.to_wire();
        (operand.is_known() && op < 16).then(|| usize::from(ty) * 16 + usize::from(op))
    }

    pub(super) fn count_in(&self, operand: ssntp::frame::Operand, n: u64) {
        if let Some(i) = Counters::slot(operand) {
            self.frames_in[i].fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(super) fn count_out(&self, operand: ssntp::frame::Operand, n: usize) {
        if let Some(i) = Counters::slot(operand) {
            self.frames_out[i].fetch_add(n as u64, Ordering::Relaxed);
        }
    }
}

/// What the server's tasks and handles share.
pub(super) struct Shared {
    /// The cluster configuration sent in CONNECTED.
    pub(super) cluster: RwLock<ClusterConfig>,
    pub(super) counters: Counters,
    pub(super) uuid: Uuid,
    pub(super) roles: Role,
    pub(super) max_frame: u32,
    pub(super) registry: RwLock<Sessions>,
    pub(super) generation: AtomicU64,
}

impl Shared {
    pub(super) fn read(&self) -> std::sync::RwLockReadGuard<'_, Sessions> {
        self.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn write(&self) -> std::sync::RwLockWriteGuard<'_, Sessions> {
        self.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn outbox(&self, uuid: Uuid) -> Option<Outbox> {
        self.read().get(&uuid).map(|e| e.outbox.clone())
    }

    /// The sessions a target names.
    pub(super) fn targets(&self, target: Target) -> Vec<(Uuid, Outbox)> {
        let registry = self.read();
        match target {
            Target::Role(role) => registry
                .with_role(role)
                .map(|(u, e)| (*u, e.outbox.clone()))
                .collect(),
            Target::Session(uuid) => registry
                .get(&uuid)
                .map(|e| vec![(uuid, e.outbox.clone())])
                .unwrap_or_default(),
        }
    }

    /// Sends `frame` from `from` on to `targets` (never back to `from`): byte for byte, with our
    /// hop appended to its trace. Too large with the hop: DELIVERY_FAILURE `too_large` to `from`.
    pub(super) fn forward(
        &self,
        from: Uuid,
        frame: &Frame,
        targets: Vec<(Uuid, Outbox)>,
    ) -> Result<usize, SendError> {
        let bytes = match &frame.trace {
            None => frame.to_bytes(self.max_frame),
            Some(trace) => {
                let mut traced = frame.clone();
                let mut trace = trace.clone();
                trace.push_hop(self.uuid, self.roles, conn::now().unix_ns);
                traced.trace = Some(trace);
                traced.to_bytes(self.max_frame)
            }
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                let target = (targets.len() == 1).then(|| targets[0].0);
                self.fail(from, frame, DeliveryFailureReason::TooLarge, target);
                return Err(e.into());
            }
        };
        let mut sent = 0;
        for (uuid, outbox) in targets {
            if uuid == from {
                continue;
            }
            match outbox.send_encoded(bytes.clone()) {
                Ok(()) => sent += 1,
                Err(e) => {
                    tracing::warn!(to = %uuid, operand = %frame.operand, error = %e, "frame not forwarded")
                }
            }
        }
        self.counters.count_out(frame.operand, sent);
        Ok(sent)
    }

    /// DELIVERY_FAILURE to `to` about `frame`.
    pub(super) fn fail(
        &self,
        to: Uuid,
        frame: &Frame,
        reason: DeliveryFailureReason,
        target: Option<Uuid>,
    ) {
        let (operand_type, operand) = frame.operand.to_wire();
        let failure = Payload::DeliveryFailure(DeliveryFailure {
            operand_type,
            operand,
            target_uuid: target,
            reason,
        });
        if let Some(outbox) = self.outbox(to)
            && outbox.send_frame(Frame::new(self.uuid, &failure)).is_ok()
        {
            self.counters
                .count_out(ssntp::frame::Operand::DeliveryFailure, 1);
        }
    }
}

/// Whom a frame is forwarded to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Every session whose role intersects this one.
    Role(Role),
    /// One session.
    Session(Uuid),
}
