//! `cumulo`, the user CLI of a cumulo cluster, and `cumulo up`: the whole cluster on one host in
//! one command. The CLI talks to the controller's REST API only; `up`, `down` and `status`
//! manage the local cluster's processes.
#![forbid(unsafe_code)]

pub mod args;
pub mod client;
pub mod commands;
pub mod join;
pub mod routes;
pub mod up;
