//! Fuzz target: see `ssntp::fuzzing::frame_decode`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ssntp::fuzzing::frame_decode(data));
