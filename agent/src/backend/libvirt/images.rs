//! The image store: a directory of images, named as a START names them.
//!
//! - A **disk image** is a file `<name>.qcow2` or `<name>.raw`. Each instance boots from its own
//!   qcow2 overlay on it ([`make_overlay`]), so the shared base is only ever read; the overlay
//!   is as large as the START's disk requirement when that is more than the base.
//! - An **ISO image** (uploaded data whose magic says ISO 9660) boots as a CD-ROM, with a blank
//!   data disk of the START's disk size beside it.
//! - A **kernel+initrd image** is a directory `<name>/` holding `kernel` (a bzImage), `initrd`
//!   and optionally `cmdline` (extra kernel arguments, one line). QEMU boots it directly; this
//!   is what tests and `cumulo up` use.
//!
//! A name that is not a plain file name, an image that is not there, or one whose content is
//! not what its kind says (checked by magic numbers; qcow2 and raw also with `qemu-img info`)
//! is an [`ImageError`]: START_FAILURE `image_failure`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The format of a disk image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskFormat {
    /// qcow2.
    Qcow2,
    /// Raw bytes.
    Raw,
}

impl DiskFormat {
    /// The name `qemu-img` and libvirt use.
    pub fn name(self) -> &'static str {
        match self {
            DiskFormat::Qcow2 => "qcow2",
            DiskFormat::Raw => "raw",
        }
    }
}

/// An image found in the store, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A disk to overlay.
    Disk {
        /// The base file.
        path: PathBuf,
        /// Its format.
        format: DiskFormat,
    },
    /// An ISO 9660 image to boot as a CD-ROM.
    Iso {
        /// The file.
        path: PathBuf,
    },
    /// A kernel and initrd to boot directly.
    Kernel {
        /// The kernel.
        kernel: PathBuf,
        /// The initrd, if any (the node's seed is appended to it, or is the whole initrd).
        initrd: Option<PathBuf>,
        /// Extra kernel arguments.
        cmdline: String,
    },
}

/// Why an image cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Not a plain name (empty, too long, a path, a hidden file).
    #[error("{0:?} is not a valid image name")]
    BadName(String),
    /// Not in the store.
    #[error("no image {name:?} in {dir}")]
    Missing {
        /// The name.
        name: String,
        /// The store.
        dir: PathBuf,
    },
    /// There, but not what its kind says.
    #[error("image {name:?} is corrupt: {why}")]
    Corrupt {
        /// The name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// It could not be read, or an overlay could not be made.
    #[error("image {name:?}: {why}")]
    Io {
        /// The name.
        name: String,
        /// What failed.
        why: String,
    },
}

/// The image store.
#[derive(Debug, Clone)]
pub struct ImageStore {
    dir: PathBuf,
}

/// Whether `name` is usable as a file name in the store.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The first `n` bytes of a file (fewer if it is shorter).
fn head(path: &Path, n: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n);
    std::fs::File::open(path)?
        .take(n as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

impl ImageStore {
    /// A store over `dir` (made on first use by whoever fills it).
    pub fn new(dir: impl Into<PathBuf>) -> ImageStore {
        ImageStore { dir: dir.into() }
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Finds and checks the image called `name`: a name in the store, or `sha512/<hash>`, data
    /// in the image cache ([`super::cache`]; a qcow2 or raw disk or an ISO 9660 image, told
    /// apart by their magic).
    pub fn resolve(&self, name: &str) -> Result<Image, ImageError> {
        if let Some(hash) = super::cache::named_hash(name) {
            return self.cached(name, hash);
        }
        if !valid_name(name) {
            return Err(ImageError::BadName(name.to_string()));
        }
        let corrupt = |why: &str| ImageError::Corrupt {
            name: name.to_string(),
            why: why.to_string(),
        };
        let io = |e: std::io::Error| ImageError::Io {
            name: name.to_string(),
            why: e.to_string(),
        };
        let kernel_dir = self.dir.join(name);
        if kernel_dir.is_dir() {
            let kernel = kernel_dir.join("kernel");
            let initrd = kernel_dir.join("initrd");
            check_kernel(&kernel).map_err(|why| corrupt(&why))?;
            check_initrd(&initrd).map_err(|why| corrupt(&why))?;
            let cmdline = match std::fs::read_to_string(kernel_dir.join("cmdline")) {
                Ok(text) => text.lines().next().unwrap_or("").trim().to_string(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                Err(e) => return Err(io(e)),
            };
            return Ok(Image::Kernel {
                kernel,
                initrd: Some(initrd),
                cmdline,
            });
        }
        for (ext, format) in [("qcow2", DiskFormat::Qcow2), ("raw", DiskFormat::Raw)] {
            let path = self.dir.join(format!("{name}.{ext}"));
            if !path.is_file() {
                continue;
            }
            let magic = head(&path, 4).map_err(io)?;
            if format == DiskFormat::Qcow2 && magic != b"QFI\xfb" {
                return Err(corrupt("not a qcow2 file"));
            }
            if format == DiskFormat::Raw && magic.is_empty() {
                return Err(corrupt("empty"));
            }
            qemu_img_info(&path, format).map_err(|why| corrupt(&why.to_string()))?;
            return Ok(Image::Disk { path, format });
        }
        Err(ImageError::Missing {
            name: name.to_string(),
            dir: self.dir.clone(),
        })
    }
}

/// Whether `kernel` is an x86 bzImage; why not otherwise.
fn check_kernel(kernel: &Path) -> Result<(), String> {
    let k = head(kernel, 0x210).map_err(|e| format!("kernel: {e}"))?;
    // A bzImage has "HdrS" at 0x202 (the x86 boot protocol header).
    if k.get(0x202..0x206) != Some(b"HdrS".as_slice()) {
        return Err("kernel is not a bzImage".into());
    }
    Ok(())
}

/// Whether `initrd` is a cpio archive, plain or compressed; why not otherwise.
fn check_initrd(initrd: &Path) -> Result<(), String> {
    let i = head(initrd, 6).map_err(|e| format!("initrd: {e}"))?;
    let known = [
        b"070701".as_slice(), // cpio newc
        b"070702".as_slice(), // cpio newc with CRC
        &[0x1f, 0x8b],        // gzip
        &[0x28, 0xb5, 0x2f, 0xfd],
        &[0xfd, b'7', b'z', b'X', b'Z'],
        &[0x02, 0x21, 0x4c, 0x18], // lz4
    ];
    if known.iter().any(|m| i.starts_with(m)) {
        Ok(())
    } else {
        Err("initrd is neither cpio nor compressed cpio".into())
    }
}

impl ImageStore {
    /// The kernel `kernel` and initrd `initrd` of a START's `kernel`, cached data
    /// (`sha512/<hash>`, [`super::cache`]) or names in the store, checked as a kernel+initrd
    /// directory's files are; `cmdline`, the START's extra arguments.
    pub fn resolve_kernel(
        &self,
        kernel: &str,
        initrd: Option<&str>,
        cmdline: &str,
    ) -> Result<Image, ImageError> {
        let file = |name: &str, check: fn(&Path) -> Result<(), String>| {
            let path = match super::cache::named_hash(name) {
                Some(hash) if super::cache::is_sha512(hash) => self.dir.join("sha512").join(hash),
                _ if valid_name(name) => self.dir.join(name),
                _ => return Err(ImageError::BadName(name.to_string())),
            };
            if !path.is_file() {
                return Err(ImageError::Missing {
                    name: name.to_string(),
                    dir: path.parent().unwrap_or(&self.dir).to_path_buf(),
                });
            }
            check(&path).map_err(|why| ImageError::Corrupt {
                name: name.to_string(),
                why,
            })?;
            Ok(path)
        };
        Ok(Image::Kernel {
            kernel: file(kernel, check_kernel)?,
            initrd: initrd.map(|i| file(i, check_initrd)).transpose()?,
            cmdline: cmdline.to_string(),
        })
    }

    /// The cached data `sha512/<hash>` as a disk image.
    fn cached(&self, name: &str, hash: &str) -> Result<Image, ImageError> {
        if !super::cache::is_sha512(hash) {
            return Err(ImageError::BadName(name.to_string()));
        }
        let corrupt = |why: String| ImageError::Corrupt {
            name: name.to_string(),
            why,
        };
        let path = self.dir.join("sha512").join(hash);
        let magic = match head(&path, 0x8006) {
            Ok(magic) => magic,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ImageError::Missing {
                    name: name.to_string(),
                    dir: self.dir.join("sha512"),
                });
            }
            Err(e) => {
                return Err(ImageError::Io {
                    name: name.to_string(),
                    why: e.to_string(),
                });
            }
        };
        let format = if magic.starts_with(b"QFI\xfb") {
            DiskFormat::Qcow2
        } else if magic.get(0x8001..0x8006) == Some(b"CD001".as_slice()) {
            return Ok(Image::Iso { path });
        } else if magic.is_empty() {
            return Err(corrupt("empty".into()));
        } else {
            DiskFormat::Raw
        };
        qemu_img_info(&path, format).map_err(|why| corrupt(why.to_string()))?;
        Ok(Image::Disk { path, format })
    }
}

/// A `qemu-img` run that failed: what it was doing, on which file, and why.
#[derive(Debug, thiserror::Error)]
pub enum QemuImgError {
    /// `qemu-img` could not be run at all.
    #[error("qemu-img {verb}: {source}")]
    Spawn {
        /// The subcommand.
        verb: String,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },
    /// It ran and failed.
    #[error("qemu-img {verb} {}: {stderr}", disk.display())]
    Failed {
        /// The subcommand.
        verb: String,
        /// The file it worked on.
        disk: PathBuf,
        /// What it said.
        stderr: String,
    },
    /// `qemu-img info` answered something that is not its JSON with a virtual size.
    #[error("qemu-img info {}: {why}", disk.display())]
    Info {
        /// The file asked about.
        disk: PathBuf,
        /// What was wrong with the answer.
        why: String,
    },
}

/// Runs `qemu-img <verb> <args>` on `disk` (one of the args); its stdout.
fn qemu_img(verb: &str, disk: &Path, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>, QemuImgError> {
    let out = Command::new("qemu-img")
        .arg(verb)
        .args(args)
        .output()
        .map_err(|source| QemuImgError::Spawn {
            verb: verb.to_string(),
            source,
        })?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(QemuImgError::Failed {
            verb: verb.to_string(),
            disk: disk.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `qemu-img info`: the header of a disk image parses as its format; its virtual size, bytes.
fn qemu_img_info(path: &Path, format: DiskFormat) -> Result<u64, QemuImgError> {
    let out = qemu_img(
        "info",
        path,
        &[
            "--output=json".as_ref(),
            "-f".as_ref(),
            format.name().as_ref(),
            path.as_os_str(),
        ],
    )?;
    let info = |why: String| QemuImgError::Info {
        disk: path.to_path_buf(),
        why,
    };
    let value: serde_json::Value = serde_json::from_slice(&out).map_err(|e| info(e.to_string()))?;
    value["virtual-size"]
        .as_u64()
        .ok_or_else(|| info("no virtual size".into()))
}

/// Makes `overlay`, a qcow2 file whose backing file is `base` (never written through it). Its
/// disk is `size_mb` MiB when that is more than the base's; else the base's size.
pub fn make_overlay(
    base: &Path,
    format: DiskFormat,
    overlay: &Path,
    size_mb: u32,
) -> Result<(), QemuImgError> {
    let wanted = u64::from(size_mb) * 1024 * 1024;
    let size = (wanted > qemu_img_info(base, format)?).then(|| format!("{size_mb}M"));
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "-q".as_ref(),
        "-f".as_ref(),
        "qcow2".as_ref(),
        "-b".as_ref(),
        base.as_os_str(),
        "-F".as_ref(),
        format.name().as_ref(),
        overlay.as_os_str(),
    ];
    if let Some(size) = &size {
        args.push(size.as_ref());
    }
    qemu_img("create", overlay, &args).map(|_| ())
}

/// Writes `disk` (a qcow2 file, through its backing chain) as one standalone qcow2 file `to`
/// (a snapshot's data). `-U`: the disk may be open in a paused QEMU, which holds its lock.
pub fn flatten(disk: &Path, to: &Path) -> Result<(), QemuImgError> {
    let args: [&std::ffi::OsStr; 8] = [
        "-q".as_ref(),
        "-U".as_ref(),
        "-f".as_ref(),
        "qcow2".as_ref(),
        "-O".as_ref(),
        "qcow2".as_ref(),
        disk.as_os_str(),
        to.as_os_str(),
    ];
    qemu_img("convert", disk, &args).map(|_| ())
}

/// Writes the image `from` (in `format`) as one standalone qcow2 file `to`: a volume made from
/// an image.
pub fn convert(from: &Path, format: DiskFormat, to: &Path) -> Result<(), QemuImgError> {
    let args: [&std::ffi::OsStr; 7] = [
        "-q".as_ref(),
        "-f".as_ref(),
        format.name().as_ref(),
        "-O".as_ref(),
        "qcow2".as_ref(),
        from.as_os_str(),
        to.as_os_str(),
    ];
    qemu_img("convert", from, &args).map(|_| ())
}

/// Grows a qcow2 disk to `size_mb` MiB if it is smaller (a disk is never shrunk).
pub fn grow(disk: &Path, size_mb: u32) -> Result<(), QemuImgError> {
    let wanted = u64::from(size_mb) * 1024 * 1024;
    if wanted <= qemu_img_info(disk, DiskFormat::Qcow2)? {
        return Ok(());
    }
    sized_qcow2("resize", disk, size_mb)
}

/// A blank qcow2 disk of `size_mb` MiB (sparse: it takes room only as the guest writes).
pub fn make_blank(disk: &Path, size_mb: u32) -> Result<(), QemuImgError> {
    sized_qcow2("create", disk, size_mb)
}

/// `qemu-img <verb> -f qcow2 <disk> <size_mb>M`: create or resize.
fn sized_qcow2(verb: &str, disk: &Path, size_mb: u32) -> Result<(), QemuImgError> {
    let size = format!("{size_mb}M");
    qemu_img(
        verb,
        disk,
        &[
            "-q".as_ref(),
            "-f".as_ref(),
            "qcow2".as_ref(),
            disk.as_os_str(),
            size.as_ref(),
        ],
    )
    .map(|_| ())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A file that passes for a bzImage.
    pub(crate) fn fake_kernel() -> Vec<u8> {
        let mut k = vec![0u8; 0x400];
        k[0x202..0x206].copy_from_slice(b"HdrS");
        k
    }

    /// A kernel+initrd image `name` in `dir`.
    pub(crate) fn put_kernel_image(dir: &Path, name: &str) {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("kernel"), fake_kernel()).unwrap();
        std::fs::write(d.join("initrd"), b"070701rest-of-a-cpio").unwrap();
    }

    #[test]
    fn names_are_plain_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(dir.path());
        for bad in ["", "../etc", "a/b", ".hidden", "sp ace", &"x".repeat(129)] {
            assert!(
                matches!(store.resolve(bad), Err(ImageError::BadName(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            store.resolve("debian-12.1_x"),
            Err(ImageError::Missing { .. })
        ));
    }

    #[test]
    fn kernel_images_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(dir.path());
        put_kernel_image(dir.path(), "tiny");
        std::fs::write(dir.path().join("tiny/cmdline"), "quiet loglevel=3\n").unwrap();
        assert_eq!(
            store.resolve("tiny").unwrap(),
            Image::Kernel {
                kernel: dir.path().join("tiny/kernel"),
                initrd: Some(dir.path().join("tiny/initrd")),
                cmdline: "quiet loglevel=3".into(),
            }
        );
        put_kernel_image(dir.path(), "bad-kernel");
        std::fs::write(dir.path().join("bad-kernel/kernel"), b"not a kernel").unwrap();
        assert!(matches!(
            store.resolve("bad-kernel"),
            Err(ImageError::Corrupt { .. })
        ));
        put_kernel_image(dir.path(), "bad-initrd");
        std::fs::write(dir.path().join("bad-initrd/initrd"), b"garbage").unwrap();
        assert!(matches!(
            store.resolve("bad-initrd"),
            Err(ImageError::Corrupt { .. })
        ));
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        assert!(matches!(
            store.resolve("empty"),
            Err(ImageError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_starts_kernel_and_initrd_are_cached_data_checked_by_their_magic() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(dir.path());
        let cached = dir.path().join("sha512");
        std::fs::create_dir_all(&cached).unwrap();
        let (k, i, junk) = ("a".repeat(128), "b".repeat(128), "c".repeat(128));
        std::fs::write(cached.join(&k), fake_kernel()).unwrap();
        std::fs::write(cached.join(&i), b"070701rest-of-a-cpio").unwrap();
        std::fs::write(cached.join(&junk), b"neither").unwrap();
        let name = |h: &str| format!("sha512/{h}");
        assert_eq!(
            store
                .resolve_kernel(&name(&k), Some(&name(&i)), "quiet")
                .unwrap(),
            Image::Kernel {
                kernel: cached.join(&k),
                initrd: Some(cached.join(&i)),
                cmdline: "quiet".into(),
            }
        );
        // No initrd: the node's seed is the whole initramfs.
        assert!(matches!(
            store.resolve_kernel(&name(&k), None, ""),
            Ok(Image::Kernel { initrd: None, .. })
        ));
        // An initrd as the kernel, junk as either, data not here, a name that is a path.
        for (kernel, initrd) in [
            (name(&i), None),
            (name(&junk), None),
            (name(&k), Some(name(&junk))),
            (name(&k), Some(name(&k))),
        ] {
            assert!(
                matches!(
                    store.resolve_kernel(&kernel, initrd.as_deref(), ""),
                    Err(ImageError::Corrupt { .. })
                ),
                "{kernel} {initrd:?}"
            );
        }
        assert!(matches!(
            store.resolve_kernel(&name(&"d".repeat(128)), None, ""),
            Err(ImageError::Missing { .. })
        ));
        for bad in ["sha512/../../etc/passwd", "../kernel", "sha512/ABC"] {
            assert!(
                matches!(
                    store.resolve_kernel(bad, None, ""),
                    Err(ImageError::BadName(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn disk_images_get_overlays_and_corrupt_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(dir.path());
        std::fs::write(dir.path().join("junk.qcow2"), b"this is no qcow2").unwrap();
        assert!(matches!(
            store.resolve("junk"),
            Err(ImageError::Corrupt { .. })
        ));
        // A qcow2 header with nothing behind it: the magic is right, qemu-img says no.
        std::fs::write(dir.path().join("cut.qcow2"), b"QFI\xfb\0\0\0\x03").unwrap();
        assert!(matches!(
            store.resolve("cut"),
            Err(ImageError::Corrupt { .. })
        ));

        let base = dir.path().join("base.qcow2");
        let made = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(&base)
            .arg("16M")
            .status()
            .unwrap();
        assert!(made.success());
        let before = std::fs::read(&base).unwrap();
        let image = store.resolve("base").unwrap();
        let Image::Disk { path, format } = image else {
            panic!("a disk image")
        };
        assert_eq!(
            (path.as_path(), format),
            (base.as_path(), DiskFormat::Qcow2)
        );
        let overlay = dir.path().join("overlay.qcow2");
        make_overlay(&path, format, &overlay, 8).unwrap();
        let info = |file: &Path| {
            let out = Command::new("qemu-img")
                .args(["info", "--output=json"])
                .arg(file)
                .output()
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        };
        let got = info(&overlay);
        assert_eq!(got["backing-filename"], base.to_str().unwrap());
        assert_eq!(got["backing-filename-format"], "qcow2");
        assert_eq!(got["virtual-size"], 16 << 20, "never smaller than the base");
        let bigger = dir.path().join("bigger.qcow2");
        make_overlay(&path, format, &bigger, 64).unwrap();
        assert_eq!(
            info(&bigger)["virtual-size"],
            64 << 20,
            "the START's disk size"
        );
        assert_eq!(
            std::fs::read(&base).unwrap(),
            before,
            "the base is not written"
        );

        std::fs::write(dir.path().join("plain.raw"), vec![0u8; 4096]).unwrap();
        assert!(matches!(
            store.resolve("plain").unwrap(),
            Image::Disk {
                format: DiskFormat::Raw,
                ..
            }
        ));
    }

    #[test]
    fn cached_data_is_a_disk_or_an_iso_told_apart_by_their_magic() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(dir.path());
        let cache = dir.path().join("sha512");
        std::fs::create_dir_all(&cache).unwrap();
        let [qcow2, raw, iso, gone] = ["a", "b", "c", "d"].map(|c| c.repeat(128));
        make_blank(&cache.join(&qcow2), 1).unwrap();
        std::fs::write(cache.join(&raw), vec![0u8; 4096]).unwrap();
        let mut cd = vec![0u8; 0x9000];
        cd[0x8001..0x8006].copy_from_slice(b"CD001");
        std::fs::write(cache.join(&iso), cd).unwrap();
        let named = |h: &str| format!("sha512/{h}");
        assert_eq!(
            store.resolve(&named(&qcow2)).unwrap(),
            Image::Disk {
                path: cache.join(&qcow2),
                format: DiskFormat::Qcow2
            }
        );
        assert_eq!(
            store.resolve(&named(&raw)).unwrap(),
            Image::Disk {
                path: cache.join(&raw),
                format: DiskFormat::Raw
            }
        );
        assert_eq!(
            store.resolve(&named(&iso)).unwrap(),
            Image::Iso {
                path: cache.join(&iso)
            }
        );
        assert!(matches!(
            store.resolve(&named(&gone)),
            Err(ImageError::Missing { .. })
        ));
        for bad in ["sha512/../../etc/passwd", "sha512/", "sha512/ABC"] {
            assert!(
                matches!(store.resolve(bad), Err(ImageError::BadName(_))),
                "{bad}"
            );
        }
    }
}
