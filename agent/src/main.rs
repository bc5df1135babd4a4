//! `cumulo-agent`: parses the command line and runs [`agent::daemon::run`] until SIGTERM or
//! SIGINT. A configuration it cannot run with is one line on stderr and exit status 1 (clap's
//! own usage errors exit 2).
//!
//! Besides the daemon: the subcommands `clean-up-cncis` and `check-libvirt` (run by `cumulo
//! down` and `cumulo up`), and `--remote URI`, an off-host launcher replica with flags of its
//! own. `--help` lists all three.
#![forbid(unsafe_code)]

use agent::daemon::{self, cli::Args};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

// What `cumulo-agent` does instead of running as a node's agent. (A plain comment: clap would
// make a doc comment here the about text of `cumulo-agent --help`.)
#[derive(Subcommand)]
enum AgentCommand {
    /// Cleans up what a node that goes for good leaves of its CNCIs (the agent stopped first)
    CleanUpCncis(CleanUpArgs),
    /// Checks, before an agent runs, that QEMU will reach the libvirt backend's files
    CheckLibvirt(CheckArgs),
}

/// The whole command line, as `--help` shows it: the daemon's flags ([`Args`]), the
/// subcommands ([`AgentCommand`]), and `--remote` (a command line with `--remote` goes to
/// [`agent::remote::cli::RemoteArgs`] before this is parsed: the replica's flags are not the
/// daemon's).
fn cli() -> clap::Command {
    let daemon = Args::command().subcommand_negates_reqs(true).arg(
        clap::Arg::new("remote")
            .long("remote")
            .value_name("URI")
            .help_heading("Off-host launcher replica")
            .help(
                "Run as an off-host launcher replica for the host at this libvirt URI instead \
                 (with --store; its flags: cumulo-agent --remote URI --help)",
            ),
    );
    AgentCommand::augment_subcommands(daemon)
}

/// The subcommands alone: a command line that starts with one (as `cumulo up` and `cumulo down`
/// run them) is parsed without the daemon's flags, whose environment variables are not its
/// business.
fn subcommands() -> clap::Command {
    AgentCommand::augment_subcommands(clap::Command::new("cumulo-agent").subcommand_required(true))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if agent::remote::cli::wanted(&argv) {
        return remote();
    }
    let mut cli = match argv.get(1) {
        Some(first) if AgentCommand::has_subcommand(first) => subcommands(),
        _ => cli(),
    };
    let matches = cli.get_matches_mut();
    if matches.subcommand().is_some() {
        return match AgentCommand::from_arg_matches(&matches) {
            Ok(AgentCommand::CleanUpCncis(args)) => clean_up(args),
            Ok(AgentCommand::CheckLibvirt(args)) => check_libvirt(args),
            Err(e) => e.format(&mut cli).exit(),
        };
    }
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut cli).exit());
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
#[derive(clap::Args)]
struct CleanUpArgs {
    /// The stopped agent's state directory.
    #[arg(long, env = "CUMULO_AGENT_STATE_DIR")]
    state_dir: std::path::PathBuf,
    /// How long a CNCI process gets to stop after SIGTERM before SIGKILL.
    #[arg(long, default_value = "5s", value_parser = support::units::parse_duration)]
    grace: std::time::Duration,
}

fn clean_up(args: CleanUpArgs) -> ExitCode {
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
#[derive(clap::Args)]
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

fn check_libvirt(args: CheckArgs) -> ExitCode {
    use agent::backend::libvirt::{Accel, LibvirtBackend, LibvirtConfig};
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
