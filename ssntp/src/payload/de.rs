//! A CBOR deserializer for serde over a byte slice: what payload decoding runs on.
//!
//! Payloads are encoded with ciborium; decoding uses this reader instead, because it borrows
//! text and byte strings from the frame instead of copying them through a `Read` adapter, which
//! makes typed decoding several times faster (see `docs/benchmarks.md`). It reads RFC 8949 data
//! items: definite and indefinite lengths, tags (skipped), simple values and floats; it does
//! not allocate except where the target type owns data (and to join indefinite-length strings).
//! Nesting is limited to [`MAX_DEPTH`]. Every property of its acceptance is fuzzed against the
//! ciborium encoder (round trips in `crate::fuzzing`).
//!
//! Measured against crates that also borrow from slices (issue 19; 2026-12-02, machine loaded,
//! `cargo bench -p ssntp --bench codec -- decoders`, figures in `docs/benchmarks.md`): this reader
//! is no longer the fastest choice. In the same runs cbor4ii 1.2's serde deserializer took 1–12 %
//! less time on READY (this reader: 0.5–0.8 µs per decode), 24–27 % less on a STATS of 100
//! instances (this reader: 23–33 µs) and 12–20 % less on a full START (this reader: 1.6–2.5 µs),
//! with a nesting limit (256) and no more allocation on hostile lengths than here; minicbor-serde
//! was as fast but has no nesting limit (100,000 nested arrays overflowed the stack). All three
//! take a half to a third of the time of ciborium's reader, which this one replaced. Replacing this
//! module by cbor4ii is proposed on issue 19; until then it stays, with the fuzz targets and round
//! trips on it.

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use std::fmt;

/// The deepest nesting of arrays, maps and tags accepted.
pub const MAX_DEPTH: usize = 64;

/// Why CBOR did not decode into the requested type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    offset: usize,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error {
            message: msg.to_string(),
            offset: 0,
        }
    }
}

type Result<T> = std::result::Result<T, Error>;

/// The head of one data item: its major type and argument.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Head {
    Uint(u64),
    /// The negative integer `-1 - n`.
    Nint(u64),
    Bytes(Option<u64>),
    Text(Option<u64>),
    Array(Option<u64>),
    Map(Option<u64>),
    Tag,
    Bool(bool),
    Null,
    Float(f64),
    Simple,
    Break,
}

impl Head {
    fn describe(self) -> &'static str {
        match self {
            Head::Uint(_) => "an unsigned integer",
            Head::Nint(_) => "a negative integer",
            Head::Bytes(_) => "a byte string",
            Head::Text(_) => "a text string",
            Head::Array(_) => "an array",
            Head::Map(_) => "a map",
            Head::Tag => "a tag",
            Head::Bool(_) => "a boolean",
            Head::Null => "null",
            Head::Float(_) => "a float",
            Head::Simple => "a simple value",
            Head::Break => "a break",
        }
    }
}

/// Reads CBOR from a slice.
pub struct Deserializer<'de> {
    input: &'de [u8],
    pos: usize,
    depth: usize,
}

impl<'de> Deserializer<'de> {
    /// A deserializer at the start of `input`.
    pub fn new(input: &'de [u8]) -> Deserializer<'de> {
        Deserializer {
            input,
            pos: 0,
            depth: 0,
        }
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.input.len() - self.pos
    }

    fn error(&self, message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            offset: self.pos,
        }
    }

    fn take(&mut self, n: u64) -> Result<&'de [u8]> {
        let n = usize::try_from(n).map_err(|_| self.error("length too large"))?;
        if n > self.remaining() {
            return Err(self.error("truncated CBOR"));
        }
        let out = &self.input[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn argument(&mut self, info: u8) -> Result<Option<u64>> {
        let be = |b: &[u8]| b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
        Ok(Some(match info {
            0..=23 => u64::from(info),
            24 => be(self.take(1)?),
            25 => be(self.take(2)?),
            26 => be(self.take(4)?),
            27 => be(self.take(8)?),
            31 => return Ok(None),
            _ => return Err(self.error("reserved additional information")),
        }))
    }

    fn head(&mut self) -> Result<Head> {
        let initial = *self
            .take(1)?
            .first()
            .ok_or_else(|| self.error("truncated CBOR"))?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        if major == 7 {
            return self.simple(info);
        }
        let arg = self.argument(info)?;
        let definite = |h: fn(u64) -> Head| match arg {
            Some(a) => Ok(h(a)),
            None => Err(self.error("indefinite length not allowed here")),
        };
        match major {
            0 => definite(Head::Uint),
            1 => definite(Head::Nint),
            2 => Ok(Head::Bytes(arg)),
            3 => Ok(Head::Text(arg)),
            4 => Ok(Head::Array(arg)),
            5 => Ok(Head::Map(arg)),
            _ => definite(|_| Head::Tag),
        }
    }

    fn simple(&mut self, info: u8) -> Result<Head> {
        Ok(match info {
            20 => Head::Bool(false),
            21 => Head::Bool(true),
            22 | 23 => Head::Null,
            0..=19 => Head::Simple,
            24 => {
                if self.take(1)?[0] < 32 {
                    return Err(self.error("badly encoded simple value"));
                }
                Head::Simple
            }
            25 => {
                let b = self.take(2)?;
                Head::Float(f64::from(half_to_f32(u16::from_be_bytes([b[0], b[1]]))))
            }
            26 => {
                let b = self.take(4)?;
                Head::Float(f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            }
            27 => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Head::Float(f64::from_be_bytes(a))
            }
            31 => Head::Break,
            _ => return Err(self.error("reserved simple value")),
        })
    }

    /// The next head that is not a tag (tags are skipped).
    fn value_head(&mut self) -> Result<Head> {
        loop {
            match self.head()? {
                Head::Tag => continue,
                h => return Ok(h),
            }
        }
    }

    fn peek_head(&mut self) -> Result<Head> {
        let at = self.pos;
        let h = self.value_head();
        self.pos = at;
        h
    }

    fn enter(&mut self) -> Result<()> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error("CBOR nested too deeply"));
        }
        self.depth += 1;
        Ok(())
    }

    /// The chunks of an indefinite-length string, joined.
    fn chunks(&mut self, text: bool) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            match self.head()? {
                Head::Break => return Ok(out),
                Head::Bytes(Some(n)) if !text => out.extend_from_slice(self.take(n)?),
                Head::Text(Some(n)) if text => {
                    let chunk = self.take(n)?;
                    std::str::from_utf8(chunk).map_err(|_| self.error("invalid UTF-8"))?;
                    out.extend_from_slice(chunk);
                }
                _ => return Err(self.error("bad chunk in an indefinite-length string")),
            }
        }
    }

    fn text<V: Visitor<'de>>(&mut self, len: Option<u64>, visitor: V) -> Result<V::Value> {
        match len {
            Some(n) => {
                let at = self.pos;
                let bytes = self.take(n)?;
                let s = std::str::from_utf8(bytes).map_err(|_| Error {
                    message: "invalid UTF-8".into(),
                    offset: at,
                })?;
                visitor.visit_borrowed_str(s)
            }
            None => {
                let bytes = self.chunks(true)?;
                // Each chunk was checked; whole chunks joined are UTF-8 too.
                let s = String::from_utf8(bytes).map_err(|_| self.error("invalid UTF-8"))?;
                visitor.visit_string(s)
            }
        }
    }

    fn bytes<V: Visitor<'de>>(&mut self, len: Option<u64>, visitor: V) -> Result<V::Value> {
        match len {
            Some(n) => visitor.visit_borrowed_bytes(self.take(n)?),
            None => visitor.visit_byte_buf(self.chunks(false)?),
        }
    }

    fn seq<V: Visitor<'de>>(&mut self, len: Option<u64>, visitor: V) -> Result<V::Value> {
        self.enter()?;
        let value = visitor.visit_seq(Access {
            de: self,
            left: len,
        })?;
        self.depth -= 1;
        Ok(value)
    }

    fn map<V: Visitor<'de>>(&mut self, len: Option<u64>, visitor: V) -> Result<V::Value> {
        self.enter()?;
        let value = visitor.visit_map(Access {
            de: self,
            left: len,
        })?;
        self.depth -= 1;
        Ok(value)
    }

    fn unexpected(&self, head: Head, expected: &str) -> Error {
        self.error(format!("expected {expected}, found {}", head.describe()))
    }

    fn unsigned(&mut self, expected: &str) -> Result<u64> {
        match self.value_head()? {
            Head::Uint(n) => Ok(n),
            h => Err(self.unexpected(h, expected)),
        }
    }

    fn signed(&mut self) -> Result<i128> {
        match self.value_head()? {
            Head::Uint(n) => Ok(i128::from(n)),
            Head::Nint(n) => Ok(-1 - i128::from(n)),
            h => Err(self.unexpected(h, "an integer")),
        }
    }
}

/// IEEE 754 half precision to single precision.
fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f32::from(h & 0x3ff);
    sign * match exp {
        0 => frac * 2f32.powi(-24),
        31 if frac == 0.0 => f32::INFINITY,
        31 => f32::NAN,
        e => (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

/// Elements of an array, or entries of a map, definite or indefinite.
struct Access<'a, 'de> {
    de: &'a mut Deserializer<'de>,
    left: Option<u64>,
}

impl Access<'_, '_> {
    fn more(&mut self) -> Result<bool> {
        match &mut self.left {
            Some(0) => Ok(false),
            Some(n) => {
                *n -= 1;
                Ok(true)
            }
            None => {
                if self.de.input.get(self.de.pos) == Some(&0xff) {
                    self.de.pos += 1;
                    Ok(false)
                } else {
                    Ok(true)
                }
            }
        }
    }

    fn hint(&self) -> Option<usize> {
        self.left.and_then(|n| usize::try_from(n).ok())
    }
}

impl<'de> de::SeqAccess<'de> for Access<'_, 'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if !self.more()? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        self.hint()
    }
}

impl<'de> de::MapAccess<'de> for Access<'_, 'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if !self.more()? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.de).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.de)
    }

    fn size_hint(&self) -> Option<usize> {
        self.hint()
    }
}

macro_rules! unsigned {
    ($($method:ident => $visit:ident: $ty:ty),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            let n = self.unsigned(stringify!($ty))?;
            let v = <$ty>::try_from(n).map_err(|_| self.error(concat!("out of range for ", stringify!($ty))))?;
            visitor.$visit(v)
        }
    )*};
}

macro_rules! signed {
    ($($method:ident => $visit:ident: $ty:ty),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            let n = self.signed()?;
            let v = <$ty>::try_from(n).map_err(|_| self.error(concat!("out of range for ", stringify!($ty))))?;
            visitor.$visit(v)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for &mut Deserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Uint(n) => visitor.visit_u64(n),
            Head::Nint(n) => match i64::try_from(n) {
                Ok(n) => visitor.visit_i64(-1 - n),
                Err(_) => visitor.visit_i128(-1 - i128::from(n)),
            },
            Head::Bytes(len) => self.bytes(len, visitor),
            Head::Text(len) => self.text(len, visitor),
            Head::Array(len) => self.seq(len, visitor),
            Head::Map(len) => self.map(len, visitor),
            Head::Bool(b) => visitor.visit_bool(b),
            Head::Null => visitor.visit_unit(),
            Head::Float(f) => visitor.visit_f64(f),
            h @ (Head::Simple | Head::Break | Head::Tag) => Err(self.unexpected(h, "a value")),
        }
    }

    unsigned!(deserialize_u8 => visit_u8: u8, deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32, deserialize_u64 => visit_u64: u64);
    signed!(deserialize_i8 => visit_i8: i8, deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32, deserialize_i64 => visit_i64: i64,
        deserialize_i128 => visit_i128: i128, deserialize_u128 => visit_u128: u128);

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Bool(b) => visitor.visit_bool(b),
            h => Err(self.unexpected(h, "a boolean")),
        }
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Float(f) => visitor.visit_f64(f),
            h => Err(self.unexpected(h, "a float")),
        }
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Text(len) => self.text(len, visitor),
            h => Err(self.unexpected(h, "a text string")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Bytes(len) => self.bytes(len, visitor),
            h => Err(self.unexpected(h, "a byte string")),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.peek_head()? == Head::Null {
            self.value_head()?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Null => visitor.visit_unit(),
            h => Err(self.unexpected(h, "null")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Array(len) => self.seq(len, visitor),
            h => Err(self.unexpected(h, "an array")),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Map(len) => self.map(len, visitor),
            h => Err(self.unexpected(h, "a map")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.deserialize_map(visitor)
    }

    /// Unit variants only, written as text (how ciborium writes them).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        match self.value_head()? {
            Head::Text(Some(n)) => {
                let at = self.pos;
                let s = std::str::from_utf8(self.take(n)?).map_err(|_| Error {
                    message: "invalid UTF-8".into(),
                    offset: at,
                })?;
                visitor.visit_enum(s.into_deserializer())
            }
            h => Err(self.unexpected(h, "a variant name")),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.value_head()? {
            Head::Text(len) => self.text(len, visitor),
            Head::Bytes(len) => self.bytes(len, visitor),
            h => Err(self.unexpected(h, "a text key")),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_any(visitor)
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// Reads one value of type `T` that must take all of `bytes`.
pub fn from_slice<'de, T: de::Deserialize<'de>>(
    bytes: &'de [u8],
) -> std::result::Result<T, ErrorOrTrailing> {
    let mut de = Deserializer::new(bytes);
    let value = T::deserialize(&mut de).map_err(ErrorOrTrailing::Error)?;
    match de.remaining() {
        0 => Ok(value),
        n => Err(ErrorOrTrailing::Trailing(n)),
    }
}

/// A decoding failure, or bytes left after the one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorOrTrailing {
    /// The item did not decode.
    Error(Error),
    /// This many bytes follow the item.
    Trailing(usize),
}

#[cfg(test)]
mod tests {
    use super::*;
    use ciborium::Value;
    use std::collections::BTreeMap;

    fn value(bytes: &[u8]) -> std::result::Result<Value, ErrorOrTrailing> {
        from_slice::<Value>(bytes)
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
    fn indefinite_lengths_tags_and_halves() {
        // {_ "a": [_ 1, 2], "s": (_ "ab" "c")} with a tag before the array.
        let bytes = [
            0xbf, 0x61, b'a', 0xc1, 0x9f, 0x01, 0x02, 0xff, 0x61, b's', 0x7f, 0x62, b'a', b'b',
            0x61, b'c', 0xff, 0xff,
        ];
        let v = value(&bytes).unwrap();
        let expect = Value::Map(vec![
            (
                Value::from("a"),
                Value::Array(vec![Value::from(1), Value::from(2)]),
            ),
            (Value::from("s"), Value::from("abc")),
        ]);
        assert_eq!(v, expect);
        assert_eq!(value(&[0xf9, 0x3c, 0x00]), Ok(Value::Float(1.0)));
        assert_eq!(value(&[0xf9, 0xc4, 0x00]), Ok(Value::Float(-4.0)));
    }

    #[test]
    fn refuses_malformed_input() {
        for bad in [
            &[][..],
            &[0x18],                   // truncated argument
            &[0x1c],                   // reserved additional information
            &[0x62, b'a'],             // truncated text
            &[0x62, 0xff, 0xfe],       // invalid UTF-8
            &[0x5f, 0x61, b'a', 0xff], // text chunk in a byte string
            &[0xff],                   // lone break
            &[0x1f],                   // indefinite integer
            &[0xf8, 0x10],             // badly encoded simple value
            &[0xbf, 0x61],             // unterminated indefinite map
        ] {
            assert!(value(bad).is_err(), "{bad:x?}");
        }
        assert_eq!(value(&[0x01, 0x02]), Err(ErrorOrTrailing::Trailing(1)));
        let deep = vec![0x81; MAX_DEPTH + 1];
        assert!(value(&deep).is_err());
    }

    #[test]
    fn typed_reads_check_types_and_ranges() {
        assert_eq!(
            from_slice::<u32>(&[0x1a, 0xff, 0xff, 0xff, 0xff]),
            Ok(u32::MAX)
        );
        assert!(from_slice::<u32>(&[0x1b, 0, 0, 0, 1, 0, 0, 0, 0]).is_err());
        assert!(from_slice::<u32>(&[0x20]).is_err());
        assert_eq!(from_slice::<i32>(&[0x20]), Ok(-1));
        assert!(from_slice::<bool>(&[0x01]).is_err());
        assert_eq!(from_slice::<Option<u8>>(&[0xf6]), Ok(None));
        let m: BTreeMap<String, u8> = from_slice(&[0xa1, 0x61, b'k', 0x07]).unwrap();
        assert_eq!(m.get("k"), Some(&7));
    }
}
