//! Image data through the Image API next to a plain file copy on the same machine: `PUT
//! /v2/images/{id}/file` (streamed into the image store while it is hashed: SHA-512 and MD5)
//! and `GET /v2/images/{id}/file` (streamed out of it), over plain HTTP on 127.0.0.1 to the API
//! served in-process (SQLite store, the fake cluster); the client streams from and to files in
//! 1 MiB chunks. The baseline is `std::fs::copy` of the same file. Three rounds, alternated.
//!
//! ```text
//! cargo bench -p controller --bench image_data -- --mib 512
//! ```
//!
//! Figures: docs/benchmarks.md (## Images through the Image API).
// A bench binary prints its figures and fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use controller::api::testing::{ADMIN_NAME, ADMIN_PASSWORD, ADMIN_PROJECT, FakeCluster, TestApi};
use futures_util::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Bytes;
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use store::{SqliteStore, Store};
use tokio::io::AsyncWriteExt;

/// One request on a connection of its own: the status, a header and the body, which goes to
/// `sink` when it is given.
async fn request<B>(
    addr: std::net::SocketAddr,
    req: hyper::Request<B>,
    sink: Option<&Path>,
) -> (u16, Bytes)
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let response = sender.send_request(req).await.unwrap();
    let status = response.status().as_u16();
    let token = response
        .headers()
        .get("x-subject-token")
        .map(|v| Bytes::copy_from_slice(v.as_bytes()));
    let mut body = response.into_body();
    match sink {
        Some(path) => {
            let mut out = tokio::fs::File::create(path).await.unwrap();
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.unwrap().into_data() {
                    out.write_all(&data).await.unwrap();
                }
            }
            out.sync_all().await.unwrap();
            (status, Bytes::new())
        }
        None => {
            let all = body.collect().await.unwrap().to_bytes();
            (status, token.unwrap_or(all))
        }
    }
}

fn json_request(
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: String,
) -> hyper::Request<http_body_util::Full<Bytes>> {
    let mut b = hyper::Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json");
    if let Some(t) = token {
        b = b.header("x-auth-token", t);
    }
    b.body(http_body_util::Full::new(Bytes::from(body)))
        .unwrap()
}

fn rate(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mib = testkit::bench::mib_arg(256);
    let size = mib << 20;
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let cluster = Arc::new(FakeCluster::new(store.clone()));
    let api = TestApi::start(store, cluster, None).await.unwrap();
    let addr = api.addr;

    // The data: not zeros (nothing on the way compresses, but be fair anyway).
    let src = dir.path().join("src.raw");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&src).unwrap());
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut chunk = vec![0u8; 1 << 20];
        for _ in 0..mib {
            for b in chunk.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
            }
            f.write_all(&chunk).unwrap();
        }
        f.into_inner().unwrap().sync_all().unwrap();
    }
    let login = serde_json::json!({"auth": {"identity": {"methods": ["password"], "password":
        {"user": {"name": ADMIN_NAME, "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
        "scope": {"project": {"name": ADMIN_PROJECT, "domain": {"name": "Default"}}}}});
    let (status, token) = request(
        addr,
        json_request("POST", "/v3/auth/tokens", None, login.to_string()),
        None,
    )
    .await;
    assert_eq!(status, 201);
    let token = String::from_utf8(token.to_vec()).unwrap();

    println!("{mib} MiB, three rounds: MB/s (10^6 bytes a second)");
    println!("round  file copy  upload  (ratio)  download  (ratio)");
    for round in 1..=3 {
        let copy_to = dir.path().join("copy.raw");
        let t = Instant::now();
        std::fs::copy(&src, &copy_to).unwrap();
        std::fs::File::open(&copy_to).unwrap().sync_all().unwrap();
        let copy = rate(size, t.elapsed().as_secs_f64());
        std::fs::remove_file(&copy_to).unwrap();

        let (status, made) = request(
            addr,
            json_request(
                "POST",
                "/image/v2/images",
                Some(&token),
                format!(r#"{{"name": "bench-{round}", "disk_format": "raw"}}"#),
            ),
            None,
        )
        .await;
        assert_eq!(status, 201, "{made:?}");
        let made: serde_json::Value = serde_json::from_slice(&made).unwrap();
        let id = made["id"].as_str().unwrap().to_string();

        let file = tokio::fs::File::open(&src).await.unwrap();
        let stream = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20)
            .map(|chunk| chunk.map(Frame::data));
        let put = hyper::Request::builder()
            .method("PUT")
            .uri(format!("/image/v2/images/{id}/file"))
            .header("host", "127.0.0.1")
            .header("content-type", "application/octet-stream")
            .header("content-length", size)
            .header("x-auth-token", &token)
            .body(StreamBody::new(stream))
            .unwrap();
        let t = Instant::now();
        let (status, body) = request(addr, put, None).await;
        let up = rate(size, t.elapsed().as_secs_f64());
        assert_eq!(status, 204, "{body:?}");

        let out = dir.path().join("down.raw");
        let get = json_request(
            "GET",
            &format!("/image/v2/images/{id}/file"),
            Some(&token),
            String::new(),
        );
        let t = Instant::now();
        let (status, _) = request(addr, get, Some(&out)).await;
        let down = rate(size, t.elapsed().as_secs_f64());
        assert_eq!(status, 200);
        assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
        std::fs::remove_file(&out).unwrap();

        // The next round uploads the same data again: a new image, kept once (same hash); the
        // image is deleted so that the store does not keep it.
        let (status, _) = request(
            addr,
            json_request(
                "DELETE",
                &format!("/image/v2/images/{id}"),
                Some(&token),
                String::new(),
            ),
            None,
        )
        .await;
        assert_eq!(status, 204);
        println!(
            "{round:>5}  {copy:>9.0}  {up:>6.0}  ({:.2})  {down:>8.0}  ({:.2})",
            up / copy,
            down / copy
        );
    }
    api.stop().await.unwrap();
}
