//! [`RecordingReporter`], the recording fake reporter of tests (built for `cfg(test)` and the
//! `testing` feature only).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;

use super::Reporter;
use crate::model::{InstanceEvent, InstanceReport, NodeReport};

/// One report, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// [`Reporter::status`].
    Status(NodeReport),
    /// [`Reporter::stats`].
    Stats(NodeReport, Vec<InstanceReport>),
    /// [`Reporter::event`].
    Event(InstanceEvent),
}

/// The recording fake: keeps every report; clones share them, so a test keeps one clone and
/// gives the other to the core.
#[derive(Clone)]
pub struct RecordingReporter {
    reports: Arc<Mutex<Vec<Report>>>,
    changed: watch::Sender<usize>,
}

/// [`RecordingReporter::wait_for`] gave up: the deadline passed first.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no report matched within {waited:?}; reports so far: {reports:#?}")]
pub struct WaitTimeout {
    /// How long it waited.
    pub waited: Duration,
    /// What had been reported.
    pub reports: Vec<Report>,
}

impl Default for RecordingReporter {
    fn default() -> RecordingReporter {
        RecordingReporter::new()
    }
}

impl RecordingReporter {
    /// A reporter with nothing recorded.
    pub fn new() -> RecordingReporter {
        RecordingReporter {
            reports: Arc::new(Mutex::new(Vec::new())),
            changed: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Report>> {
        self.reports.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, report: Report) {
        let n = {
            let mut reports = self.lock();
            reports.push(report);
            reports.len()
        };
        self.changed.send_replace(n);
    }

    /// Every report so far, in order.
    pub fn reports(&self) -> Vec<Report> {
        self.lock().clone()
    }

    /// The instance events so far, in order.
    pub fn events(&self) -> Vec<InstanceEvent> {
        self.lock()
            .iter()
            .filter_map(|r| match r {
                Report::Event(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    }

    /// Forgets every report so far.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Waits until `check` finds something in the reports so far (it is called again after
    /// every new report), for at most `within` (virtual time in tests with a paused clock).
    pub async fn wait_for<T>(
        &self,
        within: Duration,
        mut check: impl FnMut(&[Report]) -> Option<T>,
    ) -> Result<T, WaitTimeout> {
        let deadline = tokio::time::Instant::now() + within;
        let mut rx = self.changed.subscribe();
        loop {
            rx.mark_unchanged();
            // On a copy: `check` may use the reporter itself.
            if let Some(found) = check(&self.reports()) {
                return Ok(found);
            }
            let timed_out = tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err();
            if timed_out {
                return Err(WaitTimeout {
                    waited: within,
                    reports: self.reports(),
                });
            }
        }
    }

    /// Waits until an event equal to `event` has been reported.
    pub async fn wait_event(
        &self,
        within: Duration,
        event: InstanceEvent,
    ) -> Result<(), WaitTimeout> {
        let event = Report::Event(event);
        self.wait_for(within, |reports| reports.contains(&event).then_some(()))
            .await
    }
}

impl Reporter for RecordingReporter {
    async fn status(&mut self, node: &NodeReport) {
        self.push(Report::Status(node.clone()));
    }

    async fn stats(&mut self, node: &NodeReport, instances: &[InstanceReport]) {
        self.push(Report::Stats(node.clone(), instances.to_vec()));
    }

    async fn event(&mut self, event: &InstanceEvent) {
        self.push(Report::Event(event.clone()));
    }
}
