//! Images that boot a kernel directly, as Glance and Nova's libvirt driver name them:
//!
//! - a kernel image (`disk_format` `aki`) boots by itself, with the initrd its `ramdisk_id`
//!   property names (an `ari` image), if any, and a blank data disk of the flavor's size;
//! - a disk image (qcow2 or raw) with a `kernel_id` property (and optionally `ramdisk_id`) is
//!   the root disk of a VM that boots that kernel;
//! - `os_command_line` adds kernel arguments (with a root disk and without it, `root=/dev/vda`
//!   is said for the guest, as Nova does);
//! - an initrd image never boots by itself, nor does an ISO with a `kernel_id`.
//!
//! The kernel and initrd are looked up as the tenant sees images (one tenant never boots
//! another's private kernel through a property) and must be active images of their kind whose
//! data was uploaded through the Image API (the node fetches them as it fetches a disk image:
//! START's `kernel`, `docs/protocol.md`). A snapshot of a server that booted a kernel keeps the
//! properties that name it ([`snapshot_properties`]): its disk boots with the same kernel.

use std::collections::BTreeMap;

use ssntp::payload::KernelBoot;
use store::{Image, ImageKind, ImageStatus, Scope, Store, StoreError};
use uuid::Uuid;

/// The property that names a disk image's kernel.
pub const KERNEL_ID: &str = "kernel_id";
/// The property that names the initrd booted with a kernel.
pub const RAMDISK_ID: &str = "ramdisk_id";
/// The property that holds extra kernel arguments.
pub const COMMAND_LINE: &str = "os_command_line";

/// How an image boots when it boots a kernel directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelPlan {
    /// START's `kernel`.
    pub boot: KernelBoot,
    /// Whether the image itself is the root disk (a disk image with a `kernel_id`); a kernel
    /// image boots with no root image.
    pub root: bool,
}

/// Why an image that names a kernel cannot boot (a 400 at server create; the instance's fault
/// when its START is built).
pub type KernelError = String;

/// The image `id` (a `what`: kernel or initrd) of `kind`, as `scope` sees it, with uploaded data.
fn part(
    store: &dyn Store,
    scope: Scope,
    image: Uuid,
    what: &str,
    id: &str,
    kind: ImageKind,
) -> Result<Result<String, KernelError>, StoreError> {
    let Ok(part_id) = Uuid::parse_str(id) else {
        return Ok(Err(format!(
            "image {image}: its {what} {id:?} is not an image ID"
        )));
    };
    let found = match store.image(scope, part_id) {
        Ok(found) => found,
        Err(StoreError::NotFound { .. }) => {
            return Ok(Err(format!(
                "image {image}: its {what} image {part_id} could not be found"
            )));
        }
        Err(e) => return Err(e),
    };
    let want = if kind == ImageKind::Kernel {
        "aki"
    } else {
        "ari"
    };
    if found.kind != kind {
        return Ok(Err(format!(
            "image {image}: its {what} image {part_id} is not an {want} image"
        )));
    }
    if found.status != ImageStatus::Active || !found.reference.starts_with("sha512/") {
        return Ok(Err(format!(
            "image {image}: its {what} image {part_id} has no data uploaded (it is {})",
            found.status.as_str()
        )));
    }
    Ok(Ok(found.reference))
}

/// How `image` boots a kernel, as `scope` (the booting tenant) sees the images it names: `None`
/// for an image that boots otherwise; the inner error says why the image cannot boot at all.
/// `Err` only for a store that failed.
pub fn plan(
    store: &dyn Store,
    scope: Scope,
    image: &Image,
) -> Result<Result<Option<KernelPlan>, KernelError>, StoreError> {
    let props = &image.props.properties;
    let (kernel, root) = match (image.kind, props.get(KERNEL_ID)) {
        (ImageKind::Ramdisk, _) => {
            return Ok(Err(format!(
                "image {} is an initrd (ari): it boots only with a kernel image that names it \
                 as its {RAMDISK_ID}",
                image.id
            )));
        }
        (ImageKind::Kernel, _) => (image.reference.clone(), false),
        (ImageKind::Iso, Some(_)) => {
            return Ok(Err(format!(
                "image {} is an ISO: it boots as a CD-ROM, not with a {KERNEL_ID}",
                image.id
            )));
        }
        (_, Some(id)) => match part(store, scope, image.id, "kernel", id, ImageKind::Kernel)? {
            Ok(reference) => (reference, true),
            Err(why) => return Ok(Err(why)),
        },
        (_, None) => return Ok(Ok(None)),
    };
    let initrd = match props.get(RAMDISK_ID) {
        Some(id) => match part(store, scope, image.id, "initrd", id, ImageKind::Ramdisk)? {
            Ok(reference) => Some(reference),
            Err(why) => return Ok(Err(why)),
        },
        None => None,
    };
    let cmdline = match (props.get(COMMAND_LINE), root) {
        (Some(line), _) => Some(line.clone()),
        (None, true) => Some("root=/dev/vda".to_string()),
        (None, false) => None,
    };
    let boot = KernelBoot {
        kernel,
        initrd,
        cmdline,
    };
    if let Err(why) = boot.check() {
        return Ok(Err(format!("image {}: {why}", image.id)));
    }
    Ok(Ok(Some(KernelPlan { boot, root })))
}

/// The properties a snapshot of a server booted from `image` keeps so that it boots the same
/// kernel: the image's `kernel_id`, `ramdisk_id` and `os_command_line`, or for a kernel image
/// booted by itself, its own ID as the `kernel_id` (the snapshot is the server's data disk,
/// which becomes the root disk, so `os_command_line` is kept only when the image said one).
pub fn snapshot_properties(image: &Image) -> BTreeMap<String, String> {
    let props = &image.props.properties;
    let mut kept: BTreeMap<String, String> = [KERNEL_ID, RAMDISK_ID, COMMAND_LINE]
        .into_iter()
        .filter_map(|k| props.get(k).map(|v| (k.to_string(), v.clone())))
        .collect();
    if image.kind == ImageKind::Kernel {
        kept.insert(KERNEL_ID.into(), image.id.to_string());
    }
    kept
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use store::{ImageProps, Visibility};

    fn image(kind: ImageKind, props: &[(&str, &str)]) -> Image {
        let at = std::time::SystemTime::UNIX_EPOCH;
        Image {
            id: Uuid::from_u128(1),
            owner: Some(Uuid::from_u128(2)),
            visibility: Visibility::Private,
            name: "i".into(),
            kind,
            reference: "sha512/0".into(),
            created: at,
            status: ImageStatus::Active,
            file: None,
            props: ImageProps {
                properties: props
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..ImageProps::default()
            },
            updated: at,
        }
    }

    #[test]
    fn a_snapshot_keeps_the_kernel_its_server_booted() {
        let k = Uuid::from_u128(1).to_string();
        // A kernel image booted by itself: the snapshot (its data disk) boots that kernel.
        let kept = snapshot_properties(&image(ImageKind::Kernel, &[(RAMDISK_ID, "r")]));
        assert_eq!(kept.get(KERNEL_ID), Some(&k));
        assert_eq!(kept.get(RAMDISK_ID).map(String::as_str), Some("r"));
        // A disk that names a kernel: its three properties, nothing else.
        let disk = image(
            ImageKind::Qcow2,
            &[
                (KERNEL_ID, "k"),
                (COMMAND_LINE, "quiet"),
                ("os_distro", "x"),
            ],
        );
        let kept = snapshot_properties(&disk);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept.get(KERNEL_ID).map(String::as_str), Some("k"));
        assert_eq!(kept.get(COMMAND_LINE).map(String::as_str), Some("quiet"));
        // A disk that boots by itself: nothing.
        assert!(snapshot_properties(&image(ImageKind::Raw, &[])).is_empty());
    }
}
