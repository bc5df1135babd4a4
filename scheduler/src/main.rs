//! `cumulo-scheduler`: parses the command line and runs [`scheduler::run`] until SIGTERM or
//! SIGINT.
#![forbid(unsafe_code)]

use clap::Parser;
use scheduler::config::Args;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

fn main() -> ExitCode {
    let args = Args::parse();
    support::logs::init(args.log_format);
    let metrics_listen = args.metrics_listen;
    let listen = args.listen;
    // The lock keeps the stored UUID ours until the scheduler is done.
    let (config, _lock) = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cumulo-scheduler: {e}");
            return ExitCode::from(1);
        }
    };
    support::run_until_signal("cumulo-scheduler", |shutdown| async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let summary = Arc::new(Mutex::new(scheduler::Summary::default()));
        if let Some(addr) = metrics_listen {
            let metrics = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
            tokio::spawn(scheduler::http::serve(
                metrics,
                summary.clone(),
                shutdown.clone(),
            ));
        }
        tracing::info!(%listen, uuid = %config.uuid, "cumulo-scheduler listening");
        scheduler::run(config, listener, shutdown, summary)
            .await
            .map_err(|e| e.to_string())
    })
}
