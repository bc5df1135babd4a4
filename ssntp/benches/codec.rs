//! Codec benchmarks (filled in below).
fn main() {}
