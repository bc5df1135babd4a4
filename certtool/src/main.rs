//! `cumulo-cert`: makes the cluster CA and the role certificates of cumulo's SSNTP endpoints.
//! Everything is in the library (`certtool::cli`); this only wires it to the process.
#![forbid(unsafe_code)]

use std::io;
use std::process::ExitCode;
use std::time::SystemTime;

fn main() -> ExitCode {
    let code = certtool::cli::main_with(
        std::env::args_os(),
        SystemTime::now(),
        &mut io::stdout().lock(),
        &mut io::stderr().lock(),
    );
    ExitCode::from(code)
}
