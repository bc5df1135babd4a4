//! Store benchmarks (to come).

fn main() {}
