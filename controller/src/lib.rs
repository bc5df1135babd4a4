//! cumulo-controller's library. For now: its [`store`], the durable record of tenants, users and
//! roles, flavors, images, workloads, instances (with quota-checked creation and per-tenant
//! address allocation), CNCIs and events. The REST API, the SSNTP client and the instance state
//! machine come on top of it; none of that is here yet.
#![forbid(unsafe_code)]

pub mod store;
