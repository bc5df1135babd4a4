//! `cumulo-cnci`: parses the command line and runs [`agent::cnci::run()`] until SIGTERM or
//! SIGINT. A configuration it cannot run with is one line on stderr and exit status 1 (clap's
//! own usage errors exit 2).
#![forbid(unsafe_code)]

use agent::cnci::{self, cli::Args};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    support::logs::init(args.log_format);
    let config = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cumulo-cnci: {e}");
            return ExitCode::from(1);
        }
    };
    support::run_until_signal("cumulo-cnci", |shutdown| cnci::run(config, shutdown))
}
