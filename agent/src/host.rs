//! The host's own figures: memory, disk, vCPUs and load, read from Linux (`/proc/meminfo`,
//! `/proc/loadavg`, `statvfs` on the instance disk's file system, `available_parallelism`), or
//! fixed by the configuration (tests and simulation runs).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A host figure that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A `/proc` file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A `/proc` file did not hold what it should.
    #[error("{0} has no figure the agent can read")]
    Parse(&'static str),
    /// `statvfs` failed on the disk path.
    #[error("statvfs {path}: {source}")]
    Statvfs {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What the host has, before any instance reservation is taken off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFigures {
    /// Memory in all, MiB.
    pub mem_total_mb: u64,
    /// Memory the host has free now, MiB (instances' own use included in the "used" part).
    pub mem_available_mb: u64,
    /// Disk in all, MiB.
    pub disk_total_mb: u64,
    /// Disk free now, MiB.
    pub disk_available_mb: u64,
    /// vCPUs in all.
    pub vcpus: u32,
    /// One-minute load average × 100.
    pub load: u32,
}

/// Where the host figures come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostSource {
    /// Fixed figures (tests, simulation runs, or an operator's override).
    Fixed(HostFigures),
    /// Read from Linux at every stats interval; disk figures are those of the file system that
    /// holds `disk_path` (where instance disks live).
    Probe {
        /// A path on the instance disks' file system.
        disk_path: PathBuf,
    },
}

impl HostSource {
    /// The figures now.
    pub fn sample(&self) -> Result<HostFigures, HostError> {
        match self {
            HostSource::Fixed(f) => Ok(*f),
            HostSource::Probe { disk_path } => probe(disk_path),
        }
    }
}

/// Reads the host's figures from Linux.
pub fn probe(disk_path: &Path) -> Result<HostFigures, HostError> {
    let read = |path: &'static str| {
        std::fs::read_to_string(path).map_err(|source| HostError::Read { path, source })
    };
    let (mem_total_mb, mem_available_mb) =
        parse_meminfo(&read("/proc/meminfo")?).ok_or(HostError::Parse("/proc/meminfo"))?;
    let load = parse_loadavg(&read("/proc/loadavg")?).ok_or(HostError::Parse("/proc/loadavg"))?;
    let vfs = rustix::fs::statvfs(disk_path).map_err(|e| HostError::Statvfs {
        path: disk_path.to_owned(),
        source: e.into(),
    })?;
    let mib = |blocks: u64| blocks.saturating_mul(vfs.f_frsize) / (1024 * 1024);
    let vcpus = std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1);
    Ok(HostFigures {
        mem_total_mb,
        mem_available_mb,
        disk_total_mb: mib(vfs.f_blocks),
        disk_available_mb: mib(vfs.f_bavail),
        vcpus,
        load,
    })
}

/// Memory in all and available, MiB, from the text of `/proc/meminfo`. Available is the
/// kernel's `MemAvailable`; kernels without it get `MemFree + Active(file) + Inactive(file)`.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let kb = rest.trim().strip_suffix("kB").unwrap_or(rest).trim();
            kb.parse::<u64>().ok()
        })
    };
    let total = field("MemTotal")?;
    let available = match field("MemAvailable") {
        Some(a) => a,
        None => field("MemFree")? + field("Active(file)")? + field("Inactive(file)")?,
    };
    Some((total / 1024, available / 1024))
}

/// The one-minute load average × 100, from the text of `/proc/loadavg`.
pub fn parse_loadavg(text: &str) -> Option<u32> {
    let first = text.split_whitespace().next()?;
    let (int, frac) = first.split_once('.').unwrap_or((first, "0"));
    let int: u32 = int.parse().ok()?;
    let frac = format!("{:0<2}", frac.get(..2).unwrap_or(frac));
    let frac: u32 = frac.parse().ok()?;
    int.checked_mul(100)?.checked_add(frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_prefers_mem_available() {
        let text = "MemTotal:       16384000 kB\nMemFree:         1024000 kB\n\
                    MemAvailable:    8192000 kB\nActive(file):     100 kB\n";
        assert_eq!(parse_meminfo(text), Some((16000, 8000)));
    }

    #[test]
    fn meminfo_without_mem_available_adds_file_pages() {
        let text = "MemTotal: 2048000 kB\nMemFree: 102400 kB\nActive(file): 204800 kB\n\
                    Inactive(file): 102400 kB\n";
        assert_eq!(parse_meminfo(text), Some((2000, 400)));
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn loadavg_is_scaled_by_100() {
        assert_eq!(parse_loadavg("0.52 0.58 0.59 2/345 12345\n"), Some(52));
        assert_eq!(parse_loadavg("12.5 1 1 1/1 1"), Some(1250));
        assert_eq!(parse_loadavg("3 1 1"), Some(300));
        assert_eq!(parse_loadavg(""), None);
        assert_eq!(parse_loadavg("x.1"), None);
    }

    #[test]
    fn probe_reads_this_host() {
        let f = probe(Path::new("/")).unwrap();
        assert!(f.mem_total_mb > 0 && f.mem_available_mb <= f.mem_total_mb);
        assert!(f.disk_total_mb > 0 && f.disk_available_mb <= f.disk_total_mb);
        assert!(f.vcpus >= 1);
    }
}
