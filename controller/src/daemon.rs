//! cumulo-controller as a whole: the store, the SSNTP client (CONTROLLER role) and the engine it
//! drives, and the REST API, started together and stopped together.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp_net::client::{Backoff, Client, ClientConfig, ClientError, ClientHandle};
use ssntp_net::tls::TlsIdentity;
use support::identity::{IdentityError, UuidLock, endpoint_uuid};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::api::{self, ApiConfig, ApiState, TokenSigner};
use crate::cluster::Cluster;
use crate::engine::{self, Engine, EngineConfig};
use store::{OperationQueue, Store, StoreError};

/// Everything the controller runs with, checked once.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// CA, certificate and key (a certificate with the CONTROLLER role).
    pub tls: TlsIdentity,
    /// The schedulers, `host:port`: the controller holds a session with each.
    pub servers: Vec<String>,
    /// Where the controller keeps its UUID (when its certificate binds none) and its files.
    pub state_dir: PathBuf,
    /// The store: an SQLite file path, or `etcd://host:port[,host:port][/prefix]`.
    pub store: String,
    /// How an etcd store is reached (TLS with an etcd client certificate, or plain text when
    /// asked); required for an `etcd://` store.
    pub etcd: Option<store::EtcdTransport>,
    /// The engine's settings (its `uuid` is filled in at start).
    pub engine: EngineConfig,
    /// How often the engine's timers are checked.
    pub sweep_every: Duration,
    /// SSNTP handshake and session limits.
    pub handshake: HandshakeConfig,
    /// Reconnection delays.
    pub backoff: Backoff,
    /// The issuer of off-host launchers' credentials (renewed periodically when set).
    pub launcher_creds: Option<Arc<crate::creds::CredsIssuer>>,
    /// Join tokens and joined hosts' certificates (with the CA key).
    pub joins: Option<Arc<crate::join::JoinIssuer>>,
}

impl DaemonConfig {
    /// The defaults for these certificates, scheduler and state directory (database inside it).
    pub fn new(tls: TlsIdentity, servers: Vec<String>, state_dir: PathBuf) -> DaemonConfig {
        DaemonConfig {
            tls,
            servers,
            store: state_dir.join("controller.db").display().to_string(),
            etcd: None,
            state_dir,
            engine: EngineConfig::new(Uuid::nil()),
            sweep_every: Duration::from_secs(1),
            handshake: HandshakeConfig::default(),
            backoff: Backoff::default(),
            launcher_creds: None,
            joins: None,
        }
    }
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The controller's UUID.
    #[error("controller UUID: {0}")]
    Identity(#[from] IdentityError),
    /// The store could not be opened (or its schema is too new).
    #[error("store {path}: {source}")]
    Store {
        /// The store's path or URL.
        path: String,
        /// Why.
        source: StoreError,
    },
    /// The SSNTP client refused its configuration.
    #[error("ssntp: {0}")]
    Client(#[from] ClientError),
    /// The state directory.
    #[error("state directory {path}: {source}")]
    StateDir {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A running controller.
pub struct Controller {
    /// Its SSNTP UUID.
    pub uuid: Uuid,
    /// Its store.
    pub store: Arc<dyn Store>,
    /// Its engine (the [`Cluster`] the API uses).
    pub engine: Arc<Engine>,
    clients: Vec<ClientHandle>,
    stop: CancellationToken,
    driver: JoinHandle<()>,
    api: Option<JoinHandle<()>>,
    images: Option<JoinHandle<()>>,
    launcher_creds: Option<Arc<crate::creds::CredsIssuer>>,
    joins: Option<Arc<crate::join::JoinIssuer>>,
    _uuid_lock: Option<UuidLock>,
}

impl Controller {
    /// Opens the store, connects to the schedulers and starts the engine.
    pub async fn start(config: DaemonConfig) -> Result<Controller, DaemonError> {
        std::fs::create_dir_all(&config.state_dir).map_err(|source| DaemonError::StateDir {
            path: config.state_dir.clone(),
            source,
        })?;
        let own = config.tls.own();
        let (uuid, uuid_lock) = endpoint_uuid(&own, Some(&config.state_dir), Role::CONTROLLER)?;
        let (location, etcd) = (config.store.clone(), config.etcd.clone());
        let store: Arc<dyn Store> =
            tokio::task::spawn_blocking(move || store::open(&location, etcd.as_ref()))
                .await
                .map_err(|e| DaemonError::Store {
                    path: config.store.clone(),
                    source: StoreError::Backend(e.to_string()),
                })?
                .map_err(|source| DaemonError::Store {
                    path: config.store.clone(),
                    source,
                })?;
        // One session with every scheduler (named once: two sessions with the same one would
        // replace each other).
        let mut clients = Vec::with_capacity(config.servers.len());
        let mut streams = Vec::with_capacity(config.servers.len());
        for server in distinct(&config.servers) {
            let mut client_config = ClientConfig::new(
                config.tls.clone(),
                uuid,
                Role::CONTROLLER,
                vec![server.to_string()],
            );
            client_config.handshake = config.handshake;
            client_config.backoff = config.backoff;
            let (client, events) = Client::start(client_config)?;
            clients.push(client);
            streams.push(events);
        }
        let links = clients
            .iter()
            .map(|c| Arc::new(c.clone()) as Arc<dyn engine::Outbound>)
            .collect();
        let schedulers = Arc::new(engine::Schedulers::new(links));
        let events = ssntp_net::client::merge_timed(streams);
        let mut engine_config = config.engine.clone();
        engine_config.uuid = uuid;
        engine_config.console_tls = Some(config.tls.clone());
        let engine_store = store.clone();
        let out = schedulers.clone();
        let engine =
            tokio::task::spawn_blocking(move || Engine::new(engine_store, out, engine_config))
                .await
                .map_err(|e| DaemonError::Store {
                    path: config.store.clone(),
                    source: StoreError::Backend(e.to_string()),
                })?
                .map(Arc::new)
                .map_err(|source| DaemonError::Store {
                    path: config.store.clone(),
                    source,
                })?;
        if let Some(endpoint) = &config.engine.otlp {
            engine.export_traces(crate::otlp::Exporter::start(endpoint.clone(), uuid));
        }
        let stop = CancellationToken::new();
        let driver = tokio::spawn(engine::run(
            engine.clone(),
            schedulers,
            events,
            config.sweep_every,
            stop.clone(),
        ));
        if let Some(issuer) = config.launcher_creds.clone() {
            tokio::spawn(renew_creds(store.clone(), issuer, stop.clone()));
        }
        tracing::info!(%uuid, schedulers = ?config.servers, store = %config.store, "cumulo-controller running");
        Ok(Controller {
            uuid,
            store,
            engine,
            clients,
            stop,
            driver,
            api: None,
            images: None,
            launcher_creds: config.launcher_creds.clone(),
            joins: config.joins.clone(),
            _uuid_lock: uuid_lock,
        })
    }

    /// Serves the REST API over this controller's store and engine on `listener` (HTTPS with
    /// `tls`; plain HTTP only on loopback) until the controller stops.
    pub fn serve_api(
        &mut self,
        listener: tokio::net::TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        signer: TokenSigner,
        mut config: ApiConfig,
    ) {
        if config.joins.is_none() {
            config.joins = self.joins.clone();
        }
        if config.launcher_creds.is_none() {
            config.launcher_creds = self.launcher_creds.clone();
        }
        let limits = config.connections;
        let state = ApiState::new(self.store.clone(), self.engine.clone(), signer, config);
        let router = crate::ui::dashboard(api::router(state), tls.is_some());
        tokio::spawn(prune_revoked_tokens(self.store.clone(), self.stop.clone()));
        let stop = self.stop.clone();
        let engine = self.engine.clone();
        self.api = Some(tokio::spawn(async move {
            if let Err(e) = api::serve_with(listener, tls, router, stop.clone(), limits).await {
                engine.give_up(format!("the API stopped: {e}"));
                stop.cancel();
            }
        }));
    }

    /// Serves the node image endpoint ([`crate::images::nodes`]) over `blobs` on `listener`
    /// with `tls` (client certificates required) until the controller stops.
    pub fn serve_images(
        &mut self,
        listener: tokio::net::TcpListener,
        tls: Arc<rustls::ServerConfig>,
        blobs: Arc<dyn crate::images::ImageBlobs>,
    ) {
        let stop = self.stop.clone();
        let engine = self.engine.clone();
        self.images = Some(tokio::spawn(async move {
            if let Err(e) = crate::images::nodes::serve(listener, tls, blobs, stop.clone()).await {
                engine.give_up(format!("the node image endpoint stopped: {e}"));
                stop.cancel();
            }
        }));
    }

    /// Resolves when the controller stops on its own (its API failed, or its SSNTP client gave
    /// up for good), with why.
    pub async fn stopped(&self) -> String {
        self.stop.cancelled().await;
        self.engine
            .gone_for_good()
            .unwrap_or_else(|| "stopped".to_string())
    }

    /// Stops the API and the engine and closes the SSNTP session.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Some(api) = self.api
            && let Err(e) = api.await
        {
            tracing::error!("API task: {e}");
        }
        if let Some(images) = self.images
            && let Err(e) = images.await
        {
            tracing::error!("node image endpoint task: {e}");
        }
        if let Err(e) = self.driver.await {
            tracing::error!("engine driver: {e}");
        }
        for client in &self.clients {
            client.close();
        }
    }
}

/// `servers` without repeats, in their order.
fn distinct(servers: &[String]) -> Vec<&str> {
    let mut seen = Vec::with_capacity(servers.len());
    for s in servers {
        if !seen.contains(&s.as_str()) {
            seen.push(s.as_str());
        }
    }
    seen
}

/// Renews the off-host launchers' credentials that are missing or due, at start and then every
/// tenth of their lifetime (between 1 s and 5 min), until `stop`. Several controllers may run
/// it: a renewal another one just made is not due, and two racing renewals both store valid
/// credentials (the last one stays).
/// How often a controller serving the API prunes the token revocation list (each revocation also
/// prunes it): an entry outlives its token by at most this.
const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Drops the revocation entries of expired tokens every [`PRUNE_EVERY`] until `stop`.
async fn prune_revoked_tokens(store: Arc<dyn Store>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(PRUNE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let s = store.clone();
        let now = std::time::SystemTime::now();
        match tokio::task::spawn_blocking(move || s.prune_revoked_tokens(now)).await {
            Ok(Ok(n)) => tracing::debug!(pruned = n, "token revocation list pruned"),
            Ok(Err(e)) => tracing::warn!("pruning the token revocation list: {e}"),
            Err(e) => tracing::warn!("token pruning task: {e}"),
        }
    }
}

async fn renew_creds(
    store: Arc<dyn OperationQueue>,
    issuer: Arc<crate::creds::CredsIssuer>,
    stop: CancellationToken,
) {
    let every = (issuer.lifetime() / 10).clamp(Duration::from_secs(1), Duration::from_secs(300));
    loop {
        let (s, i) = (store.clone(), issuer.clone());
        match tokio::task::spawn_blocking(move || {
            crate::creds::renew_due(s.as_ref(), &i, std::time::SystemTime::now())
        })
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("launcher credentials: {e}"),
            Err(e) => tracing::warn!("launcher credentials task: {e}"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}
