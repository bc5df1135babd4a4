//! [`EtcdCluster`]: etcd members on loopback that form one cluster over peer TLS, each with its
//! own ports, data directory and certificate from the cluster's CA; members can be killed
//! (SIGKILL) and restarted during a test, and a newcomer can try to join with a peer
//! certificate from another CA ([`EtcdCluster::try_join`]).

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ssntp::Role;
use ssntp_net::TlsIdentity;

use super::member::{ClusterState, Member};
use crate::pki::{Leaf, TestPki};

/// How long a cluster (or a restarted member) may take to become healthy.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// The etcd user whose certificate the health checks use.
pub const ROOT: &str = "root";

/// etcd members started by a test as one cluster, in a temporary directory; killed by PID and
/// removed on drop.
///
/// Each member `etcd<i>` has free loopback client and peer ports, `<dir>/etcd<i>/data`, and a
/// certificate from the cluster's CA (CN `etcd<i>`, 127.0.0.1 and `localhost`, serverAuth and
/// clientAuth, no role OIDs: Go before 1.22 cannot parse them) that it serves to clients and
/// peers and presents to peers. Clients and peers must present a certificate from that CA
/// (`--client-cert-auth`, `--peer-client-cert-auth`); client certificates come from
/// [`EtcdCluster::identity`] (the CN is the etcd user).
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: PathBuf,
    pki: TestPki,
    /// A client certificate of user [`ROOT`], for the health checks.
    health: Arc<rustls::ClientConfig>,
}

/// Which CA issues the peer certificate of a member that tries to join
/// ([`EtcdCluster::try_join`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerIssuer {
    /// The cluster's CA, as every member's.
    Cluster,
    /// A CA of its own, which the members do not trust (the newcomer trusts the cluster's).
    Foreign,
}

/// How an attempt to join ended ([`EtcdCluster::try_join`]).
#[derive(Debug)]
pub struct JoinAttempt {
    /// Its exit status, or `None` if it still ran when the attempt ended (then it was killed).
    pub exit: Option<ExitStatus>,
    /// Whether it became healthy (a member with a leader, answering a quorum read).
    pub joined: bool,
    /// Its log (stdout and stderr; etcd logs at `warn`).
    pub log: String,
}

impl EtcdCluster {
    /// Starts `size` members as one cluster and waits (with a deadline, polling each member's
    /// `/health`) until every one is healthy.
    pub fn start(size: usize) -> std::io::Result<EtcdCluster> {
        if size == 0 {
            return Err(std::io::Error::other("an etcd cluster needs a member"));
        }
        let mut last_err = None;
        // A port taken between probing and binding makes a member exit: try again with new ports.
        for _ in 0..3 {
            match EtcdCluster::try_start(size) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| std::io::Error::other("etcd did not start")))
    }

    fn try_start(size: usize) -> std::io::Result<EtcdCluster> {
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cumulo-etcd-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let pki = TestPki::new();
        let health = pki
            .leaf_named(ROOT, Role::empty())
            .identity()
            .client_config()
            .map_err(std::io::Error::other)?;
        let mut cluster = EtcdCluster {
            members: Vec::with_capacity(size),
            dir,
            pki,
            health,
        };
        for i in 0..size {
            let name = format!("etcd{i}");
            let leaf = cluster.pki.leaf_named(&name, Role::empty());
            let member = Member::new(&name, cluster.dir.join(&name), &leaf)?;
            cluster.members.push(member);
        }
        let initial = cluster.initial_cluster();
        for member in &mut cluster.members {
            member.spawn(&initial, ClusterState::New)?;
        }
        let deadline = Instant::now() + START_DEADLINE;
        for member in &mut cluster.members {
            member.wait_healthy(&cluster.health, deadline)?;
        }
        Ok(cluster)
    }

    /// `--initial-cluster`: every member, `name=https://127.0.0.1:port`.
    fn initial_cluster(&self) -> String {
        let entries: Vec<String> = self.members.iter().map(Member::cluster_entry).collect();
        entries.join(",")
    }

    fn member(&self, member: usize) -> &Member {
        self.members
            .get(member)
            .unwrap_or_else(|| panic!("no etcd member {member} in {}", self.members.len()))
    }

    fn member_mut(&mut self, member: usize) -> &mut Member {
        let size = self.members.len();
        self.members
            .get_mut(member)
            .unwrap_or_else(|| panic!("no etcd member {member} in {size}"))
    }

    /// How many members it has (running or not).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member's client endpoint, `127.0.0.1:port` (TLS), in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.client().to_string())
            .collect()
    }

    /// Member `member`'s client endpoint, `127.0.0.1:port` (TLS). Panics on a member it does
    /// not have, as the other per-member calls.
    pub fn endpoint(&self, member: usize) -> String {
        self.member(member).client().to_string()
    }

    /// Kills member `member` with SIGKILL (by its PID) and reaps it; its data stays for
    /// [`EtcdCluster::restart`]. Nothing if it does not run.
    pub fn kill(&mut self, member: usize) -> std::io::Result<()> {
        self.member_mut(member).kill()
    }

    /// Starts member `member` again on its ports and data directory (etcd then ignores
    /// `--initial-cluster`: it rejoins as the member its data says) and waits until it is healthy.
    pub fn restart(&mut self, member: usize) -> std::io::Result<()> {
        let initial = self.initial_cluster();
        let health = self.health.clone();
        let member = self.member_mut(member);
        member.spawn(&initial, ClusterState::New)?;
        member.wait_healthy(&health, Instant::now() + START_DEADLINE)
    }

    /// Whether member `member` runs and its `/health` says healthy.
    pub fn healthy(&self, member: usize) -> bool {
        self.member(member).healthy(&self.health)
    }

    /// Member `member`'s process id while it runs.
    pub fn pid(&self, member: usize) -> Option<u32> {
        self.member(member).pid()
    }

    /// Member `member`'s log (etcd logs at `warn`), every run.
    pub fn log(&self, member: usize) -> String {
        self.member(member).log()
    }

    /// Starts a new member `name` (a name no member has) on free ports with a fresh data
    /// directory, `--initial-cluster-state existing` and the members plus itself in
    /// `--initial-cluster`, with a peer (and server) certificate from `issuer`, trusting the
    /// cluster's CA. Waits until it exits, becomes healthy or `within` passes, then kills it
    /// (by PID) if it still runs. It is not added to the cluster's membership first (etcd's
    /// `member add`), so even with a good certificate it exits after it fetched the members
    /// (`error validating peerURLs`); with a refused one it cannot fetch them at all.
    pub fn try_join(
        &self,
        name: &str,
        issuer: PeerIssuer,
        within: Duration,
    ) -> std::io::Result<JoinAttempt> {
        let leaf = match issuer {
            PeerIssuer::Cluster => self.pki.leaf_named(name, Role::empty()),
            PeerIssuer::Foreign => Leaf {
                ca_pem: self.pki.ca_pem().to_string(),
                ..TestPki::new().leaf_named(name, Role::empty())
            },
        };
        let dir = self.dir.join(format!("join-{name}"));
        let mut newcomer = Member::new(name, dir, &leaf)?;
        let initial = format!("{},{}", self.initial_cluster(), newcomer.cluster_entry());
        newcomer.spawn(&initial, ClusterState::Existing)?;
        let deadline = Instant::now() + within;
        let (exit, joined) = loop {
            if let Some(status) = newcomer.try_wait()? {
                break (Some(status), false);
            }
            if newcomer.healthy(&self.health) {
                break (None, true);
            }
            if Instant::now() >= deadline {
                break (None, false);
            }
            // Polling interval (the deadline above bounds the wait).
            std::thread::sleep(Duration::from_millis(20));
        };
        newcomer.kill()?;
        Ok(JoinAttempt {
            exit,
            joined,
            log: newcomer.log(),
        })
    }

    /// The TLS identity of etcd user `user`: a client certificate with CN `user` from the
    /// cluster's CA, and that CA as the trust root.
    pub fn identity(&self, user: &str) -> TlsIdentity {
        self.pki.leaf_named(user, Role::empty()).identity()
    }

    /// A client certificate with CN `user` from another CA, the cluster's CA as the trust root:
    /// etcd must refuse it.
    pub fn foreign_identity(&self, user: &str) -> TlsIdentity {
        let leaf = TestPki::new().leaf_named(user, Role::empty());
        TlsIdentity::from_pem(
            self.pki.ca_pem().as_bytes(),
            leaf.cert_pem.as_bytes(),
            leaf.key_pem.as_bytes(),
        )
        .expect("a test certificate loads")
    }

    /// The cluster's CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        self.pki.ca_pem()
    }

    /// As [`EtcdCluster::identity`], written as `ca.pem`, `<user>.pem` and `<user>.key` in a
    /// directory of the cluster's (for a daemon's `--etcd-ca`, `--etcd-cert`, `--etcd-key`).
    pub fn client_files(&self, user: &str) -> (PathBuf, PathBuf, PathBuf) {
        self.pki
            .leaf_named(user, Role::empty())
            .write(&self.dir.join("clients"), user)
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // Each member is killed (by its PID) as it is dropped, before its directory goes.
        self.members.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
