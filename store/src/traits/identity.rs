//! [`IdentityStore`]: tenants (and what their instances hold), users and their roles.

use std::time::SystemTime;

use uuid::Uuid;

use crate::{
    AppCredential, NewAppCredential, NewTenant, NewUser, Result, Role, RoleAssignment, Tenant,
    TenantChange, TokenRef, TokenState, Usage, User, UserChange, UserProfile,
};

/// Tenants, their usage, users and role assignments, users' application credentials, and the
/// token revocation list. Every call is one transaction.
pub trait IdentityStore: Send + Sync {
    // --- tenants ---
    /// Creates a tenant without a description (`Conflict` on a duplicate name).
    fn create_tenant(&self, new: NewTenant) -> Result<Tenant> {
        self.create_described_tenant(new, String::new())
    }
    /// Creates a tenant with a description of at most
    /// [`MAX_DESCRIPTION`](crate::MAX_DESCRIPTION) bytes (`Conflict` on a duplicate name,
    /// `Invalid` for a longer description).
    fn create_described_tenant(&self, new: NewTenant, description: String) -> Result<Tenant>;
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
    /// Deletes a tenant with no instances, subnets, CNCIs or volumes left (`Conflict`
    /// otherwise); its private images, workloads, role assignments and application credentials
    /// go with it.
    fn delete_tenant(&self, id: Uuid) -> Result<()>;
    /// What the tenant's instances hold now.
    fn usage(&self, tenant: Uuid) -> Result<Usage>;

    // --- users and roles ---
    /// Creates an enabled user without a default project (`Conflict` on a duplicate name).
    fn create_user(&self, new: NewUser) -> Result<User> {
        self.create_user_with(new, UserProfile::default())
    }
    /// Creates a user (`Conflict` on a duplicate name; `NotFound` for a default project that
    /// does not exist).
    fn create_user_with(&self, new: NewUser, profile: UserProfile) -> Result<User>;
    /// One user.
    fn user(&self, id: Uuid) -> Result<User>;
    /// One user by login name.
    fn user_by_name(&self, name: &str) -> Result<User>;
    /// All users, by name.
    fn users(&self) -> Result<Vec<User>>;
    /// Changes a user if its version is still `expected_version`; a new password, or disabling
    /// it, also raises its token generation (`Conflict` for a name another user has, `NotFound`
    /// for a default project that does not exist).
    fn update_user(&self, id: Uuid, expected_version: u64, change: UserChange) -> Result<User>;
    /// Deletes a user, its role assignments, key pairs and application credentials.
    fn delete_user(&self, id: Uuid) -> Result<()>;
    /// Gives `user` the `role` in `tenant` (idempotent).
    fn grant_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()>;
    /// Takes the role away (`NotFound` if it was not given) and raises the user's token
    /// generation in the same transaction.
    fn revoke_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()>;
    /// The roles of a user, in every tenant.
    fn roles_of_user(&self, user: Uuid) -> Result<Vec<RoleAssignment>>;
    /// The roles given in a tenant.
    fn roles_in_tenant(&self, tenant: Uuid) -> Result<Vec<RoleAssignment>>;

    // --- application credentials ---
    /// Makes an application credential of an existing user in an existing project
    /// (`NotFound` otherwise): `Conflict` for a name the user has, `QuotaExceeded`
    /// (`AppCredentials`) when the user has `limit` credentials already (parallel creations
    /// never exceed it), `Invalid` for a bad name, description, hash or no role. Whether the
    /// user holds the roles is the caller's to check.
    fn create_app_credential(&self, new: NewAppCredential, limit: u32) -> Result<AppCredential>;
    /// One credential, by id.
    fn app_credential(&self, id: Uuid) -> Result<AppCredential>;
    /// The credentials of `user`, by name.
    fn app_credentials(&self, user: Uuid) -> Result<Vec<AppCredential>>;
    /// Deletes a credential of `user` (`NotFound` if the user has none with that id).
    fn delete_app_credential(&self, user: Uuid, id: Uuid) -> Result<()>;

    // --- token revocation ---
    /// Puts `token` on the revocation list until it expires (idempotent; a token already expired
    /// is not listed), and prunes the entries of tokens expired by now. `Invalid` for an id that
    /// is not 1 to 64 URL-safe base64 characters.
    fn revoke_token(&self, token: &TokenRef) -> Result<()>;
    /// What validating a token of `user` needs besides its roles, in one read: the user's token
    /// generation and whether `token` is on the revocation list. `NotFound` when the user is
    /// gone; `Invalid` for a bad token id.
    fn token_state(&self, user: Uuid, token: &TokenRef) -> Result<TokenState>;
    /// Drops the entries of tokens expired at `now`; returns how many went.
    fn prune_revoked_tokens(&self, now: SystemTime) -> Result<u64>;
}
