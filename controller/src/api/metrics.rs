//! Request metrics in Prometheus text: requests by route and status class, a latency histogram
//! by route, and instances by state (read from the store when scraped).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::servers_by_state;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// The request counters of one API.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    /// (method, route, status class) → count.
    requests: BTreeMap<(String, String, &'static str), u64>,
    /// route → latency histogram.
    latency: BTreeMap<String, Histogram>,
}

#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

fn class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

impl Metrics {
    /// Counts one request.
    pub fn record(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        *c.requests
            .entry((method.to_string(), route.to_string(), class(status)))
            .or_default() += 1;
        let h = c.latency.entry(route.to_string()).or_default();
        h.count += 1;
        h.sum += seconds;
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                h.buckets[i] += 1;
            }
        }
    }

    /// The counters in Prometheus text.
    pub fn text(&self) -> String {
        let c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        out.push_str("# HELP cumulo_api_requests_total API requests by route and status class.\n");
        out.push_str("# TYPE cumulo_api_requests_total counter\n");
        for ((method, route, class), n) in &c.requests {
            let _ = writeln!(
                out,
                "cumulo_api_requests_total{{method=\"{method}\",route=\"{}\",status=\"{class}\"}} {n}",
                escape(route)
            );
        }
        out.push_str("# HELP cumulo_api_request_seconds API request latency by route.\n");
        out.push_str("# TYPE cumulo_api_request_seconds histogram\n");
        for (route, h) in &c.latency {
            let route = escape(route);
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(
                    out,
                    "cumulo_api_request_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "cumulo_api_request_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "cumulo_api_request_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "cumulo_api_request_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
        out
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Middleware: times and counts every request by its matched route (`unmatched` otherwise).
pub async fn track(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    state.metrics.record(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// `GET /metrics` (no authentication: counts only, no tenant data).
pub async fn render(State(state): State<ApiState>) -> Response {
    let mut text = state.metrics.text();
    if let Ok(by_state) = servers_by_state(&state).await {
        text.push_str("# HELP cumulo_instances Instances by state.\n");
        text.push_str("# TYPE cumulo_instances gauge\n");
        for (name, n) in by_state {
            let _ = writeln!(text, "cumulo_instances{{state=\"{name}\"}} {n}");
        }
    }
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_route_and_class() {
        let m = Metrics::default();
        m.record("GET", "/v3", 200, 0.002);
        m.record("GET", "/v3", 404, 0.5);
        let text = m.text();
        assert!(
            text.contains(
                "cumulo_api_requests_total{method=\"GET\",route=\"/v3\",status=\"2xx\"} 1"
            )
        );
        assert!(
            text.contains(
                "cumulo_api_requests_total{method=\"GET\",route=\"/v3\",status=\"4xx\"} 1"
            )
        );
        assert!(text.contains("cumulo_api_request_seconds_bucket{route=\"/v3\",le=\"0.0025\"} 1"));
        assert!(text.contains("cumulo_api_request_seconds_count{route=\"/v3\"} 2"));
    }
}
