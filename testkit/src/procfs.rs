//! What benchmarks read about processes and the machine: a free loopback port, a process's
//! CPU time and resident memory from `/proc`.

/// A TCP port on 127.0.0.1 that nothing listens on now (the listener that found it is closed).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
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
        assert!(rss_mib(me) > 0.0);
        assert_eq!(cpu_ticks(u32::MAX), 0);
        assert_ne!(free_port(), 0);
    }
}
