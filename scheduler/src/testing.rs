//! A scheduler in this process on a loopback port, for the tests and benchmarks of the crates
//! that talk to one (the agent's, `systest`'s, this crate's own): built for `cfg(test)` and the
//! `testing` feature only.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ssntp::Uuid;
use ssntp_net::TlsIdentity;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{SchedulerConfig, SchedulerError, Summary};

impl SchedulerConfig {
    /// What tests run with: `tls` and `uuid`, a 5 s STATS interval, default limits, no
    /// heartbeat line.
    pub fn for_tests(tls: TlsIdentity, uuid: Uuid) -> SchedulerConfig {
        SchedulerConfig {
            tls,
            uuid,
            stats_interval: Duration::from_secs(5),
            handshake: Default::default(),
            cluster: Default::default(),
            heartbeat: false,
            conn: Default::default(),
            read_rates: Default::default(),
            crl: None,
        }
    }
}

/// A running scheduler: where to dial it and how to stop it.
#[derive(Debug)]
pub struct InProcess {
    /// `localhost:<port>`, what clients dial.
    pub addr: String,
    /// Cancel to stop it.
    pub stop: CancellationToken,
    /// Its run: awaited after `stop`, or to see that it failed.
    pub done: JoinHandle<Result<(), SchedulerError>>,
    /// Its summary (the metrics and the heartbeat line).
    pub summary: Arc<Mutex<Summary>>,
}

impl InProcess {
    /// Runs `config` on `listener`, or on a new port of 127.0.0.1.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound (a test set-up failure).
    pub async fn start(config: SchedulerConfig, listener: Option<TcpListener>) -> InProcess {
        let listener = match listener {
            Some(l) => l,
            None => TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap_or_else(|e| panic!("binding a loopback port: {e}")),
        };
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("the listener's address: {e}"))
            .port();
        let stop = CancellationToken::new();
        let summary = Arc::new(Mutex::new(Summary::default()));
        let done = tokio::spawn(crate::run(config, listener, stop.clone(), summary.clone()));
        InProcess {
            addr: format!("localhost:{port}"),
            stop,
            done,
            summary,
        }
    }
}
