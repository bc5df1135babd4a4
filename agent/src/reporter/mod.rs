//! The [`Reporter`] trait: where the core sends what happens (SSNTP frames on a host, store
//! writes off the host), and (with the `testing` feature)
//! `RecordingReporter`, a recording fake for tests.
//!
//! The trait speaks the agent's own types ([`crate::model`]), never SSNTP's. The core calls it
//! from one task, in the order things happened; a reporter that cannot deliver now (no
//! connection) should drop or buffer rather than wait for long, since the core waits for it.

#[cfg(any(test, feature = "testing"))]
mod recording;

use std::future::Future;

use crate::model::{InstanceEvent, InstanceReport, NodeReport};

/// Where the core sends the node's status, its stats and instance events.
pub trait Reporter: Send + 'static {
    /// The node's status and figures (READY, FULL or MAINTENANCE): on connect, every stats
    /// interval, and after every start and delete.
    fn status(&mut self, node: &NodeReport) -> impl Future<Output = ()> + Send;

    /// The node's figures with every instance's state and usage (STATS): on connect, every
    /// stats interval, and shortly after instances change state.
    fn stats(
        &mut self,
        node: &NodeReport,
        instances: &[InstanceReport],
    ) -> impl Future<Output = ()> + Send;

    /// Something happened to one instance.
    fn event(&mut self, event: &InstanceEvent) -> impl Future<Output = ()> + Send;
}

#[cfg(any(test, feature = "testing"))]
pub use recording::{RecordingReporter, Report, WaitTimeout};
