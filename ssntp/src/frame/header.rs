//! The 24-byte frame header: major (with the TRACE flag), minor, type, operand, length, origin.

use uuid::Uuid;

use crate::operand::Operand;

/// The header size in bytes.
pub const HEADER_LEN: usize = 24;
/// The protocol major version.
pub const MAJOR: u8 = 1;
/// The protocol minor version.
pub const MINOR: u8 = 0;
/// The bit of the major byte that says a trace block opens the body.
pub const TRACE_FLAG: u8 = 0x80;
/// The default largest body a receiver accepts (1 MiB).
pub const DEFAULT_MAX_FRAME: u32 = 1 << 20;
/// No endpoint may accept bodies larger than this (16 MiB).
pub const MAX_FRAME_CEILING: u32 = 16 << 20;

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// The major version (without the TRACE flag).
    pub major: u8,
    /// Whether a trace block opens the body.
    pub traced: bool,
    /// The minor version.
    pub minor: u8,
    /// The frame type and operand.
    pub operand: Operand,
    /// The body length in bytes.
    pub length: u32,
    /// The UUID of the frame's creator.
    pub origin: Uuid,
}

impl Header {
    /// Reads a header from its 24 bytes. Every byte pattern is a header; checks come later.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Header {
        let mut origin = [0u8; 16];
        origin.copy_from_slice(&b[8..24]);
        Header {
            major: b[0] & !TRACE_FLAG,
            traced: b[0] & TRACE_FLAG != 0,
            minor: b[1],
            operand: Operand::from_wire(b[2], b[3]),
            length: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            origin: Uuid::from_bytes(origin),
        }
    }

    /// Writes the header's 24 bytes.
    pub fn write(&self, out: &mut [u8; HEADER_LEN]) {
        let (ty, op) = self.operand.to_wire();
        out[0] = self.major | if self.traced { TRACE_FLAG } else { 0 };
        out[1] = self.minor;
        out[2] = ty;
        out[3] = op;
        out[4..8].copy_from_slice(&self.length.to_be_bytes());
        out[8..24].copy_from_slice(self.origin.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let h = Header {
            major: 1,
            traced: true,
            minor: 0,
            operand: Operand::Start,
            length: 0x0102_0304,
            origin: Uuid::from_bytes([0xaa; 16]),
        };
        let mut b = [0u8; HEADER_LEN];
        h.write(&mut b);
        assert_eq!(&b[..8], &[0x81, 0, 0, 1, 1, 2, 3, 4]);
        assert_eq!(&b[8..], &[0xaa; 16]);
        assert_eq!(Header::parse(&b), h);
    }
}
