//! A real etcd for tests: [`EtcdServer::start`] runs `etcd` from `PATH` on free loopback ports with
//! a fresh data directory, waits (with a deadline, by polling `/health`) until it serves, and kills
//! it by PID when dropped. [`shared`] gives one server per test binary to any number of tests at
//! once (each uses its own key prefix); it is stopped when the last test holding it is done.
//!
//! It serves TLS only, as a cluster's etcd does (`docs/etcd-store.md`): a CA of its own
//! ([`TestPki`]) issues its server certificate (127.0.0.1, `localhost`) and, through
//! [`EtcdServer::identity`], client certificates whose CN is the etcd user; clients must present
//! one (`--client-cert-auth`); the peer URL is TLS too. Authentication (users and roles) is off
//! until someone enables it: [`shared_with`] runs a set-up (the store's `setup_auth`) on each
//! server it starts.
//!
//! When `etcd` is not installed, [`shared`] returns `None` after printing why, so that the tests can
//! skip, unless `CUMULO_REQUIRE_ETCD=1` is set (CI sets it): then a missing etcd fails the test.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use ssntp::Role;
use ssntp_net::TlsIdentity;

use crate::pki::TestPki;

/// How long etcd may take to become healthy.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// An etcd process started by a test, with its own data directory; killed and removed on drop.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    client: SocketAddr,
    dir: PathBuf,
    pki: TestPki,
    /// A client certificate of user `root`, for the health checks.
    health: Arc<rustls::ClientConfig>,
}

/// The etcd user whose certificate [`EtcdServer`] uses for its health checks.
pub const ROOT: &str = "root";

impl EtcdServer {
    /// Starts etcd on free loopback ports and waits until it is healthy.
    pub fn start() -> std::io::Result<EtcdServer> {
        let mut last_err = None;
        // A port taken between probing and binding makes etcd exit: try again with new ports.
        for _ in 0..3 {
            match EtcdServer::try_start() {
                Ok(server) => return Ok(server),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| std::io::Error::other("etcd did not start")))
    }

    fn try_start() -> std::io::Result<EtcdServer> {
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cumulo-etcd-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let client = free_port()?;
        let peer = free_port()?;
        let log = std::fs::File::create(dir.join("etcd.log"))?;
        let client_url = format!("https://{client}");
        let peer_url = format!("https://{peer}");
        let pki = TestPki::new();
        // Serves clients and peers (both EKUs): etcd's certificate for 127.0.0.1 and localhost.
        // No role OIDs (Go before 1.22 cannot parse their 124-bit arc: etcd would refuse it).
        let (ca, cert, key) = pki.leaf_named("etcd", Role::empty()).write(&dir, "etcd");
        let health = pki
            .leaf_named(ROOT, Role::empty())
            .identity()
            .client_config()
            .map_err(std::io::Error::other)?;
        let child = Command::new("etcd")
            .arg("--name")
            .arg("test")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("test={peer_url}")])
            .arg("--cert-file")
            .arg(&cert)
            .arg("--key-file")
            .arg(&key)
            .arg("--trusted-ca-file")
            .arg(&ca)
            .arg("--client-cert-auth")
            .arg("--peer-cert-file")
            .arg(&cert)
            .arg("--peer-key-file")
            .arg(&key)
            .arg("--peer-trusted-ca-file")
            .arg(&ca)
            .arg("--peer-client-cert-auth")
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut server = EtcdServer {
            child,
            client,
            dir,
            pki,
            health,
        };
        server.wait_healthy()?;
        Ok(server)
    }

    fn wait_healthy(&mut self) -> std::io::Result<()> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(std::io::Error::other(format!(
                    "etcd exited ({status}) before it was healthy: {tail}"
                )));
            }
            if healthy(self.client, &self.health) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(std::io::Error::other(format!(
                    "etcd was not healthy within {START_DEADLINE:?}"
                )));
            }
            // Polling interval (the deadline above bounds the wait).
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The client endpoint, `127.0.0.1:port` (TLS).
    pub fn endpoint(&self) -> String {
        self.client.to_string()
    }

    /// The TLS identity of etcd user `user`: a client certificate with CN `user` from etcd's CA,
    /// and that CA as the trust root.
    pub fn identity(&self, user: &str) -> TlsIdentity {
        self.pki.leaf_named(user, Role::empty()).identity()
    }

    /// A client certificate with CN `user` from another CA, etcd's CA as the trust root: etcd
    /// must refuse it.
    pub fn foreign_identity(&self, user: &str) -> TlsIdentity {
        let leaf = TestPki::new().leaf_named(user, Role::empty());
        TlsIdentity::from_pem(
            self.pki.ca_pem().as_bytes(),
            leaf.cert_pem.as_bytes(),
            leaf.key_pem.as_bytes(),
        )
        .expect("a test certificate loads")
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
        self.pki.ca_pem()
    }

    /// As [`EtcdServer::identity`], written as `ca.pem`, `<user>.pem` and `<user>.key` in a
    /// directory of the server's (for a daemon's `--etcd-ca`, `--etcd-cert`, `--etcd-key`).
    pub fn client_files(&self, user: &str) -> (PathBuf, PathBuf, PathBuf) {
        self.pki
            .leaf_named(user, Role::empty())
            .write(&self.dir.join("clients"), user)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // `Child::kill` signals this child's PID only.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    listener.local_addr()
}

/// Whether etcd's `/health` at `addr` (over TLS, with `config`'s client certificate) says it is
/// healthy.
fn healthy(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> bool {
    let Ok(tcp) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(1)));
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let Ok(conn) = rustls::ClientConnection::new(config.clone(), name) else {
        return false;
    };
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    let request = format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
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
    static MISSING: OnceLock<bool> = OnceLock::new();
    let missing = *MISSING.get_or_init(|| !installed());
    if missing {
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
