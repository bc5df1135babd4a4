//! SSNTP, the framed, role-authenticated protocol that cumulo's endpoints speak (wire contract:
//! `docs/protocol.md`).
//!
//! This crate is the protocol's sans-IO core: roles ([`Role`]), frames and operands
//! ([`frame`]), typed payloads ([`payload`]), the decoder ([`Decoder`]), the handshake state
//! machines ([`handshake`]), the receiving rules of an established session ([`Session`]) and the
//! one mapping of protocol errors to wire ERRORs ([`error`]), the reading of roles and UUIDs
//! from X.509 certificates ([`cert`]) and the authorisation rules ([`authz`]). It does no IO: no
//! sockets, no files, no clock, no TLS; time is passed in. TLS, sockets and tasks live in the
//! driver, the `ssntp-net` crate (tokio + rustls), which depends on this one and not the other
//! way round.
#![forbid(unsafe_code)]

pub mod authz;
pub mod cert;
pub mod codec;
pub mod error;
pub mod frame;
pub mod handshake;
mod operand;
pub mod payload;
mod role;
pub mod session;
pub mod view;

#[cfg(any(test, fuzzing))]
pub mod fuzzing;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod testutil;

pub use codec::{Decoded, Decoder, FrameError, SliceFrame};
pub use error::{ClientHandshakeError, HandshakeError, Violation};
pub use frame::{Frame, Header, Operand, RawFrame};
pub use handshake::{ClientHandshake, PeerCertificate, ServerHandshake, UuidBinding};
pub use payload::Payload;
pub use role::{Role, RoleParseError, Side, api_admin_oid, api_admin_oid_der};
pub use session::{Now, Received, Session};
pub use uuid::Uuid;
