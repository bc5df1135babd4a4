//! Attaching block volumes to servers and detaching them: the rules both the engine and the API's
//! fake cluster apply, over the store alone (no frame is sent here).
//!
//! - An attach takes a volume of the server's tenant (another tenant's is not found) that is
//!   `available` and attached to nothing, and a server that is active, stopped or paused
//!   ([`attach_allowed`]). A volume whose file a node holds already (its `node`, set by its first
//!   attach) attaches only to a server on that node: its file is local to it.
//! - The device is the one asked for (`vdb` to `vdz`), or the first of them that no other volume
//!   attached to (or being attached to, or detached from) the server uses; the guest sees it as
//!   `/dev/vdX`, which is what the attachment records.
//! - The attach's store change ([`begin_attach`]) moves the volume from `available` to
//!   `attaching` with a new attachment; the node's STATS moves it to `in-use` (the engine). A
//!   detach ([`begin_detach`]) moves it from `in-use` to `detaching`; STATS without it moves it
//!   to `available`, its attachment gone, its `node` kept (its file stays there).
//! - A server that goes releases its volumes ([`release_instance`]): `available`, detached; a
//!   volume attached with `delete_on_termination` becomes `deleting` instead, and goes
//!   ([`remove_volume`]: its file from its node, then its record).
//!
//! Boot volumes (a server created with a block device mapping whose `boot_index` 0 is a
//! volume): the volume is attached to the server from its creation as its root disk,
//! [`ROOT_DEVICE`], `in-use` at once ([`plan_boot`], [`begin_boot`]); it is not detached while
//! the server lives (Nova's 400 "Cannot detach a root device volume"). Volumes made from images
//! ([`check_volume_image`]) are bootable; a node that does not hold such a volume's file makes
//! it from the image ([`fill_image`]: ATTACH_VOLUME's `image`; a START carries the image
//! anyway).

use std::time::SystemTime;

use uuid::Uuid;

use crate::cluster::ClusterError;
use store::{
    Image, ImageKind, ImageStatus, Instance, InstanceState, Scope, Store, StoreError, Volume,
    VolumeAttachment, VolumeChange, VolumeLimits, VolumeStatus,
};

/// The devices a volume may be attached as, in the order they are given out (`vda` is the
/// server's own disk).
pub const DEVICES: std::ops::RangeInclusive<u8> = b'b'..=b'z';

/// The device a boot volume is attached as: the server's root disk.
pub const ROOT_DEVICE: &str = "/dev/vda";

/// How many times a change that lost a race with another writer is tried again.
const RETRIES: usize = 4;

/// One GiB, in bytes.
const GIB: u64 = 1 << 30;

/// Whether `volume` is attached to a server as its root disk ([`ROOT_DEVICE`]).
pub fn is_root(volume: &Volume) -> bool {
    volume
        .attachment
        .as_ref()
        .is_some_and(|a| a.device == ROOT_DEVICE)
}

/// Whether a server in `state` can have volumes attached or detached: active, stopped (on its
/// node) or paused.
pub fn attach_allowed(state: &InstanceState) -> bool {
    matches!(
        state,
        InstanceState::Active | InstanceState::Exited | InstanceState::Paused
    )
}

/// The device named by `text` (`/dev/vdc` or `vdc`), as the node takes it (`vdc`): `None` for a
/// name outside `vdb`..`vdz`.
pub fn device_name(text: &str) -> Option<String> {
    let name = text.strip_prefix("/dev/").unwrap_or(text);
    match name.as_bytes() {
        [b'v', b'd', x] if DEVICES.contains(x) => Some(name.to_string()),
        _ => None,
    }
}

/// The path the guest sees device `name` (`vdb`) at: `/dev/vdb`.
pub fn device_path(name: &str) -> String {
    format!("/dev/{name}")
}

/// The device `asked` for (a name [`device_name`] gives), or the first free one, given the
/// devices `used` by the server's other volumes (as the attachments record them): `Conflict` for
/// one in use, or when none is free.
pub fn choose_device(
    used: &[&str],
    asked: Option<&str>,
    server: Uuid,
) -> Result<String, ClusterError> {
    let taken = |name: &str| used.iter().any(|u| device_name(u).as_deref() == Some(name));
    if let Some(name) = asked {
        if taken(name) {
            return Err(ClusterError::Conflict(format!(
                "device {} is in use on server {server}",
                device_path(name)
            )));
        }
        return Ok(name.to_string());
    }
    DEVICES
        .map(|x| format!("vd{}", char::from(x)))
        .find(|name| !taken(name))
        .ok_or_else(|| {
            ClusterError::Conflict(format!(
                "server {server} has no free device for another volume (vdb to vdz are in use)"
            ))
        })
}

/// The volumes of `instance`'s tenant attached (or being attached or detached) to it.
pub fn attached_to(store: &dyn Store, instance: &Instance) -> Result<Vec<Volume>, StoreError> {
    let mut volumes: Vec<Volume> = store
        .volumes(Scope::Tenant(instance.tenant))?
        .into_iter()
        .filter(|v| {
            v.attachment
                .as_ref()
                .is_some_and(|a| a.instance == instance.id)
        })
        .collect();
    volumes.sort_by(|a, b| {
        let device = |v: &Volume| v.attachment.as_ref().map(|a| a.device.clone());
        device(a).cmp(&device(b))
    });
    Ok(volumes)
}

/// The volume `instance` boots from (attached to it as [`ROOT_DEVICE`]), if any.
pub fn boot_volume(store: &dyn Store, instance: &Instance) -> Result<Option<Volume>, StoreError> {
    Ok(attached_to(store, instance)?.into_iter().find(is_root))
}

/// Whether `image`'s data is a disk uploaded to the image store (`sha512/<hash>`), which a node
/// fetches and can fill a volume from: not a registered reference (a kernel+initrd directory,
/// or a file each node keeps, whose kind and size the controller does not know), not an ISO.
pub fn is_uploaded_disk(image: &Image) -> bool {
    matches!(image.kind, ImageKind::Qcow2 | ImageKind::Raw)
        && image.file.is_some()
        && image.reference.starts_with("sha512/")
}

/// Why `image` cannot be the image of a volume of `size_gb` GiB, if it cannot (400s, in Cinder's
/// words where Cinder has them): it must be `active`, its data (when its size is known) must fit
/// in the volume, and the volume must be at least its `min_disk`. `disk_only` (a volume made
/// through the Block Storage API, which a node fills from the image): it must be an uploaded
/// disk image ([`is_uploaded_disk`]), not an ISO nor a registered image (a kernel image); a boot
/// volume made by a server create may have either, and then is the guest's data disk, booted
/// with the image.
pub fn check_volume_image(image: &Image, size_gb: u32, disk_only: bool) -> Result<(), String> {
    if image.status != ImageStatus::Active {
        return Err(format!("Image {} is not active.", image.id));
    }
    if disk_only {
        if image.kind == ImageKind::Iso {
            return Err(format!(
                "Image {} is an ISO image: a volume is made only from a disk image (qcow2 or raw)",
                image.id
            ));
        }
        if !image.kind.is_disk() {
            return Err(format!(
                "Image {} is a kernel or an initrd (aki, ari): a volume is made only from a disk \
                 image (qcow2 or raw)",
                image.id
            ));
        }
        if !is_uploaded_disk(image) {
            return Err(format!(
                "Image {} is registered by reference (a kernel+initrd image, or a file each node \
                 keeps): a volume is made only from a disk image uploaded through the Image API \
                 (qcow2 or raw)",
                image.id
            ));
        }
    }
    if matches!(image.kind, ImageKind::Qcow2 | ImageKind::Raw)
        && let Some(file) = &image.file
    {
        let image_gb = file.size.div_ceil(GIB);
        if image_gb > u64::from(size_gb) {
            return Err(format!(
                "Size of specified image {image_gb}GB is larger than volume size {size_gb}GB."
            ));
        }
    }
    if image.props.min_disk > size_gb {
        return Err(format!(
            "Volume size {size_gb}GB cannot be smaller than the image minDisk size {}GB.",
            image.props.min_disk
        ));
    }
    Ok(())
}

/// What a node fills `volume`'s file from when it makes it on an attach (ATTACH_VOLUME's
/// `image`): its image's data (`sha512/<hash>`) while no node holds the volume and the image is
/// an uploaded disk ([`is_uploaded_disk`]); `None` otherwise (a blank file: a volume made from
/// no image, or one whose image is a kernel or an ISO, which is its guest's data disk).
/// `Conflict` when the volume has no file yet and its image is gone: its file cannot be made.
pub fn fill_image(store: &dyn Store, volume: &Volume) -> Result<Option<String>, ClusterError> {
    let (None, Some(image)) = (volume.node, volume.image) else {
        return Ok(None);
    };
    match store.image(Scope::All, image) {
        Ok(i) if is_uploaded_disk(&i) && i.status == ImageStatus::Active => Ok(Some(i.reference)),
        Ok(_) => Ok(None),
        Err(StoreError::NotFound { .. }) => Err(ClusterError::Conflict(format!(
            "volume {} was made from image {image}, which is gone, and no node holds its file \
             yet: it cannot be made",
            volume.id
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Checks that volume `id` of `tenant` can be a new server's boot volume, as Nova checks a block
/// device mapping's: the tenant's (`Invalid`, Nova's 400 "failed to get volume", otherwise),
/// `available` and attached to nothing, bootable (made from an image). The volume.
pub fn plan_boot(store: &dyn Store, tenant: Uuid, id: Uuid) -> Result<Volume, ClusterError> {
    let volume = match store.volume(Scope::Tenant(tenant), id) {
        Ok(v) => v,
        Err(StoreError::NotFound { .. }) => {
            return Err(ClusterError::Invalid(format!(
                "Block Device Mapping is Invalid: failed to get volume {id}."
            )));
        }
        Err(e) => return Err(e.into()),
    };
    if volume.status != VolumeStatus::Available || volume.attachment.is_some() {
        return Err(ClusterError::Invalid(format!(
            "Invalid volume: volume {id} status must be 'available'. Currently in '{}'",
            volume.status.as_str()
        )));
    }
    if !volume.bootable || volume.image.is_none() {
        return Err(ClusterError::Invalid(format!(
            "Block Device {id} is not bootable."
        )));
    }
    Ok(volume)
}

/// Attaches `volume` (`available`) to `instance` as its root disk ([`ROOT_DEVICE`]), `in-use`
/// at once (its `node` is set when its node reports it), with `delete_on_termination`.
/// `Conflict` if the volume changed since it was checked.
pub fn begin_boot(
    store: &dyn Store,
    volume: &Volume,
    instance: Uuid,
    delete_on_termination: bool,
) -> Result<Volume, ClusterError> {
    let change = VolumeChange {
        expect: Some(VolumeStatus::Available),
        status: Some(VolumeStatus::InUse),
        attachment: Some(Some(VolumeAttachment {
            id: Uuid::new_v4(),
            instance,
            device: ROOT_DEVICE.to_string(),
            attached: SystemTime::now(),
            delete_on_termination,
        })),
        ..VolumeChange::default()
    };
    change_volume(store, volume.id, change)
}

/// Removes `volume` (visible in `scope`): its file first from the node that holds it, if one
/// does (`remove_data(node, volume)`), then its record. A node that cannot remove the file (or
/// cannot be reached) leaves the volume `error_deleting` (a new delete tries again): `Ok(false)`.
pub fn remove_volume(
    store: &dyn Store,
    scope: Scope,
    volume: &Volume,
    remove_data: impl FnOnce(Uuid, Uuid) -> Result<(), ClusterError>,
) -> Result<bool, StoreError> {
    if let Some(node) = volume.node
        && let Err(e) = remove_data(node, volume.id)
    {
        tracing::warn!(volume = %volume.id, %node, error = %e, "a volume's data not removed: error_deleting");
        let change = VolumeChange {
            status: Some(VolumeStatus::ErrorDeleting),
            ..VolumeChange::default()
        };
        store.change_volume(scope, volume.id, change, VolumeLimits::default())?;
        return Ok(false);
    }
    match store.delete_volume(scope, volume.id) {
        Ok(()) | Err(StoreError::NotFound { .. }) => Ok(true),
        Err(e) => Err(e),
    }
}

/// An attach that the rules allow, not made yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachPlan {
    /// The server.
    pub instance: Instance,
    /// The volume, `available`.
    pub volume: Volume,
    /// The device it gets (`vdb`).
    pub device: String,
}

impl AttachPlan {
    /// The volume's size in MiB, as ATTACH_VOLUME carries it (`Invalid` past `u32`).
    pub fn size_mb(&self) -> Result<u32, ClusterError> {
        self.volume.size_gb.checked_mul(1024).ok_or_else(|| {
            ClusterError::Invalid(format!(
                "volume {} is too large to attach ({} GiB)",
                self.volume.id, self.volume.size_gb
            ))
        })
    }
}

/// The server's state allows a volume `operation`, or `InvalidState`.
fn check_state(instance: &Instance, operation: &'static str) -> Result<(), ClusterError> {
    if attach_allowed(&instance.state) {
        Ok(())
    } else {
        Err(ClusterError::InvalidState {
            id: instance.id,
            state: instance.state.name().into(),
            operation,
        })
    }
}

/// A volume pinned to a node (its `node`) may not go to a server on another one.
fn check_pin(instance: &Instance, volume: &Volume) -> Result<(), ClusterError> {
    match (volume.node, instance.node) {
        (Some(pin), Some(node)) if pin != node => Err(ClusterError::Conflict(format!(
            "volume {} is on node {pin} (its file is there): it can only be attached to a server \
             on that node, and server {} runs on node {node}",
            volume.id, instance.id
        ))),
        _ => Ok(()),
    }
}

/// Checks an attach of `volume` to server `server` (visible in `scope`) as `device` (a name
/// [`device_name`] gives; `None`: the first free), and says what it will be. `NotFound` for an
/// unknown server, or a volume that is not the server's tenant's; `InvalidState` for a server
/// that cannot take it; `Invalid` (400, as Nova's) for a volume that is not `available`;
/// `Conflict` for a volume pinned to another node, or a device in use.
pub fn plan_attach(
    store: &dyn Store,
    scope: Scope,
    server: Uuid,
    volume: Uuid,
    device: Option<&str>,
) -> Result<AttachPlan, ClusterError> {
    let instance = store.instance(scope, server)?;
    let volume = store.volume(Scope::Tenant(instance.tenant), volume)?;
    check_state(&instance, "attach a volume")?;
    if let Some(a) = &volume.attachment {
        let to = if a.instance == server {
            "this server".to_string()
        } else {
            format!("server {}", a.instance)
        };
        return Err(ClusterError::Invalid(format!(
            "volume {} is {} and attached to {to}: only an available volume can be attached",
            volume.id,
            volume.status.as_str()
        )));
    }
    if volume.status != VolumeStatus::Available {
        return Err(ClusterError::Invalid(format!(
            "volume {} is {}: only an available volume can be attached",
            volume.id,
            volume.status.as_str()
        )));
    }
    check_pin(&instance, &volume)?;
    let attached = attached_to(store, &instance)?;
    let used: Vec<&str> = attached
        .iter()
        .filter_map(|v| v.attachment.as_ref().map(|a| a.device.as_str()))
        .collect();
    let device = choose_device(&used, device, server)?;
    Ok(AttachPlan {
        instance,
        volume,
        device,
    })
}

/// Makes the planned attach in the store: the volume from `available` to `to` (`attaching`, or
/// `in-use` where nothing reports it), with a new attachment of the server as the planned
/// device; `node` is set when given (the node that holds it now). `Conflict` if the volume
/// changed since it was planned.
pub fn begin_attach(
    store: &dyn Store,
    plan: &AttachPlan,
    to: VolumeStatus,
    node: Option<Uuid>,
) -> Result<Volume, ClusterError> {
    let change = VolumeChange {
        expect: Some(VolumeStatus::Available),
        status: Some(to),
        node: node.map(Some),
        attachment: Some(Some(VolumeAttachment {
            id: Uuid::new_v4(),
            instance: plan.instance.id,
            device: device_path(&plan.device),
            attached: SystemTime::now(),
            delete_on_termination: false,
        })),
        ..VolumeChange::default()
    };
    change_volume(store, plan.volume.id, change)
}

/// Checks a detach of `volume` from server `server` (visible in `scope`): the server and the
/// volume, `in-use` and attached to it. `NotFound` for an unknown server, or a volume that is
/// not the server's tenant's, or not attached to it (404, as Nova's); `InvalidState` for a
/// server that cannot take it; `Conflict` for a volume not `in-use`.
pub fn plan_detach(
    store: &dyn Store,
    scope: Scope,
    server: Uuid,
    volume: Uuid,
) -> Result<(Instance, Volume), ClusterError> {
    let instance = store.instance(scope, server)?;
    let volume = store.volume(Scope::Tenant(instance.tenant), volume)?;
    if volume
        .attachment
        .as_ref()
        .is_none_or(|a| a.instance != server)
    {
        return Err(ClusterError::Store(StoreError::NotFound {
            kind: "volume attachment",
            id: format!("{} on server {server}", volume.id),
        }));
    }
    if is_root(&volume) {
        return Err(ClusterError::Invalid(
            "Cannot detach a root device volume".into(),
        ));
    }
    if volume.status != VolumeStatus::InUse {
        return Err(ClusterError::Conflict(format!(
            "volume {} is {}: only an in-use volume can be detached",
            volume.id,
            volume.status.as_str()
        )));
    }
    check_state(&instance, "detach a volume")?;
    Ok((instance, volume))
}

/// Makes a detach in the store: the volume from `from` (`in-use`; anything attached, for a
/// forced detach) to `to` (`detaching`, or `available` at once, detached, where nothing reports
/// it). `Conflict` if it is not in `from`.
pub fn begin_detach(
    store: &dyn Store,
    volume: Uuid,
    from: VolumeStatus,
    to: VolumeStatus,
) -> Result<Volume, ClusterError> {
    let change = VolumeChange {
        expect: Some(from),
        status: Some(to),
        attachment: (to == VolumeStatus::Available).then_some(None),
        ..VolumeChange::default()
    };
    change_volume(store, volume, change)
}

/// Why an instance's volumes are released ([`release_instance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Its record goes: every volume is released, `available`, or `deleting` when it was
    /// attached with `delete_on_termination` (for its caller to [`remove_volume`]).
    Gone,
    /// Its node removed it while its record lives on (`exited` on no node): its data volumes are
    /// released `available` whatever their `delete_on_termination` (the server did not go: what
    /// is on them is the user's); its boot volume stays attached (a `start` boots the server
    /// from it again, on its node).
    Removed,
}

/// Releases the volumes attached to `instance`, detached with their `node` kept, as `why` says.
/// The volumes released.
pub fn release_instance(
    store: &dyn Store,
    instance: &Instance,
    why: Release,
) -> Result<Vec<Volume>, StoreError> {
    let mut released = Vec::new();
    for volume in attached_to(store, instance)? {
        if why == Release::Removed && is_root(&volume) {
            continue;
        }
        if let Some(v) = detach(store, volume.id, instance.id, why == Release::Gone)? {
            released.push(v);
        }
    }
    Ok(released)
}

/// Detaches volume `id` from `instance` in the store, whatever its status: `available`, or
/// `deleting` when it was attached with `delete_on_termination`; `None` if it is not attached to
/// it (any more).
pub fn release(store: &dyn Store, id: Uuid, instance: Uuid) -> Result<Option<Volume>, StoreError> {
    detach(store, id, instance, true)
}

/// [`release`], with `delete_on_termination` applied (`terminate`) or not (`available` whatever
/// it says).
fn detach(
    store: &dyn Store,
    id: Uuid,
    instance: Uuid,
    terminate: bool,
) -> Result<Option<Volume>, StoreError> {
    for _ in 0..RETRIES {
        let current = match store.volume(Scope::All, id) {
            Ok(v) => v,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(attachment) = current
            .attachment
            .as_ref()
            .filter(|a| a.instance == instance)
        else {
            return Ok(None);
        };
        let change = VolumeChange {
            expect: Some(current.status),
            status: Some(if terminate && attachment.delete_on_termination {
                VolumeStatus::Deleting
            } else {
                VolumeStatus::Available
            }),
            attachment: Some(None),
            ..VolumeChange::default()
        };
        match store.change_volume(Scope::All, id, change, VolumeLimits::default()) {
            Ok(v) => return Ok(Some(v)),
            Err(StoreError::Conflict(_)) => continue,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Conflict(format!("volume {id} keeps changing")))
}

/// `change` to volume `id` (no quota applies: nothing grows).
fn change_volume(
    store: &dyn Store,
    id: Uuid,
    change: VolumeChange,
) -> Result<Volume, ClusterError> {
    store
        .change_volume(Scope::All, id, change, VolumeLimits::default())
        .map_err(|e| match e {
            StoreError::Conflict(message) => {
                ClusterError::Conflict(format!("volume {id} changed meanwhile: {message}"))
            }
            other => other.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_vdb_to_vdz() {
        assert_eq!(device_name("/dev/vdb").as_deref(), Some("vdb"));
        assert_eq!(device_name("vdz").as_deref(), Some("vdz"));
        for bad in [
            "/dev/vda",
            "vda",
            "/dev/sdb",
            "/dev/vdbb",
            "vd",
            "",
            "/dev/",
            "auto",
        ] {
            assert_eq!(device_name(bad), None, "{bad}");
        }
        assert_eq!(device_path("vdc"), "/dev/vdc");
    }

    #[test]
    fn the_first_free_device_is_chosen_and_a_taken_one_refused() {
        let s = Uuid::nil();
        assert_eq!(choose_device(&[], None, s).unwrap(), "vdb");
        assert_eq!(choose_device(&["/dev/vdb"], None, s).unwrap(), "vdc");
        assert_eq!(
            choose_device(&["/dev/vdc"], None, s).unwrap(),
            "vdb",
            "a gap is filled"
        );
        assert_eq!(choose_device(&["/dev/vdb"], Some("vdd"), s).unwrap(), "vdd");
        assert!(matches!(
            choose_device(&["/dev/vdb"], Some("vdb"), s),
            Err(ClusterError::Conflict(_))
        ));
        let all: Vec<String> = DEVICES
            .map(|x| format!("/dev/vd{}", char::from(x)))
            .collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        assert!(matches!(
            choose_device(&all, None, s),
            Err(ClusterError::Conflict(_))
        ));
    }

    #[test]
    fn only_active_stopped_and_paused_servers_take_volumes() {
        for ok in [
            InstanceState::Active,
            InstanceState::Exited,
            InstanceState::Paused,
        ] {
            assert!(attach_allowed(&ok), "{ok:?}");
        }
        for no in [
            InstanceState::Pending,
            InstanceState::Stopping,
            InstanceState::Suspended,
            InstanceState::Deleted,
            InstanceState::Missing,
            InstanceState::Rebuilding,
            InstanceState::Resized,
            InstanceState::Error("x".into()),
        ] {
            assert!(!attach_allowed(&no), "{no:?}");
        }
    }
}
