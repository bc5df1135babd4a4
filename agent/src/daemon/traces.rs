//! Traced STARTs (PROTOCOL.md §6): this agent is their final consumer. A traced START is kept
//! here when it arrives (its trace block, the receive time of its last hop stamped by the
//! session) until the core reports what came of it (the instance's first state, or its
//! START_FAILURE); the daemon then sends a TRACE_REPORT with the hops and the time the agent
//! was done, which the scheduler forwards to every controller. At most [`PENDING`] wait at once
//! (past that the one waiting longest is dropped); a START answered without the core (refused
//! at once, or the core busy) is reported at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ssntp::frame::Frame;
use ssntp::payload::{FrameTrace, TraceReport};
use uuid::Uuid;

/// Most traced STARTs waiting for their outcome.
pub const PENDING: usize = 1024;

/// The traced STARTs waiting for their outcome, by instance. Clones share them.
#[derive(Debug, Clone, Default)]
pub struct Traces(Arc<Mutex<HashMap<Uuid, (Instant, FrameTrace)>>>);

impl Traces {
    /// Keeps `frame`'s trace, if it has one, for `instance`'s outcome.
    pub fn arrived(&self, instance: Uuid, frame: &Frame) {
        let Some(trace) = &frame.trace else {
            return;
        };
        let (operand_type, operand) = frame.operand.to_wire();
        let mut pending = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if pending.len() >= PENDING
            && !pending.contains_key(&instance)
            && let Some(oldest) = pending
                .iter()
                .min_by_key(|(_, (since, _))| *since)
                .map(|(id, _)| *id)
        {
            tracing::debug!(instance = %oldest, "too many traced STARTs waiting: the oldest is not reported");
            pending.remove(&oldest);
        }
        pending.insert(
            instance,
            (
                Instant::now(),
                FrameTrace {
                    label: trace.label.clone(),
                    operand_type,
                    operand,
                    start_ns: trace.start_ns,
                    end_ns: 0,
                    hops: trace.hops.clone(),
                },
            ),
        );
    }

    /// The report of `instance`'s traced START, done at `now_ns`, if one was waiting.
    pub fn done(&self, instance: Uuid, now_ns: u64) -> Option<TraceReport> {
        let (_, mut frame) = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&instance)?;
        frame.end_ns = now_ns.max(frame.start_ns);
        Some(TraceReport {
            frames: vec![frame],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::Payload;
    use ssntp::frame::Trace;
    use ssntp::payload::Delete;

    fn traced(label: &str) -> Frame {
        let payload = Payload::Delete(Delete {
            instance_uuid: Uuid::from_u128(7),
            workload_agent_uuid: Uuid::from_u128(8),
            stop: false,
        });
        let mut trace = Trace::new(label, Uuid::from_u128(1), ssntp::Role::CONTROLLER, 100);
        trace.stamp_rx(150);
        trace.push_hop(Uuid::from_u128(2), ssntp::Role::SERVER, 160);
        trace.stamp_rx(200);
        Frame::new(Uuid::from_u128(1), &payload).with_trace(trace)
    }

    #[test]
    fn a_traced_frame_is_reported_once_with_its_hops_and_end() {
        let traces = Traces::default();
        let id = Uuid::from_u128(7);
        traces.arrived(id, &traced("web"));
        let report = traces.done(id, 900).expect("a report");
        let frame = &report.frames[0];
        assert_eq!(frame.label, "web");
        assert_eq!((frame.start_ns, frame.end_ns), (100, 900));
        assert_eq!(frame.hops.len(), 2);
        assert_eq!(frame.hops[1].rx_ns, 200);
        assert!(traces.done(id, 901).is_none(), "once");
        // An untraced frame waits for nothing.
        let plain = Frame::new(Uuid::from_u128(1), &Payload::Heartbeat);
        traces.arrived(id, &plain);
        assert!(traces.done(id, 902).is_none());
    }

    #[test]
    fn the_waiting_traces_are_bounded_the_oldest_going_first() {
        let traces = Traces::default();
        for n in 0..(PENDING as u128 + 10) {
            traces.arrived(Uuid::from_u128(n), &traced("x"));
        }
        assert_eq!(traces.0.lock().unwrap().len(), PENDING);
        let newest = Uuid::from_u128(PENDING as u128 + 9);
        assert!(traces.done(newest, 1_000).is_some(), "the newest is kept");
    }
}
