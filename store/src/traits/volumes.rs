//! [`VolumeStore`]: tenants' block storage volumes (a subset of Cinder's volumes), and each
//! tenant's own volume quota.

use uuid::Uuid;

use crate::{NewVolume, Result, Scope, Volume, VolumeChange, VolumeLimits};

/// Tenants' volumes and their attachments, and tenants' own volume quotas. Every call is one
/// transaction. A creation or a growth is checked against the tenant's limits: its own quota
/// ([`VolumeStore::set_volume_quota`]) when it has one, else the `defaults` the caller passes
/// (the controller's, for every tenant alike), read and checked in the transaction that would
/// pass them, so that parallel creations or growths, or a quota set meanwhile, never let a
/// tenant exceed them. A tenant is not deleted while it has volumes
/// ([`IdentityStore::delete_tenant`] is `Conflict`); its own quota goes with it.
///
/// [`IdentityStore::delete_tenant`]: crate::IdentityStore::delete_tenant
pub trait VolumeStore: Send + Sync {
    /// Creates a volume of an existing tenant (`NotFound` otherwise, and for an image the tenant
    /// does not see), `Available` (from an image too: see [`NewVolume`]):
    /// `Invalid` for a size of 0 or a name or description over [`Volume::MAX_TEXT`] bytes;
    /// `QuotaExceeded` (`Volumes`) when the tenant has as many volumes as its limits allow
    /// already, (`Gigabytes`) when its volumes' GiB and the new size would pass its limit. The
    /// limits are the tenant's own quota if it has one, else `defaults`.
    fn create_volume(&self, new: NewVolume, defaults: VolumeLimits) -> Result<Volume>;
    /// One volume visible in `scope` (`NotFound` otherwise: another tenant's is not visible).
    fn volume(&self, scope: Scope, id: Uuid) -> Result<Volume>;
    /// The volumes visible in `scope`, by creation time then id.
    fn volumes(&self, scope: Scope) -> Result<Vec<Volume>>;
    /// Changes a volume visible in `scope` (see [`Volume::changed`] for `Conflict` and
    /// `Invalid`); a growth must fit the GiB of the owner's own quota if it has one, else of
    /// `defaults` (`QuotaExceeded`, `Gigabytes`). Sets its `updated` time.
    fn change_volume(
        &self,
        scope: Scope,
        id: Uuid,
        change: VolumeChange,
        defaults: VolumeLimits,
    ) -> Result<Volume>;
    /// Deletes a volume visible in `scope` (`NotFound` otherwise; `Conflict` while it has an
    /// attachment).
    fn delete_volume(&self, scope: Scope, id: Uuid) -> Result<()>;
    /// The number of the tenant's volumes and their GiB in all (`NotFound` for no tenant).
    fn tenant_volume_usage(&self, tenant: Uuid) -> Result<(u32, u64)>;
    /// The tenant's limits: its own quota if one is set, else `defaults` (`NotFound` for no
    /// tenant).
    fn volume_quota(&self, tenant: Uuid, defaults: VolumeLimits) -> Result<VolumeLimits>;
    /// Sets the tenant's own quota, both figures (`None`: unlimited), which from then on
    /// replaces the defaults for it; returns it. `NotFound` for no tenant; `Invalid` for a
    /// figure past [`VolumeLimits::MAX`], or below what the tenant holds (its volumes, their GiB,
    /// as in its transaction), in Cinder's words: Cinder refuses a quota below the usage with a
    /// 400 (`cinder/api/contrib/quotas.py`, `_validate_existing_resource`, since Queens with no
    /// way round it). The quota goes with the tenant.
    fn set_volume_quota(&self, tenant: Uuid, quota: VolumeLimits) -> Result<VolumeLimits>;
}
