//! Block storage volumes as the store keeps them (a subset of Cinder's volumes): the record
//! ([`Volume`]) with its life ([`VolumeStatus`]) and its attachment ([`VolumeAttachment`]), the
//! inputs that make and change it ([`NewVolume`], [`VolumeChange`]), and the per-tenant limits
//! ([`VolumeLimits`]): a tenant's own volume quota where one is set, the caller's defaults
//! otherwise.

use std::time::SystemTime;

use uuid::Uuid;

use crate::{QuotaKind, Result, StoreError};

/// A tenant's block storage volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// Its identifier.
    pub id: Uuid,
    /// The owning tenant.
    pub owner: Uuid,
    /// Its name (not unique; may be empty): at most [`Volume::MAX_TEXT`] bytes.
    pub name: String,
    /// Its description: at most [`Volume::MAX_TEXT`] bytes.
    pub description: String,
    /// Its size, GiB (at least 1; it only grows).
    pub size_gb: u32,
    /// Where it is in its life.
    pub status: VolumeStatus,
    /// The image it was made from, if any (the image may have gone since).
    pub image: Option<Uuid>,
    /// The node that holds its file, once made (`None` until then).
    pub node: Option<Uuid>,
    /// The instance it is attached to, if any (at most one).
    pub attachment: Option<VolumeAttachment>,
    /// Whether an instance may boot from it.
    pub bootable: bool,
    /// When it was created (the stores keep milliseconds).
    pub created: SystemTime,
    /// When it last changed.
    pub updated: SystemTime,
}

impl Volume {
    /// The longest name or description, in bytes (also the longest attachment device).
    pub const MAX_TEXT: usize = 255;

    /// `Conflict` while it has an attachment (it may not be deleted).
    pub(crate) fn check_detached(&self) -> Result<()> {
        match &self.attachment {
            Some(a) => Err(StoreError::Conflict(format!(
                "volume {} is attached to instance {} (attachment {}): detach it first",
                self.id, a.instance, a.id
            ))),
            None => Ok(()),
        }
    }
}

/// A volume's status, as Cinder names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeStatus {
    /// Its file is being made (from an image; cumulo makes volumes `Available` at once, their
    /// files made lazily by the node that first uses them).
    Creating,
    /// Ready, not attached.
    Available,
    /// Set aside for an attachment about to be made.
    Reserved,
    /// Being attached to an instance.
    Attaching,
    /// Attached to an instance.
    #[serde(rename = "in-use")]
    InUse,
    /// Being detached from its instance.
    Detaching,
    /// Its file is growing.
    Extending,
    /// Its file is being removed (a volume that went with its instance, `delete_on_termination`).
    Deleting,
    /// Its file could not be made or changed.
    Error,
    /// Its file could not be removed.
    ErrorDeleting,
}

impl VolumeStatus {
    /// Every status.
    pub const ALL: [VolumeStatus; 10] = [
        VolumeStatus::Creating,
        VolumeStatus::Available,
        VolumeStatus::Reserved,
        VolumeStatus::Attaching,
        VolumeStatus::InUse,
        VolumeStatus::Detaching,
        VolumeStatus::Extending,
        VolumeStatus::Deleting,
        VolumeStatus::Error,
        VolumeStatus::ErrorDeleting,
    ];

    /// Cinder's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeStatus::Creating => "creating",
            VolumeStatus::Available => "available",
            VolumeStatus::Reserved => "reserved",
            VolumeStatus::Attaching => "attaching",
            VolumeStatus::InUse => "in-use",
            VolumeStatus::Detaching => "detaching",
            VolumeStatus::Extending => "extending",
            VolumeStatus::Deleting => "deleting",
            VolumeStatus::Error => "error",
            VolumeStatus::ErrorDeleting => "error_deleting",
        }
    }

    /// The status Cinder's word names; `None` for a word that is none.
    pub fn from_name(name: &str) -> Option<VolumeStatus> {
        VolumeStatus::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// A volume's attachment to an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeAttachment {
    /// The attachment's identifier.
    pub id: Uuid,
    /// The instance (not checked against the instances: the caller's business).
    pub instance: Uuid,
    /// The device the instance sees it as (`/dev/vdb`): at most [`Volume::MAX_TEXT`] bytes.
    pub device: String,
    /// When it was attached (the stores keep milliseconds).
    pub attached: SystemTime,
    /// Whether the volume goes with the instance: deleted (its file too) when the instance is,
    /// rather than detached (Nova's `delete_on_termination` of a block device mapping).
    pub delete_on_termination: bool,
}

/// Input of [`VolumeStore::create_volume`](crate::VolumeStore::create_volume). The volume is
/// made `Available`, on no node and attached to nothing: its file is made by the node that first
/// uses it (from its image, when it has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVolume {
    /// The owning tenant (must exist).
    pub owner: Uuid,
    /// Its name (see [`Volume::name`]).
    pub name: String,
    /// Its description (see [`Volume::description`]).
    pub description: String,
    /// Its size, GiB (at least 1).
    pub size_gb: u32,
    /// The image to make it from (one the owner sees), if any.
    pub image: Option<Uuid>,
    /// Whether an instance may boot from it.
    pub bootable: bool,
}

impl NewVolume {
    /// The status a volume made from this starts in: `Available`, from an image too (its file
    /// is made lazily, by the node that first uses it).
    pub fn status(&self) -> VolumeStatus {
        VolumeStatus::Available
    }

    /// `Invalid` for a size of 0 or an oversized name or description.
    pub(crate) fn check(&self) -> Result<()> {
        check_size(self.size_gb)?;
        check_text("name", &self.name)?;
        check_text("description", &self.description)
    }

    /// The volume made from this as of `at`.
    pub(crate) fn volume(self, id: Uuid, at: SystemTime) -> Volume {
        Volume {
            id,
            owner: self.owner,
            status: self.status(),
            name: self.name,
            description: self.description,
            size_gb: self.size_gb,
            image: self.image,
            node: None,
            attachment: None,
            bootable: self.bootable,
            created: at,
            updated: at,
        }
    }
}

/// A change to a volume ([`VolumeStore::change_volume`](crate::VolumeStore::change_volume)):
/// what is `Some` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeChange {
    /// Made only if the volume is in this status (`Conflict` naming the status it is in
    /// otherwise).
    pub expect: Option<VolumeStatus>,
    /// Its new status.
    pub status: Option<VolumeStatus>,
    /// Its new name.
    pub name: Option<String>,
    /// Its new description.
    pub description: Option<String>,
    /// Its new size: the same or larger (`Invalid` if smaller).
    pub size_gb: Option<u32>,
    /// The node that holds its file (`Some(None)`: none). Set once: another node than the one
    /// it has is `Conflict`; the same node again, or none, is taken.
    pub node: Option<Option<Uuid>>,
    /// Its attachment (`Some(None)`: detached). One at a time: an attachment other than the one
    /// it has (another id) is `Conflict` (detach first).
    pub attachment: Option<Option<VolumeAttachment>>,
    /// Whether it is bootable.
    pub bootable: Option<bool>,
}

impl Volume {
    /// `change` applied as of `at`: `Invalid` for bad text or a smaller size, `Conflict` if the
    /// volume is not in the status `change` expects, for another node or another attachment.
    pub fn changed(&self, change: &VolumeChange, at: SystemTime) -> Result<Volume> {
        for (what, text) in [("name", &change.name), ("description", &change.description)] {
            if let Some(text) = text {
                check_text(what, text)?;
            }
        }
        if let Some(Some(a)) = &change.attachment {
            check_text("attachment device", &a.device)?;
        }
        if let Some(expect) = change.expect
            && self.status != expect
        {
            return Err(StoreError::Conflict(format!(
                "volume {} is {}, not {}",
                self.id,
                self.status.as_str(),
                expect.as_str()
            )));
        }
        let mut v = self.clone();
        if let Some(size) = change.size_gb {
            if size < self.size_gb {
                return Err(StoreError::Invalid(format!(
                    "volume {} is {} GiB: it may only grow, not to {size} GiB",
                    self.id, self.size_gb
                )));
            }
            v.size_gb = size;
        }
        if let Some(node) = change.node {
            if let (Some(had), Some(new)) = (self.node, node)
                && had != new
            {
                return Err(StoreError::Conflict(format!(
                    "volume {} is on node {had}, not {new}",
                    self.id
                )));
            }
            v.node = node;
        }
        if let Some(attachment) = &change.attachment {
            if let (Some(had), Some(new)) = (&self.attachment, attachment)
                && had.id != new.id
            {
                return Err(StoreError::Conflict(format!(
                    "volume {} is attached to instance {} (attachment {})",
                    self.id, had.instance, had.id
                )));
            }
            v.attachment = attachment.clone();
        }
        if let Some(s) = change.status {
            v.status = s;
        }
        if let Some(n) = &change.name {
            v.name = n.clone();
        }
        if let Some(d) = &change.description {
            v.description = d.clone();
        }
        if let Some(b) = change.bootable {
            v.bootable = b;
        }
        v.updated = at;
        Ok(v)
    }
}

/// A tenant's volume limits (`None`: no limit): its own volume quota
/// ([`VolumeStore::set_volume_quota`](crate::VolumeStore::set_volume_quota)) where one is set,
/// else the defaults the caller passes (the controller's, for every tenant alike).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeLimits {
    /// Most volumes.
    pub volumes: Option<u32>,
    /// Most GiB over all its volumes.
    pub gigabytes: Option<u64>,
}

impl VolumeLimits {
    /// The most a tenant's own quota may give: 10,000 volumes and 1,000,000 GiB (about a PiB).
    /// Sanity bounds, far above Cinder's defaults (10 and 1,000) and any one cumulo cluster's
    /// disks; the GiB also fit SQLite's signed integers. No limit (`None`) may be set too.
    pub const MAX: VolumeLimits = VolumeLimits {
        volumes: Some(MAX_VOLUMES),
        gigabytes: Some(MAX_GIGABYTES),
    };

    /// `Invalid` for a figure past [`VolumeLimits::MAX`].
    pub(crate) fn check_settable(&self) -> Result<()> {
        if self.volumes.is_some_and(|v| v > MAX_VOLUMES)
            || self.gigabytes.is_some_and(|g| g > MAX_GIGABYTES)
        {
            return Err(StoreError::Invalid(format!(
                "a volume quota may be at most {MAX_VOLUMES} volumes and {MAX_GIGABYTES} \
                 gigabytes (or unlimited)"
            )));
        }
        Ok(())
    }

    /// `Invalid` for a figure below what the tenant holds (`count` volumes, `gigabytes` GiB in
    /// all), in Cinder's words: Cinder refuses a quota below the usage with a 400 (since Queens,
    /// without a way round: `cinder/api/contrib/quotas.py`, `_validate_existing_resource`).
    pub(crate) fn check_covers(&self, count: u32, gigabytes: u64) -> Result<()> {
        for (key, limit, used) in [
            ("volumes", self.volumes.map(u64::from), u64::from(count)),
            ("gigabytes", self.gigabytes, gigabytes),
        ] {
            if let Some(limit) = limit
                && limit < used
            {
                return Err(StoreError::Invalid(format!(
                    "Quota {key} limit must be equal or greater than existing resources. \
                     Current usage is {used} and the requested limit is {limit}."
                )));
            }
        }
        Ok(())
    }

    /// Whether one more volume of `size_gb` fits beside `count` volumes of `gigabytes` in all;
    /// the figure it would exceed otherwise.
    pub fn check_new(&self, count: u32, gigabytes: u64, size_gb: u32) -> Result<()> {
        if let Some(limit) = self.volumes
            && count >= limit
        {
            return Err(StoreError::QuotaExceeded {
                what: QuotaKind::Volumes,
                limit: u64::from(limit),
            });
        }
        self.check_gigabytes(gigabytes.saturating_add(u64::from(size_gb)))
    }

    /// Whether a volume may grow from `from` to `to` GiB when the tenant's volumes hold
    /// `gigabytes` (its own `from` included). Not growing always fits.
    pub fn check_growth(&self, gigabytes: u64, from: u32, to: u32) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        self.check_gigabytes(gigabytes.saturating_add(u64::from(to - from)))
    }

    fn check_gigabytes(&self, total: u64) -> Result<()> {
        match self.gigabytes {
            Some(limit) if total > limit => Err(StoreError::QuotaExceeded {
                what: QuotaKind::Gigabytes,
                limit,
            }),
            _ => Ok(()),
        }
    }
}

/// [`VolumeLimits::MAX`]'s volumes.
const MAX_VOLUMES: u32 = 10_000;
/// [`VolumeLimits::MAX`]'s GiB.
const MAX_GIGABYTES: u64 = 1_000_000;

/// The number of volumes and their GiB in all, over `sizes`.
pub(crate) fn usage_of(sizes: impl IntoIterator<Item = u32>) -> (u32, u64) {
    sizes.into_iter().fold((0, 0), |(n, gb), size| {
        (n.saturating_add(1), gb.saturating_add(u64::from(size)))
    })
}

fn check_size(size_gb: u32) -> Result<()> {
    if size_gb == 0 {
        return Err(StoreError::Invalid("a volume is at least 1 GiB".into()));
    }
    Ok(())
}

fn check_text(what: &str, text: &str) -> Result<()> {
    if text.len() > Volume::MAX_TEXT {
        return Err(StoreError::Invalid(format!(
            "volume {what} must be at most {} bytes",
            Volume::MAX_TEXT
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn statuses_have_cinders_words_and_round_trip() {
        for s in VolumeStatus::ALL {
            assert_eq!(VolumeStatus::from_name(s.as_str()), Some(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
        assert_eq!(VolumeStatus::InUse.as_str(), "in-use");
        assert_eq!(VolumeStatus::ErrorDeleting.as_str(), "error_deleting");
        assert_eq!(VolumeStatus::from_name("in_use"), None);
    }

    #[test]
    fn limits_count_volumes_and_gigabytes() {
        let limits = VolumeLimits {
            volumes: Some(2),
            gigabytes: Some(10),
        };
        assert!(limits.check_new(1, 4, 6).is_ok());
        assert!(matches!(
            limits.check_new(2, 0, 1),
            Err(StoreError::QuotaExceeded {
                what: QuotaKind::Volumes,
                limit: 2
            })
        ));
        assert!(matches!(
            limits.check_new(0, 4, 7),
            Err(StoreError::QuotaExceeded {
                what: QuotaKind::Gigabytes,
                limit: 10
            })
        ));
        assert!(limits.check_growth(10, 4, 4).is_ok());
        assert!(limits.check_growth(9, 4, 5).is_ok());
        assert!(limits.check_growth(10, 4, 5).is_err());
        assert!(
            VolumeLimits::default()
                .check_new(u32::MAX, u64::MAX, 1)
                .is_ok()
        );
        assert_eq!(usage_of([1, 2, 3]), (3, 6));
    }

    #[test]
    fn a_quota_is_bounded_and_covers_the_usage() {
        assert!(VolumeLimits::MAX.check_settable().is_ok());
        assert!(VolumeLimits::default().check_settable().is_ok());
        for over in [
            VolumeLimits {
                volumes: Some(10_001),
                gigabytes: None,
            },
            VolumeLimits {
                volumes: None,
                gigabytes: Some(1_000_001),
            },
        ] {
            assert!(matches!(over.check_settable(), Err(StoreError::Invalid(_))));
        }
        let quota = VolumeLimits {
            volumes: Some(2),
            gigabytes: Some(10),
        };
        assert!(quota.check_covers(2, 10).is_ok());
        match quota.check_covers(3, 1) {
            Err(StoreError::Invalid(m)) => assert_eq!(
                m,
                "Quota volumes limit must be equal or greater than existing resources. \
                 Current usage is 3 and the requested limit is 2."
            ),
            other => panic!("{other:?}"),
        }
        assert!(quota.check_covers(0, 11).is_err());
        assert!(
            VolumeLimits::default()
                .check_covers(u32::MAX, u64::MAX)
                .is_ok()
        );
    }
}
