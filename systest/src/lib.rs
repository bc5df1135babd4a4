//! cumulo's system tests and benchmarks (`tests/`, `benches/`): the controller, the scheduler and
//! the agent together, in process and as processes, against real TLS, etcd, libvirt and the
//! `openstack` CLI. They live in a crate of their own so that no service crate depends on
//! another for its tests: the arrows between the crates stay one-way. The library is empty.
#![forbid(unsafe_code)]
