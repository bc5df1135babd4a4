//! The SSNTP server: accepts TLS connections, runs the handshake, keeps a registry of sessions,
//! forwards frames by rule, and hands the application a bounded stream of typed events.
//!
//! By concern, one file each: `config` (how it runs, why it cannot start), `event` (what the
//! application hears), `registry` (the live sessions by UUID and by role), `shared` (the state
//! every session and handle shares, and forwarding from it), `handle` (the application's
//! [`ServerHandle`]), `dispatch` (what a reader does with each message it receives), `handshake`
//! (TLS, then CONNECT), `accept` (the [`Server`]: accept loop, connection limit, registration).
//! Imports go one way: `registry` ← `shared` ← `handle`, `dispatch`, `handshake` ← `accept`;
//! this file only re-exports.

mod accept;
mod config;
mod dispatch;
mod event;
mod handle;
mod handshake;
mod registry;
mod shared;

pub use accept::Server;
pub use config::{Delivery, ServerConfig, ServerError};
pub use event::{Handled, ServerEvent};
pub use handle::ServerHandle;
pub use shared::Target;
