//! [`NodeStore`]: the nodes an admin disabled (Compute's `os-services` disable): they take no
//! new instances until enabled again; what runs on them stays. And the hosts that join the
//! cluster: join tokens, used once, and the certificates the joined hosts were given.

use uuid::Uuid;

use std::time::SystemTime;

use crate::{DisabledNode, JoinToken, JoinedNode, Result};

/// The nodes an admin disabled.
pub trait NodeStore: Send + Sync {
    /// Disables `node` (again: its reason and time are replaced) with an optional reason (at
    /// most [`DisabledNode::MAX_REASON`] characters); at most [`DisabledNode::MAX_NODES`] nodes are
    /// disabled at once (`Invalid` past it).
    fn disable_node(&self, node: Uuid, reason: Option<String>) -> Result<DisabledNode>;
    /// Enables `node`: `true` if it was disabled.
    fn enable_node(&self, node: Uuid) -> Result<bool>;
    /// Every disabled node, by node id.
    fn disabled_nodes(&self) -> Result<Vec<DisabledNode>>;

    /// Keeps a new join token (`Conflict` on a taken id); tokens expired by its creation time
    /// are dropped first; `Invalid` when [`JoinToken::MAX_TOKENS`] would be passed.
    fn create_join_token(&self, token: JoinToken) -> Result<JoinToken>;
    /// Every join token kept, by expiry.
    fn join_tokens(&self) -> Result<Vec<JoinToken>>;
    /// Drops a join token (`NotFound` if there is none).
    fn delete_join_token(&self, id: Uuid) -> Result<()>;
    /// Uses token `id` at `now` for `node`, all or nothing: `NotFound` (no such token),
    /// `Invalid` (not its secret, or expired), `Conflict` (used already, or `node`'s UUID
    /// taken); else the token is marked used by `node`, and `node` kept (`Invalid` past
    /// [`JoinedNode::MAX_NODES`] or with a host name longer than [`JoinedNode::MAX_HOSTNAME`]).
    /// Two parallel uses of one token: one wins.
    fn redeem_join_token(
        &self,
        id: Uuid,
        secret_hash: &[u8; 32],
        now: SystemTime,
        node: JoinedNode,
    ) -> Result<JoinedNode>;
    /// Every joined node, by UUID.
    fn joined_nodes(&self) -> Result<Vec<JoinedNode>>;
    /// Marks a joined node's certificate revoked at `at` (again: the first date stays);
    /// `NotFound` if no node joined with that UUID.
    fn revoke_joined_node(&self, id: Uuid, at: SystemTime) -> Result<JoinedNode>;
}
