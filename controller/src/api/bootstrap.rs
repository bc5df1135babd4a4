//! Making a fresh controller usable: the admin project, the admin user with the configured
//! password, and the admin role between them. Idempotent: run at every start; an existing user
//! whose password no longer matches the configured one gets the configured one.

use uuid::Uuid;

use super::password;
use store::{IdentityStore, NewTenant, NewUser, Quota, Role, StoreError, UserChange};

/// What [`bootstrap`] made or found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bootstrapped {
    /// The admin user.
    pub user: Uuid,
    /// The admin project.
    pub project: Uuid,
}

/// Makes (or finds) the admin user `admin_name` with `admin_password`, the project
/// `project_name` (no quota, /24 subnets) and gives the user the admin role there.
pub fn bootstrap(
    store: &dyn IdentityStore,
    admin_name: &str,
    admin_password: &str,
    project_name: &str,
) -> Result<Bootstrapped, StoreError> {
    bootstrap_with(
        store,
        admin_name,
        admin_password,
        project_name,
        password::DEFAULT_ITERATIONS,
    )
}

/// As [`bootstrap`], hashing a new password with `iterations` PBKDF2 rounds.
pub fn bootstrap_with(
    store: &dyn IdentityStore,
    admin_name: &str,
    admin_password: &str,
    project_name: &str,
    iterations: u32,
) -> Result<Bootstrapped, StoreError> {
    let project = match store
        .tenants()?
        .into_iter()
        .find(|t| t.name == project_name)
    {
        Some(tenant) => tenant.id,
        None => match store.create_tenant(NewTenant {
            name: project_name.to_string(),
            quota: Quota::default(),
            subnet_prefix: 24,
        }) {
            Ok(tenant) => tenant.id,
            // Another controller made it meanwhile.
            Err(StoreError::Conflict(_)) => store
                .tenants()?
                .into_iter()
                .find(|t| t.name == project_name)
                .map(|t| t.id)
                .ok_or_else(|| StoreError::not_found("tenant", project_name))?,
            Err(e) => return Err(e),
        },
    };
    let hash =
        |pw: &str| password::hash(pw, iterations).map_err(|e| StoreError::Invalid(e.to_string()));
    let user = match store.user_by_name(admin_name) {
        Ok(user) => {
            if !password::verify(admin_password, &user.password_hash) {
                let change = UserChange {
                    password_hash: Some(hash(admin_password)?),
                };
                store.update_user(user.id, user.version, change)?;
            }
            user.id
        }
        Err(StoreError::NotFound { .. }) => {
            store
                .create_user(NewUser {
                    name: admin_name.to_string(),
                    password_hash: hash(admin_password)?,
                })?
                .id
        }
        Err(e) => return Err(e),
    };
    store.grant_role(user, project, Role::Admin)?;
    Ok(Bootstrapped { user, project })
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::SqliteStore;

    #[test]
    fn bootstrap_is_idempotent_and_resets_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("db")).unwrap();
        let first = bootstrap_with(&store, "admin", "pw1", "admin", 10).unwrap();
        let again = bootstrap_with(&store, "admin", "pw1", "admin", 10).unwrap();
        assert_eq!(first, again);
        bootstrap_with(&store, "admin", "pw2", "admin", 10).unwrap();
        let user = store.user(first.user).unwrap();
        assert!(password::verify("pw2", &user.password_hash));
        let roles = store.roles_of_user(first.user).unwrap();
        assert_eq!(roles.len(), 1);
        assert_eq!(roles[0].role, Role::Admin);
    }
}
