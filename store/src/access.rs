//! Who may do what: [`Role`]s (Keystone's default roles and what they imply), role assignments,
//! and application credentials (a user's delegated secrets, scoped to one project and a subset of
//! its roles there).

use std::time::SystemTime;

use uuid::Uuid;

use crate::{QuotaKind, Result, StoreError};

/// The longest description of a project or an application credential, in bytes.
pub const MAX_DESCRIPTION: usize = 1024;

/// What a user may do in one tenant: Keystone's default roles. Each implies the ones after it
/// (`admin` → `manager` → `member` → `reader`), as Keystone's bootstrap makes them imply each
/// other; [`Role::effective`] is what a set of assigned roles comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Everything, including other tenants' objects and the cluster's nodes.
    Admin,
    /// Project-level management: for now, what a member may do (see `docs/api.md`).
    Manager,
    /// The tenant's own objects: read and change them.
    Member,
    /// The tenant's own objects, read only.
    Reader,
}

impl Role {
    /// Every role, the strongest first.
    pub const ALL: [Role; 4] = [Role::Admin, Role::Manager, Role::Member, Role::Reader];

    /// Its name (Keystone's: `admin`, `manager`, `member`, `reader`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Manager => "manager",
            Role::Member => "member",
            Role::Reader => "reader",
        }
    }

    /// The role of a name (exact, lower case).
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// This role and every role it implies.
    pub fn implied(self) -> &'static [Role] {
        let at = Role::ALL.iter().position(|r| *r == self).unwrap_or(0);
        &Role::ALL[at..]
    }

    /// What `assigned` roles come to with the roles they imply, strongest first, each once.
    pub fn effective(assigned: &[Role]) -> Vec<Role> {
        let mut all: Vec<Role> = assigned.iter().flat_map(|r| r.implied()).copied().collect();
        all.sort();
        all.dedup();
        all
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One role of one user in one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RoleAssignment {
    /// The user.
    pub user: Uuid,
    /// The tenant.
    pub tenant: Uuid,
    /// The role.
    pub role: Role,
}

/// An application credential (Keystone's): a secret a user makes so that an application logs
/// in as that user, in one project, with some of the user's roles there. It goes with its user
/// and with its project; the secret is kept only as a hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppCredential {
    /// Its identifier.
    pub id: Uuid,
    /// The user it logs in as.
    pub user: Uuid,
    /// The project its tokens are scoped to.
    pub project: Uuid,
    /// Its name, unique among the user's credentials.
    pub name: String,
    /// What it is for (empty if none).
    pub description: String,
    /// The secret's PHC hash.
    pub secret_hash: String,
    /// The roles its tokens carry (at least one, each once, strongest first); a token gets
    /// those the user still has in the project.
    pub roles: Vec<Role>,
    /// When it stops working (never, if none).
    pub expires: Option<SystemTime>,
    /// Whether its tokens may make and delete application credentials (Keystone's
    /// `unrestricted`).
    pub unrestricted: bool,
    /// When it was made.
    pub created: SystemTime,
}

/// Input of [`IdentityStore::create_app_credential`](crate::IdentityStore::create_app_credential).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAppCredential {
    /// The user (who must exist).
    pub user: Uuid,
    /// The project (which must exist).
    pub project: Uuid,
    /// A name the user has no credential of: 1 to 255 bytes, not blank.
    pub name: String,
    /// At most [`MAX_DESCRIPTION`] bytes.
    pub description: String,
    /// The secret's PHC hash (not empty).
    pub secret_hash: String,
    /// At least one role (duplicates are dropped).
    pub roles: Vec<Role>,
    /// When it stops working.
    pub expires: Option<SystemTime>,
    /// Whether its tokens may make and delete application credentials.
    pub unrestricted: bool,
}

/// `Invalid` for a description over [`MAX_DESCRIPTION`] bytes.
pub(crate) fn check_description(what: &str, text: &str) -> Result<()> {
    if text.len() > MAX_DESCRIPTION {
        return Err(StoreError::Invalid(format!(
            "a {what}'s description is at most {MAX_DESCRIPTION} bytes"
        )));
    }
    Ok(())
}

/// Checks a new credential and makes its record: `Invalid` for a bad name, description, an
/// empty hash or no role.
pub(crate) fn new_app_credential(
    new: NewAppCredential,
    created: SystemTime,
) -> Result<AppCredential> {
    crate::common::check_name("application credential", &new.name)?;
    check_description("application credential", &new.description)?;
    if new.secret_hash.is_empty() {
        return Err(StoreError::Invalid("empty secret hash".into()));
    }
    let mut roles = new.roles;
    roles.sort();
    roles.dedup();
    if roles.is_empty() {
        return Err(StoreError::Invalid(
            "an application credential needs at least one role".into(),
        ));
    }
    Ok(AppCredential {
        id: Uuid::new_v4(),
        user: new.user,
        project: new.project,
        name: new.name,
        description: new.description,
        secret_hash: new.secret_hash,
        roles,
        expires: new.expires,
        unrestricted: new.unrestricted,
        created,
    })
}

/// `QuotaExceeded` when a user with `count` credentials may have no more than `limit`.
pub(crate) fn check_app_credential_limit(count: usize, limit: u32) -> Result<()> {
    if u64::try_from(count).unwrap_or(u64::MAX) >= u64::from(limit) {
        return Err(StoreError::QuotaExceeded {
            what: QuotaKind::AppCredentials,
            limit: u64::from(limit),
        });
    }
    Ok(())
}

/// Role names as one text (`admin,member`), as both stores keep a credential's roles.
pub(crate) fn roles_text(roles: &[Role]) -> String {
    roles
        .iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The roles of [`roles_text`]; `None` if a name is unknown.
pub(crate) fn roles_from_text(text: &str) -> Option<Vec<Role>> {
    text.split(',')
        .filter(|s| !s.is_empty())
        .map(Role::from_name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_imply_the_weaker_ones() {
        assert_eq!(Role::Admin.implied(), &Role::ALL);
        assert_eq!(Role::Member.implied(), &[Role::Member, Role::Reader]);
        assert_eq!(Role::Reader.implied(), &[Role::Reader]);
        assert_eq!(
            Role::effective(&[Role::Reader, Role::Manager]),
            [Role::Manager, Role::Member, Role::Reader]
        );
        assert!(Role::effective(&[]).is_empty());
        for role in Role::ALL {
            assert_eq!(Role::from_name(role.as_str()), Some(role));
        }
        assert_eq!(Role::from_name("Admin"), None);
        assert_eq!(
            roles_from_text(&roles_text(&[Role::Admin, Role::Reader])),
            Some(vec![Role::Admin, Role::Reader])
        );
        assert_eq!(roles_from_text("admin,root"), None);
    }
}
