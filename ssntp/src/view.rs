//! The frames of one read as views of its bytes: the read's buffer, shared once, and a small
//! index entry per frame that passed every receiving rule ([`Session::handle_view`]). Nothing
//! is built per frame but its entry: no `Frame`, no `Message`, no reference count taken on the
//! buffer, no payload kept decoded. A consumer decodes a payload when it reads it, on its own
//! task ([`FrameView::payload`]), and can still take a frame out as a [`Frame`] sharing the
//! bytes ([`FrameView::to_frame`]), for instance to forward it exactly as it came.
//!
//! [`Session::handle_view`]: crate::session::Session::handle_view

use bytes::Bytes;
use std::ops::Range;
use uuid::Uuid;

use crate::frame::{Frame, Header, Operand, Trace};
use crate::payload::{Payload, PayloadError};

/// Where one frame that passed every receiving rule lies in its read's bytes, with what its
/// header said and its trace block (stamped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    operand: Operand,
    minor: u8,
    origin: Uuid,
    trace: Option<Box<Trace>>,
    payload: Range<usize>,
}

impl Entry {
    pub(crate) fn new(header: &Header, trace: Option<Box<Trace>>, payload: Range<usize>) -> Entry {
        Entry {
            operand: header.operand,
            minor: header.minor,
            origin: header.origin,
            trace,
            payload,
        }
    }

    /// The frame's operand.
    pub fn operand(&self) -> Operand {
        self.operand
    }
}

/// The frames of one read that passed every rule, in the order they came: the read's bytes and
/// an index of where each frame's payload lies in them. Cheap to move: two words and a vector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frames {
    bytes: Bytes,
    entries: Vec<Entry>,
}

impl Frames {
    /// The frames `entries` index in `bytes`; `None` when an entry lies outside them.
    pub fn new(bytes: Bytes, entries: Vec<Entry>) -> Option<Frames> {
        entries
            .iter()
            .all(|e| e.payload.start <= e.payload.end && e.payload.end <= bytes.len())
            .then_some(Frames { bytes, entries })
    }

    /// How many frames.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The frame at `index`.
    pub fn get(&self, index: usize) -> Option<FrameView<'_>> {
        self.entries.get(index).map(|entry| FrameView {
            bytes: &self.bytes,
            entry,
        })
    }

    /// The frames, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = FrameView<'_>> + '_ {
        self.entries.iter().map(|entry| FrameView {
            bytes: &self.bytes,
            entry,
        })
    }

    /// The index, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// One frame of [`Frames`].
#[derive(Debug, Clone, Copy)]
pub struct FrameView<'a> {
    bytes: &'a Bytes,
    entry: &'a Entry,
}

impl<'a> FrameView<'a> {
    /// The operand (and with it the frame type).
    pub fn operand(&self) -> Operand {
        self.entry.operand
    }

    /// The sender's minor version.
    pub fn minor(&self) -> u8 {
        self.entry.minor
    }

    /// The UUID of the endpoint that created the frame.
    pub fn origin(&self) -> Uuid {
        self.entry.origin
    }

    /// The trace block, stamped on receipt, when the frame is traced.
    pub fn trace(&self) -> Option<&'a Trace> {
        self.entry.trace.as_deref()
    }

    /// The payload's CBOR bytes, as received.
    pub fn payload_bytes(&self) -> &'a [u8] {
        &self.bytes[self.entry.payload.clone()]
    }

    /// The payload, decoded now. It passed the same decoding when it was received (rule 4), so
    /// this fails only for frames indexed by hand ([`Frames::new`]).
    pub fn payload(&self) -> Result<Payload, PayloadError> {
        Payload::decode(self.entry.operand, self.payload_bytes())
    }

    /// The frame as a [`Frame`] (its trace cloned), its payload sharing the read's bytes.
    pub fn to_frame(&self) -> Frame {
        Frame {
            operand: self.entry.operand,
            minor: self.entry.minor,
            origin: self.entry.origin,
            trace: self.entry.trace.clone(),
            payload: self.bytes.slice(self.entry.payload.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{HEADER_LEN, MINOR};
    use crate::payload::{InstanceEvent, Reason};

    /// Two frames one after the other, as one read, and their index.
    fn read_of(payloads: &[Payload]) -> (Bytes, Vec<Entry>) {
        let origin = Uuid::from_bytes([1; 16]);
        let mut read = bytes::BytesMut::new();
        let mut entries = Vec::new();
        for p in payloads {
            let frame = Frame::new(origin, p);
            let start = read.len();
            frame.encode(&mut read, u32::MAX).unwrap();
            let header = Header::parse(read[start..start + HEADER_LEN].try_into().unwrap());
            entries.push(Entry::new(&header, None, start + HEADER_LEN..read.len()));
        }
        (read.freeze(), entries)
    }

    #[test]
    fn frames_are_read_in_place_in_order() {
        let deleted = Payload::InstanceDeleted(InstanceEvent {
            instance_uuid: Uuid::from_bytes([7; 16]),
        });
        let reason = Payload::ProtocolViolation(Reason::new("no"));
        let (read, entries) = read_of(&[deleted.clone(), reason.clone()]);
        let frames = Frames::new(read.clone(), entries).unwrap();
        assert_eq!(frames.len(), 2);
        let payloads: Vec<Payload> = frames.iter().map(|f| f.payload().unwrap()).collect();
        assert_eq!(payloads, [deleted.clone(), reason]);
        let first = frames.get(0).unwrap();
        assert_eq!(first.operand(), Operand::InstanceDeleted);
        assert_eq!(first.origin(), Uuid::from_bytes([1; 16]));
        assert_eq!(first.minor(), MINOR);
        assert!(first.trace().is_none());
        // The frame taken out shares the read's bytes and is the frame that was sent.
        let frame = first.to_frame();
        assert_eq!(frame, Frame::new(Uuid::from_bytes([1; 16]), &deleted));
        assert_eq!(frame.payload.as_ptr(), first.payload_bytes().as_ptr());
        assert!(frames.get(2).is_none());
    }

    #[test]
    fn an_index_outside_its_bytes_is_refused() {
        let (read, mut entries) = read_of(&[Payload::ProtocolViolation(Reason::new("x"))]);
        assert!(Frames::new(read.slice(..read.len() - 1), entries.clone()).is_none());
        entries[0].payload = Range { start: 5, end: 4 };
        assert!(Frames::new(read, entries).is_none());
    }

    #[test]
    fn an_index_entry_is_small() {
        // One per frame a session holds for its application: 48 bytes, not a 192-byte message.
        assert!(std::mem::size_of::<Entry>() <= 48);
    }
}
