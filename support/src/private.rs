//! Files and directories for this user alone, whatever the umask: what holds a secret (user
//! data, a record of it, a key) is created with mode 0600 (a directory 0700), and a file that was
//! there before is set to that mode before anything is written to it.
//!
//! The umask can only take bits away from a mode given at creation, so 0600 asked for is 0600 or
//! less; a file that already exists keeps its mode when opened, hence the explicit `fchmod`.

use std::fs::{File, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of a private file: read and write for its owner alone.
pub const FILE: u32 = 0o600;
/// The mode of a private directory: its owner alone may list, enter and change it.
pub const DIR: u32 = 0o700;

/// Opens `path` for writing, empty, mode 0600 (created so, or set so if it was there).
pub fn create(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE)
        .open(path)?;
    file.set_permissions(Permissions::from_mode(FILE))?;
    Ok(file)
}

/// Writes `bytes` to `path`, mode 0600 (see [`create`]).
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    create(path)?.write_all(bytes.as_ref())
}

/// Sets `path`, a file someone else made (a tool), to mode 0600.
pub fn restrict(path: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(path, Permissions::from_mode(FILE))
}

/// Makes `path` (and its missing parents, with the umask's mode) a directory of mode 0700.
pub fn dir(path: &Path) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(DIR).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => {}
        Err(e) => return Err(e),
    }
    std::fs::set_permissions(path, Permissions::from_mode(DIR))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn files_are_private_even_when_they_were_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write(&path, "one").unwrap();
        assert_eq!(mode(&path), FILE);
        std::fs::set_permissions(&path, Permissions::from_mode(0o666)).unwrap();
        write(&path, "two").unwrap();
        assert_eq!(mode(&path), FILE);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
    }

    #[test]
    fn directories_are_private_even_when_they_were_not() {
        let top = tempfile::tempdir().unwrap();
        let path = top.path().join("a/b");
        dir(&path).unwrap();
        assert_eq!(mode(&path), DIR);
        std::fs::set_permissions(&path, Permissions::from_mode(0o777)).unwrap();
        dir(&path).unwrap();
        assert_eq!(mode(&path), DIR);
        let file = top.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(dir(&file).is_err(), "a file is not a directory");
    }
}
