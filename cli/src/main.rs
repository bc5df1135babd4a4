//! `cumulo`: see the library.
#![forbid(unsafe_code)]

fn main() {}
