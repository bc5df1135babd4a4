//! The node's resource accounting, pure: what is available given the host's figures and the
//! instances' reservations, the status that follows from the watermarks, and START admission.
//!
//! Instances reserve what they ask for in full. The host's free memory (disk) already counts
//! what instances use now, so available = host free + Σ min(use, reserved) − Σ reserved: what
//! is free once every instance has grown to its reservation (ciao's rule). vCPUs are pure
//! reservations: available = vCPUs − Σ reserved.

use crate::config::{Limit, Limits};
use crate::host::HostFigures;
use crate::model::{Availability, Resources, Usage};

/// What is available for new instances (negative when reservations exceed the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Available {
    /// Memory, MiB.
    pub mem_mb: i64,
    /// Disk, MiB.
    pub disk_mb: i64,
    /// vCPUs.
    pub vcpus: i64,
}

/// What is available, given the host and every instance's reservation and use.
pub(crate) fn available(
    host: &HostFigures,
    vcpus_total: u32,
    instances: impl IntoIterator<Item = (Resources, Usage)>,
) -> Available {
    let mut a = Available {
        mem_mb: clamp(host.mem_available_mb),
        disk_mb: clamp(host.disk_available_mb),
        vcpus: i64::from(vcpus_total),
    };
    for (reserved, usage) in instances {
        a.mem_mb -= i64::from(reserved.mem_mb - usage.mem_mb.min(reserved.mem_mb));
        a.disk_mb -= i64::from(reserved.disk_mb - usage.disk_mb.min(reserved.disk_mb));
        a.vcpus -= i64::from(reserved.vcpus);
    }
    a
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A figure as reported: negative reads as zero, huge as `u32::MAX`.
pub(crate) fn report_figure(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

fn below(limit: Limit, available: i64, watermark: u64) -> bool {
    limit.enabled && available < clamp(watermark)
}

/// The node's status: MAINTENANCE when evacuated; FULL at the instance limit or below a high
/// watermark of an enabled limit; READY otherwise.
pub(crate) fn availability(
    maintenance: bool,
    available: Available,
    instances: usize,
    limits: &Limits,
    max_instances: u32,
) -> Availability {
    if maintenance {
        return Availability::Maintenance;
    }
    let full = instances >= max_instances as usize
        || below(limits.mem, available.mem_mb, limits.mem.full_below)
        || below(limits.disk, available.disk_mb, limits.disk.full_below)
        || below(limits.vcpus, available.vcpus, limits.vcpus.full_below);
    if full {
        Availability::Full
    } else {
        Availability::Ready
    }
}

/// Whether a new instance asking for `wanted` fits: it must not take the instance count past
/// the limit, nor leave less than a low watermark of an enabled limit.
pub(crate) fn admits(
    available: Available,
    instances: usize,
    wanted: Resources,
    limits: &Limits,
    max_instances: u32,
) -> bool {
    instances < max_instances as usize
        && !below(
            limits.mem,
            available.mem_mb - i64::from(wanted.mem_mb),
            limits.mem.refuse_below,
        )
        && !below(
            limits.disk,
            available.disk_mb - i64::from(wanted.disk_mb),
            limits.disk.refuse_below,
        )
        && !below(
            limits.vcpus,
            available.vcpus - i64::from(wanted.vcpus),
            limits.vcpus.refuse_below,
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(mem: u64, disk: u64) -> HostFigures {
        HostFigures {
            mem_total_mb: mem,
            mem_available_mb: mem,
            disk_total_mb: disk,
            disk_available_mb: disk,
            vcpus: 8,
            load: 0,
        }
    }

    fn res(vcpus: u32, mem_mb: u32, disk_mb: u32) -> Resources {
        Resources {
            vcpus,
            mem_mb,
            disk_mb,
        }
    }

    #[test]
    fn reservations_count_in_full_and_use_is_added_back() {
        let used = Usage {
            mem_mb: 300,
            disk_mb: 5_000,
            cpu_percent: None,
        };
        let a = available(
            &host(10_000, 100_000),
            8,
            [(res(2, 1_000, 10_000), used), (res(1, 200, 0), used)],
        );
        // Memory: 10,000 + min(300, 1,000) + min(300, 200) − 1,200 = 9,300.
        assert_eq!(
            a,
            Available {
                mem_mb: 9_300,
                disk_mb: 100_000 + 5_000 - 10_000,
                vcpus: 5,
            }
        );
        assert_eq!(report_figure(-3), 0);
        assert_eq!(report_figure(i64::MAX), u32::MAX);
    }

    #[test]
    fn full_below_the_high_watermark_refused_below_the_low_one() {
        let limits = Limits::default();
        let a = Available {
            mem_mb: 1_200,
            disk_mb: 1_000_000,
            vcpus: 4,
        };
        assert_eq!(availability(false, a, 0, &limits, 10), Availability::Ready);
        assert!(admits(a, 0, res(1, 600, 0), &limits, 10));
        // 1,200 − 700 = 500 < 512: refused.
        assert!(!admits(a, 0, res(1, 700, 0), &limits, 10));
        let low = Available { mem_mb: 900, ..a };
        assert_eq!(availability(false, low, 0, &limits, 10), Availability::Full);
        // FULL, yet a small instance still fits above the low watermark (hysteresis).
        assert!(admits(low, 0, res(1, 300, 0), &limits, 10));
        assert_eq!(
            availability(true, a, 0, &limits, 10),
            Availability::Maintenance
        );
    }

    #[test]
    fn disk_vcpus_and_count_limits() {
        let limits = Limits::default();
        let a = Available {
            mem_mb: 100_000,
            disk_mb: 90_000,
            vcpus: 2,
        };
        assert!(admits(a, 0, res(2, 1, 86_000), &limits, 10));
        assert!(!admits(a, 0, res(2, 1, 86_001), &limits, 10));
        assert!(!admits(a, 0, res(3, 1, 0), &limits, 10));
        assert!(!admits(a, 10, res(1, 1, 0), &limits, 10));
        assert_eq!(availability(false, a, 10, &limits, 10), Availability::Full);
        let no_vcpu = Available { vcpus: 0, ..a };
        assert_eq!(
            availability(false, no_vcpu, 0, &limits, 10),
            Availability::Full
        );
    }

    #[test]
    fn disabled_limits_never_refuse() {
        let mut limits = Limits::default();
        limits.mem.enabled = false;
        limits.disk.enabled = false;
        limits.vcpus.enabled = false;
        let none = Available {
            mem_mb: -5,
            disk_mb: 0,
            vcpus: -1,
        };
        assert_eq!(
            availability(false, none, 0, &limits, 10),
            Availability::Ready
        );
        assert!(admits(none, 0, res(4, 4_096, 10_000), &limits, 10));
        assert!(!admits(none, 10, res(1, 1, 1), &limits, 10));
    }
}
