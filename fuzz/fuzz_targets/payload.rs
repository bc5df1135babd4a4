//! Fuzz target: see `ssntp::fuzzing::payload`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ssntp::fuzzing::payload(data));
