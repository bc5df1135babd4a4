//! A minimal plain-HTTP endpoint for Prometheus: `GET /metrics` answers the latest exposition.
//! Requests are bounded (8 KiB, 5 s); anything else gets 404.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::Summary;

async fn answer(mut tcp: TcpStream, summary: Arc<Mutex<Summary>>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tcp.read(&mut chunk).await?;
        if n == 0 || buf.len() + n > 8192 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    let (status, body) = if line.starts_with(b"GET /metrics ") {
        (
            "200 OK",
            summary
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .metrics
                .clone(),
        )
    } else {
        ("404 Not Found", "not found\n".to_string())
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(body.as_bytes()).await?;
    tcp.shutdown().await
}

/// Serves `/metrics` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    summary: Arc<Mutex<Summary>>,
    shutdown: CancellationToken,
) {
    loop {
        let tcp = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = listener.accept() => match a {
                Ok((tcp, _)) => tcp,
                Err(_) => continue,
            },
        };
        let summary = summary.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(tcp, summary)).await;
        });
    }
}
