//! One etcd process of a test: its name, ports, data directory, certificate files and log;
//! started from `PATH`, polled for health with a deadline, killed by PID (also when dropped).
//!
//! Every member serves TLS on both of its URLs with one certificate (serverAuth and clientAuth,
//! 127.0.0.1 and `localhost`: a peer is client and server to the others) and requires a
//! certificate from the CA it trusts from clients (`--client-cert-auth`) and peers
//! (`--peer-client-cert-auth`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pki::Leaf;

/// How a member starts: in a new cluster (its `--initial-cluster` starts together), or joining
/// one that runs (`--initial-cluster-state`). Ignored by etcd once the data directory exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClusterState {
    /// `new`.
    New,
    /// `existing`.
    Existing,
}

/// One member: what it needs to (re)start, and its process while it runs.
#[derive(Debug)]
pub(super) struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    /// Its directory: `data/`, `etcd.log`, its certificate files.
    dir: PathBuf,
    /// The CA it trusts (clients and peers), its certificate and key.
    files: (PathBuf, PathBuf, PathBuf),
    child: Option<Child>,
}

impl Member {
    /// A member named `name` on free loopback ports, in `dir`, serving and presenting `leaf`'s
    /// certificate and trusting `leaf`'s CA. Not started.
    pub(super) fn new(name: &str, dir: PathBuf, leaf: &Leaf) -> std::io::Result<Member> {
        std::fs::create_dir_all(&dir)?;
        let files = leaf.write(&dir, name);
        Ok(Member {
            name: name.to_string(),
            client: free_port()?,
            peer: free_port()?,
            dir,
            files,
            child: None,
        })
    }

    /// Its client endpoint, `127.0.0.1:port`.
    pub(super) fn client(&self) -> SocketAddr {
        self.client
    }

    /// Its entry in `--initial-cluster`: `name=https://127.0.0.1:port`.
    pub(super) fn cluster_entry(&self) -> String {
        format!("{}=https://{}", self.name, self.peer)
    }

    /// Starts etcd as this member of `initial_cluster` (a list of [`Member::cluster_entry`]).
    pub(super) fn spawn(
        &mut self,
        initial_cluster: &str,
        state: ClusterState,
    ) -> std::io::Result<()> {
        if self.child.is_some() {
            return Err(std::io::Error::other(format!("{} runs already", self.name)));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let client_url = format!("https://{}", self.client);
        let peer_url = format!("https://{}", self.peer);
        let (ca, cert, key) = &self.files;
        let state = match state {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        };
        let child = Command::new("etcd")
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", state])
            .arg("--cert-file")
            .arg(cert)
            .arg("--key-file")
            .arg(key)
            .arg("--trusted-ca-file")
            .arg(ca)
            .arg("--client-cert-auth")
            .arg("--peer-cert-file")
            .arg(cert)
            .arg("--peer-key-file")
            .arg(key)
            .arg("--peer-trusted-ca-file")
            .arg(ca)
            .arg("--peer-client-cert-auth")
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until it is healthy (checked with `health`'s client certificate) or `deadline`;
    /// an error if it exits first (with the end of its log) or the deadline passes.
    pub(super) fn wait_healthy(
        &mut self,
        health: &Arc<rustls::ClientConfig>,
        deadline: Instant,
    ) -> std::io::Result<()> {
        loop {
            if let Some(status) = self.try_wait()? {
                let log = self.log();
                let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(std::io::Error::other(format!(
                    "etcd member {} exited ({status}) before it was healthy: {tail}",
                    self.name
                )));
            }
            if self.healthy(health) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(std::io::Error::other(format!(
                    "etcd member {} was not healthy in time",
                    self.name
                )));
            }
            // Polling interval (the deadline above bounds the wait).
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it runs and its `/health` says healthy (it has a leader and a quorum read works).
    pub(super) fn healthy(&self, health: &Arc<rustls::ClientConfig>) -> bool {
        self.child.is_some() && healthy(self.client, health)
    }

    /// Its exit status if it has exited (then it is no longer running), `None` while it runs or
    /// when it was not started.
    pub(super) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let Some(child) = &mut self.child else {
            return Ok(None);
        };
        let status = child.try_wait()?;
        if status.is_some() {
            self.child = None;
        }
        Ok(status)
    }

    /// Kills it (SIGKILL to its PID: `Child::kill`) and reaps it; nothing when it does not run.
    pub(super) fn kill(&mut self) -> std::io::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Its process id while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its log (etcd's stdout and stderr, every run), empty when unreadable.
    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// A loopback port that was free a moment ago ([`crate::procfs::free_port`]).
fn free_port() -> std::io::Result<SocketAddr> {
    match crate::procfs::free_port() {
        0 => Err(std::io::Error::other("no free loopback port")),
        port => Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
    }
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
