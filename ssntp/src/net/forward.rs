//! Forwarding rules at the server: by operand, a static rule (every session with a role) or a
//! dynamic one (a function of the typed message), as PROTOCOL.md §8 needs.

use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

use crate::frame::Operand;
use crate::payload::DeliveryFailureReason;
use crate::role::Role;
use crate::session::Message;

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

/// The forwarding rules of a server; operands without a rule go to the application.
#[derive(Clone, Default)]
pub struct Routes {
    rules: HashMap<Operand, Rule>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("operands", &self.rules.keys().collect::<Vec<_>>())
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
        self.rules.insert(operand, Rule::Role(role));
        self
    }

    /// Forwards `operand` to every session with `role` and delivers it to the application too.
    pub fn to_role_and_app(mut self, operand: Operand, role: Role) -> Routes {
        self.rules.insert(operand, Rule::Tee(role));
        self
    }

    /// Routes `operand` with a function of the message.
    pub fn dynamic(
        mut self,
        operand: Operand,
        rule: impl Fn(&Message, &dyn Directory) -> Route + Send + Sync + 'static,
    ) -> Routes {
        self.rules.insert(operand, Rule::Dynamic(Arc::new(rule)));
        self
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
