//! The plain-HTTP endpoint for Prometheus, served by hyper (HTTP/1.1): `GET /metrics` answers the
//! latest exposition, anything else 404; a request hyper cannot parse gets its 400 (431 for a
//! head over 8 KiB).
//!
//! Bounded as a listener anyone on the network may reach should be ([`Limits`]): so many
//! connections at once (more wait in the listener's backlog), the request head within 8 KiB and
//! a deadline, one request per connection (`Connection: close`), the whole exchange within a
//! deadline; a failed accept (out of descriptors, say) backs off instead of spinning.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::prometheus_text;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Summary;

/// The most bytes of a request head (hyper's smallest read buffer).
const MAX_HEAD: usize = 8192;

/// The bounds of the metrics listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub connections: usize,
    /// How long a client may take to send its request head.
    pub header_timeout: Duration,
    /// How long a connection may last, request in and answer out.
    pub exchange_timeout: Duration,
    /// The pause after a failed accept.
    pub accept_backoff: Duration,
}

impl Default for Limits {
    /// 64 connections, 5 s for the head and for the whole exchange, 50 ms back-off.
    fn default() -> Limits {
        Limits {
            connections: 64,
            header_timeout: Duration::from_secs(5),
            exchange_timeout: Duration::from_secs(5),
            accept_backoff: Duration::from_millis(50),
        }
    }
}

/// Serves `/metrics` on `listener` until `shutdown`, within the default [`Limits`].
pub async fn serve(
    listener: TcpListener,
    summary: Arc<Mutex<Summary>>,
    shutdown: CancellationToken,
) {
    serve_within(listener, summary, shutdown, Limits::default()).await;
}

/// Serves `/metrics` on `listener` until `shutdown`, within `limits`; returns when the
/// connections in flight are done (each within `limits.exchange_timeout`).
pub async fn serve_within(
    listener: TcpListener,
    summary: Arc<Mutex<Summary>>,
    shutdown: CancellationToken,
    limits: Limits,
) {
    let tracker = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.connections));
    loop {
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let tcp = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener: accept failed");
                    tokio::time::sleep(limits.accept_backoff).await;
                    continue;
                }
            },
        };
        let summary = summary.clone();
        tracker.spawn(async move {
            let _slot = slot;
            let exchange = connection(tcp, summary, limits.header_timeout);
            if tokio::time::timeout(limits.exchange_timeout, exchange)
                .await
                .is_err()
            {
                tracing::debug!("metrics connection cut at the exchange timeout");
            }
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// One connection: one request, one answer.
async fn connection(tcp: TcpStream, summary: Arc<Mutex<Summary>>, header_timeout: Duration) {
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let response = answer(&request, &summary);
        async move { Ok::<_, Infallible>(response) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEAD)
        .keep_alive(false)
        .serve_connection(TokioIo::new(tcp), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "metrics connection ended with an error");
    }
}

/// The exposition for `GET /metrics`, 404 for anything else.
fn answer(request: &Request<Incoming>, summary: &Mutex<Summary>) -> Response<String> {
    let metrics = request.method() == Method::GET && request.uri().path() == "/metrics";
    let (status, content_type, body) = if metrics {
        let summary = summary.lock().unwrap_or_else(|p| p.into_inner());
        (
            StatusCode::OK,
            prometheus_text::CONTENT_TYPE,
            summary.metrics.clone(),
        )
    } else {
        (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n".to_string(),
        )
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Served {
        addr: std::net::SocketAddr,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    impl Served {
        async fn start(limits: Limits) -> Served {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let summary = Arc::new(Mutex::new(Summary {
                metrics: "cumulo_scheduler_placements_total 7\n".to_string(),
                line: String::new(),
            }));
            let shutdown = CancellationToken::new();
            let task = tokio::spawn(serve_within(listener, summary, shutdown.clone(), limits));
            Served {
                addr,
                shutdown,
                task,
            }
        }

        /// Sends `request` on a new connection; everything the server sent before it closed.
        async fn exchange(&self, request: &[u8]) -> String {
            let mut tcp = TcpStream::connect(self.addr).await.unwrap();
            tcp.write_all(request).await.unwrap();
            read_to_close(&mut tcp).await
        }

        async fn stop(self) {
            self.shutdown.cancel();
            self.task.await.unwrap();
        }
    }

    /// What the server sends until it closes (a reset after an answer ends it too).
    async fn read_to_close(tcp: &mut TcpStream) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    #[tokio::test]
    async fn metrics_for_get_metrics_and_404_for_the_rest() {
        let s = Served::start(Limits::default()).await;
        let ok = s
            .exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("content-type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{ok}"
        );
        assert!(ok.contains("connection: close\r\n"), "{ok}");
        assert!(ok.contains("content-length: 36\r\n"), "{ok}");
        assert!(
            ok.ends_with("\r\n\r\ncumulo_scheduler_placements_total 7\n"),
            "{ok}"
        );
        // HTTP/1.0 and no Host: still answered.
        let old = s.exchange(b"GET /metrics HTTP/1.0\r\n\r\n").await;
        assert!(old.starts_with("HTTP/1.0 200 OK\r\n"), "{old}");
        for request in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"GET /metrics/more HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            let answer = s.exchange(request).await;
            let said = String::from_utf8_lossy(request);
            assert!(
                answer.starts_with("HTTP/1.1 404 Not Found\r\n"),
                "{said}: {answer}"
            );
            assert!(!answer.contains("placements"), "{said}: {answer}");
        }
        let answer = s.exchange(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(answer.ends_with("\r\n\r\nnot found\n"), "{answer}");
        s.stop().await;
    }

    #[tokio::test]
    async fn bad_requests_get_400_and_oversized_heads_431() {
        let s = Served::start(Limits::default()).await;
        for bad in [
            &b"NONSENSE\r\n\r\n"[..],
            b"GET /metrics HTTP/9.9\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nNo colon here\r\n\r\n",
            b"\x00\x01\x02\x03\r\n\r\n",
        ] {
            let answer = s.exchange(bad).await;
            assert!(
                answer.starts_with("HTTP/1.1 400 Bad Request\r\n")
                    || answer.starts_with("HTTP/1.1 505"),
                "{bad:?}: {answer}"
            );
        }
        // A head over 8 KiB: 431, or a reset if the rest of it is still unread; never metrics.
        let mut big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
        big.resize(big.len() + 9000, b'a');
        big.extend_from_slice(b"\r\n\r\n");
        let answer = s.exchange(&big).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 431 "),
            "{answer}"
        );
        // The server still serves.
        let ok = s
            .exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        s.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_head_is_cut_at_the_header_timeout() {
        let limits = Limits {
            exchange_timeout: Duration::from_secs(60),
            ..Limits::default()
        };
        let s = Served::start(limits).await;
        let mut tcp = TcpStream::connect(s.addr).await.unwrap();
        let started = tokio::time::Instant::now();
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost:")
            .await
            .unwrap();
        let answer = read_to_close(&mut tcp).await;
        assert!(answer.is_empty(), "{answer}");
        let took = started.elapsed();
        assert!(took >= limits.header_timeout, "{took:?}");
        assert!(
            took < limits.header_timeout + Duration::from_secs(1),
            "{took:?}"
        );
        s.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_exchange_timeout_bounds_a_connection() {
        let limits = Limits {
            header_timeout: Duration::from_secs(60),
            ..Limits::default()
        };
        let s = Served::start(limits).await;
        // A client that sends nothing is not cut by the header timeout here (60 s), but by the
        // exchange timeout (5 s).
        let mut tcp = TcpStream::connect(s.addr).await.unwrap();
        let started = tokio::time::Instant::now();
        let answer = read_to_close(&mut tcp).await;
        assert!(answer.is_empty(), "{answer}");
        let took = started.elapsed();
        assert!(took >= limits.exchange_timeout, "{took:?}");
        assert!(
            took < limits.exchange_timeout + Duration::from_secs(1),
            "{took:?}"
        );
        s.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn connections_beyond_the_limit_wait_for_a_slot() {
        let limits = Limits {
            connections: 1,
            header_timeout: Duration::from_secs(60),
            exchange_timeout: Duration::from_secs(60),
            ..Limits::default()
        };
        let s = Served::start(limits).await;
        // The one slot is held by a client that says nothing yet.
        let mut first = TcpStream::connect(s.addr).await.unwrap();
        first.write_all(b"GET /metr").await.unwrap();
        let mut second = TcpStream::connect(s.addr).await.unwrap();
        second
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let waited = tokio::time::timeout(Duration::from_secs(10), second.read(&mut buf)).await;
        assert!(waited.is_err(), "served beyond the limit: {waited:?}");
        // The first one leaves: the second is served.
        drop(first);
        let answer = read_to_close(&mut second).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        s.stop().await;
    }

    #[tokio::test]
    async fn shutdown_returns() {
        let s = Served::start(Limits::default()).await;
        s.stop().await;
    }
}
