//! Making a fresh controller usable: the admin project, the admin user with the configured
//! password, and the admin role between them. Idempotent: run at every start, by every
//! controller sharing a store.
//!
//! The configured password is the admin's first password only: an admin user that exists keeps
//! its password. Until issue 21 an existing admin whose password did not match got the
//! configured one at every start, which made the password file the truth (edit it and restart to
//! recover a lost password) but also undid, at the next restart, a password changed through the
//! API (`PATCH /cumulo/v1/users/{id}`), and let controllers with different password files
//! overwrite each other's. A lost admin password is now reset through the API with the admin
//! client certificate (see docs/api.md).

use uuid::Uuid;

use super::password;
use store::{IdentityStore, NewTenant, NewUser, Quota, Role, StoreError};

/// What [`bootstrap`] made or found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bootstrapped {
    /// The admin user.
    pub user: Uuid,
    /// The admin project.
    pub project: Uuid,
    /// Whether the admin user was made now, with the configured password (else it existed and
    /// its password was left as it is).
    pub created: bool,
}

/// Makes (or finds) the admin user `admin_name`, with `admin_password` if it is made now, the
/// project `project_name` (/24 subnets, and no quota: the `--default-quota` is for the tenants
/// an admin makes, not for the operator's own project, which runs what the operator chooses)
/// and gives the user the admin role there. An existing admin user's password is left alone.
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
    let (user, created) = match store.user_by_name(admin_name) {
        Ok(user) => (user.id, false),
        Err(StoreError::NotFound { .. }) => {
            let new = NewUser {
                name: admin_name.to_string(),
                password_hash: hash(admin_password)?,
            };
            match store.create_user(new) {
                Ok(user) => (user.id, true),
                // Another controller made it meanwhile (with its own password file's).
                Err(StoreError::Conflict(_)) => (store.user_by_name(admin_name)?.id, false),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    store.grant_role(user, project, Role::Admin)?;
    Ok(Bootstrapped {
        user,
        project,
        created,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::SqliteStore;

    use store::UserChange;

    #[test]
    fn bootstrap_is_idempotent_and_keeps_a_changed_password() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("db")).unwrap();
        let first = bootstrap_with(&store, "admin", "pw1", "admin", 10).unwrap();
        assert!(first.created);
        let again = bootstrap_with(&store, "admin", "pw1", "admin", 10).unwrap();
        assert_eq!((again.user, again.project), (first.user, first.project));
        assert!(!again.created);
        // The password changed as the API changes it survives a restart, whatever the
        // configured password is.
        let user = store.user(first.user).unwrap();
        let change = UserChange {
            password_hash: Some(password::hash("changed", 10).unwrap()),
            ..UserChange::default()
        };
        store.update_user(user.id, user.version, change).unwrap();
        for configured in ["pw1", "pw2"] {
            bootstrap_with(&store, "admin", configured, "admin", 10).unwrap();
            let user = store.user(first.user).unwrap();
            assert!(password::verify("changed", &user.password_hash));
            assert!(!password::verify(configured, &user.password_hash));
        }
        let roles = store.roles_of_user(first.user).unwrap();
        assert_eq!(roles.len(), 1);
        assert_eq!(roles[0].role, Role::Admin);
    }
}
