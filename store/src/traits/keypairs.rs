//! [`KeypairStore`]: users' SSH key pairs (Nova's keypairs), by user and name.

use uuid::Uuid;

use crate::{Keypair, NewKeypair, Result};

/// Users' key pairs: the public halves, unique by name per user. Every call is one transaction.
/// A user's key pairs go with the user ([`IdentityStore::delete_user`]).
///
/// [`IdentityStore::delete_user`]: crate::IdentityStore::delete_user
pub trait KeypairStore: Send + Sync {
    /// Creates a key pair of an existing user: `Conflict` on a name the user has,
    /// `QuotaExceeded` (`Keypairs`) when the user has `limit` key pairs already (parallel
    /// creations never exceed it), `Invalid` for a bad name (see [`Keypair::name`]), an empty,
    /// multi-line or oversized public key or fingerprint.
    fn create_keypair(&self, new: NewKeypair, limit: u32) -> Result<Keypair>;
    /// One key pair of `user` (`NotFound` if the user has none of that name).
    fn keypair(&self, user: Uuid, name: &str) -> Result<Keypair>;
    /// The key pairs of `user`, by name.
    fn keypairs(&self, user: Uuid) -> Result<Vec<Keypair>>;
    /// Deletes a key pair of `user` (`NotFound` if the user has none of that name). Instances
    /// made with it keep their copy of its public key.
    fn delete_keypair(&self, user: Uuid, name: &str) -> Result<()>;
}
