//! Frames (PROTOCOL.md §3): the 24-byte header, the optional trace block, the payload bytes.
//!
//! [`RawFrame`] is what the [`Decoder`](crate::Decoder) yields: a checked header and the body
//! bytes. [`Frame`] is a raw frame whose body has been split into its trace block and its
//! payload bytes; the payload is decoded into a typed [`Payload`] on demand, and kept as bytes so
//! that a forwarder sends exactly what it received.

mod header;

pub use crate::operand::{FrameType, Operand};
pub use crate::payload::trace::{Hop, Trace};
pub use header::{
    DEFAULT_MAX_FRAME, HEADER_LEN, Header, MAJOR, MAX_FRAME_CEILING, MINOR, TRACE_FLAG,
};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

use crate::payload::{Payload, PayloadError, cbor};

/// A frame body that cannot be split into trace block and payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The trace length, or the trace block it announces, does not fit the body.
    #[error("trace block does not fit the body")]
    TraceTruncated,
    /// The trace block is not one CBOR map with a well-formed `hops` list.
    #[error("malformed trace block: {0}")]
    TraceMalformed(PayloadError),
}

/// A frame that cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The trace block is over 65,535 bytes.
    #[error("trace block of {0} bytes exceeds 65535")]
    TraceTooLarge(usize),
    /// The body is over the limit it must fit.
    #[error("frame body of {length} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The body length.
        length: usize,
        /// The limit.
        max: u32,
    },
}

/// A frame as it came off the wire: a checked header and its body (trace block + payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// The header; `header.length == body.len()`.
    pub header: Header,
    /// The body bytes.
    pub body: Bytes,
}

impl RawFrame {
    /// Splits the body into the trace block and the payload bytes.
    pub fn into_frame(self) -> Result<Frame, BodyError> {
        let RawFrame { header, mut body } = self;
        let trace = take_trace(header.traced, &mut body)?;
        Ok(Frame {
            operand: header.operand,
            minor: header.minor,
            origin: header.origin,
            trace,
            payload: body,
        })
    }
}

/// Takes the trace block off the front of a body that has one (`traced`), leaving the payload.
/// Only the trace goes through the `Result`: a receiver builds its `Frame` once, in place, from
/// the header and what is left of the body.
pub(crate) fn take_trace(traced: bool, body: &mut Bytes) -> Result<Option<Box<Trace>>, BodyError> {
    let (trace, payload_at) = read_trace(traced, body)?;
    body.advance(payload_at);
    Ok(trace)
}

/// Reads the trace block at the front of a body that has one (`traced`), in place: the trace,
/// and where the payload starts in `body`.
pub(crate) fn read_trace(
    traced: bool,
    body: &[u8],
) -> Result<(Option<Box<Trace>>, usize), BodyError> {
    if !traced {
        return Ok((None, 0));
    }
    let Some(&[hi, lo]) = body.first_chunk::<2>() else {
        return Err(BodyError::TraceTruncated);
    };
    let end = 2 + usize::from(u16::from_be_bytes([hi, lo]));
    let block = body.get(2..end).ok_or(BodyError::TraceTruncated)?;
    let trace: Trace = cbor::decode_one(block).map_err(BodyError::TraceMalformed)?;
    Ok((Some(Box::new(trace)), end))
}

/// A frame with its trace block read and its payload kept as CBOR bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The operand (and with it the frame type).
    pub operand: Operand,
    /// The sender's minor version (kept when forwarding).
    pub minor: u8,
    /// The UUID of the endpoint that created the frame.
    pub origin: Uuid,
    /// The trace block, when the frame is traced (boxed: most frames have none).
    pub trace: Option<Box<Trace>>,
    /// The payload: empty, or one CBOR map.
    pub payload: Bytes,
}

impl Frame {
    /// A new untraced frame carrying `payload`, created by `origin`.
    pub fn new(origin: Uuid, payload: &Payload) -> Frame {
        Frame {
            operand: payload.operand(),
            minor: MINOR,
            origin,
            trace: None,
            payload: Bytes::from(payload.encode()),
        }
    }

    /// The same frame with a trace block.
    pub fn with_trace(mut self, trace: Trace) -> Frame {
        self.trace = Some(Box::new(trace));
        self
    }

    /// Decodes the payload for this frame's operand.
    pub fn decode_payload(&self) -> Result<Payload, PayloadError> {
        Payload::decode(self.operand, &self.payload)
    }

    fn trace_bytes(&self) -> Result<Option<Vec<u8>>, EncodeError> {
        let Some(trace) = &self.trace else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(64);
        cbor::encode_into(trace, &mut out);
        if out.len() > usize::from(u16::MAX) {
            return Err(EncodeError::TraceTooLarge(out.len()));
        }
        Ok(Some(out))
    }

    /// The header this frame encodes with, for a body of `length` bytes.
    fn header(&self, length: u32) -> Header {
        Header {
            major: MAJOR,
            traced: self.trace.is_some(),
            minor: self.minor,
            operand: self.operand,
            length,
            origin: self.origin,
        }
    }

    /// The encoded length of an untraced frame, known without encoding it (`None` for a traced
    /// one: its trace block must be encoded to be measured); refuses a body over `max_frame` as
    /// [`Frame::encode`] does.
    pub fn untraced_len(&self, max_frame: u32) -> Result<Option<usize>, EncodeError> {
        if self.trace.is_some() {
            return Ok(None);
        }
        let length = self.payload.len();
        if length > max_frame as usize {
            return Err(EncodeError::TooLarge {
                length,
                max: max_frame,
            });
        }
        Ok(Some(HEADER_LEN + length))
    }

    /// Appends the encoded frame to `out`; refuses a body over `max_frame`.
    pub fn encode(&self, out: &mut BytesMut, max_frame: u32) -> Result<(), EncodeError> {
        let trace = self.trace_bytes()?;
        let trace_len = trace.as_ref().map_or(0, |t| 2 + t.len());
        let length = trace_len + self.payload.len();
        if length > max_frame as usize {
            return Err(EncodeError::TooLarge {
                length,
                max: max_frame,
            });
        }
        out.reserve(HEADER_LEN + length);
        let mut head = [0u8; HEADER_LEN];
        // `length` fits u32: it is at most `max_frame`.
        self.header(length as u32).write(&mut head);
        out.put_slice(&head);
        if let Some(t) = trace {
            out.put_u16(t.len() as u16);
            out.put_slice(&t);
        }
        out.put_slice(&self.payload);
        Ok(())
    }

    /// The encoded frame as one buffer.
    pub fn to_bytes(&self, max_frame: u32) -> Result<Bytes, EncodeError> {
        let mut out = BytesMut::new();
        self.encode(&mut out, max_frame)?;
        Ok(out.freeze())
    }
}
