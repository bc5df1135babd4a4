//! Forwarding rules at the server: by operand, a static rule (every session with a role) or a
//! dynamic one (a function of the typed message), as PROTOCOL.md §8 needs; and barriers, which
//! keep what the application sends in answer to a message ahead of what the peer sent after it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use uuid::Uuid;

use ssntp::Role;
use ssntp::frame::Operand;
use ssntp::payload::DeliveryFailureReason;
use ssntp::session::Message;

/// Who is connected, as a dynamic rule sees it.
pub trait Directory {
    /// The role of the session with this UUID, if one is connected.
    fn role_of(&self, uuid: Uuid) -> Option<Role>;
}

/// Where a received message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To the application, as an event.
    App,
    /// To every session whose role intersects this one (never back to the sender).
    Role(Role),
    /// To every session whose role intersects this one, and to the application too (which then
    /// sees it for its own bookkeeping, not to forward it again).
    Tee(Role),
    /// To one session.
    To(Uuid),
    /// Nowhere.
    Discard,
    /// Nowhere: DELIVERY_FAILURE goes back to the sender.
    Fail {
        /// Why.
        reason: DeliveryFailureReason,
        /// The intended recipient.
        target: Option<Uuid>,
    },
}

/// A dynamic rule: the route of a message, given who is connected.
pub type DynamicRule = Arc<dyn Fn(&Message, &dyn Directory) -> Route + Send + Sync>;

#[derive(Clone)]
enum Rule {
    Role(Role),
    Tee(Role),
    Dynamic(DynamicRule),
}

/// The forwarding rules of a server; operands without a rule go to the application. Cheap to
/// clone: every session's reader holds the server's rules, shared.
#[derive(Clone, Default)]
pub struct Routes {
    rules: Arc<HashMap<Operand, Rule>>,
    /// Operands whose first message in a session is a barrier.
    barriers: Arc<HashSet<Operand>>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("operands", &self.rules.keys().collect::<Vec<_>>())
            .field("barriers", &self.barriers)
            .finish()
    }
}

impl Routes {
    /// No rules: everything goes to the application.
    pub fn new() -> Routes {
        Routes::default()
    }

    /// Forwards `operand` to every session with `role`.
    pub fn to_role(mut self, operand: Operand, role: Role) -> Routes {
        Arc::make_mut(&mut self.rules).insert(operand, Rule::Role(role));
        self
    }

    /// Forwards `operand` to every session with `role` and delivers it to the application too.
    pub fn to_role_and_app(mut self, operand: Operand, role: Role) -> Routes {
        Arc::make_mut(&mut self.rules).insert(operand, Rule::Tee(role));
        self
    }

    /// Routes `operand` with a function of the message.
    pub fn dynamic(
        mut self,
        operand: Operand,
        rule: impl Fn(&Message, &dyn Directory) -> Route + Send + Sync + 'static,
    ) -> Routes {
        Arc::make_mut(&mut self.rules).insert(operand, Rule::Dynamic(Arc::new(rule)));
        self
    }

    /// Makes the first message of each session whose operand is one of `operands` a barrier: it
    /// goes to the application (whatever its rule), in a [`ServerEvent::Frames`] that carries a
    /// [`Handled`], and the frames the session sends after it are routed only once the
    /// application has dropped that [`Handled`]. What the application sends in answer (the
    /// scheduler's NODE_CONNECTED for a node's first status) is thus queued to every peer
    /// before anything that session sent later is forwarded. Once per session: later messages
    /// with these operands are routed as usual, and a reader never waits for the application
    /// again.
    ///
    /// [`ServerEvent::Frames`]: super::ServerEvent::Frames
    /// [`Handled`]: super::Handled
    pub fn barrier_on_first(mut self, operands: impl IntoIterator<Item = Operand>) -> Routes {
        Arc::make_mut(&mut self.barriers).extend(operands);
        self
    }

    /// Whether the first message of a session with `operand` is a barrier.
    pub fn is_barrier(&self, operand: Operand) -> bool {
        self.barriers.contains(&operand)
    }

    /// Whether every frame goes to the application: no rule, no barrier.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.barriers.is_empty()
    }

    /// Whether `operand` has a rule (without one, messages go to the application).
    pub fn has_rule(&self, operand: Operand) -> bool {
        self.rules.contains_key(&operand)
    }

    /// The route of a message.
    pub fn route(&self, message: &Message, directory: &dyn Directory) -> Route {
        match self.rules.get(&message.frame.operand) {
            None => Route::App,
            Some(Rule::Role(role)) => Route::Role(*role),
            Some(Rule::Tee(role)) => Route::Tee(*role),
            Some(Rule::Dynamic(rule)) => rule(message, directory),
        }
    }
}
