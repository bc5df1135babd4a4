//! The image store: where the controller keeps the data of images uploaded through the Image
//! API, addressed by their SHA-512 (the same data uploaded twice is kept once).
//!
//! [`ImageBlobs`] is the interface; [`LocalBlobs`], a directory, the one there is. An upload is
//! written to a staging file first ([`ImageBlobs::stage`]) and kept under its hash only once it
//! is complete and hashed ([`ImageBlobs::keep`]): a cut upload leaves nothing under a hash. An
//! object store (S3-compatible) is the option for several controllers sharing images
//! (`docs/storage.md`): it would stage to a local file the same way and upload on `keep`.

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};

pub mod kernel;
pub mod nodes;

/// Where image data is kept, by SHA-512 (128 lowercase hex digits).
pub trait ImageBlobs: Send + Sync + Debug {
    /// A new, empty staging file for an upload (its path, and the file open for writing).
    fn stage(&self) -> io::Result<(PathBuf, std::fs::File)>;
    /// Keeps the staged file `staged` as the data whose SHA-512 is `sha512` (replacing nothing:
    /// data already kept under that hash stays, and the staged file goes).
    fn keep(&self, staged: &Path, sha512: &str) -> io::Result<()>;
    /// The data kept under `sha512`, open for reading.
    fn open(&self, sha512: &str) -> io::Result<std::fs::File>;
    /// Forgets the data kept under `sha512` (no image has it any more); absent data is no error.
    fn remove(&self, sha512: &str) -> io::Result<()>;
}

/// A 200 response streaming image data from `file` (`size` bytes), in 1 MiB reads (the
/// default 4 KiB makes a frame, and a write, per page).
pub(crate) fn data_response(file: std::fs::File, size: u64) -> axum::response::Response {
    use axum::http::{HeaderValue, header};
    use axum::response::IntoResponse;
    let stream =
        tokio_util::io::ReaderStream::with_capacity(tokio::fs::File::from_std(file), 1 << 20);
    let mut response = axum::body::Body::from_stream(stream).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    response
}

/// Whether `hash` is a SHA-512 as the store names it (never a path).
pub fn is_sha512(hash: &str) -> bool {
    hash.len() == 128
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn bad_hash(hash: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{hash:?} is not a SHA-512"),
    )
}

/// Image data in a directory: `sha512/<hash>` for the data, `staging/` for uploads under way
/// (emptied when the store is opened: what is there was cut short).
#[derive(Debug)]
pub struct LocalBlobs {
    dir: PathBuf,
}

impl LocalBlobs {
    /// The store in `dir` (made, mode 0700, if it is not there).
    pub fn open(dir: &Path) -> io::Result<LocalBlobs> {
        use std::os::unix::fs::DirBuilderExt;
        for sub in ["sha512", "staging"] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir.join(sub))?;
        }
        for entry in std::fs::read_dir(dir.join("staging"))?.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        Ok(LocalBlobs {
            dir: dir.to_path_buf(),
        })
    }

    fn data(&self, sha512: &str) -> io::Result<PathBuf> {
        if !is_sha512(sha512) {
            return Err(bad_hash(sha512));
        }
        Ok(self.dir.join("sha512").join(sha512))
    }
}

impl ImageBlobs for LocalBlobs {
    fn stage(&self) -> io::Result<(PathBuf, std::fs::File)> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self
            .dir
            .join("staging")
            .join(format!("{}.part", uuid::Uuid::new_v4().simple()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        Ok((path, file))
    }

    fn keep(&self, staged: &Path, sha512: &str) -> io::Result<()> {
        let to = self.data(sha512)?;
        if to.exists() {
            return std::fs::remove_file(staged);
        }
        std::fs::rename(staged, &to)
    }

    fn open(&self, sha512: &str) -> io::Result<std::fs::File> {
        std::fs::File::open(self.data(sha512)?)
    }

    fn remove(&self, sha512: &str) -> io::Result<()> {
        match std::fs::remove_file(self.data(sha512)?) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn staged_data_is_kept_by_hash_once() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = LocalBlobs::open(dir.path()).unwrap();
        let hash = "a".repeat(128);
        for text in ["first", "second"] {
            let (path, mut file) = blobs.stage().unwrap();
            file.write_all(text.as_bytes()).unwrap();
            blobs.keep(&path, &hash).unwrap();
            assert!(!path.exists());
        }
        // The first kept stays (same hash, same data: an honest store never sees two).
        let mut got = String::new();
        blobs.open(&hash).unwrap().read_to_string(&mut got).unwrap();
        assert_eq!(got, "first");
        blobs.remove(&hash).unwrap();
        blobs.remove(&hash).unwrap();
        assert!(blobs.open(&hash).is_err());
    }

    #[test]
    fn hashes_are_never_paths_and_staging_is_emptied_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = LocalBlobs::open(dir.path()).unwrap();
        for bad in ["../etc/passwd", "", &"A".repeat(128), &"a".repeat(127)] {
            assert!(blobs.open(bad).is_err(), "{bad}");
            assert!(blobs.remove(bad).is_err(), "{bad}");
        }
        let (path, _) = blobs.stage().unwrap();
        assert!(path.exists());
        let _again = LocalBlobs::open(dir.path()).unwrap();
        assert!(!path.exists());
    }
}
