//! What the server tells the application: [`ServerEvent`]s, and the [`Handled`] token that
//! releases a session held at its barrier.

use tokio::sync::oneshot;
use uuid::Uuid;

use ssntp::Role;
use ssntp::session::Message;
use ssntp::view::Frames;

/// What the application hears from the server.
#[derive(Debug)]
pub enum ServerEvent {
    /// A session was established.
    Connected {
        /// The peer.
        uuid: Uuid,
        /// Its claimed role.
        role: Role,
        /// Which session of this UUID it is (increasing): events about an older session of
        /// the same UUID may still arrive after this one and must not be taken for it.
        generation: u64,
    },
    /// A session ended (also when replaced by a newer one with the same UUID).
    Disconnected {
        /// The peer.
        uuid: Uuid,
        /// Its claimed role.
        role: Role,
        /// Which session ended (see `Connected`).
        generation: u64,
    },
    /// Messages routed to the application, in the order the peer sent them (those that arrived
    /// together come as one batch).
    Frames {
        /// The sender.
        uuid: Uuid,
        /// Its claimed role.
        role: Role,
        /// The messages.
        messages: Vec<Message>,
        /// Set when the first message is a barrier ([`Routes::barrier_on_first`]): the
        /// session's later frames wait until it is dropped.
        ///
        /// [`Routes::barrier_on_first`]: crate::forward::Routes::barrier_on_first
        handled: Option<Handled>,
    },
    /// The frames of one read of a session, as views of the read's bytes, in the order the
    /// peer sent them ([`Delivery::Views`]): each payload is decoded when it is read.
    ///
    /// [`Delivery::Views`]: crate::Delivery::Views
    Views {
        /// The sender.
        uuid: Uuid,
        /// Its claimed role.
        role: Role,
        /// The frames.
        frames: Frames,
    },
}

/// The application's word that it has handled a barrier ([`Routes::barrier_on_first`]): the
/// session's later frames are routed once this is dropped. Drop it (or call
/// [`Handled::done`]) after acting on the messages and queuing what goes out in answer; the
/// reader waits until then (or until the session closes), so do not keep it longer.
///
/// [`Routes::barrier_on_first`]: crate::forward::Routes::barrier_on_first
#[derive(Debug)]
pub struct Handled(pub(super) oneshot::Sender<()>);

impl Handled {
    /// The messages are handled: the session's later frames may be routed.
    pub fn done(self) {
        let _ = self.0.send(());
    }
}
