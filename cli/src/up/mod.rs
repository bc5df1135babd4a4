//! `cumulo up`, `down` and `status`: a whole cluster on this host.

pub mod layout;
pub mod procs;
