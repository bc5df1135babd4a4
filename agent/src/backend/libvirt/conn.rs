//! The connection to libvirt: opened on first use, shared by every call (libvirt connections
//! are thread-safe), dropped when a call fails and the connection is found dead, and opened
//! again by the next call, so the backend carries on once a restarted libvirtd answers.
//!
//! libvirt's calls block: [`Conn::run`] runs them on tokio's blocking pool.

use std::sync::{Arc, Mutex};
use virt::connect::Connect;
use virt::error::{Error, ErrorNumber};

/// What a libvirt call can fail with, as the backend needs to tell apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// libvirt cannot be reached (the daemon is down or went away).
    #[error("libvirt at {uri} is unreachable: {message}")]
    Unreachable {
        /// The connection URI.
        uri: String,
        /// libvirt's message.
        message: String,
    },
    /// No such domain.
    #[error("no such domain")]
    NoDomain,
    /// libvirt refused the call.
    #[error("libvirt: {0}")]
    Failed(String),
}

impl ConnError {
    /// A libvirt error as a [`ConnError`] (the connection is alive).
    pub fn from_virt(e: &Error) -> ConnError {
        if e.code() == ErrorNumber::NoDomain {
            ConnError::NoDomain
        } else {
            ConnError::Failed(e.message().to_string())
        }
    }
}

/// One reference on a libvirt connection, given back when dropped (virt 0.4's `Connect` does
/// not close itself: every clone is a reference that must be closed).
struct Owned(Connect);

impl Drop for Owned {
    fn drop(&mut self) {
        // Closing a reference fails only for a connection that is gone already.
        let _ = self.0.close();
    }
}

/// A shared, self-healing libvirt connection.
#[derive(Clone)]
pub struct Conn {
    uri: Arc<str>,
    current: Arc<Mutex<Option<Owned>>>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("uri", &self.uri).finish()
    }
}

impl Conn {
    /// A connection to `uri`, opened on first use.
    pub fn new(uri: &str) -> Conn {
        // libvirt's default error handler prints every error on stderr; ours are returned.
        virt::error::clear_error_callback();
        Conn {
            uri: uri.into(),
            current: Arc::new(Mutex::new(None)),
        }
    }

    /// The URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    fn unreachable(&self, e: &Error) -> ConnError {
        ConnError::Unreachable {
            uri: self.uri.to_string(),
            message: e.message().to_string(),
        }
    }

    /// A reference on the open connection, or on a new one.
    fn connect(&self) -> Result<Owned, ConnError> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = current.as_ref() {
            return Ok(Owned(c.0.clone()));
        }
        let c = Connect::open(Some(&self.uri)).map_err(|e| self.unreachable(&e))?;
        tracing::info!(uri = %self.uri, "connected to libvirt");
        let mine = Owned(c.clone());
        *current = Some(Owned(c));
        Ok(mine)
    }

    /// Forgets the connection if it is dead; the error to return for `e`.
    fn check(&self, c: &Connect, e: &Error) -> ConnError {
        if c.is_alive().unwrap_or(false) {
            return ConnError::from_virt(e);
        }
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.take().is_some() {
            tracing::warn!(uri = %self.uri, error = %e.message(), "lost the libvirt connection");
        }
        self.unreachable(e)
    }

    /// Runs `f` on a connection, on the calling thread (blocking). A libvirt error from `f`
    /// becomes a [`ConnError`]; a dead connection is dropped so that the next call reopens.
    pub fn call<T>(&self, f: impl FnOnce(&Connect) -> Result<T, Error>) -> Result<T, ConnError> {
        let c = self.connect()?;
        f(&c.0).map_err(|e| self.check(&c.0, &e))
    }

    /// [`Conn::call`] on tokio's blocking pool.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connect) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, ConnError> {
        let conn = self.clone();
        match tokio::task::spawn_blocking(move || conn.call(f)).await {
            Ok(r) => r,
            Err(e) => Err(ConnError::Failed(format!("libvirt call task: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use virt::domain::Domain;

    #[tokio::test]
    async fn test_driver_answers_and_a_missing_daemon_is_unreachable() {
        let conn = Conn::new("test:///default");
        let name = conn.run(|c| c.get_type()).await.unwrap();
        assert_eq!(name, "TEST");
        let err = conn
            .run(|c| Domain::lookup_by_name(c, "cumulo-no-such-domain"))
            .await
            .unwrap_err();
        assert_eq!(err, ConnError::NoDomain);
        // A socket that nobody listens on: the call fails, nothing panics, and it is retried
        // (and fails again) on the next call.
        let dir = tempfile::tempdir().unwrap();
        let uri = format!(
            "qemu:///system?socket={}",
            dir.path().join("none.sock").display()
        );
        let down = Conn::new(&uri);
        for _ in 0..2 {
            let err = down.run(|c| c.get_type()).await.unwrap_err();
            assert!(matches!(err, ConnError::Unreachable { .. }), "{err:?}");
        }
    }
}
