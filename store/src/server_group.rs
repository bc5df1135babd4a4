//! Server groups as the store keeps them (Compute's `os-server-groups`): a tenant's named set of
//! instances with a placement policy ([`ServerGroup`]), and the input that makes one
//! ([`NewServerGroup`]). An instance is a member of one group at most, from its creation; it
//! leaves the group when its record goes. A group may be deleted while it has members (as in
//! Nova): they stay, in no group.

use std::time::SystemTime;

use uuid::Uuid;

use crate::StoreError;

/// The placement policies a group may have, as Compute names them.
pub const SERVER_GROUP_POLICIES: [&str; 4] = [
    "affinity",
    "anti-affinity",
    "soft-affinity",
    "soft-anti-affinity",
];

/// A tenant's server group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGroup {
    /// Its identifier.
    pub id: Uuid,
    /// The owning tenant.
    pub tenant: Uuid,
    /// The user who made it, when a user did.
    pub user: Option<Uuid>,
    /// Its name (1 to 255 bytes, not unique, as in Nova).
    pub name: String,
    /// Its policy: one of [`SERVER_GROUP_POLICIES`].
    pub policy: String,
    /// Its members (instances that still have a record), in the order they joined.
    pub members: Vec<Uuid>,
    /// When it was made.
    pub created: SystemTime,
}

impl ServerGroup {
    /// Most groups a tenant holds (Nova's `server_groups` quota default).
    pub const MAX_PER_TENANT: usize = 10;
    /// Most members a group holds (Nova's `server_group_members` quota default).
    pub const MAX_MEMBERS: usize = 10;

    /// Whether a tenant holding `held` groups may make one more.
    pub fn check_group_room(held: usize) -> Result<(), StoreError> {
        if held >= ServerGroup::MAX_PER_TENANT {
            return Err(StoreError::QuotaExceeded {
                what: crate::QuotaKind::ServerGroups,
                limit: ServerGroup::MAX_PER_TENANT as u64,
            });
        }
        Ok(())
    }

    /// Whether `other` (the group an instance is in) and the group's room let the instance in:
    /// `Conflict` when it is in a group already, `QuotaExceeded` when the group is full.
    pub fn check_joiner(&self, instance: Uuid, other: Option<Uuid>) -> Result<(), StoreError> {
        if let Some(other) = other {
            return Err(StoreError::Conflict(format!(
                "instance {instance} is a member of server group {other} already"
            )));
        }
        if self.members.len() >= ServerGroup::MAX_MEMBERS {
            return Err(StoreError::QuotaExceeded {
                what: crate::QuotaKind::ServerGroupMembers,
                limit: ServerGroup::MAX_MEMBERS as u64,
            });
        }
        Ok(())
    }

    /// Whether `policy` names a policy: `Invalid` otherwise.
    pub fn check_policy(policy: &str) -> Result<(), StoreError> {
        if SERVER_GROUP_POLICIES.contains(&policy) {
            Ok(())
        } else {
            Err(StoreError::Invalid(format!(
                "unknown server group policy {policy:?}: one of {}",
                SERVER_GROUP_POLICIES.join(", ")
            )))
        }
    }
}

/// What makes a server group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewServerGroup {
    /// The owning tenant.
    pub tenant: Uuid,
    /// The user who makes it, if a user does.
    pub user: Option<Uuid>,
    /// Its name.
    pub name: String,
    /// Its policy ([`ServerGroup::check_policy`]).
    pub policy: String,
}
