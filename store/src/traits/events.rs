//! [`EventStore`]: the bounded event log (the oldest events go first).

use crate::{Event, NewEvent, Result, Scope};

/// The event log. Every call is one transaction.
pub trait EventStore: Send + Sync {
    /// Appends an event, dropping the oldest beyond the log's capacity.
    fn append_event(&self, new: NewEvent) -> Result<Event>;
    /// The events visible in `scope` (a tenant sees its own only), oldest first, after `after`.
    fn events(&self, scope: Scope, after: Option<u64>, limit: u32) -> Result<Vec<Event>>;
    /// The newest `limit` events visible in `scope`, oldest first.
    fn recent_events(&self, scope: Scope, limit: u32) -> Result<Vec<Event>>;
    /// Deletes the events visible in `scope`; returns how many.
    fn clear_events(&self, scope: Scope) -> Result<u64>;
}
