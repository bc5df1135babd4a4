//! Fuzz target: see `ssntp::fuzzing::client_handshake`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ssntp::fuzzing::client_handshake(data));
