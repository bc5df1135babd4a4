//! Flavors, images and workloads over etcd: [`CatalogStore`] for [`EtcdStore`] (flavors:
//! `flavors.rs`; the tenants images are shared with: `image_members.rs`).

use std::collections::HashSet;

use uuid::Uuid;

use super::flavors;
use super::identity::tenant_in;
use super::image_members;
use super::records::*;
use super::{EtcdStore, Tx, all, decode_all};
use crate::common::{check_name, check_version, now};
use crate::*;

impl EtcdStore {
    fn make_image(
        &self,
        new: NewImage,
        status: ImageStatus,
        visibility: Visibility,
        props: ImageProps,
    ) -> Result<Image> {
        check_name("image", &new.name)?;
        if new.reference.is_empty() && status == ImageStatus::Active {
            return Err(StoreError::Invalid("empty image reference".into()));
        }
        let rec = ImageRec::new(Uuid::new_v4(), new, now(), status, visibility, props);
        rec.model().check_visibility()?;
        self.atomically("creating an image", |tx| {
            if let Some(owner) = rec.owner {
                tenant_in(tx, owner)?;
            }
            let key = tx.keys().image(rec.id);
            tx.put(&key, &rec)
        })?;
        Ok(rec.model())
    }
}

impl CatalogStore for EtcdStore {
    // --- flavors (`flavors.rs`) ---
    fn create_flavor(&self, new: NewFlavor) -> Result<Flavor> {
        flavors::create(self, new)
    }

    fn flavor(&self, scope: Scope, id: Uuid) -> Result<Flavor> {
        self.read(|tx| flavors::flavor_in(tx, scope, id))
            .map(|f| f.model())
    }

    fn flavors(&self, scope: Scope) -> Result<Vec<Flavor>> {
        flavors::flavors(self, scope)
    }

    fn delete_flavor(&self, id: Uuid) -> Result<()> {
        flavors::delete(self, id)
    }

    fn set_flavor_extra_specs(&self, id: Uuid, specs: ExtraSpecs) -> Result<Flavor> {
        flavors::set_specs(self, id, specs)
    }

    fn delete_flavor_extra_spec(&self, id: Uuid, key: &str) -> Result<Flavor> {
        flavors::delete_spec(self, id, key)
    }

    fn flavor_access(&self, id: Uuid) -> Result<Vec<Uuid>> {
        flavors::access(self, id)
    }

    fn add_flavor_access(&self, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>> {
        flavors::add_access(self, id, tenant)
    }

    fn remove_flavor_access(&self, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>> {
        flavors::remove_access(self, id, tenant)
    }

    // --- images ---
    fn create_image(&self, new: NewImage) -> Result<Image> {
        let visibility = Visibility::of_owner(new.owner);
        self.make_image(new, ImageStatus::Active, visibility, ImageProps::default())
    }

    fn create_queued_image(
        &self,
        new: NewImage,
        visibility: Visibility,
        props: ImageProps,
    ) -> Result<Image> {
        self.make_image(new, ImageStatus::Queued, visibility, props)
    }

    fn change_image(&self, scope: Scope, id: Uuid, change: ImageChange) -> Result<Image> {
        if let Some(name) = &change.name {
            check_name("image", name)?;
        }
        self.atomically("changing an image", |tx| {
            let old = image_in(tx, scope, id)?.model();
            if !scope.owns(old.owner) {
                return Err(StoreError::not_found("image", id));
            }
            if let Some(Some(owner)) = change.owner {
                tenant_in(tx, owner)?;
            }
            let new = old.changed(&change, now())?;
            let key = tx.keys().image(id);
            tx.put(&key, &ImageRec::of(&new))?;
            Ok(new)
        })
    }

    fn image(&self, scope: Scope, id: Uuid) -> Result<Image> {
        self.read(|tx| image_in(tx, scope, id)).map(|i| i.model())
    }

    fn images(&self, scope: Scope) -> Result<Vec<Image>> {
        self.read(|tx| {
            let images = decode_all::<ImageRec>(&tx.range(&tx.keys().images())?)?;
            let member_of: HashSet<Uuid> = match scope {
                Scope::All => HashSet::new(),
                Scope::Tenant(t) => image_members::memberships_in(tx, t)?
                    .iter()
                    .map(|m| m.image)
                    .collect(),
            };
            let mut seen: Vec<Image> = images
                .iter()
                .map(ImageRec::model)
                .filter(|i| match scope {
                    Scope::All => true,
                    Scope::Tenant(t) => i.seen_by(t, member_of.contains(&i.id)),
                })
                .collect();
            seen.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
            Ok(seen)
        })
    }

    fn delete_image(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.atomically("deleting an image", |tx| {
            let image = image_in(tx, scope, id)?;
            if !scope.owns(image.owner) {
                return Err(StoreError::not_found("image", id));
            }
            let keys = tx.keys();
            if tx.any_under(&keys.references("image", id))? {
                return Err(StoreError::Conflict(format!("image {id} is in use")));
            }
            tx.delete(&keys.image(id));
            tx.delete_prefix(&keys.image_members(id));
            Ok(())
        })
    }

    fn add_image_member(
        &self,
        scope: Scope,
        image: Uuid,
        member: Uuid,
        limit: u32,
    ) -> Result<ImageMember> {
        self.atomically("adding an image member", |tx| {
            let img = image_in(tx, scope, image)?.model();
            if scope.owns(img.owner) && img.visibility == Visibility::Shared {
                tenant_in(tx, member)?;
            }
            image_members::add_in(tx, scope, &img, member, limit)
        })
    }

    fn image_members(&self, scope: Scope, image: Uuid) -> Result<Vec<ImageMember>> {
        self.read(|tx| {
            let img = image_in(tx, scope, image)?.model();
            image_members::of_image_in(tx, scope, &img)
        })
    }

    fn set_image_member_status(
        &self,
        scope: Scope,
        image: Uuid,
        member: Uuid,
        status: MemberStatus,
    ) -> Result<ImageMember> {
        self.atomically("changing an image member", |tx| {
            image_in(tx, scope, image)?;
            image_members::set_status_in(tx, scope, image, member, status)
        })
    }

    fn remove_image_member(&self, scope: Scope, image: Uuid, member: Uuid) -> Result<()> {
        self.atomically("removing an image member", |tx| {
            let img = image_in(tx, scope, image)?.model();
            image_members::remove_in(tx, scope, &img, member)
        })
    }

    fn image_memberships(&self, tenant: Uuid) -> Result<Vec<ImageMember>> {
        self.read(|tx| image_members::memberships_in(tx, tenant))
    }

    // --- workloads ---
    fn create_workload(&self, new: NewWorkload) -> Result<Workload> {
        check_name("workload", &new.name)?;
        let id = Uuid::new_v4();
        self.atomically("creating a workload", |tx| {
            let scope = match new.owner {
                Some(owner) => {
                    tenant_in(tx, owner)?;
                    Scope::Tenant(owner)
                }
                None => Scope::All,
            };
            let flavor = flavors::flavor_in(tx, Scope::All, new.flavor)?;
            let image = image_in(tx, scope, new.image)?;
            if new.owner.is_none() && image.owner.is_some() {
                return Err(StoreError::Invalid(
                    "a public workload needs a public image".into(),
                ));
            }
            let rec = WorkloadRec {
                id,
                owner: new.owner,
                name: new.name.clone(),
                flavor: flavor.id,
                image: image.id,
                user_data: new.user_data.clone(),
                version: 1,
                vcpus: flavor.vcpus,
                memory_mb: flavor.memory_mb,
                ephemeral: new.ephemeral,
            };
            let keys = tx.keys();
            tx.put(&keys.workload(id), &rec)?;
            tx.put_text(&keys.reference("flavor", flavor.id, id), "");
            tx.put_text(&keys.reference("image", image.id, id), "");
            Ok(rec.model())
        })
    }

    fn workload(&self, scope: Scope, id: Uuid) -> Result<Workload> {
        self.read(|tx| workload_in(tx, scope, id))
            .map(|w| w.model())
    }

    fn workloads(&self, scope: Scope) -> Result<Vec<Workload>> {
        let mut all: Vec<Workload> = all::<WorkloadRec>(self, &self.keys.workloads())?
            .iter()
            .filter(|w| scope.sees(w.owner))
            .map(WorkloadRec::model)
            .collect();
        all.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
        Ok(all)
    }

    fn update_workload(
        &self,
        scope: Scope,
        id: Uuid,
        expected: u64,
        change: WorkloadChange,
    ) -> Result<Workload> {
        self.atomically("updating a workload", |tx| {
            let mut w = workload_in(tx, scope, id)?;
            if !scope.owns(w.owner) {
                return Err(StoreError::not_found("workload", id));
            }
            check_version("workload", id, w.version, expected)?;
            if let Some(name) = &change.name {
                check_name("workload", name)?;
                w.name = name.clone();
            }
            if let Some(data) = &change.user_data {
                w.user_data = data.clone();
            }
            w.version += 1;
            let key = tx.keys().workload(id);
            tx.put(&key, &w)?;
            Ok(w.model())
        })
    }

    fn delete_workload(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.atomically("deleting a workload", |tx| {
            let w = workload_in(tx, scope, id)?;
            if !scope.owns(w.owner) {
                return Err(StoreError::not_found("workload", id));
            }
            let keys = tx.keys();
            if tx.any_under(&keys.references("workload", id))? {
                return Err(StoreError::Conflict(format!("workload {id} is in use")));
            }
            tx.delete(&keys.workload(id));
            tx.delete(&keys.reference("flavor", w.flavor, id));
            tx.delete(&keys.reference("image", w.image, id));
            Ok(())
        })
    }
}

/// The image `id` if `scope` sees it: a tenant sees public and community images, its own, and
/// shared images of which it is a member (the membership is read, and compared at commit).
pub(super) fn image_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<ImageRec> {
    let key = tx.keys().image(id);
    let rec = tx
        .get_json::<ImageRec>(&key)?
        .ok_or_else(|| StoreError::not_found("image", id))?;
    let seen = match scope {
        Scope::All => true,
        Scope::Tenant(t) => {
            let image = rec.model();
            let member = image.visibility == Visibility::Shared
                && image.owner != Some(t)
                && tx.get(&tx.keys().image_member(id, t))?.is_some();
            image.seen_by(t, member)
        }
    };
    if !seen {
        return Err(StoreError::not_found("image", id));
    }
    Ok(rec)
}

/// The workload `id` if `scope` sees it.
pub(super) fn workload_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<WorkloadRec> {
    let key = tx.keys().workload(id);
    tx.get_json::<WorkloadRec>(&key)?
        .filter(|w| scope.sees(w.owner))
        .ok_or_else(|| StoreError::not_found("workload", id))
}
