//! The watch on every node's index (`<prefix>node/`) that keeps [`NodeBriefs`] up to date with
//! every process's writes, so that a kept read need not expire while the watch is up.
//!
//! The watch is made when the store first reads a node's briefs ([`first`]), so that a process
//! that never does (a launcher, the CLI) has none; then [`follow`] runs on the store's runtime
//! until the store is dropped. A watch that ends (etcd closed it, compacted past it, the
//! connection failed, or it answered no progress request within the call timeout) drops every
//! kept read and is made again, after a pause that doubles up to 30 s; meanwhile reads are kept
//! for [`EtcdOptions::briefs_kept`](super::EtcdOptions::briefs_kept) as with no watch.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{WatchClient, WatchOptions, WatchResponse, WatchStream};

use super::briefs::{IndexWrite, NodeBriefs, Watched};

/// How often a quiet watch is asked for its progress (etcd answers at once): an answer that
/// does not come within the call timeout ends the watch.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The longest pause between two attempts to make the watch.
const MAX_PAUSE: Duration = Duration::from_secs(30);

/// Makes the watch (within `timeout`) and tells `briefs` it is up.
pub(super) async fn first(
    briefs: &NodeBriefs,
    client: &mut WatchClient,
    timeout: Duration,
) -> Result<WatchStream, String> {
    let made = async {
        let options = WatchOptions::new().with_prefix();
        let mut stream = client
            .watch(briefs.root(), Some(options))
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
        briefs.watching(revision);
        Ok(stream)
    };
    tokio::time::timeout(timeout, made)
        .await
        .map_err(|_| format!("etcd made no watch within {timeout:?}"))?
}

/// Follows `stream` (made by [`first`], if it was), then makes the watch again whenever it
/// ends, until the runtime stops.
pub(super) async fn follow(
    briefs: Arc<NodeBriefs>,
    mut client: WatchClient,
    mut stream: Option<WatchStream>,
    timeout: Duration,
) {
    let mut pause = Duration::from_millis(500);
    loop {
        if let Some(stream) = stream.take() {
            pause = Duration::from_millis(500);
            let why = run(&briefs, stream, timeout).await;
            briefs.unwatched();
            tracing::warn!("the etcd store's watch on the node indexes ended ({why}); made again");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
        match first(&briefs, &mut client, timeout).await {
            Ok(made) => stream = Some(made),
            Err(why) => tracing::warn!(
                "the etcd store's watch on the node indexes: {why}; \
                 node briefs are kept for their time meanwhile"
            ),
        }
    }
}

/// Applies what the watch delivers until it ends; returns why it did.
async fn run(briefs: &NodeBriefs, mut stream: WatchStream, timeout: Duration) -> String {
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
                    Ok(Some(resp)) => briefs.watched(&writes(briefs, &resp)),
                    Ok(None) => return "etcd closed it".into(),
                    Err(e) => return e.to_string(),
                }
            }
            _ = ticks.tick() => match asked {
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

/// The writes of one watch response. A deletion is told by its version (0: etcd gives a
/// deleted key no version), not by the event's type, whose accessor panics on a type it does
/// not know.
fn writes(briefs: &NodeBriefs, resp: &WatchResponse) -> Vec<Watched> {
    resp.events()
        .iter()
        .filter_map(|event| event.kv())
        .map(|kv| {
            let Ok(key) = kv.key_str() else {
                return Watched::Unknown;
            };
            let revision = kv.mod_revision();
            match briefs.index_key(key) {
                Some((node, Some(instance))) => Watched::Write(
                    IndexWrite {
                        node,
                        instance,
                        value: (kv.version() != 0).then(|| kv.value().to_vec()),
                    },
                    revision,
                ),
                Some((node, None)) => Watched::Node(node, revision),
                None => Watched::Unknown,
            }
        })
        .collect()
}
