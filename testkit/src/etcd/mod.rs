//! A real etcd for tests, run from `PATH` on free loopback ports with fresh data directories,
//! waited for (with a deadline, by polling `/health`) until it serves, and killed by PID when
//! dropped:
//! - [`EtcdServer::start`]: one member; [`shared`] gives one server per test binary to any number
//!   of tests at once (each uses its own key prefix); it is stopped when the last test holding
//!   it is done;
//! - [`EtcdCluster::start`]: several members forming one cluster over peer TLS; a test may kill
//!   (SIGKILL) and restart members, and try to join a member whose peer certificate comes from
//!   another CA.
//!
//! It serves TLS only, as a cluster's etcd does (`docs/etcd-store.md`): a CA of its own
//! ([`TestPki`](crate::TestPki)) issues each member's certificate (127.0.0.1, `localhost`; serverAuth and
//! clientAuth, for clients and peers) and, through [`EtcdServer::identity`] or
//! [`EtcdCluster::identity`], client certificates whose CN is the etcd user; clients must present
//! one (`--client-cert-auth`), and so must peers (`--peer-client-cert-auth`, `https://` peer
//! URLs). Authentication (users and roles) is off until someone enables it: [`shared_with`] runs
//! a set-up (the store's `setup_auth`) on each server it starts.
//!
//! When `etcd` is not installed, [`available`] (and so [`shared`]) says no after printing why,
//! so that the tests can skip, unless `CUMULO_REQUIRE_ETCD=1` is set (CI sets it): then a missing
//! etcd fails the test.

mod cluster;
mod member;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use ssntp_net::TlsIdentity;

pub use self::cluster::{EtcdCluster, JoinAttempt, PeerIssuer, ROOT};

/// An etcd process started by a test (a cluster of one member), with its own data directory;
/// killed and removed on drop.
#[derive(Debug)]
pub struct EtcdServer {
    cluster: EtcdCluster,
}

impl EtcdServer {
    /// Starts etcd on free loopback ports and waits until it is healthy.
    pub fn start() -> std::io::Result<EtcdServer> {
        Ok(EtcdServer {
            cluster: EtcdCluster::start(1)?,
        })
    }

    /// The client endpoint, `127.0.0.1:port` (TLS).
    pub fn endpoint(&self) -> String {
        self.cluster.endpoint(0)
    }

    /// The TLS identity of etcd user `user`: a client certificate with CN `user` from etcd's CA,
    /// and that CA as the trust root.
    pub fn identity(&self, user: &str) -> TlsIdentity {
        self.cluster.identity(user)
    }

    /// A client certificate with CN `user` from another CA, etcd's CA as the trust root: etcd
    /// must refuse it.
    pub fn foreign_identity(&self, user: &str) -> TlsIdentity {
        self.cluster.foreign_identity(user)
    }

    /// A daemon's etcd TLS flags for user `user`: `--etcd-ca`, `--etcd-cert`, `--etcd-key` and
    /// the files of [`EtcdServer::client_files`].
    pub fn client_args(&self, user: &str) -> Vec<std::ffi::OsString> {
        let (ca, cert, key) = self.client_files(user);
        vec![
            "--etcd-ca".into(),
            ca.into(),
            "--etcd-cert".into(),
            cert.into(),
            "--etcd-key".into(),
            key.into(),
        ]
    }

    /// etcd's CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.cluster.ca_pem()
    }

    /// As [`EtcdServer::identity`], written as `ca.pem`, `<user>.pem` and `<user>.key` in a
    /// directory of the server's (for a daemon's `--etcd-ca`, `--etcd-cert`, `--etcd-key`).
    pub fn client_files(&self, user: &str) -> (PathBuf, PathBuf, PathBuf) {
        self.cluster.client_files(user)
    }

    /// Its process id (0 once it has exited: it never does before it is dropped, unless killed
    /// from outside).
    pub fn pid(&self) -> u32 {
        self.cluster.pid(0).unwrap_or(0)
    }
}

/// Whether an `etcd` binary runs from `PATH`.
pub fn installed() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the environment asks for etcd tests to fail rather than skip (`CUMULO_REQUIRE_ETCD=1`).
pub fn required() -> bool {
    std::env::var("CUMULO_REQUIRE_ETCD").is_ok_and(|v| v == "1")
}

/// Whether the etcd tests can run: `true` when etcd is installed; `false` (after printing why,
/// once per test binary) when it is not and not [`required`]; a panic when it is required but
/// missing. Tests that start their own etcd ([`EtcdCluster::start`]) skip on `false`, as
/// [`shared`] does.
pub fn available() -> bool {
    static MISSING: OnceLock<bool> = OnceLock::new();
    let missing = *MISSING.get_or_init(|| !installed());
    if !missing {
        return true;
    }
    if required() {
        panic!("CUMULO_REQUIRE_ETCD=1 but no etcd on PATH: install etcd-server");
    }
    static TOLD: OnceLock<()> = OnceLock::new();
    TOLD.get_or_init(|| {
        // Straight to stderr, past the test harness's capture, so the skip is seen.
        let _ = writeln!(
            std::io::stderr(),
            "etcd tests SKIPPED: no etcd on PATH (Debian: etcd-server); set \
             CUMULO_REQUIRE_ETCD=1 to make this a failure"
        );
    });
    false
}

/// The etcd server of this test binary, started on first use and stopped when the last holder
/// drops it. `None` (after printing why, once) when etcd is not installed and not required; a
/// panic when it is required, or installed but fails to start. TLS on, authentication off: any
/// certificate from [`EtcdServer::identity`] may do anything.
pub fn shared() -> Option<Arc<EtcdServer>> {
    shared_with(|_| Ok(()))
}

/// As [`shared`], running `setup` on each server it starts (before anyone else gets it), e.g.
/// the store's `setup_auth`, which enables authentication. One test binary should call it with
/// one `setup` only.
pub fn shared_with(setup: fn(&EtcdServer) -> Result<(), String>) -> Option<Arc<EtcdServer>> {
    static SERVER: Mutex<Weak<EtcdServer>> = Mutex::new(Weak::new());
    if !available() {
        return None;
    }
    let mut slot = SERVER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(server) = slot.upgrade() {
        return Some(server);
    }
    let server = EtcdServer::start().unwrap_or_else(|e| panic!("starting etcd: {e}"));
    setup(&server).unwrap_or_else(|e| panic!("setting etcd up: {e}"));
    let server = Arc::new(server);
    *slot = Arc::downgrade(&server);
    Some(server)
}
