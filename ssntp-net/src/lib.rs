//! The networked half of SSNTP, the driver of the [`ssntp`] core on tokio and rustls (as quinn
//! drives quinn-proto): TLS configurations ([`tls`]), the session driver ([`conn`]: one reader and
//! one writer task per connection, bounded queues, coalesced writes) with its read budgets
//! ([`rate`]), revoked certificates ([`revocation`]), the server with its
//! forwarding rules ([`server`], [`forward`]) and the thread its handshakes run on
//! ([`handshaker`]), and the reconnecting client ([`client`]).
//!
//! The protocol's rules (frames, payloads, handshake, session) are the core's: this crate only
//! moves bytes between sockets and the core's state machines, and reads the clock for them.
//! Daemon plumbing (UUID files, runtime and signals, logging) is the `support` crate's.
#![forbid(unsafe_code)]

pub mod client;
pub mod conn;
pub mod forward;
pub mod handshaker;
pub mod rate;
pub mod relay;
pub mod revocation;
pub mod server;
pub mod tls;

pub use client::{Client, ClientConfig, ClientError, ClientEvent, ClientHandle};
pub use conn::{ConnConfig, Outbox, SendError};
pub use forward::{Directory, Route, Routes};
pub use rate::{RateParseError, ReadRate, ReadRates};
pub use revocation::{CrlError, RevocationList, Revocations};
pub use server::{
    Delivery, Handled, Server, ServerConfig, ServerError, ServerEvent, ServerHandle, Target,
};
pub use tls::{TlsError, TlsIdentity};

use std::time::Duration;

/// Socket options for every SSNTP connection: no Nagle delay, TCP keepalive on.
fn tune(tcp: &tokio::net::TcpStream) {
    let _ = tcp.set_nodelay(true);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10));
    let _ = socket2::SockRef::from(tcp).set_tcp_keepalive(&keepalive);
}
