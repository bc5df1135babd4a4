//! Integration tests of the ssntp core through its public API: property tests of the codec and
//! the payloads (the networked layer's are in `ssntp-net`).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

mod properties;
mod strategies;
