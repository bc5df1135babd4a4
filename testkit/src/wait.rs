//! Waiting with deadlines instead of sleeps.

use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;

/// Polls `condition` until it holds, every few milliseconds, for at most `within`; panics with
/// `what` if it never does.
pub async fn wait_until<F, Fut>(within: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if condition().await {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls `probe` until it gives `Ok`, every few milliseconds, for at most `within`; panics with
/// the last `Err` (what was seen instead: a state, a log) if it never does.
pub async fn wait_for<T, F, Fut>(within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match probe().await {
            Ok(found) => return found,
            Err(seen) if tokio::time::Instant::now() >= deadline => {
                panic!("timed out after {within:?}: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// As [`wait_for`], for code without a runtime (tests that drive processes): polls `probe`
/// every few milliseconds, blocking the thread.
pub fn poll_for<T>(within: Duration, probe: impl FnMut() -> Result<T, String>) -> T {
    try_poll_for(within, probe).unwrap_or_else(|seen| panic!("timed out after {within:?}: {seen}"))
}

/// As [`poll_for`], giving the last `Err` (what was seen instead) when `within` runs out rather
/// than panicking.
pub fn try_poll_for<T>(
    within: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match probe() {
            Ok(found) => return Ok(found),
            Err(seen) if std::time::Instant::now() >= deadline => return Err(seen),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The next message on `rx` within `within`; panics if none comes or the channel closes.
pub async fn recv_within<T>(rx: &mut mpsc::Receiver<T>, within: Duration) -> T {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Some(t)) => t,
        Ok(None) => panic!("the channel closed"),
        Err(_) => panic!("nothing received within {within:?}"),
    }
}
