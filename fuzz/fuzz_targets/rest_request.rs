//! Fuzz target: see `controller::fuzzing::rest_request`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| controller::fuzzing::rest_request(data));
