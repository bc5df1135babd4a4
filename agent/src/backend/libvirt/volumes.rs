//! Volumes in the libvirt backend: the local backend of `docs/storage.md`. A volume is one
//! qcow2 file on the node that first attached it, `<volumes>/<uuid>.qcow2`, made on that first
//! attach (blank, of the size the ATTACH_VOLUME gives, or from an image fetched through the
//! image cache) under a temporary name and renamed when whole, so that a crash leaves no
//! half-made volume behind.
//!
//! A volume is attached as a virtio disk (`<target dev='vdX' bus='virtio'/>`) whose serial is
//! the first 20 hex digits of its UUID ([`serial`]): what the guest reads in
//! `/sys/block/vdX/serial`, and what the backend looks for in the domain's XML to know whether
//! the volume is attached (live and in the definition), which makes attach and detach
//! idempotent. Attach: to the running (or paused) guest first (a hot plug), then to the
//! definition, so that it stays over a power cycle; a stopped instance's definition only.
//! Detach: the guest is asked to release the device (an ACPI unplug) and the backend waits up
//! to [`super::LibvirtConfig::detach_timeout`] for it; a guest that does not release it keeps it and
//! the detach fails, unless forced, when the definition loses it anyway (the running QEMU keeps
//! the file open, and locked, until it powers off).

use std::path::{Path, PathBuf};
use std::time::Instant;
use uuid::Uuid;
use virt::domain::Domain;

use super::conn::ConnError;
use super::domain::our_domain;
use super::images::{self, Image};
use super::xml::escape;
use super::{Inner, LibvirtBackend};
use crate::backend::BackendError;
use crate::model::VolumeSpec;

/// The serial a volume's disk carries (virtio-blk keeps 20 bytes of it).
pub fn serial(volume: Uuid) -> String {
    let mut hex = volume.simple().to_string();
    hex.truncate(20);
    hex
}

/// The `<disk>` element that attaches `file` as `device`.
pub fn disk_xml(file: &Path, device: &str, volume: Uuid) -> String {
    format!(
        "<disk type='file' device='disk'>\n  <driver name='qemu' type='qcow2'/>\n  <source file='{}'/>\n  <target dev='{}' bus='virtio'/>\n  <serial>{}</serial>\n</disk>\n",
        escape(&file.to_string_lossy()),
        escape(device),
        serial(volume)
    )
}

/// Whether a domain's XML has the disk with this serial.
fn has_serial(xml: &str, serial: &str) -> bool {
    xml.contains(&format!("<serial>{serial}</serial>"))
}

const LIVE: u32 = virt::sys::VIR_DOMAIN_AFFECT_LIVE;
const CONFIG: u32 = virt::sys::VIR_DOMAIN_AFFECT_CONFIG;

/// Whether the domain has the disk live (running or paused) and in its definition.
fn where_attached(d: &Domain, serial: &str) -> Result<(bool, bool), virt::error::Error> {
    let live = d.is_active()? && has_serial(&d.get_xml_desc(0)?, serial);
    let config = has_serial(&d.get_xml_desc(virt::sys::VIR_DOMAIN_XML_INACTIVE)?, serial);
    Ok((live, config))
}

fn failed(what: &str, e: ConnError) -> BackendError {
    match e {
        ConnError::NoDomain => BackendError::NotFound,
        e => BackendError::Other(format!("{what}: {e}")),
    }
}

impl Inner {
    /// The file of a volume.
    pub(super) fn volume_path(&self, volume: Uuid) -> PathBuf {
        self.config.volumes.join(format!("{volume}.qcow2"))
    }

    /// The volume's file, made first if the node has none (blocking).
    fn volume_file(&self, volume: &VolumeSpec) -> Result<PathBuf, BackendError> {
        self.reach(&[&self.config.volumes])?;
        let path = self.volume_path(volume.id);
        if path.exists() {
            return Ok(path);
        }
        if volume.size_mb == 0 {
            return Err(BackendError::Other(format!(
                "this node holds no volume {} and was not told its size",
                volume.id
            )));
        }
        let from = match &volume.image {
            None => None,
            Some(name) => match self.store.resolve(name) {
                Ok(Image::Disk { path, format }) => Some((path, format)),
                Ok(Image::Kernel { .. } | Image::Iso { .. }) => {
                    return Err(BackendError::Image(format!(
                        "image {name} is a kernel or an ISO, not a disk a volume can hold"
                    )));
                }
                Err(e) => return Err(BackendError::Image(e.to_string())),
            },
        };
        self.make_volume(
            volume.id,
            volume.size_mb,
            from.as_ref().map(|(p, f)| (p.as_path(), *f)),
        )
        .map_err(BackendError::Other)
    }

    /// Makes a volume's file (blocking): blank, or the image `from`, grown to `size_mb`. Made
    /// under a temporary name and renamed once whole; for the agent's user alone (libvirt gives
    /// it to QEMU while a domain uses it).
    pub(super) fn make_volume(
        &self,
        volume: Uuid,
        size_mb: u32,
        from: Option<(&Path, images::DiskFormat)>,
    ) -> Result<PathBuf, String> {
        let path = self.volume_path(volume);
        let part = self.config.volumes.join(format!("{volume}.part"));
        let made = match from {
            None => images::make_blank(&part, size_mb),
            Some((image, format)) => {
                images::convert(image, format, &part).and_then(|()| images::grow(&part, size_mb))
            }
        }
        .map_err(|e| e.to_string())
        .and_then(|()| {
            support::private::restrict(&part)
                .and_then(|()| std::fs::rename(&part, &path))
                .map_err(|e| e.to_string())
        });
        if let Err(why) = made {
            let _ = std::fs::remove_file(&part);
            return Err(format!("making volume {volume}: {why}"));
        }
        tracing::info!(%volume, size_mb, from_image = from.is_some(), "volume made");
        Ok(path)
    }

    /// Attach, on the calling thread (blocking).
    fn attach_blocking(&self, instance: Uuid, volume: &VolumeSpec) -> Result<(), BackendError> {
        let path = self.volume_file(volume)?;
        let xml = disk_xml(&path, &volume.device, volume.id);
        let serial = serial(volume.id);
        let owner = self.config.owner;
        self.conn
            .call(|c| {
                let Some(d) = our_domain(c, instance, owner)? else {
                    return Ok(false);
                };
                let (live, config) = where_attached(&d, &serial)?;
                let hot = d.is_active()? && !live;
                if hot {
                    d.attach_device_flags(&xml, LIVE)?;
                }
                if !config && let Err(e) = d.attach_device_flags(&xml, CONFIG) {
                    if hot {
                        let _ = d.detach_device_flags(&xml, LIVE);
                    }
                    return Err(e);
                }
                Ok(true)
            })
            .map_err(|e| failed("attaching the volume", e))?
            .then_some(())
            .ok_or(BackendError::NotFound)
    }
}

impl LibvirtBackend {
    /// [`crate::Backend::attach_volume`]: the image a new volume is made from is fetched first.
    pub(super) async fn attach(
        &self,
        instance: Uuid,
        volume: &VolumeSpec,
    ) -> Result<(), BackendError> {
        let fresh = !tokio::fs::try_exists(self.0.volume_path(volume.id))
            .await
            .unwrap_or(false);
        let _lease = match &volume.image {
            Some(image) if fresh => self.image_lease(image).await?,
            _ => None,
        };
        let volume = volume.clone();
        self.0
            .blocking(move |b| b.attach_blocking(instance, &volume))
            .await?
    }

    /// [`crate::Backend::detach_volume`].
    pub(super) async fn detach(
        &self,
        instance: Uuid,
        volume: &VolumeSpec,
        force: bool,
    ) -> Result<(), BackendError> {
        let xml = disk_xml(&self.0.volume_path(volume.id), &volume.device, volume.id);
        let serial = serial(volume.id);
        let owner = self.0.config.owner;
        let (x, s) = (xml.clone(), serial.clone());
        let unplugging = self
            .0
            .conn
            .run(move |c| {
                let Some(d) = our_domain(c, instance, owner)? else {
                    return Ok(None);
                };
                let (live, _) = where_attached(&d, &s)?;
                if live {
                    d.detach_device_flags(&x, LIVE)?;
                }
                Ok(Some(live))
            })
            .await
            .map_err(|e| failed("detaching the volume", e))?
            .ok_or(BackendError::NotFound)?;
        if unplugging {
            let released = self.released(instance, &serial).await?;
            if !released && !force {
                return Err(BackendError::Other(format!(
                    "the guest did not release {} (volume {}) within {} s: it may still use it; \
                     a forced detach takes it away anyway",
                    volume.device,
                    volume.id,
                    self.0.config.detach_timeout.as_secs()
                )));
            }
            if !released {
                tracing::warn!(%instance, volume = %volume.id, "forced detach: the guest still has the device until it powers off");
            }
        }
        self.0
            .conn
            .run(move |c| {
                let Some(d) = our_domain(c, instance, owner)? else {
                    return Ok(false);
                };
                let (_, config) = where_attached(&d, &serial)?;
                if config {
                    d.detach_device_flags(&xml, CONFIG)?;
                }
                Ok(true)
            })
            .await
            .map_err(|e| failed("detaching the volume", e))?
            .then_some(())
            .ok_or(BackendError::NotFound)
    }

    /// Waits up to the detach timeout for the running guest to release the disk: true once it
    /// has (or no longer runs).
    async fn released(&self, instance: Uuid, serial: &str) -> Result<bool, BackendError> {
        let deadline = Instant::now() + self.0.config.detach_timeout;
        let owner = self.0.config.owner;
        loop {
            let s = serial.to_string();
            let live = self
                .0
                .conn
                .run(move |c| match our_domain(c, instance, owner)? {
                    Some(d) => Ok(where_attached(&d, &s)?.0),
                    None => Ok(false),
                })
                .await
                .map_err(|e| failed("detaching the volume", e))?;
            if !live {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(
                self.0
                    .config
                    .poll
                    .min(std::time::Duration::from_millis(100)),
            )
            .await;
        }
    }

    /// [`crate::Backend::delete_volume`]: its file goes.
    pub(super) async fn remove_volume(&self, volume: Uuid) -> Result<(), BackendError> {
        let path = self.0.volume_path(volume);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {
                tracing::info!(%volume, "volume removed");
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(BackendError::Other(format!("{}: {e}", path.display()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_carries_the_volume_serial_and_device() {
        let v = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        assert_eq!(serial(v), "0123456789abcdef0123");
        let xml = disk_xml(Path::new("/v/x'.qcow2"), "vdc", v);
        assert!(xml.contains("<source file='/v/x&apos;.qcow2'/>"), "{xml}");
        assert!(xml.contains("<target dev='vdc' bus='virtio'/>"));
        assert!(has_serial(&xml, &serial(v)));
        assert!(!has_serial(&xml, &serial(Uuid::from_u128(1))));
    }
}
