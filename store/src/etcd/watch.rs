//! The store's watches: each keeps something in memory up to date with every process's writes
//! under a prefix ([`Follower`]): the node briefs (`briefs.rs`, under `node/`) and the count of
//! instances in each state (`tally.rs`, under `bystate/`).
//!
//! A watch is made when the store first needs what it keeps ([`first`]), so that a process that
//! never does (a launcher, the CLI) has none; then [`follow`] runs on the store's runtime until
//! the store is dropped. A watch that ends (etcd closed it, compacted past it, or ended it as its
//! member lost its leader; the connection failed; it answered no progress request, asked every
//! 5 s, within the call timeout; or its follower asked for it again) is told to its follower
//! ([`Follower::down`]) and made again, after a pause that doubles up to 30 s (from 0.5 s
//! again once a watch has lived 30 s).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Event, WatchClient, WatchOptions, WatchStream};

use super::EtcdStore;

/// What a watch keeps up to date.
pub(super) trait Follower: Send + Sync + 'static {
    /// The prefix watched: every key under it.
    fn prefix(&self) -> &str;
    /// What it keeps, for log lines.
    fn what(&self) -> &'static str;
    /// The watch is up: every write after `revision` under the prefix will be delivered.
    fn up(&self, revision: i64);
    /// The watch ended: writes may go undelivered until it is up again.
    fn down(&self);
    /// Writes delivered, in revision order.
    fn events(&self, events: &[Event]);
    /// Whether the follower asks for the watch to be made again (checked every
    /// [`PROGRESS_EVERY`]).
    fn stale(&self) -> bool {
        false
    }
}

/// How often a quiet watch is asked for its progress (etcd answers at once): an answer that
/// does not come within the call timeout ends the watch.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The longest pause between two attempts to make a watch; a watch that lived less than this
/// does not start the pauses again from the shortest.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// The largest watch response taken (a watcher that fell behind gets up to 1,000 revisions'
/// writes in one).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

impl EtcdStore {
    /// Makes the watch that keeps `follower` up to date, once (`made` says whether it was):
    /// when the store first needs what it keeps (a round trip), and leaves it to run on the
    /// store's runtime (`watch.rs`). A watch that cannot be made is tried again there.
    pub(super) fn follow<F: Follower>(
        &self,
        follower: &std::sync::Arc<F>,
        made: &std::sync::atomic::AtomicBool,
    ) {
        if made.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = self.runtime() else { return };
        let (them, timeout) = (follower.clone(), self.options.call_timeout);
        let mut client = self.watch_client();
        let first = self.call(async move {
            let first = first(&*them, &mut client, timeout).await;
            Ok::<_, etcd_client::Error>((first, client))
        });
        let (stream, client) = match first {
            Ok((Ok(stream), client)) => (Some(stream), client),
            Ok((Err(why), client)) => {
                tracing::warn!("the etcd store's watch on {}: {why}", follower.what());
                (None, client)
            }
            Err(e) => {
                tracing::warn!("the etcd store's watch on {}: {e}", follower.what());
                (None, self.watch_client())
            }
        };
        runtime.spawn(follow(follower.clone(), client, stream, timeout));
    }

    /// A watch client, taking messages of up to [`MAX_MESSAGE`].
    fn watch_client(&self) -> etcd_client::WatchClient {
        self.watcher
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE)
    }
}

/// Makes the watch on `follower`'s prefix (within `timeout`) and tells it the watch is up.
async fn first<F: Follower>(
    follower: &F,
    client: &mut WatchClient,
    timeout: Duration,
) -> Result<WatchStream, String> {
    let made = async {
        let options = WatchOptions::new().with_prefix();
        let mut stream = client
            .watch(follower.prefix(), Some(options))
            .await
            .map_err(|e| e.to_string())?;
        let created = stream
            .message()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("etcd closed the watch as it was made")?;
        let revision = created
            .header()
            .map(etcd_client::ResponseHeader::revision)
            .filter(|_| created.created() && !created.canceled())
            .ok_or_else(|| format!("etcd refused the watch: {}", created.cancel_reason()))?;
        follower.up(revision);
        Ok(stream)
    };
    tokio::time::timeout(timeout, made)
        .await
        .map_err(|_| format!("etcd made no watch within {timeout:?}"))?
}

/// Follows `stream` (made by [`first`], if it was), then makes the watch again whenever it
/// ends, until the runtime stops.
async fn follow<F: Follower>(
    follower: Arc<F>,
    mut client: WatchClient,
    mut stream: Option<WatchStream>,
    timeout: Duration,
) {
    let mut pause = Duration::from_millis(500);
    loop {
        if let Some(stream) = stream.take() {
            let began = tokio::time::Instant::now();
            let why = run(&*follower, stream, timeout).await;
            if began.elapsed() > MAX_PAUSE {
                pause = Duration::from_millis(500);
            }
            follower.down();
            tracing::warn!(
                "the etcd store's watch on {} ended ({why}); made again",
                follower.what()
            );
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
        match first(&*follower, &mut client, timeout).await {
            Ok(made) => stream = Some(made),
            Err(why) => tracing::warn!(
                "the etcd store's watch on {}: {why}; read from etcd meanwhile",
                follower.what()
            ),
        }
    }
}

/// Hands what the watch delivers to `follower` until it ends; returns why it did.
async fn run<F: Follower>(follower: &F, mut stream: WatchStream, timeout: Duration) -> String {
    let mut ticks = tokio::time::interval(PROGRESS_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When a progress request went unanswered so far.
    let mut asked: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            message = stream.message() => {
                asked = None;
                match message {
                    Ok(Some(resp)) if resp.canceled() || resp.compact_revision() != 0 => {
                        return format!(
                            "etcd cancelled it: {} (compacted at {})",
                            resp.cancel_reason(),
                            resp.compact_revision()
                        );
                    }
                    Ok(Some(resp)) => follower.events(resp.events()),
                    Ok(None) => return "etcd closed it".into(),
                    Err(e) => return e.to_string(),
                }
            }
            _ = ticks.tick() => match asked {
                _ if follower.stale() => return "its follower asked for it again".into(),
                Some(at) if at.elapsed() > timeout => {
                    return format!("no answer to a progress request within {timeout:?}");
                }
                Some(_) => {}
                None => {
                    if let Err(e) = stream.request_progress().await {
                        return e.to_string();
                    }
                    asked = Some(tokio::time::Instant::now());
                }
            },
        }
    }
}

/// Whether an event's key was deleted: told by its version (0: etcd gives a deleted key no
/// version), not by the event's type, whose accessor panics on a type it does not know.
pub(super) fn deleted(kv: &etcd_client::KeyValue) -> bool {
    kv.version() == 0
}
