//! Thread priorities: a thread that should yield the CPU to the rest of its process (the SSNTP
//! server's handshake thread, a benchmark's attackers) lowers its own.

use std::io;

/// Sets the calling thread's nice value (Linux: per thread).
pub fn nice_this_thread(nice: i32) -> io::Result<()> {
    let tid = rustix::thread::gettid();
    rustix::process::setpriority_process(Some(tid), nice).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_lower_its_own_priority() {
        std::thread::spawn(|| {
            nice_this_thread(19).unwrap();
            let tid = rustix::thread::gettid();
            assert_eq!(rustix::process::getpriority_process(Some(tid)).unwrap(), 19);
        })
        .join()
        .unwrap();
    }
}
