//! The frame decoder: bytes in, raw frames out, with the size cap checked before any allocation.

use bytes::{Buf, BytesMut};

use crate::frame::{DEFAULT_MAX_FRAME, HEADER_LEN, Header, MAJOR, MAX_FRAME_CEILING, RawFrame};

/// How much room a partial frame's body is given at a time.
const GROW: usize = 64 << 10;

/// A stream that cannot be framed any further: the session must close (PROTOCOL.md §5 rule 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The header announces a body over `max_frame`.
    #[error("frame body of {length} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The announced body length.
        length: u32,
        /// The receiver's limit.
        max: u32,
    },
    /// The major version is not 1.
    #[error("unsupported protocol major version {major}")]
    Version {
        /// The major version received (without the TRACE flag).
        major: u8,
    },
}

/// What one decoding step produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A whole frame.
    Frame(RawFrame),
    /// Not enough bytes yet: at least this many more are needed.
    NeedMore(usize),
}

/// A frame borrowed from the front of a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceFrame<'a> {
    /// The checked header.
    pub header: Header,
    /// The body bytes.
    pub body: &'a [u8],
    /// How many bytes of the slice the frame used (header and body).
    pub used: usize,
}

/// Splits a byte stream into frames. Holds no state between frames but its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoder {
    max_frame: u32,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder {
    /// A decoder that refuses bodies over `max_frame` (capped at 16 MiB).
    pub fn new(max_frame: u32) -> Decoder {
        Decoder {
            max_frame: max_frame.min(MAX_FRAME_CEILING),
        }
    }

    /// The largest body this decoder accepts.
    pub fn max_frame(&self) -> u32 {
        self.max_frame
    }

    /// Checks a header: major version first, then the length against the cap.
    pub fn check(&self, header: &Header) -> Result<(), FrameError> {
        if header.major != MAJOR {
            return Err(FrameError::Version {
                major: header.major,
            });
        }
        if header.length > self.max_frame {
            return Err(FrameError::TooLarge {
                length: header.length,
                max: self.max_frame,
            });
        }
        Ok(())
    }

    /// Takes one frame off the front of `buf`, or says how many more bytes it needs. Room for
    /// the body is reserved only after the length has been checked, and then 64 KiB at a time.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Decoded, FrameError> {
        let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
            return Ok(Decoded::NeedMore(HEADER_LEN - buf.len()));
        };
        let header = Header::parse(head);
        self.check(&header)?;
        let total = HEADER_LEN + header.length as usize;
        if buf.len() < total {
            reserve_body(buf, total);
            return Ok(Decoded::NeedMore(total - buf.len()));
        }
        buf.advance(HEADER_LEN);
        let body = buf.split_to(header.length as usize).freeze();
        Ok(Decoded::Frame(RawFrame { header, body }))
    }

    /// Makes room for the rest of a frame whose start `buf` holds, as [`Decoder::decode`] does
    /// when it needs more bytes, for a reader that finds its frames with
    /// [`Decoder::decode_slice`] (nothing for a buffer without a whole header, or whose header
    /// the decoder refuses).
    pub fn reserve_rest(&self, buf: &mut BytesMut) {
        if let Some(head) = buf.first_chunk::<HEADER_LEN>() {
            let header = Header::parse(head);
            if self.check(&header).is_ok() {
                reserve_body(buf, HEADER_LEN + header.length as usize);
            }
        }
    }

    /// Decodes one frame from the front of a slice without copying. `Ok(None)` when the slice
    /// holds no whole frame yet.
    pub fn decode_slice<'a>(&self, buf: &'a [u8]) -> Result<Option<SliceFrame<'a>>, FrameError> {
        let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let header = Header::parse(head);
        self.check(&header)?;
        let used = HEADER_LEN + header.length as usize;
        Ok(buf
            .get(HEADER_LEN..used)
            .map(|body| SliceFrame { header, body, used }))
    }
}

/// Room for a frame of `total` bytes whose start `buf` holds. It grows with what arrives (64 KiB
/// at a time), so a peer that announces a large body and sends nothing more pins little memory.
fn reserve_body(buf: &mut BytesMut, total: usize) {
    if buf.len() < total {
        buf.reserve((total - buf.len()).min(GROW));
    }
}
