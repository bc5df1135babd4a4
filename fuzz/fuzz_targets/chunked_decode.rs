//! Fuzz target: see `ssntp::fuzzing::chunked_decode`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ssntp::fuzzing::chunked_decode(data));
