//! Off-host launching (issue 11): `cumulo-agent --remote <libvirt URI> --store etcd://...`.
//!
//! Any number of replicas serve one off-host host (registered in the store with that libvirt
//! URI). Each polls the store's operation queue,
//! [claims](store::OperationQueue::claim_operation_on) the oldest operation of its host for a
//! lease and gets a fencing token, then runs it with the same agent [`Core`] and backend an
//! on-host agent uses, over the remote URI:
//! - the core of each operation starts with no records, kept in memory (the operation's
//!   durable record is its claim); for a stop, a delete or a restart it is seeded with the
//!   instance's record (rebuilt from the START the operation carries), so the core re-attaches to
//!   the domain as an on-host agent does after a restart;
//! - up to `parallel` operations run at once (claimed in batches when half the slots are free;
//!   the store never hands out two operations of one instance at once);
//! - the backend is wrapped in [`fence::Fenced`]: the token is recorded on the domain and checked
//!   before every change;
//! - the core reports through [`reporter::StoreReporter`], which writes the instance's new state
//!   with a field mask and finishes the operation in one fenced transaction;
//! - the lease is renewed every third of its length while the operation runs; a renewal refused
//!   as `Fenced` means another replica took over: the work is dropped.
//!
//! With a pki directory the replica also keeps its host's launcher credentials there for
//! libvirt's TLS ([`creds`]: the key opened from its sealed form in the store with the host's
//! key; credentials it cannot open stop it at start).
//!
//! A replica that dies leaves its claim to run out; the next claim (by any replica) gets a larger
//! token and redoes the operation; the dead one's writes, should they ever arrive, are refused.

pub mod cli;
pub mod creds;
pub mod fence;
pub mod reporter;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use store::sealed::HostKey;
use store::{
    MAX_CLAIM_BATCH, Operation, OperationKind, OperationQueue, OperationState, RemoteHost,
    StoreError,
};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::Config;
use crate::core::Core;
use crate::host::{HostFigures, HostSource};
use crate::model::InstanceSpec;
use crate::store::{Desired, Record};
use creds::{CredsCopy, CredsError};
use fence::{FenceMarks, Fenced};
use reporter::{Finisher, Outcome, StoreReporter};

/// What a replica needs.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The replica's name in its claims.
    pub owner: String,
    /// The libvirt URI of the host it serves (as registered).
    pub uri: String,
    /// The lease of a claim.
    pub lease: Duration,
    /// How often the queue is polled when it was empty.
    pub poll: Duration,
    /// How many operations run at once (at least one).
    pub parallel: usize,
    /// The longest an operation may take before it is given up (and left to run out).
    pub op_timeout: Duration,
    /// The replica's work directory (made at start; an operation's records are kept in memory).
    pub work_dir: PathBuf,
    /// The figures the core admits against (the remote host's, as the operator states them).
    pub figures: HostFigures,
    /// Where the host's launcher credentials (from the store) are kept for libvirt, in its
    /// `pkipath` layout (`cacert.pem`, `clientcert.pem`, `clientkey.pem`); `None`: not kept.
    pub pki_dir: Option<PathBuf>,
    /// The key that opens the host's sealed launcher key (needed with `pki_dir`: without it, or
    /// with another host's, [`run`] stops at once with [`RemoteError::Creds`]).
    pub creds_key: Option<HostKey>,
}

/// Why a replica stopped.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The store failed or refused.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// No off-host host is registered with the URI.
    #[error("no off-host host is registered with libvirt URI {0}")]
    NoHost(String),
    /// The work directory cannot be used.
    #[error("work directory: {0}")]
    WorkDir(String),
    /// The host's launcher credentials cannot be used.
    #[error(transparent)]
    Creds(#[from] CredsError),
    /// The `--creds-key` file cannot be read.
    #[error("--creds-key: {0}")]
    CredsKey(#[from] store::sealed::SealError),
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Backend(format!("store task: {e}")))?
}

/// The off-host host registered with `uri`.
pub async fn host_of(
    store: &Arc<dyn OperationQueue>,
    uri: &str,
) -> Result<RemoteHost, RemoteError> {
    let s = store.clone();
    blocking(move || s.remote_hosts())
        .await?
        .into_iter()
        .find(|h| h.libvirt_uri == uri)
        .ok_or_else(|| RemoteError::NoHost(uri.to_string()))
}

/// Runs the replica until `shutdown`. `backend` gives the backend for each operation, given its
/// instance (the same one each time for libvirt; a fresh view of that instance in the shared
/// directory for the simulation).
pub async fn run<B: FenceMarks>(
    store: Arc<dyn OperationQueue>,
    backend: impl Fn(Uuid) -> Result<Arc<B>, String>,
    config: RemoteConfig,
    shutdown: CancellationToken,
) -> Result<(), RemoteError> {
    std::fs::create_dir_all(&config.work_dir)
        .map_err(|e| RemoteError::WorkDir(format!("{}: {e}", config.work_dir.display())))?;
    let host = host_of(&store, &config.uri).await?;
    tracing::info!(host = %host.id, uri = %config.uri, owner = %config.owner, "serving an off-host host");
    // Credentials already in the store that this replica cannot open stop it here, with why.
    let mut creds = match &config.pki_dir {
        Some(dir) => {
            let mut copy = CredsCopy::new(dir.clone(), config.creds_key.clone(), host.id)?;
            let (s, id) = (store.clone(), host.id);
            copy.start(blocking(move || s.launcher_creds(id)).await)?;
            Some(copy)
        }
        None => None,
    };
    let creds_every = config.lease.min(Duration::from_secs(5));
    let mut creds_next = tokio::time::Instant::now() + creds_every;
    let parallel = config.parallel.max(1);
    // Claimed in batches, when at least half the slots are free (or none runs): fewer, larger
    // claims, and always some work at hand while a batch is being claimed.
    let low_water = parallel.div_ceil(2);
    let mut running: JoinSet<(Uuid, Result<Outcome, String>)> = JoinSet::new();
    // What every operation runs with; their reports reach the store batched.
    let context = OpContext {
        store: store.clone(),
        finisher: Finisher::spawn(store.clone()),
        config: config.clone(),
        host: host.clone(),
        shutdown: shutdown.clone(),
    };
    // When the next claim may go (the queue was empty, or the store failed: a poll later).
    let mut claim_at = tokio::time::Instant::now();
    loop {
        if let Some(copy) = &mut creds
            && tokio::time::Instant::now() >= creds_next
        {
            let (s, id) = (store.clone(), host.id);
            copy.update(blocking(move || s.launcher_creds(id)).await);
            creds_next = tokio::time::Instant::now() + creds_every;
        }
        let room = parallel - running.len();
        let wants_work = room >= low_water || running.is_empty();
        if wants_work && tokio::time::Instant::now() >= claim_at {
            let (s, owner, lease) = (store.clone(), config.owner.clone(), config.lease);
            let max = room.min(MAX_CLAIM_BATCH);
            let claimed = tokio::select! {
                _ = shutdown.cancelled() => break,
                c = blocking(move || s.claim_operations_on(&owner, lease, Some(host.id), max)) => c,
            };
            match claimed {
                Ok(ops) if !ops.is_empty() => {
                    for op in ops {
                        spawn_operation(&mut running, &context, &backend, op);
                    }
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("cannot claim: {e}"),
            }
            claim_at = tokio::time::Instant::now() + config.poll;
        }
        // Wait for an operation to end, the next poll, or the end.
        let poll = async {
            if wants_work {
                tokio::time::sleep_until(claim_at).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(ended) = running.join_next(), if !running.is_empty() => log_ended(ended),
            () = poll => {}
        }
    }
    // Stopping: each running operation sees the shutdown, drops its work and cleans up.
    while let Some(ended) = running.join_next().await {
        log_ended(ended);
    }
    Ok(())
}

/// What every operation of a replica runs with.
#[derive(Clone)]
pub struct OpContext {
    /// The shared store.
    pub store: Arc<dyn OperationQueue>,
    /// Where the operations' reports go (batched).
    pub finisher: Finisher,
    /// The replica's configuration.
    pub config: RemoteConfig,
    /// The off-host host it serves.
    pub host: RemoteHost,
    /// The replica's end.
    pub shutdown: CancellationToken,
}

/// Runs `op` in a task of `running`, with the backend `backend` gives for its instance.
fn spawn_operation<B: FenceMarks>(
    running: &mut JoinSet<(Uuid, Result<Outcome, String>)>,
    context: &OpContext,
    backend: &impl Fn(Uuid) -> Result<Arc<B>, String>,
    op: Operation,
) {
    let id = op.id;
    let backend = backend(op.instance);
    let context = context.clone();
    running.spawn(async move {
        let ran = match backend {
            Ok(backend) => run_operation(&context, &backend, op).await,
            Err(e) => Err(format!("backend: {e}")),
        };
        (id, ran)
    });
}

fn log_ended(ended: Result<(Uuid, Result<Outcome, String>), tokio::task::JoinError>) {
    match ended {
        Ok((id, Ok(outcome))) => tracing::info!(operation = %id, ?outcome, "operation ended"),
        Ok((id, Err(e))) => tracing::warn!(operation = %id, "operation dropped: {e}"),
        Err(e) => tracing::error!("an operation's task failed: {e}"),
    }
}

/// Runs one claimed operation to its outcome (or until its claim is lost).
pub async fn run_operation<B: FenceMarks>(
    context: &OpContext,
    backend: &Arc<B>,
    op: Operation,
) -> Result<Outcome, String> {
    let OpContext {
        store,
        finisher,
        config,
        host,
        shutdown,
    } = context;
    let token = op
        .claim
        .as_ref()
        .map(|c| c.token)
        .ok_or("a claimed operation has no claim")?;
    tracing::info!(operation = %op.id, instance = %op.instance, kind = op.kind.as_str(), token, "claimed");
    let spec = match spec_of(&op) {
        Ok(spec) => spec,
        Err(why) => {
            let (s, id) = (store.clone(), op.id);
            let why2 = why.clone();
            blocking(move || s.fail_operation(id, token, &why2))
                .await
                .map_err(|e| e.to_string())?;
            return Ok(Outcome::Finished(OperationState::Failed, why));
        }
    };
    // The operation's core starts from no records, kept in memory (the operation's durable
    // record is its claim): a record tells it of the instance the host already has (running for
    // a stop or a delete; stopped and kept for a start with `restart`, which boots the kept
    // domain rather than making a new one).
    let known = match op.kind {
        OperationKind::Stop | OperationKind::Delete => Some(Desired::Running),
        OperationKind::Start if spec.restart => Some(Desired::Stopped {
            cause: crate::model::StopCause::Requested,
        }),
        OperationKind::Start => None,
    };
    let records = crate::store::Store::memory();
    if let Some(desired) = known {
        records
            .write(&Record::new(spec.clone(), desired))
            .map_err(|e| e.to_string())?;
    }
    let mut core_config = Config::new(
        host.id,
        host.name.clone(),
        HostSource::Fixed(config.figures),
        config.work_dir.clone(),
    );
    // Nothing reads the node's reports off-host: report rarely.
    core_config.stats_interval = Duration::from_secs(3600);
    let (done_tx, done_rx) = oneshot::channel();
    let reporter = StoreReporter::new(finisher.clone(), op.clone(), token, done_tx);
    let fenced = Arc::new(Fenced::new(backend.clone(), token));
    let core = Core::spawn_with_store(core_config, records, fenced, reporter)
        .await
        .map_err(|e| e.to_string())?;
    let submitted = match op.kind {
        OperationKind::Start => core.start(spec),
        OperationKind::Stop => core.delete(op.instance, true),
        OperationKind::Delete => core.delete(op.instance, false),
    };
    let outcome = match submitted {
        Err(e) => Err(e.to_string()),
        Ok(()) => watch(store, config, &op, token, done_rx, shutdown).await,
    };
    if let Err(e) = core.shutdown().await {
        tracing::warn!("core shutdown: {e}");
    }
    outcome
}

/// Waits for the outcome, renewing the lease meanwhile.
async fn watch(
    store: &Arc<dyn OperationQueue>,
    config: &RemoteConfig,
    op: &Operation,
    token: u64,
    mut done: oneshot::Receiver<Outcome>,
    shutdown: &CancellationToken,
) -> Result<Outcome, String> {
    let deadline = tokio::time::Instant::now() + config.op_timeout;
    let every = (config.lease / 3).max(Duration::from_millis(10));
    loop {
        tokio::select! {
            outcome = &mut done => return outcome.map_err(|_| "the reporter went away".to_string()),
            _ = shutdown.cancelled() => return Err("shutting down".into()),
            _ = tokio::time::sleep_until(deadline) => return Err("timed out".into()),
            _ = tokio::time::sleep(every) => {
                let (s, id, lease) = (store.clone(), op.id, config.lease);
                match blocking(move || s.renew_claim(id, token, lease)).await {
                    Ok(_) => {}
                    Err(StoreError::Fenced { .. }) => return Ok(Outcome::Fenced),
                    Err(e) => tracing::warn!(operation = %id, "cannot renew: {e}"),
                }
            }
        }
    }
}

/// The instance an operation is about, from the START it carries.
pub fn spec_of(op: &Operation) -> Result<InstanceSpec, String> {
    let start = match ssntp::Payload::decode(ssntp::Operand::Start, &op.payload) {
        Ok(ssntp::Payload::Start(start)) => start,
        Ok(_) => return Err("the operation carries no START".into()),
        Err(e) => return Err(format!("the operation's START is unreadable: {e}")),
    };
    if start.instance_uuid != op.instance {
        return Err("the operation's START is for another instance".into());
    }
    if let Some(Err(e)) = start.kernel.as_ref().map(|k| k.check()) {
        return Err(format!("the operation's START: kernel: {e}"));
    }
    Ok(crate::wire::spec_from_start(&start))
}
