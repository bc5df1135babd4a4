//! [`VolumeStore`]: tenants' block storage volumes (a subset of Cinder's volumes).

use uuid::Uuid;

use crate::{NewVolume, Result, Scope, Volume, VolumeChange, VolumeLimits};

/// Tenants' volumes and their attachments. Every call is one transaction. The limits are the
/// caller's (its quota of the tenant), checked in the transaction that would pass them, so that
/// parallel creations or growths never exceed them. A tenant is not deleted while it has
/// volumes ([`IdentityStore::delete_tenant`] is `Conflict`).
///
/// [`IdentityStore::delete_tenant`]: crate::IdentityStore::delete_tenant
pub trait VolumeStore: Send + Sync {
    /// Creates a volume of an existing tenant (`NotFound` otherwise, and for an image the tenant
    /// does not see), `Available` (from an image too: see [`NewVolume`]):
    /// `Invalid` for a size of 0 or a name or description over [`Volume::MAX_TEXT`] bytes;
    /// `QuotaExceeded` (`Volumes`) when the tenant has `limits.volumes` volumes already,
    /// (`Gigabytes`) when its volumes' GiB and the new size would pass `limits.gigabytes`.
    fn create_volume(&self, new: NewVolume, limits: VolumeLimits) -> Result<Volume>;
    /// One volume visible in `scope` (`NotFound` otherwise: another tenant's is not visible).
    fn volume(&self, scope: Scope, id: Uuid) -> Result<Volume>;
    /// The volumes visible in `scope`, by creation time then id.
    fn volumes(&self, scope: Scope) -> Result<Vec<Volume>>;
    /// Changes a volume visible in `scope` (see [`Volume::changed`] for `Conflict` and
    /// `Invalid`); a growth must fit `limits.gigabytes` (`QuotaExceeded`, `Gigabytes`). Sets
    /// its `updated` time.
    fn change_volume(
        &self,
        scope: Scope,
        id: Uuid,
        change: VolumeChange,
        limits: VolumeLimits,
    ) -> Result<Volume>;
    /// Deletes a volume visible in `scope` (`NotFound` otherwise; `Conflict` while it has an
    /// attachment).
    fn delete_volume(&self, scope: Scope, id: Uuid) -> Result<()>;
    /// The number of the tenant's volumes and their GiB in all (`NotFound` for no tenant).
    fn tenant_volume_usage(&self, tenant: Uuid) -> Result<(u32, u64)>;
}
