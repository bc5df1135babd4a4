//! [`CatalogStore`]: what instances are made of — flavors (global: public, or private to the
//! tenants on their access list, with extra specs), images (public, or a
//! tenant's: private, shared with other tenants, its members, or community) and workloads
//! (public or private to a tenant).

use uuid::Uuid;

use crate::{
    ExtraSpecs, Flavor, Image, ImageChange, ImageMember, ImageProps, MemberStatus, NewFlavor,
    NewImage, NewWorkload, Result, Scope, Visibility, Workload, WorkloadChange,
};

/// Flavors, images and workloads. Every call is one transaction.
pub trait CatalogStore: Send + Sync {
    // --- flavors (global; a private one is seen in `Scope::All` and by its access list) ---
    /// Creates a flavor, without extra specs or access (`Conflict` on a duplicate name,
    /// `Invalid` as [`NewFlavor::check`] says).
    fn create_flavor(&self, new: NewFlavor) -> Result<Flavor>;
    /// One flavor seen in `scope`: any in [`Scope::All`]; in a tenant's, a public one or a
    /// private one with the tenant on its access list (`NotFound` otherwise).
    fn flavor(&self, scope: Scope, id: Uuid) -> Result<Flavor>;
    /// The flavors seen in `scope` (as [`CatalogStore::flavor`] sees them), by name.
    fn flavors(&self, scope: Scope) -> Result<Vec<Flavor>>;
    /// Deletes a flavor no workload uses (`Conflict` otherwise); its extra specs and access list
    /// go with it.
    fn delete_flavor(&self, id: Uuid) -> Result<()>;
    /// Sets extra specs of flavor `id`: adds those it has not, replaces the values of those it
    /// has, keeps the others. `Invalid` when the result does not fit
    /// ([`Flavor::check_extra_specs`]); nothing changes then.
    fn set_flavor_extra_specs(&self, id: Uuid, specs: ExtraSpecs) -> Result<Flavor>;
    /// Removes extra spec `key` of flavor `id` (`NotFound` of kind `extra spec` when it has none
    /// of that key).
    fn delete_flavor_extra_spec(&self, id: Uuid, key: &str) -> Result<Flavor>;
    /// The tenants on the access list of flavor `id`, by id (none for a public flavor).
    fn flavor_access(&self, id: Uuid) -> Result<Vec<Uuid>>;
    /// Puts `tenant` on the access list of private flavor `id`; the list then. `NotFound` for
    /// a flavor or tenant that does not exist, `Invalid` for a public flavor, `Conflict` for a
    /// tenant on the list already.
    fn add_flavor_access(&self, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>>;
    /// Takes `tenant` off the access list of flavor `id`; the list then. `NotFound` for a flavor
    /// that does not exist, and (of kind `flavor access`) for a tenant not on the list.
    fn remove_flavor_access(&self, id: Uuid, tenant: Uuid) -> Result<Vec<Uuid>>;

    // --- images ---
    /// Creates an image (its owner, if any, must exist), active from the start: public without
    /// an owner, private with one.
    fn create_image(&self, new: NewImage) -> Result<Image>;
    /// Creates an image through the Image API: `queued` (no data yet: `new.reference` may be
    /// empty), `visibility` (public exactly when it has no owner, else `Invalid`), with `props`.
    fn create_queued_image(
        &self,
        new: NewImage,
        visibility: Visibility,
        props: ImageProps,
    ) -> Result<Image>;
    /// Changes an image owned in `scope` (`NotFound` for one it does not own; `Conflict` if
    /// `change.expect` is not its status).
    fn change_image(&self, scope: Scope, id: Uuid, change: ImageChange) -> Result<Image>;
    /// One image visible in `scope`: in a tenant's, public and community images, its own, and
    /// shared images of which it is a member (whatever its status).
    fn image(&self, scope: Scope, id: Uuid) -> Result<Image>;
    /// The images visible in `scope` (as [`CatalogStore::image`] sees them), by name. Which of
    /// them a listing shows (accepted members only, community images only when asked) is the
    /// caller's choice, with [`CatalogStore::image_memberships`].
    fn images(&self, scope: Scope) -> Result<Vec<Image>>;
    /// Deletes an image owned in `scope` that no workload uses; its members go with it.
    fn delete_image(&self, scope: Scope, id: Uuid) -> Result<()>;

    // --- image members (the tenants a shared image is shared with) ---
    /// Adds tenant `member` to image `image`, owned in `scope` and shared: `pending`.
    /// `NotFound` for an image `scope` does not own, or a tenant that does not exist; `Invalid`
    /// for an image that is not shared, or its owner; `Conflict` for a member it has already;
    /// `QuotaExceeded` ([`ImageMembers`](crate::QuotaKind::ImageMembers)) when it has `limit`
    /// members already.
    fn add_image_member(
        &self,
        scope: Scope,
        image: Uuid,
        member: Uuid,
        limit: u32,
    ) -> Result<ImageMember>;
    /// The members of image `image` (visible in `scope`) that `scope` sees, by when they were
    /// added: all of them for its owner (and [`Scope::All`]), only its own for a member.
    fn image_members(&self, scope: Scope, image: Uuid) -> Result<Vec<ImageMember>>;
    /// Sets the status of tenant `member` of image `image`, as the member (`Scope::Tenant` of
    /// `member`, which must see the image) or [`Scope::All`]; `NotFound` otherwise.
    fn set_image_member_status(
        &self,
        scope: Scope,
        image: Uuid,
        member: Uuid,
        status: MemberStatus,
    ) -> Result<ImageMember>;
    /// Removes tenant `member` from image `image`, owned in `scope` (`NotFound` for an image it
    /// does not own or a tenant that is not a member).
    fn remove_image_member(&self, scope: Scope, image: Uuid, member: Uuid) -> Result<()>;
    /// The memberships of `tenant` (whatever the images' visibility now), by image.
    fn image_memberships(&self, tenant: Uuid) -> Result<Vec<ImageMember>>;

    // --- workloads ---
    /// Creates a workload; its flavor must exist and its image be visible to its owner.
    fn create_workload(&self, new: NewWorkload) -> Result<Workload>;
    /// One workload visible in `scope`.
    fn workload(&self, scope: Scope, id: Uuid) -> Result<Workload>;
    /// The workloads visible in `scope`, by name.
    fn workloads(&self, scope: Scope) -> Result<Vec<Workload>>;
    /// Changes a workload owned in `scope` if its version is still `expected_version`.
    fn update_workload(
        &self,
        scope: Scope,
        id: Uuid,
        expected_version: u64,
        change: WorkloadChange,
    ) -> Result<Workload>;
    /// Deletes a workload owned in `scope` that no instance uses.
    fn delete_workload(&self, scope: Scope, id: Uuid) -> Result<()>;
}
