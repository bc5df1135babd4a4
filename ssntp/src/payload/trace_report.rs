//! TRACE_REPORT: traces of frames that reached their final consumer.

use serde::{Deserialize, Serialize};

use super::trace::Hop;

/// TRACE_REPORT: a batch of finished frame traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceReport {
    /// The traces.
    pub frames: Vec<FrameTrace>,
}

/// The trace of one frame, from its creator to its final consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameTrace {
    /// The trace's label.
    pub label: String,
    /// The frame's type byte.
    pub operand_type: u8,
    /// The frame's operand byte.
    pub operand: u8,
    /// When the trace started, ns since the Unix epoch.
    pub start_ns: u64,
    /// When the final consumer was done, ns since the Unix epoch.
    pub end_ns: u64,
    /// The hops, creator first.
    pub hops: Vec<Hop>,
}
