//! Drives an [`Engine`] from its SSNTP clients' events (one client per scheduler, see
//! [`Schedulers`]) and a sweep timer, until shutdown.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ssntp::Payload;
use ssntp::session::Message;
use ssntp_net::client::{ClientEvent, Merged};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Engine, Schedulers, Verdict};

/// Applies the clients' events to the engine, in order for each scheduler (through
/// `schedulers`, which routes what the engine sends), and sweeps every `sweep_every`, until
/// `shutdown` or a client stops; a CNCI START due to go again sooner than the next sweep
/// (see [`Engine::next_cnci_retry`]) goes when due. Store work runs on the blocking pool.
///
/// A client that stops (replaced by another process with the same identity, or refused for
/// good) leaves no way to reach the cluster: the engine gives up ([`Engine::give_up`]) and
/// `shutdown` is cancelled, so the daemon exits with the cause rather than live on unable to
/// place anything.
pub async fn run(
    engine: Arc<Engine>,
    schedulers: Arc<Schedulers>,
    mut events: Merged,
    sweep_every: Duration,
    shutdown: CancellationToken,
) {
    if let Some(pushes) = engine.firewall_pushes() {
        tokio::spawn(super::firewall::push_loop(
            pushes,
            engine.config.console_tls.clone(),
            engine.firewall_outcomes(),
        ));
    }
    let mut sweep = tokio::time::interval(sweep_every);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // An event read ahead while gathering frames (below), handled before the next one.
    let mut held: Option<(usize, ClientEvent)> = None;
    loop {
        let retry_at = engine.next_cnci_retry();
        let retry_in = retry_at
            .map(|at| at.duration_since(SystemTime::now()).unwrap_or_default())
            .unwrap_or_default();
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(retry_in), if retry_at.is_some() => {
                let engine = engine.clone();
                // The time slept until, should the wall clock lag the timer.
                let now = retry_at.map_or_else(SystemTime::now, |at| SystemTime::now().max(at));
                let retried = tokio::task::spawn_blocking(move || engine.retry_cncis(now)).await;
                match retried {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!("CNCI retries: {e}"),
                    Err(e) => tracing::error!("CNCI retry task: {e}"),
                }
            }
            _ = sweep.tick() => {
                // How far the cluster is heard: up to the oldest frames still waiting.
                let now = SystemTime::now();
                let heard = heard_until(held.as_ref().map(|(_, event)| event), &events, now);
                let engine = engine.clone();
                let swept =
                    tokio::task::spawn_blocking(move || engine.sweep_heard(now, heard)).await;
                match swept {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!("sweep: {e}"),
                    Err(e) => tracing::error!("sweep task: {e}"),
                }
            }
            event = next_event(&mut held, &mut events) => match event {
                None => {
                    engine.give_up("the SSNTP client's events ended".into());
                    shutdown.cancel();
                    return;
                }
                Some((link, ClientEvent::Connected { server_uuid, .. })) => {
                    tracing::info!("connected to the scheduler {server_uuid}");
                    schedulers.opened(link, server_uuid);
                    engine.scheduler_connected(server_uuid);
                }
                Some((link, ClientEvent::Disconnected { reason })) => {
                    tracing::warn!("disconnected from scheduler {link}: {reason}");
                    let (nodes, starts) = schedulers.disconnected(link);
                    engine.nodes_unreachable(&nodes);
                    if !starts.is_empty() {
                        let (engine, schedulers) = (engine.clone(), schedulers.clone());
                        let resent = tokio::task::spawn_blocking(move || {
                            schedulers.resend(&engine.orphaned_starts(&starts))
                        })
                        .await;
                        match resent {
                            Ok(ids) if !ids.is_empty() => tracing::warn!(
                                count = ids.len(),
                                "STARTs that scheduler {link} took sent again"
                            ),
                            Ok(_) => {}
                            Err(e) => tracing::error!("resend task: {e}"),
                        }
                    }
                }
                Some((_, ClientEvent::Stopped(e))) => {
                    engine.scheduler_disconnected();
                    engine.give_up(format!("the SSNTP client stopped for good: {e}"));
                    shutdown.cancel();
                    return;
                }
                Some((link, ClientEvent::Frames { mut messages, .. })) => {
                    // What the client has read from the same scheduler since: applied with
                    // these, so that many nodes' STATS can go side by side.
                    while messages.len() < FRAMES_AT_ONCE {
                        match events.try_recv() {
                            Ok((more_from, ClientEvent::Frames { messages: more, .. })) if more_from == link => {
                                messages.extend(more);
                            }
                            Ok(other) => {
                                held = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    let (engine, schedulers) = (engine.clone(), schedulers.clone());
                    let handled = tokio::task::spawn_blocking(move || {
                        let at_once = engine.store.writers_at_once();
                        apply_frames(&engine, &schedulers, link, &messages, at_once);
                    })
                    .await;
                    if let Err(e) = handled {
                        tracing::error!("event task: {e}");
                    }
                }
            }
        }
    }
}

/// The most frames applied together: those the client had read when the first of them was taken
/// up, to this many.
const FRAMES_AT_ONCE: usize = 1024;

/// How far the cluster is heard at `now`, the event read ahead being `held` and the others
/// waiting in `events`: up to the read time of the oldest frames waiting (or the time another
/// event, with frames behind it, was taken from its client); everything, if none waits.
pub(super) fn heard_until(
    held: Option<&ClientEvent>,
    events: &Merged,
    now: SystemTime,
) -> SystemTime {
    let held = match held {
        Some(ClientEvent::Frames { read_at, .. }) => Some(*read_at),
        _ => None,
    };
    match held.into_iter().chain(events.oldest_waiting()).min() {
        Some(read_at) => now.checked_sub(read_at.elapsed()).unwrap_or(now),
        None => now,
    }
}

/// The event read ahead, if one was, else the next.
async fn next_event(
    held: &mut Option<(usize, ClientEvent)>,
    events: &mut Merged,
) -> Option<(usize, ClientEvent)> {
    match held.take() {
        Some(event) => Some(event),
        None => events.recv().await,
    }
}

/// Applies frames from scheduler `link`, in order; with `at_once` above 1 (the store's
/// [`store::InstanceStore::writers_at_once`]), the STATS that come one after the other are
/// applied side by side, on up to `at_once` threads, each node's in order on one thread. A
/// node's report touches that node's instances, whose records each take their own
/// transactions; the order between two nodes' reports is the network's anyway. Any other frame
/// waits for the STATS before it and is applied alone.
pub(super) fn apply_frames(
    engine: &Engine,
    schedulers: &Schedulers,
    link: usize,
    messages: &[Message],
    at_once: usize,
) {
    let mut reports: Vec<&Message> = Vec::new();
    for message in messages {
        let (origin, payload) = (message.frame.origin, &message.payload);
        let report = at_once > 1 && matches!(payload, Payload::Stats(_));
        if !report {
            apply_side_by_side(engine, &reports, at_once);
            reports.clear();
        }
        if schedulers.inbound(link, origin, payload) == Verdict::Skip {
            continue;
        }
        if report {
            reports.push(message);
        } else {
            apply_one(engine, message);
        }
    }
    apply_side_by_side(engine, &reports, at_once);
}

/// Applies `messages` on up to `at_once` threads, those of one origin in order on one thread.
fn apply_side_by_side(engine: &Engine, messages: &[&Message], at_once: usize) {
    let mut by_origin: std::collections::HashMap<Uuid, Vec<&Message>> = Default::default();
    for &m in messages {
        by_origin.entry(m.frame.origin).or_default().push(m);
    }
    if by_origin.len() < 2 {
        messages.iter().for_each(|m| apply_one(engine, m));
        return;
    }
    let origins: Vec<Vec<&Message>> = by_origin.into_values().collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..at_once.min(origins.len()) {
            scope.spawn(|| {
                while let Some(own) =
                    origins.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    own.iter().for_each(|m| apply_one(engine, m));
                }
            });
        }
    });
}

/// Applies one frame, logging what could not be.
fn apply_one(engine: &Engine, message: &Message) {
    let (origin, payload) = (message.frame.origin, &message.payload);
    if let Err(e) = engine.handle_from(origin, payload, SystemTime::now()) {
        tracing::warn!(
            "{} from the scheduler not applied: {e}",
            payload.operand().name()
        );
    }
}
