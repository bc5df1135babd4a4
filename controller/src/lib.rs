//! cumulo-controller's library: its [`store`] (the durable record of tenants, users and roles,
//! flavors, images, workloads, instances, CNCIs and events) and the [`cluster`] operations the
//! REST API asks of the cluster (implemented over SSNTP by the engine), and the [`api`] itself.
#![forbid(unsafe_code)]

pub mod api;
pub mod cluster;
pub mod config;
pub mod creds;
pub mod daemon;
pub mod engine;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
pub use store;
