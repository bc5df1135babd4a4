//! Fuzz target: see `ssntp::fuzzing::cert`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ssntp::fuzzing::cert(data));
