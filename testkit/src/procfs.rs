//! What benchmarks read about processes and the machine: a free loopback port, a process's
//! CPU time and resident memory from `/proc`.

/// A TCP port that nothing is bound to now, on any address (the listener that found it is
/// closed), and that no other caller in this process was given.
///
/// It is taken below the kernel's ephemeral range (`ip_local_port_range`): a port from that range
/// (what binding port 0 gives) may be taken by any process's next outgoing connection before the
/// caller binds it, and tests make many connections; below it, only another test's explicit bind
/// can take it. The search starts at a point that depends on the process and the time, so that
/// test binaries running at once start far apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 10_000;
    let high = ephemeral_floor().max(LOW + 1_000);
    let span = high - LOW;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let start = std::process::id().wrapping_mul(7_919).wrapping_add(nanos) % span;
    for _ in 0..span {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = LOW + start.wrapping_add(k) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    // Every port below the range is taken: what the kernel gives.
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// The lowest port of the kernel's ephemeral range (32768 if it cannot be read).
fn ephemeral_floor() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// utime + stime of process `pid`, in clock ticks (1/100 s); 0 if it cannot be read.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line; 12 and 13 after the name.
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

/// The resident memory of process `pid` in MiB; 0 if it cannot be read.
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// The CPU time this process has used so far, all its threads, user and system (nanosecond
/// resolution, unlike [`cpu_ticks`]'s clock ticks).
pub fn process_cpu() -> std::time::Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory_and_a_port_is_free() {
        let me = std::process::id();
        let mut spin = 0u64;
        while cpu_ticks(me) == 0 && spin < 1_000_000_000 {
            spin = std::hint::black_box(spin + 1);
        }
        assert!(cpu_ticks(me) > 0);
        assert!(process_cpu() > std::time::Duration::ZERO);
        assert!(rss_mib(me) > 0.0);
        assert_eq!(cpu_ticks(u32::MAX), 0);
        assert_ne!(free_port(), 0);
    }
}
