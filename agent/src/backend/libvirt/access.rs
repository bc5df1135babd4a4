//! Whether QEMU can reach an instance's files, and the directory modes that let it without
//! opening them to everyone.
//!
//! Under a local `qemu:///system`, libvirt runs QEMU as an unprivileged user (Debian:
//! `libvirt-qemu`). libvirt hands it the files themselves (its DAC driver gives each disk,
//! seed, kernel and initrd to that user while the domain runs), but not the directories on the
//! way to them: QEMU must be able to search every one of them. A state directory under `/root`
//! (mode 0700 on Debian) fails every start with "Permission denied".
//!
//! [`QemuUser`] is who QEMU runs as, read from libvirt's host capabilities (the DAC security
//! model's base label). [`QemuUser::blocked`] finds the first directory on a path that it cannot
//! search; [`open_to`] gives the backend's own directories to its group with mode 0710 (search,
//! no listing) so that nothing else of the state directory is readable by it, and nothing at
//! all by others. Under `qemu:///session`, or as a non-root agent, QEMU runs as the agent's own
//! user: nothing to do.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of the directories the backend opens to QEMU's group: owner all, group search only.
pub const SEARCH_ONLY: u32 = 0o710;

/// Mode of an instance's directory: QEMU's group may list and search it, nobody else.
pub const INSTANCE_DIR: u32 = 0o750;

/// Who QEMU runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuUser {
    /// Its user ID.
    pub uid: u32,
    /// Its primary group.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

/// A directory QEMU's user cannot search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The directory.
    pub dir: PathBuf,
    /// Its permission bits.
    pub mode: u32,
    /// Its owner.
    pub owner: u32,
    /// Its group.
    pub group: u32,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (mode {:04o}, owner {}, group {})",
            self.dir.display(),
            self.mode,
            self.owner,
            self.group
        )
    }
}

/// Whether `uri` is the local system daemon's, where QEMU runs as another user.
pub fn is_local_system(uri: &str) -> bool {
    uri == "qemu:///system" || uri.starts_with("qemu:///system?")
}

impl QemuUser {
    /// The user of libvirt's DAC base label for `qemu` domains in its capabilities XML
    /// (`<secmodel><model>dac</model>...<baselabel type='qemu'>+64055:+994</baselabel>`),
    /// without supplementary groups. `None` when there is no DAC model.
    pub fn from_capabilities(xml: &str) -> Option<QemuUser> {
        for secmodel in xml.split("<secmodel>").skip(1) {
            let body = secmodel.split("</secmodel>").next().unwrap_or_default();
            if !body.contains("<model>dac</model>") {
                continue;
            }
            let mut fallback = None;
            for label in body.split("<baselabel").skip(1) {
                let Some((attrs, rest)) = label.split_once('>') else {
                    continue;
                };
                let text = rest.split('<').next().unwrap_or_default();
                let Some(user) = parse_label(text) else {
                    continue;
                };
                if attrs.contains("'qemu'") || attrs.contains("\"qemu\"") {
                    return Some(user);
                }
                fallback.get_or_insert(user);
            }
            return fallback;
        }
        None
    }

    /// Adds the supplementary groups `group_file` (the text of `/etc/group`) gives the user
    /// that `passwd_file` (the text of `/etc/passwd`) names with this UID.
    pub fn with_groups(mut self, passwd_file: &str, group_file: &str) -> QemuUser {
        let name = passwd_file.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 2 && fields[2].parse() == Ok(self.uid)).then(|| fields[0].to_string())
        });
        if let Some(name) = name {
            for line in group_file.lines() {
                let fields: Vec<&str> = line.split(':').collect();
                if fields.len() < 4 {
                    continue;
                }
                let member = fields[3].split(',').any(|m| m.trim() == name);
                if let (true, Ok(gid)) = (member, fields[2].parse::<u32>())
                    && gid != self.gid
                    && !self.groups.contains(&gid)
                {
                    self.groups.push(gid);
                }
            }
        }
        self
    }

    /// The user from libvirt's capabilities, with the groups this host's account files give it.
    pub fn from_host(capabilities: &str) -> Option<QemuUser> {
        let user = QemuUser::from_capabilities(capabilities)?;
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
        Some(user.with_groups(&passwd, &group))
    }

    /// Whether this user may search a directory with these owner, group and mode bits.
    pub fn may_search(&self, owner: u32, group: u32, mode: u32) -> bool {
        if self.uid == 0 {
            return true;
        }
        if owner == self.uid {
            return mode & 0o100 != 0;
        }
        if group == self.gid || self.groups.contains(&group) {
            return mode & 0o010 != 0;
        }
        mode & 0o001 != 0
    }

    /// The first directory on the way to `path` (itself included when it is a directory)
    /// that this user cannot search. Directories that do not exist yet are not judged.
    pub fn blocked(&self, path: &Path) -> Option<Blocked> {
        let mut dirs: Vec<&Path> = path.ancestors().collect();
        dirs.reverse();
        for dir in dirs {
            let Ok(meta) = std::fs::metadata(dir) else {
                return None;
            };
            if !meta.is_dir() {
                return None;
            }
            let mode = meta.permissions().mode() & 0o7777;
            if !self.may_search(meta.uid(), meta.gid(), mode) {
                return Some(Blocked {
                    dir: dir.to_path_buf(),
                    mode,
                    owner: meta.uid(),
                    group: meta.gid(),
                });
            }
        }
        None
    }
}

/// `+64055:+994` (or `64055:994`) as a user without supplementary groups.
fn parse_label(text: &str) -> Option<QemuUser> {
    let (uid, gid) = text.trim().split_once(':')?;
    let number = |s: &str| s.trim().trim_start_matches('+').parse::<u32>().ok();
    Some(QemuUser {
        uid: number(uid)?,
        gid: number(gid)?,
        groups: Vec::new(),
    })
}

/// Gives each of `dirs` to `gid` with `mode` (made first if missing). Only the group changes
/// owner: the directories stay the agent's.
pub fn open_to(dirs: &[PathBuf], gid: u32, mode: u32) -> std::io::Result<()> {
    for dir in dirs {
        std::fs::create_dir_all(dir)?;
        rustix::fs::chown(dir, None, Some(rustix::fs::Gid::from_raw(gid)))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The directories from `top` down to `target`, both included; empty when `target` is not
/// under `top`.
pub fn chain(top: &Path, target: &Path) -> Vec<PathBuf> {
    let Ok(rest) = target.strip_prefix(top) else {
        return Vec::new();
    };
    let mut out = vec![top.to_path_buf()];
    let mut at = top.to_path_buf();
    for part in rest.components() {
        at.push(part);
        out.push(at.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: &str = "<capabilities><host><secmodel>\n      <model>none</model>\n      \
        <doi>0</doi>\n    </secmodel>\n    <secmodel>\n      <model>dac</model>\n      \
        <doi>0</doi>\n      <baselabel type='kvm'>+999:+994</baselabel>\n      \
        <baselabel type='qemu'>+998:+993</baselabel>\n    </secmodel>\n  </host></capabilities>";

    #[test]
    fn the_qemu_base_label_of_the_dac_model_is_read() {
        let user = QemuUser::from_capabilities(CAPS).unwrap();
        assert_eq!((user.uid, user.gid), (998, 993));
        assert!(QemuUser::from_capabilities("<capabilities/>").is_none());
        let kvm_only = CAPS.replace("<baselabel type='qemu'>+998:+993</baselabel>", "");
        assert_eq!(QemuUser::from_capabilities(&kvm_only).unwrap().uid, 999);
    }

    #[test]
    fn supplementary_groups_come_from_the_account_files() {
        let user = QemuUser {
            uid: 999,
            gid: 994,
            groups: vec![],
        }
        .with_groups(
            "root:x:0:0::/root:/bin/bash\nlibvirt-qemu:x:999:994::/var/lib/libvirt:/bin/false\n",
            "root:x:0:\nkvm:x:995:libvirt-qemu\nlibvirt-qemu:x:994:\ndisk:x:6:alice,libvirt-qemu\n",
        );
        assert_eq!(user.groups, vec![995, 6]);
    }

    #[test]
    fn search_permission_follows_owner_then_group_then_others() {
        let u = QemuUser {
            uid: 999,
            gid: 994,
            groups: vec![995],
        };
        assert!(!u.may_search(0, 0, 0o700));
        assert!(u.may_search(0, 0, 0o711));
        assert!(u.may_search(0, 994, 0o710));
        assert!(u.may_search(0, 995, 0o710));
        assert!(
            !u.may_search(0, 994, 0o701),
            "the group class applies, not others"
        );
        assert!(!u.may_search(999, 994, 0o077), "the owner class applies");
        assert!(u.may_search(999, 0, 0o700));
    }

    #[test]
    fn the_first_closed_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let closed = dir.path().join("closed");
        let inner = closed.join("instances");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let stranger = QemuUser {
            uid: 4_000_000,
            gid: 4_000_000,
            groups: vec![],
        };
        let blocked = stranger.blocked(&inner.join("not-yet")).unwrap();
        assert_eq!(blocked.dir, closed);
        assert_eq!(blocked.mode, 0o700);
        assert!(blocked.to_string().contains("mode 0700"), "{blocked}");
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(stranger.blocked(&inner), None);
    }

    #[test]
    fn the_chain_runs_from_top_to_target() {
        let chain = chain(Path::new("/s"), Path::new("/s/libvirt/instances"));
        assert_eq!(
            chain,
            vec![
                PathBuf::from("/s"),
                PathBuf::from("/s/libvirt"),
                PathBuf::from("/s/libvirt/instances")
            ]
        );
        assert!(super::chain(Path::new("/s"), Path::new("/elsewhere")).is_empty());
    }

    #[test]
    fn open_to_sets_group_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b");
        let gid = rustix::process::getegid().as_raw();
        open_to(&[dir.path().join("a"), target.clone()], gid, SEARCH_ONLY).unwrap();
        let meta = std::fs::metadata(&target).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, SEARCH_ONLY);
        assert_eq!(meta.gid(), gid);
    }
}
