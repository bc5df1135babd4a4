//! Request metrics in Prometheus text: requests by route and status class, a latency histogram
//! by route, instances by state (read from the store when scraped), the reports from nodes and
//! CNCIs the cluster refused and how far behind the schedulers' frames it is (read from it when
//! scraped). Kept and written by
//! `prometheus-client`, in the Prometheus text format 0.0.4.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::servers_by_state;
use super::{ApiError, ApiState, Principal};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// `method`, `route`, `status` (class), in that order.
type RequestLabels = [(&'static str, String); 3];
/// One label: `route`, or `state`.
type Label = [(&'static str, String); 1];

/// The request counters of one API.
#[derive(Debug)]
pub struct Metrics {
    /// (method, route, status class) → count.
    requests: Family<RequestLabels, Counter>,
    /// route → latency histogram.
    latency: Family<Label, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
        }
    }
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
        self.requests
            .get_or_create(&[
                ("method", method.to_string()),
                ("route", route.to_string()),
                ("status", class(status).to_string()),
            ])
            .inc();
        self.latency
            .get_or_create(&[("route", route.to_string())])
            .observe(seconds);
    }

    /// A registry of the counters, to which the scrape adds what it reads from the store.
    fn registry(&self) -> Registry {
        let mut registry = Registry::default();
        // A counter: the encoder adds `_total` to its name.
        registry.register(
            "cumulo_api_requests",
            "API requests by route and status class",
            self.requests.clone(),
        );
        registry.register(
            "cumulo_api_request_seconds",
            "API request latency by route",
            self.latency.clone(),
        );
        registry
    }

    /// The counters in Prometheus text.
    pub fn text(&self) -> String {
        encode(&self.registry())
    }
}

fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_text::encode(&mut out, registry);
    out
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

/// Registers the cluster's refused reports ([`Cluster::reports_refused`](crate::cluster::Cluster::reports_refused)), by frame: nothing
/// for a cluster that checks none.
fn register_refused(registry: &mut Registry, refused: Vec<(&'static str, u64)>) {
    if refused.is_empty() {
        return;
    }
    let family = Family::<Label, Counter>::default();
    for (frame, n) in refused {
        family
            .get_or_create(&[("frame", frame.to_string())])
            .inc_by(n);
    }
    // A counter: the encoder adds `_total` to its name.
    registry.register(
        "cumulo_controller_reports_refused",
        "Reports from nodes and CNCIs refused for claiming what is not their sender's, by frame",
        family,
    );
}

/// `GET /metrics`, for admins only (an admin token or the admin client certificate, as the rest
/// of the admin API): the figures hold no tenant data, but they tell an anonymous caller how
/// busy the cluster is and which routes fail, so they are not given away.
pub async fn render(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let mut registry = state.metrics.registry();
    register_refused(&mut registry, state.cluster.reports_refused());
    if let Some(behind) = state.cluster.frames_behind() {
        let gauge = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        gauge.set(behind.as_secs_f64());
        registry.register(
            "cumulo_controller_frames_behind_seconds",
            "How long the oldest frames from the schedulers waiting to be applied had waited at the last sweep (each second)",
            gauge,
        );
    }
    if let Ok(by_state) = servers_by_state(&state).await {
        let instances = Family::<Label, Gauge>::default();
        for (name, n) in by_state {
            instances
                .get_or_create(&[("state", name.to_string())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        registry.register("cumulo_instances", "Instances by state", instances);
    }
    let mut response = encode(&registry).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(prometheus_text::CONTENT_TYPE),
    );
    Ok(response)
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
        assert!(text.contains("cumulo_api_request_seconds_bucket{route=\"/v3\",le=\"1\"} 2"));
        assert!(text.contains("cumulo_api_request_seconds_bucket{route=\"/v3\",le=\"+Inf\"} 2"));
        assert!(text.contains(
            "# HELP cumulo_api_requests_total API requests by route and status class.\n"
        ));
        assert!(text.contains("# TYPE cumulo_api_requests_total counter\n"));
        assert!(text.contains("# HELP cumulo_api_request_seconds API request latency by route.\n"));
        assert!(text.contains("# TYPE cumulo_api_request_seconds histogram\n"));
    }

    #[test]
    fn refused_reports_are_counted_by_frame() {
        let mut registry = Registry::default();
        register_refused(&mut registry, vec![("STATS", 2), ("START_FAILURE", 0)]);
        let text = encode(&registry);
        assert!(
            text.contains("cumulo_controller_reports_refused_total{frame=\"STATS\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("cumulo_controller_reports_refused_total{frame=\"START_FAILURE\"} 0\n")
        );
        assert!(text.contains("# TYPE cumulo_controller_reports_refused_total counter\n"));

        // A cluster that checks nothing adds no family.
        let mut registry = Registry::default();
        register_refused(&mut registry, Vec::new());
        assert!(!encode(&registry).contains("refused"));
    }

    #[test]
    fn routes_are_escaped() {
        let m = Metrics::default();
        m.record("GET", "/a\"b\\c\nd", 500, 0.0);
        let text = m.text();
        assert!(
            text.contains(
                "cumulo_api_requests_total{method=\"GET\",route=\"/a\\\"b\\\\c\\nd\",status=\"5xx\"} 1"
            ),
            "{text}"
        );
    }
}
