//! The CNCI's end of its node's route channel (`--route-via`, see
//! [`crate::cnci::launch::routes`]): it tells its network node's agent every public IP it
//! maps (`add F`) and unmaps (`del F`), so that the node routes each to it, and announces them
//! all again on every (re)connect to the scheduler.
//!
//! Commands queue in an [`Announcer`]; a task sends them in order over one connection, opened
//! again when it breaks. A command that cannot be delivered is retried [`ATTEMPTS`] times with
//! growing pauses, then dropped with an error in the log; a refusal is logged as an error and
//! not retried. None of this fails the ASSIGN or RELEASE it follows: the mapping works for
//! whoever routes to it.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// How many times a command is tried.
pub const ATTEMPTS: u32 = 8;
/// How long a connection or an answer may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The first pause after a failure (doubled each time, at most [`MAX_PAUSE`]).
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// Commands waiting at most (more are dropped, logged).
const QUEUE: usize = 4096;

/// A queue of route commands for the node.
#[derive(Clone)]
pub struct Announcer {
    tx: Option<mpsc::Sender<(bool, Ipv4Addr)>>,
}

impl Announcer {
    /// Sends to the listener at `to` (`host:port`); `None`: nothing is sent (no node to tell).
    pub fn start(to: Option<String>) -> Announcer {
        let Some(to) = to else {
            return Announcer { tx: None };
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(deliver(to, rx));
        Announcer { tx: Some(tx) }
    }

    /// Queues `add F` (`true`) or `del F`.
    pub fn tell(&self, add: bool, public: Ipv4Addr) {
        let Some(tx) = &self.tx else {
            return;
        };
        if tx.try_send((add, public)).is_err() {
            tracing::error!(%public, add, "route channel: queue full, the node is NOT told");
        }
    }
}

async fn deliver(to: String, mut rx: mpsc::Receiver<(bool, Ipv4Addr)>) {
    let mut conn: Option<BufReader<tokio::net::TcpStream>> = None;
    let mut queue: VecDeque<(bool, Ipv4Addr)> = VecDeque::new();
    loop {
        if queue.is_empty() {
            match rx.recv().await {
                Some(c) => queue.push_back(c),
                None => return,
            }
        }
        while let Ok(c) = rx.try_recv() {
            queue.push_back(c);
        }
        let Some(&(add, public)) = queue.front() else {
            continue;
        };
        let line = format!("{} {public}\n", if add { "add" } else { "del" });
        let mut pause = FIRST_PAUSE;
        let mut attempt = 1;
        loop {
            match send(&to, &mut conn, &line).await {
                Ok(answer) if answer == "ok" => {
                    tracing::info!(%public, add, node = %to, "route channel: the node routes it accordingly");
                    break;
                }
                Ok(answer) => {
                    tracing::error!(%public, add, node = %to, %answer, "route channel: the node refused");
                    break;
                }
                Err(e) => {
                    conn = None;
                    if attempt >= ATTEMPTS {
                        tracing::error!(%public, add, node = %to, error = %e, attempts = attempt, "route channel: the node was NOT told; the public IP may not be routed here");
                        break;
                    }
                    tracing::warn!(%public, add, node = %to, error = %e, attempt, "route channel: not told yet, trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                    attempt += 1;
                }
            }
        }
        queue.pop_front();
    }
}

/// Sends one line and reads its answer (without its newline), connecting first if need be.
async fn send(
    to: &str,
    conn: &mut Option<BufReader<tokio::net::TcpStream>>,
    line: &str,
) -> std::io::Result<String> {
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
    if conn.is_none() {
        let c = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(to))
            .await
            .map_err(|_| timed_out())??;
        *conn = Some(BufReader::new(c));
    }
    let Some(c) = conn.as_mut() else {
        return Err(std::io::Error::other("no connection"));
    };
    c.get_mut().write_all(line.as_bytes()).await?;
    let mut answer = String::new();
    let n = tokio::time::timeout(TIMEOUT, c.read_line(&mut answer))
        .await
        .map_err(|_| timed_out())??;
    if n == 0 || !answer.ends_with('\n') || answer.len() > 512 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "closed without an answer",
        ));
    }
    Ok(answer.trim_end().to_string())
}
