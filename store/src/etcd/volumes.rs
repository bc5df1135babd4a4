//! Tenants' volumes over etcd: [`VolumeStore`] for [`EtcdStore`], one record per volume at
//! `volume/<tenant>/<id>` and its tenant at `volid/<id>` (to find it by id alone, in
//! [`Scope::All`]), and a tenant's own volume quota at `volquota/<tenant>` (absent: the caller's
//! defaults). A creation or a growth reads the tenant's `volume/<tenant>/` range and its
//! `volquota/` key, so parallel ones for one tenant, or a quota set meanwhile, conflict and
//! retry, and never exceed its limits; setting a quota reads the same range (it may not be below
//! the usage). Deleting a tenant reads the same range, so it never leaves volumes behind, and
//! deletes its quota (`identity.rs`).
//!
//! The records are here rather than in `records.rs`: only this file reads them. They are the
//! schema as `records.rs` says (a field may be added with `#[serde(default)]`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::catalog::image_in;
use super::identity::tenant_in;
use super::{EtcdStore, Tx, decode_all};
use crate::common::{from_millis, millis, now};
use crate::volume::usage_of;
use crate::*;

/// A volume, at `volume/<tenant>/<id>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct VolumeRec {
    id: Uuid,
    owner: Uuid,
    name: String,
    description: String,
    size_gb: u32,
    status: VolumeStatus,
    image: Option<Uuid>,
    node: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attachment: Option<AttachmentRec>,
    bootable: bool,
    created_ms: i64,
    updated_ms: i64,
}

/// A volume's attachment.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AttachmentRec {
    id: Uuid,
    instance: Uuid,
    device: String,
    attached_ms: i64,
    /// Added after the first records: absent is false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    delete_on_termination: bool,
}

impl VolumeRec {
    fn of(v: &Volume) -> VolumeRec {
        VolumeRec {
            id: v.id,
            owner: v.owner,
            name: v.name.clone(),
            description: v.description.clone(),
            size_gb: v.size_gb,
            status: v.status,
            image: v.image,
            node: v.node,
            attachment: v.attachment.as_ref().map(|a| AttachmentRec {
                id: a.id,
                instance: a.instance,
                device: a.device.clone(),
                attached_ms: millis(a.attached),
                delete_on_termination: a.delete_on_termination,
            }),
            bootable: v.bootable,
            created_ms: millis(v.created),
            updated_ms: millis(v.updated),
        }
    }

    fn model(&self) -> Volume {
        Volume {
            id: self.id,
            owner: self.owner,
            name: self.name.clone(),
            description: self.description.clone(),
            size_gb: self.size_gb,
            status: self.status,
            image: self.image,
            node: self.node,
            attachment: self.attachment.as_ref().map(|a| VolumeAttachment {
                id: a.id,
                instance: a.instance,
                device: a.device.clone(),
                attached: from_millis(a.attached_ms),
                delete_on_termination: a.delete_on_termination,
            }),
            bootable: self.bootable,
            created: from_millis(self.created_ms),
            updated: from_millis(self.updated_ms),
        }
    }
}

/// A tenant's own volume quota, at `volquota/<tenant>` (`null`: unlimited).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct VolumeQuotaRec {
    volumes: Option<u32>,
    gigabytes: Option<u64>,
}

impl VolumeStore for EtcdStore {
    fn create_volume(&self, new: NewVolume, defaults: VolumeLimits) -> Result<Volume> {
        new.check()?;
        let volume = new.volume(Uuid::new_v4(), now());
        let rec = VolumeRec::of(&volume);
        self.atomically("creating a volume", |tx| {
            tenant_in(tx, volume.owner)?;
            if let Some(image) = volume.image {
                image_in(tx, Scope::Tenant(volume.owner), image)?;
            }
            let (count, gigabytes) = usage_in(tx, volume.owner)?;
            limits_in(tx, volume.owner, defaults)?.check_new(count, gigabytes, volume.size_gb)?;
            let keys = tx.keys();
            tx.put(&keys.volume(volume.owner, volume.id), &rec)?;
            tx.put_text(&keys.volume_owner(volume.id), &volume.owner.to_string());
            Ok(())
        })?;
        Ok(volume)
    }

    fn volume(&self, scope: Scope, id: Uuid) -> Result<Volume> {
        self.read(|tx| volume_in(tx, scope, id)).map(|v| v.model())
    }

    fn volumes(&self, scope: Scope) -> Result<Vec<Volume>> {
        let prefix = match scope {
            Scope::All => self.keys.volumes(),
            Scope::Tenant(t) => self.keys.tenant_volumes(t),
        };
        let recs: Vec<VolumeRec> = self.read(|tx| decode_all(&tx.range(&prefix)?))?;
        let mut all: Vec<Volume> = recs.iter().map(VolumeRec::model).collect();
        all.sort_by_key(|v| (v.created, v.id));
        Ok(all)
    }

    fn change_volume(
        &self,
        scope: Scope,
        id: Uuid,
        change: VolumeChange,
        defaults: VolumeLimits,
    ) -> Result<Volume> {
        self.atomically("changing a volume", |tx| {
            let old = volume_in(tx, scope, id)?.model();
            let new = old.changed(&change, now())?;
            if new.size_gb > old.size_gb {
                let (_, gigabytes) = usage_in(tx, old.owner)?;
                limits_in(tx, old.owner, defaults)?.check_growth(
                    gigabytes,
                    old.size_gb,
                    new.size_gb,
                )?;
            }
            let key = tx.keys().volume(old.owner, id);
            tx.put(&key, &VolumeRec::of(&new))?;
            Ok(new)
        })
    }

    fn delete_volume(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.atomically("deleting a volume", |tx| {
            let volume = volume_in(tx, scope, id)?.model();
            volume.check_detached()?;
            let keys = tx.keys();
            tx.delete(&keys.volume(volume.owner, id));
            tx.delete(&keys.volume_owner(id));
            Ok(())
        })
    }

    fn tenant_volume_usage(&self, tenant: Uuid) -> Result<(u32, u64)> {
        self.read(|tx| {
            tenant_in(tx, tenant)?;
            usage_in(tx, tenant)
        })
    }

    fn volume_quota(&self, tenant: Uuid, defaults: VolumeLimits) -> Result<VolumeLimits> {
        self.read(|tx| {
            tenant_in(tx, tenant)?;
            limits_in(tx, tenant, defaults)
        })
    }

    fn set_volume_quota(&self, tenant: Uuid, quota: VolumeLimits) -> Result<VolumeLimits> {
        quota.check_settable()?;
        let rec = VolumeQuotaRec {
            volumes: quota.volumes,
            gigabytes: quota.gigabytes,
        };
        self.atomically("setting a volume quota", |tx| {
            tenant_in(tx, tenant)?;
            let (count, gigabytes) = usage_in(tx, tenant)?;
            quota.check_covers(count, gigabytes)?;
            let key = tx.keys().volume_quota(tenant);
            tx.put(&key, &rec)
        })?;
        Ok(quota)
    }
}

/// The tenant's limits: its own quota if it has one, else `defaults` (the key is read, so the
/// commit requires it unchanged, or still absent).
fn limits_in(tx: &mut Tx<'_>, tenant: Uuid, defaults: VolumeLimits) -> Result<VolumeLimits> {
    let key = tx.keys().volume_quota(tenant);
    Ok(tx
        .get_json::<VolumeQuotaRec>(&key)?
        .map_or(defaults, |q| VolumeLimits {
            volumes: q.volumes,
            gigabytes: q.gigabytes,
        }))
}

/// The volume `id` if `scope` sees it: by its key under the scope's tenant, or (in
/// [`Scope::All`]) under the tenant its `volid/` key names.
fn volume_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<VolumeRec> {
    let owner = match scope {
        Scope::Tenant(t) => t,
        Scope::All => {
            let key = tx.keys().volume_owner(id);
            let Some(kv) = tx.get(&key)? else {
                return Err(StoreError::not_found("volume", id));
            };
            kv.text()?
                .parse()
                .map_err(|e| StoreError::Backend(format!("bad tenant at {key}: {e}")))?
        }
    };
    let key = tx.keys().volume(owner, id);
    tx.get_json(&key)?
        .ok_or_else(|| StoreError::not_found("volume", id))
}

/// The number of the tenant's volumes and their GiB, from its volume range (which the commit
/// requires unchanged).
fn usage_in(tx: &mut Tx<'_>, tenant: Uuid) -> Result<(u32, u64)> {
    let prefix = tx.keys().tenant_volumes(tenant);
    let recs: Vec<VolumeRec> = decode_all(&tx.range(&prefix)?)?;
    Ok(usage_of(recs.iter().map(|v| v.size_gb)))
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A deleted tenant leaves no `volquota/` key behind (the suite sees only that the tenant is
    /// gone).
    #[test]
    fn a_tenants_quota_key_goes_with_it() {
        let Some(fx) = super::super::tests::fixture() else {
            return;
        };
        let store = fx.store_with(super::super::EtcdOptions::default());
        let tenant = store
            .create_tenant(NewTenant {
                name: "acme".into(),
                quota: Quota::default(),
                subnet_prefix: 24,
            })
            .unwrap();
        let quota = VolumeLimits {
            volumes: Some(1),
            gigabytes: None,
        };
        store.set_volume_quota(tenant.id, quota).unwrap();
        let key = store.keys.volume_quota(tenant.id);
        let raw = store.read(|tx| tx.get(&key)).unwrap().unwrap();
        assert_eq!(raw.text().unwrap(), r#"{"volumes":1,"gigabytes":null}"#);
        store.delete_tenant(tenant.id).unwrap();
        assert!(store.read(|tx| tx.get(&key)).unwrap().is_none());
    }
}
