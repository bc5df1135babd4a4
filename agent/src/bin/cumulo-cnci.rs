//! `cumulo-cnci`: parses the command line and runs [`agent::cnci::run()`] until SIGTERM or
//! SIGINT. A configuration it cannot run with is one line on stderr and exit status 1 (clap's
//! own usage errors exit 2). A certificate past its end exits with
//! [`cnci::EXIT_CERTIFICATE_EXPIRED`] (the CNCI guest then powers off, so that its node reports
//! it exited and the controller starts it again with new credentials).
#![forbid(unsafe_code)]

use agent::cnci::{self, cli::Args};
use clap::Parser;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    let expired = Arc::new(AtomicBool::new(false));
    let flag = expired.clone();
    let code = support::run_until_signal("cumulo-cnci", |shutdown| async move {
        let ended = cnci::run(config, shutdown).await;
        if matches!(ended, Err(cnci::CnciError::CertificateExpired { .. })) {
            flag.store(true, Ordering::SeqCst);
        }
        ended
    });
    if expired.load(Ordering::SeqCst) {
        return ExitCode::from(cnci::EXIT_CERTIFICATE_EXPIRED);
    }
    code
}
