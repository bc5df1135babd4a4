//! Drives an [`Engine`] from its SSNTP clients' events (one client per scheduler, see
//! [`Schedulers`]) and a sweep timer, until shutdown.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ssntp_net::client::ClientEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
    mut events: mpsc::Receiver<(usize, ClientEvent)>,
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
                let engine = engine.clone();
                let swept = tokio::task::spawn_blocking(move || engine.sweep(SystemTime::now())).await;
                match swept {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!("sweep: {e}"),
                    Err(e) => tracing::error!("sweep task: {e}"),
                }
            }
            event = events.recv() => match event {
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
                Some((link, ClientEvent::Frames(messages))) => {
                    let (engine, schedulers) = (engine.clone(), schedulers.clone());
                    let handled = tokio::task::spawn_blocking(move || {
                        for message in &messages {
                            let (origin, payload) = (message.frame.origin, &message.payload);
                            if schedulers.inbound(link, origin, payload) == Verdict::Skip {
                                continue;
                            }
                            if let Err(e) = engine.handle_from(origin, payload, SystemTime::now()) {
                                tracing::warn!(
                                    "{} from the scheduler not applied: {e}",
                                    message.payload.operand().name()
                                );
                            }
                        }
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
