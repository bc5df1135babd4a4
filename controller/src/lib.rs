//! cumulo-controller's library: the [`api`] (REST), the [`cluster`] operations the API asks of
//! the cluster, implemented over SSNTP by the [`engine`], the instance [`actions`] log they
//! record, and the daemon around them. The
//! durable record of tenants, users, flavors, images, workloads, instances, CNCIs and events is
//! the `store` crate's. The [`ui`] is the dashboard, served beside the API.
#![forbid(unsafe_code)]

pub mod actions;
pub mod api;
pub mod capacity;
pub mod cluster;
pub mod cnci_creds;
pub mod config;
pub mod creds;
pub mod daemon;
pub mod engine;
pub mod etcd_setup;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
pub mod history;
pub mod images;
pub mod join;
pub mod launcher_key;
pub mod otlp;
pub mod resize;
pub mod ui;
pub mod volumes;
