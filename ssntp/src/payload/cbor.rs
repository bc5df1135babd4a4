//! CBOR helpers: one-item decoding with no trailing bytes, and the serde shapes the contract
//! fixes (UUIDs as 16-byte byte strings, roles as `u32`, addresses as text).
//!
//! Decoding runs on cbor4ii's serde deserializer over the frame's bytes: text and byte strings
//! are borrowed, not copied, and hostile lengths are refused before anything is allocated for
//! them. It replaced a hand-written reader (`payload::de`) once cbor4ii measured 1–27 % faster on
//! the same payloads (issue 19; figures in `docs/benchmarks.md`). Around it, [`decode_one`] adds
//! what the contract asks and cbor4ii's `from_slice` does not do: bytes after the one item are an
//! error, and nesting is limited to [`MAX_DEPTH`] (cbor4ii's own default is 256).
//!
//! What cbor4ii reads differently from the reader it replaced, none of it written by ciborium for
//! our types: a tag before a value that is decoded is refused (tags are still skipped inside
//! ignored values), a map key that is not text is refused where a struct is read (the old reader
//! matched byte-string keys against field names), and a unit is an empty array, not null.

use cbor4ii::core::dec::{Read, Reference};
use serde::de::{Error as _, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::convert::Infallible;
use std::fmt;
use uuid::Uuid;

use super::PayloadError;

/// The deepest nesting accepted from a peer, counted as cbor4ii counts it: one level for every
/// array, map, present option, enum and self-describing value entered, also inside ignored values
/// (so never more than 64 nested arrays and maps).
pub const MAX_DEPTH: usize = 64;

/// The frame's bytes as cbor4ii reads them: borrowed for the payload's lifetime, with a nesting
/// budget of [`MAX_DEPTH`] (cbor4ii asks the reader before it enters a level).
struct SliceReader<'de> {
    rest: &'de [u8],
    depth_left: usize,
}

impl<'de> Read<'de> for SliceReader<'de> {
    type Error = Infallible;

    #[inline]
    fn fill<'short>(&'short mut self, want: usize) -> Result<Reference<'de, 'short>, Infallible> {
        Ok(Reference::Long(&self.rest[..want.min(self.rest.len())]))
    }

    #[inline]
    fn advance(&mut self, n: usize) {
        self.rest = &self.rest[n.min(self.rest.len())..];
    }

    #[inline]
    fn step_in(&mut self) -> bool {
        match self.depth_left.checked_sub(1) {
            Some(left) => {
                self.depth_left = left;
                true
            }
            None => false,
        }
    }

    #[inline]
    fn step_out(&mut self) {
        self.depth_left += 1;
    }
}

/// Decodes exactly one CBOR data item of type `T` from `bytes`; bytes after it are an error.
pub fn decode_one<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, PayloadError> {
    let mut de = cbor4ii::serde::Deserializer::new(SliceReader {
        rest: bytes,
        depth_left: MAX_DEPTH,
    });
    let value = T::deserialize(&mut de);
    let rest = de.into_inner().rest.len();
    match value {
        Ok(value) if rest == 0 => Ok(value),
        Ok(_) => Err(PayloadError::TrailingBytes(rest)),
        Err(e) => {
            let at = bytes.len() - rest;
            Err(PayloadError::Cbor(match e {
                cbor4ii::serde::DecodeError::Custom(message) => format!("{message} (at byte {at})"),
                cbor4ii::serde::DecodeError::Core(e) => format!("CBOR: {e:?} (at byte {at})"),
            }))
        }
    }
}

/// Encodes one value as CBOR, appending to `out`.
pub fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail, and our payload types serialise without error.
    if let Err(e) = ciborium::ser::into_writer(value, &mut *out) {
        unreachable_encode(&e);
    }
}

#[cold]
fn unreachable_encode(e: &dyn fmt::Display) {
    // Only a bug in a payload type could reach this; keep it visible in debug builds.
    debug_assert!(false, "CBOR encoding of a payload failed: {e}");
}

struct UuidVisitor;

impl Visitor<'_> for UuidVisitor {
    type Value = Uuid;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a UUID as a 16-byte byte string")
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Uuid, E> {
        Uuid::from_slice(v).map_err(|_| E::invalid_length(v.len(), &self))
    }
}

/// A required UUID: a CBOR byte string of exactly 16 bytes.
pub mod uuid_bytes {
    use super::*;

    /// Serialises a UUID as a 16-byte byte string.
    pub fn serialize<S: Serializer>(u: &Uuid, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(u.as_bytes())
    }

    /// Deserialises a 16-byte byte string into a UUID.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Uuid, D::Error> {
        d.deserialize_bytes(UuidVisitor)
    }
}

/// An optional UUID (`?` key): absent means not set.
pub mod opt_uuid_bytes {
    use super::*;

    /// Serialises a present UUID as a 16-byte byte string (use with `skip_serializing_if`).
    pub fn serialize<S: Serializer>(u: &Option<Uuid>, s: S) -> Result<S::Ok, S::Error> {
        match u {
            Some(u) => s.serialize_bytes(u.as_bytes()),
            None => s.serialize_none(),
        }
    }

    /// Deserialises a 16-byte byte string into `Some(uuid)`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uuid>, D::Error> {
        d.deserialize_bytes(UuidVisitor).map(Some)
    }
}

/// A list of UUIDs, each a 16-byte byte string.
pub mod uuid_list {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize)]
    struct Item(#[serde(with = "uuid_bytes")] Uuid);

    /// Serialises a list of UUIDs.
    pub fn serialize<S: Serializer>(v: &[Uuid], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|u| Item(*u)))
    }

    /// Deserialises a list of UUIDs.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Uuid>, D::Error> {
        let items: Vec<Item> = Vec::deserialize(d)?;
        Ok(items.into_iter().map(|i| i.0).collect())
    }
}

/// A role bitmask as an unsigned 32-bit integer (every bit kept, known or not).
pub mod role_bits {
    use super::*;
    use crate::Role;
    use serde::Deserialize;

    /// Serialises the role's bits.
    pub fn serialize<S: Serializer>(r: &Role, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(r.bits())
    }

    /// Deserialises a `u32` into a role (unknown bits retained).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
        u32::deserialize(d).map(Role::from_bits_retain)
    }
}

/// A value written as text with `Display` and read back with `FromStr` (addresses, CIDRs, MACs).
pub mod text {
    use super::*;
    use std::marker::PhantomData;
    use std::str::FromStr;

    /// Serialises with `Display`.
    pub fn serialize<T: fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    struct ParseVisitor<T>(PhantomData<T>);

    impl<T> Visitor<'_> for ParseVisitor<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("text")
        }

        // Parses the decoder's borrowed text: no allocation on this path.
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
            v.parse().map_err(|e| E::custom(format!("{v:?}: {e}")))
        }
    }

    /// Deserialises text with `FromStr`.
    pub fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: fmt::Display,
        D: Deserializer<'de>,
    {
        d.deserialize_str(ParseVisitor(PhantomData))
    }
}

/// An optional value written as text.
pub mod opt_text {
    use super::*;
    use std::str::FromStr;

    /// Serialises a present value with `Display`.
    pub fn serialize<T: fmt::Display, S: Serializer>(
        v: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    /// Deserialises text with `FromStr` into `Some`.
    pub fn deserialize<'de, T, D>(d: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: fmt::Display,
        D: Deserializer<'de>,
    {
        super::text::deserialize(d).map(Some)
    }
}

/// A list of values written as text.
pub mod text_list {
    use super::*;
    use serde::Deserialize;
    use std::str::FromStr;

    /// Serialises each item with `Display`.
    pub fn serialize<T: fmt::Display, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|x| x.to_string()))
    }

    /// Deserialises each item with `FromStr`.
    pub fn deserialize<'de, T, D>(d: D) -> Result<Vec<T>, D::Error>
    where
        T: FromStr,
        T::Err: fmt::Display,
        D: Deserializer<'de>,
    {
        let items: Vec<String> = Vec::deserialize(d)?;
        items
            .into_iter()
            .map(|s| {
                s.parse()
                    .map_err(|e| D::Error::custom(format!("{s:?}: {e}")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ciborium::Value;
    use serde::de::IgnoredAny;
    use std::collections::BTreeMap;

    fn value(bytes: &[u8]) -> Result<Value, PayloadError> {
        decode_one::<Value>(bytes)
    }

    /// A payload-shaped struct: unknown keys are ignored.
    #[derive(Debug, PartialEq, Deserialize)]
    struct Small {
        a: u32,
    }

    /// `{ "a": 1, "x": <depth nested arrays around 0> }`.
    fn small_with_nesting(depth: usize) -> Vec<u8> {
        let mut bytes = vec![0xa2, 0x61, b'a', 0x01, 0x61, b'x'];
        bytes.extend(std::iter::repeat_n(0x81, depth));
        bytes.push(0x00);
        bytes
    }

    #[test]
    fn reads_what_ciborium_writes() {
        let v = Value::Map(vec![
            (Value::from("a"), Value::from(1)),
            (Value::from("neg"), Value::from(-300)),
            (Value::from("big"), Value::from(u64::MAX)),
            (Value::from("b"), Value::Bytes(vec![1, 2, 3])),
            (
                Value::from("l"),
                Value::Array(vec![Value::Bool(true), Value::Null, Value::Float(1.5)]),
            ),
        ]);
        let mut bytes = Vec::new();
        ciborium::ser::into_writer(&v, &mut bytes).unwrap();
        assert_eq!(value(&bytes), Ok(v));
    }

    #[test]
    fn indefinite_lengths_and_halves() {
        // {_ "a": [_ 1, 2], "s": (_ "ab" "c")}
        let bytes = [
            0xbf, 0x61, b'a', 0x9f, 0x01, 0x02, 0xff, 0x61, b's', 0x7f, 0x62, b'a', b'b', 0x61,
            b'c', 0xff, 0xff,
        ];
        let expect = Value::Map(vec![
            (
                Value::from("a"),
                Value::Array(vec![Value::from(1), Value::from(2)]),
            ),
            (Value::from("s"), Value::from("abc")),
        ]);
        assert_eq!(value(&bytes), Ok(expect));
        assert_eq!(value(&[0xf9, 0x3c, 0x00]), Ok(Value::Float(1.0)));
        assert_eq!(value(&[0xf9, 0xc4, 0x00]), Ok(Value::Float(-4.0)));
    }

    #[test]
    fn tags_are_refused_before_a_value_and_skipped_when_ignored() {
        // A tag (1) before the value of a field: refused.
        assert!(matches!(
            decode_one::<Small>(&[0xa1, 0x61, b'a', 0xc1, 0x01]),
            Err(PayloadError::Cbor(_))
        ));
        // A tagged value under an unknown key is skipped with it.
        assert_eq!(
            decode_one::<Small>(&[0xa2, 0x61, b'x', 0xc1, 0x01, 0x61, b'a', 0x02]),
            Ok(Small { a: 2 })
        );
    }

    #[test]
    fn refuses_malformed_input() {
        for bad in [
            &[][..],
            &[0x18],                                                 // truncated argument
            &[0x1c],                   // reserved additional information
            &[0x62, b'a'],             // truncated text
            &[0x62, 0xff, 0xfe],       // invalid UTF-8
            &[0x5f, 0x61, b'a', 0xff], // text chunk in a byte string
            &[0xff],                   // lone break
            &[0x1f],                   // indefinite integer
            &[0xf8, 0x10],             // badly encoded simple value
            &[0xbf, 0x61],             // unterminated indefinite map
            &[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // 2^64-1 byte string
            &[0x9b, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00], // 2^32 elements, none there
        ] {
            assert!(matches!(value(bad), Err(PayloadError::Cbor(_))), "{bad:x?}");
        }
        assert_eq!(value(&[0x01, 0x02]), Err(PayloadError::TrailingBytes(1)));
        assert_eq!(
            decode_one::<Small>(&[0xa1, 0x61, b'a', 0x01, 0xa0, 0xa0]),
            Err(PayloadError::TrailingBytes(2))
        );
    }

    #[test]
    fn typed_reads_check_types_and_ranges() {
        assert_eq!(
            decode_one::<u32>(&[0x1a, 0xff, 0xff, 0xff, 0xff]),
            Ok(u32::MAX)
        );
        assert!(decode_one::<u32>(&[0x1b, 0, 0, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(decode_one::<u32>(&[0x20]).is_err());
        assert_eq!(decode_one::<i32>(&[0x20]), Ok(-1));
        assert!(decode_one::<bool>(&[0x01]).is_err());
        assert_eq!(decode_one::<Option<u8>>(&[0xf6]), Ok(None));
        let m: BTreeMap<String, u8> = decode_one(&[0xa1, 0x61, b'k', 0x07]).unwrap();
        assert_eq!(m.get("k"), Some(&7));
        // Missing field: serde's message, with where decoding stopped.
        let Err(PayloadError::Cbor(message)) = decode_one::<Small>(&[0xa0]) else {
            panic!("a missing field decodes");
        };
        assert!(message.contains("missing field"), "{message}");
    }

    #[test]
    fn nesting_is_limited_to_max_depth() {
        // The struct, the arrays and the scalar inside them each take a level.
        let deepest = MAX_DEPTH - 2;
        assert_eq!(
            decode_one::<Small>(&small_with_nesting(deepest)),
            Ok(Small { a: 1 })
        );
        assert!(matches!(
            decode_one::<Small>(&small_with_nesting(deepest + 1)),
            Err(PayloadError::Cbor(_))
        ));
        // Read on its own: the arrays and the scalar inside them.
        let arrays = |n: usize| [vec![0x81; n], vec![0x00]].concat();
        assert!(decode_one::<IgnoredAny>(&arrays(MAX_DEPTH - 1)).is_ok());
        assert!(decode_one::<IgnoredAny>(&arrays(MAX_DEPTH)).is_err());
    }

    /// Hostile nesting, far deeper than the limit, in every shape the decoder may recurse through
    /// (ignored values, self-describing values, maps, tags): refused on a thread with a 2 MiB
    /// stack in a debug build, without overflowing it.
    #[test]
    fn hostile_nesting_is_refused_on_a_small_stack() {
        let depth = 100_000;
        let mut shapes: Vec<Vec<u8>> = Vec::new();
        for head in [&[0x81][..], &[0xa1, 0x00], &[0x9f], &[0xc1]] {
            let mut bytes = vec![0xa1, 0x61, b'x'];
            for _ in 0..depth {
                bytes.extend_from_slice(head);
            }
            bytes.push(0x00);
            shapes.push(bytes);
        }
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                for bytes in &shapes {
                    assert!(decode_one::<Small>(bytes).is_err());
                    assert!(decode_one::<Value>(bytes).is_err());
                    assert!(decode_one::<IgnoredAny>(bytes).is_err());
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
