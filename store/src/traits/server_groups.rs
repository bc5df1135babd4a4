//! [`ServerGroupStore`]: tenants' server groups and their members (Compute's `os-server-groups`).

use uuid::Uuid;

use crate::{NewServerGroup, Result, Scope, ServerGroup};

/// Tenants' server groups.
pub trait ServerGroupStore: Send + Sync {
    /// Makes a group: `Invalid` for a blank name or an unknown policy, `NotFound` for an unknown
    /// tenant, `QuotaExceeded` (server groups) past [`ServerGroup::MAX_PER_TENANT`].
    fn create_server_group(&self, new: NewServerGroup) -> Result<ServerGroup>;
    /// A group the scope sees.
    fn server_group(&self, scope: Scope, id: Uuid) -> Result<ServerGroup>;
    /// Every group the scope sees, oldest first.
    fn server_groups(&self, scope: Scope) -> Result<Vec<ServerGroup>>;
    /// Deletes a group; its members stay, in no group.
    fn delete_server_group(&self, scope: Scope, id: Uuid) -> Result<()>;
    /// Makes `instance` (of the group's tenant, in no group yet: `Conflict` otherwise) a member
    /// of `group`; `QuotaExceeded` (server group members) past [`ServerGroup::MAX_MEMBERS`].
    fn add_server_group_member(
        &self,
        scope: Scope,
        group: Uuid,
        instance: Uuid,
    ) -> Result<ServerGroup>;
    /// The group `instance` is a member of, if any.
    fn server_group_of(&self, instance: Uuid) -> Result<Option<ServerGroup>>;
}
