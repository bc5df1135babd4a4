//! `cumulo`: parses the command line and runs one command. Errors are one line on stderr:
//! exit status 1 (2 for usage errors, from clap).
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use cumulo::args::{Cli, Command};
use cumulo::commands::{self, CommandError, Output};
use cumulo::up::{self, UpOptions, layout::Layout};

fn layout(dir: Option<std::path::PathBuf>) -> Layout {
    Layout::new(dir.unwrap_or_else(Layout::default_root))
}

fn run(cli: Cli, stdout: &mut dyn Write) -> Result<ExitCode, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    match cli.command {
        Command::Up(args) => {
            let mut at = layout(args.dir.dir);
            if let Some(ip) = args.address {
                at.listen_on(ip);
            }
            if let Some(addr) = args.scheduler_listen {
                at.scheduler = addr;
            }
            if let Some(addr) = args.api_listen {
                at.api = addr;
            }
            if let Some(addr) = args.console_listen {
                at.console = addr;
            }
            if let Some(addr) = args.image_listen {
                at.images = addr;
            }
            let options = UpOptions {
                layout: at,
                backend: args.backend,
                host: args.host.unwrap_or_else(up::default_host),
                install_deps: args.install_deps,
                first_instance: !args.no_instance,
                tenant_network: args.tenant_network,
                compute: args.compute_address,
                compute_link: args.compute_link,
                store: args.store.map(|url| {
                    let mut flags = vec!["--store".to_string(), url];
                    for (flag, file) in [
                        ("--etcd-ca", &args.etcd_ca),
                        ("--etcd-cert", &args.etcd_cert),
                        ("--etcd-key", &args.etcd_key),
                    ] {
                        if let Some(file) = file {
                            flags.push(flag.into());
                            let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
                            flags.push(file.display().to_string());
                        }
                    }
                    flags
                }),
            };
            up::up(&options, stdout).map_err(|e| text(&e))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Down(args) => {
            up::down(&layout(args.dir.dir), args.purge, stdout).map_err(|e| text(&e))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Join(args) => {
            let dir = args
                .dir
                .unwrap_or_else(|| Layout::default_root().join("joined"));
            let mut settings = Vec::new();
            for pair in &args.set {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("--set {pair:?}: NAME=VALUE"))?;
                settings.push((k.to_string(), v.to_string()));
            }
            let options = cumulo::join::JoinOptions {
                controller: args.to,
                token: args.token,
                dir,
                hostname: args.hostname.unwrap_or_else(up::default_host),
                backend: args.backend,
                schedulers: args.scheduler,
                settings,
                start: !args.no_start,
                system: args.system,
                role: args.role,
                ca_key: args.ca_key,
            };
            cumulo::join::join(&options, stdout).map_err(|e| text(&e))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Env(dir) => {
            up::env(&layout(dir.dir), stdout).map_err(|e| text(&e))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status(dir) => {
            let all = up::status(&layout(dir.dir), stdout).map_err(|e| text(&e))?;
            Ok(if all {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        command => {
            let conn = commands::connect(&cli.login).map_err(|e| text(&e))?;
            let mut o = Output {
                out: stdout,
                json: cli.json,
            };
            let done: Result<(), CommandError> = match command {
                Command::Instance(c) => commands::instance(&conn, c, &mut o),
                Command::Workload(c) => commands::workload(&conn, c, &mut o),
                Command::Flavor(c) => commands::flavor(&conn, c, &mut o),
                Command::Image(c) => commands::image(&conn, c, &mut o),
                Command::Node(c) => commands::node(&conn, c, &mut o),
                Command::Tenant(c) => commands::tenant(&conn, c, &mut o),
                Command::Cnci(c) => commands::cnci(&conn, c, &mut o),
                Command::Events(a) => commands::events(&conn, a, &mut o),
                Command::Trace { cmd } => commands::trace(&conn, cmd, &mut o),
                Command::Up(_)
                | Command::Down(_)
                | Command::Status(_)
                | Command::Env(_)
                | Command::Join(_) => Ok(()),
            };
            done.map_err(|e| text(&e))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout();
    match run(cli, &mut stdout) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cumulo: {e}");
            ExitCode::from(1)
        }
    }
}
