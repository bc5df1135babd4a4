//! Integration tests of the ssntp core through its public API: property tests of the codec and
//! the payloads, and the networked layer over loopback TLS.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod hostile;
mod net;
mod properties;
mod strategies;
