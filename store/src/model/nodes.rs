//! The records of the cluster's nodes the store keeps: nodes an admin disabled, join tokens and
//! the hosts that joined with them.

use std::time::SystemTime;

use uuid::Uuid;

/// A node an admin disabled (Compute's `os-services` disable): it takes no new instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisabledNode {
    /// The node's UUID.
    pub node: Uuid,
    /// Why, if the admin said.
    pub reason: Option<String>,
    /// When it was disabled.
    pub since: SystemTime,
}

/// A join token (`cumulo node token create`): lets one new host join the cluster once, before
/// it expires, with a certificate of `roles`. Only its secret's SHA-256 is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// Its id (the first part of the token a user is given).
    pub id: Uuid,
    /// SHA-256 of its secret.
    pub secret_hash: [u8; 32],
    /// The roles of the certificate a host that joins with it gets (SSNTP role bits).
    pub roles: u32,
    /// When it was made.
    pub created: SystemTime,
    /// When it stops being accepted.
    pub expires: SystemTime,
    /// When it was used, and by which node: a token is used once.
    pub used: Option<(SystemTime, Uuid)>,
}

impl JoinToken {
    /// The most tokens kept at once (expired ones are dropped when a new one is made).
    pub const MAX_TOKENS: usize = 1024;
}

/// A host that joined with a token: the certificate it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedNode {
    /// The node's UUID (its certificate binds it).
    pub id: Uuid,
    /// The host name it gave.
    pub hostname: String,
    /// Its certificate's roles (SSNTP role bits).
    pub roles: u32,
    /// Its certificate's serial number.
    pub serial: Vec<u8>,
    /// When its certificate expires.
    pub not_after: SystemTime,
    /// When it joined.
    pub joined: SystemTime,
    /// When its certificate was revoked (`cumulo node remove`).
    pub revoked: Option<SystemTime>,
}

impl JoinedNode {
    /// The most joined nodes kept.
    pub const MAX_NODES: usize = 65_536;
    /// The longest host name (a DNS name).
    pub const MAX_HOSTNAME: usize = 253;
}

impl DisabledNode {
    /// The longest reason, in characters (Nova's `disabled_reason`).
    pub const MAX_REASON: usize = 255;
    /// The most nodes disabled at once (a START's `avoid_nodes` holds them, and up to 4,096).
    pub const MAX_NODES: usize = 1024;
}
