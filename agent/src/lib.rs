//! cumulo-agent's core, as a library: the instance lifecycle (pending → active → exited, and
//! stopping), START admission against memory/disk/vCPU watermarks, the node's accounting,
//! instance records kept on disk and re-attached after a restart, EVACUATE/RESTORE, and
//! reporting.
//!
//! IO sits behind two narrow traits: a [`Backend`] runs instances ([`sim`], or real VMs with
//! [`backend::libvirt`]) and a [`Reporter`] sends what happens (SSNTP frames on a host; store
//! writes off the host). The reporter speaks the agent's own types ([`model`]); [`wire`] maps them to SSNTP
//! payloads and SSNTP commands to them, so the SSNTP wiring is a thin adapter.
//!
//! [`daemon`] is that adapter, the `cumulo-agent` binary's body: the command line, the SSNTP
//! client, an SSNTP [`Reporter`] and the handling of the scheduler's frames. Everything else in
//! the crate opens no socket. Tenant networking ([`net`]) wraps the libvirt backend when the
//! node is a compute node (`--network cn|dual`).
//!
//! [`cnci`] is the tenant network concentrator's body (the `cumulo-cnci` binary): it shares
//! [`net`]'s kernel interface and names nothing of the agent's core.
//!
//! Tests use `backend::fake::FakeBackend` and `reporter::RecordingReporter`, both recording
//! fakes (built for `cfg(test)` and the `testing` feature only), with tokio's paused clock.
#![forbid(unsafe_code)]

pub mod backend;
pub mod cnci;
pub mod config;
pub mod core;
pub mod daemon;
#[cfg(any(test, fuzzing))]
pub mod fuzzing;
pub mod host;
pub mod model;
pub mod net;
pub mod netns;
pub mod remote;
pub mod reporter;
pub mod sim;
pub mod store;
pub mod wire;

pub use backend::{Backend, BackendError};
pub use config::{Config, ConfigError, Limit, Limits};
pub use core::{Command, Core, CoreError, FirewallRefusal, Snapshot};
pub use host::{HostFigures, HostSource};
pub use reporter::Reporter;
