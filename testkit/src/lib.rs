//! Test helpers for cumulo's crates (a dev-dependency only, never in a binary).
//!
//! - [`TestPki`]: a cluster CA and role certificates made at test time (no files committed),
//!   also expired ones and ones from another CA.
//! - [`RawPeer`]: real TLS, then any bytes: for the frames well-behaved endpoints never send.
//! - [`wait_until`] and [`recv_within`]: wait for a condition or a message with a deadline,
//!   instead of sleeping.
//! - [`etcd`]: a real etcd started from `PATH` for the store's tests (one member, or a cluster
//!   of several over peer TLS whose members a test can kill and restart), stopped by PID.
//! - [`procfs`]: a free port, a process's CPU time and memory, for the benchmarks.
//! - [`libvirt`]: for the tests with real VMs: whether they run here, one at a time, the tiny
//!   guest, a state directory QEMU can reach.
//! - [`bench`](mod@bench): the bench binaries' `--mib N` argument.
//! - [`bins`]: the workspace's binaries, for tests outside the crate that builds them.
#![forbid(unsafe_code)]

pub mod bench;
pub mod bins;
pub mod browser;
pub mod containers;
pub mod etcd;
pub mod libvirt;
pub mod netns;
mod pki;
pub mod procfs;
mod raw;
mod wait;

pub use pki::{Leaf, TestPki};
pub use raw::RawPeer;
pub use wait::{poll_for, recv_within, try_poll_for, wait_for, wait_until};
