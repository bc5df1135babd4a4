//! Fuzz entry points (filled in below).
