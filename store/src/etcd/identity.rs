//! Tenants (and their usage), users and role assignments, and the token revocation list over
//! etcd: [`IdentityStore`] for [`EtcdStore`].

use std::time::SystemTime;

use etcd_client::DeleteOptions;
use uuid::Uuid;

use super::keys::suffix;
use super::records::*;
use super::{EtcdStore, Tx, all, decode_all, duplicate};
use crate::access::check_description;
use crate::common::{check_name, check_token_id, check_version, millis, now};
use crate::net::{MAX_SUBNET_PREFIX, MIN_SUBNET_PREFIX};
use crate::*;

impl IdentityStore for EtcdStore {
    // --- tenants ---
    fn create_described_tenant(&self, new: NewTenant, description: String) -> Result<Tenant> {
        check_name("tenant", &new.name)?;
        check_description("project", &description)?;
        if !(MIN_SUBNET_PREFIX..=MAX_SUBNET_PREFIX).contains(&new.subnet_prefix) {
            return Err(StoreError::Invalid(format!(
                "subnet prefix must be {MIN_SUBNET_PREFIX} to {MAX_SUBNET_PREFIX}"
            )));
        }
        let rec = TenantRec {
            id: Uuid::new_v4(),
            name: new.name,
            quota: new.quota.into(),
            subnet_prefix: new.subnet_prefix,
            created_ms: millis(now()),
            version: 1,
            description,
        };
        self.atomically("creating a tenant", |tx| {
            let keys = tx.keys();
            let name_key = keys.name("tenant", &rec.name);
            if tx.get(&name_key)?.is_some() {
                return Err(duplicate("tenant", &rec.name));
            }
            tx.put_text(&name_key, &rec.id.to_string());
            tx.put(&keys.tenant(rec.id), &rec)?;
            tx.put(&keys.net(rec.id), &NetRec::default())?;
            Ok(())
        })?;
        Ok(rec.model())
    }

    fn tenant(&self, id: Uuid) -> Result<Tenant> {
        self.read(|tx| tenant_in(tx, id)).map(|t| t.model())
    }

    fn tenants(&self) -> Result<Vec<Tenant>> {
        let mut all: Vec<Tenant> = all::<TenantRec>(self, &self.keys.tenants())?
            .iter()
            .map(TenantRec::model)
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    fn update_tenant(&self, id: Uuid, expected: u64, change: TenantChange) -> Result<Tenant> {
        self.atomically("updating a tenant", |tx| {
            let mut t = tenant_in(tx, id)?;
            check_version("tenant", id, t.version, expected)?;
            let keys = tx.keys();
            if let Some(name) = &change.name {
                check_name("tenant", name)?;
                if *name != t.name {
                    let new_key = keys.name("tenant", name);
                    if tx.get(&new_key)?.is_some() {
                        return Err(duplicate("tenant", name));
                    }
                    tx.delete(&keys.name("tenant", &t.name));
                    tx.put_text(&new_key, &id.to_string());
                    t.name = name.clone();
                }
            }
            if let Some(quota) = change.quota {
                t.quota = quota.into();
            }
            if let Some(description) = &change.description {
                check_description("project", description)?;
                t.description = description.clone();
            }
            t.version += 1;
            tx.put(&keys.tenant(id), &t)?;
            Ok(t.model())
        })
    }

    fn delete_tenant(&self, id: Uuid) -> Result<()> {
        // Its application credentials go first, a batch per transaction (one transaction could
        // not hold them all), once what would refuse the deletion has been read.
        self.read(|tx| {
            tenant_in(tx, id)?;
            let keys = tx.keys();
            let net: NetRec = tx.get_json(&keys.net(id))?.unwrap_or_default();
            if net.usage.instances > 0
                || !net.subnets.is_empty()
                || tx.any_under(&keys.full_subnets(id))?
            {
                return Err(StoreError::Conflict(format!(
                    "tenant {id} still has instances, subnets or CNCIs"
                )));
            }
            if tx.any_under(&keys.tenant_volumes(id))? {
                return Err(StoreError::Conflict(format!(
                    "tenant {id} still has volumes"
                )));
            }
            Ok(())
        })?;
        super::app_creds::drain_tenant(self, id)?;
        self.atomically("deleting a tenant", |tx| {
            let t = tenant_in(tx, id)?;
            let keys = tx.keys();
            let net: NetRec = tx.get_json(&keys.net(id))?.unwrap_or_default();
            if net.usage.instances > 0
                || !net.subnets.is_empty()
                || tx.any_under(&keys.full_subnets(id))?
            {
                return Err(StoreError::Conflict(format!(
                    "tenant {id} still has instances, subnets or CNCIs"
                )));
            }
            if tx.any_under(&keys.tenant_volumes(id))? {
                return Err(StoreError::Conflict(format!(
                    "tenant {id} still has volumes"
                )));
            }
            // Its images go with it, and their members; other tenants' workloads of them
            // (shared or community images) go too, unless an instance uses one. Its own
            // workloads go, and its memberships of other tenants' images.
            let images: Vec<Uuid> = decode_all::<ImageRec>(&tx.range(&keys.images())?)?
                .into_iter()
                .filter(|i| i.owner == Some(id))
                .map(|i| i.id)
                .collect();
            for w in decode_all::<WorkloadRec>(&tx.range(&keys.workloads())?)? {
                let own = w.owner == Some(id);
                if !own && !images.contains(&w.image) {
                    continue;
                }
                if !own && tx.any_under(&keys.references("workload", w.id))? {
                    return Err(StoreError::Conflict(format!(
                        "tenant {id} has images that other tenants' instances use"
                    )));
                }
                tx.delete(&keys.workload(w.id));
                tx.delete(&keys.reference("flavor", w.flavor, w.id));
                tx.delete(&keys.reference("image", w.image, w.id));
                tx.delete_prefix(&keys.references("workload", w.id));
            }
            for image in images {
                tx.delete(&keys.image(image));
                tx.delete_prefix(&keys.image_members(image));
            }
            for m in super::image_members::memberships_in(tx, id)? {
                tx.delete(&keys.image_member(m.image, id));
            }
            let by_tenant = keys.roles_in_tenant(id);
            for kv in tx.range(&by_tenant)? {
                let (user, role) = parse_role_key(&kv.key, &by_tenant)?;
                tx.delete(&keys.role_by_user(user, id, role_text(role)));
            }
            tx.delete_prefix(&by_tenant);
            super::app_creds::forget_tenant(tx, id)?;
            super::networking::forget_tenant(tx, id)?;
            // Its entries on private flavors' access lists.
            super::flavors::forget_tenant(tx, id)?;
            // Its server groups (it has no instances: checked above, so they have no members).
            super::group_recs::forget_tenant(tx, id)?;
            // Its own volume quota (it has no volumes: checked above).
            tx.delete(&keys.volume_quota(id));
            tx.delete(&keys.name("tenant", &t.name));
            tx.delete(&keys.net(id));
            tx.delete(&keys.tenant(id));
            Ok(())
        })
    }

    fn usage(&self, id: Uuid) -> Result<Usage> {
        self.read(|tx| {
            tenant_in(tx, id)?;
            Ok(net_in(tx, id)?.usage.into())
        })
    }

    // --- users and roles ---
    fn create_user_with(&self, new: NewUser, profile: UserProfile) -> Result<User> {
        check_name("user", &new.name)?;
        if new.password_hash.is_empty() {
            return Err(StoreError::Invalid("empty password hash".into()));
        }
        let rec = UserRec {
            id: Uuid::new_v4(),
            name: new.name,
            password_hash: new.password_hash,
            created_ms: millis(now()),
            version: 1,
            token_generation: 0,
            enabled: profile.enabled,
            default_project: profile.default_project,
        };
        self.atomically("creating a user", |tx| {
            if let Some(project) = rec.default_project {
                tenant_in(tx, project)?;
            }
            let keys = tx.keys();
            let name_key = keys.name("user", &rec.name);
            if tx.get(&name_key)?.is_some() {
                return Err(duplicate("user", &rec.name));
            }
            tx.put_text(&name_key, &rec.id.to_string());
            tx.put(&keys.user(rec.id), &rec)
        })?;
        Ok(rec.model())
    }

    fn user(&self, id: Uuid) -> Result<User> {
        self.read(|tx| user_in(tx, id)).map(|u| u.model())
    }

    fn user_by_name(&self, name: &str) -> Result<User> {
        self.read(|tx| {
            let key = tx.keys().name("user", name);
            let id = match tx.get(&key)? {
                Some(kv) => Uuid::parse_str(kv.text()?)
                    .map_err(|e| StoreError::Backend(format!("bad user id at {key}: {e}")))?,
                None => return Err(StoreError::not_found("user", name)),
            };
            // A user deleted between the two reads is not found either.
            user_in(tx, id).map_err(|_| StoreError::not_found("user", name))
        })
        .map(|u| u.model())
    }

    fn users(&self) -> Result<Vec<User>> {
        let mut all: Vec<User> = all::<UserRec>(self, &self.keys.users())?
            .iter()
            .map(UserRec::model)
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    fn update_user(&self, id: Uuid, expected: u64, change: UserChange) -> Result<User> {
        self.atomically("updating a user", |tx| {
            let mut u = user_in(tx, id)?;
            check_version("user", id, u.version, expected)?;
            if let Some(hash) = &change.password_hash {
                if hash.is_empty() {
                    return Err(StoreError::Invalid("empty password hash".into()));
                }
                u.password_hash = hash.clone();
                u.token_generation += 1;
            }
            if let Some(name) = &change.name {
                check_name("user", name)?;
                if *name != u.name {
                    let keys = tx.keys();
                    let new_key = keys.name("user", name);
                    if tx.get(&new_key)?.is_some() {
                        return Err(duplicate("user", name));
                    }
                    tx.delete(&keys.name("user", &u.name));
                    tx.put_text(&new_key, &id.to_string());
                    u.name = name.clone();
                }
            }
            if let Some(enabled) = change.enabled {
                if u.enabled && !enabled {
                    u.token_generation += 1;
                }
                u.enabled = enabled;
            }
            if let Some(project) = change.default_project {
                if let Some(project) = project {
                    tenant_in(tx, project)?;
                }
                u.default_project = project;
            }
            u.version += 1;
            let key = tx.keys().user(id);
            tx.put(&key, &u)?;
            Ok(u.model())
        })
    }

    fn delete_user(&self, id: Uuid) -> Result<()> {
        self.read(|tx| user_in(tx, id).map(|_| ()))?;
        // Its application credentials go first, a batch per transaction.
        super::app_creds::drain_user(self, id)?;
        self.atomically("deleting a user", |tx| {
            let u = user_in(tx, id)?;
            let keys = tx.keys();
            let by_user = keys.roles_of_user(id);
            for kv in tx.range(&by_user)? {
                let (tenant, role) = parse_role_key(&kv.key, &by_user)?;
                tx.delete(&keys.role_by_tenant(tenant, id, role_text(role)));
            }
            tx.delete_prefix(&by_user);
            tx.delete_prefix(&keys.keypairs(id));
            super::app_creds::forget_user(tx, id)?;
            tx.delete(&keys.name("user", &u.name));
            tx.delete(&keys.user(id));
            Ok(())
        })
    }

    fn grant_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()> {
        self.atomically("granting a role", |tx| {
            user_in(tx, user)?;
            tenant_in(tx, tenant)?;
            let keys = tx.keys();
            tx.put_text(&keys.role_by_user(user, tenant, role_text(role)), "");
            tx.put_text(&keys.role_by_tenant(tenant, user, role_text(role)), "");
            Ok(())
        })
    }

    fn revoke_role(&self, user: Uuid, tenant: Uuid, role: Role) -> Result<()> {
        self.atomically("revoking a role", |tx| {
            let keys = tx.keys();
            let by_user = keys.role_by_user(user, tenant, role_text(role));
            if tx.get(&by_user)?.is_none() {
                return Err(StoreError::not_found(
                    "role assignment",
                    format!("{user}/{tenant}"),
                ));
            }
            tx.delete(&by_user);
            tx.delete(&keys.role_by_tenant(tenant, user, role_text(role)));
            // The user's tokens end with the role.
            if let Some(mut u) = tx.get_json::<UserRec>(&keys.user(user))? {
                u.token_generation += 1;
                tx.put(&keys.user(user), &u)?;
            }
            Ok(())
        })
    }

    fn roles_of_user(&self, user: Uuid) -> Result<Vec<RoleAssignment>> {
        let prefix = self.keys.roles_of_user(user);
        let mut out = self.read(|tx| {
            tx.range(&prefix)?
                .iter()
                .map(|kv| {
                    let (tenant, role) = parse_role_key(&kv.key, &prefix)?;
                    Ok(RoleAssignment { user, tenant, role })
                })
                .collect::<Result<Vec<_>>>()
        })?;
        out.sort();
        Ok(out)
    }

    fn roles_in_tenant(&self, tenant: Uuid) -> Result<Vec<RoleAssignment>> {
        let prefix = self.keys.roles_in_tenant(tenant);
        let mut out = self.read(|tx| {
            tx.range(&prefix)?
                .iter()
                .map(|kv| {
                    let (user, role) = parse_role_key(&kv.key, &prefix)?;
                    Ok(RoleAssignment { user, tenant, role })
                })
                .collect::<Result<Vec<_>>>()
        })?;
        out.sort();
        Ok(out)
    }

    // --- application credentials ---
    fn create_app_credential(&self, new: NewAppCredential, limit: u32) -> Result<AppCredential> {
        super::app_creds::create(self, new, limit)
    }

    fn app_credential(&self, id: Uuid) -> Result<AppCredential> {
        super::app_creds::get(self, id)
    }

    fn app_credentials(&self, user: Uuid) -> Result<Vec<AppCredential>> {
        super::app_creds::list(self, user)
    }

    fn delete_app_credential(&self, user: Uuid, id: Uuid) -> Result<()> {
        super::app_creds::delete(self, user, id)
    }

    // --- token revocation ---
    fn revoke_token(&self, token: &TokenRef) -> Result<()> {
        check_token_id(&token.id)?;
        let now_ms = key_millis(now());
        let expires = key_millis(token.expires);
        self.atomically("revoking a token", |tx| {
            let keys = tx.keys();
            // Entries expired before now go; the new one (expiring later) is outside that range.
            tx.delete_range(
                &keys.revoked_tokens(),
                keys.revoked_before(now_ms).into_bytes(),
            );
            if expires > now_ms {
                tx.put_text(&keys.revoked_token(expires, &token.id), "");
            }
            Ok(())
        })
    }

    fn token_state(&self, user: Uuid, token: &TokenRef) -> Result<TokenState> {
        check_token_id(&token.id)?;
        let wanted = [
            self.keys.user(user),
            self.keys
                .revoked_token(key_millis(token.expires), &token.id),
        ];
        let mut found = self.get_many(&wanted)?.into_iter();
        let user_rec: UserRec = found
            .next()
            .flatten()
            .ok_or_else(|| StoreError::not_found("user", user))?
            .decode()?;
        Ok(TokenState {
            generation: user_rec.token_generation,
            revoked: found.next().flatten().is_some(),
        })
    }

    fn prune_revoked_tokens(&self, now: SystemTime) -> Result<u64> {
        let start = self.keys.revoked_tokens();
        let end = self.keys.revoked_before(key_millis(now));
        let mut kv = self.client.kv_client();
        let options = DeleteOptions::new().with_range(end.into_bytes());
        let resp = self.call(async move { kv.delete(start, Some(options)).await })?;
        Ok(u64::try_from(resp.deleted()).unwrap_or(0))
    }
}

/// Unix milliseconds as they order revocation keys.
fn key_millis(t: SystemTime) -> u64 {
    u64::try_from(millis(t)).unwrap_or(0)
}

/// The tenant record, read in `tx`.
pub(super) fn tenant_in(tx: &mut Tx<'_>, id: Uuid) -> Result<TenantRec> {
    let key = tx.keys().tenant(id);
    tx.get_json(&key)?
        .ok_or_else(|| StoreError::not_found("tenant", id))
}

pub(super) fn user_in(tx: &mut Tx<'_>, id: Uuid) -> Result<UserRec> {
    let key = tx.keys().user(id);
    tx.get_json(&key)?
        .ok_or_else(|| StoreError::not_found("user", id))
}

/// The other identifier and the role of a role key under `prefix` (`.../<id>/<role>`).
fn parse_role_key(key: &str, prefix: &str) -> Result<(Uuid, Role)> {
    let bad = || StoreError::Backend(format!("bad role key {key}"));
    let rest = suffix(key, prefix).ok_or_else(bad)?;
    let (id, role) = rest.split_once('/').ok_or_else(bad)?;
    Ok((
        Uuid::parse_str(id).map_err(|_| bad())?,
        role_from(role).ok_or_else(bad)?,
    ))
}

/// The tenant's network record, read in `tx`.
pub(super) fn net_in(tx: &mut Tx<'_>, tenant: Uuid) -> Result<NetRec> {
    let key = tx.keys().net(tenant);
    Ok(tx.get_json(&key)?.unwrap_or_default())
}
