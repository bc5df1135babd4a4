//! Fuzz target: see `ssntp::fuzzing::server_handshake`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ssntp::fuzzing::server_handshake(data));
