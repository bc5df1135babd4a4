//! Exporting the collected frame traces as OpenTelemetry spans (OTLP over HTTP, JSON encoding:
//! `POST {endpoint}/v1/traces`), so that a user sees cumulo in the tracing system they already
//! run, through its collector. Optional: `cumulo-controller --otlp-endpoint http://host:4318`.
//!
//! Each trace is one OpenTelemetry trace: a root span for the whole frame (from the creator's
//! send to the final consumer's end), one child span per hop (from its send to the next
//! endpoint's receipt, named after the sender's role, with its UUID), and one for the final
//! consumer's work. Trace and span ids are random.
//!
//! Bounded: at most [`QUEUE`] traces wait to be exported; past that they are dropped (counted,
//! logged). The exporter sends what is queued in batches of at most [`BATCH`], one request at a
//! time, each within [`REQUEST_TIMEOUT`]; a collector that is down or slow costs dropped spans,
//! never the engine's time. Plain HTTP only (a collector beside the controller); TLS to a
//! remote collector is not done.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::cluster::Trace;

/// Most traces waiting to be exported.
pub const QUEUE: usize = 1024;
/// Most traces in one request.
pub const BATCH: usize = 64;
/// How long one export request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where spans go: an OTLP/HTTP collector's base URL (`http://host:port`, path prefix allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`.
    pub authority: String,
    /// The path the spans are posted to (`/v1/traces` under the URL's path).
    pub path: String,
}

impl Endpoint {
    /// Parses `http://host[:port][/prefix]` (port 4318 unless given).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{url:?}: an http:// URL of an OTLP/HTTP collector (https is not supported)")
        })?;
        let (authority, prefix) = match rest.split_once('/') {
            Some((a, p)) => (a, format!("/{}", p.trim_end_matches('/'))),
            None => (rest, String::new()),
        };
        if authority.is_empty()
            || !authority
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:[]".contains(&b))
        {
            return Err(format!("{url:?}: no host"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            // An IPv6 address needs its brackets; a port, its digits.
            Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
                let port: u16 = port
                    .parse()
                    .map_err(|_| format!("{url:?}: a port of 1 to 65535"))?;
                (host, port)
            }
            Some(_) => return Err(format!("{url:?}: an IPv6 address goes in brackets")),
            None => (authority, 4318),
        };
        if host.is_empty() || port == 0 {
            return Err(format!("{url:?}: no host"));
        }
        if !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b))
        {
            return Err(format!("{url:?}: a path of letters, digits and -._~/ only"));
        }
        let authority = format!("{host}:{port}");
        let prefix = if prefix == "/" { String::new() } else { prefix };
        Ok(Endpoint {
            authority,
            path: format!("{prefix}/v1/traces"),
        })
    }
}

/// Hands traces to the export task. Cheap to clone.
#[derive(Clone)]
pub struct Exporter {
    queue: mpsc::Sender<Trace>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .finish()
    }
}

impl Exporter {
    /// Starts the export task (on the current runtime) for `endpoint`, the spans' resource
    /// naming this controller (`controller`).
    pub fn start(endpoint: Endpoint, controller: Uuid) -> Exporter {
        let (queue, received) = mpsc::channel(QUEUE);
        tokio::spawn(export_loop(endpoint, controller, received));
        Exporter {
            queue,
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Queues `trace` for export, never waiting (dropped when the queue is full).
    pub fn export(&self, trace: &Trace) {
        if self.queue.try_send(trace.clone()).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(dropped, "OTLP export queue full: traces dropped");
            }
        }
    }
}

async fn export_loop(endpoint: Endpoint, controller: Uuid, mut received: mpsc::Receiver<Trace>) {
    let mut failures = 0u64;
    let mut batch = Vec::with_capacity(BATCH);
    while received.recv_many(&mut batch, BATCH).await > 0 {
        let body = spans(&batch, controller).to_string();
        batch.clear();
        match tokio::time::timeout(REQUEST_TIMEOUT, post(&endpoint, body)).await {
            Ok(Ok(())) => failures = 0,
            Ok(Err(e)) => {
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(
                        failures,
                        "OTLP export to {} failed: {e}",
                        endpoint.authority
                    );
                }
            }
            Err(_) => {
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(failures, "OTLP export to {} timed out", endpoint.authority);
                }
            }
        }
    }
}

/// One POST of `body` (JSON); an answer other than 2xx is an error.
async fn post(endpoint: &Endpoint, body: String) -> Result<(), String> {
    let stream = tokio::net::TcpStream::connect(&endpoint.authority)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    // Ends with the request (a timeout drops the request, and with it this guard).
    let driver = AbortOnDrop(tokio::spawn(conn));
    let request = hyper::Request::post(&endpoint.path)
        .header(hyper::header::HOST, &endpoint.authority)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    // The answer's body (an OTLP partial-success message, at most) is read and dropped.
    let _ = http_body_util::Limited::new(response.into_body(), 64 * 1024)
        .collect()
        .await;
    drop(driver);
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("the collector answered {status}"))
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), hyper::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// 16 random bytes (a trace id) or 8 (a span id), in hex, never all zero.
fn random_id(bytes: usize) -> String {
    loop {
        let id: String = (0..bytes)
            .map(|_| format!("{:02x}", fastrand::u8(..)))
            .collect();
        if id.bytes().any(|b| b != b'0') {
            return id;
        }
    }
}

/// An OTLP attribute of text.
fn text(key: &str, value: &str) -> Value {
    json!({"key": key, "value": {"stringValue": value}})
}

/// The OTLP/JSON `ExportTraceServiceRequest` of `traces`.
pub fn spans(traces: &[Trace], controller: Uuid) -> Value {
    let mut spans = Vec::new();
    for t in traces {
        // A trace without hops, or without times, says nothing worth a span.
        let Some(start) = t.hops.iter().map(|h| h.tx_ns).filter(|&ns| ns > 0).min() else {
            continue;
        };
        let trace_id = random_id(16);
        let root = random_id(8);
        // The root covers its children, whatever the hosts' clocks said.
        let last = t
            .hops
            .iter()
            .map(|h| h.rx_ns.max(h.tx_ns))
            .max()
            .unwrap_or(start);
        let end = start.saturating_add(t.total_ns).max(last);
        spans.push(json!({
            "traceId": trace_id,
            "spanId": root,
            "name": format!("{} {}", t.frame, t.label),
            "kind": 1,
            "startTimeUnixNano": start.to_string(),
            "endTimeUnixNano": end.max(start).to_string(),
            "attributes": [text("cumulo.trace.label", &t.label), text("cumulo.frame", &t.frame)],
        }));
        let mut last_rx = start;
        for h in &t.hops {
            let rx = h.rx_ns.max(h.tx_ns);
            if h.tx_ns == 0 {
                continue;
            }
            last_rx = last_rx.max(rx);
            spans.push(json!({
                "traceId": trace_id,
                "spanId": random_id(8),
                "parentSpanId": root,
                "name": format!("{} → next", h.role),
                "kind": 4,
                "startTimeUnixNano": h.tx_ns.to_string(),
                "endTimeUnixNano": rx.to_string(),
                "attributes": [text("cumulo.role", &h.role), text("cumulo.uuid", &h.uuid.to_string())],
            }));
        }
        if end > last_rx {
            spans.push(json!({
                "traceId": trace_id,
                "spanId": random_id(8),
                "parentSpanId": root,
                "name": "final consumer",
                "kind": 5,
                "startTimeUnixNano": last_rx.to_string(),
                "endTimeUnixNano": end.to_string(),
                "attributes": [],
            }));
        }
    }
    json!({"resourceSpans": [{
        "resource": {"attributes": [
            text("service.name", "cumulo"),
            text("service.instance.id", &controller.to_string()),
        ]},
        "scopeSpans": [{"scope": {"name": "cumulo-controller"}, "spans": spans}],
    }]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::TraceHop;

    fn trace() -> Trace {
        Trace {
            label: "web".into(),
            frame: "START".into(),
            total_ns: 1_000,
            hops: vec![
                TraceHop {
                    uuid: Uuid::from_u128(1),
                    role: "controller".into(),
                    tx_ns: 10_000,
                    rx_ns: 10_200,
                },
                TraceHop {
                    uuid: Uuid::from_u128(2),
                    role: "scheduler".into(),
                    tx_ns: 10_300,
                    rx_ns: 10_500,
                },
            ],
        }
    }

    #[test]
    fn endpoints_are_http_urls_with_a_port() {
        let e = Endpoint::parse("http://collector").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("collector:4318", "/v1/traces")
        );
        let e = Endpoint::parse("http://127.0.0.1:9999/otel/").unwrap();
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("127.0.0.1:9999", "/otel/v1/traces")
        );
        for bad in [
            "https://x",
            "collector:4318",
            "http://",
            "http://a b",
            "http://:4318",
            "http://host:",
            "http://::1:80",
            "http://h/p?q",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_trace_is_a_root_span_a_span_per_hop_and_the_consumers_work() {
        let doc = spans(&[trace()], Uuid::from_u128(9));
        let spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap();
        assert_eq!(spans.len(), 4);
        let root = &spans[0];
        assert_eq!(root["name"], "START web");
        assert_eq!(root["startTimeUnixNano"], "10000");
        assert_eq!(root["endTimeUnixNano"], "11000");
        assert_eq!(root["traceId"].as_str().unwrap().len(), 32);
        assert_eq!(root["spanId"].as_str().unwrap().len(), 16);
        for child in &spans[1..] {
            assert_eq!(child["traceId"], root["traceId"]);
            assert_eq!(child["parentSpanId"], root["spanId"]);
        }
        assert_eq!(spans[2]["name"], "scheduler → next");
        assert_eq!(spans[3]["startTimeUnixNano"], "10500");
        assert_eq!(
            doc["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
            "cumulo"
        );
    }

    /// A collector (a plain HTTP server of the test's) receives the spans of what is exported.
    #[tokio::test]
    async fn spans_reach_a_collector() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let exporter = Exporter::start(
            Endpoint::parse(&format!("http://{addr}/x")).unwrap(),
            Uuid::from_u128(9),
        );
        exporter.export(&trace());
        let (mut conn, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .unwrap()
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        let request = loop {
            let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_string())
                    })
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    break text;
                }
            }
            assert!(n > 0, "closed early: {text}");
        };
        conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
        assert!(
            request.starts_with("POST /x/v1/traces HTTP/1.1"),
            "{request}"
        );
        assert!(
            request
                .to_ascii_lowercase()
                .contains("content-type: application/json")
        );
        let body = request.split_once("\r\n\r\n").unwrap().1;
        let doc: Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"],
            "START web"
        );
    }
}
