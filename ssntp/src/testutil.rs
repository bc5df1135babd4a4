//! Helpers for the crate's unit tests: frames from payloads or raw bytes, a fixed clock.

use bytes::{BufMut, Bytes, BytesMut};
use std::time::{Duration, Instant};

use crate::codec::{Decoded, Decoder};
use crate::frame::{DEFAULT_MAX_FRAME, Frame, HEADER_LEN, RawFrame};
use crate::payload::Payload;
use crate::session::Now;
use crate::{Operand, Uuid};

/// A raw frame as a receiver would decode it from `frame`'s encoding.
pub fn raw(frame: &Frame) -> RawFrame {
    let mut buf = BytesMut::from(&frame.to_bytes(DEFAULT_MAX_FRAME).unwrap()[..]);
    match Decoder::default().decode(&mut buf).unwrap() {
        Decoded::Frame(raw) => raw,
        Decoded::NeedMore(n) => panic!("need {n} more"),
    }
}

/// A raw frame from `origin` with `payload`.
pub fn raw_payload(origin: Uuid, payload: &Payload) -> RawFrame {
    raw(&Frame::new(origin, payload))
}

/// The encoding of a frame whose header bytes are given and whose body is `body` (length set).
pub fn bytes_with(major: u8, minor: u8, operand: Operand, origin: Uuid, body: &[u8]) -> Bytes {
    let (ty, op) = operand.to_wire();
    let mut out = BytesMut::with_capacity(HEADER_LEN + body.len());
    out.put_u8(major);
    out.put_u8(minor);
    out.put_u8(ty);
    out.put_u8(op);
    out.put_u32(body.len() as u32);
    out.put_slice(origin.as_bytes());
    out.put_slice(body);
    out.freeze()
}

/// A raw frame with any header bytes and body (decoded by a default decoder, so it must frame).
pub fn raw_with(major: u8, minor: u8, operand: Operand, origin: Uuid, body: &[u8]) -> RawFrame {
    let mut buf = BytesMut::from(&bytes_with(major, minor, operand, origin, body)[..]);
    match Decoder::default().decode(&mut buf).unwrap() {
        Decoded::Frame(raw) => raw,
        Decoded::NeedMore(n) => panic!("need {n} more"),
    }
}

/// CBOR for a value built with ciborium's `Value`.
pub fn cbor(value: &ciborium::Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(value, &mut out).unwrap();
    out
}

/// A CBOR map from (text key, value) pairs.
pub fn map(entries: Vec<(&str, ciborium::Value)>) -> ciborium::Value {
    ciborium::Value::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// A fixed starting time and offsets from it.
#[derive(Clone, Copy)]
pub struct Clock(pub Instant);

impl Clock {
    /// A clock starting now.
    pub fn new() -> Clock {
        Clock(Instant::now())
    }

    /// The instant `ms` after the start.
    pub fn at(&self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }

    /// A `Now` `ms` after the start, its wall clock `1_000_000 + ms` µs in ns.
    pub fn now(&self, ms: u64) -> Now {
        Now {
            instant: self.at(ms),
            unix_ns: (1_000_000 + ms) * 1_000_000,
        }
    }
}
