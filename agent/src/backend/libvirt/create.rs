//! Making an instance's domain: its files (the overlay, the data disk or boot volume, the
//! initrd with its seed, the seed ISO) and its definition, from the START's spec and its image.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use virt::domain::Domain;
use virt::error::ErrorNumber;

use super::images::{self, Image, ImageError};
use super::seed::Seed;
use super::xml::{self, Boot, DomainSpec};
use super::{Inner, Tap, access, cache, exists_error, launch};
use crate::backend::BackendError;
use crate::model::{InstanceSpec, VmKind};

impl Inner {
    /// Create, on the calling thread (blocking).
    pub(super) fn create_blocking(
        &self,
        spec: &InstanceSpec,
        tap: Option<Tap>,
    ) -> Result<(), BackendError> {
        let instance = spec.instance;
        if spec.kind == VmKind::Container {
            return Err(BackendError::Launch(
                "the libvirt backend runs VMs, not containers".into(),
            ));
        }
        let (image, root) = self
            .images_of(spec)
            .map_err(|e| BackendError::Image(e.to_string()))?;
        let name = xml::domain_name(instance);
        let taken = self
            .conn
            .call(|c| {
                let by_uuid = match Domain::lookup_by_uuid(c, instance) {
                    Ok(_) => true,
                    Err(e) if e.code() == ErrorNumber::NoDomain => false,
                    Err(e) => return Err(e),
                };
                let by_name = match Domain::lookup_by_name(c, &name) {
                    Ok(_) => true,
                    Err(e) if e.code() == ErrorNumber::NoDomain => false,
                    Err(e) => return Err(e),
                };
                Ok(by_uuid || by_name)
            })
            .map_err(launch)?;
        if taken {
            return Err(BackendError::Exists);
        }
        let dir = self.instance_dir(instance);
        // Files without a domain: ours, from a create cut short. Start again.
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| BackendError::Other(e.to_string()))?;
        }
        let result = self.make(spec, (&image, root.as_ref()), &dir, &name, tap);
        if result.is_err()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(%instance, error = %e, "removing a failed instance's files");
        }
        result
    }

    /// The image a START boots, and the root disk image a kernel boots with (START's `image`
    /// beside its `kernel`; an empty `image` is none): a disk, never an ISO or a kernel.
    fn images_of(&self, spec: &InstanceSpec) -> Result<(Image, Option<Image>), ImageError> {
        let Some(k) = &spec.kernel else {
            return Ok((self.store.resolve(&spec.image)?, None));
        };
        let kernel = self.store.resolve_kernel(
            &k.kernel,
            k.initrd.as_deref(),
            k.cmdline.as_deref().unwrap_or(""),
        )?;
        if spec.image.is_empty() {
            return Ok((kernel, None));
        }
        match self.store.resolve(&spec.image)? {
            root @ Image::Disk { .. } => Ok((kernel, Some(root))),
            _ => Err(ImageError::Corrupt {
                name: spec.image.clone(),
                why: "a kernel's root disk must be a qcow2 or raw disk image".into(),
            }),
        }
    }

    /// Makes the instance's files and defines its domain, from its image and the root disk
    /// image a kernel boots with.
    fn make(
        &self,
        spec: &InstanceSpec,
        (image, root): (&Image, Option<&Image>),
        dir: &Path,
        name: &str,
        tap: Option<Tap>,
    ) -> Result<(), BackendError> {
        let instance = spec.instance;
        let io = |e: std::io::Error| BackendError::Launch(format!("{}: {e}", dir.display()));
        let mut reached: Vec<&Path> = Vec::new();
        for i in std::iter::once(image).chain(root) {
            match i {
                Image::Disk { path, .. } | Image::Iso { path } => reached.push(path),
                Image::Kernel { kernel, initrd, .. } => {
                    reached.push(kernel);
                    reached.extend(initrd.as_deref());
                }
            }
        }
        reached.push(&self.config.instances);
        let qemu = self.reach(&reached)?;
        std::fs::create_dir_all(dir).map_err(io)?;
        let pinned = cache::named_hashes(spec);
        if !pinned.is_empty() {
            // The cached data this instance is made from is kept while the instance is.
            std::fs::write(dir.join(cache::PIN_FILE), pinned.join("\n")).map_err(io)?;
        }
        // QEMU runs as another user under qemu:///system: it must be able to reach the files
        // (libvirt gives it the files themselves). Where it is known, only its group may;
        // elsewhere (a remote URI) anyone may search the directory.
        match qemu {
            Some(user) => access::open_to(&[dir.to_path_buf()], user.gid, access::INSTANCE_DIR),
            None => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)),
        }
        .map_err(io)?;
        let seed = Seed::new(instance, spec.user_data.as_deref(), &spec.meta_data);
        let seed_iso = dir.join("seed.iso");
        // The user data may hold secrets: the seed is the agent's user's alone (0600, whatever
        // the umask), as are the disks and the initrd below. QEMU still reads them: under
        // qemu:///system libvirt's DAC security driver (`dynamic_ownership`, on unless qemu.conf
        // turns it off; scripts/libvirt.sh leaves qemu.conf as packaged) gives each file it
        // hands QEMU to QEMU's user (Debian: libvirt-qemu) when the domain starts. Checked with
        // scripts/libvirt.sh's libvirtd: a root:root 0600 seed.iso is libvirt-qemu:libvirt-qemu
        // 0600 while its domain runs, and stays so after (libvirt gives read-only disks, the
        // seed's CD-ROM, no owner back); the instance's directory (0750, QEMU's group) keeps
        // everyone else out. Under qemu:///session QEMU is the agent's own user.
        seed.write_iso(&seed_iso).map_err(BackendError::Launch)?;
        // A boot volume (block device mapping): the root disk is the volume's file, made from
        // the image on first use, and outlives the instance.
        let boot_volume = spec.disks.iter().find(|d| d.boot && !d.ephemeral);
        if boot_volume.is_some() {
            self.reach(&[&self.config.volumes])?;
        }
        // What a kernel's or an ISO's guest writes outlives a stop, a reboot and an agent
        // restart: its boot volume, or a blank disk of the flavor's size, kept with the
        // instance.
        let data_disk = || -> Result<Option<PathBuf>, BackendError> {
            Ok(match spec.resources.disk_mb {
                _ if let Some(volume) = boot_volume => {
                    let file = self.volume_path(volume.id);
                    Some(if file.exists() {
                        file
                    } else {
                        self.make_volume(volume.id, volume.size_mb.max(1), None)
                            .map_err(BackendError::Launch)?
                    })
                }
                0 => None,
                size_mb => {
                    let disk = dir.join("disk.qcow2");
                    images::make_blank(&disk, size_mb)
                        .map_err(|e| BackendError::Launch(e.to_string()))?;
                    support::private::restrict(&disk).map_err(io)?;
                    Some(disk)
                }
            })
        };
        // A root disk made from a disk image: the boot volume's file (made from the image on
        // first use), or the instance's own overlay on the image.
        let root_disk =
            |path: &Path, format: images::DiskFormat| -> Result<PathBuf, BackendError> {
                if let Some(volume) = boot_volume {
                    let file = self.volume_path(volume.id);
                    return if file.exists() {
                        Ok(file)
                    } else {
                        let size_mb = volume.size_mb.max(spec.resources.disk_mb);
                        self.make_volume(volume.id, size_mb, Some((path, format)))
                            .map_err(BackendError::Image)
                    };
                }
                let overlay = dir.join("disk.qcow2");
                images::make_overlay(path, format, &overlay, spec.resources.disk_mb).map_err(
                    |why| {
                        BackendError::Image(
                            ImageError::Corrupt {
                                name: spec.image.clone(),
                                why: why.to_string(),
                            }
                            .to_string(),
                        )
                    },
                )?;
                support::private::restrict(&overlay).map_err(io)?;
                Ok(overlay)
            };
        let boot = match image {
            Image::Iso { path } => Boot::Cdrom {
                iso: path.clone(),
                data: data_disk()?,
            },
            Image::Disk { path, format } => Boot::Disk {
                overlay: root_disk(path, *format)?,
            },
            Image::Kernel {
                kernel,
                initrd,
                cmdline,
            } => {
                let mut bytes = match initrd {
                    Some(initrd) => std::fs::read(initrd).map_err(|e| {
                        BackendError::Image(format!("image {:?}: initrd: {e}", spec.image))
                    })?,
                    // The seed alone is the initramfs: the kernel finds no /init in it and
                    // mounts its root disk.
                    None => Vec::new(),
                };
                while !bytes.len().is_multiple_of(4) {
                    bytes.push(0);
                }
                bytes.extend_from_slice(&seed.cpio());
                let own = dir.join("initrd");
                // The user data may hold secrets (a CNCI's key): for root only, as the seed.
                support::private::write(&own, &bytes).map_err(io)?;
                let mut line = format!("console=ttyS0 panic=1 cumulo.instance={instance}");
                if !cmdline.is_empty() {
                    line.push(' ');
                    line.push_str(cmdline);
                }
                let data = match root {
                    Some(Image::Disk { path, format }) => Some(root_disk(path, *format)?),
                    _ => data_disk()?,
                };
                Boot::Kernel {
                    kernel: kernel.clone(),
                    initrd: own,
                    cmdline: line,
                    data,
                }
            }
        };
        let domain = DomainSpec {
            name: name.to_string(),
            uuid: instance,
            kind: self.kind,
            vcpus: spec.resources.vcpus.max(1),
            mem_mb: spec.resources.mem_mb.max(16),
            boot,
            seed: seed_iso,
            console: dir.join("console.log"),
            nic: tap.map(|t| (t.name, t.mac)).or_else(|| spec.nic.as_ref().and_then(|nic| {
                let tap = crate::net::tap_name(instance);
                if Path::new("/sys/class/net").join(&tap).exists() {
                    Some((tap, nic.mac))
                } else {
                    // Tenant networking makes the tap before the VM (crate::net::NetBackend);
                    // without it the VM has no NIC rather than failing to start.
                    tracing::warn!(%instance, %tap, "no tap for the instance's NIC: started without one");
                    None
                }
            })),
            tenant: spec.tenant,
            image: spec.image.clone(),
            owner: self.config.owner,
        };
        let text = domain.render();
        let xml_file = dir.join("domain.xml");
        support::private::write(&xml_file, &text).map_err(io)?;
        match self.conn.call(|c| Domain::define_xml(c, &text)) {
            Ok(_) => Ok(()),
            Err(e) if exists_error(&e) => Err(BackendError::Exists),
            Err(e) => Err(launch(e)),
        }
    }
}
