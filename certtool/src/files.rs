//! Reading PEM files and writing a set of output files all or nothing.
//!
//! A set is written by first checking that no file exists (unless forced), then writing each to
//! a temporary file beside it (keys with mode 0600), then renaming them into place; on any
//! failure the temporary files, and the new files already renamed, are removed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A file that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Reading failed (missing, a directory, no permission, …).
    #[error("cannot read {}: {}; check the path", .path.display(), .source)]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// No PEM certificate in the file.
    #[error("{} holds no PEM certificate; pass a PEM file (\"BEGIN CERTIFICATE\")", .0.display())]
    NoCertificate(PathBuf),
    /// An output file exists and `--force` was not given.
    #[error("{} already exists; pass --force to replace it, or choose another --out/--directory", .0.display())]
    Exists(PathBuf),
    /// Writing failed.
    #[error("cannot write {}: {}; check the directory and its permissions", .path.display(), .source)]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// Reads a whole file.
pub fn read(path: &Path) -> Result<Vec<u8>, FileError> {
    fs::read(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the PEM certificates of a file, in order; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, FileError> {
    let pem = read(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(FileError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

/// Who may read an output file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A certificate: mode 0644.
    Public,
    /// A private key: mode 0600.
    Secret,
}

impl Access {
    fn mode(self) -> u32 {
        match self {
            Access::Public => 0o644,
            Access::Secret => 0o600,
        }
    }
}

/// One file to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFile {
    /// Where.
    pub path: PathBuf,
    /// What.
    pub contents: Vec<u8>,
    /// Its mode.
    pub access: Access,
}

/// The certificate and key files of an output prefix: `P.pem` and `P.key`.
pub fn prefix_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    let mut pem = prefix.as_os_str().to_owned();
    pem.push(".pem");
    let mut key = prefix.as_os_str().to_owned();
    key.push(".key");
    (PathBuf::from(pem), PathBuf::from(key))
}

/// Refuses if any of `paths` exists.
pub fn check_absent<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Result<(), FileError> {
    for path in paths {
        if path.symlink_metadata().is_ok() {
            return Err(FileError::Exists(path.to_path_buf()));
        }
    }
    Ok(())
}

/// Writes every file or none: see the module documentation. Missing parent directories are
/// created. Existing files are an error unless `force` (then they are replaced).
pub fn write_all(files: &[OutFile], force: bool) -> Result<(), FileError> {
    if !force {
        check_absent(files.iter().map(|f| f.path.as_path()))?;
    }
    let mut temps: Vec<(PathBuf, &OutFile)> = Vec::with_capacity(files.len());
    let result = write_temps(files, &mut temps).and_then(|()| rename_all(&temps));
    if result.is_err() {
        for (temp, _) in &temps {
            let _ = fs::remove_file(temp);
        }
    }
    result
}

fn write_temps<'a>(
    files: &'a [OutFile],
    temps: &mut Vec<(PathBuf, &'a OutFile)>,
) -> Result<(), FileError> {
    for (n, file) in files.iter().enumerate() {
        let write_error = |source| FileError::Write {
            path: file.path.clone(),
            source,
        };
        let dir = parent(&file.path);
        fs::create_dir_all(dir).map_err(write_error)?;
        let name = file
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()));
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(file.access.mode())
            .open(&temp)
            .map_err(write_error)?;
        temps.push((temp, file));
        out.write_all(&file.contents).map_err(write_error)?;
        out.sync_all().map_err(write_error)?;
    }
    Ok(())
}

fn rename_all(temps: &[(PathBuf, &OutFile)]) -> Result<(), FileError> {
    let existed: Vec<bool> = temps
        .iter()
        .map(|(_, f)| f.path.symlink_metadata().is_ok())
        .collect();
    for (done, (temp, file)) in temps.iter().enumerate() {
        if let Err(source) = fs::rename(temp, &file.path) {
            // Take back the new files that replaced nothing (a forced write cannot restore
            // the files it already replaced).
            for ((_, renamed), existed) in temps[..done].iter().zip(&existed) {
                if !existed {
                    let _ = fs::remove_file(&renamed.path);
                }
            }
            return Err(FileError::Write {
                path: file.path.clone(),
                source,
            });
        }
    }
    let mut dirs: Vec<&Path> = temps.iter().map(|(_, f)| parent(&f.path)).collect();
    dirs.dedup();
    for dir in dirs {
        // Make the renames durable; a failure here loses nothing already written.
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn out(path: PathBuf, text: &str, access: Access) -> OutFile {
        OutFile {
            path,
            contents: text.as_bytes().to_vec(),
            access,
        }
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_with_modes_and_creates_directories() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        let (pem, key) = prefix_paths(&sub.join("node"));
        write_all(
            &[
                out(pem.clone(), "cert", Access::Public),
                out(key.clone(), "key", Access::Secret),
            ],
            false,
        )
        .unwrap();
        assert_eq!(fs::read_to_string(&pem).unwrap(), "cert");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&pem), 0o644);
        assert_eq!(listing(&sub), vec!["node.key", "node.pem"]);
    }

    #[test]
    fn existing_files_need_force_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (pem, key) = prefix_paths(&dir.path().join("x"));
        fs::write(&key, "old").unwrap();
        let files = [
            out(pem.clone(), "new cert", Access::Public),
            out(key.clone(), "new key", Access::Secret),
        ];
        let err = write_all(&files, false).unwrap_err();
        assert!(
            matches!(err, FileError::Exists(ref p) if *p == key),
            "{err}"
        );
        assert_eq!(listing(dir.path()), vec!["x.key"]);
        write_all(&files, true).unwrap();
        assert_eq!(fs::read_to_string(&key).unwrap(), "new key");
    }

    #[test]
    fn a_failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // The second file's "directory" is a regular file: creating it fails.
        fs::write(dir.path().join("blocker"), "").unwrap();
        let files = [
            out(dir.path().join("good.pem"), "a", Access::Public),
            out(dir.path().join("blocker/bad.key"), "b", Access::Secret),
        ];
        assert!(matches!(
            write_all(&files, false),
            Err(FileError::Write { .. })
        ));
        assert_eq!(listing(dir.path()), vec!["blocker"]);
    }

    #[test]
    fn a_failed_rename_takes_back_the_new_files() {
        let dir = tempfile::tempdir().unwrap();
        // Renaming a file over a non-empty directory fails after the first rename succeeded.
        let taken = dir.path().join("taken.key");
        fs::create_dir(&taken).unwrap();
        fs::write(taken.join("inside"), "").unwrap();
        let files = [
            out(dir.path().join("first.pem"), "a", Access::Public),
            out(taken.clone(), "b", Access::Secret),
        ];
        assert!(matches!(
            write_all(&files, true),
            Err(FileError::Write { .. })
        ));
        assert_eq!(listing(dir.path()), vec!["taken.key"]);
        let files = [
            out(dir.path().join("second.pem"), "a", Access::Public),
            out(taken.join("inside"), "b", Access::Secret),
        ];
        // Without force the existing "inside" is refused before anything is written.
        assert!(matches!(
            write_all(&files, false),
            Err(FileError::Exists(_))
        ));
        assert!(!dir.path().join("second.pem").exists());
    }

    #[test]
    fn reading_reports_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = read_certs(&missing).unwrap_err().to_string();
        assert!(
            err.contains("missing.pem") && err.contains("cannot read"),
            "{err}"
        );
        let err = read_certs(dir.path()).unwrap_err();
        assert!(matches!(err, FileError::Read { .. }));
        let junk = dir.path().join("junk.pem");
        fs::write(&junk, "hello").unwrap();
        assert!(matches!(
            read_certs(&junk),
            Err(FileError::NoCertificate(_))
        ));
    }
}
