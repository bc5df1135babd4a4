//! The controller's records: what the store keeps, and the inputs that create or change them.
//!
//! Every mutable record carries a `version`, starting at 1 and raised by one on every change.
//! Updates name the version they were computed from (compare-and-swap), which maps onto both an
//! SQLite `UPDATE ... WHERE version = ?` and an etcd transaction comparing a key's mod revision.

use std::net::Ipv4Addr;
use std::time::SystemTime;

use ssntp::payload::{Cidr, MacAddr};
use uuid::Uuid;

mod actions;
mod nodes;

pub use actions::*;
pub use nodes::*;

/// Resource limits of a tenant; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    /// Most instances the tenant may hold at once.
    pub instances: Option<u32>,
    /// Most vCPUs over all its instances.
    pub vcpus: Option<u32>,
    /// Most memory, in MiB, over all its instances.
    pub memory_mb: Option<u64>,
}

/// What a tenant's instances hold now (the figures a [`Quota`] limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Instances, in any state, that still have a record.
    pub instances: u32,
    /// Sum of their vCPUs.
    pub vcpus: u32,
    /// Sum of their memory, in MiB.
    pub memory_mb: u64,
}

/// A tenant (an OpenStack project): owns instances, private images and workloads, subnets, CNCIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// Its identifier.
    pub id: Uuid,
    /// Its unique name.
    pub name: String,
    /// Its limits.
    pub quota: Quota,
    /// Prefix length of each subnet carved for it from 172.16.0.0/12 (16..=30).
    pub subnet_prefix: u8,
    /// What it is for, in words (Keystone's `description`; empty if none, at most
    /// [`MAX_DESCRIPTION`](crate::MAX_DESCRIPTION) bytes).
    pub description: String,
    /// When it was created.
    pub created: SystemTime,
    /// Compare-and-swap counter.
    pub version: u64,
}

/// Input of [`IdentityStore::create_tenant`](crate::IdentityStore::create_tenant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTenant {
    /// Unique name.
    pub name: String,
    /// Limits.
    pub quota: Quota,
    /// Subnet size as a prefix length (16..=30); 24 is the usual choice.
    pub subnet_prefix: u8,
}

/// A change to a tenant; `None` fields are left alone. The subnet plan is fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TenantChange {
    /// New name.
    pub name: Option<String>,
    /// New limits (lowering below the current usage is allowed; it only blocks new instances).
    pub quota: Option<Quota>,
    /// New description.
    pub description: Option<String>,
}

/// A user who logs in; what it may do comes from its [`Role`](crate::Role)s per tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its identifier.
    pub id: Uuid,
    /// Its unique login name.
    pub name: String,
    /// Its password hash as a PHC string (made and checked by the auth module; never a password).
    pub password_hash: String,
    /// When it was created.
    pub created: SystemTime,
    /// Compare-and-swap counter.
    pub version: u64,
    /// Its token generation: 0 at creation, raised by every password change and every role
    /// removal. A token carries the generation of its login and is refused once the user's has
    /// moved on, so those changes end the user's existing tokens.
    pub token_generation: u64,
    /// Whether it may log in (Keystone's `enabled`); disabling a user ends its tokens.
    pub enabled: bool,
    /// The project a login without a scope is scoped to, if the user has a role there
    /// (Keystone's `default_project_id`; not a role, and it may name a project since deleted).
    pub default_project: Option<Uuid>,
}

/// A token as the revocation list names it: its id (the token's random audit id) and when it
/// expires. An entry is kept until then and pruned after: an expired token is refused anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRef {
    /// The token's id: 1 to 64 bytes of `A-Z a-z 0-9 - _` (URL-safe base64).
    pub id: String,
    /// When the token expires.
    pub expires: SystemTime,
}

/// What [`IdentityStore::token_state`](crate::IdentityStore::token_state) reads to validate a
/// token, besides its signature and the user's roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenState {
    /// The user's current token generation.
    pub generation: u64,
    /// Whether the token is on the revocation list.
    pub revoked: bool,
}

/// Input of [`IdentityStore::create_user`](crate::IdentityStore::create_user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    /// Unique login name.
    pub name: String,
    /// PHC password hash.
    pub password_hash: String,
}

/// What a user is made with besides its name and password
/// ([`IdentityStore::create_user_with`](crate::IdentityStore::create_user_with)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserProfile {
    /// Whether it may log in.
    pub enabled: bool,
    /// Its default project (which must exist).
    pub default_project: Option<Uuid>,
}

impl Default for UserProfile {
    /// Enabled, without a default project.
    fn default() -> UserProfile {
        UserProfile {
            enabled: true,
            default_project: None,
        }
    }
}

/// A change to a user; `None` fields are left alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserChange {
    /// New PHC password hash (raises the user's token generation: its tokens end).
    pub password_hash: Option<String>,
    /// New unique login name.
    pub name: Option<String>,
    /// Enables or disables it (disabling raises its token generation: its tokens end).
    pub enabled: Option<bool>,
    /// A new default project (which must exist), or none.
    pub default_project: Option<Option<Uuid>>,
}

/// What an instance runs: a flavor, an image and cloud-init user data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Its identifier.
    pub id: Uuid,
    /// The owning tenant; `None` is public.
    pub owner: Option<Uuid>,
    /// Its name.
    pub name: String,
    /// Its flavor.
    pub flavor: Uuid,
    /// Its image.
    pub image: Uuid,
    /// Cloud-init user data.
    pub user_data: String,
    /// Whether its instances hold nothing worth keeping: when their node is evacuated or lost,
    /// the controller starts them again elsewhere from the image instead of keeping them there.
    pub ephemeral: bool,
    /// Compare-and-swap counter.
    pub version: u64,
}

/// Input of [`CatalogStore::create_workload`](crate::CatalogStore::create_workload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorkload {
    /// The owning tenant; `None` is public.
    pub owner: Option<Uuid>,
    /// Its name.
    pub name: String,
    /// An existing flavor.
    pub flavor: Uuid,
    /// An existing image the owner can see.
    pub image: Uuid,
    /// Cloud-init user data.
    pub user_data: String,
    /// Whether its instances are ephemeral (see [`Workload::ephemeral`]).
    pub ephemeral: bool,
}

/// A change to a workload; `None` fields are left alone (running instances keep what they had).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkloadChange {
    /// New name.
    pub name: Option<String>,
    /// New user data.
    pub user_data: Option<String>,
}

/// Where an instance is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InstanceState {
    /// Created, START sent or about to be; not yet reported running.
    Pending,
    /// Running.
    Active,
    /// STOP sent, not yet confirmed.
    Stopping,
    /// Stopped; may be started again.
    Exited,
    /// Delete sent; the record goes when the delete is confirmed.
    Deleted,
    /// A delete was not confirmed in time.
    Hung,
    /// Its node disconnected.
    Missing,
    /// It failed, with the reason.
    Error(String),
    /// Frozen in memory on its node (pause).
    Paused,
    /// Its memory saved to its node's disk and powered off (suspend).
    Suspended,
    /// Being rebuilt on its node: its disk is being removed, then made anew from its image.
    Rebuilding,
    /// Stopped on its node with a new flavor, waiting for the resize to be confirmed or reverted.
    Resized,
}

impl InstanceState {
    /// Every state's name, as the stores write it and the native API shows it.
    pub const NAMES: [&'static str; 12] = [
        "pending",
        "active",
        "stopping",
        "exited",
        "deleted",
        "hung",
        "missing",
        "error",
        "paused",
        "suspended",
        "rebuilding",
        "resized",
    ];

    /// The state's name (`error` for every error; the reason is apart).
    pub fn name(&self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Active => "active",
            InstanceState::Stopping => "stopping",
            InstanceState::Exited => "exited",
            InstanceState::Deleted => "deleted",
            InstanceState::Hung => "hung",
            InstanceState::Missing => "missing",
            InstanceState::Error(_) => "error",
            InstanceState::Paused => "paused",
            InstanceState::Suspended => "suspended",
            InstanceState::Rebuilding => "rebuilding",
            InstanceState::Resized => "resized",
        }
    }

    /// The state of a name, with `reason` for `error`; `None` for a name that is none.
    pub fn from_name(name: &str, reason: Option<String>) -> Option<InstanceState> {
        Some(match name {
            "pending" => InstanceState::Pending,
            "active" => InstanceState::Active,
            "stopping" => InstanceState::Stopping,
            "exited" => InstanceState::Exited,
            "deleted" => InstanceState::Deleted,
            "hung" => InstanceState::Hung,
            "missing" => InstanceState::Missing,
            "error" => InstanceState::Error(reason.unwrap_or_default()),
            "paused" => InstanceState::Paused,
            "suspended" => InstanceState::Suspended,
            "rebuilding" => InstanceState::Rebuilding,
            "resized" => InstanceState::Resized,
            _ => return None,
        })
    }

    /// Its name and, for an error, the reason: what the stores write.
    pub fn text(&self) -> (&'static str, Option<&str>) {
        match self {
            InstanceState::Error(reason) => ("error", Some(reason)),
            other => (other.name(), None),
        }
    }
}

/// Why an instance is in `error`, for the user: kept with the instance while it is in error.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fault {
    /// The failure's code: a START_FAILURE reason (`launch_failure`, `full_cloud`, ...) or
    /// one of the controller's own (`dispatch_failure`, `start_lost`, `network_failure`).
    pub reason: String,
    /// The cause in words (an agent's START_FAILURE message, or the controller's).
    pub message: String,
    /// When it happened (the stores keep milliseconds).
    pub created: SystemTime,
}

impl Fault {
    /// A fault that happened now.
    pub fn now(reason: impl Into<String>, message: impl Into<String>) -> Fault {
        Fault {
            reason: reason.into(),
            message: message.into(),
            created: SystemTime::now(),
        }
    }
}

/// One virtual machine of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Its identifier (also its SSNTP instance UUID).
    pub id: Uuid,
    /// The owning tenant.
    pub tenant: Uuid,
    /// What it runs.
    pub workload: Uuid,
    /// Its name.
    pub name: String,
    /// vCPUs it counts against the quota (its flavor's at creation).
    pub vcpus: u32,
    /// Memory in MiB it counts against the quota.
    pub memory_mb: u64,
    /// The node it was placed on, once known.
    pub node: Option<Uuid>,
    /// Its state.
    pub state: InstanceState,
    /// Its tenant subnet.
    pub subnet: Cidr,
    /// Its private address in that subnet.
    pub ip: Ipv4Addr,
    /// Its MAC address, derived from the IP (`02:00:` then the four IPv4 bytes).
    pub mac: MacAddr,
    /// The subnet's CNCI, once there is one.
    pub cnci: Option<Uuid>,
    /// Why it is in `error`; `None` in every other state.
    pub fault: Option<Fault>,
    /// When it was created.
    pub created: SystemTime,
    /// When it last changed.
    pub updated: SystemTime,
    /// The workload it had before a resize that is not confirmed or reverted yet.
    pub previous_workload: Option<Uuid>,
    /// The key pair it was created with: a copy, kept when the key pair is deleted (as Nova
    /// keeps `key_data`).
    pub key: Option<InstanceKey>,
    /// Its user metadata (Nova's server metadata): at most [`Instance::MAX_METADATA`] items,
    /// each key 1 to [`Instance::MAX_METADATA_TEXT`] characters, each value at most that.
    pub metadata: Metadata,
    /// Who locked it, if it is locked.
    pub locked_by: Option<LockedBy>,
    /// The user who created it, when a user did (Nova's `user_id`; `None` for instances made
    /// before it was kept, or by the controller's own certificate).
    pub user: Option<Uuid>,
    /// The reservation id of the create that made it (Nova's `reservation_id`, `r-` and 8
    /// lowercase letters or digits, shared by the instances of one multi-create; `None` for
    /// instances made before it was kept).
    pub reservation: Option<String>,
    /// The availability zone its creator asked for, if any (its new STARTs name it).
    pub zone: Option<String>,
    /// Compare-and-swap counter.
    pub version: u64,
}

/// An instance's user metadata, by key.
pub type Metadata = std::collections::BTreeMap<String, String>;

impl Instance {
    /// Most metadata items an instance holds (Nova's `metadata_items` quota).
    pub const MAX_METADATA: usize = 128;
    /// Longest metadata key or value, in characters (as Nova counts them).
    pub const MAX_METADATA_TEXT: usize = 255;

    /// Longest reservation id kept, in bytes.
    pub const MAX_RESERVATION: usize = 64;

    /// A new reservation id as Nova makes them: `r-` then 8 random lowercase letters or digits.
    pub fn new_reservation() -> String {
        const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        // The low 62 bits of a v4 UUID are random (the variant takes the two above them).
        let mut n = Uuid::new_v4().as_u128() & ((1u128 << 62) - 1);
        let mut id = String::with_capacity(10);
        id.push_str("r-");
        for _ in 0..8 {
            id.push(char::from(DIGITS[(n % 36) as usize]));
            n /= 36;
        }
        id
    }

    /// Whether `reservation` may be kept as a reservation id: 1 to
    /// [`Instance::MAX_RESERVATION`] ASCII letters, digits, `-` or `_`.
    pub fn check_reservation(reservation: &str) -> Result<(), crate::StoreError> {
        if reservation.is_empty()
            || reservation.len() > Instance::MAX_RESERVATION
            || !reservation
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(crate::StoreError::Invalid(format!(
                "a reservation id is 1 to {} ASCII letters, digits, '-' or '_'",
                Instance::MAX_RESERVATION
            )));
        }
        Ok(())
    }

    /// Whether `metadata` fits an instance: `Invalid` says what does not.
    pub fn check_metadata(metadata: &Metadata) -> Result<(), crate::StoreError> {
        if metadata.len() > Instance::MAX_METADATA {
            return Err(crate::StoreError::Invalid(format!(
                "an instance holds at most {} metadata items",
                Instance::MAX_METADATA
            )));
        }
        for (key, value) in metadata {
            if key.is_empty() || key.chars().count() > Instance::MAX_METADATA_TEXT {
                return Err(crate::StoreError::Invalid(format!(
                    "a metadata key must be 1 to {} characters",
                    Instance::MAX_METADATA_TEXT
                )));
            }
            if value.chars().count() > Instance::MAX_METADATA_TEXT {
                return Err(crate::StoreError::Invalid(format!(
                    "a metadata value must be at most {} characters",
                    Instance::MAX_METADATA_TEXT
                )));
            }
        }
        Ok(())
    }
}

/// Who locked an instance (Nova's `locked_by`). A locked instance refuses the actions of its
/// project's members; an admin's lock is lifted by an admin only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockedBy {
    /// A member of its project.
    Owner,
    /// An admin.
    Admin,
}

impl LockedBy {
    /// Its name as stored and as Nova shows it (`owner`, `admin`).
    pub fn as_str(self) -> &'static str {
        match self {
            LockedBy::Owner => "owner",
            LockedBy::Admin => "admin",
        }
    }

    /// The value [`LockedBy::as_str`] names.
    pub fn from_name(name: &str) -> Option<LockedBy> {
        match name {
            "owner" => Some(LockedBy::Owner),
            "admin" => Some(LockedBy::Admin),
            _ => None,
        }
    }
}

/// The SSH key an instance was created with: its key pair's name and public key, as they were
/// then. Fixed at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceKey {
    /// The key pair's name.
    pub name: String,
    /// Its OpenSSH public key (one line), what the instance's `public-keys` meta data holds.
    pub public_key: String,
}

/// Input of [`InstanceStore::create_instance`](crate::InstanceStore::create_instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstance {
    /// The owning tenant.
    pub tenant: Uuid,
    /// A workload the tenant can see.
    pub workload: Uuid,
    /// Its name.
    pub name: String,
    /// The SSH key to put in it, if any (its public key at most
    /// [`Keypair::MAX_PUBLIC_KEY`] bytes).
    pub key: Option<InstanceKey>,
    /// Its user metadata ([`Instance::check_metadata`]).
    pub metadata: Metadata,
    /// The user who creates it, if a user does.
    pub user: Option<Uuid>,
    /// The reservation id of its create ([`Instance::check_reservation`]), if any.
    pub reservation: Option<String>,
    /// The availability zone it must run in, if its creator named one
    /// ([`ssntp::payload::valid_zone`]).
    pub zone: Option<String>,
}

/// A change to an instance; `None` fields are left alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceChange {
    /// New state.
    pub state: Option<InstanceState>,
    /// New node (`Some(None)` clears it).
    pub node: Option<Option<Uuid>>,
    /// New CNCI (`Some(None)` clears it).
    pub cnci: Option<Option<Uuid>>,
    /// New name.
    pub name: Option<String>,
    /// New fault (`Some(None)` clears it). A change that puts the instance in a state other
    /// than `error` and names no fault clears it too: a fault is kept only while in error.
    pub fault: Option<Option<Fault>>,
    /// New workload (a rebuild from another image or with other user data): one the instance's
    /// tenant can see, with the same vCPUs and memory as the instance has (its quota usage does
    /// not change); otherwise the update is `Invalid` (`NotFound` for a workload not seen).
    pub workload: Option<Uuid>,
    /// With `workload`: the instance takes the new workload's vCPUs and memory (a resize),
    /// within its tenant's quota (`QuotaExceeded` otherwise).
    pub resize: bool,
    /// New previous workload (`Some(None)` clears it): what a resize revert goes back to.
    pub previous_workload: Option<Option<Uuid>>,
    /// New metadata, replacing the whole ([`Instance::check_metadata`]).
    pub metadata: Option<Metadata>,
    /// New lock (`Some(None)` unlocks).
    pub locked_by: Option<Option<LockedBy>>,
}

impl InstanceChange {
    /// The fault an instance has after this change, from the one it had (`current`) and
    /// whether it ends in `error`: what both stores write.
    pub fn fault_after(&self, current: Option<Fault>, ends_in_error: bool) -> Option<Fault> {
        match &self.fault {
            Some(fault) => fault.clone(),
            None if self.state.is_some() && !ends_in_error => None,
            None => current,
        }
    }
}

/// An instance in brief: what a node's STATS is checked against
/// ([`InstanceStore::instance_briefs_on`](crate::InstanceStore::instance_briefs_on)); the whole
/// record is read only for an instance whose report may change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceBrief {
    /// Its id.
    pub id: Uuid,
    /// Its state.
    pub state: InstanceState,
    /// The node the store places it on.
    pub node: Option<Uuid>,
    /// Its record's version.
    pub version: u64,
}

impl From<&Instance> for InstanceBrief {
    fn from(i: &Instance) -> InstanceBrief {
        InstanceBrief {
            id: i.id,
            state: i.state.clone(),
            node: i.node,
            version: i.version,
        }
    }
}

/// An instance a node reports running, for
/// [`ActionStore::start_instances_on`](crate::ActionStore::start_instances_on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToStart {
    /// Its id.
    pub id: Uuid,
    /// The version its record must still have (the one of a brief that placed it on the node),
    /// or `None`: any version, on no node or on the node.
    pub version: Option<u64>,
}

impl ToStart {
    /// Whether `record` is started on `node`: pending, at the version asked if one was, and
    /// placed on no node or on `node`.
    pub fn starts(&self, record: &Instance, node: Uuid) -> bool {
        record.state == InstanceState::Pending
            && record.node.is_none_or(|n| n == node)
            && self.version.is_none_or(|v| v == record.version)
    }
}

/// What [`ActionStore::start_instances_on`](crate::ActionStore::start_instances_on) did with
/// one instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Starting {
    /// Written active on the node: the record as written, and the answer of its event's end.
    Started(Instance, Result<Option<InstanceAction>, crate::StoreError>),
    /// Not to be started ([`ToStart::starts`]): the record as read, left as it is.
    Left(Instance),
}

impl Starting {
    /// The change that starts an instance on `node`.
    pub fn change(node: Uuid) -> InstanceChange {
        InstanceChange {
            state: Some(InstanceState::Active),
            node: Some(Some(node)),
            ..InstanceChange::default()
        }
    }
}

/// Which instances a listing returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InstanceFilter {
    /// Only those on this node.
    pub node: Option<Uuid>,
}

/// What a key pair holds. Only SSH keys (Nova's `ssh` type; `x509` is not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeypairKind {
    /// An OpenSSH public key.
    Ssh,
}

impl KeypairKind {
    /// The kind as Nova names it: `ssh`.
    pub fn as_str(&self) -> &'static str {
        match self {
            KeypairKind::Ssh => "ssh",
        }
    }

    /// The kind of a name; `None` for a name that is none.
    pub fn from_name(name: &str) -> Option<KeypairKind> {
        match name {
            "ssh" => Some(KeypairKind::Ssh),
            _ => None,
        }
    }
}

/// A user's SSH key pair (Nova's keypair): its public half only. A generated key pair's private
/// half is given to the user once and never kept. Names are unique per user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keypair {
    /// The owning user.
    pub user: Uuid,
    /// Its name, unique among the user's key pairs: 1 to [`Keypair::MAX_NAME`] bytes of ASCII
    /// letters, digits, `_`, `-` and space (Nova's rule).
    pub name: String,
    /// What it holds.
    pub kind: KeypairKind,
    /// The OpenSSH public key, one line, 1 to [`Keypair::MAX_PUBLIC_KEY`] bytes.
    pub public_key: String,
    /// The key's fingerprint (MD5 of the key blob, colon-separated hex, as Nova gives it).
    pub fingerprint: String,
    /// When it was created (the stores keep milliseconds).
    pub created: SystemTime,
}

impl Keypair {
    /// The longest name.
    pub const MAX_NAME: usize = 255;
    /// The longest public key, in bytes (an OpenSSH line of a 16384-bit RSA key is under 3 KiB).
    pub const MAX_PUBLIC_KEY: usize = 16 * 1024;
    /// The longest fingerprint, in bytes.
    pub const MAX_FINGERPRINT: usize = 128;

    /// Whether `name` is a key pair name: 1 to [`Keypair::MAX_NAME`] bytes of ASCII letters,
    /// digits, `_`, `-` and space.
    pub fn valid_name(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= Keypair::MAX_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b' '))
    }
}

/// Input of [`KeypairStore::create_keypair`](crate::KeypairStore::create_keypair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewKeypair {
    /// The owning user (must exist).
    pub user: Uuid,
    /// Its name (see [`Keypair::name`]).
    pub name: String,
    /// What it holds.
    pub kind: KeypairKind,
    /// The OpenSSH public key (checked by the caller; the store checks only its size and that it
    /// is one line).
    pub public_key: String,
    /// Its fingerprint.
    pub fingerprint: String,
}

/// A tenant subnet carved from 172.16.0.0/12.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    /// Its identifier.
    pub id: Uuid,
    /// The owning tenant.
    pub tenant: Uuid,
    /// Its block. The first host address is the gateway (the CNCI's side); instances get the rest.
    pub cidr: Cidr,
}

/// Where a CNCI is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CnciState {
    /// Launch requested, not yet added.
    Pending,
    /// Added (CONCENTRATOR_INSTANCE_ADDED seen).
    Active,
    /// It stopped; to be restarted.
    Exited,
    /// It could not be launched.
    Failed,
}

/// The concentrator of one tenant subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cnci {
    /// Its identifier (its instance UUID).
    pub id: Uuid,
    /// The owning tenant.
    pub tenant: Uuid,
    /// The subnet it serves (one CNCI per subnet).
    pub subnet: Uuid,
    /// That subnet's block.
    pub cidr: Cidr,
    /// Its state.
    pub state: CnciState,
    /// Its address as reported when added.
    pub ip: Option<std::net::IpAddr>,
    /// The network node it runs on.
    pub node: Option<Uuid>,
    /// When it was created.
    pub created: SystemTime,
    /// When it last changed.
    pub updated: SystemTime,
    /// Compare-and-swap counter.
    pub version: u64,
}

/// A change to a CNCI; `None` fields are left alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CnciChange {
    /// New state.
    pub state: Option<CnciState>,
    /// New address (`Some(None)` clears it).
    pub ip: Option<Option<std::net::IpAddr>>,
    /// New node (`Some(None)` clears it).
    pub node: Option<Option<Uuid>>,
}

/// How bad an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Something normal happened.
    Info,
    /// Something odd happened.
    Warning,
    /// Something failed.
    Error,
}

/// One entry of the bounded event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its position in the log (increasing).
    pub seq: u64,
    /// When it was recorded.
    pub time: SystemTime,
    /// The tenant it concerns; `None` for cluster events.
    pub tenant: Option<Uuid>,
    /// How bad it is.
    pub kind: EventKind,
    /// What happened.
    pub message: String,
}

/// Input of [`EventStore::append_event`](crate::EventStore::append_event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The tenant it concerns; `None` for cluster events.
    pub tenant: Option<Uuid>,
    /// How bad it is.
    pub kind: EventKind,
    /// What happened.
    pub message: String,
}
