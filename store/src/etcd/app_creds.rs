//! Users' application credentials over etcd, for [`IdentityStore`](crate::IdentityStore) on
//! [`EtcdStore`]: one record per credential at `appcred/<user>/<id>`, with two index keys holding
//! its user, `appcredid/<id>` (to find it by id alone) and `appcredtenant/<tenant>/<id>` (so that
//! it goes with its project). A creation reads the user's range, so parallel creations for one
//! user conflict and retry, and never exceed the limit.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::keys::suffix;
use super::{EtcdStore, Tx, decode_all, duplicate};
use crate::access::{check_app_credential_limit, new_app_credential, roles_from_text, roles_text};
use crate::common::{from_millis, millis, now};
use crate::*;

/// An application credential.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct AppCredRec {
    id: Uuid,
    user: Uuid,
    project: Uuid,
    name: String,
    description: String,
    secret_hash: String,
    /// Role names, comma-separated.
    roles: String,
    expires_ms: Option<i64>,
    unrestricted: bool,
    created_ms: i64,
}

impl AppCredRec {
    fn of(cred: &AppCredential) -> AppCredRec {
        AppCredRec {
            id: cred.id,
            user: cred.user,
            project: cred.project,
            name: cred.name.clone(),
            description: cred.description.clone(),
            secret_hash: cred.secret_hash.clone(),
            roles: roles_text(&cred.roles),
            expires_ms: cred.expires.map(millis),
            unrestricted: cred.unrestricted,
            created_ms: millis(cred.created),
        }
    }

    fn model(&self) -> Result<AppCredential> {
        Ok(AppCredential {
            id: self.id,
            user: self.user,
            project: self.project,
            name: self.name.clone(),
            description: self.description.clone(),
            secret_hash: self.secret_hash.clone(),
            roles: roles_from_text(&self.roles).ok_or_else(|| {
                StoreError::Backend(format!(
                    "application credential {}: unknown role in {:?}",
                    self.id, self.roles
                ))
            })?,
            expires: self.expires_ms.map(from_millis),
            unrestricted: self.unrestricted,
            created: from_millis(self.created_ms),
        })
    }
}

pub(super) fn create(
    store: &EtcdStore,
    new: NewAppCredential,
    limit: u32,
) -> Result<AppCredential> {
    let cred = new_app_credential(new, now())?;
    let rec = AppCredRec::of(&cred);
    store.atomically("creating an application credential", |tx| {
        let keys = tx.keys();
        if tx.get(&keys.user(rec.user))?.is_none() {
            return Err(StoreError::not_found("user", rec.user));
        }
        if tx.get(&keys.tenant(rec.project))?.is_none() {
            return Err(StoreError::not_found("tenant", rec.project));
        }
        let existing: Vec<AppCredRec> = decode_all(&tx.range(&keys.app_creds(rec.user))?)?;
        if existing.iter().any(|c| c.name == rec.name) {
            return Err(duplicate("application credential", &rec.name));
        }
        check_app_credential_limit(existing.len(), limit)?;
        tx.put(&keys.app_cred(rec.user, rec.id), &rec)?;
        tx.put_text(&keys.app_cred_user(rec.id), &rec.user.to_string());
        tx.put_text(
            &keys.tenant_app_cred(rec.project, rec.id),
            &rec.user.to_string(),
        );
        Ok(())
    })?;
    Ok(cred)
}

/// The user of the credential `id`, read in `tx`.
fn user_of(tx: &mut Tx<'_>, id: Uuid) -> Result<Uuid> {
    let key = tx.keys().app_cred_user(id);
    match tx.get(&key)? {
        Some(kv) => Uuid::parse_str(kv.text()?)
            .map_err(|e| StoreError::Backend(format!("bad user id at {key}: {e}"))),
        None => Err(StoreError::not_found("application credential", id)),
    }
}

pub(super) fn get(store: &EtcdStore, id: Uuid) -> Result<AppCredential> {
    store
        .read(|tx| {
            let user = user_of(tx, id)?;
            let key = tx.keys().app_cred(user, id);
            tx.get_json::<AppCredRec>(&key)?
                .ok_or_else(|| StoreError::not_found("application credential", id))
        })?
        .model()
}

pub(super) fn list(store: &EtcdStore, user: Uuid) -> Result<Vec<AppCredential>> {
    let recs: Vec<AppCredRec> =
        store.read(|tx| decode_all(&tx.range(&tx.keys().app_creds(user))?))?;
    let mut all = recs
        .iter()
        .map(AppCredRec::model)
        .collect::<Result<Vec<_>>>()?;
    all.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(all)
}

pub(super) fn delete(store: &EtcdStore, user: Uuid, id: Uuid) -> Result<()> {
    store.atomically("deleting an application credential", |tx| {
        let key = tx.keys().app_cred(user, id);
        let Some(rec) = tx.get_json::<AppCredRec>(&key)? else {
            return Err(StoreError::not_found("application credential", id));
        };
        forget(tx, &rec);
        Ok(())
    })
}

/// Deletes a credential's record and index keys in `tx`.
fn forget(tx: &mut Tx<'_>, rec: &AppCredRec) {
    let keys = tx.keys();
    tx.delete(&keys.app_cred(rec.user, rec.id));
    tx.delete(&keys.app_cred_user(rec.id));
    tx.delete(&keys.tenant_app_cred(rec.project, rec.id));
}

/// Credentials deleted per transaction by [`drain_user`] and [`drain_tenant`] (three keys each:
/// well under the 128 operations one etcd transaction holds).
const DRAIN_BATCH: usize = 32;

/// Deletes `user`'s credentials a batch per transaction, before the user goes (its own
/// transaction could not hold them all: a member may make a hundred).
pub(super) fn drain_user(store: &EtcdStore, user: Uuid) -> Result<()> {
    loop {
        let more = store.atomically("deleting a user's application credentials", |tx| {
            let prefix = tx.keys().app_creds(user);
            let recs = decode_all::<AppCredRec>(&tx.range(&prefix)?)?;
            for rec in recs.iter().take(DRAIN_BATCH) {
                forget(tx, rec);
            }
            Ok(recs.len() > DRAIN_BATCH)
        })?;
        if !more {
            return Ok(());
        }
    }
}

/// Deletes the credentials made in `tenant`, a batch per transaction, before the tenant goes.
pub(super) fn drain_tenant(store: &EtcdStore, tenant: Uuid) -> Result<()> {
    loop {
        let more = store.atomically("deleting a project's application credentials", |tx| {
            let prefix = tx.keys().tenant_app_creds(tenant);
            let all = tx.range(&prefix)?;
            for kv in all.iter().take(DRAIN_BATCH) {
                let bad =
                    || StoreError::Backend(format!("bad application credential key {}", kv.key));
                let id = suffix(&kv.key, &prefix)
                    .and_then(|id| Uuid::parse_str(id).ok())
                    .ok_or_else(bad)?;
                let user = Uuid::parse_str(kv.text()?).map_err(|_| bad())?;
                let keys = tx.keys();
                tx.delete(&keys.app_cred(user, id));
                tx.delete(&keys.app_cred_user(id));
                tx.delete(&kv.key);
            }
            Ok(all.len() > DRAIN_BATCH)
        })?;
        if !more {
            return Ok(());
        }
    }
}

/// Deletes every credential of `user` in `tx` (the user is being deleted).
pub(super) fn forget_user(tx: &mut Tx<'_>, user: Uuid) -> Result<()> {
    let prefix = tx.keys().app_creds(user);
    for rec in decode_all::<AppCredRec>(&tx.range(&prefix)?)? {
        forget(tx, &rec);
    }
    Ok(())
}

/// Deletes every credential in `tenant` in `tx` (the tenant is being deleted).
pub(super) fn forget_tenant(tx: &mut Tx<'_>, tenant: Uuid) -> Result<()> {
    let prefix = tx.keys().tenant_app_creds(tenant);
    for kv in tx.range(&prefix)? {
        let bad = || StoreError::Backend(format!("bad application credential key {}", kv.key));
        let id = suffix(&kv.key, &prefix)
            .and_then(|id| Uuid::parse_str(id).ok())
            .ok_or_else(bad)?;
        let user = Uuid::parse_str(kv.text()?).map_err(|_| bad())?;
        let keys = tx.keys();
        tx.delete(&keys.app_cred(user, id));
        tx.delete(&keys.app_cred_user(id));
    }
    tx.delete_prefix(&prefix);
    Ok(())
}
