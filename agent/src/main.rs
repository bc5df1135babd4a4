//! `cumulo-agent`: parses the command line and runs [`agent::daemon::run`] until SIGTERM or
//! SIGINT. A configuration it cannot run with is one line on stderr and exit status 1 (clap's
//! own usage errors exit 2).
#![forbid(unsafe_code)]

use agent::daemon::{self, cli::Args};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if agent::remote::cli::wanted(&argv) {
        return remote();
    }
    let args = Args::parse();
    init_logs(&args.log_format);
    let config = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cumulo-agent: {e}");
            return ExitCode::from(1);
        }
    };
    ssntp::net::daemon::run_until_signal("cumulo-agent", |shutdown| daemon::run(config, shutdown))
}

/// `cumulo-agent --remote`: an off-host launcher replica.
fn remote() -> ExitCode {
    let args = agent::remote::cli::RemoteArgs::parse();
    init_logs(&args.log_format);
    ssntp::net::daemon::run_until_signal("cumulo-agent --remote", |shutdown| {
        agent::remote::cli::run(args, shutdown)
    })
}

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        logs.json().init();
    } else {
        logs.init();
    }
}
