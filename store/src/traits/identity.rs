//! [`IdentityStore`]: tenants (and what their instances hold), users and their roles.

use uuid::Uuid;

use crate::{
    NewTenant, NewUser, Result, Role, RoleAssignment, Tenant, TenantChange, Usage, User, UserChange,
};

/// Tenants, their usage, users and role assignments. Every call is one transaction.
pub trait IdentityStore: Send + Sync {
    // --- tenants ---
    /// Creates a tenant (`Conflict` on a duplicate name).
    fn create_tenant(&self, new: NewTenant) -> Result<Tenant>;
    /// One tenant.
    fn tenant(&self, id: Uuid) -> Result<Tenant>;
    /// All tenants, by name.
    fn tenants(&self) -> Result<Vec<Tenant>>;
    /// Changes a tenant if its version is still `expected_version`.
    fn update_tenant(
        &self,
        id: Uuid,
        expected_version: u64,
        change: TenantChange,
    ) -> Result<Tenant>;
    /// Deletes a tenant with no instances, subnets or CNCIs left (`Conflict` otherwise); its
    /// private images, workloads and role assignments go with it.
    fn delete_tenant(&self, id: Uuid) -> Result<()>;
    /// What the tenant's instances hold now.
    fn usage(&self, tenant: Uuid) -> Result<Usage>;

    // --- users and roles ---
    /// Creates a user (`Conflict` on a duplicate name).
    fn create_user(&self, new: NewUser) -> Result<User>;
    /// One user.
    fn user(&self, id: Uuid) -> Result<User>;
    /// One user by login name.
    fn user_by_name(&self, name: &str) -> Result<User>;
    /// All users, by name.
    fn users(&self) -> Result<Vec<User>>;
    /// Changes a user if its version is still `expected_version`.
    fn update_user(&self, id: Uuid, expected_version: u64, change: UserChange) -> Result<User>;
    /// Deletes a user and its role assignments.
    fn delete_user(&self, id: Uuid) -> Result<()>;
    /// Gives `user` the `role` in `tenant` (idempotent).
    fn grant_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()>;
    /// Takes the role away (`NotFound` if it was not given).
    fn revoke_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()>;
    /// The roles of a user, in every tenant.
    fn roles_of_user(&self, user: Uuid) -> Result<Vec<RoleAssignment>>;
    /// The roles given in a tenant.
    fn roles_in_tenant(&self, tenant: Uuid) -> Result<Vec<RoleAssignment>>;
}
