//! What each node's STATS said over the last hour, kept in memory for the dashboard's plots
//! (`GET /cumulo/v1/nodes/{id}/history`): one sample every [`STEP`] at most, [`SPAN`] of them,
//! so that a node costs at most [`SAMPLES`] × 40 bytes however often it reports (10,000 nodes:
//! under 50 MiB). Lost with a restart, rebuilt by the STATS that follow.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

/// How far back the samples go.
pub const SPAN: Duration = Duration::from_secs(3600);
/// The least time between two samples of a node (STATS in between are not kept).
pub const STEP: Duration = Duration::from_secs(30);
/// The most samples kept per node.
pub const SAMPLES: usize = (SPAN.as_secs() / STEP.as_secs()) as usize;

/// One node's figures at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When the STATS came.
    pub at: SystemTime,
    /// vCPUs in use (total less available).
    pub vcpus_used: u32,
    /// vCPUs in all.
    pub vcpus_total: u32,
    /// Memory in use, MiB.
    pub mem_used_mb: u32,
    /// Memory in all, MiB.
    pub mem_total_mb: u32,
    /// One-minute load × 100.
    pub load: u32,
    /// Instances reported.
    pub instances: u32,
}

/// A node's samples, oldest first.
#[derive(Debug, Default, Clone)]
pub struct History {
    samples: VecDeque<Sample>,
}

impl History {
    /// Keeps `sample` unless the last one is under [`STEP`] older; drops those older than
    /// [`SPAN`] (and any beyond [`SAMPLES`]).
    pub fn record(&mut self, sample: Sample) {
        if let Some(last) = self.samples.back()
            && sample
                .at
                .duration_since(last.at)
                .is_ok_and(|since| since < STEP)
        {
            return;
        }
        self.samples.push_back(sample);
        while let Some(first) = self.samples.front() {
            let old = sample
                .at
                .duration_since(first.at)
                .is_ok_and(|age| age > SPAN);
            if !old && self.samples.len() <= SAMPLES {
                break;
            }
            self.samples.pop_front();
        }
    }

    /// The samples of the last [`SPAN`] before `now`, oldest first (a node that went quiet
    /// has none).
    pub fn samples(&self, now: SystemTime) -> Vec<Sample> {
        self.samples
            .iter()
            .filter(|s| now.duration_since(s.at).map_or(true, |age| age <= SPAN))
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Sample {
        Sample {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
            vcpus_used: 1,
            vcpus_total: 4,
            mem_used_mb: 10,
            mem_total_mb: 100,
            load: 50,
            instances: u32::try_from(secs).unwrap_or(0),
        }
    }

    #[test]
    fn one_sample_a_step_for_an_hour_at_most() {
        let mut h = History::default();
        // A STATS every 5 s for two hours.
        for s in (0..7200).step_by(5) {
            h.record(at(1_000_000 + s));
        }
        let kept = h.samples(at(1_000_000 + 7200).at);
        assert!(kept.len() <= SAMPLES, "{}", kept.len());
        assert!(kept.len() >= SAMPLES - 1, "{}", kept.len());
        let first = kept.first().unwrap().at;
        let last = kept.last().unwrap().at;
        assert!(last.duration_since(first).unwrap() <= SPAN);
        assert!(
            kept.windows(2)
                .all(|w| w[1].at.duration_since(w[0].at).unwrap() >= STEP)
        );
        // The newest STATS is the last one kept within a step.
        assert!(at(1_000_000 + 7195).at.duration_since(last).unwrap() < STEP);
    }

    #[test]
    fn a_clock_that_goes_back_keeps_the_bound() {
        let mut h = History::default();
        for s in (0..400).rev() {
            h.record(at(1_000_000 + s * 40));
        }
        assert!(h.samples(at(1_000_000).at).len() <= SAMPLES);
    }

    #[test]
    fn a_quiet_node_has_no_samples_an_hour_on() {
        let mut h = History::default();
        h.record(at(1_000_000));
        assert_eq!(h.samples(at(1_000_000 + 3600).at).len(), 1);
        assert!(h.samples(at(1_000_000 + 3601).at).is_empty());
    }
}
