//! What every cumulo daemon's `main` does around its work: a multi-threaded runtime, a
//! shutdown token cancelled by SIGTERM or SIGINT, and the outcome as an exit status (an error is
//! one line on stderr, `<name>: <error>`, and status 1).

use std::fmt::Display;
use std::future::Future;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

/// Runs `work(shutdown)` to its end on a new runtime; `shutdown` is cancelled on SIGTERM or
/// SIGINT. Returns the exit status for `main`.
pub fn run_until_signal<F, Fut, E>(name: &str, work: F) -> ExitCode
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(mut term) = signal(SignalKind::terminate()) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("signal: shutting down");
            stop.cancel();
        });
        match work(shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{name}: {e}");
                ExitCode::from(1)
            }
        }
    })
}
