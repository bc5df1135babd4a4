//! cumulo-controller's REST API (axum): the OpenStack Identity v3, Compute v2.1, Image v2,
//! Networking v2.0 and Block Storage v3 subsets the standard `openstack` CLI needs, cumulo's native API under `/cumulo/v1`, an
//! OpenAPI document of the native API (`/openapi.json`) and one of the OpenStack routes
//! (`/openapi-openstack.json`, written from the route tables the routers are built from:
//! `table.rs`), and Prometheus metrics.
//!
//! - [`router`] builds the routes over an [`ApiState`]; [`serve`] serves them on a bound
//!   listener, over TLS (optionally with client certificates) or, on loopback only, plain HTTP.
//! - Authentication: a bearer token from `POST /v3/auth/tokens` in `X-Auth-Token` (see
//!   `token.rs`), or a client certificate with no SSNTP role signed by the cluster CA, which makes
//!   the request a cluster admin's.
//! - Errors: one [`ApiError`], rendered in Keystone's shape or, on compute routes, Nova's.
//! - Store and cluster calls are blocking; handlers run them with `spawn_blocking`. Password
//!   hashing runs on a bounded pool of its own, and logins are rate limited (`logins.rs`).
//!
//! See `docs/api.md` for the routes.

mod auth;
mod bootstrap;
mod clock;
mod compute;
mod error;
mod extract;
mod identity;
mod image;
pub mod logins;
mod metrics;
mod native;
mod network;
mod openstack_openapi;
pub mod password;
pub mod request_id;
mod serve;
pub(crate) mod table;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod token;
mod volume;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;

use crate::cluster::Cluster;
use store::Store;

pub use auth::{AppCredentialUse, Principal};
pub use bootstrap::{Bootstrapped, bootstrap, bootstrap_with};
pub use error::{ApiError, Dialect};
pub use logins::{HashPool, LoginLimiter, LoginLimits};
pub use metrics::Metrics;
pub use serve::{
    ClientCertificate, ConnectionLimits, MAX_CONNECTIONS, PeerAddr, ServeError, check_plain_http,
    serve, serve_with, server_tls_config,
};
pub use token::{Grant, TokenError, TokenSigner};

/// The API's settings.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The URL clients reach this server at, without a trailing slash (`https://host:8889`):
    /// the service catalog and the version documents point there.
    pub public_url: String,
    /// The largest request body accepted, in bytes (larger: 413).
    pub body_limit: usize,
    /// PBKDF2 rounds for new password hashes.
    pub password_iterations: u32,
    /// The issuer of off-host launchers' credentials, if the controller holds the CA key
    /// (`POST /cumulo/v1/nodes/{id}/credentials` renews them on demand).
    pub launcher_creds: Option<std::sync::Arc<crate::creds::CredsIssuer>>,
    /// Join tokens and joined hosts' certificates (None without the CA key).
    pub joins: Option<std::sync::Arc<crate::join::JoinIssuer>>,
    /// The limits of a tenant created through the API with none given (each limit the request
    /// leaves out); [`ApiConfig::DEFAULT_QUOTA`] unless `--default-quota` says otherwise.
    pub default_quota: store::Quota,
    /// The floating-IP pool: the subnet of the Networking API's external network
    /// ([`ApiConfig::DEFAULT_FLOATING_RANGE`] unless `--floating-range` says otherwise).
    pub floating_range: ssntp::payload::Cidr,
    /// Login rate limits and the password hashing pool.
    pub login: LoginLimits,
    /// Connection limits (per source address, TLS and header deadlines): what the server is
    /// given by whoever serves this configuration's router ([`serve_with`]).
    pub connections: ConnectionLimits,
    /// Where uploaded image data is kept (`None`: uploads are refused with 503).
    pub images: Option<std::sync::Arc<dyn crate::images::ImageBlobs>>,
    /// The largest image upload accepted, in bytes (Glance's `image_size_cap`).
    pub image_size_cap: u64,
    /// The Block Storage limits of every tenant without a volume quota of its own (an admin's
    /// `PUT /volume/v3/{project}/os-quota-sets/{target}` sets one):
    /// [`ApiConfig::DEFAULT_VOLUME_LIMITS`] unless said otherwise.
    pub volume_limits: store::VolumeLimits,
}

impl ApiConfig {
    /// The default body limit: 1 MiB.
    pub const DEFAULT_BODY_LIMIT: usize = 1 << 20;

    /// The default largest image upload: 1 TiB, as Glance's.
    pub const DEFAULT_IMAGE_SIZE_CAP: u64 = 1 << 40;

    /// A new tenant's limits unless said otherwise: 10 instances, 20 vCPUs, 51,200 MiB, Nova's
    /// own defaults (`[quota] instances`, `cores`, `ram`), so that a project moved from
    /// OpenStack, or made by its tools, meets the limits it expects. Tenant subnet addresses
    /// need no limit of their own: every instance takes exactly one, so the instance limit
    /// bounds them; floating IPs have their own (the Networking API's `floatingip` quota).
    pub const DEFAULT_QUOTA: store::Quota = store::Quota {
        instances: Some(10),
        vcpus: Some(20),
        memory_mb: Some(51_200),
    };

    /// Every tenant's volume limits unless said otherwise: 10 volumes, 1,000 GiB in all,
    /// Cinder's own defaults (`quota_volumes`, `quota_gigabytes`).
    pub const DEFAULT_VOLUME_LIMITS: store::VolumeLimits = store::VolumeLimits {
        volumes: Some(10),
        gigabytes: Some(1000),
    };

    /// The default floating-IP pool, 192.168.233.0/24 (outside the tenant subnets' 172.16.0.0/12).
    pub const DEFAULT_FLOATING_RANGE: ssntp::payload::Cidr = ssntp::payload::Cidr {
        addr: std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 233, 0)),
        prefix: 24,
    };

    /// Defaults for a server reachable at `public_url`.
    pub fn new(public_url: impl Into<String>) -> ApiConfig {
        ApiConfig {
            public_url: public_url.into().trim_end_matches('/').to_string(),
            body_limit: ApiConfig::DEFAULT_BODY_LIMIT,
            password_iterations: password::DEFAULT_ITERATIONS,
            launcher_creds: None,
            joins: None,
            default_quota: ApiConfig::DEFAULT_QUOTA,
            floating_range: ApiConfig::DEFAULT_FLOATING_RANGE,
            login: LoginLimits::default(),
            connections: ConnectionLimits::default(),
            images: None,
            image_size_cap: ApiConfig::DEFAULT_IMAGE_SIZE_CAP,
            volume_limits: ApiConfig::DEFAULT_VOLUME_LIMITS,
        }
    }
}

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub struct ApiState {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The cluster (the engine, or a fake in tests).
    pub cluster: Arc<dyn Cluster>,
    /// Issues and checks tokens.
    pub signer: Arc<TokenSigner>,
    /// Settings.
    pub config: Arc<ApiConfig>,
    /// Request counters.
    pub metrics: Arc<Metrics>,
    /// The threads that hash and verify passwords (logins, new users, password changes).
    pub hashing: Arc<HashPool>,
    /// Login attempts per user name and per source.
    pub login_limiter: Arc<LoginLimiter>,
}

impl ApiState {
    /// A state over these parts, with fresh metrics.
    pub fn new(
        store: Arc<dyn Store>,
        cluster: Arc<dyn Cluster>,
        signer: TokenSigner,
        config: ApiConfig,
    ) -> ApiState {
        ApiState {
            store,
            cluster,
            signer: Arc::new(signer),
            hashing: Arc::new(HashPool::new(config.login.workers, config.login.queue)),
            login_limiter: Arc::new(LoginLimiter::new(&config.login)),
            config: Arc::new(config),
            metrics: Arc::new(Metrics::default()),
        }
    }

    /// Runs `f` with the store on the blocking pool.
    pub(crate) async fn store<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> Result<T, ApiError> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(store.as_ref()))
            .await
            .map_err(|e| ApiError::Internal(format!("store task failed: {e}")))?
    }

    /// Runs `f` with the store and the cluster on the blocking pool.
    pub(crate) async fn cluster<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store, &dyn Cluster) -> Result<T, ApiError> + Send + 'static,
    {
        let (store, cluster) = (self.store.clone(), self.cluster.clone());
        tokio::task::spawn_blocking(move || f(store.as_ref(), cluster.as_ref()))
            .await
            .map_err(|e| ApiError::Internal(format!("cluster task failed: {e}")))?
    }
}

/// Every route of the API over `state`.
pub fn router(state: ApiState) -> Router {
    let limit = state.config.body_limit;
    Router::new()
        .merge(identity::routes())
        .merge(compute::routes())
        .merge(image::routes())
        .merge(network::routes())
        .merge(volume::routes())
        .merge(native::routes())
        .route("/openapi.json", get(native::openapi::document))
        .route("/openapi-openstack.json", get(openstack_openapi::document))
        .route("/metrics", get(metrics::render))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(axum::middleware::from_fn(request_id::stamp))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no resource at {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::MethodNotAllowed(format!("method {method} is not allowed here"))
}

/// How many instances are in each state (for metrics), over every tenant.
pub(crate) async fn servers_by_state(
    state: &ApiState,
) -> Result<std::collections::BTreeMap<&'static str, u64>, ApiError> {
    state.store(|store| Ok(store.instance_counts()?)).await
}
