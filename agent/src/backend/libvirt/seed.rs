//! cloud-init data for one instance, in the NoCloud layout: `meta-data` (instance UUID, host
//! name, and the START's meta data) and `user-data` (the START's, as given).
//!
//! It reaches the guest two ways:
//! - an ISO 9660 volume labelled `cidata`, attached as a CD-ROM ([`Seed::write_iso`], made with
//!   `genisoimage`, or `xorriso` in mkisofs mode, whichever is installed): what cloud-init
//!   looks for;
//! - for kernel+initrd images, a cpio archive appended to the image's initrd ([`Seed::cpio`]):
//!   the kernel unpacks concatenated archives into one initramfs, so `/cumulo/meta-data` and
//!   `/cumulo/user-data` are there for a guest without a CD-ROM driver (the tiny test guest).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use uuid::Uuid;

/// One instance's cloud-init data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// The `meta-data` file.
    pub meta_data: String,
    /// The `user-data` file.
    pub user_data: String,
}

/// A YAML scalar: JSON string syntax, which YAML reads as it is.
fn scalar(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// Whether a meta data key can be written as a plain YAML key.
fn plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// An I/O error on `path`, in words.
fn at(path: &Path) -> impl FnOnce(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", path.display())
}

impl Seed {
    /// The seed of `instance`: `instance-id` is always its UUID, `local-hostname` the START's
    /// `hostname` (or `local-hostname`) meta data, else `cumulo-` and the UUID's first group;
    /// other meta data follow as they are (keys that are not plain names are left out).
    pub fn new(instance: Uuid, user_data: Option<&str>, meta: &BTreeMap<String, String>) -> Seed {
        let hostname = meta
            .get("hostname")
            .or_else(|| meta.get("local-hostname"))
            .cloned()
            .unwrap_or_else(|| {
                let id = instance.to_string();
                format!("cumulo-{}", &id[..8])
            });
        let mut meta_data = format!(
            "instance-id: {instance}\nlocal-hostname: {}\n",
            scalar(&hostname)
        );
        for (key, value) in meta {
            if matches!(key.as_str(), "instance-id" | "local-hostname" | "hostname")
                || !plain_key(key)
            {
                continue;
            }
            meta_data.push_str(&format!("{key}: {}\n", scalar(value)));
        }
        Seed {
            meta_data,
            user_data: user_data.unwrap_or("").to_string(),
        }
    }

    /// Writes the `cidata` ISO to `iso`, mode 0600 whatever the umask (the user data may hold
    /// secrets). Its two files, and the ISO until it is complete, are staged in a directory of
    /// `iso`'s (`seed/`, mode 0700, removed afterwards whatever happens): what the ISO tool
    /// makes with the umask's mode is never where anyone else can reach it.
    pub fn write_iso(&self, iso: &Path) -> Result<(), String> {
        let dir = iso.parent().ok_or("the seed has no directory")?;
        let stage = dir.join("seed");
        let staged = self.stage_iso(&stage);
        let placed = staged.and_then(|made| {
            support::private::restrict(&made).map_err(at(&made))?;
            std::fs::rename(&made, iso).map_err(at(iso))
        });
        let _ = std::fs::remove_dir_all(&stage);
        placed
    }

    /// Makes the ISO in `stage` (a private directory, made here); its path.
    fn stage_iso(&self, stage: &Path) -> Result<std::path::PathBuf, String> {
        support::private::dir(stage).map_err(at(stage))?;
        let meta = stage.join("meta-data");
        let user = stage.join("user-data");
        let iso = stage.join("seed.iso");
        support::private::write(&meta, &self.meta_data).map_err(at(&meta))?;
        support::private::write(&user, &self.user_data).map_err(at(&user))?;
        let args = |c: &mut Command| {
            c.args(["-quiet", "-output"])
                .arg(&iso)
                .args(["-volid", "cidata", "-joliet", "-rock"])
                .arg(&user)
                .arg(&meta);
        };
        let mut tried = Vec::new();
        for (tool, pre) in [
            ("genisoimage", &[][..]),
            ("xorriso", &["-as", "mkisofs"][..]),
        ] {
            let mut cmd = Command::new(tool);
            cmd.args(pre);
            args(&mut cmd);
            match cmd.output() {
                Ok(out) if out.status.success() => return Ok(iso),
                Ok(out) => {
                    return Err(format!(
                        "{tool}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                Err(e) => tried.push(format!("{tool}: {e}")),
            }
        }
        Err(format!(
            "no ISO tool (install genisoimage): {}",
            tried.join("; ")
        ))
    }

    /// A cpio archive (newc) holding `cumulo/meta-data` and `cumulo/user-data`, to append to
    /// an initrd.
    pub fn cpio(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut ino = 1;
        cpio_entry(&mut out, &mut ino, "cumulo", 0o040_755, b"");
        cpio_entry(
            &mut out,
            &mut ino,
            "cumulo/meta-data",
            0o100_644,
            self.meta_data.as_bytes(),
        );
        cpio_entry(
            &mut out,
            &mut ino,
            "cumulo/user-data",
            0o100_644,
            self.user_data.as_bytes(),
        );
        cpio_entry(&mut out, &mut ino, "TRAILER!!!", 0, b"");
        // The kernel reads concatenated archives on 4-byte boundaries; pad to 512 as cpio does.
        while !out.len().is_multiple_of(512) {
            out.push(0);
        }
        out
    }
}

/// One newc entry: a 110-byte ASCII header, the name and its NUL padded to 4, the data padded
/// to 4.
fn cpio_entry(out: &mut Vec<u8>, ino: &mut u32, name: &str, mode: u32, data: &[u8]) {
    let nlink = if mode & 0o040_000 != 0 { 2 } else { 1 };
    let fields = [
        *ino,
        mode,
        0, // uid
        0, // gid
        nlink,
        0, // mtime
        u32::try_from(data.len()).unwrap_or(u32::MAX),
        0, // dev major
        0, // dev minor
        0, // rdev major
        0, // rdev minor
        u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
        0, // check
    ];
    *ino += 1;
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out.extend_from_slice(data);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Uuid {
        "5f0c7a52-3c61-4b8e-9a55-0d6e3c2b1a90".parse().unwrap()
    }

    #[test]
    fn meta_data_has_the_uuid_and_a_host_name() {
        let seed = Seed::new(id(), None, &BTreeMap::new());
        assert_eq!(
            seed.meta_data,
            "instance-id: 5f0c7a52-3c61-4b8e-9a55-0d6e3c2b1a90\nlocal-hostname: \"cumulo-5f0c7a52\"\n"
        );
        assert_eq!(seed.user_data, "");
        let meta = BTreeMap::from([
            ("hostname".to_string(), "web-1".to_string()),
            ("instance-id".to_string(), "spoofed".to_string()),
            ("role".to_string(), "a \"quoted\"\nvalue".to_string()),
            ("bad key: x".to_string(), "dropped".to_string()),
        ]);
        let seed = Seed::new(id(), Some("#cloud-config\n"), &meta);
        assert_eq!(
            seed.meta_data,
            "instance-id: 5f0c7a52-3c61-4b8e-9a55-0d6e3c2b1a90\nlocal-hostname: \"web-1\"\nrole: \"a \\\"quoted\\\"\\nvalue\"\n"
        );
        assert_eq!(seed.user_data, "#cloud-config\n");
    }

    /// An SSH key (spaces, `+`, `/`, `=`, a comment with `@`; several lines for several keys)
    /// is one double-quoted scalar, which YAML reads back as the text: cloud-init's NoCloud
    /// takes `public-keys` as a string of key lines.
    #[test]
    fn public_keys_are_one_quoted_scalar() {
        let keys = "ssh-ed25519 AAAAC3Nz+a/b= me@home\nssh-rsa AAAAB3 other: key";
        let meta = BTreeMap::from([("public-keys".to_string(), keys.to_string())]);
        let seed = Seed::new(id(), None, &meta);
        let line = seed
            .meta_data
            .lines()
            .find_map(|l| l.strip_prefix("public-keys: "))
            .unwrap();
        assert!(line.starts_with('"') && line.ends_with('"'), "{line}");
        let read: String = serde_json::from_str(line).unwrap();
        assert_eq!(read, keys);
    }

    /// The archive, read back by a small newc reader: names, modes and contents.
    #[test]
    fn cpio_reads_back() {
        let seed = Seed::new(id(), Some("hello"), &BTreeMap::new());
        let bytes = seed.cpio();
        assert_eq!(bytes.len() % 512, 0);
        let mut at = 0;
        let mut seen = Vec::new();
        loop {
            let h = &bytes[at..at + 110];
            assert_eq!(&h[..6], b"070701");
            let field = |i: usize| {
                let s = std::str::from_utf8(&h[6 + 8 * i..14 + 8 * i]).unwrap();
                usize::from_str_radix(s, 16).unwrap()
            };
            let (mode, size, namesize) = (field(1), field(6), field(11));
            let name_end = at + 110 + namesize - 1;
            let name = std::str::from_utf8(&bytes[at + 110..name_end]).unwrap();
            let data_at = (at + 110 + namesize).next_multiple_of(4);
            let data = &bytes[data_at..data_at + size];
            at = (data_at + size).next_multiple_of(4);
            if name == "TRAILER!!!" {
                break;
            }
            seen.push((name.to_string(), mode, data.to_vec()));
        }
        assert_eq!(
            seen,
            vec![
                ("cumulo".into(), 0o040_755, vec![]),
                (
                    "cumulo/meta-data".into(),
                    0o100_644,
                    seed.meta_data.clone().into_bytes()
                ),
                ("cumulo/user-data".into(), 0o100_644, b"hello".to_vec()),
            ]
        );
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// The ISO (user data: maybe secrets) is the agent's alone whatever was there before, and
    /// nothing of its staging is left, even when it cannot be put in place.
    #[test]
    fn the_iso_is_private_and_its_staging_never_left() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let iso = dir.path().join("seed.iso");
        std::fs::write(&iso, "an older seed").unwrap();
        std::fs::set_permissions(&iso, std::fs::Permissions::from_mode(0o644)).unwrap();
        let seed = Seed::new(
            id(),
            Some("#cloud-config\npassword: s3cret\n"),
            &BTreeMap::new(),
        );
        seed.write_iso(&iso).unwrap();
        assert_eq!(mode(&iso), 0o600);
        assert!(!dir.path().join("seed").exists());

        // A directory where the ISO goes: it cannot be renamed there.
        let blocked = dir.path().join("blocked.iso");
        std::fs::create_dir(&blocked).unwrap();
        assert!(seed.write_iso(&blocked).is_err());
        assert!(!dir.path().join("seed").exists(), "the staging is removed");
    }

    /// The ISO is labelled `cidata` and holds both files (read back with `isoinfo` when it is
    /// installed; genisoimage brings it).
    #[test]
    fn iso_is_labelled_cidata() {
        let dir = tempfile::tempdir().unwrap();
        let iso = dir.path().join("seed.iso");
        let seed = Seed::new(id(), Some("#cloud-config\n"), &BTreeMap::new());
        seed.write_iso(&iso).unwrap();
        let bytes = std::fs::read(&iso).unwrap();
        // The primary volume descriptor at sector 16: type 1, "CD001", the volume id at 40.
        let pvd = &bytes[16 * 2048..17 * 2048];
        assert_eq!(&pvd[..6], b"\x01CD001");
        assert_eq!(&pvd[40..46], b"cidata");
        assert!(!dir.path().join("seed").exists(), "the staging is removed");
        if let Ok(out) = Command::new("isoinfo")
            .args(["-R", "-f", "-i"])
            .arg(&iso)
            .output()
        {
            let list = String::from_utf8_lossy(&out.stdout);
            assert!(
                list.contains("/meta-data") && list.contains("/user-data"),
                "{list}"
            );
        }
    }
}
