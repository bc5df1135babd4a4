//! Off-host hosts and the operation queue (issue 11): the records through which the controller
//! hands work to `cumulo-agent --remote` replicas instead of sending it over SSNTP.
//!
//! The controller [enqueues](crate::OperationQueue::enqueue_operation) an [`Operation`] for a
//! [`RemoteHost`]; any replica [claims](crate::OperationQueue::claim_operation) the oldest one it
//! may take for a lease, and gets a **fencing token** that is larger than every token handed out
//! before in the store. Every later write about that operation
//! ([renew](crate::OperationQueue::renew_claim),
//! [complete](crate::OperationQueue::complete_operation),
//! [fail](crate::OperationQueue::fail_operation)) names the token and is refused with
//! [`StoreError::Fenced`](super::StoreError::Fenced) once another replica has taken the operation
//! over (after the lease ran out) or it is finished. Operations of one instance run one at a
//! time, in the order they were enqueued.

use std::time::SystemTime;

use uuid::Uuid;

/// The most operations one claim takes
/// ([`OperationQueue::claim_operations_on`](crate::OperationQueue::claim_operations_on)): each
/// costs etcd two compares and two writes, and one transaction holds at most 128 of each.
pub const MAX_CLAIM_BATCH: usize = 32;

/// The most reports one etcd transaction of
/// [`OperationQueue::fenced_writes`](crate::OperationQueue::fenced_writes) commits: each compares
/// three keys and writes up to nine (its operation, lease and index keys, its instance, the
/// instance's node index and its two keys of the state index), and a transaction holds at most
/// 128 of each.
pub const MAX_FENCED_BATCH: usize = 14;

/// One launcher's report for [`OperationQueue::fenced_writes`](crate::OperationQueue::fenced_writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedWrite {
    /// The operation.
    pub id: Uuid,
    /// The claim's fencing token.
    pub token: u64,
    /// What it does to the operation's instance.
    pub write: crate::InstanceWrite,
    /// How the operation ends, if it does: done or failed, with the result.
    pub finish: Option<(crate::OperationState, String)>,
}

impl FencedWrite {
    /// `finish` as [`OperationQueue::fenced_write`](crate::OperationQueue::fenced_write) takes it.
    pub fn finish(&self) -> Option<(crate::OperationState, &str)> {
        self.finish.as_ref().map(|(s, r)| (*s, r.as_str()))
    }
}

/// A host whose launcher runs off the host, reached through a libvirt URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteHost {
    /// Its identifier.
    pub id: Uuid,
    /// Its unique name.
    pub name: String,
    /// Where its libvirt listens (`qemu+tcp://host/system`, `qemu+tls://...`).
    pub libvirt_uri: String,
    /// When it was recorded.
    pub created: SystemTime,
}

/// The TLS client credentials the launchers of an off-host host present to its libvirtd
/// (issued and renewed by the controller: `controller::creds`). The private key is kept sealed
/// for the host ([`crate::sealed`]): a reader of the store sees the certificates, not the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherCreds {
    /// The host.
    pub host: Uuid,
    /// The client certificate (PEM).
    pub cert_pem: String,
    /// Its private key, sealed for the host beside this certificate (`sealed:v1:...`: only the
    /// host's [`HostKey`](crate::sealed::HostKey) opens it); never the clear PEM.
    pub sealed_key: String,
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// When the certificate ends.
    pub not_after: SystemTime,
    /// When it was issued.
    pub issued: SystemTime,
}

/// Most bytes of one credential's PEM text (and of the sealed key).
pub(crate) const MAX_PEM: usize = 64 * 1024;

/// Checks credentials before they are stored (shared by the stores): certificates in PEM, the
/// key in the sealed form (a clear private key is refused).
pub(crate) fn check_creds(creds: &LauncherCreds) -> super::Result<()> {
    for (what, pem) in [("certificate", &creds.cert_pem), ("CA", &creds.ca_pem)] {
        if !pem.contains("-----BEGIN ") || pem.len() > MAX_PEM {
            return Err(super::StoreError::Invalid(format!(
                "launcher {what} must be PEM of at most {MAX_PEM} bytes"
            )));
        }
    }
    if creds.sealed_key.len() > MAX_PEM {
        return Err(super::StoreError::Invalid(format!(
            "a sealed launcher key of more than {MAX_PEM} bytes"
        )));
    }
    crate::sealed::check(&creds.sealed_key).map_err(|e| {
        super::StoreError::Invalid(format!(
            "launcher key: {e} (the store keeps launcher keys sealed, never in clear)"
        ))
    })
}

/// Input of [`OperationQueue::create_remote_host`](crate::OperationQueue::create_remote_host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRemoteHost {
    /// Unique name.
    pub name: String,
    /// libvirt URI (`scheme://...`, no blanks).
    pub libvirt_uri: String,
}

/// What an operation asks of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// Create and boot the instance (the payload is its START).
    Start,
    /// Power it off.
    Stop,
    /// Destroy it and its disks.
    Delete,
}

impl OperationKind {
    /// The name kept in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Start => "start",
            OperationKind::Stop => "stop",
            OperationKind::Delete => "delete",
        }
    }

    /// The kind named `text` (as [`OperationKind::as_str`] writes it).
    pub fn parse(text: &str) -> Option<OperationKind> {
        [
            OperationKind::Start,
            OperationKind::Stop,
            OperationKind::Delete,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// Where an operation is in its life: `Queued -> Claimed -> Done | Failed`; a claimed operation
/// whose lease ran out may be claimed again (by any replica, with a new token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationState {
    /// Waiting for a replica.
    Queued,
    /// A replica holds it (see [`Operation::claim`]).
    Claimed,
    /// Finished successfully.
    Done,
    /// Finished with an error.
    Failed,
}

impl OperationState {
    /// The name kept in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationState::Queued => "queued",
            OperationState::Claimed => "claimed",
            OperationState::Done => "done",
            OperationState::Failed => "failed",
        }
    }

    /// The state named `text` (as [`OperationState::as_str`] writes it).
    pub fn parse(text: &str) -> Option<OperationState> {
        [
            OperationState::Queued,
            OperationState::Claimed,
            OperationState::Done,
            OperationState::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    /// Whether the operation is finished (done or failed).
    pub fn is_finished(self) -> bool {
        matches!(self, OperationState::Done | OperationState::Failed)
    }
}

/// Who holds (or last held) an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The replica that claimed it (its own name; informative only).
    pub owner: String,
    /// The fencing token of the claim: larger than every token handed out before it in the store.
    pub token: u64,
    /// When the lease runs out; after that another replica may take the operation over.
    pub expires: SystemTime,
}

/// One request to a [`RemoteHost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Its identifier.
    pub id: Uuid,
    /// The host it is for.
    pub host: Uuid,
    /// The instance it is about.
    pub instance: Uuid,
    /// What it asks.
    pub kind: OperationKind,
    /// Its input as given (for a start, the START payload); opaque to the store.
    pub payload: Vec<u8>,
    /// Where it is.
    pub state: OperationState,
    /// The current claim while `Claimed`; the last one once finished; `None` while `Queued`.
    pub claim: Option<Claim>,
    /// The result (done) or the reason (failed).
    pub result: Option<String>,
    /// When it was enqueued.
    pub created: SystemTime,
    /// When it last changed.
    pub updated: SystemTime,
}

/// Input of [`OperationQueue::enqueue_operation`](crate::OperationQueue::enqueue_operation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOperation {
    /// The host (it must exist).
    pub host: Uuid,
    /// The instance (not checked: a delete may outlive the instance's record).
    pub instance: Uuid,
    /// What to do.
    pub kind: OperationKind,
    /// Its input.
    pub payload: Vec<u8>,
}

/// Which operations [`OperationQueue::operations`](crate::OperationQueue::operations) lists;
/// `None` fields match all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OperationFilter {
    /// Only in this state.
    pub state: Option<OperationState>,
    /// Only for this host.
    pub host: Option<Uuid>,
}

impl OperationFilter {
    /// Whether `op` passes.
    pub fn matches(&self, op: &Operation) -> bool {
        self.state.is_none_or(|s| s == op.state) && self.host.is_none_or(|h| h == op.host)
    }
}

/// Checks a new host's name and URI (shared by the stores).
pub(crate) fn check_remote_host(new: &NewRemoteHost) -> super::Result<()> {
    crate::common::check_name("remote host", &new.name)?;
    let uri = &new.libvirt_uri;
    let scheme_ok = uri
        .split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty());
    if !scheme_ok || uri.len() > 1024 || uri.chars().any(char::is_whitespace) {
        return Err(super::StoreError::Invalid(format!(
            "libvirt URI {uri:?} must be scheme://... without blanks"
        )));
    }
    Ok(())
}

/// Checks a claimer's name (shared by the stores).
pub(crate) fn check_owner(owner: &str) -> super::Result<()> {
    if owner.trim().is_empty() || owner.len() > 255 {
        return Err(super::StoreError::Invalid(
            "a claim's owner must be 1 to 255 bytes and not blank".into(),
        ));
    }
    Ok(())
}

/// The refusal of a write that names `token` for operation `id`.
pub(crate) fn fenced(id: Uuid, token: u64) -> super::StoreError {
    super::StoreError::Fenced {
        id: id.to_string(),
        token,
    }
}
