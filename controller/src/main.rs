//! `cumulo-controller`: parses the command line, starts the controller (store, SSNTP client,
//! engine) and its REST API, and runs until SIGTERM or SIGINT. A configuration it cannot run
//! with is one line on stderr and exit status 1 (clap's own usage errors exit 2). Two one-shot
//! subcommands, named first: `etcd-setup` (etcd's users and roles) and `launcher-key` (an
//! off-host host's key for its replicas).
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use controller::api::{self, ApiConfig, TokenSigner};
use controller::config::{ApiArgs, Args};
use controller::daemon::Controller;
use controller::etcd_setup::EtcdSetupArgs;
use controller::launcher_key::LauncherKeyArgs;
use tokio_util::sync::CancellationToken;

/// The first admin's password: from the file given, else from (or made up into)
/// `admin-password` in the state directory.
fn admin_password(api: &ApiArgs, state_dir: &Path) -> Result<String, String> {
    let path = api
        .admin_password_file
        .clone()
        .unwrap_or_else(|| state_dir.join("admin-password"));
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let password = uuid::Uuid::new_v4().simple().to_string();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&path)
        .and_then(|mut f| writeln!(f, "{password}"))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    tracing::info!("the admin password is in {}", path.display());
    Ok(password)
}

fn api_tls(api: &ApiArgs, ca: &Path) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    let Some((cert, key)) = &api.tls else {
        return Ok(None);
    };
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    api::server_tls_config(&read(ca)?, &read(cert)?, &read(key)?)
        .map(Some)
        .map_err(|e| e.to_string())
}

async fn run(args: Args, shutdown: CancellationToken) -> Result<(), String> {
    let ca = args.ca_cert.clone();
    let (config, api) = args.into_config().map_err(|e| e.to_string())?;
    let state_dir = config.state_dir.clone();
    std::fs::create_dir_all(&state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let tls = api_tls(&api, &ca)?;
    let listener = tokio::net::TcpListener::bind(api.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", api.listen))?;
    // A port that cannot be had leaves the image endpoint off, said in the log, and the
    // controller runs (a node's fetch then fails with the cause). (The agent's node endpoint
    // differs: the controller would reach whatever holds its port, so the agent stops.)
    let images_endpoint = match api.image_listen {
        Some(addr) => {
            // A removed host (its certificate revoked) fetches no more images.
            let tls = config
                .tls
                .server_config_revoking(config.joins.as_ref().map(|j| j.revocations()))
                .map_err(|e| e.to_string())?;
            match tokio::net::TcpListener::bind(addr).await {
                Ok(listener) => Some((listener, tls)),
                Err(e) => {
                    tracing::error!(%addr, error = %e, "node image endpoint off: cannot listen (--image-listen)");
                    None
                }
            }
        }
        None => None,
    };
    let signer = TokenSigner::from_key_file(&state_dir.join("token.key"), api.token_ttl)
        .map_err(|e| e.to_string())?;
    let mut controller = Controller::start(config).await.map_err(|e| e.to_string())?;
    let password = admin_password(&api, &state_dir)?;
    let store = controller.store.clone();
    let (user, project) = (api.admin_user.clone(), api.admin_project.clone());
    let admin = tokio::task::spawn_blocking(move || {
        api::bootstrap(store.as_ref(), &user, &password, &project)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("making the admin user: {e}"))?;
    if !admin.created {
        tracing::info!(
            user = %api.admin_user,
            "the admin user exists: its password is left as it is (the admin password file \
             gives only the first one)"
        );
    }
    let images_dir = state_dir.join("images");
    let images: Arc<dyn controller::images::ImageBlobs> = Arc::new(
        controller::images::LocalBlobs::open(&images_dir)
            .map_err(|e| format!("the image store {}: {e}", images_dir.display()))?,
    );
    if let Some((listener, tls)) = images_endpoint {
        tracing::info!(listen = ?listener.local_addr().ok(), "node image endpoint listening");
        controller.serve_images(listener, tls, images.clone());
    }
    controller.serve_api(
        listener,
        tls,
        signer,
        ApiConfig {
            images: Some(images),
            default_quota: api.default_quota,
            floating_range: api.floating_range,
            login: api.login,
            connections: api.connections,
            ..ApiConfig::new(api.public_url.clone())
        },
    );
    tracing::info!(api = %api.public_url, "API listening");
    let gone = tokio::select! {
        () = shutdown.cancelled() => None,
        why = controller.stopped() => Some(why),
    };
    controller.stop().await;
    // Stopped on its own: exit non-zero with the cause, so that a supervisor restarts it.
    gone.map_or(Ok(()), Err)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if controller::etcd_setup::wanted(&argv) {
        let args = EtcdSetupArgs::parse_from(argv.iter().skip(1));
        return match controller::etcd_setup::run(&args) {
            Ok(done) => {
                let _ = writeln!(std::io::stdout(), "{done}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "cumulo-controller etcd-setup: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if controller::launcher_key::wanted(&argv) {
        let args = LauncherKeyArgs::parse_from(argv.iter().skip(1));
        return match controller::launcher_key::run(&args) {
            Ok(done) => {
                let _ = writeln!(std::io::stdout(), "{done}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "cumulo-controller launcher-key: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let args = Args::parse();
    support::logs::init(args.log_format);
    support::run_until_signal("cumulo-controller", |shutdown| run(args, shutdown))
}
