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
    if argv.get(1).map(String::as_str) == Some(CLEAN_UP) {
        return clean_up();
    }
    if argv.get(1).map(String::as_str) == Some(CHECK_LIBVIRT) {
        return check_libvirt();
    }
    let args = Args::parse();
    support::logs::init(args.log_format);
    let config = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cumulo-agent: {e}");
            return ExitCode::from(1);
        }
    };
    support::run_until_signal("cumulo-agent", |shutdown| daemon::run(config, shutdown))
}

/// `cumulo-agent clean-up-cncis --state-dir DIR`: what a node that goes for good leaves of its
/// CNCIs (processes, namespaces, records; `agent::cnci::launch::clean_up`), the agent stopped
/// first. Prints each namespace deleted on a line of its own.
const CLEAN_UP: &str = "clean-up-cncis";

#[derive(clap::Parser)]
#[command(name = "cumulo-agent clean-up-cncis")]
struct CleanUpArgs {
    /// The stopped agent's state directory.
    #[arg(long, env = "CUMULO_AGENT_STATE_DIR")]
    state_dir: std::path::PathBuf,
    /// How long a CNCI process gets to stop after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = support::units::parse_duration)]
    grace: std::time::Duration,
}

fn clean_up() -> ExitCode {
    let args = CleanUpArgs::parse_from(std::env::args().skip(1));
    let dir = args.state_dir.join("cnci");
    let mut out = std::io::stdout().lock();
    for ns in agent::cnci::launch::clean_up(&dir, args.grace) {
        if std::io::Write::write_all(&mut out, format!("{ns}\n").as_bytes()).is_err() {
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// `cumulo-agent check-libvirt --state-dir DIR [--libvirt-uri URI] [--image-dir DIR]`: before
/// an agent runs, whether QEMU will reach the libvirt backend's files (its directories are
/// given to QEMU's group on the way, as the agent does). Prints who QEMU runs as; exit status 1
/// with the cause, and what to change, on stderr otherwise.
const CHECK_LIBVIRT: &str = "check-libvirt";

#[derive(clap::Parser)]
#[command(name = "cumulo-agent check-libvirt")]
struct CheckArgs {
    /// The agent's state directory.
    #[arg(long, env = "CUMULO_AGENT_STATE_DIR")]
    state_dir: std::path::PathBuf,
    /// The libvirt URI.
    #[arg(
        long,
        env = "CUMULO_AGENT_LIBVIRT_URI",
        default_value = "qemu:///system"
    )]
    libvirt_uri: String,
    /// The image store (default: `images/` in the state directory).
    #[arg(long, env = "CUMULO_AGENT_IMAGE_DIR")]
    image_dir: Option<std::path::PathBuf>,
}

fn check_libvirt() -> ExitCode {
    use agent::backend::libvirt::{Accel, LibvirtBackend, LibvirtConfig};
    let args = CheckArgs::parse_from(std::env::args().skip(1));
    let mut config = LibvirtConfig::new(&args.libvirt_uri, Accel::Tcg, &args.state_dir);
    if let Some(dir) = args.image_dir {
        config.images = dir;
    }
    let checked = LibvirtBackend::new(config)
        .map_err(|e| e.to_string())
        .and_then(|b| b.check_reach().map_err(|e| e.to_string()));
    let line = match checked {
        Ok(Some(user)) => format!("QEMU runs as uid {} gid {}\n", user.uid, user.gid),
        Ok(None) => "QEMU runs as this user\n".to_string(),
        Err(e) => {
            eprintln!("cumulo-agent: {e}");
            return ExitCode::from(1);
        }
    };
    if std::io::Write::write_all(&mut std::io::stdout(), line.as_bytes()).is_err() {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// `cumulo-agent --remote`: an off-host launcher replica.
fn remote() -> ExitCode {
    let args = agent::remote::cli::RemoteArgs::parse();
    support::logs::init(args.log_format);
    support::run_until_signal("cumulo-agent --remote", |shutdown| {
        agent::remote::cli::run(args, shutdown)
    })
}
