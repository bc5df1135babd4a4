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

/// The next message on `rx` within `within`; panics if none comes or the channel closes.
pub async fn recv_within<T>(rx: &mut mpsc::Receiver<T>, within: Duration) -> T {
    match tokio::time::timeout(within, rx.recv()).await {
        Ok(Some(t)) => t,
        Ok(None) => panic!("the channel closed"),
        Err(_) => panic!("nothing received within {within:?}"),
    }
}
