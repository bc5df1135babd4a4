//! Fuzz target: see `agent::fuzzing::dhcp_packet`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| agent::fuzzing::dhcp_packet(data));
