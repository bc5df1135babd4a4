//! The scheduler's counters, and their Prometheus text exposition (by `prometheus-client`, in
//! the Prometheus text format 0.0.4).

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use ssntp::Operand;
use ssntp::payload::StartFailureReason;
use std::time::Duration;

/// Upper bounds of the placement latency histogram, in microseconds.
const LATENCY_BUCKETS_US: [u64; 8] = [1, 5, 10, 50, 100, 500, 1_000, 10_000];

/// One label whose value is known at compile time (a failure reason).
type StaticLabel = [(&'static str, &'static str); 1];
/// One label whose value the driver gives (a role, a state, an operand).
type Label = [(&'static str, String); 1];

/// Counters kept by the cluster owner. Cheap to update; the exposition is made by [`render`].
///
/// [`render`]: Metrics::render
#[derive(Debug)]
pub struct Metrics {
    /// STARTs placed.
    placements: Counter,
    /// STARTs refused, by reason.
    failures: Family<StaticLabel, Counter>,
    /// Placement latency, in seconds, bucketed by whole microseconds.
    latency: Histogram,
    /// Nodes dropped for silence.
    dead_nodes: Counter,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            placements: Counter::default(),
            failures: Family::default(),
            latency: Histogram::new(LATENCY_BUCKETS_US.map(seconds)),
            dead_nodes: Counter::default(),
        }
    }
}

/// Whole microseconds as seconds: the bucket bounds and the observations are made alike, so
/// that `5` µs falls in the `5` µs bucket exactly.
fn seconds(us: u64) -> f64 {
    us as f64 / 1e6
}

/// The `reason` label's values.
const REASONS: [&str; 4] = ["full_cloud", "no_cn", "no_net_cn", "other"];

fn reason_name(r: StartFailureReason) -> &'static str {
    use StartFailureReason as R;
    match r {
        R::FullCloud => REASONS[0],
        R::NoCn => REASONS[1],
        R::NoNetCn => REASONS[2],
        _ => REASONS[3],
    }
}

/// A family of gauges, one per `(value, n)`, labelled `name`.
fn gauges<'a>(
    name: &'static str,
    values: impl IntoIterator<Item = (&'a str, i64)>,
) -> Family<Label, Gauge> {
    let family = Family::<Label, Gauge>::default();
    for (value, n) in values {
        family.get_or_create(&[(name, value.to_string())]).set(n);
    }
    family
}

/// A family of counters, one per `(operand, n)`, labelled `operand`.
fn by_operand(frames: impl IntoIterator<Item = (Operand, u64)>) -> Family<Label, Counter> {
    let family = Family::<Label, Counter>::default();
    for (op, n) in frames {
        family
            .get_or_create(&[("operand", op.name().to_string())])
            .inc_by(n);
    }
    family
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// Counts a placement decision and its latency.
    pub fn placed<T>(&mut self, outcome: &Result<T, StartFailureReason>, took: Duration) {
        match outcome {
            Ok(_) => {
                self.placements.inc();
            }
            Err(r) => {
                self.failures
                    .get_or_create(&[("reason", reason_name(*r))])
                    .inc();
            }
        }
        self.latency.observe(seconds(took.as_micros() as u64));
    }

    /// Counts a node dropped for silence.
    pub fn node_dropped(&mut self) {
        self.dead_nodes.inc();
    }

    /// STARTs placed.
    pub fn placements(&self) -> u64 {
        self.placements.get()
    }

    /// STARTs refused, for every reason.
    pub fn failures(&self) -> u64 {
        REASONS
            .iter()
            .filter_map(|reason| self.failures.get(&[("reason", *reason)]))
            .map(|n| n.get())
            .sum()
    }

    /// Nodes dropped for silence.
    pub fn dead_nodes(&self) -> u64 {
        self.dead_nodes.get()
    }

    /// The Prometheus text exposition, with what the driver knows: sessions by role, nodes by
    /// state, frames in and out by operand (from the SSNTP server), the event queue depth.
    pub fn render(
        &self,
        sessions: &[(&str, usize)],
        nodes_by_state: &[(&str, usize)],
        frames: &[(Operand, u64, u64)],
        queue_depth: usize,
    ) -> String {
        let mut registry = Registry::default();
        registry.register(
            "cumulo_scheduler_sessions",
            "SSNTP sessions by role",
            gauges("role", sessions.iter().map(|(r, n)| (*r, count(*n)))),
        );
        registry.register(
            "cumulo_scheduler_nodes",
            "Nodes by state",
            gauges("state", nodes_by_state.iter().map(|(s, n)| (*s, count(*n)))),
        );
        // Counters: the encoder adds `_total` to these names.
        registry.register(
            "cumulo_scheduler_frames_in",
            "SSNTP frames received, by operand",
            by_operand(frames.iter().map(|(op, n, _)| (*op, *n))),
        );
        registry.register(
            "cumulo_scheduler_frames_out",
            "SSNTP frames sent, by operand",
            by_operand(frames.iter().map(|(op, _, n)| (*op, *n))),
        );
        registry.register(
            "cumulo_scheduler_placements",
            "STARTs placed",
            self.placements.clone(),
        );
        registry.register(
            "cumulo_scheduler_start_failures",
            "STARTs refused, by reason",
            self.failures.clone(),
        );
        registry.register(
            "cumulo_scheduler_dead_nodes",
            "Nodes dropped for silence",
            self.dead_nodes.clone(),
        );
        registry.register(
            "cumulo_scheduler_placement_seconds",
            "Time to place a START",
            self.latency.clone(),
        );
        let depth = Gauge::<i64>::default();
        depth.set(count(queue_depth));
        registry.register(
            "cumulo_scheduler_event_queue_depth",
            "Events waiting for the cluster owner",
            depth,
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let mut m = Metrics::default();
        m.placed(&Ok::<(), _>(()), Duration::from_micros(3));
        m.placed(
            &Err::<(), _>(StartFailureReason::FullCloud),
            Duration::from_micros(70),
        );
        let text = m.render(
            &[("agent", 2)],
            &[("ready", 2)],
            &[(Operand::Ready, 1, 0), (Operand::Start, 3, 2)],
            0,
        );
        assert!(text.contains("cumulo_scheduler_frames_in_total{operand=\"READY\"} 1"));
        assert!(text.contains("cumulo_scheduler_frames_out_total{operand=\"START\"} 2"));
        assert!(text.contains("cumulo_scheduler_placements_total 1"));
        assert!(text.contains("cumulo_scheduler_start_failures_total{reason=\"full_cloud\"} 1"));
        // Bounds below 1e-4 are written as Go's clients write them (`5e-06`, was `0.000005`).
        assert!(text.contains("cumulo_scheduler_placement_seconds_bucket{le=\"5e-06\"} 1"));
        assert!(text.contains("cumulo_scheduler_placement_seconds_bucket{le=\"0.0001\"} 2"));
        assert!(text.contains("cumulo_scheduler_placement_seconds_count 2"));
        assert!(text.contains("cumulo_scheduler_sessions{role=\"agent\"} 2"));
        assert_eq!(m.placements(), 1);
        assert_eq!(m.failures(), 1);
    }

    #[test]
    fn names_and_types_as_scrapers_know_them() {
        let mut m = Metrics::default();
        m.node_dropped();
        m.placed(&Err::<(), _>(StartFailureReason::NoCn), Duration::ZERO);
        let text = m.render(
            &[("agent", 0)],
            &[("ready", 0)],
            &[(Operand::Stats, 4, 0)],
            3,
        );
        for (name, kind) in [
            ("cumulo_scheduler_sessions", "gauge"),
            ("cumulo_scheduler_nodes", "gauge"),
            ("cumulo_scheduler_frames_in_total", "counter"),
            ("cumulo_scheduler_frames_out_total", "counter"),
            ("cumulo_scheduler_placements_total", "counter"),
            ("cumulo_scheduler_start_failures_total", "counter"),
            ("cumulo_scheduler_dead_nodes_total", "counter"),
            ("cumulo_scheduler_placement_seconds", "histogram"),
            ("cumulo_scheduler_event_queue_depth", "gauge"),
        ] {
            assert!(
                text.contains(&format!("\n# TYPE {name} {kind}\n")),
                "{name}: {text}"
            );
            assert!(text.contains(&format!("# HELP {name} ")), "{name}: {text}");
        }
        assert!(
            text.contains("cumulo_scheduler_nodes{state=\"ready\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("cumulo_scheduler_placements_total 0\n"),
            "{text}"
        );
        assert!(
            text.contains("cumulo_scheduler_dead_nodes_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("cumulo_scheduler_event_queue_depth 3\n"),
            "{text}"
        );
        assert!(text.contains("cumulo_scheduler_frames_out_total{operand=\"STATS\"} 0\n"));
        assert!(text.contains("cumulo_scheduler_placement_seconds_bucket{le=\"+Inf\"} 1\n"));
        assert!(text.contains("cumulo_scheduler_placement_seconds_count 1\n"));
        assert_eq!(m.dead_nodes(), 1);
        // A family with no sample yet (no STARTs refused) is left out, HELP and TYPE too.
        let text = Metrics::default().render(&[], &[], &[], 0);
        assert!(!text.contains("start_failures"), "{text}");
        assert!(
            text.contains("cumulo_scheduler_placements_total 0\n"),
            "{text}"
        );
    }
}
