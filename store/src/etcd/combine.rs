//! [`Combiner`]: the starts that several threads ask for at the same time, made in shared
//! transactions (group commit).
//!
//! The controller applies many nodes' reports side by side (`InstanceStore::writers_at_once`),
//! and a report that shows a new instance running starts it: one read and one commit of its own
//! before, about one instance each, so etcd spent a raft round, an apply and a gRPC exchange per
//! instance. Now a caller queues its starts; while fewer than [`LEADERS`] callers are running
//! queued starts, it takes the starts queued so far (its own among them, [`RUN_STARTS`] at most)
//! and runs them together ([`super::actions`]: up to 25 to a transaction), then hands each
//! caller its answers. A caller that finds the leaders all busy waits, and its starts go with
//! the next leader's: the busier the store, the larger the share. A lone caller runs its own at
//! once, as before.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use uuid::Uuid;

use crate::{EventOutcome, Result, Starting, StoreError, ToStart};

/// The most callers running queued starts at once: enough to keep a transaction in flight
/// while another is built, few enough that the others' starts queue and go together. Two
/// measured best at full size (docs/benchmarks.md: 87.5–89.4 s against four's 99.5–113.6 s;
/// one gave 84.6 and 99.8 s, uneven).
pub(super) const LEADERS: usize = 2;

/// The most starts one caller runs for the queue at a time (four transactions' worth): the
/// callers whose starts it runs wait for all of them, and the rest go with the next run.
pub(super) const RUN_STARTS: usize = 100;

/// One caller's starts: on `node`, finishing `event` with `outcome`.
struct Job {
    id: u64,
    node: Uuid,
    asked: Vec<ToStart>,
    event: String,
    outcome: EventOutcome,
}

#[derive(Default)]
struct Queue {
    next_id: u64,
    /// Callers running queued starts now.
    leaders: usize,
    waiting: Vec<Job>,
    /// Answers for callers that have not taken them yet.
    done: HashMap<u64, Vec<Result<Starting>>>,
}

/// Starts queued by concurrent callers, run together (see the module docs).
#[derive(Default)]
pub(super) struct Combiner {
    queue: Mutex<Queue>,
    changed: Condvar,
}

impl Combiner {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing in the queue is left half-changed by a panic (see `run`).
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `asked` on `node`, run by `start` with whatever other callers queued meanwhile (each
    /// start with its node, every one of them finishing the same `event` with the same
    /// `outcome`); `start` answers every start it is given, in order. Answers `asked` in order.
    pub(super) fn run(
        &self,
        node: Uuid,
        asked: &[ToStart],
        event: &str,
        outcome: &EventOutcome,
        start: impl Fn(&[(Uuid, ToStart)], &str, &EventOutcome) -> Vec<Result<Starting>>,
    ) -> Vec<Result<Starting>> {
        let mut queue = self.lock();
        let id = queue.next_id;
        queue.next_id += 1;
        queue.waiting.push(Job {
            id,
            node,
            asked: asked.to_vec(),
            event: event.to_string(),
            outcome: outcome.clone(),
        });
        loop {
            if let Some(answers) = queue.done.remove(&id) {
                return answers;
            }
            if queue.leaders < LEADERS && !queue.waiting.is_empty() {
                queue.leaders += 1;
                // The first job's kind, and the other jobs of that kind, in order, up to
                // RUN_STARTS starts (the first job whatever its size).
                let first = &queue.waiting[0];
                let (event, outcome) = (first.event.clone(), first.outcome.clone());
                let mut jobs = Vec::new();
                let mut taken = 0;
                let mut others = Vec::new();
                for job in std::mem::take(&mut queue.waiting) {
                    let fits = jobs.is_empty() || taken + job.asked.len() <= RUN_STARTS;
                    if fits && job.event == event && job.outcome == outcome {
                        taken += job.asked.len();
                        jobs.push(job);
                    } else {
                        others.push(job);
                    }
                }
                queue.waiting = others;
                drop(queue);
                let starts: Vec<(Uuid, ToStart)> = jobs
                    .iter()
                    .flat_map(|j| j.asked.iter().map(|a| (j.node, *a)))
                    .collect();
                let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    start(&starts, &event, &outcome)
                }));
                queue = self.lock();
                queue.leaders -= 1;
                let (mut answers, panicked) = match answered {
                    Ok(answers) => (answers.into_iter(), None),
                    Err(panic) => (Vec::new().into_iter(), Some(panic)),
                };
                for job in jobs {
                    let mut own: Vec<Result<Starting>> =
                        answers.by_ref().take(job.asked.len()).collect();
                    while own.len() < job.asked.len() {
                        own.push(Err(StoreError::Backend(
                            "the start was not answered (its share failed)".into(),
                        )));
                    }
                    queue.done.insert(job.id, own);
                }
                self.changed.notify_all();
                if let Some(panic) = panicked {
                    // This caller answers with the panic, not with its queued answers, and its
                    // job (if another kind's run left it queued) is not run for no one.
                    queue.done.remove(&id);
                    queue.waiting.retain(|j| j.id != id);
                    drop(queue);
                    std::panic::resume_unwind(panic);
                }
                continue;
            }
            queue = self
                .changed
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn asked(n: usize) -> Vec<ToStart> {
        (0..n)
            .map(|_| ToStart {
                id: Uuid::new_v4(),
                version: None,
            })
            .collect()
    }

    /// Answers each start with `NotFound` naming its node and instance.
    fn echo(starts: &[(Uuid, ToStart)]) -> Vec<Result<Starting>> {
        starts
            .iter()
            .map(|(node, one)| Err(StoreError::not_found("start", format!("{node}/{}", one.id))))
            .collect()
    }

    fn named(answer: &Result<Starting>) -> String {
        match answer {
            Err(StoreError::NotFound { id, .. }) => id.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn concurrent_callers_share_runs_and_get_their_own_answers_in_order() {
        let combiner = Arc::new(Combiner::default());
        let runs = Arc::new(AtomicUsize::new(0));
        // Every leader slot held by a run that waits until all callers have queued.
        let gate = Arc::new(std::sync::Barrier::new(LEADERS + 1));
        let callers: usize = 12;
        let handles: Vec<_> = (0..callers)
            .map(|i| {
                let (combiner, runs, gate) = (combiner.clone(), runs.clone(), gate.clone());
                std::thread::spawn(move || {
                    let node = Uuid::new_v4();
                    let mine = asked(1 + i % 3);
                    let answers = combiner.run(
                        node,
                        &mine,
                        "start",
                        &EventOutcome::success(),
                        |starts, _, _| {
                            if runs.fetch_add(1, Ordering::SeqCst) < LEADERS {
                                gate.wait();
                            }
                            echo(starts)
                        },
                    );
                    let want: Vec<String> =
                        mine.iter().map(|a| format!("{node}/{}", a.id)).collect();
                    let got: Vec<String> = answers.iter().map(named).collect();
                    assert_eq!(got, want);
                })
            })
            .collect();
        // Wait until every leader slot is taken and every other caller has queued.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let queue = combiner.lock();
            if queue.leaders == LEADERS && queue.waiting.len() == callers - LEADERS {
                break;
            }
            drop(queue);
            assert!(
                std::time::Instant::now() < deadline,
                "callers did not queue"
            );
            std::thread::yield_now();
        }
        gate.wait();
        for h in handles {
            h.join().unwrap();
        }
        // The first LEADERS callers ran alone; the 8 queued behind them went in fewer runs.
        let total = runs.load(Ordering::SeqCst);
        assert!(total > LEADERS && total < callers, "{total} runs");
        assert!(combiner.lock().done.is_empty());
    }

    #[test]
    fn a_lone_caller_runs_its_own_starts_at_once_with_its_event() {
        let combiner = Combiner::default();
        // A lone caller runs its own, with its own event.
        let answers = combiner.run(
            Uuid::nil(),
            &asked(2),
            "rebuild",
            &EventOutcome::success(),
            |starts, event, _| {
                assert_eq!(event, "rebuild");
                echo(starts)
            },
        );
        assert_eq!(answers.len(), 2);
    }

    #[test]
    fn a_run_that_answers_too_few_or_panics_answers_every_caller() {
        let combiner = Combiner::default();
        let answers = combiner.run(
            Uuid::nil(),
            &asked(3),
            "start",
            &EventOutcome::success(),
            |starts, _, _| echo(&starts[..1]),
        );
        assert_eq!(answers.len(), 3);
        assert!(matches!(answers[2], Err(StoreError::Backend(_))));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            combiner.run(
                Uuid::nil(),
                &asked(1),
                "start",
                &EventOutcome::success(),
                |_, _, _| panic!("boom"),
            )
        }));
        assert!(panicked.is_err());
        // The leader's slot came back: the next caller runs.
        let answers = combiner.run(
            Uuid::nil(),
            &asked(1),
            "start",
            &EventOutcome::success(),
            |starts, _, _| echo(starts),
        );
        assert_eq!(answers.len(), 1);
        assert!(combiner.lock().done.is_empty());
    }
}
