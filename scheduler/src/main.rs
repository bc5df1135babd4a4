//! `cumulo-scheduler`: parses the command line and runs [`scheduler::run`].
#![forbid(unsafe_code)]

use clap::Parser;
use scheduler::config::Args;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let args = Args::parse();
    let json = args.log_format == "json";
    let metrics_listen = args.metrics_listen;
    let listen = args.listen;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let (config, _lock) = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cumulo-scheduler: {e}");
            return ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cumulo-scheduler: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("cumulo-scheduler: cannot listen on {listen}: {e}");
                return ExitCode::from(1);
            }
        };
        let shutdown = CancellationToken::new();
        let summary = Arc::new(Mutex::new(scheduler::Summary::default()));
        if let Some(addr) = metrics_listen {
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => {
                    tokio::spawn(scheduler::http::serve(l, summary.clone(), shutdown.clone()));
                }
                Err(e) => {
                    eprintln!("cumulo-scheduler: cannot serve metrics on {addr}: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("shutting down");
            stop.cancel();
        });
        tracing::info!(%listen, uuid = %config.uuid, "cumulo-scheduler listening");
        match scheduler::run(config, listener, shutdown, summary).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cumulo-scheduler: {e}");
                ExitCode::from(1)
            }
        }
    })
}
