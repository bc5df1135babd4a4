//! Traces: the engine marks the STARTs a request asked to trace (or a sample of them), sends
//! them traced, and keeps (and exports, OTLP) the TRACE_REPORTs that come back (docs/traces.md).

use ssntp::Payload;
use ssntp::payload::TraceReport;
use uuid::Uuid;

use super::{Engine, TRACE_FRAMES, TRACE_HOPS, TRACED_MAX};
use crate::cluster::{Caller, ClusterError, Trace, TraceHop, TraceLabel};
use store::Instance;

impl Engine {
    /// Marks the STARTs of `instances` to be traced: under the caller's label if it asked, else
    /// a sampled share of them under `sampled`. At most [`TRACED_MAX`] wait at once.
    pub(super) fn mark_traced(&self, instances: &[Instance], by: &Caller) {
        let sampled = TraceLabel::new("sampled");
        let mut state = self.state();
        for instance in instances {
            let label = match by.trace {
                Some(label) => Some(label),
                None if self.config.trace_sample > 0.0
                    && fastrand::f64() < self.config.trace_sample =>
                {
                    sampled
                }
                None => None,
            };
            if let Some(label) = label
                && state.traced.len() < TRACED_MAX
            {
                state.traced.insert(instance.id, label);
            }
        }
    }

    /// Forgets the trace labels of `ids` that were not taken by their START.
    pub(super) fn unmark_traced(&self, ids: &[Uuid]) {
        let mut state = self.state();
        if state.traced.is_empty() {
            return;
        }
        for id in ids {
            state.traced.remove(id);
        }
    }

    /// Sends `payload`, traced under `label` if there is one.
    pub(super) fn send_maybe_traced(
        &self,
        payload: &Payload,
        label: Option<TraceLabel>,
    ) -> Result<(), ClusterError> {
        match label {
            Some(label) => self
                .out
                .send_traced(payload, label.as_str())
                .map_err(|e| ClusterError::Unavailable(format!("scheduler: {e}"))),
            None => self.send(payload),
        }
    }

    /// A TRACE_REPORT: its traces kept (the newest [`EngineConfig::traces`]), and exported
    /// (OTLP) by the controller that created them. A peer controls all of it: at most
    /// [`TRACE_FRAMES`] traces a report, [`TRACE_HOPS`] hops a trace, labels cut to
    /// [`TraceLabel::MAX`] printable bytes.
    pub(super) fn on_traces(&self, report: &TraceReport) {
        let mut state = self.state();
        if report.frames.len() > TRACE_FRAMES {
            tracing::debug!(
                frames = report.frames.len(),
                "a TRACE_REPORT with too many traces: the first {TRACE_FRAMES} kept"
            );
        }
        for frame in report.frames.iter().take(TRACE_FRAMES) {
            let name = ssntp::Operand::from_wire(frame.operand_type, frame.operand).name();
            let label: String = frame
                .label
                .chars()
                .filter(|c| *c == ' ' || c.is_ascii_graphic())
                .take(TraceLabel::MAX)
                .collect();
            let trace = Trace {
                label,
                frame: name.to_string(),
                total_ns: frame.end_ns.saturating_sub(frame.start_ns),
                hops: frame
                    .hops
                    .iter()
                    .take(TRACE_HOPS)
                    .map(|h| TraceHop {
                        uuid: h.uuid,
                        role: h.role.to_string(),
                        tx_ns: h.tx_ns,
                        rx_ns: h.rx_ns,
                    })
                    .collect(),
            };
            // Every controller hears every report: the one that sent the frame exports it.
            if let Some(exporter) = self.otlp.get()
                && trace
                    .hops
                    .first()
                    .is_some_and(|h| h.uuid == self.config.uuid)
            {
                exporter.export(&trace);
            }
            state.traces.push_back(trace);
            while state.traces.len() > self.config.traces {
                state.traces.pop_front();
            }
        }
    }
}
