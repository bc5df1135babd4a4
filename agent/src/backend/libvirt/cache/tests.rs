use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::UNIX_EPOCH;

use http_body_util::Full;
use tokio::sync::Notify;

use super::*;

fn sha512(data: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA512, data).as_ref())
}

/// What a fake source sends for a hash: the size it announces and the bytes.
type Served = (Option<u64>, Vec<u8>);

/// A source that serves what it holds, after `gate` opens (when given), counting its fetches.
#[derive(Debug, Default)]
struct Fake {
    /// By hash: the size it announces and the bytes it sends.
    data: Mutex<HashMap<String, Served>>,
    fetches: AtomicUsize,
    gate: Option<Arc<Notify>>,
}

impl Fake {
    fn with(blobs: &[&[u8]]) -> Fake {
        let fake = Fake::default();
        for blob in blobs {
            fake.put(&sha512(blob), Some(blob.len() as u64), blob.to_vec());
        }
        fake
    }

    fn put(&self, hash: &str, size: Option<u64>, bytes: Vec<u8>) {
        self.data
            .lock()
            .unwrap()
            .insert(hash.to_string(), (size, bytes));
    }
}

impl ImageSource for Fake {
    fn fetch<'a>(
        &'a self,
        sha512: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Download, String>> + Send + 'a>> {
        Box::pin(async move {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            if let Some(gate) = &self.gate {
                gate.notified().await;
            }
            let (size, bytes) = self
                .data
                .lock()
                .unwrap()
                .get(sha512)
                .cloned()
                .ok_or_else(|| "404: no image data with this hash".to_string())?;
            Ok(Download {
                size,
                body: Full::new(Bytes::from(bytes))
                    .map_err(|never| match never {})
                    .boxed(),
            })
        })
    }
}

struct Dirs {
    _top: tempfile::TempDir,
    images: PathBuf,
    instances: PathBuf,
}

fn dirs() -> Dirs {
    let top = tempfile::tempdir().unwrap();
    let images = top.path().join("images");
    let instances = top.path().join("instances");
    std::fs::create_dir_all(&instances).unwrap();
    Dirs {
        images,
        instances,
        _top: top,
    }
}

fn cache(d: &Dirs, cap: u64, source: Arc<Fake>) -> ImageCache {
    ImageCache::open(&d.images, &d.instances, cap, Some(source)).unwrap()
}

/// Whatever is in the cache's directory, sorted.
fn listing(cache: &ImageCache) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&cache.0.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Sets the data's last use to `secs` after the epoch.
fn used_at(cache: &ImageCache, hash: &str, secs: u64) {
    std::fs::File::open(cache.path(hash))
        .unwrap()
        .set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn pin(d: &Dirs, instance: &str, hash: &str) {
    let dir = d.instances.join(instance);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(PIN_FILE), format!("{hash}\n")).unwrap();
}

#[tokio::test]
async fn many_starts_at_once_fetch_once_and_get_the_checked_data() {
    let d = dirs();
    let blob = vec![7u8; 300_000];
    let hash = sha512(&blob);
    let gate = Arc::new(Notify::new());
    let fake = Arc::new(Fake {
        gate: Some(gate.clone()),
        ..Fake::with(&[&blob])
    });
    let cache = cache(&d, 1 << 20, fake.clone());
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let (cache, hash) = (cache.clone(), hash.clone());
            tokio::spawn(async move { cache.ensure(&hash).await })
        })
        .collect();
    // Every START waits on the one fetch: it is under way, and no other started.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fake.fetches.load(Ordering::SeqCst) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no fetch started");
        tokio::task::yield_now().await;
    }
    gate.notify_one();
    for w in waiters {
        w.await.unwrap().unwrap();
    }
    assert_eq!(fake.fetches.load(Ordering::SeqCst), 1);
    assert_eq!(std::fs::read(cache.path(&hash)).unwrap(), blob);
    // Once here, it is not fetched again.
    let fake_after = fake.fetches.load(Ordering::SeqCst);
    cache.ensure(&hash).await.unwrap();
    assert_eq!(fake.fetches.load(Ordering::SeqCst), fake_after);
    assert_eq!(listing(&cache), vec![hash]);
}

#[tokio::test]
async fn wrong_or_cut_data_is_refused_and_leaves_nothing() {
    let d = dirs();
    let fake = Arc::new(Fake::default());
    let asked = sha512(b"what was uploaded");
    fake.put(&asked, Some(8), b"tampered".to_vec());
    let cut = sha512(b"a long image");
    fake.put(&cut, Some(12), b"a long".to_vec());
    let cache = cache(&d, 1 << 20, fake.clone());
    match cache.ensure(&asked).await {
        Err(CacheError::Mismatch { expected, got }) => {
            assert_eq!(expected, asked);
            assert_eq!(got, sha512(b"tampered"));
        }
        other => panic!("{other:?}"),
    }
    let e = cache.ensure(&cut).await.unwrap_err();
    assert!(e.to_string().contains("ended after 6 of 12 bytes"), "{e}");
    let missing = sha512(b"never uploaded");
    let e = cache.ensure(&missing).await.unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
    assert!(listing(&cache).is_empty(), "{:?}", listing(&cache));
    // A failed fetch is tried again by the next START.
    fake.put(&cut, Some(12), b"a long image".to_vec());
    cache.ensure(&cut).await.unwrap();
}

#[tokio::test]
async fn the_least_recently_used_data_that_nothing_uses_goes_first() {
    let d = dirs();
    let blobs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100]).collect();
    let refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
    let hashes: Vec<String> = blobs.iter().map(|b| sha512(b)).collect();
    let fake = Arc::new(Fake::with(&refs));
    let cache = cache(&d, 300, fake);
    for (i, h) in hashes[..3].iter().enumerate() {
        drop(cache.ensure(h).await.unwrap());
        used_at(&cache, h, 1000 + i as u64);
    }
    // 0 is the oldest but an instance uses it; 1 is held by a START about to use it.
    pin(&d, "instance-a", &hashes[0]);
    let lease = cache.ensure(&hashes[1]).await.unwrap();
    used_at(&cache, &hashes[1], 1001);
    drop(cache.ensure(&hashes[3]).await.unwrap());
    let mut want = vec![hashes[0].clone(), hashes[1].clone(), hashes[3].clone()];
    want.sort();
    assert_eq!(listing(&cache), want, "2 goes: 0 is pinned, 1 leased");
    // The lease gone, 1 is the least recently used unpinned data.
    drop(lease);
    used_at(&cache, &hashes[3], 2000);
    drop(cache.ensure(&hashes[4]).await.unwrap());
    let mut want = vec![hashes[0].clone(), hashes[3].clone(), hashes[4].clone()];
    want.sort();
    assert_eq!(listing(&cache), want);
}

#[tokio::test]
async fn a_cache_full_of_data_in_use_refuses_with_its_figures() {
    let d = dirs();
    let (a, b) = (vec![1u8; 100], vec![2u8; 100]);
    let fake = Arc::new(Fake::with(&[&a, &b]));
    let cache = cache(&d, 150, fake);
    let ha = sha512(&a);
    drop(cache.ensure(&ha).await.unwrap());
    pin(&d, "instance-a", &ha);
    assert_eq!(
        cache.ensure(&sha512(&b)).await.unwrap_err(),
        CacheError::Full {
            need: 100,
            cap: 150,
            held: 100
        }
    );
    assert_eq!(listing(&cache), vec![ha]);
}

#[tokio::test]
async fn bad_names_no_source_and_leftover_parts() {
    let d = dirs();
    let lone = ImageCache::open(&d.images, &d.instances, 1 << 20, None).unwrap();
    for bad in ["../../etc/passwd", "", &"A".repeat(128)] {
        assert!(matches!(
            lone.ensure(bad).await,
            Err(CacheError::BadHash(_))
        ));
    }
    let hash = sha512(b"x");
    let e = lone.ensure(&hash).await.unwrap_err();
    assert_eq!(e, CacheError::NoSource(hash.clone()));
    assert!(e.to_string().contains("--image-server"), "{e}");
    // What a killed agent left mid-download goes when the cache opens again.
    let part = lone.0.dir.join(format!(".{hash}.1234.part"));
    std::fs::write(&part, b"half").unwrap();
    let _again = ImageCache::open(&d.images, &d.instances, 1 << 20, None).unwrap();
    assert!(!part.exists());
    assert_eq!(named_hash(&format!("sha512/{hash}")), Some(hash.as_str()));
    assert_eq!(named_hash("tiny"), None);
}
