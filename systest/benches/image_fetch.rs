//! A node fetching an uploaded image from the controller next to a plain file copy on the same
//! machine: the controller's node image endpoint (`GET /v1/images/sha512/{hash}`, TLS 1.3 with
//! the cluster CA's certificates, served in-process from its image store) into an agent's image
//! cache (SHA-512 checked as the data arrives, synced, renamed), over 127.0.0.1. Each round: the
//! baseline (`std::fs::copy` of the data file, synced), a fetch into an empty cache, the same
//! image asked again (cached: no fetch), and eight STARTs asking for it at once in another
//! empty cache (one fetch). Three rounds.
//!
//! ```text
//! cargo bench -p systest --bench image_fetch -- --mib 256
//! ```
//!
//! Figures: docs/benchmarks.md (## Images reach the nodes).
// A bench binary prints its figures and fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use agent::backend::libvirt::cache::ImageCache;
use agent::backend::libvirt::fetch::ImageServer;
use controller::images::{ImageBlobs, LocalBlobs, nodes};
use ssntp::Role;
use testkit::TestPki;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn rate(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mib = testkit::bench::mib_arg(256);
    let size = mib << 20;
    let dir = tempfile::tempdir().unwrap();
    let blobs = LocalBlobs::open(&dir.path().join("controller")).unwrap();
    // The data: not zeros (nothing on the way compresses, but be fair anyway).
    let (staged, file) = blobs.stage().unwrap();
    let mut sha = ring::digest::Context::new(&ring::digest::SHA512);
    {
        let mut f = std::io::BufWriter::new(file);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut chunk = vec![0u8; 1 << 20];
        for _ in 0..mib {
            for b in chunk.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
            }
            sha.update(&chunk);
            f.write_all(&chunk).unwrap();
        }
        f.into_inner().unwrap().sync_all().unwrap();
    }
    let hash: String = sha
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    blobs.keep(&staged, &hash).unwrap();
    let src = dir.path().join("controller/sha512").join(&hash);

    let pki = TestPki::new();
    let controller = pki.identity(Role::CONTROLLER, Some(Uuid::new_v4()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = format!("localhost:{}", listener.local_addr().unwrap().port());
    let stop = CancellationToken::new();
    let blobs: Arc<dyn ImageBlobs> = Arc::new(blobs);
    let server = tokio::spawn(nodes::serve(
        listener,
        controller.server_config().unwrap(),
        blobs,
        stop.clone(),
    ));
    let agent = pki.identity(Role::DUAL, Some(Uuid::new_v4()));
    let node = |name: String| {
        let top = dir.path().join(name);
        let source = ImageServer::new(&agent, &at).unwrap();
        ImageCache::open(
            &top.join("images"),
            &top.join("instances"),
            u64::MAX,
            Some(Arc::new(source)),
        )
        .unwrap()
    };

    println!("{mib} MiB, three rounds: MB/s (10^6 bytes a second)");
    println!("round  file copy  fetch  (ratio)  cached  8 at once (fetches)");
    for round in 1..=3 {
        let copy_to = dir.path().join("copy.raw");
        let t = Instant::now();
        std::fs::copy(&src, &copy_to).unwrap();
        std::fs::File::open(&copy_to).unwrap().sync_all().unwrap();
        let copy = rate(size, t.elapsed().as_secs_f64());
        std::fs::remove_file(&copy_to).unwrap();

        let cache = node(format!("cold-{round}"));
        let t = Instant::now();
        drop(cache.ensure(&hash).await.unwrap());
        let fetch = rate(size, t.elapsed().as_secs_f64());
        assert_eq!(std::fs::metadata(cache.path(&hash)).unwrap().len(), size);
        let t = Instant::now();
        drop(cache.ensure(&hash).await.unwrap());
        let cached = t.elapsed();

        let many = node(format!("many-{round}"));
        let t = Instant::now();
        let starts: Vec<_> = (0..8)
            .map(|_| {
                let (many, hash) = (many.clone(), hash.clone());
                tokio::spawn(async move { many.ensure(&hash).await.map(drop) })
            })
            .collect();
        for s in starts {
            s.await.unwrap().unwrap();
        }
        let together = rate(size, t.elapsed().as_secs_f64());
        // One copy of the data, whatever the eight asked: the cache's directory holds it once.
        let kept = std::fs::read_dir(many.path(&hash).parent().unwrap())
            .unwrap()
            .count();
        println!(
            "{round}      {copy:9.0}  {fetch:5.0}  ({:.2})   {:>6.0?}  {together:5.0} ({kept} kept)",
            fetch / copy,
            cached
        );
        for name in [format!("cold-{round}"), format!("many-{round}")] {
            std::fs::remove_dir_all(dir.path().join(name)).unwrap();
        }
    }
    stop.cancel();
    server.await.unwrap().unwrap();
}
