//! Integration tests of the ssntp core through its public API: property tests of the codec and
//! the payloads.

mod properties;
mod strategies;
