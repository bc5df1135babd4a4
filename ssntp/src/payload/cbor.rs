//! CBOR helpers: one-item decoding with no trailing bytes, and the serde shapes the contract
//! fixes (UUIDs as 16-byte byte strings, roles as `u32`, addresses as text).

use serde::de::{Error as _, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use uuid::Uuid;

use super::PayloadError;

/// Decodes exactly one CBOR data item of type `T` from `bytes`; bytes after it are an error.
pub fn decode_one<'de, T: Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, PayloadError> {
    super::de::from_slice(bytes).map_err(|e| match e {
        super::de::ErrorOrTrailing::Error(e) => PayloadError::Cbor(e.to_string()),
        super::de::ErrorOrTrailing::Trailing(n) => PayloadError::TrailingBytes(n),
    })
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
