//! Scale bench (written next).
fn main() {}
