//! The node's image cache: the data of images uploaded through the Image API, kept by SHA-512
//! in `sha512/` of the image store and fetched from an [`ImageSource`] (the controller's node
//! image endpoint, [`super::fetch`]) the first time a START names one (`image:
//! "sha512/<hash>"`).
//!
//! - **Checked**: the data is hashed as it arrives and kept only if its SHA-512 is the one
//!   asked for; anything else fails the START (`image_failure`) with both hashes in its message.
//! - **Once**: STARTs that need the same missing data at the same time wait for one fetch.
//! - **Bounded**: the cache keeps at most its limit in bytes (downloads under way come on top).
//!   To make room, the data used least recently goes first, never data that an instance of this
//!   node uses (its directory names the hashes in [`PIN_FILE`], one a line, from its create until its delete,
//!   stopped or not) or that a START is about to use (a [`Lease`]). When that is not enough the
//!   fetch fails, saying how much the instances hold.
//! - **Atomic**: data arrives in a hidden `.part` file, renamed to its hash once complete and
//!   checked; the parts a killed agent left are removed when the cache opens.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use tokio::io::AsyncWriteExt;
use tokio::sync::OnceCell;

/// How a START names cached data: `sha512/<hash>`.
pub const PREFIX: &str = "sha512/";

/// The file in an instance's directory that names the cached data it was made from.
pub const PIN_FILE: &str = "image-sha512";

/// How long a download may go without data before it is given up.
pub const CHUNK_TIMEOUT: Duration = Duration::from_secs(60);

/// The default limit of the cache: 20 GiB.
pub const DEFAULT_CAP: u64 = 20 << 30;

/// Whether `hash` is a SHA-512 as the cache names data (128 lowercase hex digits; never a path).
pub fn is_sha512(hash: &str) -> bool {
    hash.len() == 128
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The hash a START's image names, if it names cached data.
pub fn named_hash(image: &str) -> Option<&str> {
    image.strip_prefix(PREFIX)
}

/// The hashes of the cached data an instance is made from: its image's, and its kernel's and
/// initrd's when it boots a kernel directly.
pub fn named_hashes(spec: &crate::model::InstanceSpec) -> Vec<String> {
    let kernel = spec.kernel.as_ref();
    std::iter::once(spec.image.as_str())
        .chain(kernel.map(|k| k.kernel.as_str()))
        .chain(kernel.and_then(|k| k.initrd.as_deref()))
        .filter_map(named_hash)
        .map(str::to_string)
        .collect()
}

/// Data on its way from a source: its announced size, if any, and its body.
pub struct Download {
    /// The size the source announced (`Content-Length`).
    pub size: Option<u64>,
    /// The data.
    pub body: BoxBody<Bytes, String>,
}

/// Where missing data comes from.
pub trait ImageSource: Send + Sync + Debug {
    /// Starts the download of the data whose SHA-512 is `sha512`; an error says why there is
    /// none (in words, for the START's fault).
    fn fetch<'a>(
        &'a self,
        sha512: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Download, String>> + Send + 'a>>;
}

/// A shared [`ImageSource`], equal only to itself (for configurations that compare).
#[derive(Debug, Clone)]
pub struct Source(pub Arc<dyn ImageSource>);

impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Source {}

/// Why the cache could not give an image's data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// Not a SHA-512.
    #[error("{0:?} is not a SHA-512")]
    BadHash(String),
    /// Not here, and nowhere to fetch it from.
    #[error(
        "image data sha512/{0} is not on this node and no image server is configured \
         (cumulo-agent --image-server)"
    )]
    NoSource(String),
    /// The source failed.
    #[error("fetching image data sha512/{hash}: {why}")]
    Fetch {
        /// The data asked for.
        hash: String,
        /// What failed.
        why: String,
    },
    /// The data that came is not the data asked for.
    #[error("the image data fetched for sha512/{expected} has the SHA-512 {got}: refused")]
    Mismatch {
        /// The hash asked for.
        expected: String,
        /// The hash of what came.
        got: String,
    },
    /// No room, even after evicting what no instance uses.
    #[error(
        "the image cache has no room for {need} bytes: its limit is {cap} bytes, and the \
         instances of this node hold {held}"
    )]
    Full {
        /// Bytes needed.
        need: u64,
        /// The cache's limit.
        cap: u64,
        /// Bytes held by data in use.
        held: u64,
    },
    /// The cache's directory failed.
    #[error("the image cache {dir}: {why}")]
    Io {
        /// The directory.
        dir: String,
        /// What failed.
        why: String,
    },
}

/// The cache (cheap to clone: clones share it).
#[derive(Debug, Clone)]
pub struct ImageCache(Arc<Shared>);

type Flight = Arc<OnceCell<Result<(), CacheError>>>;

#[derive(Debug)]
struct Shared {
    /// `sha512/` of the image store.
    dir: PathBuf,
    /// The instances' directories, where the pins are.
    instances: PathBuf,
    cap: u64,
    source: Option<Arc<dyn ImageSource>>,
    /// Fetches under way, by hash.
    flights: Mutex<HashMap<String, Flight>>,
    /// Data that STARTs are about to use, by hash: how many.
    leases: Mutex<HashMap<String, usize>>,
}

/// A START's hold on cached data: it is not evicted while this lives.
#[derive(Debug)]
pub struct Lease {
    cache: Arc<Shared>,
    hash: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut leases = self
            .cache
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = leases.get_mut(&self.hash) {
            *n -= 1;
            if *n == 0 {
                leases.remove(&self.hash);
            }
        }
    }
}

/// The SHA-512 of `data` as the cache names it (128 lowercase hex digits).
pub fn sha512_of(data: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA512, data).as_ref())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

impl ImageCache {
    /// The cache in `images/sha512` (made, mode 0711: QEMU passes through to the files it is
    /// given), pinned by the instances in `instances`, holding at most `cap` bytes, filled from
    /// `source`. Removes the parts a killed agent left.
    pub fn open(
        images: &Path,
        instances: &Path,
        cap: u64,
        source: Option<Arc<dyn ImageSource>>,
    ) -> std::io::Result<ImageCache> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let dir = images.join("sha512");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".part") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(ImageCache(Arc::new(Shared {
            dir,
            instances: instances.to_path_buf(),
            cap,
            source,
            flights: Mutex::new(HashMap::new()),
            leases: Mutex::new(HashMap::new()),
        })))
    }

    /// Where the data of `sha512` is kept (there or not).
    pub fn path(&self, sha512: &str) -> PathBuf {
        self.0.dir.join(sha512)
    }

    fn lease(&self, sha512: &str) -> Lease {
        *self
            .0
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(sha512.to_string())
            .or_default() += 1;
        Lease {
            cache: self.0.clone(),
            hash: sha512.to_string(),
        }
    }

    /// Makes sure the data of `sha512` is here, fetching it if not (once, however many ask
    /// together), and holds it until the [`Lease`] is dropped.
    pub async fn ensure(&self, sha512: &str) -> Result<Lease, CacheError> {
        if !is_sha512(sha512) {
            return Err(CacheError::BadHash(sha512.to_string()));
        }
        let lease = self.lease(sha512);
        if touch(&self.path(sha512)) {
            return Ok(lease);
        }
        let Some(source) = self.0.source.clone() else {
            return Err(CacheError::NoSource(sha512.to_string()));
        };
        let flight = self
            .0
            .flights
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(sha512.to_string())
            .or_default()
            .clone();
        let result = flight
            .get_or_init(|| self.fetch(source.as_ref(), sha512))
            .await
            .clone();
        let mut flights = self
            .0
            .flights
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if flights.get(sha512).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
            // Done, well or not: the next START that misses the data fetches it again.
            flights.remove(sha512);
        }
        result.map(|()| lease)
    }

    fn io(&self, e: impl std::fmt::Display) -> CacheError {
        CacheError::Io {
            dir: self.0.dir.display().to_string(),
            why: e.to_string(),
        }
    }

    async fn fetch(&self, source: &dyn ImageSource, sha512: &str) -> Result<(), CacheError> {
        let started = std::time::Instant::now();
        let download = source
            .fetch(sha512)
            .await
            .map_err(|why| CacheError::Fetch {
                hash: sha512.to_string(),
                why,
            })?;
        if let Some(size) = download.size {
            self.make_room(size).await?;
        }
        let part = self
            .0
            .dir
            .join(format!(".{sha512}.{}.part", uuid::Uuid::new_v4().simple()));
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&part)
            .await
            .map_err(|e| self.io(e))?;
        let received = self.receive(download, file, sha512).await;
        let kept = match received {
            Ok(size) => tokio::fs::rename(&part, self.path(sha512))
                .await
                .map(|()| size)
                .map_err(|e| self.io(e)),
            Err(e) => Err(e),
        };
        match kept {
            Ok(size) => {
                tracing::info!(
                    hash = &sha512[..16],
                    size,
                    took = ?started.elapsed(),
                    "image data fetched"
                );
                Ok(())
            }
            Err(e) => {
                let _ = tokio::fs::remove_file(&part).await;
                Err(e)
            }
        }
    }

    /// Writes the download to `file`, hashing it; its size once it is all there and checked.
    async fn receive(
        &self,
        download: Download,
        file: tokio::fs::File,
        sha512: &str,
    ) -> Result<u64, CacheError> {
        let fail = |why: String| CacheError::Fetch {
            hash: sha512.to_string(),
            why,
        };
        let limit = download.size.unwrap_or(self.0.cap).min(self.0.cap);
        let mut body = download.body;
        let mut sha = ring::digest::Context::new(&ring::digest::SHA512);
        let mut out = tokio::io::BufWriter::with_capacity(1 << 20, file);
        let mut written = 0u64;
        loop {
            let frame = tokio::time::timeout(CHUNK_TIMEOUT, body.frame())
                .await
                .map_err(|_| fail(format!("no data for {CHUNK_TIMEOUT:?}")))?;
            let Some(frame) = frame else { break };
            let Ok(data) = frame.map_err(fail)?.into_data() else {
                continue;
            };
            written += data.len() as u64;
            if written > limit {
                return Err(fail(format!(
                    "more data than {limit} bytes (announced, or the cache's limit)"
                )));
            }
            sha.update(&data);
            out.write_all(&data).await.map_err(|e| self.io(e))?;
        }
        if let Some(size) = download.size
            && written != size
        {
            return Err(fail(format!(
                "the data ended after {written} of {size} bytes"
            )));
        }
        out.flush().await.map_err(|e| self.io(e))?;
        out.into_inner().sync_all().await.map_err(|e| self.io(e))?;
        let got = hex(sha.finish().as_ref());
        if got != sha512 {
            return Err(CacheError::Mismatch {
                expected: sha512.to_string(),
                got,
            });
        }
        if download.size.is_none() {
            self.make_room(written).await?;
        }
        Ok(written)
    }

    /// Evicts unused data, least recently used first, until `need` more bytes fit.
    async fn make_room(&self, need: u64) -> Result<(), CacheError> {
        let shared = self.0.clone();
        tokio::task::spawn_blocking(move || evict(&shared, need))
            .await
            .map_err(|e| self.io(e))?
    }
}

/// Marks the data at `path` as used now; whether it is there.
fn touch(path: &Path) -> bool {
    match std::fs::File::open(path) {
        Ok(file) => {
            let _ = file.set_modified(SystemTime::now());
            true
        }
        Err(_) => false,
    }
}

/// The hashes the instances in `instances` were made from.
fn pins(instances: &Path) -> HashSet<String> {
    let Ok(entries) = std::fs::read_dir(instances) else {
        return HashSet::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join(PIN_FILE)).ok())
        .flat_map(|text| {
            text.lines()
                .map(|h| h.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|h| is_sha512(h))
        .collect()
}

fn evict(shared: &Shared, need: u64) -> Result<(), CacheError> {
    let io = |e: std::io::Error| CacheError::Io {
        dir: shared.dir.display().to_string(),
        why: e.to_string(),
    };
    let mut used = pins(&shared.instances);
    used.extend(
        shared
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned(),
    );
    let mut kept = Vec::new();
    for entry in std::fs::read_dir(&shared.dir).map_err(io)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_sha512(&name) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let when = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        kept.push((when, name, meta.len()));
    }
    let mut total: u64 = kept.iter().map(|(_, _, size)| size).sum();
    let held: u64 = kept
        .iter()
        .filter(|(_, name, _)| used.contains(name))
        .map(|(_, _, size)| size)
        .sum();
    let full = CacheError::Full {
        need,
        cap: shared.cap,
        held,
    };
    if need > shared.cap.saturating_sub(held) {
        return Err(full);
    }
    kept.sort();
    for (_, name, size) in kept {
        if total.saturating_add(need) <= shared.cap {
            break;
        }
        if used.contains(&name) {
            continue;
        }
        match std::fs::remove_file(shared.dir.join(&name)) {
            Ok(()) => {
                tracing::info!(
                    hash = &name[..16],
                    size,
                    "image data evicted from the cache"
                );
                total -= size;
            }
            Err(e) => tracing::warn!(hash = &name[..16], error = %e, "evicting image data"),
        }
    }
    if total.saturating_add(need) > shared.cap {
        return Err(full);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
