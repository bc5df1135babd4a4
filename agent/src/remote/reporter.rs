//! The store-writing [`Reporter`] of an off-host replica (the edge platform's InfoSender): what
//! the core reports about the claimed operation's instance becomes a field-masked write to the
//! controller's store, carrying the claim's fencing token, so a replica that lost its claim
//! writes nothing.

use std::sync::Arc;

use store::{
    Fault, FencedWrite, FieldMask, InstanceFacts, InstanceState as StoreState, InstanceWrite,
    Operation, OperationKind, OperationQueue, OperationState, Placement, StoreError,
};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::model::{
    DeleteRefusal, InstanceEvent, InstanceReport, InstanceState, NodeReport, StartRefusal,
};
use crate::reporter::Reporter;

/// How an operation ended, as written (or refused) in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written: the operation is finished in this state, with this result.
    Finished(OperationState, String),
    /// The store refused the write: the claim was lost.
    Fenced,
    /// The store failed.
    Store(String),
}

/// What a report means for the operation: the instance write, and how the operation ends
/// (`None`: it goes on).
pub fn decide(
    kind: OperationKind,
    host: Uuid,
    event: &InstanceEvent,
) -> Option<(InstanceWrite, Option<(OperationState, String)>)> {
    let masked = |paths: &[&str], facts: InstanceFacts| {
        FieldMask::of(paths.iter().copied())
            .map(|mask| InstanceWrite::Update(mask, facts))
            .ok()
    };
    let done = |text: &str| Some((OperationState::Done, text.to_string()));
    let failed = |text: String| Some((OperationState::Failed, text));
    match (kind, event) {
        // Pending writes nothing: the controller made the instance pending when it queued the
        // start (a launch, or a start of a stopped one), and a takeover redoes a start whose
        // instance is pending still; a write would cost every start a transaction and change
        // nothing.
        (
            OperationKind::Start,
            InstanceEvent::State {
                state: InstanceState::Active,
                ..
            },
        ) => Some((
            masked(
                &["state", "placement.node"],
                InstanceFacts {
                    state: StoreState::Active,
                    placement: Placement {
                        node: Some(host),
                        cnci: None,
                    },
                    fault: None,
                },
            )?,
            done("running"),
        )),
        (
            OperationKind::Start,
            InstanceEvent::StartFailed {
                reason, message, ..
            },
        ) => {
            let why = format!("{reason:?}");
            Some((
                // The parent field: the whole placement goes (it runs nowhere).
                masked(
                    &["state", "placement", "fault"],
                    InstanceFacts {
                        state: StoreState::Error(format!("start_failure: {why}")),
                        placement: Placement::default(),
                        fault: Some(start_fault(*reason, message.as_deref())),
                    },
                )?,
                failed(why),
            ))
        }
        (OperationKind::Stop, InstanceEvent::Stopped { .. })
        | (
            OperationKind::Stop,
            InstanceEvent::DeleteFailed {
                reason: DeleteRefusal::NoInstance,
                ..
            },
        ) => Some((
            // Powered off and kept on its host: a start boots it there.
            masked(
                &["state", "placement.node"],
                InstanceFacts {
                    state: StoreState::Exited,
                    placement: Placement {
                        node: Some(host),
                        cnci: None,
                    },
                    fault: None,
                },
            )?,
            done("stopped"),
        )),
        (OperationKind::Delete, InstanceEvent::Deleted { .. } | InstanceEvent::Stopped { .. })
        | (
            OperationKind::Delete,
            InstanceEvent::DeleteFailed {
                reason: DeleteRefusal::NoInstance,
                ..
            },
        ) => Some((InstanceWrite::Remove, done("deleted"))),
        (
            OperationKind::Stop | OperationKind::Delete,
            InstanceEvent::DeleteFailed { reason, .. },
        ) => Some((InstanceWrite::Nothing, failed(format!("{reason:?}")))),
        _ => None,
    }
}

/// The fault a failed start leaves on the instance: its START_FAILURE reason (as on the wire)
/// and the backend's message, or what the reason means.
fn start_fault(reason: StartRefusal, message: Option<&str>) -> Fault {
    let wire = crate::wire::start_failure_reason(reason);
    let code = serde_json::to_value(wire)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "launch_failure".into());
    let message = message.map_or_else(|| wire.meaning().to_string(), str::to_string);
    Fault::now(code, message)
}

/// The most reports a [`Finisher`] hands the store at once.
const FINISH_BATCH: usize = 64;

/// A report waiting for the [`Finisher`], and where its result goes.
type Job = (FencedWrite, oneshot::Sender<Result<Operation, StoreError>>);

/// Writes the reports of a replica's operations to the store, batched: while one batch is in
/// the store ([`OperationQueue::fenced_writes`]), the reports that arrive wait and go together in
/// the next (at most 64). One report alone goes at once. The task ends when every
/// handle is gone.
#[derive(Clone)]
pub struct Finisher {
    jobs: mpsc::Sender<Job>,
}

impl Finisher {
    /// Starts the task over `store` (within a tokio runtime).
    pub fn spawn(store: Arc<dyn OperationQueue>) -> Finisher {
        let (jobs, mut rx) = mpsc::channel::<Job>(4 * FINISH_BATCH);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < FINISH_BATCH {
                    match rx.try_recv() {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
                let reports: Vec<FencedWrite> = batch.iter().map(|(r, _)| r.clone()).collect();
                let s = store.clone();
                let results = tokio::task::spawn_blocking(move || s.fenced_writes(&reports))
                    .await
                    .map_err(|e| StoreError::Backend(format!("store task: {e}")));
                match results {
                    Ok(results) => {
                        for ((_, reply), result) in batch.into_iter().zip(results) {
                            // The operation may have been given up meanwhile: nobody to tell.
                            let _ = reply.send(result);
                        }
                    }
                    Err(e) => {
                        for (_, reply) in batch {
                            let _ = reply.send(Err(e.clone()));
                        }
                    }
                }
            }
        });
        Finisher { jobs }
    }

    /// Writes `report` (with the others waiting) and returns its result.
    pub async fn write(&self, report: FencedWrite) -> Result<Operation, StoreError> {
        let (reply, result) = oneshot::channel();
        let gone = || StoreError::Backend("the replica's finisher stopped".into());
        self.jobs.send((report, reply)).await.map_err(|_| gone())?;
        result.await.map_err(|_| gone())?
    }
}

/// The reporter of one claimed operation.
pub struct StoreReporter {
    finisher: Finisher,
    op: Operation,
    token: u64,
    done: Option<oneshot::Sender<Outcome>>,
}

impl StoreReporter {
    /// A reporter for `op` under claim `token`, writing through `finisher`; the outcome goes to
    /// `done` once.
    pub fn new(
        finisher: Finisher,
        op: Operation,
        token: u64,
        done: oneshot::Sender<Outcome>,
    ) -> StoreReporter {
        StoreReporter {
            finisher,
            op,
            token,
            done: Some(done),
        }
    }
}

impl Reporter for StoreReporter {
    // The host's figures are not kept in the store: only what the operation changes is written.
    async fn status(&mut self, _node: &NodeReport) {}

    async fn stats(&mut self, _node: &NodeReport, _instances: &[InstanceReport]) {}

    async fn event(&mut self, event: &InstanceEvent) {
        if event.instance() != self.op.instance || self.done.is_none() {
            return;
        }
        let Some((write, finish)) = decide(self.op.kind, self.op.host, event) else {
            return;
        };
        let finishing = finish.is_some();
        let report = FencedWrite {
            id: self.op.id,
            token: self.token,
            write,
            finish,
        };
        let outcome = match self.finisher.write(report).await {
            Ok(op) if finishing => Outcome::Finished(op.state, op.result.unwrap_or_default()),
            Ok(_) => return,
            Err(StoreError::Fenced { .. }) => Outcome::Fenced,
            Err(e) => Outcome::Store(e.to_string()),
        };
        if let Some(done) = self.done.take() {
            // The runner may have given up on the operation already: nobody to tell.
            let _ = done.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_writes_once_when_active_and_nothing_while_pending() {
        let (host, instance) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let event = |state| InstanceEvent::State { instance, state };
        assert!(decide(OperationKind::Start, host, &event(InstanceState::Pending)).is_none());
        let Some((InstanceWrite::Update(mask, facts), Some((OperationState::Done, _)))) =
            decide(OperationKind::Start, host, &event(InstanceState::Active))
        else {
            panic!("not a finished start");
        };
        assert!(mask.has("state") && mask.has("placement.node"));
        assert_eq!(facts.state, StoreState::Active);
        assert_eq!(facts.placement.node, Some(host));
    }

    #[test]
    fn a_failed_start_writes_its_fault() {
        let (host, instance) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let event = |message: Option<&str>| InstanceEvent::StartFailed {
            instance,
            reason: StartRefusal::LaunchFailure,
            restart: false,
            message: message.map(str::to_string),
        };
        let Some((InstanceWrite::Update(mask, facts), Some((OperationState::Failed, _)))) = decide(
            OperationKind::Start,
            host,
            &event(Some("QEMU could not open /x")),
        ) else {
            panic!("not a failed start");
        };
        assert!(mask.has("fault") && mask.has("state") && mask.has("placement.node"));
        let fault = facts.fault.unwrap();
        assert_eq!(
            (fault.reason.as_str(), fault.message.as_str()),
            ("launch_failure", "QEMU could not open /x")
        );
        // Without a message, the reason in words.
        let Some((InstanceWrite::Update(_, facts), _)) =
            decide(OperationKind::Start, host, &event(None))
        else {
            panic!("not a failed start");
        };
        assert_eq!(
            facts.fault.unwrap().message,
            "the instance failed to launch"
        );
    }
}
