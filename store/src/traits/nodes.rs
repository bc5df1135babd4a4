//! [`NodeStore`]: the nodes an admin disabled (Compute's `os-services` disable): they take no
//! new instances until enabled again; what runs on them stays.

use uuid::Uuid;

use crate::{DisabledNode, Result};

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
}
