//! Integration tests of the networked layer through its public API, over loopback TLS: handshakes,
//! round trips, forwarding, liveness, and peers that break the rules.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod hostile;
mod identity;
mod net;
