//! Running the real `openstack` CLI (python-openstackclient) against an API: finding the binary
//! that `scripts/openstack-venv.sh` installs, and running commands with `-f json`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The `openstack` binary: `$CUMULO_OPENSTACK`, else the venv of `scripts/openstack-venv.sh`
/// (`$CUMULO_OPENSTACK_VENV`, default `${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/openstack-venv`),
/// if it exists.
pub fn find_openstack() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CUMULO_OPENSTACK") {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let venv = match std::env::var_os("CUMULO_OPENSTACK_VENV") {
        Some(v) => PathBuf::from(v),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
            cache.join("cumulo").join("openstack-venv")
        }
    };
    Some(venv.join("bin").join("openstack")).filter(|p| p.is_file())
}

/// One user's view of a cloud through the CLI.
#[derive(Debug, Clone)]
pub struct OpenStackCli {
    /// The binary.
    pub bin: PathBuf,
    /// The identity URL (`http://127.0.0.1:PORT/v3`).
    pub auth_url: String,
    /// The user's name.
    pub user: String,
    /// Its password.
    pub password: String,
    /// The project to scope to.
    pub project: String,
    /// A CA bundle for HTTPS (`--os-cacert`).
    pub cacert: Option<PathBuf>,
    /// Adds `--debug` (the requests and responses go to stderr).
    pub debug: bool,
    /// How it authenticates (the user's password in the project, unless told otherwise).
    pub auth: CliAuth,
}

/// How the CLI authenticates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CliAuth {
    /// `--os-auth-type password` with the user's name and password, scoped to the project.
    #[default]
    Password,
    /// The same without a project: an unscoped token (`token issue` shows no project).
    Unscoped,
    /// `--os-auth-type token` with this token, scoped to the project (re-scoping).
    Token(String),
    /// `--os-auth-type v3applicationcredential` with a credential's id and secret (no user, no
    /// project: the credential names both).
    AppCredential {
        /// The credential's id.
        id: String,
        /// Its secret.
        secret: String,
    },
}

/// What a CLI run printed.
#[derive(Debug, Clone)]
pub struct CliOutput {
    /// Whether it exited with 0.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl CliOutput {
    /// The standard output as JSON.
    pub fn json(&self) -> Result<Value, String> {
        serde_json::from_str(&self.stdout).map_err(|e| {
            format!(
                "output is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

impl OpenStackCli {
    /// A CLI for `user` in `project` of the API whose public URL is `api_url`.
    pub fn new(bin: PathBuf, api_url: &str, user: &str, password: &str, project: &str) -> Self {
        OpenStackCli {
            bin,
            auth_url: format!("{api_url}/v3"),
            user: user.into(),
            password: password.into(),
            project: project.into(),
            cacert: None,
            debug: false,
            auth: CliAuth::Password,
        }
    }

    /// Runs `openstack <args>` (blocking; call from `spawn_blocking` in async tests) with a clean
    /// environment: no `OS_*` variables, no clouds.yaml from the home directory.
    pub fn run(&self, args: &[&str]) -> std::io::Result<CliOutput> {
        let mut command = Command::new(&self.bin);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OS_") {
                command.env_remove(&key);
            }
        }
        command
            .env("OS_CLIENT_CONFIG_FILE", "/dev/null")
            .env("PYTHONWARNINGS", "ignore")
            .arg("--os-auth-url")
            .arg(&self.auth_url)
            .arg("--os-identity-api-version")
            .arg("3");
        let user = [
            "--os-username",
            &self.user,
            "--os-password",
            &self.password,
            "--os-user-domain-name",
            "Default",
        ];
        let project = [
            "--os-project-name",
            &self.project,
            "--os-project-domain-name",
            "Default",
        ];
        match &self.auth {
            CliAuth::Password => {
                command
                    .args(["--os-auth-type", "password"])
                    .args(user)
                    .args(project);
            }
            CliAuth::Unscoped => {
                command.args(["--os-auth-type", "password"]).args(user);
            }
            CliAuth::Token(token) => {
                command
                    .args(["--os-auth-type", "token", "--os-token", token])
                    .args(project);
            }
            CliAuth::AppCredential { id, secret } => {
                // `--flag=value`: a value that begins with `-` (a secret a user chose) is not
                // taken for an option.
                command.args([
                    "--os-auth-type=v3applicationcredential".to_string(),
                    format!("--os-application-credential-id={id}"),
                    format!("--os-application-credential-secret={secret}"),
                ]);
            }
        }
        command
            .arg("--os-region-name")
            .arg("RegionOne")
            .arg("--os-interface")
            .arg("public");
        if let Some(ca) = &self.cacert {
            command.arg("--os-cacert").arg(ca);
        }
        if self.debug {
            command.arg("--debug");
        }
        let output = command.args(args).output()?;
        Ok(CliOutput {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// Runs `openstack <args> -f json` and parses the output; an error says what the CLI said.
    pub fn json(&self, args: &[&str]) -> Result<Value, String> {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-f", "json"]);
        let output = self
            .run(&all)
            .map_err(|e| format!("cannot run openstack: {e}"))?;
        if !output.success {
            return Err(format!(
                "openstack {} failed:\n{}\n{}",
                args.join(" "),
                output.stdout,
                output.stderr
            ));
        }
        output.json()
    }

    /// Runs `openstack <args>` expecting success; returns standard output.
    pub fn ok(&self, args: &[&str]) -> Result<String, String> {
        let output = self
            .run(args)
            .map_err(|e| format!("cannot run openstack: {e}"))?;
        if output.success {
            Ok(output.stdout)
        } else {
            Err(format!(
                "openstack {} failed:\n{}\n{}",
                args.join(" "),
                output.stdout,
                output.stderr
            ))
        }
    }
}
