//! cumulo-controller against a real scheduler and real sim agents over SSNTP, in one process.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod cluster;
mod images;
mod openstack;
mod packaging;
mod remote;
mod support;
mod tenant_net;
