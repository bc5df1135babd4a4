//! Images as the store keeps them: what an image is ([`ImageKind`]), its record ([`Image`]) with
//! its Image API life ([`ImageStatus`], [`ImageFile`], [`ImageProps`]), who sees it
//! ([`Visibility`], and the tenants an image is shared with: [`ImageMember`],
//! [`MemberStatus`]), and the inputs that make and change it ([`NewImage`], [`ImageChange`]).

use std::time::SystemTime;

use uuid::Uuid;

/// What an image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// A qcow2 disk image.
    Qcow2,
    /// A raw disk image.
    Raw,
    /// An ISO image.
    Iso,
    /// A kernel that VMs boot directly (Glance's `aki`), with a ramdisk and a root disk named
    /// by the booted image's `ramdisk_id` and `kernel_id` properties.
    Kernel,
    /// An initrd for a [`ImageKind::Kernel`] (Glance's `ari`); never booted by itself.
    Ramdisk,
    /// A container's root file system, a tarball (Glance's `raw` data in a `docker`
    /// container): booted as a container, never a VM's disk.
    Container,
}

impl ImageKind {
    /// Whether the image is a disk (qcow2, raw or ISO): what a volume or a root disk is made
    /// from.
    pub fn is_disk(self) -> bool {
        matches!(self, ImageKind::Qcow2 | ImageKind::Raw | ImageKind::Iso)
    }
}

/// A boot image: public (no owner), or a tenant's (private, shared with its members, or
/// community).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Its identifier.
    pub id: Uuid,
    /// The owning tenant; `None` is public.
    pub owner: Option<Uuid>,
    /// Who sees it: [`Visibility::Public`] exactly when it has no owner.
    pub visibility: Visibility,
    /// Its name (not unique).
    pub name: String,
    /// Its format.
    pub kind: ImageKind,
    /// Where the agents find it (a path or an image-store key; empty until its data is
    /// uploaded).
    pub reference: String,
    /// When it was created.
    pub created: SystemTime,
    /// Where it is in its life (registered images are `Active` from the start).
    pub status: ImageStatus,
    /// Its data's size and hashes, once uploaded through the Image API.
    pub file: Option<ImageFile>,
    /// What the Image API keeps besides.
    pub props: ImageProps,
    /// When it last changed.
    pub updated: SystemTime,
}

/// An image's status, as Glance names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageStatus {
    /// Made, no data yet.
    Queued,
    /// Its data is being uploaded.
    Saving,
    /// Usable.
    Active,
    /// Its data could not be kept.
    Killed,
}

impl ImageStatus {
    /// Glance's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageStatus::Queued => "queued",
            ImageStatus::Saving => "saving",
            ImageStatus::Active => "active",
            ImageStatus::Killed => "killed",
        }
    }

    /// The status Glance's word names.
    pub fn parse(text: &str) -> Option<ImageStatus> {
        [
            ImageStatus::Queued,
            ImageStatus::Saving,
            ImageStatus::Active,
            ImageStatus::Killed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// Who sees an image, as Glance names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Every tenant sees and lists it; it has no owner.
    Public,
    /// Every tenant sees it and may boot it; it is listed to others only when they ask for
    /// community images.
    Community,
    /// Its owner and the tenants it is shared with (its members, whatever their status).
    Shared,
    /// Its owner alone.
    Private,
}

impl Visibility {
    /// Glance's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "public",
            Visibility::Community => "community",
            Visibility::Shared => "shared",
            Visibility::Private => "private",
        }
    }

    /// The visibility Glance's word names.
    pub fn parse(text: &str) -> Option<Visibility> {
        [
            Visibility::Public,
            Visibility::Community,
            Visibility::Shared,
            Visibility::Private,
        ]
        .into_iter()
        .find(|v| v.as_str() == text)
    }

    /// The visibility of an image made for `owner` without one said: public without an owner,
    /// private with one.
    pub fn of_owner(owner: Option<Uuid>) -> Visibility {
        match owner {
            None => Visibility::Public,
            Some(_) => Visibility::Private,
        }
    }
}

/// The most members an image has by default (Glance's `image_member_quota`).
pub const MAX_IMAGE_MEMBERS: u32 = 128;

/// Where a member stands with an image shared with it, as Glance names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberStatus {
    /// Shared with it, not answered yet: it sees the image and may boot it, but does not list
    /// it unless it asks for pending images.
    Pending,
    /// It listed the image among its own.
    Accepted,
    /// It does not want it listed (it still sees it, and may still accept it).
    Rejected,
}

impl MemberStatus {
    /// Glance's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberStatus::Pending => "pending",
            MemberStatus::Accepted => "accepted",
            MemberStatus::Rejected => "rejected",
        }
    }

    /// The status Glance's word names.
    pub fn parse(text: &str) -> Option<MemberStatus> {
        [
            MemberStatus::Pending,
            MemberStatus::Accepted,
            MemberStatus::Rejected,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// A tenant a shared image is shared with. It goes with its image and with its tenant; it
/// stays while the image is made private again (and counts again once it is shared again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMember {
    /// The image.
    pub image: Uuid,
    /// The member tenant.
    pub member: Uuid,
    /// Its answer.
    pub status: MemberStatus,
    /// When it was added.
    pub created: SystemTime,
    /// When its status last changed.
    pub updated: SystemTime,
}

/// An uploaded image's data: its size and hashes (hex).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageFile {
    /// Bytes.
    pub size: u64,
    /// MD5 (Glance's `checksum`).
    pub md5: String,
    /// SHA-512 (`os_hash_value`): where the image store keeps the data.
    pub sha512: String,
}

/// The Image API's other fields of an image.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ImageProps {
    /// Glance's `container_format` (`bare` when not said).
    pub container_format: Option<String>,
    /// The smallest root disk it boots from, GiB.
    pub min_disk: u32,
    /// The least memory it boots with, MiB.
    pub min_ram: u32,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its free-form properties.
    pub properties: std::collections::BTreeMap<String, String>,
    /// Whether it may not be deleted.
    pub protected: bool,
}

/// A change to an image ([`CatalogStore::change_image`](crate::CatalogStore::change_image)):
/// what is `Some` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageChange {
    /// Made only if the image is in this status (`Conflict` otherwise).
    pub expect: Option<ImageStatus>,
    /// Its new status.
    pub status: Option<ImageStatus>,
    /// Its new name.
    pub name: Option<String>,
    /// Its new kind (disk format).
    pub kind: Option<ImageKind>,
    /// Its new owner (`Some(None)`: public). Without a `visibility`, the visibility follows:
    /// public without an owner, private when a public image gets one.
    pub owner: Option<Option<Uuid>>,
    /// Its new visibility ([`Visibility::Public`] exactly when it has no owner, else
    /// `Invalid`).
    pub visibility: Option<Visibility>,
    /// Its data (`Some(None)`: none).
    pub file: Option<Option<ImageFile>>,
    /// Its new reference.
    pub reference: Option<String>,
    /// Its new other fields.
    pub props: Option<ImageProps>,
}

impl Image {
    /// `change` applied as of `at`; `Conflict` if the image is not in the status `change`
    /// expects, `Invalid` if it would be public with an owner or not public without one.
    pub fn changed(&self, change: &ImageChange, at: SystemTime) -> crate::Result<Image> {
        if let Some(expect) = change.expect
            && self.status != expect
        {
            return Err(crate::StoreError::Conflict(format!(
                "image {} is {}, not {}",
                self.id,
                self.status.as_str(),
                expect.as_str()
            )));
        }
        let mut i = self.clone();
        if let Some(s) = change.status {
            i.status = s;
        }
        if let Some(n) = &change.name {
            i.name = n.clone();
        }
        if let Some(k) = change.kind {
            i.kind = k;
        }
        if let Some(o) = change.owner {
            i.owner = o;
            if change.visibility.is_none() {
                i.visibility = match o {
                    None => Visibility::Public,
                    Some(_) if i.visibility == Visibility::Public => Visibility::Private,
                    Some(_) => i.visibility,
                };
            }
        }
        if let Some(v) = change.visibility {
            i.visibility = v;
        }
        i.check_visibility()?;
        if let Some(f) = &change.file {
            i.file = f.clone();
        }
        if let Some(r) = &change.reference {
            i.reference = r.clone();
        }
        if let Some(p) = &change.props {
            i.props = p.clone();
        }
        i.updated = at;
        Ok(i)
    }

    /// `Invalid` unless it is public exactly when it has no owner.
    pub fn check_visibility(&self) -> crate::Result<()> {
        if (self.visibility == Visibility::Public) != self.owner.is_none() {
            return Err(crate::StoreError::Invalid(format!(
                "a public image has no owner, and an image without an owner is public (image {} \
                 is {})",
                self.id,
                self.visibility.as_str()
            )));
        }
        Ok(())
    }

    /// Whether `tenant` sees it (reads it, boots it): public and community images, its own, and
    /// shared ones of which it is a member (`member`), whatever the member's status.
    pub fn seen_by(&self, tenant: Uuid, member: bool) -> bool {
        match self.visibility {
            Visibility::Public | Visibility::Community => true,
            _ if self.owner == Some(tenant) => true,
            Visibility::Shared => member,
            Visibility::Private => false,
        }
    }
}

/// Input of [`CatalogStore::create_image`](crate::CatalogStore::create_image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewImage {
    /// The owning tenant; `None` is public.
    pub owner: Option<Uuid>,
    /// Its name.
    pub name: String,
    /// Its format.
    pub kind: ImageKind,
    /// Where the agents find it.
    pub reference: String,
}
