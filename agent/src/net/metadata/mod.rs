//! The metadata service at 169.254.169.254, on the compute node, for the instances whose ports
//! are on it: the OpenStack and EC2 trees that cloud-init reads ([`answer`]), for the asking
//! instance only.
//!
//! How a request gets here, per tenant bridge (one per subnet on the node):
//!
//! - a responder: a network namespace of its own (`cumulo-md-<node>-<key>`)
//!   with one end of a veth pair, `md0`, which has the address 169.254.169.254/32, the MAC
//!   [`MAC`], no IPv6, a default route on the link and a permanent neighbour entry for each
//!   port's address; the other end, [`link_name`]`(key)`, is a port of the tenant bridge, where
//!   a static forwarding entry sends [`MAC`] and nothing else floods there;
//! - each port's bridge chain (`filter`, after its anti-spoofing) sets the destination MAC of
//!   its TCP to 169.254.169.254:80 to [`MAC`]: whatever next hop the guest chose (its
//!   gateway, or the address itself when it thinks it on-link), the bridge hands the frame to
//!   the responder;
//! - the bridge table lets frames between the responder and the taps only (not the tunnel: no
//!   request from another node, no answer beyond this one).
//!
//! Which instance asks: the anti-spoofing guarantees that a packet from a tap carries that
//! port's MAC and address, and only taps reach the responder, so the source address of a
//! connection names the port on its bridge. Each answer is for that instance and no other;
//! an address no port has gets a 404.
//!
//! Bounds: [`MAX_CONNECTIONS`] at once per responder (more are closed at once), a request head
//! of at most [`MAX_REQUEST`] bytes, and [`REQUEST_TIME`] for the whole exchange.

mod answer;

pub use answer::{EC2_VERSIONS, Entry, OPENSTACK_VERSIONS, Reply, Request, answer, request_line};

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::names::mac_text;

/// The service's address.
pub const ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// Its port.
pub const PORT: u16 = 80;
/// The responder's MAC, on every bridge (it never leaves the node).
pub const MAC: [u8; 6] = [0x02, 0xa9, 0xfe, 0xa9, 0xfe, 0xfe];
/// The prefix of the responders' bridge ports.
pub const LINK_PREFIX: &str = "cm-";
/// What the responders' namespaces are named after (then the node, then the subnet key).
pub const NETNS_PREFIX: &str = "cumulo-md-";
/// The alias of a responder's bridge port.
pub const LINK_ALIAS: &str = "cumulo/metadata";
/// The responder's end of the veth pair, in its namespace.
const INSIDE: &str = "md0";
/// Connections served at once by one responder.
pub const MAX_CONNECTIONS: usize = 32;
/// The longest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// The time a connection has for its request and answer.
pub const REQUEST_TIME: Duration = Duration::from_secs(5);

/// The responder's bridge port for subnet `key`.
pub fn link_name(key: u32) -> String {
    format!("{LINK_PREFIX}{key:08x}")
}

/// The instances each responder answers for: subnet key → address → entry.
type Entries = Arc<RwLock<HashMap<u32, HashMap<Ipv4Addr, Arc<Entry>>>>>;

/// The node's metadata responders. See the module documentation.
pub struct Metadata {
    netns_prefix: String,
    entries: Entries,
    responders: tokio::sync::Mutex<HashMap<u32, CancellationToken>>,
}

/// Runs `program ARGS`; its stderr as the error.
pub(crate) async fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

async fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args).await
}

impl Metadata {
    /// The responders of node `node`: their namespaces are named `cumulo-md-`, the node's
    /// UUID (32 hex digits: several agents may share a machine in tests), then the subnet key.
    pub fn new(node: Uuid) -> Metadata {
        Metadata {
            netns_prefix: format!("{NETNS_PREFIX}{}-", node.simple()),
            entries: Arc::default(),
            responders: tokio::sync::Mutex::default(),
        }
    }

    /// The namespace of subnet `key`'s responder.
    pub fn netns(&self, key: u32) -> String {
        format!("{}{key:08x}", self.netns_prefix)
    }

    /// At start: removes what an earlier run of this node left (responder namespaces and
    /// bridge ports); the responders are made again as ports are plugged in.
    pub async fn sweep(&self) {
        let listing = tokio::process::Command::new("ip")
            .args(["netns", "list"])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for ns in listing.lines().filter_map(|l| l.split_whitespace().next()) {
            let Some(key) = ns
                .strip_prefix(&self.netns_prefix)
                .and_then(|k| u32::from_str_radix(k, 16).ok())
            else {
                continue;
            };
            let _ = ip(&["link", "del", &link_name(key)]).await;
            if let Err(e) = ip(&["netns", "del", ns]).await {
                tracing::warn!(netns = ns, error = %e, "a metadata namespace is left");
            }
        }
    }

    /// Serves `entry` on subnet `key`'s bridge `bridge`, making the subnet's responder first
    /// if it has none; replaces what the instance's address had.
    pub async fn register(&self, bridge: &str, key: u32, entry: Entry) -> Result<(), String> {
        self.ensure(bridge, key).await?;
        let ns = self.netns(key);
        let (addr, mac) = (entry.ip.to_string(), mac_text(&entry.mac));
        ip(&[
            "-n",
            &ns,
            "neigh",
            "replace",
            &addr,
            "lladdr",
            &mac,
            "dev",
            INSIDE,
            "nud",
            "permanent",
        ])
        .await?;
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let subnet = entries.entry(key).or_default();
        subnet.retain(|_, e| e.instance != entry.instance);
        subnet.insert(entry.ip, Arc::new(entry));
        Ok(())
    }

    /// Stops serving `instance` on subnet `key`; `last`: the subnet's last port on the node
    /// left, and its responder goes.
    pub async fn unregister(&self, key: u32, instance: Uuid, last: bool) {
        let gone: Vec<Ipv4Addr> = {
            let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
            let subnet = entries.entry(key).or_default();
            let gone = subnet
                .iter()
                .filter(|(_, e)| e.instance == instance)
                .map(|(ip, _)| *ip)
                .collect();
            subnet.retain(|_, e| e.instance != instance);
            if last {
                entries.remove(&key);
            }
            gone
        };
        if last {
            self.retire(key).await;
            return;
        }
        let ns = self.netns(key);
        for addr in gone {
            let _ = ip(&["-n", &ns, "neigh", "del", &addr.to_string(), "dev", INSIDE]).await;
        }
    }

    /// Removes subnet `key`'s responder, if it has one.
    async fn retire(&self, key: u32) {
        let Some(stop) = self.responders.lock().await.remove(&key) else {
            return;
        };
        // The listener (and its connections) hold the namespace: closed first.
        stop.cancel();
        let _ = ip(&["link", "del", &link_name(key)]).await;
        let ns = self.netns(key);
        if let Err(e) = ip(&["netns", "del", &ns]).await {
            tracing::warn!(netns = %ns, error = %e, "a metadata namespace is left");
        }
    }

    /// Makes subnet `key`'s responder on `bridge` if it has none.
    async fn ensure(&self, bridge: &str, key: u32) -> Result<(), String> {
        let mut responders = self.responders.lock().await;
        if responders.contains_key(&key) {
            return Ok(());
        }
        let (ns, link) = (self.netns(key), link_name(key));
        // Left by a run that died: made again.
        let _ = ip(&["link", "del", &link]).await;
        let _ = ip(&["netns", "del", &ns]).await;
        match make(&ns, &link, bridge).await {
            Ok(listener) => {
                let stop = CancellationToken::new();
                tokio::spawn(serve(listener, key, self.entries.clone(), stop.clone()));
                responders.insert(key, stop);
                tracing::info!(netns = %ns, bridge, "metadata service on");
                Ok(())
            }
            Err(e) => {
                let _ = ip(&["link", "del", &link]).await;
                let _ = ip(&["netns", "del", &ns]).await;
                Err(format!("the metadata service on {bridge}: {e}"))
            }
        }
    }
}

/// Makes a responder's namespace and link, and its listener.
async fn make(ns: &str, link: &str, bridge: &str) -> Result<std::net::TcpListener, String> {
    let mac = mac_text(&MAC);
    let cidr = format!("{ADDRESS}/32");
    ip(&["netns", "add", ns]).await?;
    ip(&[
        "link", "add", link, "type", "veth", "peer", "name", INSIDE, "netns", ns,
    ])
    .await?;
    ip(&["link", "set", link, "alias", LINK_ALIAS]).await?;
    ip(&["-n", ns, "link", "set", INSIDE, "address", &mac]).await?;
    ip(&["-n", ns, "link", "set", INSIDE, "addrgenmode", "none"]).await?;
    ip(&["-n", ns, "addr", "add", &cidr, "dev", INSIDE]).await?;
    ip(&["-n", ns, "link", "set", "lo", "up"]).await?;
    ip(&["-n", ns, "link", "set", INSIDE, "up"]).await?;
    ip(&["-n", ns, "route", "add", "default", "dev", INSIDE]).await?;
    ip(&["link", "set", link, "addrgenmode", "none"]).await?;
    ip(&["link", "set", link, "master", bridge]).await?;
    ip(&["link", "set", link, "up"]).await?;
    run(
        "bridge",
        &["fdb", "replace", &mac, "dev", link, "master", "static"],
    )
    .await?;
    crate::netns::listen_in(ns, (ADDRESS, PORT)).map_err(|e| format!("listening: {e}"))
}

fn lookup(entries: &Entries, key: u32, ip: Ipv4Addr) -> Option<Arc<Entry>> {
    let entries = entries.read().unwrap_or_else(|p| p.into_inner());
    entries.get(&key)?.get(&ip).cloned()
}

/// Answers every connection to `listener` for the instances of subnet `key`, until `stop`.
async fn serve(
    listener: std::net::TcpListener,
    key: u32,
    entries: Entries,
    stop: CancellationToken,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        let Ok((stream, peer)) = accepted else {
            continue;
        };
        // Closed with a reset, never left lingering: the namespace goes with the last socket.
        let _ = stream.set_zero_linger();
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let entry = match peer.ip() {
            IpAddr::V4(v4) => lookup(&entries, key, v4),
            IpAddr::V6(_) => None,
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::timeout(REQUEST_TIME, respond(stream, entry)) => {}
            }
        });
    }
}

/// Reads one request head (at most [`MAX_REQUEST`] bytes) and writes its answer.
async fn respond(
    mut stream: tokio::net::TcpStream,
    entry: Option<Arc<Entry>>,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let complete = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break false;
        }
        head.extend_from_slice(&chunk[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() > MAX_REQUEST {
            break false;
        }
    };
    let (reply, bare) = match request_line(&head).filter(|_| complete) {
        Some(request) => (answer(entry.as_deref(), &request), request.method == "HEAD"),
        None => (Reply::bad_request(), false),
    };
    stream.write_all(&reply.to_bytes(bare)).await?;
    stream.shutdown().await
}
