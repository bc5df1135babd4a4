//! The scheduler's counters, and their Prometheus text exposition.

use ssntp::Operand;
use ssntp::payload::StartFailureReason;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

/// Upper bounds of the placement latency histogram, in microseconds.
const LATENCY_BUCKETS_US: [u64; 8] = [1, 5, 10, 50, 100, 500, 1_000, 10_000];

/// Counters kept by the cluster owner.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    /// STARTs placed.
    pub placements: u64,
    /// STARTs refused, by reason.
    pub failures: BTreeMap<&'static str, u64>,
    /// Placement latency histogram (cumulative counts per bucket, then +Inf).
    latency: [u64; LATENCY_BUCKETS_US.len() + 1],
    latency_sum_us: u64,
    /// Nodes dropped for silence.
    pub dead_nodes: u64,
}

fn reason_name(r: StartFailureReason) -> &'static str {
    use StartFailureReason as R;
    match r {
        R::FullCloud => "full_cloud",
        R::NoCn => "no_cn",
        R::NoNetCn => "no_net_cn",
        _ => "other",
    }
}

impl Metrics {
    /// Counts a placement decision and its latency.
    pub fn placed<T>(&mut self, outcome: &Result<T, StartFailureReason>, took: Duration) {
        match outcome {
            Ok(_) => self.placements += 1,
            Err(r) => *self.failures.entry(reason_name(*r)).or_default() += 1,
        }
        let us = took.as_micros() as u64;
        let bucket = LATENCY_BUCKETS_US
            .iter()
            .position(|b| us <= *b)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.latency[bucket] += 1;
        self.latency_sum_us += us;
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
        let mut out = String::new();
        let _ = writeln!(out, "# TYPE cumulo_scheduler_sessions gauge");
        for (role, n) in sessions {
            let _ = writeln!(out, "cumulo_scheduler_sessions{{role=\"{role}\"}} {n}");
        }
        let _ = writeln!(out, "# TYPE cumulo_scheduler_nodes gauge");
        for (state, n) in nodes_by_state {
            let _ = writeln!(out, "cumulo_scheduler_nodes{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(out, "# TYPE cumulo_scheduler_frames_in_total counter");
        for (op, n, _) in frames {
            let name = op.name();
            let _ = writeln!(
                out,
                "cumulo_scheduler_frames_in_total{{operand=\"{name}\"}} {n}"
            );
        }
        let _ = writeln!(out, "# TYPE cumulo_scheduler_frames_out_total counter");
        for (op, _, n) in frames {
            let name = op.name();
            let _ = writeln!(
                out,
                "cumulo_scheduler_frames_out_total{{operand=\"{name}\"}} {n}"
            );
        }
        let _ = writeln!(out, "# TYPE cumulo_scheduler_placements_total counter");
        let _ = writeln!(out, "cumulo_scheduler_placements_total {}", self.placements);
        let _ = writeln!(out, "# TYPE cumulo_scheduler_start_failures_total counter");
        for (reason, n) in &self.failures {
            let _ = writeln!(
                out,
                "cumulo_scheduler_start_failures_total{{reason=\"{reason}\"}} {n}"
            );
        }
        let _ = writeln!(out, "# TYPE cumulo_scheduler_dead_nodes_total counter");
        let _ = writeln!(out, "cumulo_scheduler_dead_nodes_total {}", self.dead_nodes);
        let _ = writeln!(out, "# TYPE cumulo_scheduler_placement_seconds histogram");
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BUCKETS_US.iter().enumerate() {
            cumulative += self.latency[i];
            let le = *bound as f64 / 1e6;
            let _ = writeln!(
                out,
                "cumulo_scheduler_placement_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        cumulative += self.latency[LATENCY_BUCKETS_US.len()];
        let _ = writeln!(
            out,
            "cumulo_scheduler_placement_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(
            out,
            "cumulo_scheduler_placement_seconds_sum {}",
            self.latency_sum_us as f64 / 1e6
        );
        let _ = writeln!(out, "cumulo_scheduler_placement_seconds_count {cumulative}");
        let _ = writeln!(out, "# TYPE cumulo_scheduler_event_queue_depth gauge");
        let _ = writeln!(out, "cumulo_scheduler_event_queue_depth {queue_depth}");
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
        assert!(text.contains("cumulo_scheduler_placement_seconds_bucket{le=\"0.000005\"} 1"));
        assert!(text.contains("cumulo_scheduler_placement_seconds_bucket{le=\"0.0001\"} 2"));
        assert!(text.contains("cumulo_scheduler_placement_seconds_count 2"));
        assert!(text.contains("cumulo_scheduler_sessions{role=\"agent\"} 2"));
    }
}
